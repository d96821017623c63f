"""The features job (pipelines.features runs it): its plan, its Beam pipeline, its outputs.

Kept apart from pipelines/features.py, which holds the flags and the entry point, because this
module imports TensorFlow, TF Transform and tfx_bsl, so only a run pays for them and --help
does not. The stages, the outputs and the checks are described in pipelines/features.py.
"""
import concurrent.futures
import dataclasses
import json
import time
import traceback
import uuid

import apache_beam as beam
import pyarrow as pa

from transforms.graph import quiet
quiet.import_tensorflow()  # first: TensorFlow's native libraries load without start-up lines
import tensorflow_transform.beam as tft_beam  # noqa: E402
from apache_beam.io.filesystems import FileSystems
from tfx_bsl.tfxio.parquet_tfxio import ParquetTFXIO

from pipelines import common, dataset, feature_module, features_output, verify
from pipelines.features_checks import (_check_event_time, _check_logged_counts,
                                       _check_served_predictions, event_plan, in_module_form,
                                       null_columns_retyped, read_dataset_column)
from pipelines.features_flags import FeaturesOptions, model_flags
from pipelines.feature_module import load_profile_and_module
from transforms.beam import arrow_coder  # noqa: F401  (registers the RecordBatch coder)
from transforms.beam.progress import Progress, stage_counts
from transforms.graph.feed import check_transform_fn, passthrough_keys, to_tft_batch
from transforms.spec import feature_log, pii, run_files, run_metadata, schema, window
from transforms.spec import profile as profiles
from transforms.spec.dataset import MODEL_IDENTITY, record_columns, side_of
from transforms.spec.errors import first_line
from transforms.spec.stages import STAGES, value_columns as stage_value_columns
from transforms.stages.serialize_records import SerializeRecords
from transforms.stages.shard_records import ShardRecords
from transforms.stages.transform_records import TransformRecords
from transforms.stages.window_records import DROPPED, WindowRecords
from transforms.stages.write_feature_log import WriteFeatureLog, with_log_hash

__all__ = ["FeaturesPlan", "plan_features", "build_pipeline", "load_profile_and_module",
           "check_transform_fn_dir", "read_dataset_column", "run_job", "LOG_INFO"]

LOG_INFO = features_output.LOG_INFO  # the buckets' infos, in the run's temp folder


@dataclasses.dataclass(frozen=True)
class FeaturesPlan:
  """What a features run does, checked before anything is written (plan_features)."""
  input_dir: str
  output_dir: str
  profile: profiles.Profile
  module: object         # the feature module
  columns: tuple         # the dataset's ((name, type), ...)
  aggregates: tuple      # the windowed aggregates, as spec/window.describe gives them
  manifest: dict         # the input dataset's manifest
  log_buckets: int
  event: tuple           # the event-time (column, format, zone) the stages read (event_plan)
  transform_fn_dir: str = None  # transform with this transform_fn (None: analyse the input)
  side: dict = None      # the dataset's side columns (spec/dataset.side_entry)
  pii_rule: pii.Pii = pii.Pii()  # the PII log columns (spec/pii.py)
  model: object = None   # the predict stage's ModelSpec (transforms/model/load.py)
  # The loaded model's identity (run metadata's `model`), filled when the pipeline is built.
  model_identity: dict = dataclasses.field(default_factory=dict)
  # Columns null throughout that take the given transform_fn's type ({name: type}).
  retyped: dict = dataclasses.field(default_factory=dict)
  # Whether the dataset's canonical event time is rewritten in the module's form (event_plan).
  event_in_module_form: bool = False
  bounded_memory: bool = False  # --bounded_memory: the shards read again for the transform


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
    manifest, columns, aggregates = _dataset_plan(opts, module, prof)
    _check_event_time(opts, module, manifest, dict(columns))
    columns, event, convert = event_plan(opts, module, manifest, columns)
    _check_logged_counts(opts, manifest, aggregates)
    _check_served_predictions(opts, manifest)
    retyped = {}
    if opts.transform_fn_dir:  # a column null throughout takes the transform_fn's type
      retyped = null_columns_retyped(opts.input_dir, manifest, columns, opts.transform_fn_dir)
      columns = [(n, retyped.get(n, t)) for n, t in columns]
      check_transform_fn_dir(opts.transform_fn_dir, columns, aggregates)
  except (common.UsageError, KeyError, TypeError, ValueError, OSError):
    _verified(opts.input_dir, verifying)
    raise
  return FeaturesPlan(input_dir=opts.input_dir, output_dir=opts.output_dir, profile=prof,
                      module=module, columns=tuple(columns), aggregates=tuple(aggregates),
                      manifest=manifest, log_buckets=opts.log_buckets,
                      event=event, event_in_module_form=convert,
                      bounded_memory=bool(opts.bounded_memory),
                      transform_fn_dir=opts.transform_fn_dir or None,
                      side=side_of(manifest),
                      pii_rule=pii.Pii.parse(opts.pii_columns, opts.pii_key_env,
                                             manifest["key_columns"]),
                      model=model_flags.spec_of(opts, decision_alone=bool(
                          side_of(manifest).get("prediction"))),
                      retyped=retyped), verifying


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


