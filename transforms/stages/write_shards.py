"""WriteShards: keyed batches -> one sorted TFRecord and/or Parquet file per shard, in a temp dir.

Each input batch is split by shard and spilled as sorted Arrow IPC "run" files; only run
paths are shuffled (GroupByKey on the int shard id). Each shard then reads its runs, sorts by
(key, fingerprint) -- a total order on content, so bundle boundaries, worker counts and input
order cannot change the bytes -- and writes its files. Memory is bounded by one shard.
"""
import concurrent.futures
import hashlib
import io

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from transforms.spec import fingerprint
from transforms.codec import tfrecord
from transforms.spec.dataset import shard_name
from transforms.spec.key import content_keys
from transforms.spec.stages import INGEST_SHARD as SHARD, KEY, PARSE_FP as FP, RAW_FP
from transforms.spec.schema import ARROW_TYPES

__all__ = ["WriteShards", "sort_shard"]

_SAMPLES = 5


def _join(*parts):
  return FileSystems.join(*parts)


class _WriteRunsFn(beam.DoFn):
  """(batch id, keyed batch) -> (shard, run path) for each shard present in the batch."""

  def __init__(self, temp_dir):
    self._temp_dir = temp_dir

  def process(self, element):
    (file_index, block_no), batch = element
    shards = batch.column(SHARD).to_numpy()
    order = np.argsort(shards, kind="stable")  # WriteShard sorts each shard fully
    table = pa.Table.from_batches([batch]).take(order)
    shards = shards[order]
    bounds = np.flatnonzero(np.diff(shards)) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [len(shards)]))
    for lo, hi in zip(starts, ends):
      shard = int(shards[lo])
      path = _join(self._temp_dir, "runs", f"shard-{shard:05d}",
                   f"run-{file_index:05d}-{block_no:06d}.arrow")
      sink = io.BytesIO()
      with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table.slice(lo, hi - lo))
      with FileSystems.create(path) as f:
        f.write(sink.getvalue())
      yield shard, path


def sort_shard(table, content_key):
  """Sorts a shard by (key, fingerprint); with content keys appends ':<ordinal>' to keys.

  Returns (sorted table, duplicate-key stats).
  """
  if content_key:
    # The key is the fixed-width hex of FP, so FP order is key order: a numeric sort suffices.
    order = np.argsort(table.column(FP).to_numpy(), kind="stable")
  else:
    order = pc.sort_indices(table, [(KEY, "ascending"), (FP, "ascending")])
  table = table.take(order)
  keys = table.column(KEY).combine_chunks()
  n = len(keys)
  same_as_prev = np.zeros(n, dtype=bool)
  if n > 1:
    same_as_prev[1:] = pc.equal(keys.slice(1), keys.slice(0, n - 1)).to_numpy(
        zero_copy_only=False)
  group_start = np.where(~same_as_prev, np.arange(n), 0)
  np.maximum.accumulate(group_start, out=group_start)
  ordinal = np.arange(n) - group_start
  fps = table.column(FP).to_numpy()
  dup_rows = same_as_prev.copy()
  dup_rows[:-1] |= same_as_prev[1:]
  fp_differs = np.zeros(n, dtype=bool)
  fp_differs[1:] = same_as_prev[1:] & (fps[1:] != fps[:-1])
  conflicting = np.unique(group_start[fp_differs])
  stats = {"keys": int(np.count_nonzero(same_as_prev & (ordinal == 1))),
           "rows": int(np.count_nonzero(dup_rows)),
           "conflicting_keys": int(len(conflicting)),
           "samples": [keys[int(i)].as_py() for i in conflicting[:_SAMPLES]]}
  if content_key:
    suffixed = content_keys(keys, ordinal)
    table = table.set_column(table.schema.get_field_index(KEY), KEY, suffixed)
    stats = {"exact_duplicate_rows": stats["rows"], "exact_duplicate_keys": stats["keys"]}
  return table, stats


def _sha256(data):
  return hashlib.sha256(data).hexdigest()


