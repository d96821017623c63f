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
import concurrent.futures
import dataclasses
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
from transforms.beam import arrow_coder  # noqa: F401  (registers the RecordBatch coder)
from transforms.beam.progress import Progress, stage_counts
from transforms.graph import analyze
from transforms.graph.feed import passthrough_keys, to_tft_batch
from transforms.spec import feature_log, run_metadata, schema
from transforms.spec import profile as profiles
from transforms.spec.stages import STAGES, value_columns as stage_value_columns
from transforms.spec.window import check_aggregates
from transforms.stages.serialize_records import SerializeRecords
from transforms.stages.shard_records import ShardRecords
from transforms.stages.transform_records import TransformRecords
from transforms.stages.window_records import DROPPED, WindowRecords
from transforms.stages.write_feature_log import WriteFeatureLog, with_log_hash

__all__ = ["FeaturesOptions", "FeaturesFlags", "FeaturesPlan", "plan_features", "build_pipeline",
           "load_profile_and_module", "run_job", "run"]

LOG_INFO = "_log.json"  # the buckets' infos, in the run's temp folder


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

  @staticmethod
  def check(flags):
    """UsageError naming the first of FeaturesFlags `flags` that cannot be used."""
    for name in ("input_dir", "output_dir", "profile"):
      if not getattr(flags, name):
        raise common.UsageError(f"--{name} is required")
    if flags.log_buckets < 1:
      raise common.UsageError("--log_buckets must be >= 1")
    # --output_dir and --overwrite: common.OutputOptions.


FeaturesFlags = common.flags_type("FeaturesFlags", FeaturesOptions, __name__)


@dataclasses.dataclass(frozen=True)
class FeaturesPlan:
  """What a features run does, checked before anything is written (plan_features)."""
  input_dir: str
  output_dir: str
  profile: profiles.Profile
  module: object         # the feature module
  columns: tuple         # the dataset's ((name, type), ...)
  aggregates: tuple      # the windowed aggregates' names
  manifest: dict         # the input dataset's manifest
  log_buckets: int


def _verified(input_dir, verifying):
  """Waits for the input verification; UsageError when the dataset does not verify."""
  problems = verifying.result()  # verify itself raises UsageError for no dataset at all
  if problems:
    raise common.UsageError(f"--input_dir {input_dir} does not verify: {problems[0]}")


def plan_features(opts, pool):
  """(FeaturesPlan, the input's verification) for FeaturesFlags `opts`. The verification (it
  decodes every shard) starts here on `pool`, after the cheap flag checks, and overlaps building
  the pipeline; run_job waits for it before anything runs or is written.
  Any problem found with the input while planning reports the verification's finding first."""
  FeaturesOptions.check(opts)
  prof, module = load_profile_and_module(opts.profile, opts.transform_module)
  verifying = pool.submit(verify.verify, opts.input_dir)
  try:
    manifest, columns, aggregates = _dataset_plan(opts, module)
  except (common.UsageError, KeyError, TypeError, ValueError, OSError):
    _verified(opts.input_dir, verifying)
    raise
  return FeaturesPlan(input_dir=opts.input_dir, output_dir=opts.output_dir, profile=prof,
                      module=module, columns=tuple(columns), aggregates=tuple(aggregates),
                      manifest=manifest, log_buckets=opts.log_buckets), verifying


def load_profile_and_module(profile_path, module_name):
  """(Profile, feature module) from the --profile and --transform_module flags, checked:
  UsageError naming the flag when either cannot be used."""
  text, _ = dataset.read_text(profile_path, "--profile")
  try:
    prof = profiles.load_profile(text)
  except profiles.ProfileError as e:
    raise common.UsageError(f"--profile {profile_path}: {e}") from None
  try:
    module = importlib.import_module(module_name)
  except ImportError as e:
    raise common.UsageError(f"--transform_module {module_name}: {e}") from None
  for attr in ("preprocessing_fn", "EVENT_TIME_COLUMN", "WINDOWED_AGGREGATES"):
    if not hasattr(module, attr):
      raise common.UsageError(f"--transform_module {module_name} lacks {attr}")
  try:
    check_aggregates(module.WINDOWED_AGGREGATES)
  except ValueError as e:
    raise common.UsageError(f"--transform_module {module_name}: {e}") from None
  return prof, module


def _key_text(columns):
  return ", ".join(columns) if columns else "the content key"


