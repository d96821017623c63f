"""WriteFeatureLog: the feature log -- one row per record, every stage's fingerprint, by key bucket.

Rows are partitioned into buckets by XXH64-fingerprint({__key__}, LOG_SEED) mod num_buckets
(independent of any profile, so offline and production logs bucket alike) and written as
feature_log/bucket-BBBBB-of-NNNNN.parquet, sorted by key. Columns (manifests/feature_log.schema.json):
  key, event_time, window_start, window_end, shard_id, dropped_stage, drop_reason,
  fp_raw, fp_parse, fp_window, fp_shard, fp_serialize, fp_transform   (uint64, null when the
  record did not reach the stage), then per transformed feature F: fp__F (uint64) and value__F
  (a scalar for one-value features, as tft.TFTransformOutput gives them; else the list).
Each bucket also yields its digests per stage (transforms/fingerprint.combine_digest of the
stage fingerprints present), which the run metadata carries so a diff can skip equal buckets.
"""
import io

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from transforms import fingerprint, tfrecord
from transforms.key_rows import FP, KEY, RAW_FP

__all__ = ["WriteFeatureLog", "STAGES", "LOG_SEED", "bucket_of", "bucket_path"]

STAGES = ("raw", "parse", "window", "shard", "serialize", "analyze", "transform")
LOG_SEED = 0x5EED
# Stage fingerprint columns in the stage batches (in-pipeline names) -> log column names.
STAGE_COLUMNS = {"raw": RAW_FP, "parse": FP, "window": "__window_fp__", "shard": "__shard_fp__",
                 "serialize": "__serialize_fp__"}


def bucket_of(keys, num_buckets):
  batch = pa.record_batch([keys], names=[KEY])
  return (fingerprint.fingerprint_batch(batch, seed=LOG_SEED) % np.uint64(num_buckets)) \
      .astype(np.int64)


def bucket_path(bucket, num_buckets):
  return f"feature_log/bucket-{bucket:05d}-of-{num_buckets:05d}.parquet"


def _split(batch, num_buckets, columns=None):
  """(bucket, the bucket's rows) for each bucket in the batch; only `columns` are kept."""
  if columns is not None:
    batch = batch.select(columns)
  buckets = bucket_of(batch.column(KEY), num_buckets)
  for b in np.unique(buckets):
    yield int(b), batch.filter(pa.array(buckets == b))


def _as_uint64(column):
  arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
  if pa.types.is_int64(arr.type):
    return pa.array(arr.to_numpy(zero_copy_only=False).view(np.uint64),
                    mask=arr.is_null().to_numpy(zero_copy_only=False))
  return arr.cast(pa.uint64())


