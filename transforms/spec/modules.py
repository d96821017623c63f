"""--transform_module: a feature module named by its dotted name or by the path of its .py file,
imported the same way by pipelines.features and by the production logger (which reads the name
from run metadata). Importing this module imports neither Beam nor TensorFlow."""
import hashlib
import importlib
import importlib.util
import os
import sys

from transforms.spec.errors import UsageError

__all__ = ["import_feature_module", "source_digest"]


def source_digest(module):
  """"sha256:<hex>" of a module's source file (what run metadata compares, wherever the file
  lies: two checkouts of one module agree, an edited module does not); None without a file."""
  path = getattr(module, "__file__", None)
  if not path or not os.path.isfile(path):
    return None
  with open(path, "rb") as f:
    return "sha256:" + hashlib.sha256(f.read()).hexdigest()


def import_feature_module(name, flag="--transform_module"):
  """A feature module by its dotted name, or by the path of its .py file (then registered
  under its absolute path, which the run metadata records, so a logger imports the same
  file); `flag` names the option in the error for a missing file (--model_module too)."""
  if not (name.endswith(".py") or os.sep in name):
    return importlib.import_module(name)
  path = os.path.abspath(name)
  if path in sys.modules:
    return sys.modules[path]
  if not os.path.isfile(path):
    raise UsageError(f"{flag} {name}: no such file")
  spec = importlib.util.spec_from_file_location(path, path)
  module = importlib.util.module_from_spec(spec)
  sys.modules[path] = module
  try:
    spec.loader.exec_module(module)
  except BaseException:
    del sys.modules[path]
    raise
  return module
