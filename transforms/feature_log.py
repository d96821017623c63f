"""WriteFeatureLog: the feature log -- one row per record, every stage's fingerprint, by key bucket.

Rows are partitioned into buckets by XXH64-fingerprint({__key__}, LOG_SEED) mod num_buckets
(independent of any profile, so offline and production logs bucket alike) and written as
feature_log/bucket-BBBBB-of-NNNNN.parquet, sorted by key. Columns (manifests/feature_log.schema.json):
  key, event_time, window_start, window_end, shard_id, dropped_stage, drop_reason,
  fp_raw, fp_parse, fp_window, fp_shard, fp_serialize, fp_transform   (uint64, null when the
  record did not reach the stage), then per transformed feature F: fp__F (uint64) and value__F
  (a scalar for one-value features, as tft.TFTransformOutput gives them; else the list).
The bucket's transformed records also go to transformed/bucket-BBBBB-of-NNNNN.tfrecord (sorted
by key). Each bucket yields its digests per stage (transforms/fingerprint.combine_digest of the
stage fingerprints present), which the run metadata carries so a diff can skip equal buckets.

How it is written (the shape of Beam's WriteFiles): the transform output carries the stage
columns (TFT passthrough), so each bundle splits its batches by bucket and writes them as
Arrow IPC part files under a temp folder, right where they are produced; only (bucket, part
path) pairs cross the shuffle. One merge per bucket then reads its parts, sorts them by key
(ties by the stage fingerprints: the result does not depend on bundling) and writes the final
files; the transformed values are fingerprinted there, over the bucket's values as the log holds
them (parts stay small: the part writer shares TFT's transform pass, the merges run two at a
time). Part writing runs one batch ahead on a worker thread and merges on a small thread pool
(Arrow, Parquet and the numba kernels release the GIL); merge results are emitted in
finish_bundle.
"""
import concurrent.futures
import uuid

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows

from transforms import fingerprint, tfrecord
from transforms.key_rows import FP, KEY, RAW_FP
from transforms.ahead import AheadDoFn
from transforms.serialize_records import SERIALIZE_FP
from transforms.shard_records import SHARD_FP, SHARD_ID
from transforms.window_records import DROP_REASON, WINDOW_END, WINDOW_FP, WINDOW_START

__all__ = ["WriteFeatureLog", "STAGES", "FP_STAGES", "RECORD_STAGES", "stage_digests", "LOG_SEED", "bucket_of",
           "bucket_path", "bucket_glob", "passthrough_columns", "passthrough_types", "merge_bucket",
           "dictionary_columns"]

STAGES = ("raw", "parse", "window", "shard", "serialize", "analyze", "transform")
# The stages with a per-record fingerprint column fp_<stage> (analyze is per run).
FP_STAGES = tuple(s for s in STAGES if s != "analyze")
# The stages fingerprinted before TFT: a record whose fingerprint differs at one of them parts
# there, whatever the tolerances.
RECORD_STAGES = FP_STAGES[:-1]
LOG_SEED = 0x5EED
# Stage fingerprint columns in the stage batches (in-pipeline names) -> log column names.
STAGE_COLUMNS = {"raw": RAW_FP, "parse": FP, "window": WINDOW_FP, "shard": SHARD_FP,
                 "serialize": SERIALIZE_FP}
_HEAD = ["key", "event_time", "window_start", "window_end", "shard_id", "dropped_stage",
         "drop_reason"] + [f"fp_{s}" for s in STAGE_COLUMNS]
_PARTS = "feature_log_parts"
EVENT_TIME = "__event_time__"  # the event time, passed through TFT
_ONE_VALUE = b"skewtrace.one_value"  # field metadata of a part column stored flat
_KIND = b"skewtrace.part"  # schema metadata of a part: b"kept" or b"dropped"
_THREADS = 2


def dictionary_columns(names):
  """The log columns worth a Parquet dictionary: all but the key and the fp_<stage> columns,
  which are unique to each record (their dictionary only costs: a 62k-row bucket writes in
  30 ms instead of 42 and takes 6.3 MB instead of 6.8)."""
  unique = {"key"} | {f"fp_{s}" for s in FP_STAGES}
  return [n for n in names if n not in unique]


