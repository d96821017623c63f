"""XXH64 of many encoded records at once, compiled with numba: the vectorised coding's hash.

The per-record coding hashes with the `xxhash` package (the reference C library). This
kernel computes the same XXH64 (spec: github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md)
for every row of a batch in one compiled loop, streaming each row's canonical encoding
straight from column buffers instead of materialising it. It relies on two properties of
the fingerprint encoding (transforms/spec/fingerprint.py): everything is a whole number of
8-byte little-endian words, and every row starts with the same header whose length is a
multiple of 32 bytes, so the hash state after the header is computed once and shared.
`xxh64_spans` is plain XXH64 (seed 0) of byte spans, e.g. the UTF-8 keys of an Arrow string
column (the replay diff orders its samples by it).
"""
import numba
import numpy as np

# The field kinds are kinds.py's, shared with the tf.Example codec; they stay importable from
# here because transforms/spec/fingerprint.py imports them beside hash_fields.
from transforms.codec.kinds import (KIND_BYTES, KIND_FLOAT, KIND_INT, KIND_LIST, KIND_MISSING,
                                    KIND_NULL)

__all__ = ["prefix_state", "hash_fields", "hash_scalar_field", "xxh64_spans", "KIND_MISSING",
           "KIND_NULL", "KIND_INT", "KIND_FLOAT", "KIND_BYTES", "KIND_LIST"]

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_U64 = (1 << 64) - 1
_TAG_MISSING, _TAG_NULL, _TAG_INT, _TAG_FLOAT, _TAG_BYTES, _TAG_LIST = range(6)
_EXP = np.uint64(0x7FF0000000000000)
_MANT = np.uint64(0x000FFFFFFFFFFFFF)
_NAN = np.uint64(0x7FF8000000000000)
_NEG_ZERO = np.uint64(0x8000000000000000)


@numba.njit(inline="always")
def _rotl(x, r):
  return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@numba.njit(inline="always")
def _round(acc, lane):
  return _rotl(acc + lane * _P2, 31) * _P1


@numba.njit(inline="always")
def _merge(h, v):
  return (h ^ _round(np.uint64(0), v)) * _P1 + _P4