def _check_key_columns(module, module_name, dataset_keys):
  """UsageError unless the module's KEY_COLUMNS (when it declares them) are the dataset's key
  columns: a module written against one key must not run over records keyed another way."""
  declared = getattr(module, "KEY_COLUMNS", None)
  if declared is None:  # the module does not depend on the key
    return
  if not isinstance(declared, (list, tuple)) or not all(isinstance(c, str) for c in declared):
    raise common.UsageError(f"--transform_module {module_name}: KEY_COLUMNS must be a list of "
                            f"column names, got {declared!r}")
  if list(declared) != dataset_keys:
    raise common.UsageError(
        f"--transform_module {module_name} declares KEY_COLUMNS {_key_text(declared)} but the "
        f"dataset is keyed by {_key_text(dataset_keys)} (ingest --key_columns)")


def _dataset_plan(opts, module):
  manifest = dataset.load_manifest(opts.input_dir)  # verify has refused a missing one
  if "parquet" not in {s["format"] for s in manifest["shards"]}:
    raise common.UsageError("--input_dir must hold Parquet shards (exact float64 values)")
  columns = [(c["name"], c["type"]) for c in manifest["schema"]["columns"]]
  names = [n for n, _ in columns]
  needed = [module.EVENT_TIME_COLUMN] + [a["group_by"] for a in module.WINDOWED_AGGREGATES]
  lacking = [n for n in needed if n not in names]
  if lacking:
    raise common.UsageError(f"the dataset schema lacks column(s) {', '.join(lacking)} that "
                            f"{opts.transform_module} needs")
  _check_key_columns(module, opts.transform_module, list(manifest["key_columns"]))
  aggregates = [a["name"] for a in module.WINDOWED_AGGREGATES]
  return manifest, columns, aggregates


class _ShardsTFXIO(ParquetTFXIO):
  """ParquetTFXIO whose BeamSource skips tfx_bsl's telemetry step.

  ParquetTFXIO.BeamSource is ReadFromParquetBatched -> Table.to_batches -> ProfileRecordBatches;
  the last updates Beam metric distributions row by row in Python for a random tenth of the
  batches (~1.5 s per 1M rows here), metrics this job does not use. The RecordBatches, schema
  and TFXIO surface are ParquetTFXIO's own.
  """

  def BeamSource(self, batch_size=None):  # pylint: disable=invalid-name
    patterns, columns = self._file_pattern, self._column_names

    def expand(pipeline):
      reads = [pipeline | f"ReadFromParquetBatched[{i}]" >> beam.io.ReadFromParquetBatched(
          file_pattern=pattern, columns=columns) for i, pattern in enumerate(patterns)]
      return (reads | "FlattenPCollsFromPatterns" >> beam.Flatten()
              | "ToRecordBatch" >> beam.FlatMap(
                  lambda table: table.to_batches(batch_size)).with_output_types(pa.RecordBatch))

    return beam.ptransform_fn(expand)()


def build_pipeline(plan, options, temp_dir):
  """The un-run features Pipeline (outputs under temp_dir).

  One fused pass reads the shards and runs window -> shard -> serialize into TFT's analysis,
  writing the records' stage columns as it goes; the windowed counts come from a second,
  column-projected read, so nothing waits for them. TFT carries each record's log hash and raw
  fingerprint through (passthrough), its transform output is written beside, and the feature
  log's merge lines the two up: only part-file paths are shuffled (transforms/stages/write_feature_log.py).
  """
  prof = plan.profile
  module = plan.module
  event = module.EVENT_TIME_COLUMN
  value_columns = stage_value_columns([n for n, _ in plan.columns], plan.aggregates)
  passthrough = feature_log.passthrough_columns()
  arrow_types = {n: schema.ARROW_TYPES[t] for n, t in plan.columns}
  empty = {n: pa.array([], arrow_types.get(n, pa.int64())) for n in value_columns}
  for name, typ in feature_log.passthrough_types().items():
    empty[passthrough[name]] = pa.array([], typ)
  tft_schema = to_tft_batch(pa.record_batch(empty), value_columns, passthrough).schema
  p = beam.Pipeline(options=options)
  pattern = FileSystems.join(plan.input_dir, "parquet", "*.parquet")
  batches = p | "ReadShards" >> _ShardsTFXIO(
      pattern, telemetry_descriptors=["skewtrace", "features"]).BeamSource()
  count_columns = sorted({event} | {a["group_by"] for a in module.WINDOWED_AGGREGATES})
  count_batches = p | "ReadWindowColumns" >> _ShardsTFXIO(
      pattern, column_names=count_columns,
      telemetry_descriptors=["skewtrace", "features"]).BeamSource()
  windowed = (batches, count_batches) | "Window" >> WindowRecords(
      event, module.WINDOWED_AGGREGATES, prof)
  staged = (windowed["kept"]
            | "ProgressWindow" >> Progress("features", "window")
            | "Shard" >> ShardRecords(prof)
            | "ProgressShard" >> Progress("features", "shard")
            | "Serialize" >> SerializeRecords(value_columns, prof)
            | "ProgressSerialize" >> Progress("features", "serialize")
            | "LogHash" >> beam.Map(with_log_hash).with_output_types(pa.RecordBatch))
  with tft_beam.Context(temp_dir=FileSystems.join(temp_dir, "tft"),
                        passthrough_keys=passthrough_keys(passthrough)):
    transformed, transform_fn = staged | "Transform" >> TransformRecords(
        module.preprocessing_fn, value_columns, tft_schema, passthrough)
    _ = transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(
        FileSystems.join(temp_dir, feature_log.TRANSFORM_FN_DIR))
  transformed = transformed | "ProgressTransform" >> Progress("features", "transform")
  _ = ((staged, transformed, windowed[DROPPED])
       | "FeatureLog" >> WriteFeatureLog(temp_dir, plan.log_buckets, event)
       | "CollectBuckets" >> beam.combiners.ToList()
       | "WriteLogInfo" >> beam.Map(_write_json, FileSystems.join(temp_dir, LOG_INFO)))
  return p