def bucket_of(keys, num_buckets):
  batch = pa.record_batch([keys], names=[KEY])
  return (fingerprint.fingerprint_batch(batch, seed=LOG_SEED) % np.uint64(num_buckets)) \
      .astype(np.int64)


def bucket_path(bucket, num_buckets):
  return f"feature_log/bucket-{bucket:05d}-of-{num_buckets:05d}.parquet"


def bucket_glob(bucket, num_buckets):
  """The glob of a bucket's files: bucket_path's file, or the parts a production logger wrote
  (bucket-BBBBB-of-NNNNN-part-PPPPPP.parquet); readers take a bucket's rows from it."""
  return f"feature_log/bucket-{bucket:05d}-of-{num_buckets:05d}*.parquet"


def passthrough_columns(event_column):
  """{column: source column} the transform output must carry (besides __key__) for the log:
  the stage columns, and the event time under its own name (it is also a TFT feature)."""
  return {EVENT_TIME: event_column, **{c: c for c in [WINDOW_START, WINDOW_END, SHARD_ID] +
                                       list(STAGE_COLUMNS.values())}}


def passthrough_types(event_type):
  """The Arrow types of passthrough_columns, as the stages produce them."""
  return {EVENT_TIME: event_type, WINDOW_START: pa.int64(), WINDOW_END: pa.int64(),
          SHARD_ID: pa.int64(), RAW_FP: pa.int64(), FP: pa.int64(), WINDOW_FP: pa.uint64(),
          SHARD_FP: pa.uint64(), SERIALIZE_FP: pa.uint64()}


def _as_uint64(column):
  arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
  if pa.types.is_int64(arr.type):
    return pa.array(arr.to_numpy(zero_copy_only=False).view(np.uint64),
                    mask=arr.is_null().to_numpy(zero_copy_only=False))
  return arr.cast(pa.uint64())


def _is_flat(typ):
  return not (pa.types.is_list(typ) or pa.types.is_large_list(typ))


def _one_value(arr):
  """A list column with exactly one value in every row -> those values; else None."""
  if _is_flat(arr.type) or arr.null_count:
    return None
  lengths = pc.list_value_length(arr)
  if len(arr) and (pc.min(lengths).as_py() != 1 or pc.max(lengths).as_py() != 1):
    return None
  return arr.flatten()


def _head(batch, event_column, dropped):
  """The log's stage columns of a batch of dropped records or of transformed ones (their
  event time passed through as EVENT_TIME)."""
  n = batch.num_rows
  cols = {"key": batch.column(KEY).cast(pa.string()),
          "event_time": batch.column(event_column if dropped else EVENT_TIME).cast(pa.int64())}
  if dropped:
    cols.update({"window_start": pa.nulls(n, pa.int64()), "window_end": pa.nulls(n, pa.int64()),
                 "shard_id": pa.nulls(n, pa.int64()),
                 "dropped_stage": pa.array(["window"] * n, pa.string()),
                 "drop_reason": batch.column(DROP_REASON).cast(pa.string())})
  else:
    cols.update({"window_start": batch.column(WINDOW_START),
                 "window_end": batch.column(WINDOW_END), "shard_id": batch.column(SHARD_ID),
                 "dropped_stage": pa.nulls(n, pa.string()),
                 "drop_reason": pa.nulls(n, pa.string())})
  for s, c in STAGE_COLUMNS.items():
    cols[f"fp_{s}"] = (pa.nulls(n, pa.uint64()) if dropped and s not in ("raw", "parse")
                       else _as_uint64(batch.column(c)))
  return cols


