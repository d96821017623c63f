"""PartWriter: the production logger's part files -- a batch's log rows split by key bucket into
one Parquet part per bucket (temp name, fsync, rename), the per-bucket entries the run metadata
lists (rows, drops, parts, per-stage digests), and the merge of each bucket's parts into one.

A part's rows are in _ORDER (by key, ties by the stage fingerprints, as the job's bucket files),
so a bucket's bytes depend only on its rows, however they were batched. Called by the logger's
one worker thread (and by close() after it has stopped). docs/logger.md.
"""
import concurrent.futures
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.logger import files
from transforms.spec import feature_log, fingerprint
from transforms.spec.stages import FP_STAGES, OPTIONAL_STAGES, RECORD_STAGES, TRANSFORM

__all__ = ["PartWriter"]

_ORDER = [(feature_log.KEY, "ascending")] + [
    (feature_log.fp_column(s), "ascending") for s in RECORD_STAGES + (TRANSFORM.name,)]
_IO_THREADS = 4  # part files written and fsynced side by side
_BUCKET = "bucket"  # a batch's bucket column while it is split into parts (never written)


class PartWriter:
  """The part files of one log directory.

  log_dir: the log directory; num_buckets: key buckets; schema: the log's Arrow schema (merged
  parts are cast to it); compression: Parquet's codec. `next_part` numbers the next write (one
  number per batch or merge, shared by its parts)."""

  def __init__(self, log_dir, num_buckets, schema, compression):
    self._log_dir, self._num_buckets, self._schema = log_dir, num_buckets, schema
    # the optional stages (predict) this logger's rows have a column for
    self._optional = tuple(s for s in OPTIONAL_STAGES
                           if feature_log.fp_column(s) in schema.names)
    self._compression = compression
    self._buckets, self.next_part, self._undo = {}, 0, None
    self._io = concurrent.futures.ThreadPoolExecutor(_IO_THREADS, "ProductionLoggerIO")

  # ------------------------------------------------------------------ the run metadata's view
  def entries(self):
    """The run metadata's bucket entries, by bucket."""
    n = self._num_buckets
    return [{"bucket": b, "path": feature_log.bucket_glob(b, n),
             "parts": list(e["parts"]), "rows": e["rows"], "dropped": e["dropped"],
             "digests": {s: fingerprint.digest_hex(d) for s, d in e["digests"].items()}}
            for b, e in sorted(self._buckets.items())]

  def restore(self, meta):
    """Takes the buckets and part count of a log being resumed (its run metadata)."""
    self.next_part = meta["log"]["parts"]
    for b in meta["log"]["buckets"]:
      self._buckets[b["bucket"]] = {
          "rows": b["rows"], "dropped": b["dropped"], "parts": list(b["parts"]),
          "digests": {s: fingerprint.parse_digest(d) for s, d in b["digests"].items()}}

  def listed(self):
    """Every part the entries list (paths relative to the log directory), sorted."""
    return sorted(p for e in self._buckets.values() for p in e["parts"])

  def remove_unlisted(self):
    """Removes the part and temp files of feature_log/ that the entries do not list (the
    batches open at a crash, an unfinished merge), so parts and metadata agree."""
    log_dir = os.path.join(self._log_dir, feature_log.LOG_DIR)
    os.makedirs(log_dir, exist_ok=True)
    listed = set(self.listed())
    for name in os.listdir(log_dir):
      if f"{feature_log.LOG_DIR}/{name}" not in listed and (
          feature_log.is_part_file(name) or name.endswith(".tmp")):
        os.remove(os.path.join(log_dir, name))

  # ------------------------------------------------------------------ writing
  def write(self, table):
    """Writes a batch's log rows: one part per bucket it touches, published by rename."""
    buckets = feature_log.bucket_of(table.column(feature_log.KEY).combine_chunks(),
                                    self._num_buckets)
    # One sort, by bucket then _ORDER; each bucket's part is a slice of it.
    order = pc.sort_indices(table.append_column(_BUCKET, pa.array(buckets)),
                            [(_BUCKET, "ascending")] + _ORDER)
    table, buckets = table.take(order), buckets[order.to_numpy()]
    bounds = np.searchsorted(buckets, np.arange(self._num_buckets + 1))
    parts = {feature_log.part_path(int(b), self._num_buckets, self.next_part):
             (int(b), table.slice(int(bounds[b]), int(bounds[b + 1] - bounds[b])))
             for b in np.flatnonzero(np.diff(bounds))}
    # Parquet's writer releases the GIL: the parts are encoded side by side.
    data = dict(zip(parts, self._io.map(self._bytes, [p for _, p in parts.values()])))
    # What undo_last() restores: each touched bucket's entry as it was (None: it had none).
    self._undo = ({b: None if b not in self._buckets else dict(
        self._buckets[b], parts=len(self._buckets[b]["parts"]))
        for b, _ in parts.values()}, list(data), self.next_part)
    for path, (b, part) in parts.items():
      entry = self._buckets.setdefault(b, {
          "rows": 0, "dropped": 0, "parts": [],
          "digests": {s: fingerprint.empty_digest()
                      for s in FP_STAGES + self._optional + (feature_log.KEY_DIGEST,)}})
      entry["rows"] += part.num_rows
      entry["dropped"] += part.num_rows - part.column(feature_log.DROPPED_STAGE).null_count
      entry["parts"].append(path)
      entry["digests"] = {**entry["digests"], **{  # a new dict: undo_last keeps the old
          s: fingerprint.add_digests(entry["digests"][s], d)
          for s, d in feature_log.stage_digests(part).items()
          if s in entry["digests"]}}  # a bucket resumed from before the key digest has none
    self._publish(data)

  def undo_last(self):
    """Takes back the last write() (the run metadata could not list it, or it failed part-way):
    its part files and temp files are removed and the entries it touched restored, so the
    parts on disk are again those the last run metadata lists."""
    if self._undo is None:
      return
    before, paths, self.next_part = self._undo
    self._undo = None
    for b, entry in before.items():
      if entry is None:
        self._buckets.pop(b, None)
      else:
        self._buckets[b] = dict(entry, parts=self._buckets[b]["parts"][:entry["parts"]])
    self._remove(paths)

  def compact(self, commit):
    """Merges each bucket's parts into one part (rows in _ORDER, so the bytes depend only on
    the rows). Every merged part is staged first; then, in quick succession, the merged parts
    are renamed into place, commit() rewrites the run metadata to list them, and the old parts
    are deleted. A crash at any point leaves a log that resumes (unlisted files are removed)."""
    merged = {b: e["parts"] for b, e in sorted(self._buckets.items()) if len(e["parts"]) > 1}
    if not merged:
      return
    def merge(parts):
      table = pa.concat_tables([files.read_part(os.path.join(self._log_dir, p)) for p in parts])
      return self._bytes(table.cast(self._schema).sort_by(_ORDER))
    paths = {b: feature_log.part_path(b, self._num_buckets, self.next_part) for b in merged}
    # The buckets merge side by side: Parquet's reader and writer and Arrow's sort release the GIL.
    data = dict(zip(paths.values(), self._io.map(merge, merged.values())))
    self._publish(data)
    for b, path in paths.items():
      self._buckets[b]["parts"] = [path]
    try:
      commit()
    except BaseException:  # the metadata still lists the old parts: the merged ones go
      for b, parts in merged.items():
        self._buckets[b]["parts"] = parts
      self._remove(data)
      raise
    for parts in merged.values():
      for p in parts:
        os.remove(os.path.join(self._log_dir, p))

  def close(self):
    self._io.shutdown()

  def _bytes(self, table):
    return files.parquet_bytes(table, self._compression)

  def _publish(self, data):
    """Stages files {path: bytes} side by side (fsync waits for the disk, not the CPU: the
    journal commits them together), renames each into place, and counts the write."""
    stage = lambda p: files.stage_file(os.path.join(self._log_dir, p), data[p])  # noqa: E731
    staged = [self._io.submit(stage, p) for p in data]
    concurrent.futures.wait(staged)  # all finished before a failure is raised and cleaned up
    try:
      for path, tmp in zip(data, [f.result() for f in staged]):
        os.replace(tmp, os.path.join(self._log_dir, path))
    except BaseException:
      self._remove(data)
      raise
    self.next_part += 1

  def _remove(self, paths):
    """Removes the part files `paths` and their temp files, where they exist."""
    for path in paths:
      for name in (path, path + ".tmp"):
        try:
          os.remove(os.path.join(self._log_dir, name))
        except FileNotFoundError:
          pass
