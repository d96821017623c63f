"""Verify: re-checks a dataset folder against its manifest (`skewtrace verify` also takes a
feature-log folder: replay/verify_log.py).

  python -m pipelines.verify DIR

Checks the manifest against manifests/dataset_manifest.schema.json, then every file it lists
(missing, extra, size, sha256), decodes every shard (row count, per-shard digest of the values
as decoded; a Parquet shard's __key__ and parse fingerprints recomputed from its values by the
ingest rule, spec/key.py), recomputes the content digest from the Parquet shards (float64-exact;
a TFRecord-only dataset's digest cannot be recomputed from float32 values and is checked per
shard only) and checks the row counts: read = written + rejected, rejected = the rejected
file's rows. Exit 0 intact, 1 damaged (each problem names its file), 2 usage error.
"""
import hashlib
import io
import os

import jsonschema
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

import manifests
from pipelines import common, dataset
from transforms.codec import tfrecord
from transforms.spec import fingerprint, run_metadata, schema
from transforms.spec.dataset import record_columns
from transforms.spec.key import key_batch
from transforms.spec.lock import LOCK_FILE, live_writer
from transforms.spec.stages import KEY, PARSE_FP, PARSE_FP as FP, RAW_FP

__all__ = ["verify", "run", "report"]


def _read(path):
  """A file's bytes; UsageError naming it when this process cannot read it (permissions): a
  file verify cannot open is not evidence of damage, and no traceback."""
  try:
    with FileSystems.open(path, compression_type="uncompressed") as f:
      return f.read()
  except PermissionError as e:
    raise common.UsageError(f"{path}: cannot be read ({e.strerror}); verify needs to read "
                            "every file of the dataset") from None


def _listing(root):
  found = FileSystems.match([FileSystems.join(root, "**")])[0].metadata_list
  prefix = root.rstrip("/") + "/"
  return sorted(m.path[len(prefix):] for m in found if not os.path.isdir(m.path))


def _key_problems(table, record, key_columns):
  """Problems of a Parquet shard's __key__ and parse-fingerprint columns: both recomputed from
  the record's values by the ingest rule (spec/key.key_batch); a content key must be the hex of
  its parse fingerprint and an ordinal."""
  values = pa.RecordBatch.from_arrays([table.column(n).combine_chunks() for n, _ in record],
                                      names=[n for n, _ in record])
  keyed = key_batch(values, [n for n, _ in record], list(key_columns), 1)
  problems = []
  fp = table.column(FP).combine_chunks()
  fp = fp.view(pa.uint64()) if pa.types.is_int64(fp.type) else fp  # the same 64 bits
  n = int(pc.sum(pc.invert(pc.equal(fp, keyed.column(PARSE_FP)))).as_py() or 0)
  if n:
    problems.append(f"{n} rows whose parse fingerprint is not that of their values")
  stored = table.column(KEY).combine_chunks().cast(pa.large_string())
  want = keyed.column(KEY)
  if not key_columns:  # a content key: '<hex of the parse fingerprint>:<ordinal>'
    stored = pc.utf8_slice_codeunits(stored, 0, 16)
  n = int(pc.sum(pc.invert(pc.fill_null(pc.equal(stored, want), False))).as_py() or 0)
  if n:
    problems.append(f"{n} rows whose {KEY} is not the key of their values")
  return problems


def _decoded_digest(entry, data, columns, record, key_columns=()):
  """(rows, digest of the values as decoded from this file, problems of its key columns): a
  Parquet shard's over the record's columns (what its parse fingerprints cover: no side
  column, spec/dataset.py), its __key__ and parse fingerprints recomputed from them; a TFRecord
  shard's over every column it holds."""
  names = [n for n, _ in columns]
  problems = []
  if entry["format"] == "parquet":
    table = pq.read_table(io.BytesIO(data))
    if table.schema.names != [KEY] + names + [RAW_FP, FP]:
      raise ValueError(f"columns {table.schema.names} differ from the schema")
    values = table.select([n for n, _ in record])
    problems = _key_problems(table, record, key_columns)
  else:
    values = tfrecord.decode_tfrecord(data, [(n, schema.ARROW_TYPES[t]) for n, t in columns])
  return (values.num_rows, fingerprint.combine_digest(fingerprint.fingerprint_batch(values)),
          problems)


def _top_names(root):
  """The names at the top of a folder, dot-names included (Beam's local match skips them)."""
  if "://" not in root:
    return sorted(os.listdir(root)) if os.path.isdir(root) else []
  return dataset.top_entries(root)


