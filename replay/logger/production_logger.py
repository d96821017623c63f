"""ProductionLogger: the serving side's feature log -- the offline stages and fingerprints.

Serving code hands it records (dict column -> value: CSV text or typed values) one at a time or
in small batches, with the windowed aggregate values of its online store and, optionally, its
watermark. log() checks a record on the caller's thread (replay/logger/accept.py) and appends it
to the open batch; full batches go through a bounded queue to one worker thread
(replay/logger/batches.py), which applies the rules of pipelines.features and the TF Transform
graph of a written transform_fn (replay/logger/rows.py), appends one Parquet part per bucket per
write (replay/logger/parts.py), then rewrites run_metadata.json (runner "ProductionLogger";
replay/logger/metadata.py) the same way. close() writes what is left and merges each bucket's
parts into one. Thread-safe. docs/logger.md.

  with ProductionLogger.from_features_dir("out/features", "out/serving_log") as log:
    log.log(record, {"area_trips_in_window": n}, watermark=t)  # aggregates: spec/window.py
"""
import errno
import os
import threading

import pyarrow as pa
import pyarrow.parquet as pq

from replay.logger.batches import LOST_QUEUE_FULL, WHEN_FULL, Batches, check_policy
from replay.logger.config import features_config
from replay.logger.metadata import DROPPED_BY_REASON, LOST_BY_REASON, RUNNER, LogMetadata
from replay.logger.parts import PartWriter
from replay.logger.rows import Columns, LogRows, RecordError, pii_hash, watermark_seconds
from transforms.graph import analyze, feed
from transforms.spec import event_time, feature_log, fingerprint, pii, schema, window
from transforms.spec import profile as profiles
from transforms.spec.errors import UsageError
from transforms.spec.lock import lock_folder
from transforms.spec.stages import PARSE, RAW, value_columns

__all__ = ["ProductionLogger", "RecordError", "pii_hash", "RUNNER", "DROPPED_BY_REASON",
           "LOST_BY_REASON", "LOST_QUEUE_FULL", "ON_WRITE_ERROR", "WHEN_FULL", "write_reason"]

ON_WRITE_ERROR = ("drop", "raise")  # what a write the disk refuses does: docs/logger.md