def _dataset_plan(opts, module, prof):
  manifest = dataset.load_manifest(opts.input_dir)  # verify has refused a missing one
  if "parquet" not in {s["format"] for s in manifest["shards"]}:
    raise common.UsageError("--input_dir must hold Parquet shards (exact float64 values)")
  columns = record_columns(manifest)  # the side columns are not the record's (spec/dataset.py)
  names = [n for n, _ in columns]
  try:  # each aggregate's window: its own, the profile's, and the profile's override
    aggregates = window.resolve(module.WINDOWED_AGGREGATES, prof)
  except ValueError as e:
    raise common.UsageError(f"--transform_module {opts.transform_module} with --profile "
                            f"{opts.profile}: {e}") from None
  needed = [module.EVENT_TIME_COLUMN] + [c for a in aggregates for c in window.input_columns(a)]
  lacking = list(dict.fromkeys(n for n in needed if n not in names))
  if lacking:
    raise common.UsageError(f"the dataset schema lacks column(s) {', '.join(lacking)} that "
                            f"{opts.transform_module} needs")
  try:
    window.check_columns(aggregates, {n: schema.ARROW_TYPES[t] for n, t in columns})
  except ValueError as e:
    raise common.UsageError(f"--transform_module {opts.transform_module}: {e}") from None
  _check_key_columns(module, opts.transform_module, list(manifest["key_columns"]))
  declared = [a["name"] for a in aggregates]
  unknown = sorted(set(side_of(manifest)["aggregates"].values()) - set(declared))
  if unknown:
    raise common.UsageError(f"the dataset logs aggregate(s) {', '.join(unknown)} that "
                            f"{opts.transform_module} does not compute (its "
                            f"WINDOWED_AGGREGATES: {', '.join(declared) or 'none'})")
  return manifest, columns, aggregates