def verify(root):
  """A list of problems (empty when intact). Raises UsageError when root is no dataset."""
  if not FileSystems.exists(root):
    raise common.UsageError(f"{root} does not exist")
  try:
    manifest = dataset.load_manifest(root)
  except (ValueError, UnicodeDecodeError) as e:
    return [f"{dataset.MANIFEST}: unreadable ({e})"]
  if manifest is None:
    temps = [e for e in _top_names(root) if e.startswith(dataset.TEMP_PREFIX)]
    raise common.UsageError(
        f"{root} holds no {dataset.MANIFEST}: not a skewtrace dataset" + (
            f"; {', '.join(temps)} is the leftover of an interrupted run (rerun the job into "
            "this folder, which removes it)" if temps else ""))
  try:
    jsonschema.validate(manifest, manifests.schema(manifests.DATASET_MANIFEST))
  except jsonschema.ValidationError as e:
    return [f"{dataset.MANIFEST}: does not match its schema: {e.message}"]
  problems = []
  columns = [(c["name"], c["type"]) for c in manifest["schema"]["columns"]]
  entries = manifest["shards"] + [manifest["rejected"], manifest["schema"]["file"]]
  listed = {e["path"] for e in entries} | {dataset.MANIFEST, LOCK_FILE}  # a lock is no output
  present = set(_listing(root))
  problems += [f"{p}: leftover of an interrupted run (rerun the job into this folder, which "
               "removes it, or delete it)" if p.startswith(dataset.TEMP_PREFIX) else
               f"{p}: extra file not in the manifest" for p in sorted(present - listed)]
  parquet_digest = fingerprint.empty_digest()
  for entry in entries:
    path = entry["path"]
    if path not in present:
      problems.append(f"{path}: missing")
      continue
    data = _read(FileSystems.join(root, path))
    if len(data) != entry["bytes"]:
      kind = "truncated" if len(data) < entry["bytes"] else "longer than recorded"
      problems.append(f"{path}: {kind} ({len(data)} bytes, manifest says {entry['bytes']})")
      continue
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
      problems.append(f"{path}: content changed (sha256 differs)")
      continue
    if "format" not in entry:
      continue
    try:
      rows, digest, key_problems = _decoded_digest(entry, data, columns,
                                                   record_columns(manifest),
                                                   manifest.get("key_columns") or ())
    except (ValueError, OSError, pa.ArrowException, tfrecord.TFRecordError) as e:
      problems.append(f"{path}: cannot be decoded ({e})")
      continue
    problems += [f"{path}: {p}" for p in key_problems]
    if rows != entry["rows"]:
      problems.append(f"{path}: {rows} rows, manifest says {entry['rows']}")
    if fingerprint.digest_hex(digest) != entry["digest"]:
      problems.append(f"{path}: decoded values' digest differs from the manifest")
    if entry["format"] == "parquet":
      parquet_digest = fingerprint.add_digests(parquet_digest, digest)
  formats = {e["format"] for e in manifest["shards"]}
  if "parquet" in formats and not problems and \
      fingerprint.digest_hex(parquet_digest) != manifest["content_digest"]:
    problems.append("content_digest differs from the digest of the Parquet shards")
  written = sum(e["rows"] for e in manifest["shards"] if e["format"] == sorted(formats)[0])
  rows = manifest["rows"]
  if written != rows["written"] or rows["read"] != rows["written"] + rows["rejected"]:
    problems.append(f"{dataset.MANIFEST}: row counts do not add up ({rows})")
  rejected = manifest["rejected"]
  if rejected["path"] in present and rows["rejected"] != rejected.get("rows", rows["rejected"]):
    problems.append(f"{dataset.MANIFEST}: rows.rejected is {rows['rejected']} but "
                    f"{rejected['path']} holds {rejected.get('rows')} rows")
  elif rejected["path"] in present:
    lines = _read(FileSystems.join(root, rejected["path"])).count(b"\n")
    if lines != rows["rejected"]:
      problems.append(f"{rejected['path']}: {lines} rejected rows, manifest says "
                      f"{rows['rejected']}")
  return problems


def run(argv=None):
  argv = list(argv or [])
  if argv in (["-h"], ["--help"]):
    raise common.HelpRequested(
        "usage: python -m pipelines.verify DIR\n\nChecks an ingest dataset folder against its "
        "manifest.json: every shard's sha256, row count and decoded-value digest, and the "
        "content digest. (A feature-log folder: skewtrace verify.)\nExit 0 intact, 1 damaged "
        "(each problem printed), 2 usage error.")
  if len(argv) != 1 or argv[0].startswith("-"):
    raise common.UsageError("usage: python -m pipelines.verify DIR")
  if FileSystems.exists(FileSystems.join(argv[0], run_metadata.FILE)):
    raise common.UsageError(f"{argv[0]} is a feature log, not an ingest dataset: skewtrace "
                            f"verify {argv[0]} (or python -m replay.verify_log) checks it")
  writer = live_writer(argv[0])
  if writer is not None:  # an ingest publishing: not damage, not yet a dataset
    raise common.UsageError(f"{argv[0]} is being written by {writer}; verify it once that "
                            "writer is done")
  return report(argv[0], verify(argv[0]))


def report(root, problems, intact="intact"):
  """Prints each problem (DAMAGED ...) or that `root` is intact; the exit code (1 / 0)."""
  for p in problems:
    print(f"DAMAGED {p}")
  if problems:
    return 1
  print(f"{root}: {intact}")
  return 0


if __name__ == "__main__":
  common.process_main(common.main_wrapper, run)
