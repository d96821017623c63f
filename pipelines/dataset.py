"""The dataset folder: input matching, output-dir safety, atomic publish, the manifest."""
import contextlib
import hashlib
import json
import os
import stat

import pyarrow as pa

from apache_beam.io.filesystems import FileSystems

from transforms.codec import csv_records, parquet_records, sources
from transforms.spec import fingerprint, schema
from transforms.spec import typing as cells
from transforms.spec.dataset import (FORMATS, MANIFEST, MANIFEST_FORMAT, REJECTED_PATH,
                                     SCHEMA_FILE, TEMP_PREFIX)
from transforms.spec.errors import DataError, UsageError
from transforms.spec.lock import LOCK_FILE, lock_folder

__all__ = ["TEMP_PREFIX", "one_writer", "remove_stale_temps", "match_inputs", "read_header",
           "read_text", "describe_file", "check_output_dir", "publish", "remove_tree", "move_tree",
           "write_atomically", "top_entries", "write_problem", "parquet_columns",
           "csv_header",
           "refuse_foreign_entries", "summary",
           "load_manifest", "read_columns", "MANIFEST", "RESULTS",
           "SCHEMA_FILE", "MANIFEST_FORMAT"]

RESULTS = "_results.json"  # the job's counts, in its temp folder
_OWN_ENTRIES = set(FORMATS) | {"rejected", SCHEMA_FILE}
_CHUNK = 8 << 20


def match_inputs(patterns):
  """Sorted unique paths matching comma-separated globs; UsageError when nothing matches."""
  paths = set()
  for pattern in [p.strip() for p in patterns.split(",") if p.strip()]:
    try:
      result = FileSystems.match([pattern])[0]
    except Exception as e:  # Beam raises BeamIOError for a bad pattern or missing bucket
      raise UsageError(f"--input {pattern}: {e}") from None
    paths.update(m.path for m in result.metadata_list if not _is_dir(m.path))
  if not paths:
    raise UsageError(f"no input matched {patterns!r}")
  for path in sorted(p for p in paths if "://" not in p):
    _check_readable_file(path)
  return sorted(paths)


def _check_readable_file(path):
  """UsageError unless a local input is a regular file this process can open: a FIFO or a
  device (/dev/zero) would be read forever or never end, and an unreadable file would fail
  half-way through the job."""
  try:
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
      raise UsageError(f"--input {path}: not a regular file (a FIFO, device or socket is "
                       "refused: it may never end)")
    with open(path, "rb"):
      pass
  except OSError as e:
    raise UsageError(f"--input {path}: cannot read ({e.strerror or e})") from None


def _is_dir(path):
  return "://" not in path and os.path.isdir(path)


def read_header(path, dialect=csv_records.DEFAULT):
  """The header of a CSV file (plain or .gz), or None when the file holds no record at all."""
  with FileSystems.open(path) as f:
    for block in csv_records.iter_blocks(f, 1 << 16, dialect):
      try:
        return csv_records.parse_header(block, dialect)
      except csv_records.HeaderError as e:
        raise UsageError(f"{path}: {e}") from None
  return None


def read_columns(path, options):
  """The columns of the first record of a JSON Lines, Parquet or TFRecord file (plain or .gz),
  or None when it holds no record."""
  try:
    with FileSystems.open(path) as f:
      return sources.column_names(f, path, options)
  except sources.SourceError as e:
    raise UsageError(str(e)) from None


def csv_header(paths, dialect):
  """The header every headed CSV input shares; UsageError when none has one or two differ."""
  headers = {path: read_header(path, dialect) for path in paths}
  with_header = [p for p in paths if headers[p] is not None]
  if not with_header:
    raise UsageError(f"no header: no input file has a header row ({', '.join(paths)})")
  names = headers[with_header[0]]
  for path in with_header:
    if headers[path] != names:
      raise UsageError(f"{path}: header {headers[path]} differs from {with_header[0]}: {names}")
  return names


