"""The canonical record fingerprint (spec: docs/fingerprint.md) and its two codings.

`fingerprint_batch` fingerprints every row of an Arrow RecordBatch/Table in one numba-compiled
pass over its column buffers (codec/xxh64.py; pipelines); `fingerprint_record`
fingerprints one dict record (the production logger). Both produce the same uint64 for the same values; tests/golden/fingerprint_vectors.json
and a hypothesis test hold them together.

Encoding (all integers unsigned 64-bit little-endian unless said; everything is 8-byte aligned):
  header  = SALT | u64 n_fields | for each field name, sorted by UTF-8 bytes: BYTES8(name)
            | zero words up to a multiple of 32 bytes
  values  = for each field, in the same order: VALUE(record[name])
  VALUE   = u64 0                       field absent (MISSING)
          | u64 1                       null / None (NULL)
          | u64 2, i64 value            integer (bool as 0/1)
          | u64 3, f64 bits             float, widened to float64; every NaN -> 0x7FF8000000000000,
                                        -0.0 -> +0.0
          | u64 4, BYTES8(value)        bytes / UTF-8 text
          | u64 5, u64 count, VALUE*    list (elements may be null)
  BYTES8(b) = u64 len(b), b, zero bytes up to a multiple of 8
  fingerprint = XXH64(header ++ values, seed)
"""
import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from transforms.codec.arrow_buffers import fixed_values, validity
from transforms.codec.xxh64 import (KIND_BYTES, KIND_FLOAT, KIND_INT, KIND_LIST, KIND_MISSING,
                              KIND_NULL, hash_fields, hash_scalar_field, prefix_state)

__all__ = ["SALT", "fingerprint_batch", "fingerprint_fields", "fingerprint_record", "encode_record",
           "combine_digest", "empty_digest", "add_digests", "digest_hex", "parse_digest", "MISSING"]

SALT = b"SKWTFP01"
TAG_MISSING, TAG_NULL, TAG_INT, TAG_FLOAT, TAG_BYTES, TAG_LIST = range(6)
_NAN_BITS = 0x7FF8000000000000
_U64 = (1 << 64) - 1


class _Missing:
  """Sentinel for a field a record lacks (distinct from None, which is null)."""

  def __repr__(self):
    return "MISSING"


MISSING = _Missing()


# --------------------------------------------------------------------------- per record
def _bytes8(b):
  pad = (-len(b)) % 8
  return struct.pack("<Q", len(b)) + b + b"\0" * pad


def _header(names):
  enc = sorted(n.encode("utf-8") for n in names)
  out = SALT + struct.pack("<Q", len(enc)) + b"".join(_bytes8(n) for n in enc)
  return out + b"\0" * ((-len(out)) % 32), enc


def _value(v):
  if v is MISSING:
    return struct.pack("<Q", TAG_MISSING)
  if v is None:
    return struct.pack("<Q", TAG_NULL)
  if isinstance(v, (bool, np.bool_)):
    return struct.pack("<Qq", TAG_INT, int(v))
  if isinstance(v, (int, np.integer)):
    return struct.pack("<Qq", TAG_INT, int(v))
  if isinstance(v, (float, np.floating)):
    f = float(v)
    if f != f:
      return struct.pack("<QQ", TAG_FLOAT, _NAN_BITS)
    return struct.pack("<Qd", TAG_FLOAT, f + 0.0)  # -0.0 + 0.0 == +0.0
  if isinstance(v, str):
    return struct.pack("<Q", TAG_BYTES) + _bytes8(v.encode("utf-8"))
  if isinstance(v, (bytes, bytearray, memoryview)):
    return struct.pack("<Q", TAG_BYTES) + _bytes8(bytes(v))
  if isinstance(v, (list, tuple, np.ndarray)):
    return struct.pack("<QQ", TAG_LIST, len(v)) + b"".join(_value(x) for x in v)
  raise TypeError(f"cannot fingerprint a value of type {type(v).__name__}")


def encode_record(record, fields=None):
  """The canonical encoding of one record (dict name -> value) over `fields` (default: its keys)."""
  names = list(record) if fields is None else list(fields)
  header, enc = _header(names)
  by_utf8 = {n.encode("utf-8"): n for n in names}
  return header + b"".join(_value(record.get(by_utf8[e], MISSING)) for e in enc)


