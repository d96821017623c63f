"""Ingest: headed CSV or a serving log (JSON Lines, Parquet, tf.Example TFRecord; plain or gzip)
-> deterministic sharded TFRecord (tf.Example) + Parquet, manifest, dead letters.

DirectRunner:
  python -m pipelines.ingest --input 'data/chicago_taxi/*.csv' --output_dir out/ingest \
      --schema data/chicago_taxi/schema.pbtxt --num_shards 4
  python -m pipelines.ingest --input 'capture/*.jsonl' --preset sagemaker \
      --schema data/chicago_taxi/schema.pbtxt --output_dir out/serving
Dataflow:
  python -m pipelines.ingest --input 'gs://B/raw/*.csv' --output_dir gs://B/ingest \
      --runner DataflowRunner --project P --region R --temp_location gs://B/tmp \
      --setup_file ./setup.py

Every source's values are read through one canonical value model (transforms/spec/values.py),
so the same records as CSV text, JSON values, Parquet columns or tf.Example features give the
same raw and parse fingerprints. The same input and flags give byte-identical shards on every
runner and parallelism: rows go
to shard XXH64(key) mod N and are sorted by (key, fingerprint) inside it. Outputs are written
under a temporary folder and renamed into place; manifest.json is written last.
"""
import dataclasses
import json
import logging
import math
import re
import time
import uuid

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import common, dataset, ingest_columns
from transforms.spec import schema
from transforms.spec.errors import DataError
from transforms.spec.dataset import (COVERAGE_KINDS, FORMATS, PREDICTION, coverage_entry,
                                    side_entry, side_names)
from transforms.spec.stages import RESERVED
from transforms.stages.infer_types import InferTypes
from transforms.stages.key_rows import KeyRows
from transforms.beam.progress import Progress
from transforms.codec import csv_records, sources
from transforms.stages.read_records import READ, REJECTED, ReadRecords
from transforms.stages.type_rows import TypeRows
from transforms.stages.write_rejected import WriteRejected
from transforms.stages.write_shards import WriteShards

__all__ = ["IngestOptions", "IngestFlags", "IngestPlan", "Ingest", "plan_ingest",
           "build_pipeline", "run_job", "run"]

AUTO_SHARD_BYTES = 16 << 20


