"""tf.Example decoder: serialized one-value tf.Examples -> an Arrow table of flat columns.

Records written the way encode_examples writes them (example_encode.py) are read by matching
each map entry against the encoder's template for its column (_decode_canonical); a batch with
any other record is parsed field by field instead (example_parse.py), which reads any valid
encoding. An absent feature or an empty list decodes as null; FLOAT columns come back as the
float32 values widened to the column's type.
"""
import numba
import numpy as np
import pyarrow as pa

from transforms.codec.example_encode import entry_templates, varint_len
from transforms.codec.example_parse import PARSE_ERRORS, get_fixed32, get_varint, parse_examples
from transforms.codec.kinds import KIND_BYTES, KIND_FLOAT, KIND_INT
from transforms.codec.words import bytes_match, copy_bytes

__all__ = ["decode_examples", "decode_records", "TFRecordError"]


# Defined here rather than in tfrecord.py, which raises it too (framing, checksums) and
# re-exports it: tfrecord.py imports this module, so this one cannot import tfrecord.py (the
# import graph has no cycle).
class TFRecordError(ValueError):
  """A TFRecord file whose framing or checksums are wrong, or a record that is not a one-value
  tf.Example of its columns' types."""


@numba.njit(cache=True, nogil=True)
def _decode_canonical(buf, starts, ends, names, name_starts, kinds, slots, tmpl, toff, tlen,
                      clen, count, bits, spans):
  """parse_examples for records written the way encode_examples writes them -- one map entry
  per non-null column, in name order, each entry the encoder's exact bytes -- by matching every
  entry against its column's template instead of parsing it field by field. Returns True when
  every record matched (count, bits and spans then hold what parse_examples gives); False at
  the first record that does not, and the caller parses the batch with parse_examples, which
  reads any valid encoding and reports its errors."""
  nc = kinds.size
  for row in range(starts.size):
    p, end = starts[row], ends[row]
    if p >= end or buf[p] != 0x0A:
      return False
    size, p = get_varint(buf, p + 1, end)
    if p < 0 or p + np.int64(size) != end:
      return False
    for c in range(nc):
      count[c, row] = 0
      if p >= end:
        continue
      kind = kinds[c]
      if kind == KIND_BYTES:  # 0A entry 0A klen key 12 flen 0A inner 0A blen value
        entry, q = get_varint(buf, p + 1, end)
        if q < 0 or buf[p] != 0x0A or q >= end or buf[q] != 0x0A:
          return False
        klen, q = get_varint(buf, q + 1, end)
        k0 = name_starts[c]
        if q < 0 or np.int64(klen) != name_starts[c + 1] - k0 or q + np.int64(klen) > end or \
            not bytes_match(buf, q, names, k0, name_starts[c + 1] - k0):
          continue  # another column's entry: this one is absent
        q += np.int64(klen)
        if q >= end or buf[q] != 0x12:
          return False
        flen, q = get_varint(buf, q + 1, end)
        if q < 0 or q >= end or buf[q] != 0x0A:
          return False
        inner, q = get_varint(buf, q + 1, end)
        if q < 0 or q >= end or buf[q] != 0x0A:
          return False
        blen, r = get_varint(buf, q + 1, end)
        stop = r + np.int64(blen)
        if r < 0 or stop > end or np.int64(inner) != stop - q or \
            np.int64(flen) != stop - q + 1 + varint_len(inner) or \
            np.int64(entry) != stop - p - 1 - varint_len(entry):
          return False
        spans[0, slots[c], row] = r
        spans[1, slots[c], row] = np.int64(blen)
        count[c, row] = 1
        p = stop
        continue
      if kind == KIND_INT:
        entry, q = get_varint(buf, p + 1, end)
        t = np.int64(entry) - clen[c]
        if q < 0 or t < 1 or t > 10:
          continue
      else:  # KIND_FLOAT: one template, t = 0
        t = 0
      t0 = toff[c, t]
      tl = tlen[c, t]
      if p + tl > end or not bytes_match(buf, p, tmpl, t0, tl):
        continue
      q = p + tl
      if kind == KIND_INT:
        v, r = get_varint(buf, q, end)
        if r != q + t:
          return False
        bits[slots[c], row] = v
        p = r
      else:  # KIND_FLOAT
        if q + 4 > end:
          return False
        bits[slots[c], row] = get_fixed32(buf, q)
        p = q + 4
      count[c, row] = 1
    if p != end:
      return False
  return True


@numba.njit(cache=True, nogil=True)
def _gather(buf, starts, lengths, valid, offsets, out):
  for i in range(starts.shape[0]):
    if valid[i]:
      copy_bytes(out, offsets[i], buf, starts[i], lengths[i])


