"""The JSON Schemas of every file skewtrace writes, carried by the installed package (package
data), so a wheel installed anywhere validates what it reads; deploy manifests live beside them
in deploy/ (not part of the package)."""
import functools
import importlib.resources
import json

__all__ = ["schema", "DATASET_MANIFEST", "RUN_METADATA", "FEATURE_LOG", "REPORT"]

DATASET_MANIFEST = "dataset_manifest.schema.json"
RUN_METADATA = "run_metadata.schema.json"
FEATURE_LOG = "feature_log.schema.json"
REPORT = "report.schema.json"


@functools.lru_cache(maxsize=None)
def _text(name):
  return importlib.resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


def schema(name):
  """The parsed JSON Schema `name` (one of the constants above); a fresh dict each call."""
  return json.loads(_text(name))
