"""Ingest's view of its input before the job: the columns (a CSV header, the first record),
the types --schema_from takes from another dataset or features run, the hint an unknown
column's error gives (another delimiter, the columns found, the preset a request log needs), the
CSV dialect of its flags and the identity columns a preset fills beside served predictions.
"""
import os

from pipelines import common, dataset
from transforms.codec import csv_records, sources
from transforms.spec import event_time, run_metadata, schema
from transforms.codec.sources import PRESET_IDENTITY
from transforms.spec.dataset import record_columns

__all__ = ["column_names", "types_from", "hint", "preset_identity", "dialect", "event_column",
           "with_event_time", "recorded_options"]


def types_from(folder):
  """({column: type}, the manifest's schema record) of --schema_from: a dataset's record
  columns (its manifest), or a features run's (its run metadata). The record keeps where the
  types first came from (a schema file, or inference) and names the folder as `from`."""
  manifest = None
  try:
    manifest = dataset.load_manifest(folder)
  except (OSError, ValueError) as e:
    raise common.UsageError(f"--schema_from {folder}: cannot read its manifest ({e})") from None
  if manifest is not None:
    info = {k: v for k, v in manifest["schema"].items() if k in ("source", "path", "sha256")}
    return dict(record_columns(manifest)), dict(info, **{"from": folder})
  try:
    with open(os.path.join(folder, run_metadata.FILE), "rb") as f:
      meta = run_metadata.load(f.read(), os.path.join(folder, run_metadata.FILE))
  except FileNotFoundError:
    raise common.UsageError(f"--schema_from {folder}: neither a dataset (manifest.json) nor a "
                            f"features run ({run_metadata.FILE})") from None
  except OSError as e:
    raise common.UsageError(f"--schema_from {folder}: cannot read it ({e})") from None
  source = (meta.get("source") or {}).get("schema", "inferred")
  return ({c["name"]: c["type"] for c in meta["schema"]["columns"]},
          {"source": source, "from": folder})


def hint(names, source):
  """What the columns found suggest: a one-column CSV header split by another delimiter; else
  the columns themselves (at most 12), and the preset whose request-log shape they have when
  none was given."""
  other = csv_records.other_delimiter(names, source.delimiter) if source.format == "csv" \
      else None
  if other:
    return (f" (the header is one column, {names[0][:60]!r}: is the delimiter {other!r}? "
            f"pass --delimiter {'tab' if other == chr(9) else repr(other)})")
  shown = ", ".join(names[:12]) + (f", ... ({len(names)} in all)" if len(names) > 12 else "")
  preset = sources.preset_of_columns(names) if not source.preset else None
  return f" (its columns: {shown})" + (
      f"; the records look like a {preset} request log: pass --preset {preset}" if preset else "")


def column_names(paths, source):
  """The dataset's columns: the CSV header (every headed file must agree), or the first
  record's columns of the first file holding one (later records are checked as read)."""
  if source.format == "parquet":
    return dataset.parquet_columns(paths)
  if source.format != "csv":
    for path in paths:
      names = dataset.read_columns(path, source)
      if names is not None:
        return list(names)
    raise common.UsageError(f"no record: no input file holds a record ({', '.join(paths)})")
  return dataset.csv_header(paths, source.dialect)


def preset_identity(flags):
  """{context column: log field} a preset fills beside its served predictions: the identity of
  the model that answered (codec/sources.PRESET_IDENTITY), recorded by pipelines.features."""
  if not flags.served_prediction.strip():
    return {}
  return dict(PRESET_IDENTITY.get(flags.preset or "", {}))


def dialect(opts):
  """--delimiter and --quote_char as SourceOptions fields ("tab" and "\\t" mean a tab)."""
  delimiter = {"tab": "\t", "\\t": "\t"}.get(opts.delimiter, opts.delimiter)
  problem = csv_records.Dialect(delimiter, opts.quote_char).problem()
  if problem:
    field, why = problem
    raise common.UsageError(f"--{'quote_char' if field == 'quote' else 'delimiter'}: {why}")
  return {"delimiter": delimiter, "quote_char": opts.quote_char}


def event_column(flag, names, types, side_columns, source, key_columns=()):
  """(column, form, zone, parts) of --event_time (None when not given), checked against the
  input: a record column (not a side one) that the types, when given, leave INT (the canonical
  event time) or untyped; "timestamp" reads a Parquet column. With parts (COLUMN=DATE+TIME),
  COLUMN is new and the two parts are input columns, neither a key nor a side column."""
  if not flag:
    return None
  try:
    column, form, zone, parts = event_time.parse_flag(flag)
  except event_time.EventTimeError as e:
    raise common.UsageError(str(e)) from None
  for name in parts or (column,):
    if name not in names:
      raise common.UsageError(f"--event_time column {name!r} is not in the input's columns"
                              + hint(names, source))
    if name in side_columns or (parts and name in key_columns):
      raise common.UsageError(f"--event_time column {name!r} cannot be a "
                              f"{'side' if name in side_columns else 'key'} column")
  if parts and column in names:
    raise common.UsageError(f"--event_time {flag}: {column!r} is a column of the input; name "
                            f"the event time it composes another way")
  if types and types.get(column, schema.INT) != schema.INT:
    raise common.UsageError(f"--event_time {column}: a dataset holds the event time as INT Unix "
                            f"seconds, but the types given make it {types[column]} (a dataset "
                            f"ingested without --event_time keeps it as written: ingest that "
                            f"side with --event_time too)")
  if form == "timestamp" and source.format != "parquet":
    raise common.UsageError(f"--event_time {flag}: form timestamp reads a Parquet TIMESTAMP or "
                            f"DATE column, and the input is {source.format} (text is iso8601, "
                            f"a number seconds, ms, us or ns)")
  return column, form, zone, parts


def with_event_time(columns, event_column):
  """[(name, type)] with the event-time column INT (the canonical event time), appended when the
  input lacks it (composed from a date and a time)."""
  out = [(n, schema.INT if n == event_column else t) for n, t in columns]
  return out if event_column in dict(out) else out + [(event_column, schema.INT)]


def recorded_options(opts, num_shards, formats, key_columns, source):
  """The flags that define the dataset (not runner flags), as recorded in the manifest."""
  return {"input": opts.input, "num_shards": num_shards, "formats": list(formats),
          "key_columns": list(key_columns), "schema": opts.schema,
          "parquet_compression": opts.parquet_compression,
          "max_rejected_fraction": opts.max_rejected_fraction,
          "input_format": source.format, "record_path": ".".join(source.record_path),
          "preset": source.preset, "envelope": [list(e) for e in source.envelope],
          "served": opts.served, "logged_aggregates": opts.logged_aggregates,
          # recorded only when given, so an older dataset's manifest keeps its bytes
          **({"event_time": opts.event_time} if opts.event_time else {}),
          # recorded only when not the default, so a comma dataset's manifest keeps its bytes
          **({"delimiter": source.delimiter} if source.delimiter != csv_records.DELIMITER
             else {}),
          **({"quote_char": source.quote_char} if source.quote_char != csv_records.QUOTE
             else {})}
