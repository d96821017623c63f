"""Arrow buffer access for the kernels: a column's validity and its fixed-width values as numpy
views of the Arrow buffers (zero copy where no cast is needed)."""
import numpy as np

__all__ = ["validity", "fixed_values"]


def validity(arr):
  """bool[n]: True where arr has a value, from the Arrow bitmap; None when it has no null."""
  n = len(arr)
  if arr.null_count == 0:
    return None
  bitmap = np.frombuffer(arr.buffers()[0], dtype=np.uint8)
  return np.unpackbits(bitmap, bitorder="little")[arr.offset:arr.offset + n].view(np.bool_)


def fixed_values(arr, typ, dtype=np.uint64):
  """A fixed-width column's values cast to Arrow `typ`, as a `dtype` view of its data buffer:
  zero-copy when no cast is needed, no fill (null slots hold whatever the buffer holds)."""
  arr = arr.cast(typ) if arr.type != typ else arr
  data = np.frombuffer(arr.buffers()[1], dtype=dtype)
  return data[arr.offset:arr.offset + len(arr)]