def parquet_columns(paths):
  """The columns of Parquet inputs, every file's schema read and checked first (its footer):
  UsageError for a column named twice, a column of a type no record value can have (time64,
  a duration: spec/values.py's scalars), or a file whose columns differ from the first file
  holding rows (as CSV headers must agree)."""
  first = None
  for path in paths:
    try:
      with FileSystems.open(path) as f:
        schema, rows = parquet_records.schema_of(f, path)
    except sources.SourceError as e:
      raise UsageError(str(e)) from None
    names = list(schema.names)
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
      raise UsageError(f"{path}: column(s) {', '.join(twice)} named more than once")
    for field in schema:
      typ = field.type
      while pa.types.is_list(typ) or pa.types.is_large_list(typ):  # one value: that value
        typ = typ.value_type
      if pa.types.is_struct(typ) or pa.types.is_map(typ):
        continue  # an object: a row holding one is rejected with its reason
      try:
        cells.column_cells(pa.array([], typ))
      except ValueError as e:
        raise UsageError(f"{path}: column {field.name!r}: {e} (cast or drop it before "
                         "ingest)") from None
    if rows and first is None:
      first = (path, names)
    elif rows and names != first[1]:
      raise UsageError(f"{path}: columns {names} differ from {first[0]}: {first[1]}")
  if first is None:
    raise UsageError(f"no record: no input file holds a record ({', '.join(paths)})")
  return first[1]


def read_text(path, flag):
  try:
    with FileSystems.open(path, compression_type="uncompressed") as f:
      data = f.read()
  except Exception as e:  # BeamIOError / OSError
    raise UsageError(f"{flag} {path}: cannot read ({e})") from None
  return data.decode("utf-8", "replace"), hashlib.sha256(data).hexdigest()


def describe_file(path):
  h, size = hashlib.sha256(), 0
  with FileSystems.open(path, compression_type="uncompressed") as f:
    while chunk := f.read(_CHUNK):
      h.update(chunk)
      size += len(chunk)
  return {"path": path, "bytes": size, "sha256": h.hexdigest()}


def _join(*parts):
  return FileSystems.join(*parts)


def load_manifest(output_dir):
  path = _join(output_dir, MANIFEST)
  if not FileSystems.exists(path):
    return None
  with FileSystems.open(path, compression_type="uncompressed") as f:
    data = f.read()
  try:
    return json.loads(data.decode("utf-8"))
  except RecursionError:  # the nesting Python's parser reads (about 1,000 levels) bounds it
    raise ValueError(f"{path}: JSON nested too deeply to read") from None


def top_entries(output_dir):
  """The names at the top of an output folder ([] when it does not exist), its writer's lock
  file aside; UsageError when the path is a local file (a job would fail half-way writing
  under it)."""
  if "://" not in output_dir and os.path.isfile(output_dir):
    raise UsageError(f"{output_dir} is a file, not a folder")
  if not FileSystems.exists(output_dir):
    return []
  found = FileSystems.match([_join(output_dir, "*")])[0].metadata_list
  prefix = output_dir.rstrip("/") + "/"
  return sorted({m.path[len(prefix):].split("/")[0] for m in found} - {LOCK_FILE})


def refuse_foreign_entries(output_dir, overwrite, own=()):
  """Refuses an output folder holding entries other than `own` (what the job writes there
  itself) and temp leftovers, unless --overwrite was given."""
  foreign = [e for e in top_entries(output_dir)
             if e not in own and not e.startswith(TEMP_PREFIX) and not e.endswith(".tmp")]
  if foreign and not overwrite:
    raise UsageError(f"{output_dir} is not empty ({', '.join(foreign[:5])}); pass "
                     "--overwrite to replace it")


def check_output_dir(output_dir, inputs, options, overwrite):
  """Refuses to clobber a folder holding a different dataset or foreign files."""
  try:
    manifest = load_manifest(output_dir)
  except (ValueError, OSError):
    manifest = {}
  if manifest is not None:
    same = manifest.get("inputs") == inputs and manifest.get("options") == options
    if not same and not overwrite:
      raise UsageError(f"{output_dir} already holds a different dataset (its inputs or options "
                       "differ); pass --overwrite to replace it")
    return
  foreign = [e for e in top_entries(output_dir)
             if e not in _OWN_ENTRIES and not e.startswith(TEMP_PREFIX)]
  if foreign and not overwrite:
    raise UsageError(f"{output_dir} is not empty and holds no skewtrace dataset "
                     f"({', '.join(foreign[:5])}); pass --overwrite to replace it")


@contextlib.contextmanager
def one_writer(output_dir, what):
  """Holds the output folder's lock (transforms/spec/lock.py) for the block: a second writer of
  the folder is refused with one line naming the holder (exit 2), a dead one's lock taken over.
  A folder the lock created is removed again when the block leaves it empty (a job refused
  before it wrote anything)."""
  existed = FileSystems.exists(output_dir)
  lock = lock_folder(output_dir, what)
  try:
    yield lock
  finally:
    if lock is not None:
      lock.release()
      if not existed and os.path.isdir(output_dir) and not os.listdir(output_dir):
        os.rmdir(output_dir)