class _WriteBucketFn(beam.DoFn):

  def __init__(self, temp_dir, num_buckets, event_column):
    self._temp_dir = temp_dir
    self._num_buckets = num_buckets
    self._event_column = event_column

  def _stage_table(self, batches, dropped):
    parts = []
    for b in batches:
      t = pa.table({
          "key": b.column(KEY).cast(pa.string()),
          "event_time": b.column(self._event_column).cast(pa.int64()),
          "window_start": b.column("__window_start__"), "window_end": b.column("__window_end__"),
          "shard_id": b.column("__shard_id__"),
          "dropped_stage": pa.nulls(b.num_rows, pa.string()),
          "drop_reason": pa.nulls(b.num_rows, pa.string()),
          **{f"fp_{s}": _as_uint64(b.column(c)) for s, c in STAGE_COLUMNS.items()}})
      parts.append(t)
    for b in dropped:
      n = b.num_rows
      t = pa.table({
          "key": b.column(KEY).cast(pa.string()),
          "event_time": b.column(self._event_column).cast(pa.int64()),
          "window_start": pa.nulls(n, pa.int64()), "window_end": pa.nulls(n, pa.int64()),
          "shard_id": pa.nulls(n, pa.int64()),
          "dropped_stage": pa.array(["window"] * n, pa.string()),
          "drop_reason": b.column("__drop_reason__").cast(pa.string()),
          **{f"fp_{s}": (_as_uint64(b.column(c)) if s in ("raw", "parse")
                         else pa.nulls(n, pa.uint64())) for s, c in STAGE_COLUMNS.items()}})
      parts.append(t)
    return pa.concat_tables(parts) if parts else None

  def process(self, element):
    bucket, grouped = element
    stages = self._stage_table(grouped["stages"], grouped["dropped"])
    if stages is None:
      return
    transformed = list(grouped["transformed"])
    if transformed:
      tt = pa.Table.from_batches(transformed).combine_chunks()
      tt = tt.take(pc.sort_indices(tt, [(KEY, "ascending")]))
      names = sorted(n for n in tt.schema.names if n != KEY)
      values = pa.table([_scalar_if_one_value(tt.column(n)) for n in names], names=names)
      self._write_transformed(bucket, tt.column(KEY), values)
      fps = {name: fingerprint.fingerprint_batch(values, [name]) for name in names}
      whole = fingerprint.fingerprint_batch(values)
      cols = {"key": tt.column(KEY).cast(pa.string()), "fp_transform": pa.array(whole)}
      for name in names:
        cols[f"fp__{name}"] = pa.array(fps[name])
        cols[f"value__{name}"] = values.column(name)
      right = pa.table(cols)
      # Align by key (vectorised): stage rows without a transformed row get nulls.
      idx = pc.index_in(stages.column("key"), value_set=right.column("key"))
      log = stages
      for name in right.schema.names[1:]:
        log = log.append_column(name, right.column(name).take(idx))
    else:
      log = stages.append_column("fp_transform", pa.nulls(stages.num_rows, pa.uint64()))
    log = log.take(pc.sort_indices(log, [("key", "ascending")]))
    order = ["key", "event_time", "window_start", "window_end", "shard_id", "dropped_stage",
             "drop_reason"] + [f"fp_{s}" for s in STAGES if s != "analyze"]
    order += [c for c in log.schema.names if c not in order]
    log = log.select(order)
    sink = io.BytesIO()
    pq.write_table(log, sink)
    path = bucket_path(bucket, self._num_buckets)
    with FileSystems.create(FileSystems.join(self._temp_dir, path)) as f:
      f.write(sink.getvalue())
    digests = {}
    for stage in STAGES:
      if stage == "analyze":
        continue
      col = log.column(f"fp_{stage}").drop_null().to_numpy()
      digests[stage] = fingerprint.digest_hex(fingerprint.combine_digest(col))
    yield {"bucket": bucket, "path": path, "rows": log.num_rows,
           "dropped": log.num_rows - log.column("dropped_stage").null_count,
           "digests": digests}

  def _write_transformed(self, bucket, keys, values):
    """The bucket's transformed records as tf.Examples."""
    for name in values.schema.names:
      if not _is_flat(values.column(name).type):
        raise ValueError(f"transformed feature {name!r} has several values per record; "
                         "only one-value features are written to transformed/")
    table = pa.table([keys.cast(pa.string())] + list(values.columns),
                     names=[KEY] + values.schema.names)
    path = f"transformed/bucket-{bucket:05d}-of-{self._num_buckets:05d}.tfrecord"
    with FileSystems.create(FileSystems.join(self._temp_dir, path)) as f:
      f.write(memoryview(tfrecord.encode_tfrecord(table)))


def _is_flat(typ):
  return not (pa.types.is_list(typ) or pa.types.is_large_list(typ))


def _scalar_if_one_value(column):
  """TFT emits a one-value feature (FixedLenFeature []) as one-element lists; production's
  tft.TFTransformOutput gives it as a scalar. Both are logged as the scalar."""
  arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
  if _is_flat(arr.type):
    return arr
  lengths = pc.list_value_length(arr)
  if arr.null_count or pc.min(lengths).as_py() != 1 or pc.max(lengths).as_py() != 1:
    return arr
  return arr.flatten()


class WriteFeatureLog(beam.PTransform):
  """(stage batches, dropped batches, transformed batches) -> one info dict per bucket written."""

  def __init__(self, temp_dir, num_buckets, event_column):
    super().__init__()
    self._args = (temp_dir, num_buckets, event_column)
    self._num_buckets = num_buckets

  def expand(self, pcolls):
    stages, dropped, transformed = pcolls
    n = self._num_buckets
    event = self._args[2]
    stage_columns = [KEY, event, "__window_start__", "__window_end__", "__shard_id__"] + \
        list(STAGE_COLUMNS.values())
    dropped_columns = [KEY, event, "__drop_reason__", RAW_FP, FP]
    keyed = {
        "stages": stages | "BucketStages" >> beam.FlatMap(_split, n, stage_columns),
        "dropped": dropped | "BucketDropped" >> beam.FlatMap(_split, n, dropped_columns),
        "transformed": transformed | "BucketTransformed" >> beam.FlatMap(_split, n),
    }
    return (keyed | "GroupByBucket" >> beam.CoGroupByKey()
            | "WriteBucket" >> beam.ParDo(_WriteBucketFn(*self._args)))
