"""The run-metadata format: run_metadata.json beside a feature log, written by pipelines.features
and by the production logger, read by the diff, the logger (to resume) and the nightly check.

One builder (document), one serialisation (dump) and one reader (load, validated against
manifests/run_metadata.schema.json) for all of them.
"""
import importlib.metadata
import json
import platform

import jsonschema

import manifests
from transforms.spec.errors import UsageError
from transforms.spec.feature_log import LOG_SEED
from transforms.spec.stages import STAGES
from transforms.spec.window import describe

__all__ = ["FORMAT", "FILE", "LOGGER_RUNNER", "LOST_BY_REASON", "EVENT_TIME", "TRANSFORM_FN",
           "MODULE_DIGEST", "MODEL", "document", "dump", "load", "versions"]

FORMAT = "skewtrace.features/1"
FILE = "run_metadata.json"
# The runner a production logger records (replay.logger): it applies the spec's stage rules and
# a written transform_fn in process, so the runner is no cause against it.
LOGGER_RUNNER = "ProductionLogger"
# source.format of a production logger's log: it is given typed records in process, no file.
LOGGER_FORMAT = "logger"
# log.LOST_BY_REASON: {reason: records} a production logger accepted and never wrote (a full
# queue, a write the file system refused); absent when none. The diff reports it per side.
LOST_BY_REASON = "lost_by_reason"
EVENT_TIME, TRANSFORM_FN = "event_time", "transform_fn"  # the optional sections' keys
MODULE_DIGEST = "transform_module_digest"  # the feature module's source digest (optional)
# The predict stage's model (optional): {"source", "kind" (saved_model | module), "digest",
# "decision", and a SavedModel's "signature", "output" and "tf" version; a production log's
# served identity (deployed model, version, device) where its log names one}.
MODEL = "model"


def versions():
  """The versions a run records: Python and every library that takes part in a stage."""
  def v(dist):
    try:
      return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
      return "not installed"
  return {"python": platform.python_version(), "beam": v("apache-beam"),
          "tft": v("tensorflow-transform"), "tf": v("tensorflow"), "pyarrow": v("pyarrow"),
          "tfx_bsl": v("tfx-bsl"), "skewtrace": v("skewtrace")}


def document(*, profile, transform_module, input_dir, content_digest, key_columns, columns,
             aggregates, runner, analyze, num_buckets, buckets, versions_=None, event_time=None,
             transform_fn=None, source=None, module_digest=None):
  """The run metadata of a feature log. columns: [(name, type)]; buckets: the per-bucket
  entries (bucket, path, rows, dropped, digests, and a logger's parts); versions_: default
  versions(); aggregates: the windowed aggregates (recorded as spec/window.describe gives
  them: name, fn, group_by, column). The logger adds its own sections (log.parts, pii) to
  what this returns. event_time: the module's (column, format, zone) declaration (spec/event_time.declaration);
  transform_fn: (the folder it was given as, or None when the run analysed, the content
  digest of the run's transform_fn); source: the input's {"format", "coverage",
  "side_columns", and optionally "num_shards", "schema", "event_time"} (its manifest's
  input_format, spec/dataset.coverage_entry and side_entry, shard count, schema source and
  recorded event-time form; the
  side columns recorded when there are any); module_digest: the feature module's source
  digest (spec/modules.source_digest), as MODULE_DIGEST; each section is left out when None."""
  doc = {
      "format": FORMAT,
      "profile": profile.to_dict(),
      "transform_module": transform_module,
      "input": {"dir": input_dir, "content_digest": content_digest,
                "key_columns": list(key_columns)},
      "schema": {"columns": [{"name": n, "type": t} for n, t in columns],
                 "aggregates": [describe(a) for a in aggregates]},
      "versions": versions() if versions_ is None else versions_,
      "runner": runner,
      "stages": list(STAGES),
      "analyze": analyze,
      "log": {"num_buckets": num_buckets, "seed": LOG_SEED,
              "rows": sum(b["rows"] for b in buckets), "buckets": list(buckets)},
  }
  if module_digest is not None:
    doc[MODULE_DIGEST] = module_digest
  if event_time is not None:
    column, form, zone = event_time
    doc[EVENT_TIME] = {"column": column, "format": form, "zone": zone}
  if transform_fn is not None:
    origin, digest = transform_fn
    doc[TRANSFORM_FN] = {"source": origin, "digest": digest}
  if source is not None:
    doc["source"] = {"format": source["format"]}
    doc["source"].update((k, source[k]) for k in ("num_shards", "schema", "event_time")
                         if source.get(k) is not None)
    if source.get("side_columns") and any(source["side_columns"].values()):
      doc["source"]["side_columns"] = source["side_columns"]
    doc["coverage"] = source["coverage"]
  return doc


def dump(doc):
  """The file's bytes: sorted keys, two-space indent, a final newline."""
  return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8")


def load(data, where):
  """The run metadata parsed from `data` (bytes or str) and checked against its JSON Schema;
  UsageError naming `where` and what is wrong, in one line."""
  try:
    doc = json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)
  except (ValueError, UnicodeDecodeError) as e:
    raise UsageError(f"{where}: not valid JSON ({e})") from None
  except RecursionError:  # the nesting Python's parser reads (about 1,000 levels) bounds it
    raise UsageError(f"{where}: not valid JSON (nested too deeply to read)") from None
  if not isinstance(doc, dict):
    raise UsageError(f"{where}: not a run metadata object")
  if doc.get("format") != FORMAT:
    raise UsageError(f"{where}: format {doc.get('format')!r}, this version reads {FORMAT}")
  error = jsonschema.exceptions.best_match(
      jsonschema.Draft202012Validator(manifests.schema(manifests.RUN_METADATA)).iter_errors(doc))
  if error is not None:
    path = [str(p) for p in error.absolute_path]
    if error.validator == "required" and isinstance(error.instance, dict):
      path += [next(p for p in error.validator_value if p not in error.instance)]
      message = "missing"
    else:
      message = error.message.splitlines()[0][:200]
    raise UsageError(f"{where}: {'.'.join(path) or 'the document'}: {message}")
  return doc
