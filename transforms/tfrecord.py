"""tf.Example shards: Arrow table -> deterministic tf.train.Example TFRecord bytes, and back.

tf.Example holds int64, float32 and bytes lists only, so FLOAT (float64) columns are written
as float32 (rounded to nearest); Parquet keeps them exact. Each CSV value becomes a
one-element list; a missing value is an absent feature (decoded as null).
"""
import platform

import llvmlite.binding as llvm
import numba
import numpy as np
import pyarrow as pa
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from transforms.fingerprint import fixed_values, validity

__all__ = ["encode_tfrecord", "decode_tfrecord", "encode_examples", "decode_examples",
           "read_records", "TFRecordError"]

_MASK_DELTA = 0xA282EAD8


class TFRecordError(ValueError):
  """A TFRecord file whose framing or checksums are wrong."""


def _crc_table():
  """CRC32C (Castagnoli) slice-by-8 tables: table[k][b] is byte b's CRC followed by k zeros."""
  table = np.zeros((8, 256), dtype=np.uint32)
  for i in range(256):
    c = i
    for _ in range(8):
      c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    table[0, i] = c
  for k in range(1, 8):
    table[k] = (table[k - 1] >> 8) ^ table[0, table[k - 1] & 0xFF]
  return table


_CRC_TABLE = _crc_table()
KIND_INT, KIND_FLOAT, KIND_BYTES = 0, 1, 2


@numba.njit(inline="always")
def _varint_len(v):
  n = 1
  while v >= 128:
    v >>= np.uint64(7)
    n += 1
  return n


@numba.njit(inline="always")
def _put_varint(out, pos, v):
  while v >= 128:
    out[pos] = np.uint8((v & np.uint64(127)) | np.uint64(128))
    v >>= np.uint64(7)
    pos += 1
  out[pos] = np.uint8(v)
  return pos + 1


def _has_sse42():
  """Whether the CPU numba compiles for has SSE4.2's crc32 instruction: numba targets the
  NUMBA_CPU_FEATURES features when they are set (NUMBA_CPU_NAME=generic sets none), else the
  host's, and so does this check."""
  if platform.machine().lower() not in ("x86_64", "amd64"):
    return False
  if numba.core.config.CPU_FEATURES is not None:
    return "+sse4.2" in numba.core.config.CPU_FEATURES.split(",")
  try:
    return bool(llvm.get_host_cpu_features().get("sse4.2", False))
  except RuntimeError:  # llvmlite cannot list this host's features: take the tables
    return False


def _bytes_array(buf):
  """Whether a numba type is a 1-d C-contiguous uint8 array: the one layout the word
  intrinsics address by data pointer + position (they ignore strides)."""
  return (isinstance(buf, types.Array) and buf.ndim == 1 and buf.layout == "C"
          and buf.dtype == types.uint8)


@intrinsic
def _load_u64(typingctx, buf, pos):
  """The little-endian uint64 at buf[pos:pos + 8] of a uint8 array, one unaligned load."""
  if not _bytes_array(buf):
    return None
  sig = types.uint64(buf, pos)

  def codegen(context, builder, signature, args):
    data = context.make_array(signature.args[0])(context, builder, args[0]).data
    ptr = builder.bitcast(builder.gep(data, [args[1]]), ir.IntType(64).as_pointer())
    return builder.load(ptr, align=1)
  return sig, codegen


@intrinsic
def _store_u64(typingctx, buf, pos, value):
  """buf[pos:pos + 8] = the little-endian bytes of uint64 value, one unaligned store."""
  if not _bytes_array(buf):
    return None
  sig = types.void(buf, pos, types.uint64)

  def codegen(context, builder, signature, args):
    data = context.make_array(signature.args[0])(context, builder, args[0]).data
    ptr = builder.bitcast(builder.gep(data, [args[1]]), ir.IntType(64).as_pointer())
    builder.store(args[2], ptr, align=1)
    return context.get_dummy_value()
  return sig, codegen


@numba.njit(inline="always")
def _copy(out, p, src, s, n):
  """out[p:p + n] = src[s:s + n], eight bytes per load and store, then the tail bytes; returns
  p + n. (A numba slice assignment copies byte by byte, clamping every index: the encoder's
  map-entry templates and names went through that at ~1 GB/s.)"""
  q = 0
  while q + 8 <= n:
    _store_u64(out, p + q, _load_u64(src, s + q))
    q += 8
  while q < n:
    out[p + q] = src[s + q]
    q += 1
  return p + n


