"""The dataset checks a features plan runs before anything is written (pipelines/features_job.py
plan_features): the event-time column against the module's declaration, logged counts, served
predictions; and the reader of one dataset column they share."""
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from pipelines import common
from transforms.codec import tfrecord
from transforms.spec import event_time, schema, window
from transforms.spec.dataset import event_time_of, side_of

__all__ = ["read_dataset_column", "null_columns_retyped", "event_plan", "in_module_form"]


def event_plan(opts, module, manifest, columns):
  """(columns, event, convert) of a dataset against the module's event-time declaration.
  A dataset whose ingest recorded the source's form (--event_time) holds the canonical event
  time, INT Unix seconds: its column reaches the module in the module's declared form (ISO-8601
  text is BYTES, a count INT; convert: whether the column is rewritten, in_module_form), and
  the window stage reads what it is handed. Any other dataset holds the module's form as it
  is. event: the (column, form, zone) the window stage and the feature log read."""
  column, form, zone = event_time.declaration(module)
  recorded = event_time_of(manifest)
  if recorded is None:
    return columns, (column, form, zone), False
  if recorded[0] != column:
    raise common.UsageError(f"the dataset's event time is column {recorded[0]!r} (ingest "
                            f"--event_time), {opts.transform_module}'s EVENT_TIME_COLUMN is "
                            f"{column!r}")
  typ = schema.BYTES if form == "iso8601" else schema.INT
  form = "seconds" if form == "timestamp" else form  # a dataset's timestamp is its seconds
  return ([(n, typ if n == column else t) for n, t in columns], (column, form, zone),
          form != "seconds")


def in_module_form(batch, event):
  """`batch` with its canonical event-time column (column, form, zone) in the module's form."""
  column, form, zone = event
  i = batch.schema.get_field_index(column)
  return batch.set_column(i, column, event_time.module_form(batch.column(i), form, zone))


def _check_event_time(opts, module, manifest, types):
  """UsageError unless the dataset's event-time column suits the module's EVENT_TIME_FORMAT:
  its type (from the manifest), then every value (spec/event_time.check_values: an instant
  within the plausible years; e.g. an epoch in milliseconds declared as seconds is refused).
  Reading and checking the one column of every shard is cheap: at 1M rows in 4 Parquet shards,
  0.03 s for int64 seconds or milliseconds and 0.17 s for ISO-8601 text (measured 2026-12-05,
  best of 3, on the 2 shared cores)."""
  column, form, zone = event_time.declaration(module)
  if event_time_of(manifest):  # the canonical event time (event_plan), checked as such
    form, zone = "seconds", event_time.DEFAULT_ZONE
  arrow_type = schema.ARROW_TYPES[types[column]]
  try:
    event_time.to_seconds(pa.array([], arrow_type), form, zone)  # the type suits the form
    for values in read_dataset_column(opts.input_dir, manifest, column, arrow_type):
      event_time.check_values(values, column, form, zone)
  except event_time.EventTimeError as e:
    raise common.UsageError(f"--transform_module {opts.transform_module}: {e}") from None


def _check_logged_counts(opts, manifest, aggregates):
  """UsageError, naming the column and a value, unless every value of a logged count (a count
  or count_distinct that serving logged in a FLOAT column, the type ingest gives a side column
  --schema does not type) is a whole number: the window stage takes it as int64."""
  types = {c["name"]: c["type"] for c in manifest["schema"]["columns"]}
  by_name = {a["name"]: a for a in aggregates}
  for column, name in sorted(side_of(manifest)["aggregates"].items()):
    if window.output_type(by_name[name]) != pa.int64() or types[column] != schema.FLOAT:
      continue
    for values in read_dataset_column(opts.input_dir, manifest, column, pa.float64()):
      valid = values.is_valid().to_numpy(zero_copy_only=False)
      f = values.fill_null(0).to_numpy(zero_copy_only=False)
      whole = np.isfinite(f) & (np.floor(f) == f)
      broken = valid & ~(whole & (np.abs(f) < 2.0 ** 53))  # NaN too: it is not a count
      if broken.any():
        i = int(np.flatnonzero(broken)[0])
        why = "is beyond 2**53" if whole[i] else "is not a whole number"
        raise common.UsageError(f"logged aggregate column {column!r}: {float(f[i])!r} {why}, "
                                f"and {name} is a {by_name[name]['fn']}")


def _check_served_predictions(opts, manifest):
  """UsageError, naming the column, unless every served prediction (ingest --served_prediction)
  reads as scores of one width (spec/decision.scores_of_text), checked before anything runs."""
  from transforms.spec import decision
  types = {c["name"]: c["type"] for c in manifest["schema"]["columns"]}
  width = None
  for column in side_of(manifest).get("prediction", {}):
    for values in read_dataset_column(opts.input_dir, manifest, column,
                                      schema.ARROW_TYPES[types[column]]):
      try:
        scores, valid = decision.scores_of_text(values, opts.model_output or None)
      except ValueError as e:
        raise common.UsageError(f"served prediction column {column!r}: {e}") from None
      if valid.any() and width not in (None, scores.shape[1]):
        raise common.UsageError(f"served prediction column {column!r}: {width} and "
                                f"{scores.shape[1]} scores in different shards")
      width = scores.shape[1] if valid.any() else width


def read_dataset_column(input_dir, manifest, column, arrow_type):
  """A column of an ingest dataset (the event time, a logged aggregate), one array per shard in
  manifest order: from its Parquet shards (exact values), or from its TFRecord shards when it
  has no Parquet."""
  shards = manifest["shards"]
  form = "parquet" if any(s["format"] == "parquet" for s in shards) else "tfrecord"
  for shard in (s for s in shards if s["format"] == form):
    with FileSystems.open(FileSystems.join(input_dir, shard["path"]),
                          compression_type="uncompressed") as f:
      if form == "parquet":
        yield pq.read_table(f, columns=[column]).column(column).combine_chunks()
      else:
        yield tfrecord.decode_tfrecord(f.read(), [(column, arrow_type)]).column(
            column).combine_chunks()


# The dataset type a column takes from the transform_fn input dtype it feeds (graph/feed.py
# feed_dtype: INT columns reach TFT as int64, FLOAT as float64, BYTES as string).
_TYPE_OF_DTYPE = {"int64": schema.INT, "float64": schema.FLOAT, "string": schema.BYTES}


def null_columns_retyped(input_dir, manifest, columns, transform_fn_dir):
  """{column: type} of the dataset columns that hold no value at all (null in every record of
  every shard) and whose type is not the one the given transform_fn takes: such a column (a
  sampled log where a sparse column is null throughout, typed BYTES by inference) takes the
  transform_fn's type -- it has no value a type could misread. Any other mismatch is left to
  check_transform_fn_dir to refuse."""
  from transforms.graph import feed
  try:
    inputs = feed.transform_fn_inputs(transform_fn_dir)
  except ValueError:
    return {}  # check_transform_fn_dir names what is wrong with the folder
  out = {}
  for name, typ in columns:
    spec = inputs.get(name)
    want = _TYPE_OF_DTYPE.get(getattr(getattr(spec, "dtype", None), "name", None))
    if want is None or want == typ:
      continue
    if all(arr.null_count == len(arr) for arr in
           read_dataset_column(input_dir, manifest, name, schema.ARROW_TYPES[typ])):
      out[name] = want
  return out