def write_problem(path, folder):
  """Why this process cannot create or write the local `path` (a folder when `folder`, else a
  file), or None: the path, or the nearest part of it that exists, must be a folder (the path
  itself a file when it is one) on a file system this process may write."""
  if "://" in path:
    return None
  path = os.path.abspath(path)
  if os.path.exists(path):
    if folder != os.path.isdir(path):
      return f"{path} is {'a file, not a folder' if folder else 'a folder, not a file'}"
    where = path if folder else os.path.dirname(path)
  else:
    where = os.path.dirname(path)
    while not os.path.exists(where):
      where = os.path.dirname(where)
    if not os.path.isdir(where):
      return f"{where} is a file, not a folder"
  if not os.access(where, os.W_OK | os.X_OK) or (not folder and os.path.exists(path) and
                                                  not os.access(path, os.W_OK)):
    return f"{where} cannot be written (permission denied or a read-only file system)"
  return None


def remove_stale_temps(output_dir, keep=None):
  """Removes the temp folders (TEMP_PREFIX*) an interrupted run of a job left in its output
  folder (all but the run's own, `keep`): a run killed with -9 never reaches its own cleanup.
  One job at a time writes a folder, so another temp folder there is a dead run's."""
  if not FileSystems.exists(output_dir):
    return
  if "://" not in output_dir:  # Beam's local match skips dot-names and folders
    names = os.listdir(output_dir)
  else:
    prefix = output_dir.rstrip("/") + "/"
    names = {m.path[len(prefix):].split("/")[0]
             for m in FileSystems.match([_join(output_dir, "**")])[0].metadata_list}
  for entry in sorted(n for n in names if n.startswith(TEMP_PREFIX)):
    if _join(output_dir, entry) != keep:
      remove_tree(_join(output_dir, entry))


def remove_tree(path):
  if FileSystems.exists(path):
    FileSystems.delete([path])


def move_tree(src_dir, dst_dir):
  remove_tree(dst_dir)
  if not FileSystems.exists(src_dir):
    return
  if "://" not in src_dir:
    os.makedirs(os.path.dirname(dst_dir.rstrip("/")) or ".", exist_ok=True)
    os.replace(src_dir, dst_dir)
    return
  found = [m.path for m in FileSystems.match([_join(src_dir, "**")])[0].metadata_list]
  FileSystems.rename(found, [dst_dir + p[len(src_dir):] for p in found])


def write_atomically(path, data):
  """Writes path + '.tmp', then renames it to path; a write that fails (a full disk) leaves
  neither."""
  tmp = path + ".tmp"
  try:
    with FileSystems.create(tmp) as f:
      f.write(data)
    FileSystems.rename([tmp], [path])
  except BaseException:
    try:
      remove_tree(tmp)
    except Exception:  # noqa: BLE001 -- the write's own error is the one to report
      pass
    raise


def _file_entry(root, rel):
  info = describe_file(_join(root, rel))
  info["path"] = rel
  return info


def _duplicates(shards, content_key):
  if content_key:
    return {"exact_duplicate_rows": sum(s["duplicates"]["exact_duplicate_rows"] for s in shards),
            "exact_duplicate_keys": sum(s["duplicates"]["exact_duplicate_keys"] for s in shards)}
  samples = sorted(k for s in shards for k in s["duplicates"]["samples"])[:5]
  return {"keys": sum(s["duplicates"]["keys"] for s in shards),
          "rows": sum(s["duplicates"]["rows"] for s in shards),
          "conflicting_keys": sum(s["duplicates"]["conflicting_keys"] for s in shards),
          "conflicting_samples": samples}


def _quote_hint(out, options):
  """' (...: pass --quote_char X)' when the first rejected rows seem quoted with another
  character (csv_records.other_quote); else ''."""
  if options.get("input_format", "csv") != "csv":
    return ""
  raws = []
  with FileSystems.open(_join(out, REJECTED_PATH), compression_type="uncompressed") as f:
    for line in f.read(1 << 20).decode("utf-8", "replace").splitlines()[:50]:
      try:
        row = json.loads(line)
      except ValueError:
        break  # a line cut at the 1 MiB read
      raws.append(str(row.get("raw", "")))
  dialect = csv_records.Dialect(options.get("delimiter", csv_records.DELIMITER),
                                options.get("quote_char", csv_records.QUOTE))
  quote = csv_records.other_quote(raws, dialect)
  return f" (the rejected rows seem to quote fields with {quote}: pass --quote_char {quote!r})" \
      if quote else ""


