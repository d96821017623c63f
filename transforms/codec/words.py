"""Eight bytes at a time in numba kernels: an unaligned 64-bit load and store of a uint8 array as
intrinsics, and the copy and comparison built on them (the tf.Example encoder, the decoder's
fast path and the SSE4.2 CRC32C kernel move and compare bytes through these).

numba itself offers neither an unaligned word access of a byte array nor a copy that is not
byte by byte, hence the intrinsics: each is one LLVM load or store at data pointer + position.
"""
import numba
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

__all__ = ["load_u64", "store_u64", "copy_bytes", "bytes_match"]


def _bytes_array(buf):
  """Whether a numba type is a 1-d C-contiguous uint8 array: the one layout the word
  intrinsics address by data pointer + position (they ignore strides)."""
  return (isinstance(buf, types.Array) and buf.ndim == 1 and buf.layout == "C"
          and buf.dtype == types.uint8)


@intrinsic
def load_u64(typingctx, buf, pos):
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
def store_u64(typingctx, buf, pos, value):
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
def copy_bytes(out, p, src, s, n):
  """out[p:p + n] = src[s:s + n], eight bytes per load and store, then the tail bytes; returns
  p + n. (A numba slice assignment copies byte by byte, clamping every index: the encoder's
  map-entry templates and names went through that at ~1 GB/s.)"""
  q = 0
  while q + 8 <= n:
    store_u64(out, p + q, load_u64(src, s + q))
    q += 8
  while q < n:
    out[p + q] = src[s + q]
    q += 1
  return p + n


@numba.njit(inline="always")
def bytes_match(buf, p, tmpl, t0, n):
  """Whether buf[p:p + n] == tmpl[t0:t0 + n], eight bytes per comparison, then the tail."""
  k = 0
  while k + 8 <= n:
    if load_u64(buf, p + k) != load_u64(tmpl, t0 + k):
      return False
    k += 8
  while k < n:
    if buf[p + k] != tmpl[t0 + k]:
      return False
    k += 1
  return True
