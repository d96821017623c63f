"""The files a features run publishes beside its feature log -- transform_fn/ (the SavedModel,
its variables and vocabularies) and transformed/ (the transformed tf.Examples) -- listed in
run_metadata.json's `files` with their sizes and sha256, and a folder checked against that list.

`skewtrace verify` checks them with the log; `--transform_fn_dir` and the production logger
check a run's transform_fn/ before they load it, so an edited or deleted vocabulary is named,
never applied. Local folders are read with the os module (the logger imports no Beam); a folder
on an object store through Beam's FileSystems. docs/formats.md, "Integrity and errors".
"""
import hashlib
import os

from transforms.spec import run_metadata
from transforms.spec.feature_log import TRANSFORM_FN_DIR, TRANSFORMED_DIR

__all__ = ["FILES", "SUBDIRS", "describe", "problems", "transform_fn_problems"]

FILES = "files"  # run_metadata.json's key: [{"path", "bytes", "sha256"}], sorted by path
SUBDIRS = (TRANSFORM_FN_DIR, TRANSFORMED_DIR)
_CHUNK = 8 << 20


def _remote(path):
  return "://" in path


def _join(*parts):
  if _remote(parts[0]):
    from apache_beam.io.filesystems import FileSystems
    return FileSystems.join(*parts)
  return os.path.join(*parts)


def _listing(run_dir, sub):
  """Paths (relative to run_dir, '/'-separated) of every file under run_dir/sub, sorted."""
  root = _join(run_dir, sub)
  if _remote(run_dir):
    from apache_beam.io.filesystems import FileSystems
    found = FileSystems.match([_join(root, "**")])[0].metadata_list
    prefix = run_dir.rstrip("/") + "/"
    return sorted(m.path[len(prefix):] for m in found)
  out = []
  for folder, _, names in os.walk(root):
    out += [os.path.relpath(os.path.join(folder, n), run_dir).replace(os.sep, "/")
            for n in names]
  return sorted(out)


def _digest(path):
  """(bytes, sha256 hex) of a file."""
  h, size = hashlib.sha256(), 0
  if _remote(path):
    from apache_beam.io.filesystems import FileSystems
    f = FileSystems.open(path, compression_type="uncompressed")
  else:
    f = open(path, "rb")  # pylint: disable=consider-using-with
  with f:
    while chunk := f.read(_CHUNK):
      h.update(chunk)
      size += len(chunk)
  return size, h.hexdigest()


def describe(run_dir):
  """The `files` entries of a published run: every file under SUBDIRS."""
  out = []
  for sub in SUBDIRS:
    for rel in _listing(run_dir, sub):
      size, sha = _digest(_join(run_dir, rel))
      out.append({"path": rel, "bytes": size, "sha256": sha})
  return out


def problems(run_dir, entries, under=SUBDIRS):
  """One line per file of `entries` under the subfolders `under` that is missing, unreadable,
  of another size or content, and per file there that `entries` does not list; [] when all
  agree."""
  listed = {e["path"]: e for e in entries if e["path"].split("/")[0] in under}
  present = {p for sub in under for p in _listing(run_dir, sub)}
  out = []
  for rel in sorted(set(listed) | present):
    path = _join(run_dir, rel)
    if rel not in listed:
      out.append(f"{path}: extra file not in run_metadata.json's files")
      continue
    if rel not in present:
      out.append(f"{path}: missing (run_metadata.json lists it)")
      continue
    try:
      size, sha = _digest(path)
    except OSError as e:
      out.append(f"{path}: cannot be read ({e.strerror or e})")
      continue
    want = listed[rel]
    if size != want["bytes"]:
      out.append(f"{path}: {'truncated' if size < want['bytes'] else 'longer than recorded'} "
                 f"({size} bytes, run_metadata.json says {want['bytes']})")
    elif sha != want["sha256"]:
      out.append(f"{path}: content changed (sha256 differs from run_metadata.json)")
  return out


def transform_fn_problems(transform_fn_dir, meta=None):
  """problems() of a run's transform_fn/ -- the folder `transform_fn_dir`, when it is the
  transform_fn/ of a features run whose run_metadata.json lists its files (`meta`, or read
  from beside it) -- before it is loaded; [] for any other folder (a TFX Transform output)."""
  import json
  run_dir = os.path.dirname(transform_fn_dir.rstrip("/"))
  if os.path.basename(transform_fn_dir.rstrip("/")) != TRANSFORM_FN_DIR:
    return []
  if meta is None:
    path = _join(run_dir, run_metadata.FILE)
    try:
      if _remote(path):
        from apache_beam.io.filesystems import FileSystems
        with FileSystems.open(path, compression_type="uncompressed") as f:
          meta = json.loads(f.read())
      else:
        with open(path, "rb") as f:
          meta = json.loads(f.read())
    except (OSError, ValueError):  # no run of ours around it, or its metadata unreadable:
      return []                    # the transform_fn is checked as any other
  if not isinstance(meta, dict) or FILES not in meta:
    return []
  return problems(run_dir, meta[FILES], under=(TRANSFORM_FN_DIR,))
