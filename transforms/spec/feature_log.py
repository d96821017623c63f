"""The feature-log format: one row per record, every stage's fingerprint, split by key bucket.

Rows are partitioned into buckets by XXH64-fingerprint({__key__}, LOG_SEED) mod num_buckets
(independent of any profile, so offline and production logs bucket alike). The job writes a
bucket as feature_log/bucket-BBBBB-of-NNNNN.parquet, the production logger as parts
feature_log/bucket-BBBBB-of-NNNNN-part-PPPPPP.parquet; readers take a bucket's rows from
bucket_glob. Columns (manifests/feature_log.schema.json): HEAD (key, event time, window, shard,
drop stage and reason, fp_<stage> for every FP_STAGES stage), then aggregate__A per
windowed aggregate A in name order (its value as the window stage computed it, before the
serialize round trip, in spec/window.output_type: int64 for counts, float64 for sum/mean/min/
max; null where the record did not reach TFT), then
per transformed feature F:
fp__F (uint64) and value__F (a scalar for one-value features, as tft.TFTransformOutput gives
them; else the list); per feature F serving logged a value of, served__F (that value, in
value__F's type); with a logger's log_inputs, input__C per record column C (the cell's
canonical text, spec/values.py: what the raw stage fingerprints); with a model (the optional
`predict` stage, spec/decision.py), fp_predict (uint64), prediction (list<float64>: the model's
scores) and decision (list<int64>), null where the record did not reach the model. Each bucket's digests per
stage (fingerprint.combine_digest of the stage fingerprints present) go to the run metadata,
so a diff can skip equal buckets.

Column names are built and read only here: fp_column / value_column / feature_fp_column, and
feature_of / stage_of to read a name back.
"""
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.spec import fingerprint
from transforms.spec.key import key_hash
from transforms.spec.stages import FP_STAGES, LOG_HASH, OPTIONAL_STAGES, RAW_FP, RULES

__all__ = ["LOG_DIR", "TRANSFORMED_DIR", "TRANSFORM_FN_DIR", "ASSETS_DIR", "LOG_SEED", "KEY",
           "EVENT_TIME", "WINDOW_START", "WINDOW_END", "SHARD_ID", "DROPPED_STAGE", "DROP_REASON",
           "PREDICTION", "DECISION", "SERVED_PREDICTION", "HEAD", "STAGE_COLUMNS", "fp_column", "value_column", "served_column",
           "aggregate_column", "aggregates_of", "input_column", "inputs_of", "feature_fp_column",
           "feature_of", "is_served_column", "served_of", "cast_served", "served_values",
           "model_inputs",
           "features_of", "is_value_column", "is_feature_fp_column", "dictionary_columns",
           "parquet_options", "read_options", "log_hash", "KEY_DIGEST", "MAX_BUCKETS",
           "bucket_of", "buckets_of", "bucket_path", "bucket_glob", "part_path", "is_part_file", "transformed_path",
           "passthrough_columns", "passthrough_types", "stage_digests"]

LOG_DIR, TRANSFORMED_DIR, TRANSFORM_FN_DIR = "feature_log", "transformed", "transform_fn"
# Inside a transform_fn folder: TFT's saved function (tft.TFTransformOutput.TRANSFORM_FN_DIR)
# and its SavedModel assets, where vocabulary files live.
ASSETS_DIR = ("transform_fn", "assets")
LOG_SEED = 0x5EED
KEY, EVENT_TIME, WINDOW_START, WINDOW_END, SHARD_ID = (
    "key", "event_time", "window_start", "window_end", "shard_id")
DROPPED_STAGE, DROP_REASON = "dropped_stage", "drop_reason"
PREDICTION, DECISION = "prediction", "decision"  # the predict stage's values (spec/decision.py)
# A head part's column of the served prediction (ingest --served_prediction), read by the merge
# into `prediction`; not a column of the log.
SERVED_PREDICTION = "served_prediction"
_FP, _VALUE, _FEATURE_FP, _SERVED = "fp_", "value__", "fp__", "served__"
_AGGREGATE, _INPUT = "aggregate__", "input__"