def check_transform_fn_dir(transform_fn_dir, columns=None, aggregates=(),
                           flag="--transform_fn_dir"):
  """UsageError unless `transform_fn_dir` is a TF Transform output folder and, given the
  dataset's [(name, type)] columns, its transform function takes exactly the inputs this job
  feeds: the columns and the windowed aggregates (`aggregates`, in their spec/window.output_type),
  as graph/feed.py feeds them."""
  damaged = run_files.transform_fn_problems(transform_fn_dir)
  if damaged:  # an edited or deleted vocabulary is named, never applied
    raise common.UsageError(f"{flag} {transform_fn_dir} does not verify: {damaged[0]}")
  types = None
  if columns is not None:
    types = {n: schema.ARROW_TYPES.get(t, pa.string()) for n, t in columns}
    types.update((a["name"], window.output_type(a)) for a in aggregates)
  try:
    check_transform_fn(transform_fn_dir, types)
  except ValueError as e:
    raise common.UsageError(f"{flag} {transform_fn_dir}: {e}") from None


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
  log's merge lines the two up: only part-file paths are shuffled
  (transforms/stages/write_feature_log.py).
  With plan.transform_fn_dir, that transform_fn is copied to temp_dir/transform_fn here and TFT
  transforms with the copy (what is used is what the run publishes and fingerprints).
  """
  prof = plan.profile
  module = plan.module
  event, event_format, event_zone = plan.event
  names = [a["name"] for a in plan.aggregates]
  value_columns = stage_value_columns([n for n, _ in plan.columns], names)
  passthrough = feature_log.passthrough_columns()
  arrow_types = {n: schema.ARROW_TYPES[t] for n, t in plan.columns}
  arrow_types.update((a["name"], window.output_type(a)) for a in plan.aggregates)
  empty = {n: pa.array([], arrow_types[n]) for n in value_columns}
  for name, typ in feature_log.passthrough_types().items():
    empty[passthrough[name]] = pa.array([], typ)
  tft_schema = to_tft_batch(pa.record_batch(empty), value_columns, passthrough).schema
  p = beam.Pipeline(options=options)
  pattern = FileSystems.join(plan.input_dir, "parquet", "*.parquet")
  batches = p | "ReadShards" >> _ShardsTFXIO(
      pattern, telemetry_descriptors=["skewtrace", "features"]).BeamSource()
  if plan.retyped:  # all-null columns in the type the given transform_fn takes
    casts = {n: schema.ARROW_TYPES[t] for n, t in plan.retyped.items()}
    batches = batches | "Retype" >> beam.Map(_cast, casts).with_output_types(pa.RecordBatch)
  if plan.event_in_module_form:  # the canonical event time in the form the module takes
    batches = batches | "EventTimeForm" >> beam.Map(
        in_module_form, plan.event).with_output_types(pa.RecordBatch)
  def columns_read(label, columns):  # the shards again, these columns only, as `batches` are
    read = p | f"Read{label}" >> _ShardsTFXIO(pattern, column_names=columns,
                                              telemetry_descriptors=["skewtrace", "features"]
                                              ).BeamSource()
    if plan.retyped:
      read = read | f"Retype{label}" >> beam.Map(_cast, casts).with_output_types(pa.RecordBatch)
    if plan.event_in_module_form:
      read = read | f"EventTimeForm{label}" >> beam.Map(
          in_module_form, plan.event).with_output_types(pa.RecordBatch)
    return read
  count_columns = sorted({event} | {c for a in plan.aggregates for c in window.input_columns(a)})
  side = plan.side or side_of(plan.manifest)
  windowed = (batches, columns_read("WindowColumns", count_columns),
              columns_read("EventTimes", [event])) | "Window" >> WindowRecords(
      event, plan.aggregates, prof, event_format=event_format, event_zone=event_zone,
      logged={agg: column for column, agg in side["aggregates"].items()})
  # The progress counts are leaves beside the chain, so that a copy of the chain (below) does
  # not count its records again.
  shards = windowed["kept"] | "Shard" >> ShardRecords(prof)
  serialized = shards | "Serialize" >> SerializeRecords(value_columns, prof)
  for stage, records in (("window", windowed["kept"]), ("shard", shards),
                         ("serialize", serialized)):
    _ = records | f"Progress{stage.capitalize()}" >> Progress("features", stage)
  staged = serialized | "LogHash" >> beam.Map(with_log_hash, pii=plan.pii_rule) \
      .with_output_types(pa.RecordBatch)
  fn_dir = FileSystems.join(temp_dir, feature_log.TRANSFORM_FN_DIR)
  # --bounded_memory: TFT's deep copy reads the shards again for the transform (every step up
  # to the read is copied; side inputs are not), so no runner holds the whole input while the
  # analysis runs; the copy's records are the same, and so are the outputs.
  with tft_beam.Context(temp_dir=FileSystems.join(temp_dir, "tft"),
                        passthrough_keys=passthrough_keys(passthrough),
                        use_deep_copy_optimization=plan.bounded_memory):
    if plan.transform_fn_dir:
      FileSystems.copy([plan.transform_fn_dir.rstrip("/") + "/"], [fn_dir + "/"])  # a tree
      transform = TransformRecords(None, value_columns, tft_schema, passthrough,
                                   transform_fn_dir=fn_dir)
      transformed, _ = staged | "Transform" >> transform
    else:
      try:  # TFT traces preprocessing_fn and infers its outputs' schema here
        transform = TransformRecords(feature_module.reported(module), value_columns, tft_schema,
                                     passthrough)
        transformed, transform_fn = staged | "Transform" >> transform
      except (TypeError, ValueError) as e:  # TFT refusing the module's outputs: one line
        if "tensorflow_transform" not in traceback.extract_tb(e.__traceback__)[-1].filename:
          raise
        hint = (" (a feature TF Transform writes is float32, int64 or string: cast it)"
                if "invalid dtype" in str(e) else "")
        raise common.UsageError(f"--transform_module {plan.module.__name__}: TF Transform "
                                f"refuses what preprocessing_fn returns: {first_line(e)}"
                                f"{hint}") from None
      _ = transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(fn_dir)
  # --pii_columns against the transformed features, known once TFT traced the module: before
  # anything runs
  plan.pii_rule.check_columns(set(transform.output_features) | set(plan.manifest["key_columns"]),
                              "--pii_columns")
  if plan.model.given():  # the model against the transformed features: before anything runs
    from transforms.model import load
    plan.model_identity.update(load.load(plan.model, transform.output_dtypes).identity())
  if side.get("prediction") and plan.model.decision:  # what serving answered, and who
    plan.model_identity.update(_served_identity(plan, side))
  transformed = transformed | "ProgressTransform" >> Progress("features", "transform")
  _ = ((staged, transformed, windowed[DROPPED])
       | "FeatureLog" >> WriteFeatureLog(temp_dir, plan.log_buckets, event,
                                         event_format=event_format, event_zone=event_zone,
                                         served=tuple(side["served"].items()),
                                         aggregates=names, pii=plan.pii_rule,
                                         model=plan.model, prediction=next(
                                             iter(side.get("prediction", {})), None))
       | "CollectBuckets" >> beam.combiners.ToList()
       | "WriteLogInfo" >> beam.Map(_write_json, FileSystems.join(temp_dir, LOG_INFO)))
  return p


def _served_identity(plan, side):
  """run metadata `model` fields of a dataset with served predictions: the column, and each
  identity context column's distinct values (comma-joined, sorted); with no model of the run's
  own, what it is (served) and the decision rule."""
  out = {"served": next(iter(side["prediction"]))}
  if not plan.model.given():
    out.update(source="served", kind="served", digest=None, decision=plan.model.decision)
  for column in sorted(side.get("context", {})):
    if column in MODEL_IDENTITY:  # spec/dataset.py: the columns naming the answering model
      values = set()
      for arr in read_dataset_column(plan.input_dir, plan.manifest, column, pa.string()):
        values |= set(arr.cast(pa.string()).drop_null().unique().to_pylist())
      out[column] = ",".join(sorted(values))
  return out


def _cast(batch, types):
  """A RecordBatch with the columns of {name: Arrow type} cast (all null: nothing to misread)."""
  arrays = [batch.column(i).cast(types[f.name]) if f.name in types else batch.column(i)
            for i, f in enumerate(batch.schema)]
  return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)


def _write_json(value, path):
  with FileSystems.create(path) as f:
    f.write(json.dumps(value, sort_keys=True).encode("utf-8"))


def run_job(opts, options):
  """Runs the features job for FeaturesFlags `opts` with the Beam `options`; returns the exit
  code. Raises UsageError for bad flags/input."""
  started = time.monotonic()
  pool = concurrent.futures.ThreadPoolExecutor(1)
  try:
    plan, verifying = plan_features(opts, pool)
    with dataset.one_writer(plan.output_dir, "skewtrace features"):
      return _run_planned(plan, verifying, opts, options, pool, started)
  finally:
    pool.shutdown(wait=False, cancel_futures=True)


def _run_planned(plan, verifying, opts, options, pool, started):
  """run_job's work, under the output folder's lock: only then are a dead run's temps removed."""
  try:
    temp_dir = FileSystems.join(plan.output_dir, dataset.TEMP_PREFIX + uuid.uuid4().hex)
    try:
      # TFT makes its temp folders while the graph is built: taken back if the input fails.
      pipeline = build_pipeline(plan, options, temp_dir)
      _verified(plan.input_dir, verifying)
      features_output.check_output(plan, opts.overwrite)
      dataset.remove_stale_temps(plan.output_dir, keep=temp_dir)
    except BaseException:  # a folder the lock made is removed again by one_writer
      dataset.remove_tree(temp_dir)
      raise
  finally:
    pool.shutdown(wait=False, cancel_futures=True)
  try:
    with quiet.start_up_lines_filtered():  # the SDK worker processes' TensorFlow start-up
      result = pipeline.run()
      result.wait_until_finish()
    metadata = features_output.publish(plan, temp_dir, options)
  finally:
    dataset.remove_tree(temp_dir)
  log = metadata["log"]
  dropped = sum(b.get("dropped", 0) for b in log["buckets"])
  print(f"records logged: {log['rows']} ({dropped} dropped by a stage) in "
        f"{log['num_buckets']} buckets")
  counts = stage_counts(result, "features")
  if counts:
    print("records per stage: " + ", ".join(f"{s} {counts[s]}" for s in STAGES if s in counts))
  if plan.transform_fn_dir:
    print(f"given transform_fn: {plan.transform_fn_dir} "
          f"({metadata[run_metadata.TRANSFORM_FN]['digest']}), not analysed")
  print(f"outputs: {plan.output_dir}/{feature_log.TRANSFORM_FN_DIR}, "
        f"{feature_log.TRANSFORMED_DIR}, {feature_log.LOG_DIR}, {run_metadata.FILE}")
  print(f"job time: {time.monotonic() - started:.1f} s (imports before the job started not "
        "counted)")
  return 0