def write_reason(error):
  """The lost-records reason of a write the file system refused: 'write_failed:<errno name>'
  (write_failed:ENOSPC for a full disk; plain write_failed when the error names none)."""
  name = errno.errorcode.get(getattr(error, "errno", None) or -1)
  return "write_failed" + (f":{name}" if name else "")


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
  raw or parse); on_write_error: "drop" (keep serving: a batch the file system refuses is
  taken back whole and counted lost, later writes try again) or "raise" (taken back, then raised
  on the caller's next call; nothing more is written); when_full, full_wait_seconds: when
  max_pending_batches wait, "block" makes the caller wait for room (at most full_wait_seconds
  when given, then the batch is lost), "drop" loses the batch at once, counted either way."""

  def __init__(self, transform_fn_dir, profile, log_dir, columns, key_columns,
               event_time_column, aggregates, *, event_time_format=event_time.DEFAULT_FORMAT,
               event_time_zone=event_time.DEFAULT_ZONE, transform_module="", source="serving",
               num_buckets=16, batch_size=1024, transform_batch_size=2048,
               max_pending_batches=4, compact_on_close=True, empty_text_is_null=True,
               pii_columns=(), pii_key_env=None, compression="snappy", served_features=(),
               log_inputs=False, on_write_error="drop", when_full="block",
               full_wait_seconds=None, model_dir=None, model_module=None, model_signature=None,
               model_output=None, decision=None):
    if isinstance(profile, str):
      try:
        with open(profile, encoding="utf-8") as f:
          profile = profiles.load_profile(f.read())
      except OSError as e:
        raise UsageError(f"profile {profile}: cannot read ({e})") from None
    self._key_columns = list(key_columns)
    self._columns = [(n, t) for n, t in columns]
    names = [n for n, _ in self._columns]
    for name in self._key_columns + [event_time_column]:
      if name not in names:
        raise UsageError(f"column {name!r} is not in the record schema")
    event = (event_time_column, event_time_format, event_time_zone)
    try:  # the aggregates; the event time's declaration, and its column's type against it
      window.check_aggregates(aggregates)
      event_time.check_declaration(*event)
      event_time.to_seconds(pa.nulls(0, schema.ARROW_TYPES[dict(self._columns)[
          event_time_column]]), event_time_format, event_time_zone)
    except ValueError as e:
      what = "event time" if isinstance(e, event_time.EventTimeError) else "aggregates"
      raise UsageError(f"{what}: {e}") from None
    try:  # each aggregate's window: its own, the profile's, and the profile's override
      self._aggregates = window.resolve(aggregates, profile)
    except ValueError as e:
      raise UsageError(f"aggregates: {e}") from None
    if on_write_error not in ON_WRITE_ERROR:
      raise UsageError(f"on_write_error must be one of {', '.join(ON_WRITE_ERROR)}, not "
                       f"{on_write_error!r}")
    self._on_write_error = on_write_error
    check_policy(when_full, full_wait_seconds)
    if num_buckets > feature_log.MAX_BUCKETS:
      raise UsageError(f"num_buckets must be at most {feature_log.MAX_BUCKETS}")
    if min(num_buckets, batch_size, transform_batch_size, max_pending_batches) < 1:
      raise UsageError("num_buckets, batch_size, transform_batch_size and max_pending_batches "
                       "must be >= 1")
    self._pii = pii.with_key(pii_columns, self._key_columns)
    self._secret = pii.secret_from_env(pii_key_env) if self._pii else None
    transform, spec = feed.transform_function(transform_fn_dir, value_columns(
        names, [a["name"] for a in self._aggregates]))
    model = _model_spec(model_dir, model_module, model_signature, model_output, decision)
    self._rules = LogRows(self._columns, self._key_columns, event, self._aggregates, profile,
                          transform, spec, transform_batch_size,
                          self._pii, self._secret, empty_text_is_null, served_features,
                          bool(log_inputs), model)
    self._log_dir, self._compact = log_dir, compact_on_close
    self._parts = PartWriter(log_dir, num_buckets, self._rules.schema, compression)
    self._meta = LogMetadata(
        log_dir, profile=profile, transform_module=transform_module, source=source,
        key_columns=self._key_columns, columns=self._columns, aggregates=self._aggregates,
        analyze=analyze.analyze_fingerprints(transform_fn_dir), num_buckets=num_buckets,
        event_time=event, transform_fn=(transform_fn_dir, analyze.content_digest(transform_fn_dir)),
        pii_columns=self._pii, logged_inputs=names if log_inputs else None,
        served_features=sorted(served_features), model=self._rules.model_identity)
    self._counts = {"logged": 0, "dropped": 0, "sampled_out": 0, "flushes": 0}
    self._health, self._lost_before = {"healthy": True, "last_error": None}, {}
    self._batches = None  # started once the log directory is open
    # One logger per directory, held until close(): a second one is refused naming this one
    # (their parts would collide), a dead one's lock is taken over (transforms/spec/lock.py).
    self._lock = lock_folder(log_dir, "a ProductionLogger")
    try:
      self._open_log_dir()
    except BaseException:
      self._release()
      raise
    self._dropped = {s: dict(c) for s, c in self._rules.dropped.items()}
    # Threads: the open batch and the queue are Batches'; its one worker alone touches the stage
    # rules, part files and metadata until close(). stats() reads a snapshot under _stats_lock.
    self._stats_lock = threading.Lock()
    self._batches = Batches(batch_size, max_pending_batches, self._write_batch,
                            "ProductionLogger", when_full, full_wait_seconds)

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
    self._batches.submit([(*self._rules.accept(record, aggregates, served),
                           watermark_seconds(watermark))])

  def log_batch(self, records, aggregates=None, watermark=None, served=None):
    """Accepts several records; aggregates, served: one mapping per record (None: none)."""
    per = {"aggregates": aggregates, "served": served}
    per = {k: [None] * len(records) if v is None else list(v) for k, v in per.items()}
    if any(len(v) != len(records) for v in per.values()):
      raise UsageError("log_batch: one aggregates and one served mapping per record")
    mark = watermark_seconds(watermark)
    self._batches.submit([(*self._rules.accept(r, a, s), mark)
                          for r, a, s in zip(records, per["aggregates"], per["served"])])

  def log_table(self, table, aggregates=None, watermark=None, served=None):
    """Accepts a batch of records as Arrow columns, the columnar log(): a pyarrow Table or
    RecordBatch (or a pandas DataFrame, taken as pa.Table.from_pandas without its index) of
    record columns (any scalar Arrow types, under the same canonical rules; a
    column it lacks is null); aggregates and served: {name: one value per record, an Arrow
    array or a sequence}; watermark: for every record of the batch. RecordError (a UsageError
    and a ValueError) when it refuses them. Written as one batch, after the open one, on the
    worker thread: the table's buffers (a numpy array a pandas frame wraps) must not change
    after the call (aggregates and served values given as numpy arrays are copied). With
    when_full "drop", a call that meets a full queue returns at once: its records are counted
    lost (queue_full) without being checked."""
    rows = getattr(table, "num_rows", None)  # not a table: accept_table says what it is
    if rows is None and type(table).__name__ == "DataFrame":
      rows = len(table)
    if isinstance(rows, int) and self._batches.refuse_when_full(rows):  # lost unchecked
      return
    self._batches.submit(self._rules.accept_table(table, aggregates, served,
                                                  watermark_seconds(watermark)))

  def drain(self):
    """Returns once every full batch handed to the worker so far is written (not the open one)."""
    self._batches.drain()

  def flush(self):
    """Logs the open batch now and returns once it is written."""
    self._batches.flush()

  def close(self):
    """Writes the open batch, waits for the worker, then merges each bucket's parts into one
    (compact_on_close; a merge the file system refuses leaves the parts, which are a whole log,
    and, with on_write_error "drop", marks the logger unhealthy instead of raising). A second
    call does nothing."""
    if not self._batches.close():
      return
    try:
      if self._batches.error is None and self._compact:
        try:
          self._parts.compact(self._save_metadata)
        except OSError as e:
          self._unhealthy(e)
          if self._on_write_error == "raise":
            raise
    finally:
      self._parts.close()
      self._release()
    self._batches.raise_failure()

  @property
  def healthy(self):
    """False from a write the file system refused until a later write succeeds."""
    with self._stats_lock:
      return self._health["healthy"]

  def stats(self):
    """Counts so far: accepted, logged (rows written), dropped (rows logged as dropped),
    dropped_by_reason ({stage: {reason code: records}}), sampled_out, flushes,
    pending_batches (full batches waiting for the worker), lost (accepted records never
    written: a full queue, a refused write), lost_by_reason ({reason: records}: queue_full,
    write_failed:<errno name>), healthy and last_error (the last refused write's message)."""
    with self._stats_lock:
      out = {"accepted": self._batches.accepted, **self._counts, **self._health}
      out[DROPPED_BY_REASON] = {s: dict(c) for s, c in self._dropped.items()}
    out["pending_batches"] = self._batches.pending()
    out[LOST_BY_REASON] = self._lost()
    out["lost"] = sum(out[LOST_BY_REASON].values())
    return out

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  def _release(self):
    if self._lock is not None:  # None: a folder on an object store (no exclusive create)
      self._lock.release()

  # ------------------------------------------------------------------ on the worker thread
  def _write_batch(self, items):
    """Processes a batch, writes its parts (one per bucket), then the run metadata. A write
    the file system refuses (OSError) is taken back whole -- its parts removed, the stage
    rules' counts restored -- so the files stay those the run metadata lists; then it is
    counted lost ("drop") or raised ("raise")."""
    before = self._rules.checkpoint()
    table = self._rules.rows(items)
    try:
      self._parts.write(table)
      self._save_metadata()
    except OSError as e:
      self._parts.undo_last()
      self._rules.undo_last(before)
      self._meta.remove_staged()
      self._unhealthy(e)
      if self._on_write_error == "raise":
        raise
      self._batches.lose(items.table.num_rows if isinstance(items, Columns) else len(items),
                         write_reason(e))
      return
    with self._stats_lock:  # a snapshot for stats(): the rules' state is the worker's
      self._dropped = {s: dict(c) for s, c in self._rules.dropped.items()}
      self._counts["sampled_out"] = self._rules.sampled_out
      self._counts["flushes"] += 1
      self._counts["logged"] += table.num_rows
      self._counts["dropped"] += table.num_rows - \
          table.column(feature_log.DROPPED_STAGE).null_count
      self._health = {"healthy": True, "last_error": None}

  def _unhealthy(self, error):
    with self._stats_lock:
      self._health = {"healthy": False, "last_error": f"{type(error).__name__}: {error}"}

  def _lost(self):
    """{reason: records} lost over the log's life (a resumed log's earlier losses too)."""
    out = dict(self._lost_before)
    for reason, n in (self._batches.lost_counts() if self._batches else {}).items():
      out[reason] = out.get(reason, 0) + n
    return dict(sorted(out.items()))

  def _save_metadata(self):
    self._meta.save(self._meta.document(self._rules.content, self._rules.dropped,
                                        self._parts.entries(), self._parts.next_part,
                                        self._lost()))

  def _open_log_dir(self):
    """Creates LOG_DIR, or resumes the log it holds: its parts, content digest, drop counts
    and (without key columns) content-key ordinals. Part and temp files its metadata does not
    list are removed, so parts and metadata agree."""
    meta = self._meta.resumed(self._meta.document(self._rules.content, self._rules.dropped,
                                                  [], self._parts.next_part, {}))
    if meta is not None:
      self._parts.restore(meta)
      self._rules.content = fingerprint.parse_digest(meta["input"]["content_digest"])
      self._rules.dropped = {s: dict(c) for s, c in
                             meta["log"].get(DROPPED_BY_REASON, {}).items()}
      self._lost_before = dict(meta["log"].get(LOST_BY_REASON, {}))
    self._parts.remove_unlisted()
    if not self._meta.exists():  # a log directory always holds its run metadata
      self._save_metadata()
    for rel in self._parts.listed() if not self._key_columns else ():  # continue the ordinals
      raw, parse = feature_log.fp_column(RAW.name), feature_log.fp_column(PARSE.name)
      t = pq.read_table(os.path.join(self._log_dir, rel), columns=[raw, parse])
      self._rules.continue_ordinals(t.column(raw).to_pylist(), t.column(parse).to_pylist())


def _model_spec(model_dir, model_module, signature, output, rule):
  """The predict stage's ModelSpec of the logger's model arguments (None: no model), checked as
  the jobs check their model flags (transforms/model/flags.py)."""
  from transforms.model import flags as model_flags
  import types
  given = types.SimpleNamespace(model_dir=model_dir or "", model_module=model_module or "",
                                model_signature=signature or "", model_output=output or "",
                                decision=rule or "")
  spec = model_flags.spec_of(given)
  return spec if spec.given() else None