def _sse42_crc32(width, value_type, name):
  """A numba intrinsic for SSE4.2's crc32 of a `value_type` into a `width`-bit accumulator."""
  acc = types.uint64 if width == 64 else types.uint32

  @intrinsic
  def crc32(typingctx, crc, value):
    def codegen(context, builder, signature, args):
      fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
          ir.IntType(width), [ir.IntType(width), ir.IntType(value_type.bitwidth)]), name)
      return builder.call(fn, args)
    return acc(acc, value_type), codegen
  return crc32


_crc32c_u64 = _sse42_crc32(64, types.uint64, "llvm.x86.sse42.crc32.64.64")
_crc32c_u8 = _sse42_crc32(32, types.uint8, "llvm.x86.sse42.crc32.32.8")


@numba.njit(inline="always")
def _crc32c_masked_sse42(buf, lo, hi, t):
  """_crc32c_masked with SSE4.2's crc32 instruction, eight bytes per instruction (t unused)."""
  c = np.uint64(0xFFFFFFFF)
  p = lo
  while p + 8 <= hi:
    c = _crc32c_u64(c, _load_u64(buf, p))
    p += 8
  c32 = np.uint32(c)
  while p < hi:
    c32 = _crc32c_u8(c32, buf[p])
    p += 1
  c32 = c32 ^ np.uint32(0xFFFFFFFF)
  return ((c32 >> np.uint32(15)) | (c32 << np.uint32(17))) + np.uint32(_MASK_DELTA)


@numba.njit(inline="always")
def _crc32c_masked_table(buf, lo, hi, t):
  """Masked CRC32C of buf[lo:hi], eight bytes per step (slice-by-8 tables t)."""
  c = np.uint32(0xFFFFFFFF)
  p = lo
  while p + 8 <= hi:
    a = c ^ (np.uint32(buf[p]) | (np.uint32(buf[p + 1]) << np.uint32(8))
             | (np.uint32(buf[p + 2]) << np.uint32(16)) | (np.uint32(buf[p + 3]) << np.uint32(24)))
    c = (t[7, a & np.uint32(0xFF)] ^ t[6, (a >> np.uint32(8)) & np.uint32(0xFF)]
         ^ t[5, (a >> np.uint32(16)) & np.uint32(0xFF)] ^ t[4, a >> np.uint32(24)]
         ^ t[3, buf[p + 4]] ^ t[2, buf[p + 5]] ^ t[1, buf[p + 6]] ^ t[0, buf[p + 7]])
    p += 8
  while p < hi:
    c = t[0, (c ^ buf[p]) & np.uint32(0xFF)] ^ (c >> np.uint32(8))
    p += 1
  c = c ^ np.uint32(0xFFFFFFFF)
  return ((c >> np.uint32(15)) | (c << np.uint32(17))) + np.uint32(_MASK_DELTA)


# The kernels use the crc32 instruction where the CPU has it (34 MB: 3 ms instead of 15), the
# tables elsewhere; numba keys its cache by the target CPU's name and features (those _has_sse42
# checks), so a cached kernel never meets the wrong one.
HARDWARE_CRC = _has_sse42()
_crc32c_masked = _crc32c_masked_sse42 if HARDWARE_CRC else _crc32c_masked_table


@numba.njit(inline="always")
def _bytes_entry_len(klen, blen):
  """Bytes of a map entry (its tag and length included) holding one BytesList value."""
  inner = 1 + _varint_len(np.uint64(blen)) + blen  # BytesList: 0x0A len bytes
  flen = 1 + _varint_len(np.uint64(inner)) + inner
  entry = 1 + _varint_len(np.uint64(klen)) + klen + 1 + _varint_len(np.uint64(flen)) + flen
  return 1 + _varint_len(np.uint64(entry)) + entry, entry, flen, inner


@numba.njit(inline="always")
def _template(kind, ival):
  """Which template of a feature's entry a value uses: its varint length (int), 0 (float)."""
  return _varint_len(np.uint64(ival)) if kind == 0 else 0


