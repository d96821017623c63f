"""Features: TF Transform over an ingest dataset, fingerprinting every record after every stage.

DirectRunner:
  python -m pipelines.features --input_dir out/ingest --output_dir out/features \
      --transform_module transforms.taxi --profile profiles/offline.yaml
Dataflow: add --runner DataflowRunner --project P --region R --temp_location gs://B/tmp
  --setup_file ./setup.py (input and output on gs://).

Stages, in order (names as in logs and reports): raw and parse (carried from ingest), window
(WindowRecords), shard (ShardRecords, with the profile's sampling), serialize
(SerializeRecords), transform (TFT). Writes DIR/transform_fn/ (tft.TFTransformOutput),
DIR/transformed/ (tf.Example TFRecord), DIR/feature_log/*.parquet and DIR/run_metadata.json.
"""
import importlib
import json
import time
import uuid

import apache_beam as beam
import pyarrow as pa
import tensorflow_transform.beam as tft_beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from tfx_bsl.tfxio.parquet_tfxio import ParquetTFXIO

from pipelines import common, dataset, verify
from transforms import analyze, feature_log, profile as profiles, schema
from transforms.key_rows import KEY
from transforms.serialize_records import SerializeRecords
from transforms.shard_records import ShardRecords
from transforms.transform_records import TransformRecords, to_tft_batch
from transforms.window_records import DROPPED, WindowRecords

__all__ = ["FeaturesOptions", "build_pipeline", "run"]

RUN_METADATA, LOG_INFO = "run_metadata.json", "_log.json"


class FeaturesOptions(PipelineOptions):
  """Flags of pipelines.features."""

  @classmethod
  def _add_argparse_args(cls, parser):
    parser.add_argument("--input_dir", help="An ingest dataset folder (it must verify).")
    parser.add_argument("--transform_module", default="transforms.taxi",
                        help="Python module with preprocessing_fn and the feature declarations.")
    parser.add_argument("--profile", help="Run profile YAML (profiles/offline.yaml, ...).")
    parser.add_argument("--log_buckets", type=int, default=16,
                        help="Key-hash buckets of the feature log.")
    # --output_dir and --overwrite: common.OutputOptions.


def _plan(opts, out_opts):
  if not opts.input_dir:
    raise common.UsageError("--input_dir is required")
  if not out_opts.output_dir:
    raise common.UsageError("--output_dir is required")
  if not opts.profile:
    raise common.UsageError("--profile is required")
  if opts.log_buckets < 1:
    raise common.UsageError("--log_buckets must be >= 1")
  text, _ = dataset.read_text(opts.profile, "--profile")
  try:
    prof = profiles.load_profile(text)
  except profiles.ProfileError as e:
    raise common.UsageError(f"--profile {opts.profile}: {e}") from None
  try:
    module = importlib.import_module(opts.transform_module)
  except ImportError as e:
    raise common.UsageError(f"--transform_module {opts.transform_module}: {e}") from None
  for attr in ("preprocessing_fn", "EVENT_TIME_COLUMN", "WINDOWED_AGGREGATES"):
    if not hasattr(module, attr):
      raise common.UsageError(f"--transform_module {opts.transform_module} lacks {attr}")
  problems = verify.verify(opts.input_dir)
  if problems:
    raise common.UsageError(f"--input_dir {opts.input_dir} does not verify: {problems[0]}")
  manifest = dataset.load_manifest(opts.input_dir)
  if "parquet" not in {s["format"] for s in manifest["shards"]}:
    raise common.UsageError("--input_dir must hold Parquet shards (exact float64 values)")
  columns = [(c["name"], c["type"]) for c in manifest["schema"]["columns"]]
  names = [n for n, _ in columns]
  needed = [module.EVENT_TIME_COLUMN] + [a["group_by"] for a in module.WINDOWED_AGGREGATES]
  lacking = [n for n in needed if n not in names]
  if lacking:
    raise common.UsageError(f"the dataset schema lacks column(s) {', '.join(lacking)} that "
                            f"{opts.transform_module} needs")
  aggregates = [a["name"] for a in module.WINDOWED_AGGREGATES]
  return {"profile": prof, "module": module, "columns": columns, "manifest": manifest,
          "aggregates": aggregates, "input_dir": opts.input_dir,
          "output_dir": out_opts.output_dir, "log_buckets": opts.log_buckets}