def _write_json(value, path):
  with FileSystems.create(path) as f:
    f.write(json.dumps(value, sort_keys=True).encode("utf-8"))


def _publish(plan, temp_dir, options):
  out = plan.output_dir
  with FileSystems.open(FileSystems.join(temp_dir, LOG_INFO),
                        compression_type="uncompressed") as f:
    buckets = sorted(json.loads(f.read().decode("utf-8")), key=lambda b: b["bucket"])
  dataset.remove_tree(FileSystems.join(out, run_metadata.FILE))
  for sub in (feature_log.TRANSFORM_FN_DIR, feature_log.TRANSFORMED_DIR, feature_log.LOG_DIR):
    dataset.move_tree(FileSystems.join(temp_dir, sub), FileSystems.join(out, sub))
  metadata = run_metadata.document(
      profile=plan.profile, transform_module=plan.module.__name__,
      input_dir=plan.input_dir, content_digest=plan.manifest["content_digest"],
      key_columns=plan.manifest["key_columns"], columns=plan.columns,
      aggregates=list(plan.aggregates),
      runner=str(options.view_as(StandardOptions).runner or "DirectRunner"),
      analyze=analyze.analyze_fingerprints(FileSystems.join(out, feature_log.TRANSFORM_FN_DIR)),
      num_buckets=plan.log_buckets, buckets=buckets)
  dataset.write_atomically(FileSystems.join(out, run_metadata.FILE), run_metadata.dump(metadata))
  return metadata


def run_job(opts, options):
  """Runs the features job for FeaturesFlags `opts` with the Beam `options`; returns the exit
  code. Raises UsageError for bad flags/input."""
  started = time.monotonic()
  pool = concurrent.futures.ThreadPoolExecutor(1)
  try:
    plan, verifying = plan_features(opts, pool)
    existed = FileSystems.exists(plan.output_dir)
    temp_dir = FileSystems.join(plan.output_dir, f".tmp-{uuid.uuid4().hex}")
    try:
      # TFT makes its temp folders while the graph is built: taken back if the input fails.
      pipeline = build_pipeline(plan, options, temp_dir)
      _verified(plan.input_dir, verifying)
      dataset.refuse_foreign_entries(plan.output_dir, opts.overwrite)
    except BaseException:
      dataset.remove_tree(temp_dir)
      if not existed:
        dataset.remove_tree(plan.output_dir)
      raise
  finally:
    pool.shutdown(wait=False, cancel_futures=True)
  try:
    result = pipeline.run()
    result.wait_until_finish()
    metadata = _publish(plan, temp_dir, options)
  finally:
    dataset.remove_tree(temp_dir)
  log = metadata["log"]
  dropped = sum(b.get("dropped", 0) for b in log["buckets"])
  print(f"records logged: {log['rows']} ({dropped} dropped by a stage) in "
        f"{log['num_buckets']} buckets")
  counts = stage_counts(result, "features")
  if counts:
    print("records per stage: " + ", ".join(f"{s} {counts[s]}" for s in STAGES if s in counts))
  print(f"outputs: {plan.output_dir}/{feature_log.TRANSFORM_FN_DIR}, "
        f"{feature_log.TRANSFORMED_DIR}, {feature_log.LOG_DIR}, {run_metadata.FILE}")
  print(f"wall time: {time.monotonic() - started:.1f} s")
  return 0


def run(argv=None, save_main_session=True):
  """Runs the features job from its command line; returns the exit code. Raises UsageError for
  bad flags/input."""
  options, _, _ = common.job_options(argv, FeaturesOptions, save_main_session)
  return run_job(common.flags_of(FeaturesFlags, options, FeaturesOptions), options)


if __name__ == "__main__":
  common.main_wrapper(run)
