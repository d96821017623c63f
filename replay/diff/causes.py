"""Suspected causes of a diff: every difference between the two runs' metadata that can change
a record, tied to the stage it can first affect (docs/replay.md has the table):
  input.content_digest, input.key_columns -> raw    schema.columns.<name> (type) -> parse
  windowing.*, schema.aggregates -> window          sharding.*, sampling.* -> shard
  serialization.* -> serialize                      analyze.fingerprint, analyzers -> analyze
  analyze.definition, transform_module, analyzers on one side only -> transform
  runner -> window (triggering / grouping) and analyze (floating sums, approximate quantiles);
    not against a production logger, which differs in runner by construction
  source.format -> raw, source.schema -> parse, source.num_shards -> analyze (when both
    sides record them; a logger's form is not compared with a file format)
  source.side_columns.aggregates -> window, source.side_columns.served -> serve (ingest of a
    serving log with side columns, or a logger: its served features and given aggregates)
  coverage -> window, when a side covers part of the traffic and counts its windowed
    aggregates itself (none logged beside the records), with a note saying what to log
  versions.<library> -> each stage the library takes part in (VERSION_STAGES)
Pure: it reads the two metadata documents replay/diff/runs.py loaded.
"""
from transforms.spec import run_metadata
from transforms.spec.dataset import MODEL_IDENTITY, coverage_of
from transforms.spec.stages import STAGES

__all__ = ["VERSION_STAGES", "suspected_causes"]

PROFILE_STAGES = {"windowing": "window", "sharding": "shard", "sampling": "shard",
                  "serialization": "serialize"}
VERSION_STAGES = {
    "python": ("parse", "transform"),           # number formatting, float parsing
    "pyarrow": ("parse", "serialize"),          # CSV parsing, Parquet round trip
    "beam": ("window", "shard"),                # grouping, windowing, combiners
    "tfx_bsl": ("serialize", "transform"),      # TFXIO reading, TFT batch conversion
    "tft": ("analyze", "transform"),
    "tf": ("analyze", "transform"),
    "skewtrace": STAGES,                        # defines every stage and fingerprint
}
RUNNER_STAGES = ("window", "analyze")
def _flatten(prefix, value):
  if isinstance(value, dict):
    out = {}
    for k in value:
      out.update(_flatten(f"{prefix}.{k}" if prefix else str(k), value[k]))
    return out
  return {prefix: value}


def _diff(out, stages, field, a, b):
  if a != b:
    for stage in stages:
      out.append({"stage": stage, "field": field, "offline": a, "production": b})


def _event_time_held(meta, source):
  """How a run's dataset held its event time: Unix seconds (ingest --event_time, or a column
  already in seconds), or its source's form, which a dataset in seconds does not compare with
  at raw and parse (docs/features.md, "Event time, whatever form a dataset holds")."""
  form = (meta.get("event_time") or {}).get("format", "seconds")
  if source.get("event_time") or form in ("seconds", "timestamp"):
    return "Unix seconds"
  return f"{form} as its source wrote it (ingest it with --event_time)"


def _aggregate_windows(out, offline, production, aggs):
  """A cause at window per aggregate whose window differs, named by the aggregate, when either
  side counts it in a window of its own (the module's, or the profile's aggregate_windows): each
  side's window, the profile's where the aggregate has none of its own."""
  def windows(meta, side):
    w = meta["profile"].get("windowing", {})
    own = {"type": w.get("type"), "size_seconds": w.get("size_seconds"),
           "period_seconds": w.get("period_seconds"), "offset_seconds": w.get("offset_seconds"),
           "zone": None}
    return {a["name"]: (a.get("window"), own) for a in side if isinstance(a, dict)}
  a, b = windows(offline, aggs[0]), windows(production, aggs[1])
  for name in sorted(set(a) & set(b)):
    if a[name][0] or b[name][0]:
      wa, wb = a[name][0] or a[name][1], b[name][0] or b[name][1]
      for field in sorted(set(wa) | set(wb)):
        _diff(out, ("window",), f"aggregates.{name}.window.{field}", wa.get(field),
              wb.get(field))


def _analyzer_value(entry):
  if entry is None:
    return None
  return entry["values"] if "values" in entry else entry.get("fingerprint")


PARTIAL_WINDOWS = ("{side} covers part of the traffic{rate} and logs no windowed aggregates "
                   "({names}): its windows are counted over what it holds; log the online "
                   "store's values with --logged_aggregates (ingest) or give them to the logger")


def _partial_windows(out, offline, production):
  """A side that holds part of the traffic (coverage partial) and whose windowed aggregates
  the job counted itself (not logged beside the records) counts its windows over its sample:
  a cause at window, with what to log."""
  for side, meta in (("offline", offline), ("production", production)):
    coverage = coverage_of(meta)
    names = [a["name"] for a in meta["schema"].get("aggregates") or [] if isinstance(a, dict)]
    logged = set(((meta.get("source") or {}).get("side_columns") or {}).get("aggregates", {})
                 .values())
    counted = [n for n in names if n not in logged]
    if coverage["kind"] == "partial" and counted:
      rate = coverage["sampling_rate"]
      out.append({"stage": "window", "field": "coverage", "offline": coverage_of(offline),
                  "production": coverage_of(production), "note": PARTIAL_WINDOWS.format(
                      side=side, names=", ".join(counted),
                      rate=f" (sampling rate {rate:g})" if rate is not None else "")})