def publish(plan, versions):
  """Moves the run's files from its temp folder into place; writes the manifest last."""
  out, temp, options = plan.output_dir, plan.temp_dir, plan.recorded
  with FileSystems.open(_join(temp, RESULTS), compression_type="uncompressed") as f:
    results = json.loads(f.read().decode("utf-8"))
  shards = results["shards"]
  written = sum(s["rows"] for s in shards)
  read, rejected = results["read"], results["rejected"]
  if read != written + rejected:
    raise RuntimeError(f"row accounting broken: read {read} != written {written} + "
                       f"rejected {rejected}")
  remove_tree(_join(out, MANIFEST))  # from here on the folder holds no valid dataset
  move_tree(_join(temp, "rejected"), _join(out, "rejected"))
  fraction = rejected / read if read else 0.0
  if fraction > options["max_rejected_fraction"]:
    raise DataError(f"{rejected} of {read} rows rejected ({fraction:.2%}), more than "
                    f"--max_rejected_fraction {options['max_rejected_fraction']}; reasons in "
                    f"{_join(out, REJECTED_PATH)}{_quote_hint(out, options)}; no dataset was "
                    "written")
  for fmt in FORMATS:
    move_tree(_join(temp, fmt), _join(out, fmt))
  columns = [tuple(c) for c in results["columns"]]
  write_atomically(_join(out, SCHEMA_FILE), schema.to_tfmd_text(columns).encode("utf-8"))
  content = fingerprint.empty_digest()
  for s in shards:
    content = fingerprint.add_digests(content, s["digest"])
  files = sorted((dict(f, digest=fingerprint.digest_hex(f["digest"]))
                  for s in shards for f in s["files"]), key=lambda f: f["path"])
  rows = [s["rows"] for s in shards]
  manifest = {
      "format": MANIFEST_FORMAT,
      "rows": {"read": read, "written": written, "rejected": rejected},
      "num_shards": plan.num_shards,
      "shards": files,
      "shard_rows": {"min": min(rows), "max": max(rows)},
      "content_digest": fingerprint.digest_hex(content),
      "fingerprint": {"spec": fingerprint.SALT.decode("ascii"), "hash": "xxh64", "seed": 0},
      "schema": dict(plan.schema_info, columns=[{"name": n, "type": t} for n, t in columns],
                     file=_file_entry(out, SCHEMA_FILE)),
      "key_columns": list(plan.key_columns),
      "key": "columns" if plan.key_columns else "content",
      "duplicates": _duplicates(shards, not plan.key_columns),
      "rejected": dict(_file_entry(out, REJECTED_PATH), rows=rejected),
      "inputs": list(plan.inputs),
      "versions": versions,
      "options": options,
      "coverage": plan.coverage,
  }
  if any(plan.side.values()):  # spec/dataset.py side columns, recorded when there are any
    manifest["side_columns"] = plan.side
  if plan.event:  # the form the source wrote the event time in (spec/dataset.event_time_of)
    column, form, zone, parts = plan.event
    manifest["event_time"] = dict({"column": column, "format": form, "zone": zone},
                                  **({"parts": list(parts)} if parts else {}))
  write_atomically(_join(out, MANIFEST),
                    (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8"))
  return manifest


def summary(manifest, seconds):
  rows = manifest["rows"]
  total = sum(s["bytes"] for s in manifest["shards"])
  dups = manifest["duplicates"]
  dup_line = (f"duplicate keys: {dups['keys']} ({dups['conflicting_keys']} with different "
              f"content)" if "keys" in dups else
              f"exact duplicate rows: {dups['exact_duplicate_rows']}")
  return "\n".join([
      f"rows: read {rows['read']}, written {rows['written']}, rejected {rows['rejected']}",
      f"shards: {manifest['num_shards']} x {len({s['format'] for s in manifest['shards']})} "
      f"format(s), rows per shard min {manifest['shard_rows']['min']} max "
      f"{manifest['shard_rows']['max']}, {total} bytes",
      dup_line,
      f"content digest: {manifest['content_digest']}",
      f"job time: {seconds:.1f} s (imports before the job started not counted)",
  ])
