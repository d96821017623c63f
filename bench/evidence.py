"""Benchmark: the diff's input evidence (replay/diff/evidence.py) against a bare read of the dataset.

  python bench/evidence.py [--rows 1000000] [--shards 8]

Builds the bench/ingest.py dataset (taxi sample repeated, unique trip_id key, --shards shards).
When records part at raw or parse, the diff reads each side's dataset once for the differing
log buckets: the per-column counts need every record of those buckets, which lie in every
ingest shard. Timed in this process, best of 3, after one warm-up read:
  (e16) the evidence read with all 16 log buckets differing (the worst case);
  (e1)  the same with 1 bucket differing;
  (r)   a bare pyarrow read of the key and record columns of every shard (the baseline);
  (k)   what samples alone would need: one shard read and filtered to 10 keys (the key's shard).
Ratios (e16)/(r) and (e1)/(r) say what the evidence adds to reading the data at all; (k)/(r) is
the most reading only the samples' shards could save.
"""
import argparse
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import ingest as ingest_bench  # noqa: E402
from ingest import best  # noqa: E402
sys.path.insert(0, ROOT)

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from pipelines import dataset  # noqa: E402
from replay.diff import evidence  # noqa: E402
from transforms.spec import dataset as dataset_spec  # noqa: E402
from transforms.spec.stages import KEY  # noqa: E402

BUCKETS = 16


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--rows", type=int, default=1_000_000)
  ap.add_argument("--shards", type=int, default=8)
  args = ap.parse_args()
  with tempfile.TemporaryDirectory() as d:
    data = ingest_bench.prepared_dataset(d, args.rows, "--key_columns", "trip_id",
                                         "--num_shards", str(args.shards))
    manifest = dataset.load_manifest(data)
    columns = [KEY] + [n for n, _ in dataset_spec.record_columns(manifest)]
    paths = [os.path.join(data, s["path"]) for s in manifest["shards"]
             if s["format"] == "parquet"]
    bare = lambda: pa.concat_tables([pq.read_table(p, columns=columns) for p in paths])
    rows = bare().num_rows  # warm-up: the files in the page cache for every contender
    source = (data, ())
    t16, (table16, _, problem) = best(lambda: evidence._dataset(source, range(BUCKETS), BUCKETS))
    t1, (table1, _, _) = best(lambda: evidence._dataset(source, [0], BUCKETS))
    tr, _ = best(bare)
    keys = pa.array([str(i) for i in range(0, 10 * 997, 997)], pa.large_string())

    def one_shard():
      t = pq.read_table(paths[0], columns=columns)
      return t.filter(pc.is_in(t.column(KEY).cast(pa.large_string()), value_set=keys))
    tk, _ = best(one_shard)
    assert problem is None and table16.num_rows == rows, (problem, table16.num_rows, rows)
    print(f"rows: {rows}, shards: {len(paths)}, record columns: {len(columns) - 1}")
    print(f"(e16) evidence read, 16 of 16 buckets differ: {t16:6.2f} s ({table16.num_rows} rows)")
    print(f"(e1)  evidence read, 1 of 16 buckets differs: {t1:6.2f} s ({table1.num_rows} rows)")
    print(f"(r)   bare pyarrow read of every shard:       {tr:6.2f} s")
    print(f"(k)   one shard, filtered to 10 keys:         {tk:6.2f} s")
    print(f"(e16)/(r) = {t16 / tr:5.2f}   (e1)/(r) = {t1 / tr:5.2f}   (k)/(r) = {tk / tr:5.2f}")


if __name__ == "__main__":
  main()
