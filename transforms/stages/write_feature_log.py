"""WriteFeatureLog: the feature log (format: spec/feature_log.py) and transformed/, by key bucket.

How it is written (the shape of Beam's WriteFiles): the records going into TFT have their stage
columns written right there, one Arrow IPC "head" part file per bucket per batch (with
LOG_HASH, their bucket hash); TFT carries only LOG_HASH and the raw fingerprint through
(passthrough), and its output is written the same way as "kept" parts of transformed values;
dropped records as "dropped" parts. Only (bucket, part path) pairs cross the shuffle. One merge
per bucket then reads its parts, lines the transformed values up with their stage columns by
(LOG_HASH, fp_raw) (equal pairs are the same raw record, equal through every stage, so any
pairing of them is the same), sorts the rows by key (ties by the stage fingerprints: the result
does not depend on bundling) and writes the final files; the transformed values are
fingerprinted there, over the bucket's values as the log holds them (the merges run two at a
time). The bucket's transformed records also go to transformed/bucket-BBBBB-of-NNNNN.tfrecord
(sorted by key). Part writing runs one batch ahead on worker threads and merges on a small
thread pool (Arrow, Parquet and the numba kernels release the GIL); merge results are emitted in
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

from transforms.beam import arrow_coder  # noqa: F401  (registers the RecordBatch coder)
from transforms.beam.ahead import AheadDoFn
from transforms.beam.progress import stage_counter
from transforms.codec import tfrecord
from transforms.spec import decision, event_time
from transforms.model import predict as predict_records
from transforms.spec import feature_log as log_format
from transforms.spec import fingerprint
from transforms.spec.pii import Pii
from transforms.spec.feature_log import (DROP_REASON as LOG_DROP_REASON, DROPPED_STAGE,
                                         EVENT_TIME, HEAD, KEY as LOG_KEY, SHARD_ID as LOG_SHARD_ID,
                                         STAGE_COLUMNS, WINDOW_END as LOG_WINDOW_END,
                                         WINDOW_START as LOG_WINDOW_START, bucket_path,
                                         aggregate_column, aggregates_of, buckets_of,
                                         fp_column, parquet_options,
                                         feature_fp_column, log_hash, model_inputs,
                                         passthrough_columns, served_column, served_of,
                                         stage_digests, transformed_path, value_column)
from transforms.spec.stages import (DROP_REASON, KEY, LOG_HASH, PREDICT, RAW, RAW_FP,
                                    RECORD_STAGES, SERVE, SHARD_ID, STAGES, TRANSFORM, WINDOW,
                                    WINDOW_END, WINDOW_START)
from transforms.spec.window import event_seconds, window_value_column

__all__ = ["WriteFeatureLog", "merge_bucket", "with_log_hash"]

_FP_RAW, _FP_TRANSFORM, _FP_SERVE = (fp_column(RAW.name), fp_column(TRANSFORM.name),
                                     fp_column(SERVE.name))
# The stage columns the parts carry: all but fp_transform and fp_serve, which the merge computes.
_HEAD = [name for name, _ in HEAD if name not in (_FP_TRANSFORM, _FP_SERVE)]
_PARTS = "feature_log_parts"
_ONE_VALUE = b"skewtrace.one_value"  # field metadata of a part column stored flat
_KIND = b"skewtrace.part"  # schema metadata of a part: b"head", b"kept" or b"dropped"
_THREADS = 2


def with_log_hash(batch, pii=Pii()):
  """batch + LOG_HASH (uint64), the column the log's part writers bucket kept records by: the
  log hash of the key as the log holds it (hashed when the key is PII, spec/pii.py)."""
  keys = pii.hashed(batch.column(KEY)) if pii.key else batch.column(KEY)
  return batch.append_column(LOG_HASH, pa.array(log_hash(keys)))


def _as_uint64(column):
  arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
  if pa.types.is_int64(arr.type):  # the same 64 bits read unsigned, nulls kept (zero copy)
    return arr.view(pa.uint64())
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


def _head(batch, event, dropped, served=(), aggregates=(), pii=Pii(), prediction=None):
  """The log's stage columns of a batch of dropped records or of records going into TFT;
  event: (column, format, zone), the event time logged in Unix seconds (spec/window.py);
  served: ((side column, feature), ...), logged as served__F for records going into TFT;
  aggregates: the windowed aggregates' names, logged as aggregate__A for those records (the
  window stage's value, spec/window.window_value_column); pii:
  the key logged hashed when it is PII; prediction: the served-prediction side column, carried
  as SERVED_PREDICTION for records going into TFT."""
  n = batch.num_rows
  column, form, zone = event
  key = batch.column(KEY)
  cols = {LOG_KEY: pii.hashed(key) if pii.key else key.cast(pa.string()),
          EVENT_TIME: event_seconds(batch.column(column), form, zone)}
  if dropped:  # dropped records come from the window stage (parse drops stay in ingest)
    cols.update({LOG_WINDOW_START: pa.nulls(n, pa.int64()),
                 LOG_WINDOW_END: pa.nulls(n, pa.int64()), LOG_SHARD_ID: pa.nulls(n, pa.int64()),
                 DROPPED_STAGE: pa.array([WINDOW.name] * n, pa.string()),
                 LOG_DROP_REASON: batch.column(DROP_REASON).cast(pa.string())})
  else:
    cols.update({LOG_WINDOW_START: batch.column(WINDOW_START),
                 LOG_WINDOW_END: batch.column(WINDOW_END), LOG_SHARD_ID: batch.column(SHARD_ID),
                 DROPPED_STAGE: pa.nulls(n, pa.string()),
                 LOG_DROP_REASON: pa.nulls(n, pa.string())})
  reached = STAGES[:STAGES.index(WINDOW.name)]  # what a record dropped at `window` reached
  for s, c in STAGE_COLUMNS.items():
    cols[fp_column(s)] = (pa.nulls(n, pa.uint64()) if dropped and s not in reached
                       else _as_uint64(batch.column(c)))
  if not dropped:
    for column, feature in served:
      cols[served_column(feature)] = batch.column(column)
    for name in sorted(aggregates):  # the window stage's value, in its spec/window.output_type
      cols[aggregate_column(name)] = batch.column(window_value_column(name))
    if prediction:
      cols[log_format.SERVED_PREDICTION] = batch.column(prediction)
  return cols


def _write_parts(directory, num_buckets, table, hashes, kind):
  """The table's rows split by bucket (hashes mod num_buckets) into Arrow IPC part files of
  `kind`; returns [(bucket, part path)]."""
  buckets = buckets_of(hashes, num_buckets)
  order = np.argsort(buckets, kind="stable")
  table = table.take(pa.array(order)).replace_schema_metadata({_KIND: kind})
  bounds = np.searchsorted(buckets[order], np.arange(num_buckets + 1))
  out = []
  for b in range(num_buckets):
    lo, hi = int(bounds[b]), int(bounds[b + 1])
    if hi > lo:
      path = FileSystems.join(directory, f"{uuid.uuid4().hex}-{b:05d}.arrow")
      sink = pa.BufferOutputStream()
      with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table.slice(lo, hi - lo))
      with FileSystems.create(path) as f:
        f.write(memoryview(sink.getvalue()))
      out.append((b, path))
  return out


class _WriteHeadPartsFn(AheadDoFn):
  """Records going into TFT (with LOG_HASH), or dropped ones -> their stage columns as one
  Arrow IPC part file per bucket; yields (bucket, part path). One batch ahead on a worker
  thread (AheadDoFn), overlapping TFT's analysis of the next batch."""

  def __init__(self, temp_dir, num_buckets, event_column, dropped,
               event_format=event_time.DEFAULT_FORMAT, event_zone=event_time.DEFAULT_ZONE,
               served=(), aggregates=(), pii=Pii(), prediction=None):
    self._dir = FileSystems.join(temp_dir, _PARTS)
    self._num_buckets = num_buckets
    self._event = (event_column, event_format, event_zone)
    self._dropped = dropped
    self._served, self._aggregates, self._pii = tuple(served), tuple(aggregates), pii
    self._prediction = prediction

  def work(self, batch):
    if not batch.num_rows:
      return []
    cols = _head(batch, self._event, self._dropped, self._served, self._aggregates, self._pii,
                 self._prediction)
    if self._dropped:
      hashes, kind = log_hash(cols[LOG_KEY]), b"dropped"
    else:
      cols[LOG_HASH] = batch.column(LOG_HASH)
      hashes, kind = batch.column(LOG_HASH).to_numpy(), b"head"
    return _write_parts(self._dir, self._num_buckets, pa.table(cols), hashes, kind)


