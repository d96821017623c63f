"""Benchmark: windowed aggregates by the window stage's rule (transforms/spec/window.py) against
pandas computing the same values.

  python bench/aggregates.py [--rows 1000000] [--batches 8]

Records: the taxi sample repeated to --rows, event times spread over 30 days, in --batches
batches (the pipeline's partial states). Per fn, over pickup_community_area and fixed 1-hour
windows, timed in this process, best of 3:
  (s) the rule as the pipeline runs it: partial_state per batch, merge_states of them all,
      result, then join_aggregate per batch;
  (p) the baseline: pandas, groupby([group, window end]) then transform(fn) over the whole
      table (what a user would write; one process, one pass, no partitioning).
Ratio (s)/(p) per fn. For sum and mean the rule sums exactly (integer significand sums per
binary exponent, correctly rounded at the end), so the sum is the same bytes under any
partitioning; pandas adds in arrival order.
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from ingest import best  # noqa: E402
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.csv as pacsv  # noqa: E402

from transforms.spec import profile as profiles  # noqa: E402
from transforms.spec import window  # noqa: E402
from transforms.spec.stages import WINDOW_END  # noqa: E402

TAXI = os.path.join(ROOT, "data", "chicago_taxi", "data.csv")
PROFILE = profiles.parse_profile({
    "windowing": {"type": "fixed", "size_seconds": 3600, "period_seconds": 3600,
                  "offset_seconds": 0, "allowed_lateness_seconds": None},
    "sharding": {"num_shards": 4, "hash_seed": 0},
    "serialization": {"format": "parquet", "float_dtype": "float64"},
    "sampling": {"seed": 0, "fraction": 1.0}})
GROUP, VALUE = "pickup_community_area", "fare"


def records(rows):
  table = pacsv.read_csv(TAXI).select([GROUP, VALUE])
  reps = -(-rows // table.num_rows)
  table = pa.concat_tables([table] * reps).slice(0, rows).combine_chunks()
  t = np.random.default_rng(0).integers(1_700_000_000, 1_700_000_000 + 30 * 86400, rows)
  return table.append_column("t", pa.array(t))


def by_rule(batches, agg):
  states = [window.partial_state(b, agg, PROFILE, ordered=False) for b in batches]
  values = window.result(window.merge_states(states, agg), agg)
  return [window.join_aggregate(b, agg, values).column(agg["name"]) for b in batches]


def by_pandas(df, fn):
  groups = df.groupby([GROUP, "end"], dropna=False)
  column = groups["t"] if fn == "count" else groups[VALUE]
  return column.transform({"count": "size", "count_distinct": "nunique"}.get(fn, fn))


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--rows", type=int, default=1_000_000)
  ap.add_argument("--batches", type=int, default=8)
  args = ap.parse_args()
  table = records(args.rows)
  kept, _ = window.assign_windows(table.to_batches()[0], "t", PROFILE, None)
  step = -(-args.rows // args.batches)
  batches = [kept.slice(i, step) for i in range(0, args.rows, step)]
  df = kept.to_pandas().rename(columns={WINDOW_END: "end"})
  print(f"{args.rows} records, {args.batches} batches, {GROUP} x 1-hour windows")
  for fn in window.AGGREGATE_FNS:
    agg = {"name": fn, "group_by": GROUP, "fn": fn, "column": None if fn == "count" else VALUE}
    s, ours = best(lambda: by_rule(batches, agg))
    p, theirs = best(lambda: by_pandas(df, fn))
    got = pa.chunked_array(ours).to_numpy()
    want = theirs.to_numpy(dtype=np.float64 if fn in ("sum", "mean") else None)
    close = np.allclose(got, want, rtol=1e-12, equal_nan=True)
    print(f"  {fn:15s} (s) {s:6.3f} s   (p) {p:6.3f} s   (s)/(p) {s / p:5.2f}   "
          f"values {'equal' if close else 'DIFFER'}")


if __name__ == "__main__":
  main()