@numba.njit(cache=True, nogil=True)
def _sizes(kinds, slots, name_starts, tlen, valid, ivals, bstart, sizes, feat_sizes):
  """Per row: serialized Example bytes (sizes) and its Features message bytes (feat_sizes)."""
  nf, n = valid.shape
  for i in range(n):
    feats = 0
    for f in range(nf):
      if not valid[f, i]:
        continue
      kind = kinds[f]
      if kind == 0:
        t = _template(kind, ivals[slots[f], i])
        feats += tlen[f, t] + t
      elif kind == 1:
        feats += tlen[f, 0] + 4
      else:
        feats += _bytes_entry_len(name_starts[f + 1] - name_starts[f],
                                  bstart[slots[f], i + 1] - bstart[slots[f], i])[0]
    feat_sizes[i] = feats
    sizes[i] = 1 + _varint_len(np.uint64(feats)) + feats


@numba.njit(cache=True, nogil=True)
def _encode(kinds, slots, names, name_starts, tmpl, toff, tlen, valid, ivals, fbits, bstart,
            bdata, table, sizes, feat_sizes, out, pos, framed):
  """Writes deterministic tf.Examples (features sorted by name, nulls omitted) into out from
  byte pos, as TFRecords (framed) or back to back; returns the end position.

  An int or float feature's map entry is a fixed template (tmpl[toff[f, t]:][:tlen[f, t]], t
  from _template) followed by the value's bytes; a bytes feature's entry is built here.
  valid is [feature, row]; ivals, fbits and bstart are [slot, row] (bstart: row + 1, offsets
  into bdata), slots[f] being feature f's row in the one its kind uses.
  """
  nf, n = valid.shape
  for i in range(n):
    start = pos
    if framed:
      size = sizes[i]
      for q in range(8):
        out[pos + q] = np.uint8((size >> (8 * q)) & 0xFF)
      c = _crc32c_masked(out, pos, pos + 8, table)
      for q in range(4):
        out[pos + 8 + q] = np.uint8((c >> np.uint32(8 * q)) & np.uint32(0xFF))
      start = pos + 12
    p = start
    # Example.features (field 1) -> Features.feature map entries (field 1).
    out[p] = 0x0A
    p = _put_varint(out, p + 1, np.uint64(feat_sizes[i]))
    for f in range(nf):
      if not valid[f, i]:
        continue
      kind = kinds[f]
      if kind != 2:
        t = _template(kind, ivals[slots[f], i])
        t0 = toff[f, t]
        tl = tlen[f, t]
        p = _copy(out, p, tmpl, t0, tl)
        if kind == 0:
          p = _put_varint(out, p, np.uint64(ivals[slots[f], i]))
        else:
          bits = fbits[slots[f], i]
          for q in range(4):
            out[p + q] = np.uint8((bits >> np.uint32(8 * q)) & np.uint32(0xFF))
          p += 4
        continue
      k0 = name_starts[f]
      klen = name_starts[f + 1] - k0
      b0 = bstart[slots[f], i]
      blen = bstart[slots[f], i + 1] - b0
      _, entry, flen, inner = _bytes_entry_len(klen, blen)
      out[p] = 0x0A
      p = _put_varint(out, p + 1, np.uint64(entry))
      out[p] = 0x0A  # key
      p = _put_varint(out, p + 1, np.uint64(klen))
      p = _copy(out, p, names, k0, klen)
      out[p] = 0x12  # value: Feature
      p = _put_varint(out, p + 1, np.uint64(flen))
      out[p] = 0x0A  # bytes_list
      p = _put_varint(out, p + 1, np.uint64(inner))
      out[p] = 0x0A
      p = _put_varint(out, p + 1, np.uint64(blen))
      p = _copy(out, p, bdata, b0, blen)
    if framed:
      c = _crc32c_masked(out, start, p, table)
      for q in range(4):
        out[p + q] = np.uint8((c >> np.uint32(8 * q)) & np.uint32(0xFF))
      p += 4
    pos = p
  return pos


def _varint(v):
  out = bytearray()
  while v >= 128:
    out.append((v & 127) | 128)
    v >>= 7
  out.append(v)
  return bytes(out)