class _WriteValuesPartsFn(AheadDoFn):
  """TFT output batches (LOG_HASH and the raw fingerprint passed through) -> their transformed
  values as one Arrow IPC part file per bucket; yields (bucket, part path).

  One batch ahead on a worker thread, overlapping TFT's transform of the next batch. Features
  whose every row holds one value are stored flat (marked in the field metadata); the merge
  keeps them flat when all of a bucket's parts do (else lists).
  """

  def __init__(self, temp_dir, num_buckets):
    self._dir = FileSystems.join(temp_dir, _PARTS)
    self._num_buckets = num_buckets

  def work(self, batch):
    if not batch.num_rows:
      return []
    fields = [pa.field(LOG_HASH, pa.uint64()), pa.field(_FP_RAW, pa.uint64())]
    arrays = [batch.column(LOG_HASH), _as_uint64(batch.column(RAW_FP))]
    names = sorted(n for n in batch.schema.names if n not in passthrough_columns())
    for name in names:
      flat = _one_value(batch.column(name))
      column = batch.column(name) if flat is None else flat
      fields.append(pa.field(value_column(name), column.type,
                             metadata=None if flat is None else {_ONE_VALUE: b"1"}))
      arrays.append(column)
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    return _write_parts(self._dir, self._num_buckets, table,
                        batch.column(LOG_HASH).to_numpy(), b"kept")


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