def fingerprint_record(record, fields=None, seed=0):
  """XXH64 fingerprint (int) of one record, per the spec; the per-record coding."""
  return xxhash.xxh64_intdigest(encode_record(record, fields), seed=seed)


# --------------------------------------------------------------------------- vectorised
def _counts_to_starts(counts):
  starts = np.zeros(len(counts) + 1, dtype=np.int64)
  np.cumsum(counts, out=starts[1:])
  return starts


def _concat_parts(parts, n):
  """Row-wise concatenation: row i = part_0[i] ++ part_1[i] ++ ...

  Each part is (counts, words): counts is an int or an int64 array of words per row and
  words holds the part's words of all rows in row order.
  """
  counts = [np.full(n, c, dtype=np.int64) if np.isscalar(c) else c for c, _ in parts]
  starts = _counts_to_starts(sum(counts) if counts else np.zeros(n, dtype=np.int64))
  out = np.empty(int(starts[-1]), dtype=np.uint64)
  offset = starts[:-1].copy()
  for (c, words), cnt in zip(parts, counts):
    if np.isscalar(c):
      if c:
        out[(offset[:, None] + np.arange(c)).ravel()] = words
    elif len(words):
      part_starts = _counts_to_starts(cnt)[:-1]
      out[np.repeat(offset - part_starts, cnt) + np.arange(len(words))] = words
    offset += cnt
  return out, starts


def _bytes_words(arr):
  """BYTES8 words of the non-null elements of a binary/string array: (words, row starts)."""
  arr = arr.cast(pa.large_binary()) if not pa.types.is_large_binary(arr.type) else arr
  valid = arr.filter(arr.is_valid()) if arr.null_count else arr
  lengths = pc.binary_length(valid).to_numpy(zero_copy_only=False).astype(np.int64)
  padded = (lengths + 7) // 8
  data_starts = _counts_to_starts(lengths)
  word_starts = _counts_to_starts(padded)
  buf = np.zeros(int(word_starts[-1]) * 8, dtype=np.uint8)
  if data_starts[-1]:
    offsets = np.frombuffer(valid.buffers()[1], dtype=np.int64)[valid.offset:valid.offset + len(valid) + 1]
    data = np.frombuffer(valid.buffers()[2], dtype=np.uint8)
    src = np.repeat(offsets[:-1] - data_starts[:-1], lengths) + np.arange(data_starts[-1])
    dst = np.repeat(word_starts[:-1] * 8 - data_starts[:-1], lengths) + np.arange(data_starts[-1])
    buf[dst] = data[src]
  data_words = buf.view("<u8").astype(np.uint64)
  return _concat_parts([(1, lengths.astype(np.uint64)), (padded, data_words)], len(valid))


def _scalar_words(arr):
  """VALUE words of each element of a flat (non-list) array: (words, row starts)."""
  n = len(arr)
  t = arr.type
  if pa.types.is_null(t):
    return _concat_parts([(1, np.full(n, TAG_NULL, dtype=np.uint64))], n)
  valid = arr.is_valid().to_numpy(zero_copy_only=False)
  if pa.types.is_integer(t) or pa.types.is_boolean(t):
    tag = TAG_INT
    if pa.types.is_uint64(t) and pc.max(arr).as_py() is not None and pc.max(arr).as_py() > 2**63 - 1:
      raise ValueError("uint64 values above 2**63-1 have no int64 fingerprint")
    vals = arr.cast(pa.int64()).fill_null(0).to_numpy().view(np.uint64)[valid]
    payload = (valid.astype(np.int64), vals)
  elif pa.types.is_floating(t):
    tag = TAG_FLOAT
    f = arr.cast(pa.float64()).fill_null(0.0).to_numpy()[valid] + 0.0  # -0.0 -> +0.0
    bits = f.view(np.uint64).copy()
    bits[np.isnan(f)] = _NAN_BITS
    payload = (valid.astype(np.int64), bits)
  elif pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t) \
      or pa.types.is_large_string(t):
    tag = TAG_BYTES
    words, starts = _bytes_words(arr)
    full = np.zeros(n, dtype=np.int64)
    full[valid] = np.diff(starts)
    payload = (full, words)
  elif pa.types.is_dictionary(t):
    return _scalar_words(arr.dictionary_decode())
  else:
    raise TypeError(f"cannot fingerprint Arrow type {t}")
  tags = np.where(valid, tag, TAG_NULL).astype(np.uint64)
  return _concat_parts([(1, tags), payload], n)