def _templates(kinds, names):
  """(tmpl, toff, tlen, clen): per int/float feature the bytes of its map entry before the
  value -- entry tag and length, key, Feature and list headers -- for each value length t
  (1..10 bytes of an int's varint; t = 0 for a float's 4 bytes): protobuf's encoding of a
  one-value Int64List (packed) / FloatList entry, all but the value fixed by the name; clen:
  the length an entry declares less its value's bytes (the same for every t)."""
  toff = np.zeros((len(names), 11), np.int64)
  tlen = np.zeros((len(names), 11), np.int64)
  clen = np.zeros(len(names), np.int64)
  parts, base = [], 0
  for f, (kind, name) in enumerate(zip(kinds, names)):
    if kind == KIND_BYTES:
      continue
    for t in (range(1, 11) if kind == KIND_INT else [0]):
      if kind == KIND_INT:  # int64_list (field 3): packed values (field 1, one varint of t bytes)
        value_len, feature = t, b"\x1a" + _varint(2 + t) + b"\x0a" + bytes([t])
      else:  # float_list (field 2): packed values (field 1, 4 bytes)
        value_len, feature = 4, b"\x12\x06\x0a\x04"
      content = (b"\x0a" + _varint(len(name)) + name + b"\x12" +
                 _varint(len(feature) + value_len) + feature)
      head = b"\x0a" + _varint(len(content) + value_len) + content
      parts.append(head)
      toff[f, t], tlen[f, t], clen[f] = base, len(head), len(content)
      base += len(head)
  tmpl = np.frombuffer(b"".join(parts), dtype=np.uint8) if parts else np.zeros(0, np.uint8)
  return tmpl, toff, tlen, clen


def encode_tfrecord(table):
  """TFRecord file bytes (a uint8 numpy array): one tf.train.Example per row of a table of flat
  columns.

  Serialization is deterministic (features sorted by name, as protobuf's deterministic mode
  orders map keys; a null value is an absent feature), so equal tables give equal bytes.
  tfx_bsl's RecordBatchToExamplesEncoder serializes the feature map in an unspecified order
  that changes between calls, which would break byte-identical shards.
  """
  return _encode_table(table, True)[0]


def encode_examples(table):
  """(bytes, offsets): the serialized tf.Examples of encode_tfrecord back to back, without the
  TFRecord framing; record i is bytes[offsets[i]:offsets[i + 1]] (offsets: n + 1 int64)."""
  out, sizes = _encode_table(table, False)
  offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
  np.cumsum(sizes, out=offsets[1:])
  return out, offsets


def _encode_table(table, framed):
  """(output bytes, serialized Example size of each row)."""
  n = table.num_rows
  order = sorted(range(table.num_columns), key=lambda i: table.schema.names[i].encode("utf-8"))
  nf = len(order)
  names = [table.schema.names[i].encode("utf-8") for i in order]
  name_starts = np.zeros(nf + 1, dtype=np.int64)
  np.cumsum([len(x) for x in names], out=name_starts[1:])
  kinds = np.zeros(nf, dtype=np.int8)
  slots = np.zeros(nf, dtype=np.int64)
  # The kernels take each column laid out once, in whole-batch rows: valid[feature] and, by
  # kind, ivals / fbits / bstart[slot]. A handful of numpy copies, each of which releases the
  # GIL and takes it back: copying the columns chunk by chunk (~800 copies a 111k-row batch)
  # made a batch wait up to a switch interval per copy beside a thread running Python.
  arrays = [table.column(i).combine_chunks() for i in order]
  by_kind = {KIND_INT: [], KIND_FLOAT: [], KIND_BYTES: []}
  for f, arr in enumerate(arrays):
    t = arr.type
    kinds[f] = (KIND_INT if pa.types.is_integer(t) else KIND_FLOAT if pa.types.is_floating(t)
                else KIND_BYTES)
    slots[f] = len(by_kind[kinds[f]])
    by_kind[kinds[f]].append(f)
  valid = np.ones((nf, n), dtype=np.bool_)
  ivals = np.empty((len(by_kind[KIND_INT]), n), dtype=np.int64)
  fbits = np.empty((len(by_kind[KIND_FLOAT]), n), dtype=np.uint32)
  bstart = np.empty((len(by_kind[KIND_BYTES]), n + 1), dtype=np.int64)
  datas, base = [], 0
  for f, arr in enumerate(arrays):
    has = validity(arr)
    if has is not None:
      valid[f] = has
    if kinds[f] == KIND_INT:  # a null's slot is never read
      ivals[slots[f]] = fixed_values(arr, pa.int64(), np.int64)
    elif kinds[f] == KIND_FLOAT:
      fbits[slots[f]] = fixed_values(arr, pa.float32(), np.uint32)
    else:
      arr = arr.cast(pa.large_binary())
      offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + n + 1]
      data = np.frombuffer(arr.buffers()[2], dtype=np.uint8) if arr.buffers()[2] else \
          np.zeros(0, np.uint8)
      datas.append(data[offsets[0]:offsets[-1]])
      np.add(offsets, base - offsets[0], out=bstart[slots[f]])
      base += int(offsets[-1] - offsets[0]) if n else 0
  bdata = np.concatenate(datas) if datas else np.zeros(0, np.uint8)
  tmpl, toff, tlen, _ = _templates(kinds, names)
  names = np.frombuffer(b"".join(names), dtype=np.uint8)
  # Pass 1 sizes every record, pass 2 writes them into one buffer.
  sizes = np.zeros(n, dtype=np.int64)
  feat_sizes = np.zeros(n, dtype=np.int64)
  _sizes(kinds, slots, name_starts, tlen, valid, ivals, bstart, sizes, feat_sizes)
  out = np.empty(int(sizes.sum()) + (16 * n if framed else 0), dtype=np.uint8)
  _encode(kinds, slots, names, name_starts, tmpl, toff, tlen, valid, ivals, fbits, bstart,
          bdata, _CRC_TABLE, sizes, feat_sizes, out, 0, framed)
  return out, sizes


