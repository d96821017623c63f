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

A job's SDK worker processes (DirectRunner's multi_processing mode) import TensorFlow in their
own interpreter, started by Beam with a fixed command line, and write the same lines to the fd
2 they inherit. While a job runs, start_up_lines_filtered() gives that fd a pipe: a thread
copies every line to the real stderr except the start-up lines above (START_UP, matched by
their source file and text, so a warning or error of any other source passes), and restores fd
2 when the job ends.
"""
import contextlib
import os
import re
import sys
import threading

__all__ = ["import_tensorflow", "native_stderr_silenced", "start_up_lines_filtered",
           "START_UP"]

# The lines TensorFlow's and absl's native start-up writes (one pattern per kind of line).
START_UP = re.compile(
    rb"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to "
    rb"STDERR|[IWE]\d{4} [\d:.]+ +\d+ (port|cudart_stub|cpu_feature_guard|cuda_platform|"
    rb"cuda_executor|cuda_diagnostics)\.cc:\d+\] .*|To enable the following instructions: .* "
    rb"rebuild TensorFlow with the appropriate compiler flags\.)\r?$")

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


@contextlib.contextmanager
def start_up_lines_filtered():
  """fd 2 (this process's and its children's) through a filter dropping START_UP lines for
  the block; every other byte reaches the real stderr, in order."""
  sys.stderr.flush()
  saved = os.dup(2)
  read_end, write_end = os.pipe()
  os.dup2(write_end, 2)
  os.close(write_end)

  def copy():
    with os.fdopen(read_end, "rb") as pipe:
      for line in pipe:
        if not START_UP.match(line.rstrip(b"\n")):
          os.write(saved, line)

  thread = threading.Thread(target=copy, name="stderr-filter", daemon=True)
  thread.start()
  try:
    yield
  finally:
    sys.stderr.flush()
    os.dup2(saved, 2)  # the real stderr back; the pipe's writer here closes with it
    thread.join(timeout=10)  # a child still holding the pipe keeps the thread (and `saved`)
    if not thread.is_alive():
      os.close(saved)