def _column_words(arr):
  """VALUE words of each row of a column (flat or list): (words, row starts)."""
  if isinstance(arr, pa.ChunkedArray):
    arr = arr.combine_chunks()
  if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
    return _scalar_words(arr)
  n = len(arr)
  valid = arr.is_valid().to_numpy(zero_copy_only=False)
  lengths = pc.list_value_length(arr).fill_null(0).to_numpy().astype(np.int64)
  elem_words, elem_starts = _column_words(arr.flatten())
  elem_row_starts = _counts_to_starts(lengths)
  row_words = elem_starts[elem_row_starts[1:]] - elem_starts[elem_row_starts[:-1]]
  tags = np.where(valid, TAG_LIST, TAG_NULL).astype(np.uint64)
  return _concat_parts([(1, tags), (valid.astype(np.int64), lengths[valid].astype(np.uint64)),
                        (row_words, elem_words)], n)


def _as_columns(batch):
  if isinstance(batch, (pa.RecordBatch, pa.Table)):
    return dict(zip(batch.schema.names, batch.columns)), batch.num_rows
  raise TypeError("fingerprint_batch takes a pyarrow RecordBatch or Table")


def _field_inputs(arr, n):
  """One field's kernel inputs: (kind, valid[n] | None (no null), words[n] | None,
  offsets[n+1] | None, data).

  For BYTES, offsets index data (the Arrow buffers); for LIST, offsets index data, the
  numpy-encoded [count, elements...] words of each row.
  """
  if arr is None:
    return KIND_MISSING, None, None, None, None
  if isinstance(arr, pa.ChunkedArray):
    arr = arr.combine_chunks()
  t = arr.type
  if pa.types.is_dictionary(t):
    arr = arr.dictionary_decode()
    t = arr.type
  if pa.types.is_null(t):
    return KIND_NULL, None, None, None, None
  valid = validity(arr)
  if pa.types.is_integer(t) or pa.types.is_boolean(t):
    if pa.types.is_uint64(t):
      top = pc.max(arr).as_py()
      if top is not None and top > 2**63 - 1:
        raise ValueError("uint64 values above 2**63-1 have no int64 fingerprint")
    return KIND_INT, valid, fixed_values(arr, pa.int64()), None, None
  if pa.types.is_floating(t):
    return KIND_FLOAT, valid, fixed_values(arr, pa.float64()), None, None
  if pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t) \
      or pa.types.is_large_string(t):
    if not pa.types.is_large_binary(t):
      arr = arr.cast(pa.large_binary())
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + n + 1]
    data = arr.buffers()[2]
    data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    return KIND_BYTES, valid, None, offsets - offsets[0], data[offsets[0]:offsets[-1]]
  if pa.types.is_list(t) or pa.types.is_large_list(t):
    words, starts = _column_words(arr)  # generic numpy path: [tag, count, elements] per row
    # Drop each row's leading tag word: the kernel writes tags itself.
    keep = np.ones(words.size, dtype=bool)
    keep[starts[:-1]] = False
    return KIND_LIST, valid, None, _counts_to_starts(np.diff(starts) - 1), words[keep]
  raise TypeError(f"cannot fingerprint Arrow type {t}")


def _kernel_inputs(columns, n, enc):
  """(kinds, slots, valid, words, starts, bbuf, wbuf): hash_fields' inputs for fields `enc`
  (UTF-8 names, in order). Each column is laid out once, in whole-batch rows: valid[field],
  words[slot] (INT, FLOAT) and starts[slot] (BYTES, LIST: offsets into bbuf / wbuf).

  A handful of numpy copies, not a loop over chunks of rows: every numpy copy releases and
  takes back the GIL, and beside a thread running Python each take-back can wait a whole
  switch interval (111k taxi rows beside a busy thread: 361 ms in ~840 chunk copies, 14 ms in
  one copy per column).
  """
  inputs = [_field_inputs(columns.get(e.decode("utf-8")), n) for e in enc]
  nf = len(inputs)
  kinds = np.array([i[0] for i in inputs], dtype=np.int8)
  slots = np.zeros(nf, dtype=np.int64)
  word_fields = [f for f, i in enumerate(inputs) if i[2] is not None]
  span_fields = [f for f, i in enumerate(inputs) if i[3] is not None]
  valid = np.ones((nf, n), dtype=np.bool_)
  for f, i in enumerate(inputs):
    if i[1] is not None:
      valid[f] = i[1]
  words = np.empty((len(word_fields), n), dtype=np.uint64)
  for s, f in enumerate(word_fields):
    slots[f] = s
    words[s] = inputs[f][2]
  starts = np.empty((len(span_fields), n + 1), dtype=np.int64)
  bases = {KIND_BYTES: 0, KIND_LIST: 0}  # where each field's offsets start in bbuf / wbuf
  for s, f in enumerate(span_fields):
    slots[f] = s
    np.add(inputs[f][3], bases[inputs[f][0]], out=starts[s])
    bases[inputs[f][0]] += inputs[f][4].size
  bbuf, wbuf = ([inputs[f][4] for f in span_fields if inputs[f][0] == kind]
                for kind in (KIND_BYTES, KIND_LIST))
  bbuf = np.concatenate(bbuf) if bbuf else np.zeros(0, np.uint8)
  wbuf = np.concatenate(wbuf) if wbuf else np.zeros(0, np.uint64)
  return kinds, slots, valid, words, starts, bbuf, wbuf


