"""LogMetadata: the production logger's run_metadata.json -- what it records of the logger (fixed
when the logger starts) and of the log so far (content digest, drops, buckets and parts),
rewritten after every write (temp name, fsync, rename); and the check that a log directory
being resumed holds a log of this very logger. docs/logger.md, docs/formats.md.
"""
import os

from replay.logger import files
from transforms.spec import dataset, fingerprint, pii, run_metadata
from transforms.spec.errors import UsageError

__all__ = ["LogMetadata", "RUNNER", "DROPPED_BY_REASON", "LOST_BY_REASON"]

RUNNER = run_metadata.LOGGER_RUNNER
# run_metadata.json's log.DROPPED_BY_REASON: {stage: {reason code: records}} (stages.py codes).
DROPPED_BY_REASON = "dropped_by_reason"
LOST_BY_REASON = run_metadata.LOST_BY_REASON
# The run-metadata sections a resumed log must share with this logger (log.parts aside).
_SAME = ("format", "profile", "schema", "runner", "stages", "pii", "logged_inputs",
         run_metadata.MODEL)


class LogMetadata:
  """The run metadata of one log directory. The keyword arguments are the logger's
  configuration as run_metadata.document takes it (event_time: the (column, format, zone)
  declaration; transform_fn: (its folder, its content digest)); pii_columns: the hashed log
  columns; logged_inputs: the record columns logged as input__C, or None."""

  def __init__(self, log_dir, *, profile, transform_module, source, key_columns, columns,
               aggregates, analyze, num_buckets, event_time, transform_fn, pii_columns,
               logged_inputs, served_features=(), model=None):
    self._log_dir, self._path = log_dir, os.path.join(log_dir, run_metadata.FILE)
    # What the logger is given, recorded as ingest records a serving log's (the diff names
    # them as causes the same way): its form, the served features (log(served=...), by feature)
    # and the windowed aggregates (always the caller's: the online store's values).
    given = {"format": run_metadata.LOGGER_FORMAT, "coverage": dataset.coverage_entry(),
             "side_columns": dataset.side_entry(
                 served={f: f for f in served_features},
                 aggregates={a["name"]: a["name"] for a in aggregates})}
    self._fixed = dict(profile=profile, transform_module=transform_module, input_dir=source,
                       key_columns=key_columns, columns=columns, aggregates=aggregates,
                       runner=RUNNER, analyze=analyze, num_buckets=num_buckets,
                       versions_=run_metadata.versions(), event_time=event_time,
                       transform_fn=transform_fn, source=given)
    self._pii, self._inputs = pii_columns, logged_inputs
    self._model = model  # the predict stage's model identity (run metadata's model), or None

  def document(self, content, dropped, buckets, parts, lost):
    """run_metadata.json's document: content: the input's content digest (fingerprint state);
    dropped: {stage: {reason code: records}}; buckets: the part writer's entries; parts: the
    number of the next write; lost: {reason: records} never written (recorded when any)."""
    doc = run_metadata.document(content_digest=fingerprint.digest_hex(content), buckets=buckets,
                                **self._fixed)
    doc["log"]["parts"] = parts
    doc["log"][DROPPED_BY_REASON] = {s: dict(sorted(c.items()))
                                     for s, c in sorted(dropped.items())}
    if lost:
      doc["log"][LOST_BY_REASON] = dict(sorted(lost.items()))
    if self._pii:
      doc["pii"] = pii.Pii(tuple(self._pii)).metadata()
    if self._inputs is not None:  # input__C columns: the record columns' canonical text
      doc["logged_inputs"] = list(self._inputs)
    if self._model is not None:
      doc[run_metadata.MODEL] = dict(self._model)
    return doc

  def exists(self):
    return os.path.exists(self._path)

  def save(self, doc):
    """Publishes the document: temp name, fsync, rename."""
    os.replace(files.stage_file(self._path, run_metadata.dump(doc)), self._path)

  def remove_staged(self):
    """Removes the temp file a save the file system refused may have left."""
    try:
      os.remove(self._path + ".tmp")
    except FileNotFoundError:
      pass

  def resumed(self, mine):
    """The run metadata of the log this directory already holds (None: it holds none);
    UsageError unless it is a log of this logger: `mine` (an empty log's document) and it agree
    in every section a log is made by."""
    if not self.exists():
      return None
    with open(self._path, "rb") as f:
      meta = run_metadata.load(f.read(), self._path)
    same = {k: meta.get(k) == mine.get(k) for k in _SAME}
    same.update(analyze=meta["analyze"]["fingerprint"] == mine["analyze"]["fingerprint"],
                num_buckets=meta["log"]["num_buckets"] == mine["log"]["num_buckets"],
                key_columns=meta["input"]["key_columns"] == mine["input"]["key_columns"])
    if not all(same.values()):
      raise UsageError(f"{self._log_dir} holds another log ("
                       f"{', '.join(k for k, v in same.items() if not v)} differ); "
                       "use a new log directory")
    return meta