class IngestOptions(PipelineOptions):
  """Flags of pipelines.ingest."""

  @classmethod
  def _add_argparse_args(cls, parser):
    parser.add_argument("--input", help="Required. Input path or glob; several separated by "
                                        "commas.")
    parser.add_argument("--input_format", default="", choices=("",) + sources.FORMATS,
                        help="csv, jsonl, parquet or tfrecord; default: from the file "
                             "extension (.gz stripped first).")
    parser.add_argument("--record_path", default="",
                        help="Dotted keys to the record(s) in each JSON line (or payload); a "
                             "list there yields one record per element.")
    parser.add_argument("--preset", default="", choices=("",) + sources.PRESETS,
                        help="A request-logging shape: sagemaker (Data Capture) or vertex "
                             "(request-response logging exported from BigQuery), JSON Lines; "
                             "tf_serving (TF Serving's PredictionLogs of tf.Examples), "
                             "TFRecord.")
    parser.add_argument("--coverage", default="all", choices=COVERAGE_KINDS,
                        help="What traffic the input holds: all, or partial (a sampled serving "
                             "log); the diff counts offline records a partial log never saw as "
                             "not_served.")
    parser.add_argument("--sampling_rate", type=float, default=None,
                        help="The fraction of traffic a partial log holds, when known "
                             "(recorded; implies --coverage partial when below 1).")
    parser.add_argument("--envelope", default="",
                        help="Extra columns from each JSON line: NAME=dotted.path,... (e.g. "
                             "event_time=eventMetadata.inferenceTime).")
    parser.add_argument("--served", default="",
                        help="Side columns holding the value serving fed the model: "
                             "COLUMN=FEATURE,... (FEATURE: a transformed feature). Kept beside "
                             "the record, outside its fingerprints; FLOAT when a --schema "
                             "does not type it.")
    parser.add_argument("--logged_aggregates", default="",
                        help="Side columns holding a windowed aggregate as serving's online "
                             "store computed it: COLUMN=AGGREGATE,... Kept beside the record, "
                             "outside its fingerprints; FLOAT when a --schema does not type it.")
    parser.add_argument("--served_prediction", default="",
                        help="The column holding what the model answered, as serving logged "
                             "it (a score, a list of scores or an object; kept as its JSON "
                             "text, BYTES): production's prediction at the predict stage "
                             "(docs/features.md). Kept beside the record, outside its "
                             "fingerprints.")
    parser.add_argument("--event_time", default="",
                        help="The column serving wrote the event time in, and its form: "
                             "COLUMN=FORM[:ZONE], FORM seconds, ms, us, ns, iso8601 (naive text "
                             "in ZONE, default UTC) or timestamp (a Parquet TIMESTAMP or DATE); "
                             "or COLUMN=DATE+TIME[:ZONE], composed from a date and a time of day. "
                             "Stored as the canonical event time, INT Unix seconds "
                             "(docs/formats.md, \"Event time in the form serving wrote "
                             "it\").")
    parser.add_argument("--num_shards", type=int, default=0,
                        help="Shards per format; 0 = one per 16 MiB of input.")
    parser.add_argument("--formats", default="tfrecord,parquet",
                        help="Comma-separated output formats: tfrecord, parquet.")
    parser.add_argument("--key_columns", default="",
                        help="Comma-separated record key columns; default: content-derived key.")
    parser.add_argument("--schema", default=None,
                        help="TFMD schema pbtxt giving column types; default: inferred.")
    parser.add_argument("--schema_from", default=None,
                        help="Take the column types from another dataset (its manifest) or "
                             "features run (its run metadata), e.g. the offline side a serving "
                             "log replays against: a column no sampled record holds still gets "
                             "its type. Not with --schema.")
    parser.add_argument("--parquet_compression", default="snappy",
                        choices=["snappy", "zstd", "none"], help="Parquet codec.")
    parser.add_argument("--max_rejected_fraction", type=float, default=0.01,
                        help="Fail the run when more than this fraction of rows is rejected.")
    parser.add_argument("--csv_block_bytes", type=int, default=8 << 20,
                        help="Bytes of CSV parsed per batch (memory per reader).")
    parser.add_argument("--delimiter", default=csv_records.DELIMITER,
                        help="CSV field delimiter: one character, or 'tab'.")
    parser.add_argument("--quote_char", default=csv_records.QUOTE,
                        help="CSV quote character: one character (a doubled one inside quotes "
                             "is one).")

  @staticmethod
  def check(flags):
    """UsageError naming the first of IngestFlags `flags` that cannot be used; the formats."""
    if not flags.input:
      raise common.UsageError("--input is required")
    if not flags.output_dir:
      raise common.UsageError("--output_dir is required")
    formats = [f.strip() for f in flags.formats.split(",") if f.strip()]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats or len(set(formats)) != len(formats):
      raise common.UsageError(f"--formats must list tfrecord and/or parquet, got "
                              f"{flags.formats!r}")
    if not 0 <= flags.max_rejected_fraction <= 1:
      raise common.UsageError("--max_rejected_fraction must be within [0, 1]")
    if flags.num_shards < 0:
      raise common.UsageError("--num_shards must be >= 0")
    if flags.csv_block_bytes < 1024:
      raise common.UsageError("--csv_block_bytes must be >= 1024")
    try:
      coverage = coverage_entry(
          "partial" if flags.sampling_rate is not None and flags.sampling_rate < 1
          else flags.coverage, flags.sampling_rate)
    except ValueError as e:
      raise common.UsageError(f"--coverage/--sampling_rate: {e}") from None
    for item in _items(flags.envelope):
      name, _, path = item.partition("=")
      if not name.strip() or not path.strip():
        raise common.UsageError(f"--envelope wants NAME=dotted.path items, got {item!r}")
    try:  # envelope columns are the log's context: beside the record, never transformed
      side = side_entry(_pairs(flags.served, "--served", "COLUMN=FEATURE"),
                        _pairs(flags.logged_aggregates, "--logged_aggregates",
                               "COLUMN=AGGREGATE"),
                        {**ingest_columns.preset_identity(flags),
                         **{n.strip(): p.strip() for n, _, p in
                            (item.partition("=") for item in _items(flags.envelope))}},
                        {flags.served_prediction.strip(): PREDICTION}
                        if flags.served_prediction.strip() else None)
    except ValueError as e:
      raise common.UsageError(f"--served/--logged_aggregates/--envelope/--served_prediction: "
                              f"{e}") from None
    return formats, coverage, side