def fp_column(stage):
  """The log column of a stage's per-record fingerprint: fp_<stage>."""
  return _FP + stage


def value_column(feature):
  """The log column of a transformed feature's value: value__<feature>."""
  return _VALUE + feature


def aggregate_column(name):
  """The log column of a windowed aggregate's value before TFT: aggregate__<name>."""
  return _AGGREGATE + name


def aggregates_of(names):
  """The sorted windowed aggregates a log's column names hold values of."""
  return sorted(name[len(_AGGREGATE):] for name in names if name.startswith(_AGGREGATE))


def input_column(name):
  """The log column of a record column's canonical input text: input__<name>."""
  return _INPUT + name


def inputs_of(names):
  """The record columns a log's column names hold input text of (in log order)."""
  return [name[len(_INPUT):] for name in names if name.startswith(_INPUT)]


def served_column(feature):
  """The log column of the value serving fed the model for a feature: served__<feature>."""
  return _SERVED + feature


def is_served_column(name):
  return name.startswith(_SERVED)


def served_of(names):
  """The sorted features a log's column names hold served values of."""
  return sorted(name[len(_SERVED):] for name in names if is_served_column(name))


def cast_served(column, value_type):
  """Served values in the type of the transformed feature they stand for (what the model got is
  compared as the model takes it: a float64 logged value as the float32 it was fed); None when
  the feature holds several values per record (only one-value features can be served)."""
  if pa.types.is_list(value_type) or pa.types.is_large_list(value_type):
    return None
  return column.cast(value_type, safe=False)


def served_values(column, values, feature, where):
  """A served side column in the type of the transformed feature it names, from the table of
  transformed `values` (cast_served); ValueError naming `where` when the transform does not
  output that feature or the feature holds several values per record."""
  if feature not in values.schema.names:
    raise ValueError(f"{where}: served values name feature {feature!r}, which the transform "
                     f"does not output ({', '.join(values.schema.names)})")
  column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
  cast = cast_served(column, values.schema.field(feature).type)
  if cast is None:
    raise ValueError(f"served feature {feature!r} has several values per record; only "
                     "one-value features can be served")
  return cast


def model_inputs(values, served):
  """What the model received (the `serve` stage's fields): a table of the transformed `values`
  where each feature F with a served array in `served` ({F: array cast to the value's type})
  takes the served value, and the transformed one where serving logged none (null)."""
  cols = []
  for name in values.schema.names:
    col = values.column(name)
    if name in served:
      col = pc.if_else(served[name].is_valid(), served[name], col)
    cols.append(col)
  return pa.table(cols, names=values.schema.names)


def feature_fp_column(feature):
  """The log column of a transformed feature's own fingerprint: fp__<feature>."""
  return _FEATURE_FP + feature


def is_value_column(name):
  return name.startswith(_VALUE)


def is_feature_fp_column(name):
  return name.startswith(_FEATURE_FP)


def feature_of(name):
  """The feature of a value__F or fp__F column; None for any other column."""
  for prefix in (_VALUE, _FEATURE_FP):
    if name.startswith(prefix):
      return name[len(prefix):]
  return None


def features_of(names):
  """The sorted transformed features of a log's column names (from its value__F columns)."""
  return sorted(feature_of(n) for n in names if is_value_column(n))


# The stage columns every log row has, in order, with their Arrow types.
HEAD = ([(KEY, pa.string()), (EVENT_TIME, pa.int64()), (WINDOW_START, pa.int64()),
         (WINDOW_END, pa.int64()), (SHARD_ID, pa.int64()), (DROPPED_STAGE, pa.string()),
         (DROP_REASON, pa.string())] + [(fp_column(s), pa.uint64()) for s in FP_STAGES])
# Each stage fingerprinted before TFT -> the in-pipeline column of its fingerprint.
STAGE_COLUMNS = {s.name: s.column for s in RULES if s.column is not None}


def dictionary_columns(names):
  """The log columns worth a Parquet dictionary: all but the key and the fp_<stage> columns,
  which are unique to each record (their dictionary only costs: a 62k-row bucket writes in
  30 ms instead of 42 and takes 6.3 MB instead of 6.8)."""
  unique = {KEY} | {fp_column(s) for s in FP_STAGES + OPTIONAL_STAGES} | {PREDICTION}
  return [n for n in names if n not in unique]