class _WritePartsFn(AheadDoFn):
  """A batch -> one Arrow IPC part file per bucket it touches; yields (bucket, part path).

  Runs one batch ahead on a worker thread (AheadDoFn), overlapping TFT's transform of the next
  batch. Transformed features whose every row holds one value are stored flat (marked in the
  field metadata); the merge keeps them flat when all of a bucket's parts do (else lists).
  """

  def __init__(self, temp_dir, num_buckets, event_column, dropped):
    self._dir = FileSystems.join(temp_dir, _PARTS)
    self._num_buckets = num_buckets
    self._event_column = event_column
    self._dropped = dropped

  def work(self, element):
    return self._write(element) if element.num_rows else []

  def _write(self, batch):
    cols = _head(batch, self._event_column, self._dropped)
    fields = [pa.field(name, arr.type) for name, arr in cols.items()]
    arrays = list(cols.values())
    if not self._dropped:
      skip = {KEY} | set(passthrough_columns(self._event_column))
      names = sorted(n for n in batch.schema.names if n not in skip)
      flats = [_one_value(batch.column(n)) for n in names]
      for name, flat in zip(names, flats):
        column = batch.column(name) if flat is None else flat
        fields.append(pa.field(f"value__{name}", column.type,
                               metadata=None if flat is None else {_ONE_VALUE: b"1"}))
        arrays.append(column)
    table = pa.Table.from_arrays(arrays, schema=pa.schema(
        fields, metadata={_KIND: b"dropped" if self._dropped else b"kept"}))
    buckets = bucket_of(cols["key"], self._num_buckets)
    order = np.argsort(buckets, kind="stable")
    table = table.take(pa.array(order))
    bounds = np.searchsorted(buckets[order], np.arange(self._num_buckets + 1))
    out = []
    for b in range(self._num_buckets):
      lo, hi = int(bounds[b]), int(bounds[b + 1])
      if hi > lo:
        path = FileSystems.join(self._dir, f"{uuid.uuid4().hex}-{b:05d}.arrow")
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as w:
          w.write_table(table.slice(lo, hi - lo))
        with FileSystems.create(path) as f:
          f.write(memoryview(sink.getvalue()))
        out.append((b, path))
    return out


def _read_part(path):
  with FileSystems.open(path, compression_type="uncompressed") as f:
    return pa.ipc.open_stream(pa.py_buffer(f.read())).read_all()


def _feature_column(parts, name):
  """The bucket's column value__F, from its kept parts: flat when every part is one-valued
  (what tft.TFTransformOutput gives for a one-value feature), else the lists."""
  fields = [t.schema.field(name) for t in parts]
  if all(f.metadata and f.metadata.get(_ONE_VALUE) for f in fields):
    return pa.chunked_array([c for t in parts for c in t.column(name).chunks],
                            fields[0].type).combine_chunks()
  list_type = next(f.type for f in fields if not (f.metadata and f.metadata.get(_ONE_VALUE)))
  chunks = []
  for t, f in zip(parts, fields):
    arr = t.column(name).combine_chunks()
    if f.metadata and f.metadata.get(_ONE_VALUE):
      offsets = np.arange(len(arr) + 1, dtype=np.int64 if pa.types.is_large_list(list_type)
                          else np.int32)
      arr = type(pa.array([], list_type)).from_arrays(pa.array(offsets), arr)
    chunks.append(arr)
  return pa.chunked_array(chunks, list_type).combine_chunks()


def _sorted(table):
  """By key; ties (duplicate keys) by the stage fingerprints, so bundling never shows."""
  keys = [("key", "ascending")] + [(f"fp_{s}", "ascending") for s in STAGES if s != "analyze"]
  return table.take(pc.sort_indices(table, keys))


def _kept_log(parts):
  """The log rows of a bucket's transformed records: stage columns, fp_transform, fp__F and
  value__F per feature F (sorted by name); the fingerprints are over the values as the log
  holds them."""
  names = sorted(n[len("value__"):] for n in parts[0].schema.names if n.startswith("value__"))
  head = pa.concat_tables([t.select(_HEAD) for t in parts])
  values = pa.table([_feature_column(parts, "value__" + n) for n in names], names=names)
  record_fp, feature_fps = fingerprint.fingerprint_fields(values)
  cols = {c: head.column(c) for c in _HEAD}
  cols["fp_transform"] = pa.array(record_fp)
  for n in names:
    cols[f"fp__{n}"] = pa.array(feature_fps[n])
    cols[f"value__{n}"] = values.column(n)
  return pa.table(cols), names


