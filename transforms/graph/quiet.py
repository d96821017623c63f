"""TensorFlow imported without its native start-up lines.

Loading TensorFlow's native libraries (and tfx_bsl's, which repeat them) writes ~9 lines to
file descriptor 2 before absl's logging is initialised -- `oneDNN custom operations are on`,
`Could not find cuda drivers`, `This TensorFlow binary is optimized ...` -- and the first device
initialisation on a machine without a GPU adds `failed call to cuInit`. They bypass Python and
TF_CPP_MIN_LOG_LEVEL, so the only way to keep them off a command's output is to point fd 2 at
/dev/null while that happens: import_tensorflow() does, once per process, for the import of
tensorflow, tensorflow_transform and tfx_bsl and for the listing of the physical devices, and
restores fd 2 before any exception propagates (an import error still prints its traceback).
Warnings and errors TensorFlow writes later, while a job runs, are untouched.
"""
import contextlib
import os
import sys

__all__ = ["import_tensorflow", "native_stderr_silenced"]

_DONE = []


@contextlib.contextmanager
def native_stderr_silenced():
  """File descriptor 2 on /dev/null for the block (Python's sys.stderr flushed first)."""
  sys.stderr.flush()
  saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
  try:
    os.dup2(devnull, 2)
    yield
  finally:
    os.dup2(saved, 2)
    os.close(saved)
    os.close(devnull)


def import_tensorflow():
  """The tensorflow module, its native libraries and devices initialised quietly (once)."""
  if not _DONE:
    with native_stderr_silenced():
      import tensorflow as tf
      import tensorflow_transform  # noqa: F401  (its and tfx_bsl's native libraries)
      import tfx_bsl.tfxio.tensor_adapter  # noqa: F401
      tf.config.list_physical_devices()
    _DONE.append(True)
  import tensorflow as tf
  return tf
