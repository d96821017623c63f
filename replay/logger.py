"""ProductionLogger: the serving side's feature log -- the offline stages and fingerprints.

Serving code hands it records (dict column -> value: CSV text or typed values) one at a time or
in small batches, with the windowed aggregate values of its online store and, optionally, its
watermark. log() checks a record on the caller's thread and appends it to the open batch; full
batches go through a bounded queue to one worker thread, which applies the rules of
pipelines.features (replay.log_rows.LogRows) and the TF Transform graph of a written
transform_fn, and appends one Parquet part per bucket per write (temp name, fsync, rename),
then rewrites run_metadata.json (runner "ProductionLogger") the same way. close() writes what is
left and merges each bucket's parts into one. Thread-safe. docs/logger.md.

  with ProductionLogger.from_features_dir("out/features", "out/serving_log") as log:
    log.log(record, {"area_trips_in_window": n}, watermark=t)  # aggregates: spec/window.py
"""
import concurrent.futures
import os
import queue
import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from replay import log_files
from replay.log_rows import Columns, LogRows, RecordError, pii_hash, watermark_seconds
from replay.logger_config import features_config
from transforms.graph import analyze, feed
from transforms.spec import event_time, feature_log, fingerprint, pii, run_metadata
from transforms.spec import schema, window
from transforms.spec import profile as profiles
from transforms.spec.errors import UsageError
from transforms.spec.stages import FP_STAGES, PARSE, RAW, RECORD_STAGES, TRANSFORM, value_columns

__all__ = ["ProductionLogger", "RecordError", "pii_hash", "RUNNER", "DROPPED_BY_REASON"]

RUNNER = run_metadata.LOGGER_RUNNER
# run_metadata.json's log.DROPPED_BY_REASON: {stage: {reason code: records}} (stages.py codes).
DROPPED_BY_REASON = "dropped_by_reason"
# The run-metadata sections a resumed log must share with this logger (log.parts aside).
_SAME = ("format", "profile", "schema", "runner", "stages", "pii", "logged_inputs")
# A part's row order: by key, ties by the stage fingerprints (as the job's bucket files), so a
# bucket's rows give the same bytes however they were batched.
_ORDER = [(feature_log.KEY, "ascending")] + [
    (feature_log.fp_column(s), "ascending") for s in RECORD_STAGES + (TRANSFORM.name,)]
_STOP = object()  # the worker's last task
_IO_THREADS = 4  # part files written and fsynced side by side
_BUCKET = "bucket"  # a batch's bucket column while it is split into parts (never written)


