"""tf.Example encoder: an Arrow table of flat columns -> deterministic serialized
tf.train.Examples, one per row, back to back or in TFRecord framing (tfrecord.py).

tf.Example holds int64, float32 and bytes lists only, so FLOAT (float64) columns are written
as float32 (rounded to nearest); Parquet keeps them exact. Each CSV value becomes a
one-element list; a missing value is an absent feature (decoded as null).

The framing is written here, in the same compiled pass as the Examples (each record's length,
its CRC and the Example's CRC around it), so a framed file is built without a second copy.
"""
import numba
import numpy as np
import pyarrow as pa

from transforms.codec.arrow_buffers import fixed_values, validity
from transforms.codec.crc32c import CRC_TABLE, crc32c_masked
from transforms.codec.kinds import KIND_BYTES, KIND_FLOAT, KIND_INT
from transforms.codec.words import copy_bytes

__all__ = ["encode_examples", "encode_table", "entry_templates", "varint_len"]


@numba.njit(inline="always")
def varint_len(v):
  """Bytes of v's protobuf varint encoding."""
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


@numba.njit(inline="always")
def _bytes_entry_len(klen, blen):
  """Bytes of a map entry (its tag and length included) holding one BytesList value."""
  inner = 1 + varint_len(np.uint64(blen)) + blen  # BytesList: 0x0A len bytes
  flen = 1 + varint_len(np.uint64(inner)) + inner
  entry = 1 + varint_len(np.uint64(klen)) + klen + 1 + varint_len(np.uint64(flen)) + flen
  return 1 + varint_len(np.uint64(entry)) + entry, entry, flen, inner


@numba.njit(inline="always")
def _template(kind, ival):
  """Which template of a feature's entry a value uses: its varint length (int), 0 (float)."""
  return varint_len(np.uint64(ival)) if kind == KIND_INT else 0


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
      if kind == KIND_INT:
        t = _template(kind, ivals[slots[f], i])
        feats += tlen[f, t] + t
      elif kind == KIND_FLOAT:
        feats += tlen[f, 0] + 4
      else:  # KIND_BYTES
        feats += _bytes_entry_len(name_starts[f + 1] - name_starts[f],
                                  bstart[slots[f], i + 1] - bstart[slots[f], i])[0]
    feat_sizes[i] = feats
    sizes[i] = 1 + varint_len(np.uint64(feats)) + feats


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
      c = crc32c_masked(out, pos, pos + 8, table)
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
      if kind != KIND_BYTES:
        t = _template(kind, ivals[slots[f], i])
        t0 = toff[f, t]
        tl = tlen[f, t]
        p = copy_bytes(out, p, tmpl, t0, tl)
        if kind == KIND_INT:
          p = _put_varint(out, p, np.uint64(ivals[slots[f], i]))
        else:  # KIND_FLOAT
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
      p = copy_bytes(out, p, names, k0, klen)
      out[p] = 0x12  # value: Feature
      p = _put_varint(out, p + 1, np.uint64(flen))
      out[p] = 0x0A  # bytes_list
      p = _put_varint(out, p + 1, np.uint64(inner))
      out[p] = 0x0A
      p = _put_varint(out, p + 1, np.uint64(blen))
      p = copy_bytes(out, p, bdata, b0, blen)
    if framed:
      c = crc32c_masked(out, start, p, table)
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


def entry_templates(kinds, names):
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


def encode_examples(table):
  """(bytes, offsets): the serialized tf.Examples of encode_tfrecord back to back, without the
  TFRecord framing; record i is bytes[offsets[i]:offsets[i + 1]] (offsets: n + 1 int64)."""
  out, sizes = encode_table(table, False)
  offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
  np.cumsum(sizes, out=offsets[1:])
  return out, offsets


def encode_table(table, framed):
  """(output bytes, serialized Example size of each row): the table's Examples as TFRecords
  (framed) or back to back."""
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
  tmpl, toff, tlen, _ = entry_templates(kinds, names)
  names = np.frombuffer(b"".join(names), dtype=np.uint8)
  # Pass 1 sizes every record, pass 2 writes them into one buffer.
  sizes = np.zeros(n, dtype=np.int64)
  feat_sizes = np.zeros(n, dtype=np.int64)
  _sizes(kinds, slots, name_starts, tlen, valid, ivals, bstart, sizes, feat_sizes)
  out = np.empty(int(sizes.sum()) + (16 * n if framed else 0), dtype=np.uint8)
  _encode(kinds, slots, names, name_starts, tmpl, toff, tlen, valid, ivals, fbits, bstart,
          bdata, CRC_TABLE, sizes, feat_sizes, out, 0, framed)
  return out, sizes
