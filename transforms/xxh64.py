"""XXH64 of many encoded records at once, compiled with numba: the vectorised coding's hash.

The per-record coding hashes with the `xxhash` package (the reference C library). This
kernel computes the same XXH64 (spec: github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md)
for every row of a batch in one compiled loop, streaming each row's canonical encoding
straight from column buffers instead of materialising it. It relies on two properties of
the fingerprint encoding (transforms/fingerprint.py): everything is a whole number of 8-byte
little-endian words, and every row starts with the same header whose length is a multiple
of 32 bytes, so the hash state after the header is computed once and shared.
"""
import numba
import numpy as np

__all__ = ["prefix_state", "hash_fields"]

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_U64 = (1 << 64) - 1
_TAG_BYTES = np.uint64(4)


@numba.njit(inline="always")
def _rotl(x, r):
  return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@numba.njit(inline="always")
def _round(acc, lane):
  return _rotl(acc + lane * _P2, 31) * _P1


@numba.njit(inline="always")
def _merge(h, v):
  return (h ^ _round(np.uint64(0), v)) * _P1 + _P4


@numba.njit(inline="always")
def _feed(s, w):
  """Adds word w to a row's stream s = (v1, v2, v3, v4, x0, x1, x2, k), k words buffered."""
  v1, v2, v3, v4, x0, x1, x2, k = s
  if k == 0:
    return (v1, v2, v3, v4, w, x1, x2, np.uint64(1))
  if k == 1:
    return (v1, v2, v3, v4, x0, w, x2, np.uint64(2))
  if k == 2:
    return (v1, v2, v3, v4, x0, x1, w, np.uint64(3))
  return (_round(v1, x0), _round(v2, x1), _round(v3, x2), _round(v4, w), x0, x1, x2,
          np.uint64(0))


@numba.njit(cache=True)
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


@numba.njit(cache=True)
def hash_fields(state0, prefix_words, tags, wbuf, wstart, bbuf, bstart):
  """XXH64(header ++ values) for every row.

  state0: accumulators after the header (prefix_state); prefix_words: header length in words.
  tags is [row, field]; wstart and bstart are [row + 1, field]. For row i and field f, the row's values stream is, field after field:
    tags[i, f]; wbuf[wstart[i, f]:wstart[i + 1, f]];
    and when tags[i, f] is BYTES: u64 length, bbuf[bstart[i, f]:bstart[i + 1, f]] zero-padded to 8.
  """
  n, nf = tags.shape
  out = np.empty(n, dtype=np.uint64)
  zero = np.uint64(0)
  for i in range(n):
    s = (state0[0], state0[1], state0[2], state0[3], zero, zero, zero, zero)
    nwords = prefix_words
    for f in range(nf):
      tag = tags[i, f]
      s = _feed(s, tag)
      w0 = wstart[i, f]
      w1 = wstart[i + 1, f]
      nwords += 1 + (w1 - w0)
      for p in range(w0, w1):
        s = _feed(s, wbuf[p])
      if tag == _TAG_BYTES:
        b0 = bstart[i, f]
        b1 = bstart[i + 1, f]
        s = _feed(s, np.uint64(b1 - b0))
        nwords += 1 + (b1 - b0 + 7) // 8
        p = b0
        while p + 8 <= b1:
          w = zero
          for q in range(8):
            w |= np.uint64(bbuf[p + q]) << np.uint64(8 * q)
          s = _feed(s, w)
          p += 8
        if p < b1:
          w = zero
          for q in range(b1 - p):
            w |= np.uint64(bbuf[p + q]) << np.uint64(8 * q)
          s = _feed(s, w)
    v1, v2, v3, v4, x0, x1, x2, k = s
    h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
    h = _merge(h, v1)
    h = _merge(h, v2)
    h = _merge(h, v3)
    h = _merge(h, v4)
    h += np.uint64(nwords) * np.uint64(8)
    if k > 0:
      h = _rotl(h ^ _round(zero, x0), 27) * _P1 + _P4
    if k > 1:
      h = _rotl(h ^ _round(zero, x1), 27) * _P1 + _P4
    if k > 2:
      h = _rotl(h ^ _round(zero, x2), 27) * _P1 + _P4
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    out[i] = h
  return out