def build_pipeline(plan, options, temp_dir):
  """The un-run features Pipeline (outputs under temp_dir)."""
  prof = plan["profile"]
  module = plan["module"]
  value_columns = [n for n, _ in plan["columns"]] + plan["aggregates"]
  arrow_types = {n: schema.ARROW_TYPES[t] for n, t in plan["columns"]}
  tft_schema = to_tft_batch(pa.record_batch(
      [pa.array([], arrow_types.get(n, pa.int64())) for n in value_columns] +
      [pa.array([], pa.large_string())], names=value_columns + [KEY]), value_columns).schema
  p = beam.Pipeline(options=options)
  pattern = FileSystems.join(plan["input_dir"], "parquet", "*.parquet")
  batches = p | "ReadShards" >> ParquetTFXIO(
      pattern, telemetry_descriptors=["skewtrace", "features"]).BeamSource()
  windowed = batches | "Window" >> WindowRecords(module.EVENT_TIME_COLUMN,
                                                 module.WINDOWED_AGGREGATES, prof)
  staged = (windowed["kept"]
            | "Shard" >> ShardRecords(prof)
            | "Serialize" >> SerializeRecords(value_columns, prof))
  with tft_beam.Context(temp_dir=FileSystems.join(temp_dir, "tft"), passthrough_keys={KEY}):
    transformed, transform_fn = staged | "Transform" >> TransformRecords(
        module.preprocessing_fn, value_columns, tft_schema)
    _ = transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(
        FileSystems.join(temp_dir, "transform_fn"))
  _ = ((staged, windowed[DROPPED], transformed)
       | "FeatureLog" >> feature_log.WriteFeatureLog(temp_dir, plan["log_buckets"],
                                                     module.EVENT_TIME_COLUMN)
       | "CollectBuckets" >> beam.combiners.ToList()
       | "WriteLogInfo" >> beam.Map(_write_json, FileSystems.join(temp_dir, LOG_INFO)))
  return p


def _write_json(value, path):
  with FileSystems.create(path) as f:
    f.write(json.dumps(value, sort_keys=True).encode("utf-8"))


def _check_output_dir(output_dir, overwrite):
  entries = [e for e in dataset.top_entries(output_dir)
             if not e.startswith(".tmp-")]
  if entries and not overwrite:
    raise common.UsageError(f"{output_dir} is not empty ({', '.join(entries[:5])}); pass "
                            "--overwrite to replace it")


def _publish(plan, temp_dir, options):
  out = plan["output_dir"]
  with FileSystems.open(FileSystems.join(temp_dir, LOG_INFO),
                        compression_type="uncompressed") as f:
    buckets = sorted(json.loads(f.read().decode("utf-8")), key=lambda b: b["bucket"])
  dataset.remove_tree(FileSystems.join(out, RUN_METADATA))
  for sub in ("transform_fn", "transformed", "feature_log"):
    dataset.move_tree(FileSystems.join(temp_dir, sub), FileSystems.join(out, sub))
  metadata = {
      "format": "skewtrace.features/1",
      "profile": plan["profile"].to_dict(),
      "transform_module": plan["module"].__name__,
      "input": {"dir": plan["input_dir"],
                "content_digest": plan["manifest"]["content_digest"],
                "key_columns": list(plan["manifest"]["key_columns"])},
      "schema": {"columns": [{"name": n, "type": t} for n, t in plan["columns"]],
                 "aggregates": plan["aggregates"]},
      "versions": common.versions(),
      "runner": str(options.view_as(StandardOptions).runner or "DirectRunner"),
      "stages": list(feature_log.STAGES),
      "analyze": analyze.analyze_fingerprints(FileSystems.join(out, "transform_fn")),
      "log": {"num_buckets": plan["log_buckets"], "seed": feature_log.LOG_SEED,
              "rows": sum(b["rows"] for b in buckets), "buckets": buckets},
  }
  dataset.write_atomically(
      FileSystems.join(out, RUN_METADATA),
      (json.dumps(metadata, indent=2, sort_keys=True) + "\n").encode("utf-8"))
  return metadata


def run(argv=None, save_main_session=True):
  """Runs the features job; returns the exit code. Raises UsageError for bad flags/input."""
  started = time.monotonic()
  options, opts, out = common.job_options(argv, FeaturesOptions, save_main_session)
  plan = _plan(opts, out)
  _check_output_dir(plan["output_dir"], out.overwrite)
  temp_dir = FileSystems.join(plan["output_dir"], f".tmp-{uuid.uuid4().hex}")
  try:
    build_pipeline(plan, options, temp_dir).run().wait_until_finish()
    metadata = _publish(plan, temp_dir, options)
  finally:
    dataset.remove_tree(temp_dir)
  log = metadata["log"]
  dropped = sum(b.get("dropped", 0) for b in log["buckets"])
  print(f"records logged: {log['rows']} ({dropped} dropped by a stage) in "
        f"{log['num_buckets']} buckets")
  print(f"outputs: {plan['output_dir']}/transform_fn, transformed, feature_log, {RUN_METADATA}")
  print(f"wall time: {time.monotonic() - started:.1f} s")
  return 0


if __name__ == "__main__":
  common.main_wrapper(run)