def _kind(typ):
  if pa.types.is_integer(typ):
    return KIND_INT
  if pa.types.is_floating(typ):
    return KIND_FLOAT
  return KIND_BYTES


def decode_examples(data, offsets, columns):
  """decode_tfrecord for serialized tf.Examples back to back (encode_examples' output): record
  i is data[offsets[i]:offsets[i + 1]]."""
  buf = np.frombuffer(data, dtype=np.uint8)
  offsets = np.asarray(offsets, dtype=np.int64)
  return decode_records(buf, offsets[:-1], offsets[1:], columns)


def decode_records(buf, starts, ends, columns):
  """A table of flat columns [(name, arrow type)] from the Examples buf[starts[i]:ends[i]] (buf:
  uint8). Raises TFRecordError for a malformed record, more than one value, or a feature whose
  list type is not its column's."""
  columns = list(columns)
  order = sorted(range(len(columns)), key=lambda c: columns[c][0].encode("utf-8"))
  position = {c: i for i, c in enumerate(order)}  # kernel column of each requested column
  encoded = [columns[c][0].encode("utf-8") for c in order]
  name_starts = np.zeros(len(columns) + 1, dtype=np.int64)
  np.cumsum([len(e) for e in encoded], out=name_starts[1:])
  names = np.frombuffer(b"".join(encoded), dtype=np.uint8) if encoded and name_starts[-1] \
      else np.zeros(1, dtype=np.uint8)
  kinds = np.array([_kind(columns[c][1]) for c in order], dtype=np.int64)
  is_bytes = kinds == KIND_BYTES
  slots = np.zeros(len(kinds), dtype=np.int64)  # row of each column in bits / in spans
  slots[~is_bytes] = np.arange(int((~is_bytes).sum()))
  slots[is_bytes] = np.arange(int(is_bytes.sum()))
  n = len(starts)
  count = np.zeros((len(columns), n), dtype=np.uint8)
  bits = np.zeros((int((~is_bytes).sum()), n), dtype=np.uint64)
  spans = np.zeros((2, int(is_bytes.sum()), n), dtype=np.int64)
  tmpl, toff, tlen, clen = entry_templates(kinds, encoded)
  if not _decode_canonical(buf, starts, ends, names, name_starts, kinds, slots, tmpl, toff, tlen,
                           clen, count, bits, spans):
    count[:] = 0  # what the fast path filled before the record it could not match
    bits[:] = 0
    spans[:] = 0
    error, row = parse_examples(buf, starts, ends, names, name_starts, kinds, slots, count, bits,
                                spans)
    if error:
      raise TFRecordError(f"record {row}: {PARSE_ERRORS[error]}")
  # Whole-array steps for all columns at once, then zero-copy Arrow arrays: few numpy calls
  # (each gives the GIL back, and on a worker thread may wait to take it again).
  valid_all = count == 1
  nulls = n - valid_all.sum(axis=1)
  is_float = kinds[~is_bytes] == KIND_FLOAT
  floats = np.empty((0, n)) if not is_float.any() else \
      bits[is_float].astype(np.uint32).view(np.float32).astype(np.float64)
  float_row = np.cumsum(is_float) - 1  # row in floats of each int/float slot
  arrays = []
  for name, typ in columns:
    c = position[len(arrays)]
    valid = valid_all[c]
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls[c] else None
    k = slots[c]
    if kinds[c] == KIND_INT:
      arr = pa.Array.from_buffers(pa.int64(), n, [bitmap, pa.py_buffer(bits[k])])
      arr = arr if typ == pa.int64() else arr.cast(typ)
    elif kinds[c] == KIND_FLOAT:
      arr = pa.Array.from_buffers(pa.float64(), n, [bitmap, pa.py_buffer(floats[float_row[k]])])
      arr = arr if typ == pa.float64() else arr.cast(typ)
    else:
      lengths = np.where(valid, spans[1, k], 0)
      offsets = np.zeros(n + 1, dtype=np.int64)
      np.cumsum(lengths, out=offsets[1:])
      out = np.empty(offsets[-1], dtype=np.uint8)
      _gather(buf, spans[0, k], spans[1, k], valid, offsets, out)
      arr = pa.Array.from_buffers(pa.large_binary(), n,
                                  [bitmap, pa.py_buffer(offsets), pa.py_buffer(out)])
      arr = arr.cast(pa.large_string()).cast(typ) if pa.types.is_string(typ) or \
          pa.types.is_large_string(typ) else arr.cast(typ)
    arrays.append(arr)
  return pa.table(arrays, names=[name for name, _ in columns])
