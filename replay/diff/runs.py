"""The two runs of a diff, as their metadata says: each run_metadata.json loaded and checked,
the two checked compatible, buckets planned by their per-stage digests, parts listed, tokens read.

Buckets are compared by their per-stage digests: a bucket equal on every digest (and in rows
and drops) on both sides is skipped unread; the rest are read and joined. The suspected causes
the two runs' differences name are replay/diff/causes.py's.
"""

from apache_beam.io.filesystems import FileSystems

from transforms.graph import analyze
from transforms.spec import feature_log, fingerprint, run_metadata
from transforms.spec.errors import UsageError
from transforms.spec.stages import FP_STAGES as DIGEST_STAGES, OPTIONAL_STAGES

__all__ = ["load", "check_compatible", "plan_buckets", "bucket_pattern", "vocabularies",
           "listed_parts"]

_VOCABULARY_BYTES = 64 << 20  # larger vocabulary files are not read for tokens

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


def _same(a, b):
  """Equal bucket entries: rows, drops, every stage digest (a predict digest on one side only
  differs) and the key digest (a side from before the key digest has none: such a bucket is
  read)."""
  return (a["rows"] == b["rows"] and a["dropped"] == b["dropped"] and
          all(a["digests"][s] == b["digests"][s] for s in DIGEST_STAGES) and
          all(a["digests"].get(s) == b["digests"].get(s) for s in OPTIONAL_STAGES) and
          a["digests"].get(feature_log.KEY_DIGEST) == b["digests"].get(feature_log.KEY_DIGEST))


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
