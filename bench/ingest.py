"""Benchmark: pipelines.ingest vs a direct pyarrow/tfx_bsl script vs a naive Beam pipeline.

  python bench/ingest.py [--rows 1000000] [--also_rows 5000000] [--naive_rows 100000]

The input is data/chicago_taxi/data.csv (the bundled sample) repeated: copy k shifts trip_start_timestamp
by k weeks and adds a unique `trip_id` column (k * 15002 + row). Each contender runs in its own
process (wall time and peak RSS of that process); ratios are printed against the direct script.
The naive pipeline runs on --rows rows unless --naive_rows says otherwise (then scaled).
"""
import argparse
import csv
import io
import os
import subprocess
import sys
import tempfile
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAXI = os.path.join(ROOT, "data", "chicago_taxi", "data.csv")
SCHEMA = os.path.join(ROOT, "data", "chicago_taxi", "schema.pbtxt")
WEEK = 7 * 24 * 3600

DIRECT = r'''
import sys, pyarrow as pa, pyarrow.csv as pacsv, pyarrow.parquet as pq
from tfx_bsl.coders import example_coder
src, out = sys.argv[1], sys.argv[2]
reader = pacsv.open_csv(src, read_options=pacsv.ReadOptions(block_size=8 << 20))
enc = example_coder.RecordBatchToExamplesEncoder()
pw = None
import tensorflow as tf  # noqa: the TFRecord writer
with tf.io.TFRecordWriter(out + ".tfrecord") as w:
  for batch in reader:
    if pw is None:
      pw = pq.ParquetWriter(out + ".parquet", batch.schema, compression="snappy")
    pw.write_batch(batch)
    cols = []
    for c in batch.columns:
      if pa.types.is_floating(c.type): c = c.cast(pa.float32())
      if pa.types.is_string(c.type): c = c.cast(pa.binary())
      cols.append(pa.ListArray.from_arrays(pa.array(range(len(c) + 1), pa.int32()), c,
                                           mask=c.is_null()))
    for ex in enc.encode(pa.RecordBatch.from_arrays(cols, names=batch.schema.names)):
      w.write(ex)
pw.close()
'''

NAIVE = r'''
import csv, sys, apache_beam as beam
import tensorflow as tf
src, out = sys.argv[1], sys.argv[2]
with open(src) as f: header = next(csv.reader(f))
def to_example(line):
  row = next(csv.reader([line]))
  ex = tf.train.Example()
  for k, v in zip(header, row):
    if v == "": continue
    try: ex.features.feature[k].int64_list.value.append(int(v))
    except ValueError:
      try: ex.features.feature[k].float_list.value.append(float(v))
      except ValueError: ex.features.feature[k].bytes_list.value.append(v.encode())
  return ex.SerializeToString()
with beam.Pipeline() as p:
  (p | beam.io.ReadFromText(src, skip_header_lines=1) | beam.Map(to_example)
     | beam.io.WriteToTFRecord(out))
'''