# The log's row order: by key, ties by the stage fingerprints before TFT. Rows equal in all of
# them are the same record through every stage, TFT's output included (equal fp_transform), so
# which of them comes first never shows: the order does not depend on bundling.
_ORDER = [(LOG_KEY, "ascending")] + [(fp_column(s), "ascending") for s in RECORD_STAGES]


def _merged_log(heads, kept, dropped, bucket, pii=Pii(), model=None):
  """(the bucket's log rows in log order, its feature names; None when no record of the bucket
  went into TFT).

  The stage columns come from the head parts (records that went into TFT) and the dropped
  parts. Each transformed row (kept parts) is lined up with its head row by (LOG_HASH, fp_raw)
  -- rows equal in both are the same raw record, equal through every stage -- and the values
  are gathered in log order with one take (null for dropped rows). fp_transform and fp__F per
  feature F (sorted by name) are computed over the values as the log holds them -- before a PII
  feature's value (and served value) is hashed. With a ModelSpec `model`, the predict stage's
  columns (stages/predict_records.py) over what the model received."""
  names = log_format.features_of(kept[0].schema.names) if kept else ([] if heads else None)
  rows = sum(t.num_rows for t in heads)
  got = sum(t.num_rows for t in kept)
  if rows != got:
    raise ValueError(f"bucket {bucket}: {rows} records went into TFT but {got} transformed "
                     "rows came back")
  served = sorted({f for t in heads for f in served_of(t.schema.names)})
  aggregates = sorted({a for t in heads for a in aggregates_of(t.schema.names)})
  extra = [served_column(f) for f in served] + [aggregate_column(a) for a in aggregates] + [
      log_format.SERVED_PREDICTION]
  head = pa.concat_tables([t.select(_HEAD + [c for c in extra if c in t.schema.names])
                           for t in heads + dropped], promote_options="default")
  order = pc.sort_indices(head, _ORDER)
  cols = {c: head.column(c).take(order) for c in _HEAD}
  if names is None:
    cols[_FP_TRANSFORM] = cols[_FP_SERVE] = pa.nulls(head.num_rows, pa.uint64())
    return pa.table(cols), None
  aggregate_cols = {aggregate_column(a): head.column(aggregate_column(a)).take(order)
                    for a in aggregates}
  pairs = pa.table([pa.concat_arrays([c for t in part for c in t.column(name).chunks])
                    for name, part in ((LOG_HASH, heads), (LOG_HASH, kept), (_FP_RAW, heads),
                                       (_FP_RAW, kept))], names=["h", "v", "hr", "vr"])
  by_head = pc.sort_indices(pairs.select(["h", "hr"]), [("h", "ascending"), ("hr", "ascending")])
  by_value = pc.sort_indices(pairs.select(["v", "vr"]), [("v", "ascending"), ("vr", "ascending")])
  if not all(pairs.column(a).take(by_head).equals(pairs.column(b).take(by_value))
             for a, b in (("h", "v"), ("hr", "vr"))):
    raise ValueError(f"bucket {bucket}: transformed rows do not match the records that went "
                     "into TFT")
  source = np.full(head.num_rows, -1, dtype=np.int64)  # head row -> its value row (-1: dropped)
  source[by_head.to_numpy()] = by_value.to_numpy()
  source = source[order.to_numpy()]
  absent = source < 0
  mask = absent if absent.any() else None
  values = pa.table([_feature_column(kept, value_column(n)) for n in names], names=names).take(
      pa.array(source, mask=mask))
  record_fp, feature_fps = fingerprint.fingerprint_fields(values)
  cols[_FP_TRANSFORM] = pa.array(record_fp, mask=mask)
  served_values = {f: log_format.served_values(head.column(served_column(f)).take(order),
                                                values, f, f"bucket {bucket}") for f in served}
  inputs = model_inputs(values, served_values) if served else values  # what the model got
  cols[_FP_SERVE] = pa.array(fingerprint.fingerprint_fields(inputs)[0] if served else record_fp,
                             mask=mask)
  cols.update(aggregate_cols)
  hidden = pii.features(names)
  for n in names:
    cols[feature_fp_column(n)] = pa.array(feature_fps[n], mask=mask)
    cols[value_column(n)] = values.column(n) if n not in hidden else pii.hashed(values.column(n))
    if n in served_values:
      cols[served_column(n)] = served_values[n] if n not in hidden else \
          pii.hashed(served_values[n])
  logged = log_format.SERVED_PREDICTION in head.schema.names  # what serving answered
  if model is not None and (model.given() or logged):  # the predict stage (stages.PREDICT)
    cols.update(predict_records.predict_columns(
        predict_records.predictor(model, dict(zip(names, values.schema.types)))
        if model.given() else None, inputs, mask, decision.scores_of_text(
            head.column(log_format.SERVED_PREDICTION).take(order), model.output)
        if logged else None, decision.parse(model.decision)))
  log = pa.table(cols)
  keys = log.column(LOG_KEY)
  if len(keys) > 1 and pc.any(pc.equal(keys.slice(1), keys.slice(0, len(keys) - 1))).as_py():
    # A key seen twice: rows tied on every _ORDER column are the same record, and a
    # deterministic preprocessing_fn gives them equal values; fp_transform breaks the tie
    # anyway, so their order never follows TFT's output order.
    log = log.take(pc.sort_indices(log, _ORDER + [(_FP_TRANSFORM, "ascending")]))
  return log, names


