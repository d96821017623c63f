"""Benchmark: vectorised record fingerprints vs a naive per-row json.dumps + hash.

  python bench/fingerprint.py [--copies 67]

Input: data/chicago_taxi/data.csv (the bundled sample) read by pyarrow (18 columns, many nulls) and
repeated --copies times (67 copies = 1,005,134 rows). One process, one core (numba kernels run
single-threaded). Prints rows/s for each coding and the ratio; the vectorised coding is timed
after one warm-up call (numba loads its compiled kernels from the cache on first use).
"""
import argparse
import hashlib
import json
import os
import sys
import time

import pyarrow as pa
import pyarrow.csv as pacsv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from transforms.spec import fingerprint  # noqa: E402

TAXI = os.path.join(ROOT, "data", "chicago_taxi", "data.csv")


def naive(rows):
  return [hashlib.blake2b(json.dumps(r, sort_keys=True).encode(), digest_size=8).digest()
          for r in rows]


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--copies", type=int, default=67)
  ap.add_argument("--naive_rows", type=int, default=200_000)
  args = ap.parse_args()
  base = pacsv.read_csv(TAXI)
  table = pa.concat_tables([base] * args.copies).combine_chunks()
  fingerprint.fingerprint_batch(table.slice(0, 100))
  best = float("inf")
  for _ in range(3):
    start = time.perf_counter()
    fingerprint.fingerprint_batch(table)
    best = min(best, time.perf_counter() - start)
  vec_rate = table.num_rows / best
  rows = table.slice(0, args.naive_rows).to_pylist()
  start = time.perf_counter()
  naive(rows)
  naive_rate = len(rows) / (time.perf_counter() - start)
  print(f"rows: {table.num_rows} x {table.num_columns} columns")
  print(f"vectorised fingerprint_batch: {vec_rate / 1e6:6.2f} M rows/s (best of 3)")
  print(f"naive json.dumps+blake2b:     {naive_rate / 1e6:6.2f} M rows/s "
        f"({args.naive_rows} rows, to_pylist excluded)")
  print(f"ratio: {vec_rate / naive_rate:.1f}x   (target: >= 2 M rows/s)")


if __name__ == "__main__":
  main()