class _WriteShardFn(beam.DoFn):
  """(shard, {runs: [paths]}) -> shard info dict, after writing the shard's files."""

  def __init__(self, temp_dir, num_shards, formats, compression, content_key):
    self._temp_dir = temp_dir
    self._num_shards = num_shards
    self._formats = list(formats)
    self._compression = compression
    self._content_key = content_key

  def process(self, element, columns):
    shard, grouped = element
    runs = sorted(grouped["runs"])
    # Output columns: the key, the data columns in header order, then the raw- and parse-stage
    # fingerprints (their uint64 bits as int64: tf.Example has no unsigned type).
    out_columns = [(KEY, pa.large_string())] + [(n, ARROW_TYPES[t]) for n, t in columns] + \
        [(RAW_FP, pa.int64()), (FP, pa.int64())]
    schema = pa.schema(out_columns[:-2] + [(RAW_FP, pa.uint64()), (FP, pa.uint64()),
                                           (SHARD, pa.int64())])
    tables = []
    for path in runs:
      with FileSystems.open(path, compression_type="uncompressed") as f:
        tables.append(pa.ipc.open_file(pa.py_buffer(f.read())).read_all().select(schema.names)
                      .cast(schema))
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    table, stats = sort_shard(table, self._content_key)
    fps = table.column(FP).to_numpy()
    data = table.select([name for name, _ in out_columns[:-2]])
    for name in (RAW_FP, FP):
      data = data.append_column(name, pa.array(table.column(name).to_numpy().view(np.int64)))
    data_names = [name for name, _ in columns]
    # The formats are independent and their encoders release the GIL (pyarrow's Parquet
    # writer, the numba kernels, hashlib), so they are written side by side on two threads.
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(self._formats)) as pool:
      files = list(pool.map(lambda fmt: self._write(fmt, shard, data, data_names, fps),
                            self._formats))
    yield {"shard": shard, "rows": data.num_rows, "digest": fingerprint.combine_digest(fps),
           "duplicates": stats, "files": files}

  def _write(self, fmt, shard, data, data_names, fps):
    """Writes one format's file of the shard; returns its manifest entry."""
    if fmt == "parquet":
      sink = pa.BufferOutputStream()
      pq.write_table(data, sink, compression=self._compression)
      payload = memoryview(sink.getvalue())
      digest = fingerprint.combine_digest(fps)
    else:
      payload = memoryview(tfrecord.encode_tfrecord(data))
      as_read = data.select(data_names)
      widened = pa.table([_float32_widened(c) for c in as_read.columns], names=data_names)
      digest = fingerprint.combine_digest(fingerprint.fingerprint_batch(widened))
    name = shard_name(fmt, shard, self._num_shards)
    with FileSystems.create(_join(self._temp_dir, name)) as f:
      f.write(payload)
    return {"path": name, "format": fmt, "rows": data.num_rows, "bytes": len(payload),
            "sha256": _sha256(payload), "digest": digest}


def _float32_widened(arr):
  """What tf.Example keeps of a column: floats rounded to float32, read back as float64."""
  if pa.types.is_floating(arr.type):
    return arr.cast(pa.float32()).cast(pa.float64())
  return arr


class WriteShards(beam.PTransform):
  """(id, keyed batch) -> one info dict per shard (every shard id, empty ones too).

  `columns` is [(name, type)] or a singleton PCollection of it (inferred types).
  """

  def __init__(self, temp_dir, num_shards, columns, formats, compression, content_key):
    super().__init__()
    self._temp_dir = temp_dir
    self._num_shards = num_shards
    self._columns = columns
    self._shard_args = (temp_dir, num_shards, formats, compression, content_key)

  def expand(self, batches):
    columns = self._columns
    if isinstance(columns, beam.pvalue.PCollection):
      columns = beam.pvalue.AsSingleton(columns)
    runs = batches | "WriteRuns" >> beam.ParDo(_WriteRunsFn(self._temp_dir))
    ids = batches.pipeline | "ShardIds" >> beam.Create(
        [(s, None) for s in range(self._num_shards)])
    return ({"runs": runs, "ids": ids}
            | "GroupRunsByShard" >> beam.CoGroupByKey()
            | "WriteShard" >> beam.ParDo(_WriteShardFn(*self._shard_args), columns))