def merge_bucket(temp_dir, num_buckets, bucket, paths, pii=Pii(), model=None):
  """Reads a bucket's parts, writes its log and transformed files; returns its info dict.

  A bucket holding dropped records only has no fp__F / value__F columns (nothing of its
  records reached the transform stage)."""
  parts = [_read_part(p) for p in sorted(paths)]
  by_kind = {k: [t for t in parts if t.schema.metadata.get(_KIND) == k]
             for k in (b"head", b"kept", b"dropped")}
  log, names = _merged_log(by_kind[b"head"], by_kind[b"kept"], by_kind[b"dropped"], bucket,
                           pii, model)
  log = log.combine_chunks()
  log = pa.Table.from_arrays(log.columns, names=log.schema.names)  # no part metadata
  if names is not None:
    _write_transformed(temp_dir, num_buckets, bucket, log, names)
  sink = pa.BufferOutputStream()
  pq.write_table(log, sink, **parquet_options(log.schema.names))
  path = bucket_path(bucket, num_buckets)
  with FileSystems.create(FileSystems.join(temp_dir, path)) as f:
    f.write(memoryview(sink.getvalue()))
  digests = {s: fingerprint.digest_hex(d) for s, d in stage_digests(log).items()}
  return {"bucket": bucket, "path": path, "rows": log.num_rows,
          "dropped": log.num_rows - log.column(DROPPED_STAGE).null_count, "digests": digests}