def merge_bucket(temp_dir, num_buckets, bucket, paths):
  """Reads a bucket's parts, writes its log and transformed files; returns its info dict.

  A bucket holding dropped records only has no fp__F / value__F columns (nothing of its
  records reached the transform stage)."""
  parts = [_read_part(p) for p in sorted(paths)]
  kept = [t for t in parts if t.schema.metadata.get(_KIND) == b"kept"]
  dropped = [t for t in parts if t.schema.metadata.get(_KIND) == b"dropped"]
  logs, names = [], None
  if kept:
    log, names = _kept_log(kept)
    logs.append(log)
  if dropped:
    head = pa.concat_tables([t.select(_HEAD) for t in dropped])
    logs.append(head.append_column("fp_transform", pa.nulls(head.num_rows, pa.uint64())))
  log = _sorted(pa.concat_tables(logs, promote_options="default")).combine_chunks()
  log = pa.Table.from_arrays(log.columns, names=log.schema.names)  # no part metadata
  if names is not None:
    _write_transformed(temp_dir, num_buckets, bucket, log, names)
  sink = pa.BufferOutputStream()
  pq.write_table(log, sink, use_dictionary=dictionary_columns(log.schema.names))
  path = bucket_path(bucket, num_buckets)
  with FileSystems.create(FileSystems.join(temp_dir, path)) as f:
    f.write(memoryview(sink.getvalue()))
  digests = {s: fingerprint.digest_hex(d) for s, d in stage_digests(log).items()}
  return {"bucket": bucket, "path": path, "rows": log.num_rows,
          "dropped": log.num_rows - log.column("dropped_stage").null_count, "digests": digests}


def stage_digests(log):
  """{stage: combine_digest of the log rows' non-null fp_<stage>} for every FP_STAGES stage:
  the per-bucket digests run metadata carry and the diff compares to skip equal buckets."""
  return {s: fingerprint.combine_digest(log.column(f"fp_{s}").drop_null().to_numpy())
          for s in FP_STAGES}


def _write_transformed(temp_dir, num_buckets, bucket, log, names):
  """The bucket's transformed records (its kept rows, by key) as tf.Examples."""
  kept = log.filter(log.column("dropped_stage").is_null())
  for name in names:
    if not _is_flat(kept.column(f"value__{name}").type):
      raise ValueError(f"transformed feature {name!r} has several values per record; "
                       "only one-value features are written to transformed/")
  table = pa.table([kept.column("key")] + [kept.column(f"value__{n}") for n in names],
                   names=[KEY] + names)
  path = f"transformed/bucket-{bucket:05d}-of-{num_buckets:05d}.tfrecord"
  with FileSystems.create(FileSystems.join(temp_dir, path)) as f:
    f.write(memoryview(tfrecord.encode_tfrecord(table.combine_chunks())))


class _MergeBucketsFn(beam.DoFn):
  """(bucket, part paths) -> the bucket's info dict; buckets merge on a small thread pool."""

  def __init__(self, temp_dir, num_buckets):
    self._temp_dir = temp_dir
    self._num_buckets = num_buckets

  def setup(self):
    self._pool = concurrent.futures.ThreadPoolExecutor(_THREADS)

  def start_bundle(self):
    self._pending = []

  def process(self, element):
    bucket, paths = element
    self._pending.append(self._pool.submit(merge_bucket, self._temp_dir, self._num_buckets,
                                           bucket, list(paths)))

  def finish_bundle(self):
    pending, self._pending = self._pending, []
    for future in pending:
      yield GlobalWindows.windowed_value(future.result())

  def teardown(self):
    self._pool.shutdown()


class WriteFeatureLog(beam.PTransform):
  """(transformed batches with the stage columns passed through, dropped batches) -> one info
  dict per bucket written."""

  def __init__(self, temp_dir, num_buckets, event_column):
    super().__init__()
    self._temp_dir = temp_dir
    self._num_buckets = num_buckets
    self._event_column = event_column

  def expand(self, pcolls):
    transformed, dropped = pcolls
    args = (self._temp_dir, self._num_buckets, self._event_column)
    parts = (
        transformed | "WriteTransformedParts" >> beam.ParDo(_WritePartsFn(*args, False)),
        dropped | "WriteDroppedParts" >> beam.ParDo(_WritePartsFn(*args, True)),
    ) | "AllParts" >> beam.Flatten()
    return (parts
            | "GroupByBucket" >> beam.GroupByKey()
            | "MergeBuckets" >> beam.ParDo(_MergeBucketsFn(self._temp_dir, self._num_buckets)))