@numba.njit(cache=True, nogil=True)
def _prefix_state(prefix, seed):
  state = np.empty(4, dtype=np.uint64)
  state[0] = seed + _P1 + _P2
  state[1] = seed + _P2
  state[2] = seed
  state[3] = seed - _P1
  for s in range(prefix.size // 4):
    for j in range(4):
      state[j] = _round(state[j], prefix[4 * s + j])
  return state


def prefix_state(prefix, seed):
  """XXH64 accumulators after `prefix` (uint64 words, a positive multiple of 4)."""
  prefix = np.ascontiguousarray(prefix, dtype=np.uint64)
  if prefix.size == 0 or prefix.size % 4:
    raise ValueError("prefix must be a positive multiple of 4 words")
  return _prefix_state(prefix, np.uint64(seed & _U64))


@numba.njit(inline="always")
def _tail(h, w):
  return _rotl(h ^ _round(np.uint64(0), w), 27) * _P1 + _P4


@numba.njit(inline="always")
def _avalanche(h):
  h ^= h >> np.uint64(33)
  h *= _P2
  h ^= h >> np.uint64(29)
  h *= _P3
  return h ^ (h >> np.uint64(32))


@numba.njit(inline="always")
def _lanes(v1, v2, v3, v4):
  """XXH64's four lanes merged: the first step of its end."""
  h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
  return _merge(_merge(_merge(_merge(h, v1), v2), v3), v4)


@numba.njit(inline="always")
def _hash_words(state, prefix_words, buf, a, b):
  """XXH64 of (the prefix whose accumulators are `state`, prefix_words long) ++ buf[a:b]."""
  v1, v2, v3, v4 = state[0], state[1], state[2], state[3]
  p = a
  while p + 4 <= b:
    v1 = _round(v1, buf[p])
    v2 = _round(v2, buf[p + 1])
    v3 = _round(v3, buf[p + 2])
    v4 = _round(v4, buf[p + 3])
    p += 4
  h = _lanes(v1, v2, v3, v4) + np.uint64(prefix_words + b - a) * np.uint64(8)
  while p < b:
    h = _tail(h, buf[p])
    p += 1
  return _avalanche(h)


@numba.njit(inline="always")
def _max_row_words(kinds, slots, starts):
  """The most words a row's values can take (tags included): the size of a row's buffer."""
  most = 0
  for f in range(kinds.size):
    if kinds[f] == KIND_BYTES or kinds[f] == KIND_LIST:
      s = slots[f]
      span = 0
      for i in range(starts.shape[1] - 1):
        span = max(span, starts[s, i + 1] - starts[s, i])
      most += 2 + (span + 7) // 8 if kinds[f] == KIND_BYTES else 1 + span
    else:
      most += 2
  return most


@numba.njit(inline="always")
def _row_words(buf, ends, i, kinds, slots, valid, words, starts, bbuf, wbuf):
  """Writes row i's encoding (docs/fingerprint.md) into buf, field f ending at ends[f];
  returns its length in words."""
  zero = np.uint64(0)
  m = 0
  for f in range(kinds.size):
    kind = kinds[f]
    if kind == KIND_MISSING:
      buf[m] = np.uint64(_TAG_MISSING)
      m += 1
    elif kind == KIND_NULL or not valid[f, i]:
      buf[m] = np.uint64(_TAG_NULL)
      m += 1
    elif kind == KIND_INT:
      buf[m] = np.uint64(_TAG_INT)
      buf[m + 1] = words[slots[f], i]
      m += 2
    elif kind == KIND_FLOAT:
      w = words[slots[f], i]
      if (w & _EXP) == _EXP and (w & _MANT) != zero:
        w = _NAN
      elif w == _NEG_ZERO:
        w = zero
      buf[m] = np.uint64(_TAG_FLOAT)
      buf[m + 1] = w
      m += 2
    elif kind == KIND_BYTES:
      b0 = starts[slots[f], i]
      b1 = starts[slots[f], i + 1]
      buf[m] = np.uint64(_TAG_BYTES)
      buf[m + 1] = np.uint64(b1 - b0)
      m += 2
      p = b0
      while p < b1:
        w = zero
        for q in range(min(8, b1 - p)):
          w |= np.uint64(bbuf[p + q]) << np.uint64(8 * q)
        buf[m] = w
        m += 1
        p += 8
    else:  # KIND_LIST
      w0 = starts[slots[f], i]
      w1 = starts[slots[f], i + 1]
      buf[m] = np.uint64(_TAG_LIST)
      m += 1
      for p in range(w0, w1):
        buf[m] = wbuf[p]
        m += 1
    ends[f] = m
  return m


@numba.njit(cache=True, nogil=True)
def hash_fields(state0, prefix_words, kinds, slots, valid, words, starts, bbuf, wbuf):
  """XXH64(header ++ values) for every row (docs/fingerprint.md), from column buffers.

  state0: accumulators after the header (prefix_state); prefix_words: header length in words.
  kinds[f] says how field f is stored; valid is [field, row]; words and starts are indexed by
  the field's slot s = slots[f]: words[s, i], starts[s, i] (starts has a row + 1 column).
    KIND_MISSING / KIND_NULL: every row is tag 0 / tag 1.
    KIND_INT: words[s, i] is the int64.  KIND_FLOAT: words[s, i] is the float64's bits.
    KIND_BYTES: bbuf[starts[s, i]:starts[s, i + 1]] are the bytes.
    KIND_LIST: wbuf[starts[s, i]:starts[s, i + 1]] are the words after the LIST tag.
  A row where valid[f, i] is False is NULL (tag 1). One call does a whole batch: the caller
  holds the GIL only to lay the columns out (one copy each), not per chunk of rows. Each row's
  words are written to a buffer, then hashed four to a stripe (measured on a 62,556-row log
  bucket of 18 features: about 3x faster than feeding the hash word by word).
  """
  nf, n = valid.shape
  out = np.empty(n, dtype=np.uint64)
  buf = np.empty(_max_row_words(kinds, slots, starts), dtype=np.uint64)
  ends = np.empty(nf, dtype=np.int64)
  for i in range(n):
    m = _row_words(buf, ends, i, kinds, slots, valid, words, starts, bbuf, wbuf)
    out[i] = _hash_words(state0, prefix_words, buf, 0, m)
  return out


@numba.njit(cache=True, nogil=True)
def hash_scalar_field(state, prefix_words, kind, column, valid):
  """hash_fields of one INT or FLOAT field (kind; column: its words, valid: its validity)
  after a one-field header (accumulators `state`, prefix_words long), in a loop over the
  column alone. One or two words after a header of whole stripes never reach a lane round, so
  the merged lanes are computed once and each row costs its length, tail words and the
  avalanche (measured: 4x faster than the row-by-row kernel)."""
  n = valid.size
  out = np.empty(n, dtype=np.uint64)
  lanes = _lanes(state[0], state[1], state[2], state[3])
  null = _avalanche(_tail(lanes + np.uint64(prefix_words + 1) * np.uint64(8),
                          np.uint64(_TAG_NULL)))
  h0 = _tail(lanes + np.uint64(prefix_words + 2) * np.uint64(8),
             np.uint64(_TAG_FLOAT if kind == KIND_FLOAT else _TAG_INT))
  zero = np.uint64(0)
  for i in range(n):
    w = column[i]
    if kind == KIND_FLOAT:
      if (w & _EXP) == _EXP and (w & _MANT) != zero:
        w = _NAN
      elif w == _NEG_ZERO:
        w = zero
    out[i] = _avalanche(_tail(h0, w)) if valid[i] else null
  return out


_P5 = np.uint64(0x27D4EB2F165667C5)


@numba.njit(inline="always")
def _le(data, p, k):
  w = np.uint64(0)
  for b in range(k):
    w |= np.uint64(data[p + b]) << np.uint64(8 * b)
  return w


@numba.njit(cache=True, nogil=True)
def xxh64_spans(data, offsets):
  """XXH64(data[offsets[i]:offsets[i + 1]], seed 0) for each i (the XXH64 specification)."""
  out = np.empty(offsets.size - 1, dtype=np.uint64)
  for i in range(out.size):
    p, end = offsets[i], offsets[i + 1]
    if end - p >= 32:
      v1, v2, v3, v4 = _P1 + _P2, _P2, np.uint64(0), np.uint64(0) - _P1
      while end - p >= 32:
        v1, v2 = _round(v1, _le(data, p, 8)), _round(v2, _le(data, p + 8, 8))
        v3, v4 = _round(v3, _le(data, p + 16, 8)), _round(v4, _le(data, p + 24, 8))
        p += 32
      h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
      h = _merge(_merge(_merge(_merge(h, v1), v2), v3), v4)
    else:
      h = _P5
    h += np.uint64(offsets[i + 1] - offsets[i])
    while end - p >= 8:
      h = _rotl(h ^ _round(np.uint64(0), _le(data, p, 8)), 27) * _P1 + _P4
      p += 8
    if end - p >= 4:
      h = _rotl(h ^ (_le(data, p, 4) * _P1), 23) * _P2 + _P3
      p += 4
    while p < end:
      h = _rotl(h ^ (np.uint64(data[p]) * _P5), 11) * _P1
      p += 1
    h = (h ^ (h >> np.uint64(33))) * _P2
    h = (h ^ (h >> np.uint64(29))) * _P3
    out[i] = h ^ (h >> np.uint64(32))
  return out
