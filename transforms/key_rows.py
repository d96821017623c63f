"""KeyRows: typed batches -> + record key, parse fingerprint and shard id, all vectorised.

Key: with key columns, the text of the key value (several columns: texts joined by '|', with
'\\' and '|' backslash-escaped); without, the 16-hex-digit fingerprint of the whole parsed row
(WriteShards appends ':<ordinal>' among exact duplicates). The shard is
  XXH64-fingerprint(key columns, seed) mod num_shards
where the fingerprint is the canonical record fingerprint (docs/fingerprint.md) restricted to
the key columns; without key columns it is the row fingerprint itself, so exact duplicates
land in the same shard.
"""
import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms import fingerprint

__all__ = ["KeyRows", "key_batch", "KEY", "FP", "RAW_FP", "SHARD", "hex64"]

KEY, FP, RAW_FP, SHARD = "__key__", "__parse_fp__", "__raw_fp__", "__shard__"
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def hex64(values):
  """uint64 array -> large_string array of 16 lowercase hex digits each."""
  v = np.asarray(values, dtype=np.uint64)
  nibbles = np.empty((len(v), 16), dtype=np.uint8)
  be = v.astype(">u8").view(np.uint8).reshape(-1, 8)
  nibbles[:, 0::2] = _HEX[be >> 4]
  nibbles[:, 1::2] = _HEX[be & 15]
  offsets = np.arange(0, 16 * len(v) + 1, 16, dtype=np.int64)
  return pa.Array.from_buffers(pa.large_string(), len(v),
                               [None, pa.py_buffer(offsets), pa.py_buffer(nibbles.tobytes())])


def key_batch(batch, data_columns, key_columns, num_shards, seed=0):
  """Appends KEY (large_string), FP (the parse-stage fingerprint, uint64) and SHARD (int64)."""
  fp = fingerprint.fingerprint_batch(batch, fields=data_columns)
  if key_columns:
    texts = [batch.column(c).cast(pa.large_string()) for c in key_columns]
    if len(texts) == 1:
      key = texts[0]
    else:
      escaped = [pc.replace_substring(pc.replace_substring(t, "\\", "\\\\"), "|", "\\|")
                 for t in texts]
      key = pc.binary_join_element_wise(*escaped, pa.scalar("|", pa.large_string()))
    shard_hash = fingerprint.fingerprint_batch(batch, fields=key_columns, seed=seed)
  else:
    key = hex64(fp)
    shard_hash = fp if seed == 0 else fingerprint.fingerprint_batch(
        batch, fields=data_columns, seed=seed)
  shard = (shard_hash % np.uint64(num_shards)).astype(np.int64)
  return batch.append_column(KEY, key).append_column(FP, pa.array(fp)).append_column(
      SHARD, pa.array(shard))


class _KeyFn(beam.DoFn):

  def __init__(self, key_columns, num_shards, seed):
    self._key_columns = list(key_columns)
    self._num_shards = num_shards
    self._seed = seed

  def process(self, element):
    batch_id, batch = element
    data_columns = [n for n in batch.schema.names if n != RAW_FP]
    yield batch_id, key_batch(batch, data_columns, self._key_columns, self._num_shards,
                              self._seed)


class KeyRows(beam.PTransform):
  """(id, typed batch) -> (id, batch + __key__, __parse_fp__, __shard__)."""

  def __init__(self, key_columns, num_shards, seed=0):
    super().__init__()
    self._args = (key_columns, num_shards, seed)

  def expand(self, batches):
    return batches | "Key" >> beam.ParDo(_KeyFn(*self._args))