def _pairs(text, flag, form):
  """{column: name} of a NAME=VALUE,... flag; UsageError naming the flag when malformed."""
  out = {}
  for item in _items(text):
    column, _, name = (t.strip() for t in item.partition("="))
    if not column or not name:
      raise common.UsageError(f"{flag} wants {form} items, got {item!r}")
    if column in out:
      raise common.UsageError(f"{flag} names column {column!r} twice")
    out[column] = name
  return out


def _items(text):
  return [t.strip() for t in text.split(",") if t.strip()]


def _source_options(opts, paths, payload_names):
  """The SourceOptions of the run: one format for all inputs (given, or from the extensions)."""
  fmt = opts.input_format
  if not fmt:
    try:
      found = sorted({sources.infer_format(p) for p in paths})
    except sources.SourceError as e:
      raise common.UsageError(f"{e}; pass --input_format") from None
    if len(found) > 1:
      raise common.UsageError(f"inputs mix formats ({', '.join(found)}); ingest one format "
                              "per run")
    fmt = found[0]
  if fmt != "jsonl" and (opts.record_path or opts.envelope):
    raise common.UsageError("--record_path and --envelope apply to JSON Lines input "
                            f"only (input format: {fmt})")
  if opts.preset and sources.PRESET_FORMATS[opts.preset] != fmt:
    raise common.UsageError(f"--preset {opts.preset} reads {sources.PRESET_FORMATS[opts.preset]} "
                            f"input, not {fmt}")
  envelope = tuple((n.strip(), p.strip()) for n, _, p in
                   (item.partition("=") for item in _items(opts.envelope)))
  if fmt == "jsonl":  # a JSON Lines preset's identity columns come from the line
    envelope += tuple((c, f) for c, f in ingest_columns.preset_identity(opts).items()
                      if c not in dict(envelope))
  record_path = tuple(k for k in opts.record_path.split(".") if k) if opts.record_path else ()
  return sources.SourceOptions(format=fmt, record_path=record_path, preset=opts.preset or None,
                               envelope=envelope, payload_names=tuple(payload_names),
                               block_bytes=opts.csv_block_bytes,
                               text_columns=tuple(c for c in [opts.served_prediction.strip()] if c),
                               response_column=(opts.served_prediction.strip() or None)
                               if opts.preset else None,
                               **ingest_columns.dialect(opts))


IngestFlags = common.flags_type("IngestFlags", IngestOptions, __name__)


@dataclasses.dataclass(frozen=True)
class IngestPlan:
  """What an ingest run does, checked before anything is written (plan_ingest)."""
  paths: tuple            # input files, sorted
  source: object          # the inputs' sources.SourceOptions (format, record path, preset)
  names: tuple            # the columns: the CSV header, or the first record's
  columns: tuple | None   # ((name, type), ...) from --schema; None: inferred by the job
  schema_info: dict       # the manifest's schema source
  key_columns: tuple
  formats: tuple
  num_shards: int
  compression: str | None
  block_bytes: int
  inputs: tuple           # describe_file of each input
  output_dir: str
  temp_dir: str           # where the job writes before the outputs are moved into place
  recorded: dict          # the flags that define the dataset, as the manifest records them
  coverage: dict          # what traffic the input holds (spec/dataset.coverage_entry)
  side: dict              # the side columns (spec/dataset.side_entry): outside the record
  event: tuple | None = None  # --event_time's (column, form, zone, parts)


