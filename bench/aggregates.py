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

Then an aggregate in a window of its own (the records' window stays the profile's hour), count
and mean, two windows: the Chicago local day (a calendar window) and a sliding 6-hour window by
the hour:
  (o) the rule: assign_windows adding the aggregate's own window end, then as (s);
  (q) the baseline: pandas, the local day by tz_convert + floor, or the record repeated into its
      six windows, then groupby([group, window end]).transform(fn).
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
  main_own(table, step, table.to_pandas())


OWN = {"local day": {"type": "fixed", "size_seconds": 86400, "period_seconds": 86400,
                     "offset_seconds": 0, "zone": "America/Chicago"},
       "sliding 6h/1h": {"type": "sliding", "size_seconds": 6 * 3600, "period_seconds": 3600,
                         "offset_seconds": 0, "zone": None}}


def by_rule_own(table, step, agg):
  kept, _ = window.assign_windows(table.to_batches()[0], "t", PROFILE, None, aggregates=[agg])
  return by_rule([kept.slice(i, step) for i in range(0, kept.num_rows, step)], agg)


def by_pandas_own(df, fn, w):
  period, copies = w["period_seconds"], w["size_seconds"] // w["period_seconds"]
  t = df["t"].to_numpy()
  if w["zone"]:
    local = pd.to_datetime(df["t"], unit="s", utc=True).dt.tz_convert(w["zone"]) \
        .dt.tz_localize(None)
    t = (local - pd.Timestamp(0)).dt.total_seconds().astype(np.int64).to_numpy()
  end = (t // period + 1) * period
  if copies == 1:
    return by_pandas(df.assign(end=end), fn)
  rows = df.loc[df.index.repeat(copies), [GROUP, VALUE, "t"]]
  rows["end"] = (end[:, None] + np.arange(copies)[None, :] * period).ravel()
  groups = rows.groupby([GROUP, "end"], dropna=False)
  column = groups["t"] if fn == "count" else groups[VALUE]
  out = column.agg({"count": "size", "count_distinct": "nunique"}.get(fn, fn)).rename("out")
  own = df[[GROUP]].assign(end=end)
  return own.merge(out.reset_index(), on=[GROUP, "end"], how="left")["out"]


def main_own(table, step, df):
  print("an aggregate in a window of its own (records in the profile's hour)")
  for label, w in OWN.items():
    for fn in ("count", "mean"):
      agg = {"name": fn, "group_by": [GROUP], "fn": fn,
             "column": None if fn == "count" else VALUE, "window": w}
      o, ours = best(lambda: by_rule_own(table, step, agg))
      q, theirs = best(lambda: by_pandas_own(df, fn, w))
      close = np.allclose(pa.chunked_array(ours).to_numpy(), theirs.to_numpy(np.float64),
                          rtol=1e-12, equal_nan=True)
      print(f"  {label:13s} {fn:6s} (o) {o:6.3f} s   (q) {q:6.3f} s   (o)/(q) {o / q:5.2f}   "
            f"values {'equal' if close else 'DIFFER'}")


if __name__ == "__main__":
  main()
