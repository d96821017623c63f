"""ProductionLogger: the serving side's feature log -- the offline stages and fingerprints.

Serving code hands it raw records (dict column -> source text, as a CSV reader gives them) one
at a time or in small batches, with the windowed aggregate values it read from its online store
and, optionally, its watermark. Every `batch_size` records (and on flush / close) the open batch
goes through the rules of pipelines.features -- the rule functions of transforms/ applied to a
small Arrow table -- and the TF Transform graph of a written transform_fn
(tft.TFTransformOutput), while every fingerprint is computed with the per-record coding
(transforms.spec.fingerprint.fingerprint_record): a production log equal to the offline one also
holds the two codings together. Those stage rules are replay.log_rows.LogRows; this module
owns the threads, part files, run metadata and resume. Rows of the offline feature-log schema
are appended as one Parquet part per bucket per flush
(feature_log/bucket-BBBBB-of-NNNNN-part-PPPPPP.parquet), each written under a temp name and
renamed, then run_metadata.json (runner "ProductionLogger") is rewritten the same way: a crash
loses at most the open batch. Thread-safe. docs/logger.md.

  with ProductionLogger.from_features_dir("out/features", "out/serving_log") as log:
    log.log(record, {"area_trips_in_window": n}, watermark=t)
"""
import hashlib
import hmac
import importlib
import os
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from replay.log_rows import LogRows
from transforms.graph import analyze
from transforms.spec import feature_log, fingerprint, run_metadata
from transforms.spec import profile as profiles
from transforms.spec.errors import UsageError
from transforms.spec.stages import FP_STAGES, PARSE, RAW

__all__ = ["ProductionLogger", "pii_hash", "RUNNER"]

RUNNER = "ProductionLogger"
# The run-metadata sections a resumed log must share with this logger (log.parts aside).
_SAME = ("format", "profile", "schema", "runner", "stages", "pii")


def pii_hash(value, secret):
  """HMAC-SHA256 hex of a value's canonical encoding (docs/fingerprint.md), keyed by secret."""
  return hmac.new(secret, fingerprint.encode_record({"value": value}), hashlib.sha256).hexdigest()


def _write_atomically(path, data):
  """Temp name, fsync, rename: a reader sees the whole file or none of it."""
  tmp = path + ".tmp"
  with open(tmp, "wb") as f:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