class Ingest(beam.PTransform):
  """(file index, path) pairs -> dicts of results in temp_dir (shard infos, counts)."""

  def __init__(self, plan):
    super().__init__()
    self._plan = plan

  def expand(self, files):
    plan = self._plan
    raw = files | "ReadRecords" >> ReadRecords(plan.names, plan.source)
    if plan.columns is None:
      columns = (files | "ReadForTypes" >> ReadRecords(plan.names, plan.source)).rows \
          | "InferTypes" >> InferTypes(plan.names)
      if plan.event:  # the event time is the canonical one, INT, whatever its source text
        columns = columns | "EventTimeType" >> beam.Map(
            ingest_columns.with_event_time, plan.event[0])
    else:
      columns = plan.columns
    side = side_names(plan.side)
    typed = raw.rows | "TypeRows" >> TypeRows(columns, plan.paths, plan.key_columns, side,
                                                 plan.event)
    infos = (typed.rows
             | "ProgressParse" >> Progress("ingest", "parse")
             | "KeyRows" >> KeyRows(plan.key_columns, plan.num_shards, side=side)
             | "WriteShards" >> WriteShards(plan.temp_dir, plan.num_shards, columns,
                                            plan.formats, plan.compression,
                                            not plan.key_columns)
             | "CollectShards" >> beam.combiners.ToList())
    rejected = ((raw[REJECTED], typed[REJECTED]) | "MergeRejected" >> beam.Flatten()
                | "WriteRejected" >> WriteRejected(plan.temp_dir)
                | "SumRejected" >> beam.CombineGlobally(sum))
    read = raw[READ] | "SumRead" >> beam.CombineGlobally(sum)
    if not isinstance(columns, beam.pvalue.PCollection):
      columns = files.pipeline | "Columns" >> beam.Create([columns])
    return (files.pipeline
            | "Results" >> beam.Create([plan.temp_dir])
            | "WriteResults" >> beam.Map(
                _write_results, infos=beam.pvalue.AsSingleton(infos),
                read=beam.pvalue.AsSingleton(read), rejected=beam.pvalue.AsSingleton(rejected),
                columns=beam.pvalue.AsSingleton(columns)))


def _write_results(temp_dir, infos, read, rejected, columns):
  results = {"shards": sorted(infos, key=lambda i: i["shard"]), "read": read,
             "rejected": rejected, "columns": [list(c) for c in columns]}
  with FileSystems.create(FileSystems.join(temp_dir, dataset.RESULTS)) as f:
    f.write(json.dumps(results, sort_keys=True).encode("utf-8"))
  return temp_dir


