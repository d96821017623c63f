"""What a production logger is configured from: an offline pipelines.features output's run
metadata (ProductionLogger.from_features_dir). Kept apart from the logger's threads and files."""
import os

from transforms.spec import event_time, feature_log, modules, run_files, run_metadata
from transforms.spec import profile as profiles
from transforms.spec.errors import UsageError

__all__ = ["features_config"]


def features_config(features_dir, import_module=False):
  """The ProductionLogger arguments an offline run recorded: {transform_fn_dir, profile,
  columns, key_columns, event_time_column, aggregates, transform_module, num_buckets,
  event_time_format, event_time_zone}. Older metadata without the event-time section: from the
  module it names, imported only with import_module=True (the caller's choice, never because a
  received file names it). UsageError, one line, for metadata it cannot use."""
  path = os.path.join(features_dir, run_metadata.FILE)
  try:
    with open(path, "rb") as f:
      meta = run_metadata.load(f.read(), path)
  except OSError as e:
    raise UsageError(f"{path}: cannot read run metadata ({e})") from None
  damaged = run_files.transform_fn_problems(
      os.path.join(features_dir, feature_log.TRANSFORM_FN_DIR), meta)
  if damaged:  # an edited or deleted vocabulary is named, never applied
    raise UsageError(f"{features_dir} does not verify: {damaged[0]}")
  key_columns = meta["input"].get("key_columns")
  older = "input.key_columns" if key_columns is None else "aggregate fns" if any(
      isinstance(a, str) for a in meta["schema"]["aggregates"]) else None  # names only
  if older:
    raise UsageError(f"{path} has no {older} (older run metadata); rerun the features job")
  declared = meta.get(run_metadata.EVENT_TIME)  # recorded by the job; else ask the module
  if declared is not None:
    column, form, zone = declared["column"], declared["format"], declared["zone"]
  elif not import_module:
    raise UsageError(f"{path} records no event_time declaration (written before that section);"
                     f" rerun the features job, or pass import_module=True to import its "
                     f"module {meta['transform_module']!r}")
  else:
    try:
      module = modules.import_feature_module(meta["transform_module"])
    except Exception as e:  # noqa: BLE001 -- the module's own code: any failure is one line
      raise UsageError(f"transform module {meta['transform_module']}: "
                       f"{type(e).__name__}: {e}".splitlines()[0]) from None
    column, form, zone = event_time.declaration(module)
  return {"transform_fn_dir": os.path.join(features_dir, feature_log.TRANSFORM_FN_DIR),
          "profile": profiles.parse_profile(meta["profile"]),
          "columns": [(c["name"], c["type"]) for c in meta["schema"]["columns"]],
          "key_columns": key_columns, "event_time_column": column,
          "aggregates": meta["schema"]["aggregates"],
          "transform_module": meta["transform_module"], "num_buckets": meta["log"]["num_buckets"],
          "event_time_format": form, "event_time_zone": zone}
