"""The ingest dataset's format: its folder layout, shard and file names, the manifest's name and
format tag, and the dead-letter record (manifests/dataset_manifest.schema.json)."""

__all__ = ["MANIFEST", "MANIFEST_FORMAT", "SCHEMA_FILE", "FORMATS", "REJECTED_PATH", "TEMP_PREFIX",
           "COVERAGE_KINDS", "coverage_entry", "coverage_of", "SIDE_ROLES", "PREDICTION", "MODEL_IDENTITY",
           "side_entry",
           "side_of", "side_names", "record_columns", "shard_name", "rejected_row", "event_time_of"]

MANIFEST, SCHEMA_FILE = "manifest.json", "schema.pbtxt"
MANIFEST_FORMAT = "skewtrace.dataset/1"
# Shard formats -> the extension of their files (a shard format is also its folder).
FORMATS = {"tfrecord": "tfrecord", "parquet": "parquet"}
REJECTED_PATH = "rejected/part-00000-of-00001.jsonl"
# A job's temp folder inside its output folder (TEMP_PREFIX + a random hex): what it writes
# before publishing; a run removes the ones a killed run left (pipelines/dataset.py).
TEMP_PREFIX = ".tmp-"


def shard_name(fmt, shard, num_shards):
  """A shard's file, relative to the dataset folder."""
  return f"{fmt}/part-{shard:05d}-of-{num_shards:05d}.{FORMATS[fmt]}"


def rejected_row(path, line, raw, reason):
  """The dead-letter record: where the row was, its raw text and why it was rejected."""
  row = {"file": path, "line": int(line), "raw": raw.decode("utf-8", "backslashreplace"),
         "reason": reason}
  try:
    raw.decode("utf-8")
  except UnicodeDecodeError:
    row["raw_is_lossy"] = True  # undecodable bytes appear as \xNN escapes
  return row


# What traffic a dataset or a production log holds: "all" of it, or "partial" (a sampled serving
# log, a log of some keys). The manifest records it (ingest --coverage), the run metadata carries
# it on (pipelines.features, the logger) and the diff reads it (replay/diff/job.py --scope).
COVERAGE_KINDS = ("all", "partial")


def coverage_entry(kind="all", sampling_rate=None):
  """The coverage record: {"kind", "sampling_rate" (the fraction logged, when known)}."""
  if kind not in COVERAGE_KINDS:
    raise ValueError(f"coverage {kind!r} is not one of {', '.join(COVERAGE_KINDS)}")
  if sampling_rate is not None and not 0 < sampling_rate <= 1:
    raise ValueError(f"sampling rate {sampling_rate!r} is not in (0, 1]")
  if kind == "all" and sampling_rate not in (None, 1, 1.0):
    raise ValueError("a sampling rate below 1 means partial coverage")
  return {"kind": kind, "sampling_rate": None if sampling_rate is None else float(sampling_rate)}


def coverage_of(doc):
  """The coverage a manifest or run metadata records (older ones: all traffic)."""
  return doc.get("coverage") or coverage_entry()


# Side columns: what a serving log carries beside the record. "served": the value serving fed
# the model for a transformed feature ({column: feature}); "aggregates": a windowed aggregate as
# serving's online store computed it ({column: aggregate}). Ingest shards them with the record
# but outside it: no raw or parse fingerprint, content key or content digest covers them, so the
# same records with and without them compare equal. pipelines.features reads them: served
# values become the `serve` stage, logged aggregates replace the window stage's own counts.
# "context" ({column: the request-log field it came from}, ingest --envelope): the log's context
# (a request id, a logging time), kept in the dataset and never fed to the transform.
# "prediction" ({column: PREDICTION}, ingest --served_prediction): what the model answered, as
# serving logged it (BYTES: its JSON text, spec/decision.scores_of_text); pipelines.features
# takes it as the record's prediction at the `predict` stage.
SIDE_ROLES = ("served", "aggregates", "prediction")
PREDICTION = "prediction"
# Context columns whose values name the model that answered: pipelines.features records their
# distinct values in run metadata's `model`, the diff names a difference as a cause at predict.
# A preset given --served_prediction fills its own (codec/sources.py PRESET_IDENTITY).
MODEL_IDENTITY = ("deployed_model_id", "model_version", "device", "runtime")


def side_entry(served=None, aggregates=None, context=None, prediction=None):
  """The side-column record: {"served": {column: feature}, "aggregates": {column: aggregate}}
  and, when there is any, "context": {column: field} and "prediction": {column: PREDICTION};
  ValueError when a column has two roles or two columns name one feature, aggregate or the
  prediction."""
  out = {"served": dict(sorted((served or {}).items())),
         "aggregates": dict(sorted((aggregates or {}).items()))}
  if context:
    out["context"] = dict(sorted(context.items()))
  if prediction:
    out["prediction"] = dict(sorted(prediction.items()))
  roles = {"served": "served", "aggregates": "a logged aggregate", "context": "an envelope column",
           "prediction": "the served prediction"}
  for a, b in (("served", "aggregates"), ("served", "context"), ("aggregates", "context"),
               ("served", "prediction"), ("aggregates", "prediction"),
               ("context", "prediction")):
    both = sorted(set(out.get(a, {})) & set(out.get(b, {})))
    if both:
      raise ValueError(f"column(s) {', '.join(both)} both {roles[a]} and {roles[b]}")
  for role in SIDE_ROLES:
    targets = list(out.get(role, {}).values())
    twice = sorted({t for t in targets if targets.count(t) > 1})
    if twice:
      raise ValueError(f"{role}: {', '.join(twice)} named by more than one column")
  return out


def event_time_of(manifest):
  """(column, form, zone) a dataset's source wrote its event time in (ingest --event_time; the
  column holds the canonical event time), or None: the column holds it as the source wrote it."""
  entry = manifest.get("event_time")
  return (entry["column"], entry["format"], entry["zone"]) if entry else None


def side_of(manifest):
  """The side columns a manifest records (older ones: none)."""
  return manifest.get("side_columns") or side_entry()


def side_names(side):
  """The names of a side entry's columns (served, aggregates, context, prediction), sorted."""
  return sorted(set(side["served"]) | set(side["aggregates"]) | set(side.get("context", {}))
                | set(side.get("prediction", {})))


def record_columns(manifest):
  """[(name, type)] of the record: the manifest's schema columns without its side columns."""
  side = set(side_names(side_of(manifest)))
  return [(c["name"], c["type"]) for c in manifest["schema"]["columns"] if c["name"] not in side]