def plan_ingest(opts):
  """The IngestPlan of IngestFlags `opts`: flags and inputs checked before anything is written."""
  formats, coverage, side = IngestOptions.check(opts)
  output_dir = opts.output_dir
  paths = dataset.match_inputs(opts.input)
  if opts.schema and opts.schema_from:
    raise common.UsageError("--schema and --schema_from both give the types: pass one")
  schema_text = dataset.read_text(opts.schema, "--schema") if opts.schema else None
  types, origin = None, None
  if schema_text is not None:
    try:
      types = schema.load_tfmd(schema_text[0])
    except schema.SchemaError as e:
      raise common.UsageError(f"--schema {opts.schema}: {e}") from None
  elif opts.schema_from:
    types, origin = ingest_columns.types_from(opts.schema_from)
  source = _source_options(opts, paths, list(types) if types else ())
  names = found = ingest_columns.column_names(paths, source)
  if types is not None and source.format != "csv":
    # A record's absent key or feature is a null (a tf.Example omits an empty feature): the
    # schema's columns are the dataset's, then the first record's others.
    names = list(types) + [n for n in names if n not in types]
  reserved = sorted(RESERVED.intersection(names))
  if reserved:
    raise common.UsageError(f"column name(s) reserved by skewtrace: {', '.join(reserved)}")
  key_columns = [c.strip() for c in opts.key_columns.split(",") if c.strip()]
  unknown = [c for c in key_columns if c not in names]
  if unknown:
    raise common.UsageError(f"--key_columns not in the input's columns: {', '.join(unknown)}"
                            + ingest_columns.hint(names, source))
  # A side column --schema does not type is FLOAT: a served value, a mean, a sum, and a count
  # too (exact up to 2**53; the features job checks it is whole before it runs).
  side_columns = {c: schema.FLOAT for c in [*side["served"], *side["aggregates"]]}
  side_columns.update((c, schema.BYTES) for c in side.get("prediction", {}))  # JSON text
  unknown = sorted(c for c in side_columns if c not in names)
  if unknown:
    raise common.UsageError(f"--served/--logged_aggregates/--served_prediction column(s) not "
                            f"in the input's columns: {', '.join(unknown)}"
                            + ingest_columns.hint(names, source))
  keyed = sorted(set(side_columns) & set(key_columns))
  if keyed:
    raise common.UsageError(f"key column(s) {', '.join(keyed)} cannot be side columns")
  event = ingest_columns.event_column(opts.event_time, found, types, side_columns, source,
                                     key_columns)
  if event and event[3]:  # a composed event time's date and time: the record's context
    side = side_entry(side["served"], side["aggregates"], {**side.get("context", {}),
                                                            **{p: p for p in event[3]}},
                      side.get("prediction"))
  columns, schema_info = None, {"source": "inferred"}
  if types is not None:
    lacking = [n for n in types if n not in names]
    if lacking:
      raise common.UsageError(f"--schema names column(s) the input lacks: {', '.join(lacking)}"
                              + ingest_columns.hint(names, source))
    columns = [(n, types.get(n, side_columns.get(n, schema.BYTES))) for n in names]
    columns = ingest_columns.with_event_time(columns, event[0]) if event else columns
    schema_info = origin or {"source": "file", "path": opts.schema, "sha256": schema_text[1]}
  inputs = [dataset.describe_file(p) for p in paths]
  num_shards = opts.num_shards or max(1, math.ceil(sum(i["bytes"] for i in inputs)
                                                   / AUTO_SHARD_BYTES))
  return IngestPlan(
      paths=tuple(paths), source=source, names=tuple(names),
      columns=None if columns is None else tuple(columns),
      schema_info=schema_info, key_columns=tuple(key_columns), formats=tuple(formats),
      num_shards=num_shards, block_bytes=opts.csv_block_bytes, inputs=tuple(inputs),
      compression=None if opts.parquet_compression == "none" else opts.parquet_compression,
      output_dir=output_dir,
      temp_dir=FileSystems.join(output_dir, dataset.TEMP_PREFIX + uuid.uuid4().hex),
      recorded=ingest_columns.recorded_options(opts, num_shards, formats, key_columns, source),
      coverage=coverage, side=side, event=event)


def build_pipeline(plan, options):
  """The un-run ingest Pipeline for a plan (see _plan)."""
  p = beam.Pipeline(options=options)
  _ = (p
       | "Files" >> beam.Create(list(enumerate(plan.paths)))
       | "Distribute" >> beam.Reshuffle()
       | "Ingest" >> Ingest(plan))
  return p


def run_job(opts, options):
  """Runs ingest for IngestFlags `opts` with the Beam `options`; returns the exit code (0 done).
  Raises UsageError for bad flags or input. Dead runs' temps go once the folder's lock is held."""
  started = time.monotonic()
  plan = plan_ingest(opts)
  with dataset.one_writer(plan.output_dir, "skewtrace ingest"):
    dataset.check_output_dir(plan.output_dir, list(plan.inputs), plan.recorded, opts.overwrite)
    dataset.remove_stale_temps(plan.output_dir)
    # Beam logs a failing DoFn's traceback before re-raising it; the one raised is reported.
    beam_log = logging.getLogger("apache_beam.runners.common")
    level = beam_log.level
    beam_log.setLevel(logging.CRITICAL)
    try:
      try:
        build_pipeline(plan, options).run().wait_until_finish()
      except sources.SourceError as e:  # a file found damaged mid-read (TFRecord framing):
        # the reader's one line, without the step Beam appends; nothing is published
        raise DataError(re.sub(r" \[while running .*\]$", "", str(e).splitlines()[0])) from None
      manifest = dataset.publish(plan, common.versions())
    finally:
      beam_log.setLevel(level)
      dataset.remove_tree(plan.temp_dir)
  print(dataset.summary(manifest, time.monotonic() - started))
  return 0


def run(argv=None, save_main_session=True):
  """Runs ingest from its command line; returns the exit code. Raises UsageError for bad flags
  or input."""
  options, _, _ = common.job_options(argv, IngestOptions, save_main_session)
  return run_job(common.flags_of(IngestFlags, options, IngestOptions), options)


if __name__ == "__main__":
  common.process_main(common.main_wrapper, run)