def _write_transformed(temp_dir, num_buckets, bucket, log, names):
  """The bucket's transformed records (its kept rows, by key) as tf.Examples."""
  kept = log.filter(log.column(DROPPED_STAGE).is_null())
  for name in names:
    if not _is_flat(kept.column(value_column(name)).type):
      raise ValueError(f"transformed feature {name!r} has several values per record; "
                       "only one-value features are written to transformed/")
  table = pa.table([kept.column(LOG_KEY)] + [kept.column(value_column(n)) for n in names],
                   names=[KEY] + names)
  path = transformed_path(bucket, num_buckets)
  with FileSystems.create(FileSystems.join(temp_dir, path)) as f:
    f.write(memoryview(tfrecord.encode_tfrecord(table.combine_chunks())))


class _MergeBucketsFn(beam.DoFn):
  """(bucket, part paths) -> the bucket's info dict; buckets merge on a small thread pool."""

  def __init__(self, temp_dir, num_buckets, pii, model):
    self._temp_dir, self._num_buckets, self._pii, self._model = temp_dir, num_buckets, pii, model

  def setup(self):
    self._pool = concurrent.futures.ThreadPoolExecutor(_THREADS)
    self._predicted = stage_counter("features", PREDICT.name)  # here: no metrics on the pool

  def start_bundle(self):
    self._pending = []

  def process(self, element):
    bucket, paths = element
    self._pending.append(self._pool.submit(merge_bucket, self._temp_dir, self._num_buckets,
                                           bucket, list(paths), self._pii, self._model))

  def finish_bundle(self):
    pending, self._pending = self._pending, []
    for future in pending:
      info = future.result()
      if info["digests"].get(PREDICT.name):
        self._predicted.inc(fingerprint.parse_digest(info["digests"][PREDICT.name])["count"])
      yield GlobalWindows.windowed_value(info)

  def teardown(self):
    self._pool.shutdown()


class WriteFeatureLog(beam.PTransform):
  """(batches going into TFT, with LOG_HASH; TFT's output with LOG_HASH and the raw fingerprint
  passed through; dropped batches) -> one info dict per bucket written. event_format /
  event_zone: the feature module's event-time declaration (the log holds Unix seconds); served:
  the side columns holding what serving fed the model, logged as served__F and fingerprinted
  with the transformed values as the `serve` stage (spec/stages.py SERVE); pii: the PII
  columns, written hashed (spec/pii.py), as the production logger writes them."""

  def __init__(self, temp_dir, num_buckets, event_column, event_format=event_time.DEFAULT_FORMAT,
               event_zone=event_time.DEFAULT_ZONE, served=(), aggregates=(), pii=Pii(),
               model=None, prediction=None):
    super().__init__()
    self._temp_dir = temp_dir
    self._num_buckets = num_buckets
    self._event = (event_column, event_format, event_zone)
    self._served = tuple(served)  # ((side column, feature), ...): spec/dataset.py side columns
    self._aggregates = tuple(aggregates)  # windowed aggregate names, logged as aggregate__A
    self._pii, self._model = pii, model  # model: a ModelSpec, the predict stage's
    self._prediction = prediction  # the served-prediction side column (or None)

  def expand(self, pcolls):
    staged, transformed, dropped = pcolls
    column, form, zone = self._event
    args = (self._temp_dir, self._num_buckets, column)
    kwargs = {"event_format": form, "event_zone": zone, "pii": self._pii}
    parts = (
        staged | "WriteHeadParts" >> beam.ParDo(
            _WriteHeadPartsFn(*args, False, served=self._served, aggregates=self._aggregates,
                              prediction=self._prediction, **kwargs)),
        transformed | "WriteTransformedParts" >> beam.ParDo(
            _WriteValuesPartsFn(self._temp_dir, self._num_buckets)),
        dropped | "WriteDroppedParts" >> beam.ParDo(_WriteHeadPartsFn(*args, True, **kwargs)),
    ) | "AllParts" >> beam.Flatten()
    return (parts
            | "GroupByBucket" >> beam.GroupByKey()
            | "MergeBuckets" >> beam.ParDo(_MergeBucketsFn(self._temp_dir, self._num_buckets,
                                                           self._pii, self._model)))
