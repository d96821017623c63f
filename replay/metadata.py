"""Run metadata of the replay diff: load two run_metadata.json, name suspected causes, plan buckets.

Every difference between the two runs' metadata that can change a record becomes a suspected
cause tied to the stage it can first affect (docs/replay.md has the table):
  input.content_digest, input.key_columns -> raw    schema.columns.<name> (type) -> parse
  windowing.*, schema.aggregates -> window          sharding.*, sampling.* -> shard
  serialization.* -> serialize                      analyze.fingerprint, analyzers -> analyze
  analyze.definition, transform_module, analyzers on one side only -> transform
  runner -> window (triggering / grouping) and analyze (floating sums, approximate quantiles);
    not against a production logger, which differs in runner by construction
  source.format -> raw, source.schema -> parse, source.num_shards -> analyze (when both
    sides record them)
  versions.<library> -> each stage the library takes part in (VERSION_STAGES)
Buckets are compared by their per-stage digests: a bucket equal on every digest (and in rows
and drops) on both sides is skipped unread; the rest are read and joined.
"""

from apache_beam.io.filesystems import FileSystems

from transforms.graph import analyze
from transforms.spec import feature_log, fingerprint, run_metadata
from transforms.spec.errors import UsageError
from transforms.spec.stages import FP_STAGES as DIGEST_STAGES, STAGES

__all__ = ["VERSION_STAGES", "load", "check_compatible", "suspected_causes", "plan_buckets",
           "bucket_pattern", "vocabularies", "listed_parts"]

_VOCABULARY_BYTES = 64 << 20  # larger vocabulary files are not read for tokens

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
_REQUIRED = ("format", "profile", "transform_module", "input", "schema", "versions", "runner",
             "analyze", "log")


def load(directory, side):
  """The parsed run_metadata.json of a feature-log folder; UsageError names what is wrong."""
  if not directory:
    raise UsageError(f"--{side} is required")
  if not FileSystems.exists(directory):
    raise UsageError(f"--{side} {directory}: no such folder")
  path = FileSystems.join(directory, run_metadata.FILE)
  if not FileSystems.exists(path):
    raise UsageError(f"--{side} {directory}: no {run_metadata.FILE} (not a feature-log folder)")
  with FileSystems.open(path, compression_type="uncompressed") as f:
    data = f.read()
  meta = run_metadata.load(data, f"--{side} {path}")
  missing = [k for k in _REQUIRED if k not in meta]
  if missing:
    raise UsageError(f"--{side} {path}: lacks {', '.join(missing)}")
  _check_sections(meta, f"--{side} {path}")
  log = meta["log"]
  try:
    for b in log["buckets"]:
      int(b["bucket"]), int(b["rows"]), int(b["dropped"])
      for stage in DIGEST_STAGES:
        fingerprint.parse_digest(b["digests"][stage])
    int(log["num_buckets"]), int(log["seed"])
  except (KeyError, TypeError, ValueError) as e:
    raise UsageError(f"--{side} {path}: malformed log section ({e!r})") from None
  _check_buckets(log, f"--{side} {path}")
  return meta


def _check_buckets(log, where):
  """UsageError unless the bucket entries are self-consistent: each bucket once, within
  num_buckets, 0 <= dropped <= rows, and log.rows their sum (an entry removed or duplicated
  would otherwise read as records one side lacks or holds twice)."""
  seen = set()
  for b in log["buckets"]:
    bucket, rows, dropped = int(b["bucket"]), int(b["rows"]), int(b["dropped"])
    if bucket in seen:
      raise UsageError(f"{where}: bucket {bucket} is listed twice")
    if not 0 <= bucket < int(log["num_buckets"]):
      raise UsageError(f"{where}: bucket {bucket} outside 0..{int(log['num_buckets']) - 1}")
    if not 0 <= dropped <= rows:
      raise UsageError(f"{where}: bucket {bucket} has {dropped} dropped of {rows} rows")
    seen.add(bucket)
  total = sum(int(b["rows"]) for b in log["buckets"])
  if total != log["rows"]:
    raise UsageError(f"{where}: log.rows is {log['rows']} but its buckets hold {total} rows")


def _check_sections(meta, where):
  """UsageError naming the field unless every section the diff reads has the shape it reads."""
  for section in ("profile", "input", "schema", "versions", "analyze", "log"):
    if not isinstance(meta[section], dict):
      raise UsageError(f"{where}: {section} is a {type(meta[section]).__name__}, not an object")
  if not isinstance(meta["log"].get("rows"), int):
    raise UsageError(f"{where}: log.rows missing or not an integer")
  columns = meta["schema"].get("columns", [])
  if not isinstance(columns, list) or not all(
      isinstance(c, dict) and "name" in c and "type" in c for c in columns):
    raise UsageError(f"{where}: schema.columns must be a list of {{name, type}} objects")
  analyzers = meta["analyze"].get("analyzers", {})
  if not isinstance(analyzers, dict) or not all(isinstance(a, dict) for a in analyzers.values()):
    raise UsageError(f"{where}: analyze.analyzers must map names to objects")


def check_compatible(offline, production):
  """UsageError unless the two logs can be joined bucket by bucket."""
  if offline["format"] != production["format"]:
    raise UsageError(f"logs of different format versions: {offline['format']} vs "
                     f"{production['format']}")
  for field in ("num_buckets", "seed"):
    a, b = offline["log"][field], production["log"][field]
    if a != b:
      raise UsageError(f"logs bucketed differently: log.{field} {a} (offline) vs {b} "
                       "(production); rerun one side with the other's --log_buckets")


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


