"""The protobuf parser of serialized tf.Examples, compiled: reads any valid encoding (packed or
unpacked lists, unknown fields skipped, repeated keys and oneof lists last-wins) into per-column
arrays without a Python object per record.

example_decode.py tries its template-matching fast path first and falls back to this parser for
records the encoder did not write; this parser is also the one that names what is wrong with a
record (PARSE_ERRORS).
"""
import numba
import numpy as np

from transforms.codec.kinds import KIND_BYTES, KIND_FLOAT, KIND_INT

__all__ = ["parse_examples", "PARSE_ERRORS", "get_varint", "get_fixed32"]

# Wire types of the protobuf encoding.
_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5
# What parse_examples' error codes mean.
PARSE_ERRORS = {1: "malformed protobuf", 2: "a feature holds more than one value",
                3: "a feature has another type than its column"}


@numba.njit(inline="always")
def get_varint(buf, pos, end):
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
def get_fixed32(buf, pos):
  """The little-endian 32 bits at buf[pos:pos + 4] (a float's bit pattern), as uint64."""
  return (np.uint64(buf[pos]) | (np.uint64(buf[pos + 1]) << np.uint64(8))
          | (np.uint64(buf[pos + 2]) << np.uint64(16)) | (np.uint64(buf[pos + 3]) << np.uint64(24)))


@numba.njit(inline="always")
def _skip(buf, pos, end, wire):
  """Position after an unknown field's value (-1 when malformed)."""
  if wire == _VARINT:
    _, pos = get_varint(buf, pos, end)
    return pos
  if wire == _FIXED64:
    return pos + 8 if pos + 8 <= end else -1
  if wire == _FIXED32:
    return pos + 4 if pos + 4 <= end else -1
  if wire == _LEN:
    n, pos = get_varint(buf, pos, end)
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
    tag, pos = get_varint(buf, pos, end)
    if pos < 0:
      return -1, 0, 0
    if tag != 0x0A:
      pos = _skip(buf, pos, end, tag & np.uint64(7))
      if pos < 0:
        return -1, 0, 0
      continue
    n, pos = get_varint(buf, pos, end)
    if pos < 0 or n > np.uint64(end - pos):
      return -1, 0, 0
    stop = pos + np.int64(n)
    return 1, pos, stop
  return 0, end, end


@numba.njit(cache=True, nogil=True)
def parse_examples(buf, starts, ends, names, name_starts, kinds, slots, count, bits, spans):
  """Fills count [column, row], bits [slot, row] (int and float columns) and spans
  [0 start / 1 length, slot, row] (bytes columns) from the Examples buf[starts[i]:ends[i]];
  slots[c] is column c's row in bits or spans.

  Returns (error code, row): (0, 0) when every record parsed, else a PARSE_ERRORS code and the
  record. count: 0, 1 or 2 (more than one) values; bits: int64 two's complement or float32 bit
  pattern; spans: the bytes value in buf.
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
          tag, pos = get_varint(buf, pos, eend)
          if pos < 0:
            return 1, row
          if tag == 0x0A or tag == 0x12:
            n, pos = get_varint(buf, pos, eend)
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
          tag, p = get_varint(buf, p, vhi)
          if p < 0:
            return 1, row
          field, wire = tag >> np.uint64(3), tag & np.uint64(7)
          if wire != _LEN or field < 1 or field > 3:
            p = _skip(buf, p, vhi, wire)
            if p < 0:
              return 1, row
            continue
          n, p = get_varint(buf, p, vhi)
          if p < 0 or n > np.uint64(vhi - p):
            return 1, row
          stop = p + np.int64(n)
          kind = kinds[col]
          if (field == 1 and kind != KIND_BYTES) or (field == 2 and kind != KIND_FLOAT) or \
              (field == 3 and kind != KIND_INT):
            return 3, row
          count[col, row] = 0  # oneof: the last list set wins
          # The list's values (Int64List / FloatList / BytesList), read here: the same code in
          # an inlined helper taking the output arrays made this kernel 2.8x slower (204 ->
          # 72 ms a 111k-row batch; numba keeps reference counting around such calls).
          slot = slots[col]
          q = p
          while q < stop:
            t2, q = get_varint(buf, q, stop)
            if q < 0:
              return 1, row
            if t2 >> np.uint64(3) != np.uint64(1):  # not the values field: skipped
              q = _skip(buf, q, stop, t2 & np.uint64(7))
              if q < 0:
                return 1, row
              continue
            wire = t2 & np.uint64(7)
            if kind == KIND_INT and wire == _VARINT:  # unpacked int64
              v, q = get_varint(buf, q, stop)
              if q < 0:
                return 1, row
              bits[slot, row] = v
              count[col, row] = min(count[col, row] + 1, 2)
            elif kind == KIND_FLOAT and wire == _FIXED32:  # unpacked float
              if q + 4 > stop:
                return 1, row
              bits[slot, row] = get_fixed32(buf, q)
              count[col, row] = min(count[col, row] + 1, 2)
              q += 4
            elif wire == _LEN:
              m, q = get_varint(buf, q, stop)
              if q < 0 or m > np.uint64(stop - q):
                return 1, row
              s2 = q + np.int64(m)
              if kind == KIND_BYTES:  # one bytes value
                spans[0, slot, row] = q
                spans[1, slot, row] = s2 - q
                count[col, row] = min(count[col, row] + 1, 2)
              elif kind == KIND_INT:  # packed varints
                while q < s2:
                  v, q = get_varint(buf, q, s2)
                  if q < 0:
                    return 1, row
                  bits[slot, row] = v
                  count[col, row] = min(count[col, row] + 1, 2)
              else:  # packed floats
                if (s2 - q) % 4:
                  return 1, row
                while q < s2:
                  bits[slot, row] = get_fixed32(buf, q)
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