def parquet_options(names):
  """pyarrow.parquet.write_table options of every feature-log file, job and logger alike: the
  dictionary columns, and a CRC-32 checksum per page, so a flipped byte in a page that still
  decodes is an error where the log is read (read_options), not another value."""
  return {"use_dictionary": dictionary_columns(names), "write_page_checksum": True}


def read_options():
  """pyarrow.parquet.read_table options of a feature-log reader: page checksums verified."""
  return {"page_checksum_verification": True}


def log_hash(keys):
  """uint64[n]: each key's XXH64 fingerprint {__key__: key} with LOG_SEED."""
  return key_hash(keys, LOG_SEED)


def buckets_of(hashes, num_buckets):
  """int64[n]: the log bucket of each log hash."""
  return (hashes % np.uint64(num_buckets)).astype(np.int64)


def bucket_of(keys, num_buckets):
  """int64[n]: the log bucket of each key."""
  return buckets_of(log_hash(keys), num_buckets)


def _bucket_stem(bucket, num_buckets):
  return f"{LOG_DIR}/bucket-{bucket:05d}-of-{num_buckets:05d}"


def bucket_path(bucket, num_buckets):
  """The job's file of a bucket (relative to the run's folder)."""
  return _bucket_stem(bucket, num_buckets) + ".parquet"


def part_path(bucket, num_buckets, part):
  """A production logger's part of a bucket (relative to the log's folder)."""
  return f"{_bucket_stem(bucket, num_buckets)}-part-{part:06d}.parquet"


_PART = re.compile(r"^bucket-\d{5}-of-\d{5}-part-\d{6}\.parquet$")


def is_part_file(name):
  """Whether a file name in LOG_DIR is a logger's part file."""
  return bool(_PART.match(name))


def bucket_glob(bucket, num_buckets):
  """The glob of a bucket's files: bucket_path's file, or the parts a production logger wrote;
  readers take a bucket's rows from it."""
  return _bucket_stem(bucket, num_buckets) + "*.parquet"


def transformed_path(bucket, num_buckets):
  """The bucket's transformed records (tf.Examples), relative to the run's folder."""
  return f"{TRANSFORMED_DIR}/bucket-{bucket:05d}-of-{num_buckets:05d}.tfrecord"


def passthrough_columns():
  """{column: source column} the transform output must carry for the log: the log hash and
  the raw fingerprint, by which the merge finds each transformed row's stage columns (written
  before TFT): 16 bytes a record through TFT's materialised input instead of all of them."""
  return {LOG_HASH: LOG_HASH, RAW_FP: RAW_FP}


def passthrough_types():
  """The Arrow types of passthrough_columns, as the stages produce them."""
  return {LOG_HASH: pa.uint64(), RAW_FP: pa.int64()}


# The digest, beside the stages', of every row's key: combine_digest of their log_hash. It
# covers the key the way the stage digests cover the fingerprints, so a key changed on disk
# does not verify (a run metadata bucket entry without it, from before it, is not checked).
KEY_DIGEST = "key"
MAX_BUCKETS = 99999  # the five digits of a bucket's file name (_bucket_stem)


def stage_digests(log, key_hashes=None):
  """{stage: combine_digest of the log rows' non-null fp_<stage>} for every FP_STAGES stage and
  every OPTIONAL_STAGES stage whose column the log has, and KEY_DIGEST: combine_digest of
  every row's key log_hash (`key_hashes` when the caller has them) -- the per-bucket digests
  run metadata carry, which verify recomputes and the diff compares to skip equal buckets."""
  out = {s: fingerprint.combine_digest(log.column(fp_column(s)).drop_null().to_numpy())
         for s in FP_STAGES + OPTIONAL_STAGES if fp_column(s) in log.schema.names}
  if key_hashes is None:
    key_hashes = log_hash(log.column(KEY).combine_chunks())
  out[KEY_DIGEST] = fingerprint.combine_digest(key_hashes)
  return out