def _analyzer_value(entry):
  if entry is None:
    return None
  return entry["values"] if "values" in entry else entry.get("fingerprint")


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
  _diff(out, ("window",), "schema.aggregates", *aggs)
  ea, eb = offline.get("event_time") or {}, production.get("event_time") or {}
  for field in sorted(set(ea) | set(eb)):
    _diff(out, ("window",), f"event_time.{field}", ea.get(field), eb.get(field))
  sa, sb = offline.get("source") or {}, production.get("source") or {}
  # Recorded by the features job (a logger, or older metadata, records none): the source format;
  # the ingest shard count, whose order TFT's float analyzers sum in; the schema's source.
  for field, stage in (("format", "raw"), ("num_shards", "analyze"), ("schema", "parse")):
    if sa.get(field) is not None and sb.get(field) is not None:
      _diff(out, (stage,), f"source.{field}", sa[field], sb[field])
  side_a, side_b = sa.get("side_columns") or {}, sb.get("side_columns") or {}
  for role, stage in (("aggregates", "window"), ("served", "serve")):
    _diff(out, (stage,), f"source.side_columns.{role}", side_a.get(role) or {},
          side_b.get(role) or {})
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


def _same(a, b):
  return (a["rows"] == b["rows"] and a["dropped"] == b["dropped"] and
          all(a["digests"][s] == b["digests"][s] for s in DIGEST_STAGES))


def plan_buckets(offline, production):
  """(differing bucket ids, [offline entries of equal buckets]); a bucket listed on one side
  only differs."""
  a = {int(b["bucket"]): b for b in offline["log"]["buckets"]}
  b = {int(x["bucket"]): x for x in production["log"]["buckets"]}
  differing, equal = [], []
  for bucket in sorted(set(a) | set(b)):
    if bucket in a and bucket in b and _same(a[bucket], b[bucket]):
      equal.append(a[bucket])
    else:
      differing.append(bucket)
  return differing, equal


def bucket_pattern(directory, bucket, num_buckets):
  """The glob of bucket b's parts: bucket-BBBBB-of-NNNNN.parquet and ...-part-PPPPPP.parquet."""
  return FileSystems.join(directory, feature_log.bucket_glob(bucket, num_buckets))


def _read_vocabulary(paths):
  for path in paths:
    try:
      if not path or not FileSystems.exists(path):
        continue
      with FileSystems.open(path, compression_type="uncompressed") as f:
        data = f.read(_VOCABULARY_BYTES + 1)
    except OSError:
      continue
    if len(data) <= _VOCABULARY_BYTES:
      return [line.decode("utf-8", "replace") for line in data.splitlines()]
  return None


def vocabularies(meta, directory):
  """{feature: [token of each id]} of the categorical features a vocabulary feeds (as the run
  metadata's analyzers name them), read from the run's transform_fn (its copy in the run's
  folder, else the folder it came from): the evidence that shows `sun -> fog` where the ids
  say 0 -> 1. A feature fed by several vocabularies, or a file not found, has none."""
  fn = (meta.get(run_metadata.TRANSFORM_FN) or {}).get("source")
  out, fed = {}, {}
  for name, entry in sorted(meta["analyze"].get("analyzers", {}).items()):
    if name.startswith(analyze.VOCABULARY):
      for feature in entry.get("features", []):
        fed.setdefault(feature, []).append(name[len(analyze.VOCABULARY):])
  for feature, files in sorted(fed.items()):
    if len(files) != 1:
      continue
    rel = feature_log.ASSETS_DIR + (files[0],)
    tokens = _read_vocabulary([FileSystems.join(directory, feature_log.TRANSFORM_FN_DIR, *rel),
                               fn and FileSystems.join(fn, *rel)])
    if tokens is not None:
      out[feature] = tokens
  return out


def listed_parts(meta, directory, side):
  """{bucket: [its part paths]} as run_metadata.json lists them, each checked to exist. A job's
  log lists each bucket's file (`path`): any other file in its feature_log/ is foreign, an
  error. A logger's lists its parts (`parts`): a part renamed into place before a crash but
  never listed was never committed (the logger removes it on resume), so it is not read.
  Metadata of older runs, which list neither, are read by each bucket's glob."""
  num_buckets = meta["log"]["num_buckets"]
  listed, names = {}, set()
  for entry in meta["log"]["buckets"]:
    bucket = int(entry["bucket"])
    rel = entry.get("parts", [entry["path"]] if "path" in entry else None)
    if rel is None:
      listed[bucket] = _glob(FileSystems.join(directory, feature_log.bucket_glob(bucket,
                                                                                  num_buckets)))
      continue
    listed[bucket] = sorted(FileSystems.join(directory, p) for p in rel)
    names.update(p.rsplit("/", 1)[-1] for p in rel)
    missing = [p for p in listed[bucket] if not FileSystems.exists(p)]
    if missing:
      raise UsageError(f"--{side}: {missing[0]} is listed in run_metadata.json but "
                              "missing")
  if names and not any("parts" in b for b in meta["log"]["buckets"]):
    pattern = FileSystems.join(directory, feature_log.LOG_DIR, "bucket-*.parquet")
    found = _glob(pattern)
    foreign = [p for p in found if p.rsplit("/", 1)[-1] not in names]
    if foreign:
      raise UsageError(f"--{side}: {foreign[0]} is not listed in run_metadata.json "
                              "(a file foreign to this log)")
  return listed


def _glob(pattern):
  try:
    return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
  except Exception as e:  # Beam raises BeamIOError for a bad pattern or unreachable store
    raise UsageError(f"cannot list {pattern}: {e}") from None
