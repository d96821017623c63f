"""The user's feature module (--transform_module) and run profile (--profile): loaded and
checked before a features job plans anything; every failure of the module's own code -- on
import, in its declarations, or in preprocessing_fn while TFT traces it -- is one UsageError
line naming the module (exit 2), never a traceback."""
import functools

from apache_beam.internal.cloudpickle import cloudpickle

from pipelines import common, dataset
from transforms.spec import event_time
from transforms.spec import profile as profiles
from transforms.spec.errors import first_line
from transforms.spec.modules import import_feature_module
from transforms.spec.window import check_aggregates

__all__ = ["load_profile_and_module", "reported"]


SLOW_IMPORT_SECONDS = 20  # an import still running after this is named on stderr


class _ExitAtImport(Exception):
  """os._exit called by a feature module while it is imported."""


def _imported(module_name):
  """The feature module, imported; any failure of its code at import is one UsageError line:
  an exception, sys.exit or os._exit (which would end the job with its code having written
  nothing), or KeyboardInterrupt. An import still running after SLOW_IMPORT_SECONDS is named
  on stderr (a module that loops at import shows where the job stopped)."""
  import os
  import sys
  import threading
  after = SLOW_IMPORT_SECONDS
  slow = threading.Timer(after, lambda: print(
      f"still importing --transform_module {module_name} after {after:g} s (its top-level "
      "code is running)", file=sys.stderr, flush=True))
  slow.daemon = True
  real_exit = os._exit
  def exit_at_import(code):
    raise _ExitAtImport(code)
  os._exit = exit_at_import
  slow.start()
  try:
    return import_feature_module(module_name)
  except common.UsageError:
    raise
  except (SystemExit, _ExitAtImport) as e:
    how = "os._exit" if isinstance(e, _ExitAtImport) else "sys.exit"
    code = e.args[0] if e.args else None
    raise common.UsageError(f"--transform_module {module_name}: called {how}({code!r}) while "
                            "it was imported (its top level should only define names)") from None
  except KeyboardInterrupt:
    raise common.UsageError(f"--transform_module {module_name}: interrupted while it was "
                            "imported (KeyboardInterrupt)") from None
  except Exception as e:  # noqa: BLE001 -- the module's own code: any failure is one line
    raise common.UsageError(f"--transform_module {module_name}: {type(e).__name__}: "
                            f"{first_line(e)}") from None
  finally:
    slow.cancel()
    os._exit = real_exit


def load_profile_and_module(profile_path, module_name):
  """(Profile, feature module) from the --profile and --transform_module flags, checked:
  UsageError naming the flag when either cannot be used."""
  text, _ = dataset.read_text(profile_path, "--profile")
  try:
    prof = profiles.load_profile(text)
  except profiles.ProfileError as e:
    raise common.UsageError(f"--profile {profile_path}: {e}") from None
  module = _imported(module_name)
  if getattr(module, "__file__", None) == module.__name__:
    # Loaded from its file (spec/modules.py): Beam pickles the module's functions by value,
    # since a worker cannot import a module named by a path.
    cloudpickle.register_pickle_by_value(module)
  for attr in ("preprocessing_fn", "EVENT_TIME_COLUMN", "WINDOWED_AGGREGATES"):
    if not hasattr(module, attr):
      raise common.UsageError(f"--transform_module {module_name} lacks {attr}")
  if not callable(module.preprocessing_fn):
    raise common.UsageError(f"--transform_module {module_name}: preprocessing_fn is not a "
                            f"function ({type(module.preprocessing_fn).__name__})")
  try:
    check_aggregates(module.WINDOWED_AGGREGATES)
    event_time.check_declaration(*event_time.declaration(module))
  except ValueError as e:
    raise common.UsageError(f"--transform_module {module_name}: {e}") from None
  return prof, module


def reported(module):
  """The module's preprocessing_fn, whose failure while TFT traces it (the module's own code)
  is one UsageError line naming the module, not a traceback out of the pipeline's
  construction."""
  preprocessing_fn, module_name = module.preprocessing_fn, module.__name__

  @functools.wraps(preprocessing_fn)
  def traced(*args, **kwargs):
    try:
      return preprocessing_fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 -- any failure of the user's code is one line
      raise common.UsageError(f"--transform_module {module_name}: preprocessing_fn raised "
                              f"{type(e).__name__}: {first_line(e)}") from None
  return traced