# The model identity fields a predict-stage cause names (run metadata's `model`; the source path
# is not one: two copies of one model agree by digest).
MODEL_FIELDS = ("kind", "digest", "signature", "output", "decision", "tf") + MODEL_IDENTITY


def _model(out, offline, production):
  """Causes at predict: what differs in the two runs' recorded model identity (both have one;
  with one alone, the diff compares no decision)."""
  ma, mb = offline.get(run_metadata.MODEL), production.get(run_metadata.MODEL)
  if not (ma and mb):
    return
  for field in MODEL_FIELDS:
    _diff(out, ("predict",), f"model.{field}", ma.get(field), mb.get(field))


def suspected_causes(offline, production):
  """[{stage, field, offline, production}] sorted by pipeline stage, then field."""
  out = []
  for section, stage in PROFILE_STAGES.items():
    a = _flatten(section, offline["profile"].get(section, {}))
    b = _flatten(section, production["profile"].get(section, {}))
    for field in sorted(set(a) | set(b)):
      _diff(out, (stage,), field, a.get(field), b.get(field))
  digests = [m.get(run_metadata.MODULE_DIGEST) for m in (offline, production)]
  if all(digests):  # the module's source, wherever its file lies (two checkouts agree)
    _diff(out, ("transform",), run_metadata.MODULE_DIGEST, *digests)
  else:  # a logger, or older metadata, records its name only
    _diff(out, ("transform",), "transform_module", offline["transform_module"],
          production["transform_module"])
  if run_metadata.LOGGER_RUNNER not in (offline["runner"], production["runner"]):
    # A logger differs in runner by construction; its windowing is the spec's own rule and it
    # analyses nothing (the transform_fn's analyzers are compared below).
    _diff(out, RUNNER_STAGES, "runner", offline["runner"], production["runner"])
  for field in ("content_digest", "key_columns"):
    _diff(out, ("raw",), f"input.{field}", offline["input"].get(field),
          production["input"].get(field))
  cols = [{c["name"]: c["type"] for c in m["schema"].get("columns", [])}
          for m in (offline, production)]
  for name in sorted(set(cols[0]) | set(cols[1])):
    _diff(out, ("parse",), f"schema.columns.{name}", cols[0].get(name), cols[1].get(name))
  aggs = [m["schema"].get("aggregates") or [] for m in (offline, production)]
  if any(isinstance(a, str) for side in aggs for a in side):  # older metadata: names only
    aggs = [[a if isinstance(a, str) else a["name"] for a in side] for side in aggs]
  _diff(out, ("window",), "schema.aggregates", *[[{k: v for k, v in a.items() if k != "window"}
                                                  if isinstance(a, dict) else a for a in side]
                                                 for side in aggs])
  _aggregate_windows(out, offline, production, aggs)
  ea, eb = offline.get("event_time") or {}, production.get("event_time") or {}
  for field in sorted(set(ea) | set(eb)):
    _diff(out, ("window",), f"event_time.{field}", ea.get(field), eb.get(field))
  sa, sb = offline.get("source") or {}, production.get("source") or {}
  # Recorded by the features job (older metadata record none): the source format; the ingest
  # shard count, whose order TFT's float analyzers sum in; the schema's source. A logger's
  # "format" is its form, not a file format read by a parser: it is not compared with one.
  logger = run_metadata.LOGGER_FORMAT in (sa.get("format"), sb.get("format"))
  for field, stage in (("format", "raw"), ("num_shards", "analyze"), ("schema", "parse")):
    if sa.get(field) is not None and sb.get(field) is not None and not (
        field == "format" and logger):
      _diff(out, (stage,), f"source.{field}", sa[field], sb[field])
  if not logger:  # one dataset holds Unix seconds, the other its source's text or count
    _diff(out, ("raw", "parse"), "source.event_time", *(_event_time_held(m, s) for m, s in (
        (offline, sa), (production, sb))))
  side_a, side_b = sa.get("side_columns") or {}, sb.get("side_columns") or {}
  for role, stage in (("aggregates", "window"), ("served", "serve")):
    _diff(out, (stage,), f"source.side_columns.{role}", side_a.get(role) or {},
          side_b.get(role) or {})
  _partial_windows(out, offline, production)
  _model(out, offline, production)
  va, vb = offline["versions"], production["versions"]
  for lib in sorted(set(va) | set(vb)):
    _diff(out, VERSION_STAGES.get(lib, STAGES), f"versions.{lib}", va.get(lib), vb.get(lib))
  aa, ab = offline["analyze"], production["analyze"]
  _diff(out, ("analyze",), "analyze.fingerprint", aa.get("fingerprint"), ab.get("fingerprint"))
  _diff(out, ("transform",), "analyze.definition", aa.get("definition"), ab.get("definition"))
  xa, xb = aa.get("analyzers", {}), ab.get("analyzers", {})
  for name in sorted(set(xa) | set(xb)):
    stage = "analyze" if name in xa and name in xb else "transform"
    if xa.get(name, {}).get("fingerprint") != xb.get(name, {}).get("fingerprint"):
      out.append({"stage": stage, "field": f"analyze.analyzers.{name}",
                  "offline": _analyzer_value(xa.get(name)),
                  "production": _analyzer_value(xb.get(name))})
  return sorted(out, key=lambda c: (STAGES.index(c["stage"]), c["field"]))
