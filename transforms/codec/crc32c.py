"""Masked CRC32C (Castagnoli), the checksum of TFRecord framing, for numba kernels: SSE4.2's
crc32 instruction where the CPU numba compiles for has it, slice-by-8 tables elsewhere.

Both kernels take the same arguments (buffer, lo, hi, tables) and return TFRecord's masked
CRC of buf[lo:hi]; `crc32c_masked` is the one this CPU uses, chosen once at import.
"""
import platform

import llvmlite.binding as llvm
import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from transforms.codec.words import load_u64

__all__ = ["CRC_TABLE", "HARDWARE_CRC", "crc32c_masked", "crc32c_masked_sse42",
           "crc32c_masked_table"]

_MASK_DELTA = 0xA282EAD8


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


CRC_TABLE = _crc_table()


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
def crc32c_masked_sse42(buf, lo, hi, t):
  """crc32c_masked_table with SSE4.2's crc32 instruction, eight bytes per instruction (t
  unused)."""
  c = np.uint64(0xFFFFFFFF)
  p = lo
  while p + 8 <= hi:
    c = _crc32c_u64(c, load_u64(buf, p))
    p += 8
  c32 = np.uint32(c)
  while p < hi:
    c32 = _crc32c_u8(c32, buf[p])
    p += 1
  c32 = c32 ^ np.uint32(0xFFFFFFFF)
  return ((c32 >> np.uint32(15)) | (c32 << np.uint32(17))) + np.uint32(_MASK_DELTA)


@numba.njit(inline="always")
def crc32c_masked_table(buf, lo, hi, t):
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
crc32c_masked = crc32c_masked_sse42 if HARDWARE_CRC else crc32c_masked_table
