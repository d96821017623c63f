"""The record key: what joins a record's offline and production rows, and the hashes made of it.

With key columns, the key is the text of the key value (several columns: texts joined by '|',
with '\\' and '|' backslash-escaped); without, it is the content key: the 16-hex-digit parse
fingerprint of the whole record + ':<ordinal>' among exact duplicates (content_keys; ingest
numbers them in (key, fingerprint) order within a shard, the production logger in arrival
order). The ingest shard of a record is XXH64-fingerprint(key columns, seed) mod num_shards
(the fingerprint of the whole parsed row without key columns, so exact duplicates share a
shard). key_hash is the {__key__} fingerprint the shard stage, sampling and the feature-log
buckets use, each with its own seed.
"""
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.spec import fingerprint
from transforms.spec.stages import INGEST_SHARD, KEY, PARSE, PARSE_FP

__all__ = ["hex64", "key_batch", "key_hash", "content_keys", "CONTENT_KEY_SEPARATOR"]

CONTENT_KEY_SEPARATOR = ":"
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


def content_keys(hexes, ordinals):
  """The content keys '<hex>:<ordinal>' of records whose parse fingerprints' hex64 are `hexes`."""
  hexes = hexes if isinstance(hexes, (pa.Array, pa.ChunkedArray)) else pa.array(hexes)
  return pc.binary_join_element_wise(
      hexes.cast(pa.large_string()), pa.array(ordinals).cast(pa.large_string()),
      pa.scalar(CONTENT_KEY_SEPARATOR, pa.large_string()))


def key_batch(batch, data_columns, key_columns, num_shards, seed=0):
  """Appends KEY (large_string; the content key's hex without its ordinal when there are no
  key columns), PARSE_FP (the parse-stage fingerprint, uint64) and INGEST_SHARD (int64)."""
  fp = fingerprint.fingerprint_batch(batch, fields=PARSE.fingerprint_fields(columns=data_columns))
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
  return batch.append_column(KEY, key).append_column(PARSE_FP, pa.array(fp)).append_column(
      INGEST_SHARD, pa.array(shard))


def key_hash(keys, seed):
  """uint64[n]: each key's XXH64 fingerprint {__key__: key} with `seed` (the shard, sampling and
  feature-log bucket hashes, each with its own seed)."""
  return fingerprint.fingerprint_batch(pa.record_batch([keys], names=[KEY]), seed=seed)