def _header_state(header, seed):
  prefix = np.frombuffer(header, dtype="<u8").astype(np.uint64)
  return prefix_state(prefix, seed), prefix.size


def fingerprint_batch(batch, fields=None, seed=0):
  """uint64 fingerprint of every row of `batch` over `fields` (default: all its columns).

  A name in `fields` that the batch lacks is MISSING in every row.
  """
  columns, n = _as_columns(batch)
  header, enc = _header(list(columns) if fields is None else list(fields))
  state0, words0 = _header_state(header, seed)
  return hash_fields(state0, words0, *_kernel_inputs(columns, n, enc))


def fingerprint_fields(batch, fields=None, seed=0):
  """(fingerprint_batch(batch, fields, seed), {name: fingerprint_batch(batch, [name], seed)} for
  each name of `fields`): a record's fingerprint and each field's own, from one assembly of the
  kernel inputs (an INT or FLOAT field's own in a loop over its column, hash_scalar_field)."""
  columns, n = _as_columns(batch)
  header, enc = _header(list(columns) if fields is None else list(fields))
  state0, words0 = _header_state(header, seed)
  kinds, slots, valid, words, starts, bbuf, wbuf = _kernel_inputs(columns, n, enc)
  out = hash_fields(state0, words0, kinds, slots, valid, words, starts, bbuf, wbuf)
  per_field = {}
  for f, e in enumerate(enc):
    state, nwords = _header_state(_header([e.decode("utf-8")])[0], seed)
    if kinds[f] in (KIND_INT, KIND_FLOAT):
      per_field[e.decode("utf-8")] = hash_scalar_field(state, nwords, kinds[f],
                                                       words[slots[f]], valid[f])
      continue
    one = slice(f, f + 1)
    per_field[e.decode("utf-8")] = hash_fields(state, nwords, kinds[one], slots[one],
                                               valid[one], words, starts, bbuf, wbuf)
  return out, per_field


# --------------------------------------------------------------------------- digests
def _mix(x):
  """splitmix64 finaliser: spreads each fingerprint before the second sum."""
  with np.errstate(over="ignore"):
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def empty_digest():
  return {"count": 0, "sum": 0, "mixsum": 0}


def combine_digest(fingerprints):
  """Order-independent multiset digest of uint64 fingerprints: count, Σfp and Σmix(fp) mod 2^64."""
  fp = np.asarray(fingerprints, dtype=np.uint64)
  with np.errstate(over="ignore"):
    return {"count": int(fp.size), "sum": int(fp.sum(dtype=np.uint64)),
            "mixsum": int(_mix(fp).sum(dtype=np.uint64))}


def add_digests(a, b):
  return {"count": a["count"] + b["count"], "sum": (a["sum"] + b["sum"]) & _U64,
          "mixsum": (a["mixsum"] + b["mixsum"]) & _U64}


def digest_hex(d):
  """The digest as one string: '<count>:<Σfp hex>:<Σmix hex>' (parse_digest reads it back)."""
  return f"{d['count']}:{d['sum']:016x}:{d['mixsum']:016x}"


def parse_digest(text):
  """The digest of a digest_hex string; ValueError when it is not one."""
  parts = str(text).split(":")
  if len(parts) != 3:
    raise ValueError(f"not a digest: {text!r}")
  return {"count": int(parts[0]), "sum": int(parts[1], 16), "mixsum": int(parts[2], 16)}