class ProductionLogger:
  """Logs raw serving records as feature-log rows (see the module docstring).

  columns: [(name, INT|FLOAT|BYTES)] as the ingest typed them; key_columns: the record key
  columns ([] = content key: hex of the parse fingerprint + ':<ordinal>' among exact duplicates,
  counted in arrival order); event_time_column, aggregates: the feature module's
  EVENT_TIME_COLUMN and WINDOWED_AGGREGATES names (values supplied per record by the caller);
  pii_columns: log columns ("key" or transformed feature names) written as
  pii_hash(value, key) with the HMAC key read from the environment variable named pii_key_env.
  """

  def __init__(self, transform_fn_dir, profile, log_dir, columns, key_columns,
               event_time_column, aggregates, *, transform_module="", source="serving",
               num_buckets=16, batch_size=1024, transform_batch_size=2048, pii_columns=(),
               pii_key_env=None, compression="snappy"):
    if isinstance(profile, str):
      try:
        with open(profile, encoding="utf-8") as f:
          profile = profiles.load_profile(f.read())
      except OSError as e:
        raise UsageError(f"profile {profile}: cannot read ({e})") from None
    self._profile, self._columns = profile, [(n, t) for n, t in columns]
    self._names = [n for n, _ in self._columns]
    self._key_columns, self._event = list(key_columns), event_time_column
    self._aggregates = list(aggregates)
    for name in self._key_columns + [self._event]:
      if name not in self._names:
        raise UsageError(f"column {name!r} is not in the record schema")
    if min(num_buckets, batch_size, transform_batch_size) < 1:
      raise UsageError("num_buckets, batch_size and transform_batch_size must be >= 1")
    self._num_buckets, self._batch_size, self._compression = num_buckets, batch_size, compression
    self._pii, self._secret = sorted(set(pii_columns)), None
    if self._pii:
      if not pii_key_env or not os.environ.get(pii_key_env):
        raise UsageError(f"pii_columns need an HMAC key: environment variable "
                                f"{pii_key_env!r} is not set")
      self._secret = os.environ[pii_key_env].encode("utf-8")
    import tensorflow_transform as tft
    tft_output = tft.TFTransformOutput(transform_fn_dir)
    spec = tft_output.transformed_feature_spec()
    self._features = sorted(spec)
    self._rules = LogRows(self._columns, self._key_columns, self._event, self._aggregates,
                          profile, bool(self._pii), tft_output.transform_features_layer(),
                          self._features, transform_batch_size)
    unknown = [c for c in self._pii if c != feature_log.KEY and c not in spec]
    if unknown:
      raise UsageError(f"pii_columns {', '.join(unknown)}: not a log column (the key or "
                              "a transformed feature)")
    fields = list(feature_log.HEAD)
    for f in self._features:  # a one-value feature is logged as a scalar, as the job's log is
      typ = {"float32": pa.float32(), "int64": pa.int64()}.get(spec[f].dtype.name,
                                                               pa.large_binary())
      fields += [(feature_log.feature_fp_column(f), pa.uint64()),
                 (feature_log.value_column(f), pa.string() if f in self._pii else
                  typ if list(spec[f].shape) == [] else pa.large_list(typ))]
    self._schema = pa.schema(fields)
    self._transform_module, self._profile = transform_module, profile
    self._versions = run_metadata.versions()
    self._analyze = analyze.analyze_fingerprints(transform_fn_dir)
    self._log_dir, self._source = log_dir, source
    self._lock = threading.Lock()        # the open batch and the count of batches in flight
    self._idle = threading.Condition(self._lock)
    self._in_flight = 0
    self._flush_lock = threading.Lock()  # processing, part files, run metadata, counters
    self._buffer, self._closed = [], False
    self._buckets, self._next_part = {}, 0  # the stage rules own ordinals and content digest
    self.stats = {"accepted": 0, "logged": 0, "dropped": 0, "sampled_out": 0, "flushes": 0}
    self._open_log_dir()

  @classmethod
  def from_features_dir(cls, features_dir, log_dir, profile=None, **options):
    """A logger configured from an offline pipelines.features output: its transform_fn, its
    profile (unless one is given), schema, aggregates, key columns and log bucket count."""
    path = os.path.join(features_dir, run_metadata.FILE)
    try:
      with open(path, "rb") as f:
        meta = run_metadata.load(f.read(), path)
    except OSError as e:
      raise UsageError(f"{path}: cannot read run metadata ({e})") from None
    key_columns = meta["input"].get("key_columns")
    if key_columns is None:
      raise UsageError(f"{path} has no input.key_columns (written by pipelines.features "
                              "since run_metadata gained it); rerun the features job")
    try:
      module = importlib.import_module(meta["transform_module"])
    except ImportError as e:
      raise UsageError(f"transform module {meta['transform_module']}: {e}") from None
    options.setdefault("num_buckets", meta["log"]["num_buckets"])
    return cls(os.path.join(features_dir, feature_log.TRANSFORM_FN_DIR),
               profile if profile is not None else profiles.parse_profile(meta["profile"]),
               log_dir, [(c["name"], c["type"]) for c in meta["schema"]["columns"]],
               key_columns, module.EVENT_TIME_COLUMN, meta["schema"]["aggregates"],
               transform_module=meta["transform_module"], **options)

  # ------------------------------------------------------------------ public surface
  def log(self, record, aggregates=None, watermark=None):
    """Accepts one raw record; aggregates: {name: int} (a name absent or None counts 0, as a
    window the offline counts lack)."""
    self.log_batch([record], [aggregates], watermark)

  def log_batch(self, records, aggregates=None, watermark=None):
    """Accepts several raw records; aggregates: one {name: int} per record (or None)."""
    aggregates = [None] * len(records) if aggregates is None else list(aggregates)
    if len(aggregates) != len(records):
      raise UsageError("log_batch: one aggregates mapping per record")
    if watermark is not None and (isinstance(watermark, bool) or not isinstance(
        watermark, (int, np.integer))):
      raise UsageError(f"watermark must be an integer event time, got {watermark!r}")
    items = [self._accept(r, a, watermark) for r, a in zip(records, aggregates)]
    ready = []
    with self._lock:
      if self._closed:
        raise UsageError("the logger is closed")
      self._buffer.extend(items)
      self.stats["accepted"] += len(items)
      while len(self._buffer) >= self._batch_size:
        ready.append(self._buffer[:self._batch_size])
        self._buffer = self._buffer[self._batch_size:]
      self._in_flight += len(ready)
    for batch in ready:  # processed outside the buffer lock: other threads keep logging
      self._write(batch)

  def flush(self):
    """Logs the open batch now."""
    with self._lock:
      batch, self._buffer = self._buffer, []
      self._in_flight += 1 if batch else 0
    if batch:
      self._write(batch)

  def close(self):
    """Flushes, and returns once every batch other threads took is written too."""
    with self._lock:
      self._closed = True
    self.flush()
    with self._idle:
      self._idle.wait_for(lambda: self._in_flight == 0)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
    return False

  def _accept(self, record, aggregates, watermark):
    if not isinstance(record, dict):
      raise UsageError(f"a record is a dict column -> source text, got "
                              f"{type(record).__name__}")
    for name in self._names:
      if not isinstance(record.get(name), (str, bytes, type(None))):
        raise UsageError(f"column {name!r}: source text (str, bytes or None) expected, "
                                f"got {type(record[name]).__name__}")
    values = {}
    for name in self._aggregates:
      v = (aggregates or {}).get(name)
      if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))):
        raise UsageError(f"aggregate {name!r} must be an integer, got {v!r}")
      values[name] = 0 if v is None else int(v)
    return record, values, watermark

  # ------------------------------------------------------------------ files
  def _write(self, items):
    try:
      self._write_batch(items)
    finally:
      with self._idle:
        self._in_flight -= 1
        self._idle.notify_all()

  def _write_batch(self, items):
    """Processes a batch, writes its parts (one per bucket), then the run metadata."""
    with self._flush_lock:
      rows = self._rules.rows(items)
      self.stats["sampled_out"] = self._rules.sampled_out
      for row in rows if self._secret is not None else ():
        for col in self._pii:
          name = col if col == feature_log.KEY else feature_log.value_column(col)
          if row.get(name) is not None:
            row[name] = pii_hash(row[name], self._secret)
      table = pa.Table.from_pylist(rows, schema=self._schema)
      buckets = feature_log.bucket_of(table.column(feature_log.KEY).combine_chunks(),
                                      self._num_buckets)
      for b in np.unique(buckets):
        part = table.filter(pa.array(buckets == b)).sort_by(feature_log.KEY)
        path = feature_log.part_path(int(b), self._num_buckets, self._next_part)
        sink = pa.BufferOutputStream()
        pq.write_table(part, sink, compression=self._compression,
                       use_dictionary=feature_log.dictionary_columns(part.schema.names))
        _write_atomically(os.path.join(self._log_dir, path), sink.getvalue().to_pybytes())
        entry = self._buckets.setdefault(int(b), {
            "rows": 0, "dropped": 0, "parts": [],
            "digests": {s: fingerprint.empty_digest() for s in FP_STAGES}})
        entry["rows"] += part.num_rows
        entry["dropped"] += part.num_rows - part.column(feature_log.DROPPED_STAGE).null_count
        entry["parts"].append(path)
        for s, d in feature_log.stage_digests(part).items():
          entry["digests"][s] = fingerprint.add_digests(entry["digests"][s], d)
      self._next_part += 1
      self.stats["flushes"] += 1
      self.stats["logged"] += table.num_rows
      self.stats["dropped"] += table.num_rows - table.column(feature_log.DROPPED_STAGE).null_count
      self._save_metadata()

  def _save_metadata(self):
    _write_atomically(os.path.join(self._log_dir, run_metadata.FILE),
                      run_metadata.dump(self._metadata()))

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
        versions_=self._versions)
    doc["log"]["parts"] = self._next_part
    if self._pii:
      doc["pii"] = {"columns": self._pii, "hash": "hmac-sha256"}
    return doc

  def _open_log_dir(self):
    """Creates LOG_DIR, or resumes the log it holds. Part and temp files its metadata does not
    list (the batch open at a crash) are removed, so parts and metadata agree."""
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
