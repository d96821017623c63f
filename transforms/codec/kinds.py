"""How a field's values are laid out for the compiled kernels: one kind per field, shared by the
XXH64 fingerprint kernel (xxh64.py) and the tf.Example encoder and decoders (example_*.py).

A kernel receives `kinds[f]` for each field and branches on it; the caller has put the field's
values where that kind says (an int64 / float word per row, a span of bytes, list words). The
tf.Example codec uses INT, FLOAT and BYTES only: tf.Example has no null, missing or nested list.

The kinds are an IntEnum and the KIND_* aliases are its members, not copies: numba reads an
IntEnum member that a kernel names as a global as a compile-time constant (the comparison
compiles to an immediate compare, and `cache=True` kernels cache it), and Python code gets the
same names. The numbers are a layout detail, never written anywhere: the fingerprint's type
tags are its own (xxh64._TAG_*, docs/fingerprint.md).
"""
import enum

__all__ = ["Kind", "KIND_MISSING", "KIND_NULL", "KIND_INT", "KIND_FLOAT", "KIND_BYTES",
           "KIND_LIST"]


class Kind(enum.IntEnum):
  """Where a field's values are, for a kernel."""
  MISSING = 0  # the field is absent from the batch (no values)
  NULL = 1  # every row is null (no values)
  INT = 2  # one int64 per row
  FLOAT = 3  # one float per row (its bits)
  BYTES = 4  # one byte string per row (a span of a shared buffer)
  LIST = 5  # one list per row (a span of encoded words)


KIND_MISSING = Kind.MISSING
KIND_NULL = Kind.NULL
KIND_INT = Kind.INT
KIND_FLOAT = Kind.FLOAT
KIND_BYTES = Kind.BYTES
KIND_LIST = Kind.LIST
