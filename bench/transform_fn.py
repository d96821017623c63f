"""Benchmark: pipelines.features --transform_fn_dir vs bare tft_beam.TransformDataset, the same
transform_fn over the same RecordBatches.

  python bench/transform_fn.py [--rows 1000000] [--repeat N]

Builds bench/features.py's input (bench/ingest.py: the taxi sample repeated, shifted
timestamps, unique trip_id), ingests it and runs pipelines.features over it once (not timed)
for a transform_fn, then times in separate processes, one after the other:
  (1) bare TFT, transform only: Parquet shards -> RecordBatches (the windowed-aggregate input
      filled with 0, typed as the job types them) -> tft_beam.TransformDataset with that
      transform_fn (tft_beam.ReadTransformFn); the transformed RecordBatches are counted, not
      written; DirectRunner;
  (1w) the same keeping its output, as TF Transform documents it: EncodeTransformedDataset ->
      beam.io.WriteToTFRecord (bench/features.py's (1w), without the analysis);
  (2) pipelines.features --transform_fn_dir with profiles/offline.yaml, DirectRunner: every
      stage, the feature log and transformed/, no analysis.
Prints wall times (with CPU time and the load average before each run) and the ratios (2)/(1)
and (2)/(1w), against the target <= 1.15; with --repeat N, their medians too.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import features as features_bench  # noqa: E402
import ingest as ingest_bench  # noqa: E402

TARGET = 1.15

TRANSFORM_ONLY = r'''
import json, os, sys, tempfile, numpy as np, pyarrow as pa, apache_beam as beam
import tensorflow_transform.beam as tft_beam
from tensorflow_transform.beam.tft_beam_io import beam_metadata_io
from transforms.spec import schema
from transforms.graph.feed import to_tft_batch
from tfx_bsl.public import tfxio
from tensorflow_metadata.proto.v0 import schema_pb2
src, fn_dir, out, mode = sys.argv[1:5]  # mode: count or write
os.makedirs(out, exist_ok=True)
manifest = json.load(open(src + "/manifest.json"))
cols = [c["name"] for c in manifest["schema"]["columns"]] + ["area_trips_in_window"]
types = {c["name"]: schema.ARROW_TYPES[c["type"]] for c in manifest["schema"]["columns"]}
def prep(table):
  for b in table.to_batches():
    b = b.append_column("area_trips_in_window", pa.array(np.zeros(b.num_rows, np.int64)))
    yield to_tft_batch(b, cols)
empty = pa.record_batch([pa.array([], types.get(n, pa.int64())) for n in cols], names=cols)
adapter = tfxio.TensorAdapterConfig(to_tft_batch(empty, cols).schema, {n: schema_pb2.TensorRepresentation(
    varlen_sparse_tensor=schema_pb2.TensorRepresentation.VarLenSparseTensor(column_name=n)) for n in cols})
with beam.Pipeline() as p:
  with tft_beam.Context(temp_dir=tempfile.mkdtemp()):
    batches = (p | beam.io.ReadFromParquetBatched(src + "/parquet/*.parquet")
               | beam.FlatMap(prep).with_output_types(pa.RecordBatch))
    fn = p | tft_beam.ReadTransformFn(fn_dir)
    data, meta = ((batches, adapter), fn) | tft_beam.TransformDataset(output_record_batches=True)
    if mode == "write":  # EncodeTransformedDataset reads the schema as a deferred metadata
      meta = beam_metadata_io.BeamDatasetMetadata(meta, p | beam.Create([meta]), {})
      _ = ((data, meta) | tft_beam.EncodeTransformedDataset()
           | beam.io.WriteToTFRecord(out + "/transformed/part"))
    else:
      _ = (data | beam.Map(lambda e: e[0].num_rows) | beam.CombineGlobally(sum)
           | beam.Map(lambda n: open(out + "/rows.txt", "w").write(str(n))))
'''


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--rows", type=int, default=1_000_000)
  ap.add_argument("--repeat", type=int, default=1)
  args = ap.parse_args()
  py = sys.executable
  profile = os.path.join(ROOT, "profiles", "offline.yaml")
  with tempfile.TemporaryDirectory() as d:
    data = ingest_bench.prepared_dataset(d, args.rows)
    analysed = os.path.join(d, "analysed")
    subprocess.run([py, "-m", "pipelines.features", "--input_dir", data, "--output_dir",
                    analysed, "--profile", profile, "--transform_module", "transforms.taxi"],
                   cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2"))
    fn_dir = os.path.join(analysed, "transform_fn")
    print(f"rows: {args.rows}")
    counted, written = [], []
    for i in range(args.repeat):
      bare = features_bench.timed([py, "-c", TRANSFORM_ONLY, data, fn_dir,
                                   os.path.join(d, f"bare{i}"), "count"])
      bare_w = features_bench.timed([py, "-c", TRANSFORM_ONLY, data, fn_dir,
                                     os.path.join(d, f"written{i}"), "write"])
      job = features_bench.timed([py, "-m", "pipelines.features", "--input_dir", data,
                                  "--output_dir", os.path.join(d, f"replay{i}"), "--profile",
                                  profile, "--transform_fn_dir", fn_dir,
                                  "--transform_module", "transforms.taxi"])
      counted.append(job[0] / bare[0])
      written.append(job[0] / bare_w[0])
      print(f"run {i + 1}:")
      for label, (wall, cpu, load) in [
          ("(1) bare TransformDataset, output counted", bare),
          ("(1w) bare TransformDataset writing tf.Examples", bare_w),
          ("(2) pipelines.features --transform_fn_dir", job)]:
        print(f"  {label + ':':50s} {wall:6.1f} s  (CPU {cpu:.1f} s, load {load:.2f})")
      print(f"  ratio (2)/(1) = {counted[-1]:.2f}, (2)/(1w) = {written[-1]:.2f}   "
            f"(target <= {TARGET})")
    if args.repeat > 1:
      print(f"median ratio: (2)/(1) {statistics.median(counted):.2f}, (2)/(1w) "
            f"{statistics.median(written):.2f} (target <= {TARGET})")


if __name__ == "__main__":
  main()
