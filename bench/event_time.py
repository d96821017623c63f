"""Benchmark: ingest's --event_time column (spec/event_time.source_instants) against typing the
same column without the flag (spec/values.canonical_text + spec/schema.type_column).

  python bench/event_time.py [--rows 1000000]

One column of --rows event times (Unix seconds spread over six years, seeded), in two forms a
serving log writes: epoch milliseconds as CSV text, and ISO-8601 text with a zone. Best of 3 in
one process:
  (e) source_instants: the canonical event time, the exact instant's text for the raw
      fingerprint, the rows that are no instant;
  (t) the baseline: the column's canonical text and its typing as ingest types it without the
      flag (INT for the count, BYTES for the text).
Prints (e)/(t) per form.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

from transforms.spec import event_time, schema, values  # noqa: E402


def best(fn, repeat=3):
  times = []
  for _ in range(repeat):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return min(times)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--rows", type=int, default=1_000_000)
  args = ap.parse_args()
  seconds = np.random.default_rng(0).integers(1_300_000_000, 1_500_000_000, args.rows)
  forms = {
      "epoch ms, CSV text": (pa.array((seconds * 1000).astype(str)).cast(pa.binary()), "ms",
                             schema.INT),
      "ISO-8601 with a zone": (pc.strftime(pa.array(seconds).cast(pa.timestamp("s", tz="UTC")),
                                           format="%Y-%m-%dT%H:%M:%SZ"), "iso8601",
                               schema.BYTES)}
  print(f"{args.rows} event times")
  for label, (column, form, typ) in forms.items():
    got, _, bad = event_time.source_instants(column, form)
    assert not bad.any() and (got == seconds).all()
    e = best(lambda: event_time.source_instants(column, form))
    t = best(lambda: schema.type_column(column, typ, values.canonical_text(column)))
    print(f"  {label:22s} (e) {e:6.3f} s   (t) {t:6.3f} s   (e)/(t) {e / t:5.2f}")


if __name__ == "__main__":
  main()