@numba.njit(cache=True, nogil=True)
def _frames(buf, table):
  """(record starts, record ends, error code, error position) of TFRecord bytes.

  Error codes: 0 none, 1 truncated header, 2 bad length checksum, 3 truncated record,
  4 bad data checksum.
  """
  size = buf.size
  starts = np.empty(size // 16 + 1, dtype=np.int64)
  ends = np.empty(size // 16 + 1, dtype=np.int64)
  n = 0
  pos = 0
  while pos < size:
    if size - pos < 12:
      return starts[:n], ends[:n], 1, pos
    length = 0
    for q in range(8):
      length |= np.int64(buf[pos + q]) << (8 * q)
    stored = np.uint32(0)
    for q in range(4):
      stored |= np.uint32(buf[pos + 8 + q]) << np.uint32(8 * q)
    if np.uint32(_crc32c_masked(buf, pos, pos + 8, table) & 0xFFFFFFFF) != stored:
      return starts[:n], ends[:n], 2, pos
    end = pos + 12 + length
    if length < 0 or end + 4 > size:
      return starts[:n], ends[:n], 3, pos
    stored = np.uint32(0)
    for q in range(4):
      stored |= np.uint32(buf[end + q]) << np.uint32(8 * q)
    if np.uint32(_crc32c_masked(buf, pos + 12, end, table) & 0xFFFFFFFF) != stored:
      return starts[:n], ends[:n], 4, pos
    starts[n] = pos + 12
    ends[n] = end
    n += 1
    pos = end + 4
  return starts[:n], ends[:n], 0, pos


_FRAME_ERRORS = {1: "truncated record header", 2: "bad length checksum",
                 3: "truncated record", 4: "bad data checksum in record"}


def read_records(data):
  """Record bytes (a list) from TFRecord file bytes, checking framing and every CRC."""
  buf = np.frombuffer(data, dtype=np.uint8)
  starts, ends, error, pos = _frames(buf, _CRC_TABLE)
  if error:
    raise TFRecordError(f"{_FRAME_ERRORS[error]} at byte {pos}")
  offsets = np.zeros(len(starts) + 1, dtype=np.int64)
  np.cumsum(ends - starts, out=offsets[1:])
  data_bytes = np.ones(buf.size, dtype=bool)  # all but each record's 12 + 4 framing bytes
  data_bytes[(starts[:, None] - 12 + np.arange(12)).ravel()] = False
  data_bytes[(ends[:, None] + np.arange(4)).ravel()] = False
  array = pa.Array.from_buffers(pa.large_binary(), len(starts),
                                [None, pa.py_buffer(offsets), pa.py_buffer(buf[data_bytes])])
  return array.to_pylist()


# -- decoding without Python objects per record ------------------------------------------------
# Wire types of the protobuf encoding.
_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5
_DECODE_ERRORS = {1: "malformed protobuf", 2: "a feature holds more than one value",
                  3: "a feature has another type than its column"}


@numba.njit(inline="always")
def _get_varint(buf, pos, end):
  """(value as uint64, next position); position -1 when the varint runs past end."""
  if pos < end and buf[pos] < 128:  # the common case: one byte
    return np.uint64(buf[pos]), pos + 1
  v = np.uint64(0)
  shift = np.uint64(0)
  while pos < end and shift < 64:
    b = buf[pos]
    v |= np.uint64(b & 127) << shift
    pos += 1
    if b < 128:
      return v, pos
    shift += np.uint64(7)
  return v, -1


@numba.njit(inline="always")
def _get_fixed32(buf, pos):
  """The little-endian 32 bits at buf[pos:pos + 4] (a float's bit pattern), as uint64."""
  return (np.uint64(buf[pos]) | (np.uint64(buf[pos + 1]) << np.uint64(8))
          | (np.uint64(buf[pos + 2]) << np.uint64(16)) | (np.uint64(buf[pos + 3]) << np.uint64(24)))


@numba.njit(inline="always")
def _skip(buf, pos, end, wire):
  """Position after an unknown field's value (-1 when malformed)."""
  if wire == _VARINT:
    _, pos = _get_varint(buf, pos, end)
    return pos
  if wire == _FIXED64:
    return pos + 8 if pos + 8 <= end else -1
  if wire == _FIXED32:
    return pos + 4 if pos + 4 <= end else -1
  if wire == _LEN:
    n, pos = _get_varint(buf, pos, end)
    if pos < 0 or n > np.uint64(end - pos):
      return -1
    return pos + np.int64(n)
  return -1


@numba.njit(inline="always")
def _same_name(buf, lo, hi, names, name_starts, c):
  s = name_starts[c]
  if name_starts[c + 1] - s != hi - lo:
    return False
  for k in range(hi - lo):
    if buf[lo + k] != names[s + k]:
      return False
  return True


@numba.njit(inline="always")
def _column_of(buf, lo, hi, names, name_starts, hint):
  """The column named buf[lo:hi] (-1 if none); `hint` is tried first (names come sorted)."""
  nc = name_starts.size - 1
  if hint < nc and _same_name(buf, lo, hi, names, name_starts, hint):
    return hint
  for c in range(nc):
    if _same_name(buf, lo, hi, names, name_starts, c):
      return c
  return -1


@numba.njit(inline="always")
def _next_field1(buf, pos, end):
  """Skips unknown fields of buf[pos:end] up to the next field 1 (LEN): (1, start, stop) of its
  bytes; (0, end, end) when there is none; (-1, ..) when malformed."""
  while pos < end:
    tag, pos = _get_varint(buf, pos, end)
    if pos < 0:
      return -1, 0, 0
    if tag != 0x0A:
      pos = _skip(buf, pos, end, tag & np.uint64(7))
      if pos < 0:
        return -1, 0, 0
      continue
    n, pos = _get_varint(buf, pos, end)
    if pos < 0 or n > np.uint64(end - pos):
      return -1, 0, 0
    stop = pos + np.int64(n)
    return 1, pos, stop
  return 0, end, end


@numba.njit(cache=True, nogil=True)
def _decode(buf, starts, ends, names, name_starts, kinds, slots, count, bits, spans):
  """Fills count [column, row], bits [slot, row] (int and float columns) and spans
  [0 start / 1 length, slot, row] (bytes columns) from the Examples buf[starts[i]:ends[i]];
  slots[c] is column c's row in bits or spans.

  Returns (error code, row). count: 0, 1 or 2 (more than one) values; bits: int64 two's
  complement or float32 bit pattern; spans: the bytes value in buf.
  """
  for row in range(starts.size):
    pos, end = starts[row], ends[row]
    hint = 0
    while pos < end:  # Example: `features` is field 1
      found, pos, fend = _next_field1(buf, pos, end)
      if found < 0:
        return 1, row
      if found == 0:
        break
      while pos < fend:  # Features: repeated map entry (field 1)
        found, pos, eend = _next_field1(buf, pos, fend)
        if found < 0:
          return 1, row
        if found == 0:
          break
        col = -1
        vlo = -1
        vhi = -1
        while pos < eend:  # entry: key (1), value (2)
          tag, pos = _get_varint(buf, pos, eend)
          if pos < 0:
            return 1, row
          if tag == 0x0A or tag == 0x12:
            n, pos = _get_varint(buf, pos, eend)
            if pos < 0 or n > np.uint64(eend - pos):
              return 1, row
            stop = pos + np.int64(n)
            if tag == 0x0A:
              col = _column_of(buf, pos, stop, names, name_starts, hint)
            else:
              vlo, vhi = pos, stop
            pos = stop
          else:
            pos = _skip(buf, pos, eend, tag & np.uint64(7))
            if pos < 0:
              return 1, row
        if col >= 0:
          hint = col + 1
        if col < 0 or vlo < 0:
          continue  # a feature of no column, or no value: ignored / missing
        count[col, row] = 0  # a repeated key: the last entry wins, as in protobuf maps
        p = vlo
        while p < vhi:  # Feature: oneof bytes_list (1), float_list (2), int64_list (3)
          tag, p = _get_varint(buf, p, vhi)
          if p < 0:
            return 1, row
          field, wire = tag >> np.uint64(3), tag & np.uint64(7)
          if wire != _LEN or field < 1 or field > 3:
            p = _skip(buf, p, vhi, wire)
            if p < 0:
              return 1, row
            continue
          n, p = _get_varint(buf, p, vhi)
          if p < 0 or n > np.uint64(vhi - p):
            return 1, row
          stop = p + np.int64(n)
          kind = kinds[col]
          if (field == 1 and kind != 2) or (field == 2 and kind != 1) or \
              (field == 3 and kind != 0):
            return 3, row
          count[col, row] = 0  # oneof: the last list set wins
          # The list's values (Int64List / FloatList / BytesList), read here: the same code in
          # an inlined helper taking the output arrays made this kernel 2.8x slower (204 ->
          # 72 ms a 111k-row batch; numba keeps reference counting around such calls).
          slot = slots[col]
          q = p
          while q < stop:
            t2, q = _get_varint(buf, q, stop)
            if q < 0:
              return 1, row
            if t2 >> np.uint64(3) != np.uint64(1):  # not the values field: skipped
              q = _skip(buf, q, stop, t2 & np.uint64(7))
              if q < 0:
                return 1, row
              continue
            wire = t2 & np.uint64(7)
            if kind == 0 and wire == _VARINT:  # unpacked int64
              v, q = _get_varint(buf, q, stop)
              if q < 0:
                return 1, row
              bits[slot, row] = v
              count[col, row] = min(count[col, row] + 1, 2)
            elif kind == 1 and wire == _FIXED32:  # unpacked float
              if q + 4 > stop:
                return 1, row
              bits[slot, row] = _get_fixed32(buf, q)
              count[col, row] = min(count[col, row] + 1, 2)
              q += 4
            elif wire == _LEN:
              m, q = _get_varint(buf, q, stop)
              if q < 0 or m > np.uint64(stop - q):
                return 1, row
              s2 = q + np.int64(m)
              if kind == 2:  # one bytes value
                spans[0, slot, row] = q
                spans[1, slot, row] = s2 - q
                count[col, row] = min(count[col, row] + 1, 2)
              elif kind == 0:  # packed varints
                while q < s2:
                  v, q = _get_varint(buf, q, s2)
                  if q < 0:
                    return 1, row
                  bits[slot, row] = v
                  count[col, row] = min(count[col, row] + 1, 2)
              else:  # packed floats
                if (s2 - q) % 4:
                  return 1, row
                while q < s2:
                  bits[slot, row] = _get_fixed32(buf, q)
                  count[col, row] = min(count[col, row] + 1, 2)
                  q += 4
              q = s2
            else:
              return 1, row
          p = stop
        pos = eend
  for row in range(count.shape[1]):
    for c in range(count.shape[0]):
      if count[c, row] > 1:
        return 2, row
  return 0, 0


@numba.njit(inline="always")
def _matches(buf, p, tmpl, t0, n):
  """Whether buf[p:p + n] == tmpl[t0:t0 + n], eight bytes per comparison, then the tail."""
  k = 0
  while k + 8 <= n:
    if _load_u64(buf, p + k) != _load_u64(tmpl, t0 + k):
      return False
    k += 8
  while k < n:
    if buf[p + k] != tmpl[t0 + k]:
      return False
    k += 1
  return True


@numba.njit(cache=True, nogil=True)
def _decode_canonical(buf, starts, ends, names, name_starts, kinds, slots, tmpl, toff, tlen,
                      clen, count, bits, spans):
  """_decode for records written the way encode_examples writes them -- one map entry per
  non-null column, in name order, each entry the encoder's exact bytes -- by matching every
  entry against its column's template instead of parsing it field by field. Returns True when
  every record matched (count, bits and spans then hold what _decode gives); False at the
  first record that does not, and the caller parses the batch with _decode, which reads any
  valid encoding and reports its errors."""
  nc = kinds.size
  for row in range(starts.size):
    p, end = starts[row], ends[row]
    if p >= end or buf[p] != 0x0A:
      return False
    size, p = _get_varint(buf, p + 1, end)
    if p < 0 or p + np.int64(size) != end:
      return False
    for c in range(nc):
      count[c, row] = 0
      if p >= end:
        continue
      kind = kinds[c]
      if kind == KIND_BYTES:  # 0A entry 0A klen key 12 flen 0A inner 0A blen value
        entry, q = _get_varint(buf, p + 1, end)
        if q < 0 or buf[p] != 0x0A or q >= end or buf[q] != 0x0A:
          return False
        klen, q = _get_varint(buf, q + 1, end)
        k0 = name_starts[c]
        if q < 0 or np.int64(klen) != name_starts[c + 1] - k0 or q + np.int64(klen) > end or \
            not _matches(buf, q, names, k0, name_starts[c + 1] - k0):
          continue  # another column's entry: this one is absent
        q += np.int64(klen)
        if q >= end or buf[q] != 0x12:
          return False
        flen, q = _get_varint(buf, q + 1, end)
        if q < 0 or q >= end or buf[q] != 0x0A:
          return False
        inner, q = _get_varint(buf, q + 1, end)
        if q < 0 or q >= end or buf[q] != 0x0A:
          return False
        blen, r = _get_varint(buf, q + 1, end)
        stop = r + np.int64(blen)
        if r < 0 or stop > end or np.int64(inner) != stop - q or \
            np.int64(flen) != stop - q + 1 + _varint_len(inner) or \
            np.int64(entry) != stop - p - 1 - _varint_len(entry):
          return False
        spans[0, slots[c], row] = r
        spans[1, slots[c], row] = np.int64(blen)
        count[c, row] = 1
        p = stop
        continue
      if kind == KIND_INT:
        entry, q = _get_varint(buf, p + 1, end)
        t = np.int64(entry) - clen[c]
        if q < 0 or t < 1 or t > 10:
          continue
      else:
        t = 0
      t0 = toff[c, t]
      tl = tlen[c, t]
      if p + tl > end or not _matches(buf, p, tmpl, t0, tl):
        continue
      q = p + tl
      if kind == KIND_INT:
        v, r = _get_varint(buf, q, end)
        if r != q + t:
          return False
        bits[slots[c], row] = v
        p = r
      else:
        if q + 4 > end:
          return False
        bits[slots[c], row] = _get_fixed32(buf, q)
        p = q + 4
      count[c, row] = 1
    if p != end:
      return False
  return True


@numba.njit(cache=True, nogil=True)
def _gather(buf, starts, lengths, valid, offsets, out):
  for i in range(starts.shape[0]):
    if valid[i]:
      _copy(out, offsets[i], buf, starts[i], lengths[i])


def _kind(typ):
  if pa.types.is_integer(typ):
    return KIND_INT
  if pa.types.is_floating(typ):
    return KIND_FLOAT
  return KIND_BYTES


def decode_tfrecord(data, columns):
  """A table of flat columns [(name, arrow type)] from TFRecord bytes of one-value tf.Examples.

  Checks framing and every CRC, then parses the Example protobufs in one compiled pass (packed
  or unpacked lists, unknown fields skipped, repeated keys last-wins). An absent feature or an
  empty list decodes as null; FLOAT columns come back as the float32 values widened to the
  column's type. Raises TFRecordError for damage, more than one value, or a feature whose list
  type is not its column's.
  """
  buf = np.frombuffer(data, dtype=np.uint8)
  starts, ends, error, pos = _frames(buf, _CRC_TABLE)
  if error:
    raise TFRecordError(f"{_FRAME_ERRORS[error]} at byte {pos}")
  return _decode_records(buf, starts, ends, columns)


def decode_examples(data, offsets, columns):
  """decode_tfrecord for serialized tf.Examples back to back (encode_examples' output): record
  i is data[offsets[i]:offsets[i + 1]]."""
  buf = np.frombuffer(data, dtype=np.uint8)
  offsets = np.asarray(offsets, dtype=np.int64)
  return _decode_records(buf, offsets[:-1], offsets[1:], columns)


def _decode_records(buf, starts, ends, columns):
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
  tmpl, toff, tlen, clen = _templates(kinds, encoded)
  if not _decode_canonical(buf, starts, ends, names, name_starts, kinds, slots, tmpl, toff, tlen,
                           clen, count, bits, spans):
    count[:] = 0  # what the fast path filled before the record it could not match
    bits[:] = 0
    spans[:] = 0
    error, row = _decode(buf, starts, ends, names, name_starts, kinds, slots, count, bits,
                         spans)
    if error:
      raise TFRecordError(f"record {row}: {_DECODE_ERRORS[error]}")
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
