"""Benchmark: pipelines.features vs bare TF Transform on the same data and preprocessing_fn.

  python bench/features.py [--rows 1000000] [--repeat N]

Builds the bench/ingest.py input (taxi sample repeated, shifted timestamps, unique trip_id),
ingests it once (not timed), then times in separate processes, one after the other:
  (1) bare TFT, its output discarded: Parquet shards -> RecordBatches -> AnalyzeAndTransformDataset
      (transforms.taxi, the windowed-aggregate input filled with 0) -> WriteTransformFn; the
      transformed RecordBatches are counted, not written; DirectRunner; its RecordBatch
      PCollections untyped, as a plain pipeline writes them;
  (1s) the same with the RecordBatch input typed, so Beam uses transforms/beam/arrow_coder.py's coder
      as the features job does;
  (1w) bare TFT keeping its output -- the target's baseline: (1s) writing its transformed records
      as TF Transform documents it (tft_beam.EncodeTransformedDataset -> beam.io.WriteToTFRecord,
      the example in EncodeTransformedDataset's docstring; TFX's Transform component writes its
      transformed examples the same way, gzipped). Its outputs are the job's bar the feature log:
      transform_fn/ and the transformed tf.Examples;
  (2) pipelines.features with profiles/offline.yaml, DirectRunner;
  (2n) the same job with its feature-log branch replaced by a row count, as (1)/(1s) count their
      output (an ablation run by this script, not a mode of the job): (2n) - (1s) is what the
      stages before TFT, the passthrough columns, the counts pass and the job's set-up cost,
      (2) - (2n) what the feature log and transformed/ cost.
Prints wall times (and the CPU time and the 1-minute load average before each run: the machine is
shared, so a loaded run shows it), the overhead of (2) over (1w) against the target, and, for
what the stages and the log cost in absolute terms, over (1) and (1s), TFT alone. With --repeat N
the five run N times, alternating, and the three overall overheads are also printed as medians.

  python bench/features.py --memory 1000000,8000000

Memory: for each row count, (1w) bare TFT writing its output -- the baseline -- (2)
pipelines.features (the default local runner, DirectRunner in memory) and (2b) the same with
--bounded_memory --log_buckets 128 (the shards read again for the transform; buckets small at
every count), each in its own process; prints each one's peak RSS (its process and children,
ru_maxrss) and, per contender, the peak at the largest count over the peak at the smallest
(target: (2b) <= 1.2x, issue 35).
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import ingest as ingest_bench  # noqa: E402

BARE = r'''
import sys, tempfile, numpy as np, pyarrow as pa, apache_beam as beam, tensorflow_transform.beam as tft_beam
from apache_beam.io.filesystems import FileSystems
from transforms import taxi
from transforms.spec import schema
from transforms.graph.feed import to_tft_batch
from tfx_bsl.public import tfxio
from tensorflow_metadata.proto.v0 import schema_pb2
import json
src, out, mode = sys.argv[1], sys.argv[2], sys.argv[3]  # untyped, typed or write (typed)
typed = mode != "untyped"
import os; os.makedirs(out, exist_ok=True)
manifest = json.load(open(src + "/manifest.json"))
cols = [c["name"] for c in manifest["schema"]["columns"]] + ["area_trips_in_window"]
types = {c["name"]: schema.ARROW_TYPES[c["type"]] for c in manifest["schema"]["columns"]}
def prep(table):
  for b in table.to_batches():
    b = b.append_column("area_trips_in_window", pa.array(np.zeros(b.num_rows, np.int64)))
    yield to_tft_batch(b, cols)  # bare TFT: no passthrough
empty = pa.record_batch([pa.array([], types.get(n, pa.int64())) for n in cols], names=cols)
adapter = tfxio.TensorAdapterConfig(to_tft_batch(empty, cols).schema, {n: schema_pb2.TensorRepresentation(
    varlen_sparse_tensor=schema_pb2.TensorRepresentation.VarLenSparseTensor(column_name=n)) for n in cols})
with beam.Pipeline() as p:
  with tft_beam.Context(temp_dir=tempfile.mkdtemp()):
    to_tft = beam.FlatMap(prep)
    if typed:  # RecordBatch PCollections get transforms.beam.arrow_coder's coder, as in the job
      to_tft = to_tft.with_output_types(pa.RecordBatch)
    batches = p | beam.io.ReadFromParquetBatched(src + "/parquet/*.parquet") | to_tft
    (data, meta), fn = (batches, adapter) | tft_beam.AnalyzeAndTransformDataset(
        taxi.preprocessing_fn, output_record_batches=True)
    _ = fn | tft_beam.WriteTransformFn(out + "/transform_fn")
    if mode == "write":  # the transformed records as tf.Examples, TFT's documented way
      _ = ((data, meta) | tft_beam.EncodeTransformedDataset()
           | beam.io.WriteToTFRecord(out + "/transformed/part"))
    else:
      _ = (data | beam.Map(lambda e: e[0].num_rows) | beam.CombineGlobally(sum)
           | beam.Map(lambda n: open(out + "/rows.txt", "w").write(str(n))))
'''


NO_LOG = r'''
import sys, apache_beam as beam
from pipelines import features, features_job

class CountOnly(beam.PTransform):
  """(staged, transformed, dropped batches) -> nothing: their rows counted, no log written."""
  def __init__(self, *unused, **unused_options):
    super().__init__()
  def expand(self, pcolls):  # counted where produced: only the counts are flattened
    counts = [p | f"Rows{i}" >> beam.Map(lambda b: b.num_rows) for i, p in enumerate(pcolls)]
    return counts | beam.Flatten() | beam.CombineGlobally(sum) | beam.FlatMap(lambda n: [])

features_job.WriteFeatureLog = CountOnly  # the job's name for the log writer
sys.exit(features.run(sys.argv[1:]))
'''


def timed(cmd):
  """(wall seconds, CPU seconds of the child, load average before) of one process."""
  load = os.getloadavg()[0]
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  start = time.monotonic()
  subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                 env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2"))
  wall = time.monotonic() - start
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
  return wall, cpu, load


# Runs argv[1:] and prints the peak RSS in KiB of it and its children (Linux ru_maxrss).
_PEAK = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
         "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def peak_rss(cmd):
  """(peak RSS in bytes, wall seconds) of one process and its children."""
  start = time.monotonic()
  out = subprocess.run([sys.executable, "-c", _PEAK] + cmd, cwd=ROOT, check=True,
                       capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2"))
  return int(out.stdout.strip().splitlines()[-1]) * 1024, time.monotonic() - start


def memory(counts):
  py, peaks = sys.executable, {}
  for rows in counts:
    with tempfile.TemporaryDirectory() as d:
      data = ingest_bench.prepared_dataset(d, rows)
      job = ["--input_dir", data, "--profile", os.path.join(ROOT, "profiles", "offline.yaml"),
             "--transform_module", "transforms.taxi"]
      peaks[rows] = {
          "(1w) bare TFT writing its output": peak_rss([py, "-c", BARE, data,
                                                       os.path.join(d, "written"), "write"]),
          "(2) pipelines.features": peak_rss([py, "-m", "pipelines.features", "--output_dir",
                                              os.path.join(d, "features")] + job),
          "(2b) features --bounded_memory": peak_rss(
              [py, "-m", "pipelines.features", "--output_dir", os.path.join(d, "bounded"),
               "--bounded_memory", "--log_buckets", "128"] + job)}
    for label, (peak, wall) in peaks[rows].items():
      print(f"rows {rows:>10,}  {label + ':':36s} peak RSS {peak / 2**30:6.2f} GiB  "
            f"({wall:.0f} s, load {os.getloadavg()[0]:.2f})", flush=True)
  lo, hi = min(counts), max(counts)
  for label in peaks[lo]:
    ratio = peaks[hi][label][0] / peaks[lo][label][0]
    print(f"{label}: peak at {hi:,} / peak at {lo:,} rows = {ratio:.2f}" +
          (f"  (target <= 1.2: {'met' if ratio <= 1.2 else 'not met'})" if "(2b)" in label
           else ""))


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--rows", type=int, default=1_000_000)
  ap.add_argument("--repeat", type=int, default=1)
  ap.add_argument("--memory", default="", help="row counts, e.g. 1000000,8000000: peak RSS "
                  "of (1w), (2) and (2b) at each")
  args = ap.parse_args()
  if args.memory:
    return memory(sorted(int(n) for n in args.memory.split(",")))
  py = sys.executable
  with tempfile.TemporaryDirectory() as d:
    data = ingest_bench.prepared_dataset(d, args.rows)
    print(f"rows: {args.rows}")
    ratios, strict_ratios, written_ratios = [], [], []
    for i in range(args.repeat):
      bare = timed([py, "-c", BARE, data, os.path.join(d, f"bare{i}"), "untyped"])
      strict = timed([py, "-c", BARE, data, os.path.join(d, f"strict{i}"), "typed"])
      written = timed([py, "-c", BARE, data, os.path.join(d, f"written{i}"), "write"])
      job = ["--input_dir", data, "--profile", os.path.join(ROOT, "profiles", "offline.yaml"),
             "--transform_module", "transforms.taxi"]
      feats = timed([py, "-m", "pipelines.features", "--output_dir",
                     os.path.join(d, f"features{i}")] + job)
      no_log = timed([py, "-c", NO_LOG, "--output_dir", os.path.join(d, f"nolog{i}")] + job)
      ratios.append(feats[0] / bare[0] - 1)
      strict_ratios.append(feats[0] / strict[0] - 1)
      written_ratios.append(feats[0] / written[0] - 1)
      print(f"run {i + 1}:")
      for label, (wall, cpu, load) in [("(1) bare TFT, output discarded, untyped", bare),
                                       ("(1s) bare TFT, output discarded, typed", strict),
                                       ("(1w) bare TFT keeping its output (baseline)", written),
                                       ("(2) pipelines.features (all stages, log)", feats),
                                       ("(2n) the same without the feature log", no_log)]:
        print(f"  {label + ':':45s} {wall:6.1f} s  (CPU {cpu:.1f} s, load {load:.2f})")
      print(f"  overhead (2)/(1w) - 1 = {written_ratios[-1]:+.1%}   (target <= +15%; both write "
            "transform_fn/ and the transformed tf.Examples)")
      print(f"  over TFT alone: (2)/(1) - 1 = {ratios[-1]:+.1%}, (2)/(1s) - 1 = "
            f"{strict_ratios[-1]:+.1%}; of which (2n)/(1s) - 1 = "
            f"{no_log[0] / strict[0] - 1:+.1%} before the log, (2)/(2n) - 1 = "
            f"{feats[0] / no_log[0] - 1:+.1%} the log and transformed/")
    if args.repeat > 1:
      print(f"median overhead: vs (1w) {statistics.median(written_ratios):+.1%} (target <= +15%); "
            f"over TFT alone: vs (1) {statistics.median(ratios):+.1%}, vs (1s) "
            f"{statistics.median(strict_ratios):+.1%}")


if __name__ == "__main__":
  main()
