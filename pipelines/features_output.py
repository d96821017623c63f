"""The features run's output folder: what a run may replace there (its own output, when the
same command runs again) and the publish of a finished run (docs/formats.md, "Atomic publish").
"""
import json

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import StandardOptions

from pipelines import common, dataset
from transforms.graph import analyze
from transforms.spec import feature_log, modules, run_files, run_metadata
from transforms.spec.dataset import coverage_of, side_of

__all__ = ["check_output", "publish", "LOG_INFO"]

LOG_INFO = "_log.json"  # the buckets' infos, in the run's temp folder


# What a features run writes at the top of its output folder: a rerun of the same command
# replaces them (a run killed after publishing, or a nightly rerun), as ingest and diff do theirs.
_OWN = (feature_log.TRANSFORM_FN_DIR, feature_log.TRANSFORMED_DIR, feature_log.LOG_DIR,
        run_metadata.FILE)


def _same_run(meta, plan):
  """Whether run metadata `meta` records a run of this plan's command: the same input (folder
  and content digest), profile, feature module (name and source digest), given transform_fn
  (or none), log buckets, PII columns and model."""
  given = (meta.get(run_metadata.TRANSFORM_FN) or {}).get("source")
  return (meta.get("input", {}).get("dir") == plan.input_dir
          and meta["input"].get("content_digest") == plan.manifest["content_digest"]
          and meta.get("profile") == plan.profile.to_dict()
          and meta.get("transform_module") == plan.module.__name__
          and meta.get(run_metadata.MODULE_DIGEST) == modules.source_digest(plan.module)
          and given == plan.transform_fn_dir
          and meta.get("log", {}).get("num_buckets") == plan.log_buckets
          and meta.get("pii") == (plan.pii_rule.metadata() if plan.pii_rule.columns else None)
          and meta.get(run_metadata.MODEL) == (plan.model_identity or None))


def check_output(plan, overwrite):
  """Refuses an output folder holding another features run, or anything but a features run's
  own entries and temp leftovers, unless --overwrite: the same command run again replaces its
  own output (its run_metadata.json records the same run, or the folder holds only the entries
  a run killed while publishing left)."""
  out = plan.output_dir
  path = FileSystems.join(out, run_metadata.FILE)
  if not overwrite and FileSystems.exists(path):
    try:
      with FileSystems.open(path, compression_type="uncompressed") as f:
        same = _same_run(run_metadata.load(f.read(), path), plan)
    except (ValueError, OSError, KeyError, TypeError):
      same = False
    if not same:
      raise common.UsageError(f"{out} already holds another features run (its input, profile, module "
                       "or options differ, or its run_metadata.json cannot be read); pass "
                       "--overwrite to replace it")
  dataset.refuse_foreign_entries(out, overwrite, own=_OWN)


def publish(plan, temp_dir, options):
  out = plan.output_dir
  with FileSystems.open(FileSystems.join(temp_dir, LOG_INFO),
                        compression_type="uncompressed") as f:
    buckets = sorted(json.loads(f.read().decode("utf-8")), key=lambda b: b["bucket"])
  dataset.remove_tree(FileSystems.join(out, run_metadata.FILE))
  for sub in (feature_log.TRANSFORM_FN_DIR, feature_log.TRANSFORMED_DIR, feature_log.LOG_DIR):
    dataset.move_tree(FileSystems.join(temp_dir, sub), FileSystems.join(out, sub))
  fn_dir = FileSystems.join(out, feature_log.TRANSFORM_FN_DIR)
  metadata = run_metadata.document(
      profile=plan.profile, transform_module=plan.module.__name__,
      input_dir=plan.input_dir, content_digest=plan.manifest["content_digest"],
      key_columns=plan.manifest["key_columns"], columns=plan.columns,
      aggregates=list(plan.aggregates),
      runner=str(options.view_as(StandardOptions).runner or "DirectRunner"),
      # A given transform_fn's analyze stage is read from its copy by the analysing run's rule.
      analyze=analyze.analyze_fingerprints(fn_dir),
      num_buckets=plan.log_buckets, buckets=buckets, event_time=plan.event,
      transform_fn=(plan.transform_fn_dir, analyze.content_digest(fn_dir)),
      module_digest=modules.source_digest(plan.module),
      source={"format": plan.manifest["options"].get("input_format", "csv"),
              "num_shards": plan.manifest["num_shards"],
              "schema": plan.manifest["schema"].get("source", "inferred"),
              "event_time": plan.manifest.get("event_time"),  # ingest --event_time's form
              "coverage": coverage_of(plan.manifest),  # what the diff's --scope reads
              "side_columns": side_of(plan.manifest)})
  if plan.pii_rule.columns:
    metadata["pii"] = plan.pii_rule.metadata()
  if plan.model_identity:
    metadata[run_metadata.MODEL] = dict(plan.model_identity)
  metadata[run_files.FILES] = run_files.describe(out)  # what verify checks beside the log
  dataset.write_atomically(FileSystems.join(out, run_metadata.FILE), run_metadata.dump(metadata))
  return metadata