class ProductionLogger:
  """Logs serving records as feature-log rows (see the module docstring).

  columns: [(name, INT|FLOAT|BYTES)] as the ingest typed them; key_columns: the record key columns
  ([] = content key: hex of the parse fingerprint + ':<ordinal>' among exact duplicates, in arrival
  order); event_time_column, event_time_format, event_time_zone: the module's event-time declaration
  (spec/event_time.py); aggregates: its WINDOWED_AGGREGATES (spec/window.py; values given per
  record: an int for a count, a float or None for the others); pii_columns: log columns ("key",
  transformed features, record columns) written as pii_hash(value, key), the HMAC key read from the
  environment variable named pii_key_env; max_pending_batches: full batches that may wait for the
  worker before log() blocks; compact_on_close: merge each bucket's parts on close();
  empty_text_is_null: "" and b"" are null, as in a CSV (False: text, as JSON has it);
  served_features: the one-value transformed features whose served values (what serving fed the
  model) log() gets: logged as served__F, compared at the serve stage; log_inputs: log each record
  column's canonical text as input__C (the diff shows and compares them for records that differ at
  raw or parse)."""

  def __init__(self, transform_fn_dir, profile, log_dir, columns, key_columns,
               event_time_column, aggregates, *, event_time_format=event_time.DEFAULT_FORMAT,
               event_time_zone=event_time.DEFAULT_ZONE, transform_module="", source="serving",
               num_buckets=16, batch_size=1024, transform_batch_size=2048,
               max_pending_batches=4, compact_on_close=True, empty_text_is_null=True,
               pii_columns=(), pii_key_env=None, compression="snappy", served_features=(),
               log_inputs=False):
    if isinstance(profile, str):
      try:
        with open(profile, encoding="utf-8") as f:
          profile = profiles.load_profile(f.read())
      except OSError as e:
        raise UsageError(f"profile {profile}: cannot read ({e})") from None
    self._profile, self._key_columns = profile, list(key_columns)
    self._columns = [(n, t) for n, t in columns]
    names = [n for n, _ in self._columns]
    for name in self._key_columns + [event_time_column]:
      if name not in names:
        raise UsageError(f"column {name!r} is not in the record schema")
    self._event = event = (event_time_column, event_time_format, event_time_zone)
    try:  # the aggregates; the event time's declaration, and its column's type against it
      window.check_aggregates(aggregates)
      event_time.check_declaration(*event)
      event_time.to_seconds(pa.nulls(0, schema.ARROW_TYPES[dict(self._columns)[
          event_time_column]]), event_time_format, event_time_zone)
    except ValueError as e:
      what = "event time" if isinstance(e, event_time.EventTimeError) else "aggregates"
      raise UsageError(f"{what}: {e}") from None
    self._aggregates = [window.describe(a) for a in aggregates]
    if min(num_buckets, batch_size, transform_batch_size, max_pending_batches) < 1:
      raise UsageError("num_buckets, batch_size, transform_batch_size and max_pending_batches "
                       "must be >= 1")
    self._num_buckets, self._batch_size = num_buckets, batch_size
    # A part's Parquet bytes (its rows already in _ORDER).
    self._part_bytes_of = lambda table: log_files.parquet_bytes(table, compression)
    self._compact, self._log_inputs = compact_on_close, bool(log_inputs)
    self._pii = pii.with_key(pii_columns, self._key_columns)
    self._secret = pii.secret_from_env(pii_key_env) if self._pii else None
    transform, spec = feed.transform_function(transform_fn_dir, value_columns(
        names, [a["name"] for a in self._aggregates]))
    self._rules = LogRows(self._columns, self._key_columns, event, self._aggregates, profile,
                          transform, spec, transform_batch_size,
                          self._pii, self._secret, empty_text_is_null, served_features,
                          bool(log_inputs))
    self._schema = self._rules.schema
    self._transform_module = transform_module
    self._versions = run_metadata.versions()
    self._analyze = analyze.analyze_fingerprints(transform_fn_dir)
    self._fn = (transform_fn_dir, analyze.content_digest(transform_fn_dir))
    self._log_dir, self._source, self._buckets, self._next_part = log_dir, source, {}, 0
    self._counts = {"accepted": 0, "logged": 0, "dropped": 0, "sampled_out": 0, "flushes": 0}
    self._open_log_dir()
    self._dropped = {s: dict(c) for s, c in self._rules.dropped.items()}
    # Threads: the open batch behind _lock (callers); full batches through a bounded queue to
    # one worker, which alone touches the stage rules, part files and metadata until close().
    self._lock, self._stats_lock = threading.Lock(), threading.Lock()
    self._buffer, self._closed, self._error = [], False, None
    self._queue = queue.Queue(maxsize=max_pending_batches)
    self._io = concurrent.futures.ThreadPoolExecutor(_IO_THREADS, "ProductionLoggerIO")
    self._worker = threading.Thread(target=self._work, name="ProductionLogger", daemon=True)
    self._worker.start()

  @classmethod
  def from_features_dir(cls, features_dir, log_dir, profile=None, import_module=False,
                        **options):
    """A logger configured from an offline pipelines.features output: its transform_fn,
    profile (unless given), schema, aggregates, key columns, log buckets and event-time
    declaration as the run recorded it (older metadata: from the module it names, imported only
    with import_module=True, the caller's choice, never because a received file names it)."""
    config = features_config(features_dir, import_module)
    if profile is not None:
      config["profile"] = profile
    for name in ("num_buckets", "event_time_format", "event_time_zone", "transform_module"):
      options.setdefault(name, config.pop(name))
    return cls(log_dir=log_dir, **config, **options)

  # ------------------------------------------------------------------ public surface
  def log(self, record, aggregates=None, watermark=None, served=None):
    """Accepts one record: {column: value} (str, bytes, int, float, bool, datetime, date,
    Decimal, a numpy scalar or None; "" is null, as in a CSV); aggregates: {name: int} holding
    exactly the module's windowed aggregates; watermark: Unix seconds (or an aware datetime),
    None: nothing is late; served: {feature: value serving fed the model} among
    served_features (a feature left out: the model got the transform's value). RecordError (a
    ValueError) for a record, aggregates or served values it refuses."""
    self._submit([(*self._rules.accept(record, aggregates, served),
                   watermark_seconds(watermark))])

  def log_batch(self, records, aggregates=None, watermark=None, served=None):
    """Accepts several records; aggregates, served: one mapping per record (None: none)."""
    per = {"aggregates": aggregates, "served": served}
    per = {k: [None] * len(records) if v is None else list(v) for k, v in per.items()}
    if any(len(v) != len(records) for v in per.values()):
      raise UsageError("log_batch: one aggregates and one served mapping per record")
    mark = watermark_seconds(watermark)
    self._submit([(*self._rules.accept(r, a, s), mark)
                  for r, a, s in zip(records, per["aggregates"], per["served"])])

  def log_table(self, table, aggregates=None, watermark=None, served=None):
    """Accepts a batch of records as Arrow columns, the columnar log(): a pyarrow Table or
    RecordBatch of record columns (any scalar Arrow types, under the same canonical rules; a
    column it lacks is null); aggregates and served: {name: one value per record, an Arrow
    array or a sequence}; watermark: for every record of the batch. RecordError (a UsageError
    and a ValueError) when it refuses them. Written as one batch, after the open one, on the
    worker thread: the table's buffers (a numpy array a pandas frame wraps) must not change
    after the call (aggregates and served values given as numpy arrays are copied)."""
    self._submit(self._rules.accept_table(table, aggregates, served,
                                          watermark_seconds(watermark)))

  def drain(self):
    """Returns once every full batch handed to the worker so far is written (not the open one)."""
    with self._lock:
      if self._closed:
        return
      done = threading.Event()
      self._queue.put(done)
    done.wait()
    self._raise_failure()

  def flush(self):
    """Logs the open batch now and returns once it is written."""
    with self._lock:
      self._hand_over(len(self._buffer))
    self.drain()

  def close(self):
    """Writes the open batch, waits for the worker, then merges each bucket's parts into one
    (compact_on_close). A second call does nothing."""
    with self._lock:
      if self._closed:
        return
      self._closed = True
      self._hand_over(len(self._buffer))
      self._queue.put(_STOP)
    self._worker.join()
    try:
      if self._error is None and self._compact:
        self._compact_parts()
    finally:
      self._io.shutdown()
    self._raise_failure()

  def stats(self):
    """Counts so far: accepted, logged (rows written), dropped (rows logged as dropped),
    dropped_by_reason ({stage: {reason code: records}}), sampled_out, flushes and
    pending_batches (full batches waiting for the worker)."""
    with self._stats_lock:
      out = dict(self._counts)
      out[DROPPED_BY_REASON] = {s: dict(c) for s, c in self._dropped.items()}
    out["pending_batches"] = self._queue.qsize()
    return out

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  # ------------------------------------------------------------------ threads
  def _submit(self, items):
    """Appends records (a list) to the open batch, or queues a Columns batch after it."""
    self._raise_failure()
    with self._lock:
      if self._closed:
        raise UsageError("the logger is closed")
      if isinstance(items, Columns):  # arrival order: the open batch goes first
        self._hand_over(len(self._buffer))
        self._counts["accepted"] += items.table.num_rows
        self._queue.put(items)
        return
      self._buffer.extend(items)
      self._counts["accepted"] += len(items)
      while len(self._buffer) >= self._batch_size:
        self._hand_over(self._batch_size)

  def _hand_over(self, n):
    """Queues the first n buffered records (caller holds _lock, so batches queue in arrival
    order); blocks while max_pending_batches wait: back-pressure, never a lost record."""
    if n:
      batch, self._buffer = self._buffer[:n], self._buffer[n:]
      self._queue.put(batch)

  def _raise_failure(self):
    if self._error is not None:
      raise self._error

  def _work(self):
    """The worker: writes the batches in queue order. Batches already waiting are written
    together, up to max_pending_batches of them (fewer, larger TFT calls and part files when
    logging outpaces writing); a failure is kept and raised on the caller's next call."""
    task = None
    while True:
      task = self._queue.get() if task is None else task
      if task is _STOP:
        return
      if isinstance(task, threading.Event):
        task.set()
        task = None
        continue
      items, task = [task] if isinstance(task, Columns) else list(task), None
      columns = isinstance(items[0], Columns)  # Columns join Columns, records join records
      for _ in range(self._queue.maxsize - 1):
        try:
          task = self._queue.get_nowait()
        except queue.Empty:
          task = None
          break
        if not (items[0].joins(task) if columns else isinstance(task, list)):
          break
        items += [task] if columns else task
        task = None
      items = Columns.joined(items) if columns else items
      if self._error is None:  # after a failure, later batches are not written
        try:
          self._write_batch(items)
        except Exception as e:  # noqa: BLE001 -- raised again on the caller's next call
          self._error = e

  # ------------------------------------------------------------------ files
  def _write_batch(self, items):
    """Processes a batch, writes its parts (one per bucket), then the run metadata."""
    table = self._rules.rows(items)
    buckets = feature_log.bucket_of(table.column(feature_log.KEY).combine_chunks(),
                                    self._num_buckets)
    # One sort, by bucket then _ORDER; each bucket's part is a slice of it.
    order = pc.sort_indices(table.append_column(_BUCKET, pa.array(buckets)),
                            [(_BUCKET, "ascending")] + _ORDER)
    table, buckets = table.take(order), buckets[order.to_numpy()]
    bounds = np.searchsorted(buckets, np.arange(self._num_buckets + 1))
    parts = {feature_log.part_path(int(b), self._num_buckets, self._next_part):
             (int(b), table.slice(int(bounds[b]), int(bounds[b + 1] - bounds[b])))
             for b in np.flatnonzero(np.diff(bounds))}
    # Parquet's writer releases the GIL: the parts are encoded side by side.
    files = dict(zip(parts, self._io.map(self._part_bytes_of, [p for _, p in parts.values()])))
    for path, (b, part) in parts.items():
      entry = self._buckets.setdefault(b, {
          "rows": 0, "dropped": 0, "parts": [],
          "digests": {s: fingerprint.empty_digest() for s in FP_STAGES}})
      entry["rows"] += part.num_rows
      entry["dropped"] += part.num_rows - part.column(feature_log.DROPPED_STAGE).null_count
      entry["parts"].append(path)
      for s, d in feature_log.stage_digests(part).items():
        entry["digests"][s] = fingerprint.add_digests(entry["digests"][s], d)
    for path, tmp in self._stage(files).items():
      os.replace(tmp, os.path.join(self._log_dir, path))
    self._next_part += 1
    with self._stats_lock:  # a snapshot for stats(): the rules' state is the worker's
      self._dropped = {s: dict(c) for s, c in self._rules.dropped.items()}
      self._counts["sampled_out"] = self._rules.sampled_out
      self._counts["flushes"] += 1
      self._counts["logged"] += table.num_rows
      self._counts["dropped"] += table.num_rows - \
          table.column(feature_log.DROPPED_STAGE).null_count
    self._save_metadata()

  def _stage(self, files):
    """{path: temp name} of files {path: bytes} written and fsynced side by side (fsync waits
    for the disk, not the CPU: the journal commits them together)."""
    stage = lambda p: log_files.stage_file(os.path.join(self._log_dir, p), files[p])
    return dict(zip(files, self._io.map(stage, files)))

  def _compact_parts(self):
    """Merges each bucket's parts into one part (rows in _ORDER, so the bytes depend only on
    the rows). Every merged part is staged first; then, in quick succession, the merged parts
    are renamed into place, run_metadata.json is rewritten to list them, and the old parts are
    deleted. A crash at any point leaves a log that resumes (unlisted files are removed)."""
    merged = {b: e["parts"] for b, e in sorted(self._buckets.items()) if len(e["parts"]) > 1}
    if not merged:
      return
    def merge(parts):
      table = pa.concat_tables([log_files.read_part(os.path.join(self._log_dir, p)) for p in parts])
      return self._part_bytes_of(table.cast(self._schema).sort_by(_ORDER))
    paths = {b: feature_log.part_path(b, self._num_buckets, self._next_part) for b in merged}
    # The buckets merge side by side: Parquet's reader and writer and Arrow's sort release the GIL.
    files = dict(zip(paths.values(), self._io.map(merge, merged.values())))
    for b, path in paths.items():
      self._buckets[b]["parts"] = [path]
    for path, tmp in self._stage(files).items():
      os.replace(tmp, os.path.join(self._log_dir, path))
    self._next_part += 1
    self._save_metadata()
    for parts in merged.values():
      for p in parts:
        os.remove(os.path.join(self._log_dir, p))

  def _save_metadata(self):
    path = os.path.join(self._log_dir, run_metadata.FILE)  # temp name, fsync, rename
    os.replace(log_files.stage_file(path, run_metadata.dump(self._metadata())), path)

  def _metadata(self):
    n = self._num_buckets
    buckets = [{"bucket": b, "path": feature_log.bucket_glob(b, n),
                "parts": list(e["parts"]), "rows": e["rows"], "dropped": e["dropped"],
                "digests": {s: fingerprint.digest_hex(d) for s, d in e["digests"].items()}}
               for b, e in sorted(self._buckets.items())]
    doc = run_metadata.document(
        profile=self._profile, transform_module=self._transform_module, input_dir=self._source,
        content_digest=fingerprint.digest_hex(self._rules.content),
        key_columns=self._key_columns, columns=self._columns, aggregates=self._aggregates,
        runner=RUNNER, analyze=self._analyze, num_buckets=n, buckets=buckets,
        versions_=self._versions, event_time=self._event, transform_fn=self._fn)
    doc["log"]["parts"] = self._next_part
    doc["log"][DROPPED_BY_REASON] = {s: dict(sorted(c.items()))
                                     for s, c in sorted(self._rules.dropped.items())}
    if self._pii:
      doc["pii"] = pii.Pii(tuple(self._pii)).metadata()
    if self._log_inputs:  # input__C columns: the record columns' canonical text
      doc["logged_inputs"] = [n for n, _ in self._columns]
    return doc

  def _open_log_dir(self):
    """Creates LOG_DIR, or resumes the log it holds. Part and temp files its metadata does not
    list (the batches open at a crash, an unfinished merge) are removed, so parts and metadata
    agree."""
    log_dir = os.path.join(self._log_dir, feature_log.LOG_DIR)
    os.makedirs(log_dir, exist_ok=True)
    path = os.path.join(self._log_dir, run_metadata.FILE)
    if os.path.exists(path):
      with open(path, "rb") as f:
        meta = run_metadata.load(f.read(), path)
      mine = self._metadata()
      same = {k: meta.get(k) == mine.get(k) for k in _SAME}
      same.update(analyze=meta["analyze"]["fingerprint"] == self._analyze["fingerprint"],
                  num_buckets=meta["log"]["num_buckets"] == self._num_buckets,
                  key_columns=meta["input"]["key_columns"] == self._key_columns)
      if not all(same.values()):
        raise UsageError(f"{self._log_dir} holds another log ("
                         f"{', '.join(k for k, v in same.items() if not v)} differ); "
                         "use a new log directory")
      self._next_part = meta["log"]["parts"]
      self._rules.content = fingerprint.parse_digest(meta["input"]["content_digest"])
      self._rules.dropped = {s: dict(c) for s, c in
                             meta["log"].get(DROPPED_BY_REASON, {}).items()}
      for b in meta["log"]["buckets"]:
        self._buckets[b["bucket"]] = {
            "rows": b["rows"], "dropped": b["dropped"], "parts": list(b["parts"]),
            "digests": {s: fingerprint.parse_digest(d) for s, d in b["digests"].items()}}
    listed = {p for e in self._buckets.values() for p in e["parts"]}
    for name in os.listdir(log_dir):
      if f"{feature_log.LOG_DIR}/{name}" not in listed and (
          feature_log.is_part_file(name) or name.endswith(".tmp")):
        os.remove(os.path.join(log_dir, name))
    if not os.path.exists(path):  # a log directory always holds its run metadata
      self._save_metadata()
    for rel in sorted(listed) if not self._key_columns else ():  # continue the ordinals
      raw, parse = feature_log.fp_column(RAW.name), feature_log.fp_column(PARSE.name)
      t = pq.read_table(os.path.join(self._log_dir, rel), columns=[raw, parse])
      self._rules.continue_ordinals(t.column(raw).to_pylist(), t.column(parse).to_pylist())