def make_input(path, rows):
  with open(TAXI, newline="") as f:
    reader = csv.reader(f)
    header = next(reader)
    base = list(reader)
  ts = header.index("trip_start_timestamp")
  with open(path, "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["trip_id"] + header)
    n, k = 0, 0
    while n < rows:
      for i, row in enumerate(base):
        if n >= rows:
          break
        row = list(row)
        row[ts] = str(int(row[ts]) + k * WEEK)
        w.writerow([str(k * len(base) + i)] + row)
        n += 1
      k += 1


def prepared_dataset(folder, rows, *flags):
  """The benchmark input of `rows` rows ingested (Parquet shards) into folder/ingest, untimed;
  `flags` go to pipelines.ingest (e.g. --key_columns trip_id)."""
  csv_path, data = os.path.join(folder, "big.csv"), os.path.join(folder, "ingest")
  make_input(csv_path, rows)
  measure([sys.executable, "-m", "pipelines.ingest", "--input", csv_path, "--output_dir", data,
           "--schema", SCHEMA, "--formats", "parquet", *flags])
  return data


def best(fn, n=3):
  """(the least wall seconds of n calls of fn in this process, its last result): the
  in-process counterpart of measure()."""
  times = []
  for _ in range(n):
    t = time.perf_counter()
    out = fn()
    times.append(time.perf_counter() - t)
  return min(times), out


def measure(cmd, ok=(0,)):
  """(wall seconds, peak RSS MiB of the process tree) of a command; an exit code outside `ok`
  fails the benchmark."""
  start = time.monotonic()
  proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  peak = 0
  ps = psutil.Process(proc.pid)
  while proc.poll() is None:
    try:
      rss = ps.memory_info().rss + sum(c.memory_info().rss for c in ps.children(recursive=True))
      peak = max(peak, rss)
    except psutil.Error:
      pass
    time.sleep(0.05)
  wall = time.monotonic() - start
  if proc.returncode not in ok:
    raise RuntimeError(f"{cmd} failed: {proc.stderr.read().decode()[-2000:]}")
  return wall, peak / 2**20


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--rows", type=int, default=1_000_000)
  ap.add_argument("--also_rows", type=int, default=5_000_000)
  ap.add_argument("--naive_rows", type=int, default=0,
                  help="rows for the naive pipeline; 0 = --rows (scaling a smaller run also "
                  "scales its ~10 s start-up and overstates it)")
  ap.add_argument("--num_shards", type=int, default=0)
  args = ap.parse_args()
  py = sys.executable
  with tempfile.TemporaryDirectory() as d:
    big = os.path.join(d, "big.csv")
    make_input(big, args.rows)
    ingest = [py, "-m", "pipelines.ingest", "--input", big, "--schema", SCHEMA,
              "--num_shards", str(args.num_shards), "--overwrite"]
    # trip_id is not in the TFMD schema: it is typed BYTES, as it is for no schema at all.
    t_ingest, m_ingest = measure(ingest + ["--output_dir", os.path.join(d, "ingest")])
    t_direct, m_direct = measure([py, "-c", DIRECT, big, os.path.join(d, "direct")])
    args.naive_rows = args.naive_rows or args.rows
    small = os.path.join(d, "small.csv")
    make_input(small, args.naive_rows)
    t_naive_small, m_naive = measure([py, "-c", NAIVE, small, os.path.join(d, "naive")])
    t_naive = t_naive_small * args.rows / args.naive_rows
    print(f"rows: {args.rows}")
    print(f"(1) pipelines.ingest DirectRunner, tfrecord+parquet: {t_ingest:7.1f} s  "
          f"peak RSS {m_ingest:6.0f} MiB")
    print(f"(2) direct pyarrow + tfx_bsl + TFRecordWriter:        {t_direct:7.1f} s  "
          f"peak RSS {m_direct:6.0f} MiB")
    print(f"(3) naive Beam (ReadFromText, csv, tf.Example):       {t_naive:7.1f} s  "
          f"(measured {t_naive_small:.1f} s on {args.naive_rows} rows, scaled)")
    print(f"ratio (1)/(2) = {t_ingest / t_direct:.2f}   (target <= 2.0)")
    print(f"ratio (3)/(1) = {t_naive / t_ingest:.1f}   (target >= 10)")
    if args.also_rows:
      big5 = os.path.join(d, "big5.csv")
      os.remove(small)
      make_input(big5, args.also_rows)
      t5, m5 = measure(ingest[:4] + [big5] + ingest[5:] +
                       ["--output_dir", os.path.join(d, "ingest5")])
      print(f"(1) on {args.also_rows} rows: {t5:.1f} s, peak RSS {m5:.0f} MiB; "
            f"RSS ratio {m5 / m_ingest:.2f} vs {args.rows} rows (target <= 1.20)")


if __name__ == "__main__":
  main()
