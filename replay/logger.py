"""ProductionLogger: the serving side's feature log -- the offline stages and fingerprints, per record.

Serving code hands it raw records (dict column -> source text, as a CSV reader gives them) one
at a time or in small batches, with the windowed aggregate values it read from its online store
and, optionally, its watermark. Every `batch_size` records (and on flush / close) the open batch
goes through the same rules as pipelines.features -- the rule functions of transforms/ applied to
a small Arrow table -- and the TF Transform graph of a written transform_fn
(tft.TFTransformOutput), while every fingerprint is computed with the per-record coding
(transforms.fingerprint.fingerprint_record), so agreement with the offline log also holds the two
codings together. Rows of the offline feature-log schema are appended as one Parquet part per
bucket per flush, feature_log/bucket-BBBBB-of-NNNNN-part-PPPPPP.parquet, each written to a temp
name and renamed, then run_metadata.json (runner "ProductionLogger") is rewritten atomically: a
crash loses at most the open batch. Thread-safe; docs/logger.md has the details.

  with ProductionLogger.from_features_dir("out/features", "out/serving_log") as log:
    log.log(record, {"area_trips_in_window": n}, watermark=t)
"""
import glob
import hashlib
import hmac
import importlib
import json
import os
import re
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines import common, dataset
from transforms import analyze, feature_log, fingerprint, schema, serialize_records, \
    shard_records, window_records
from transforms import profile as profiles
from transforms.key_rows import KEY, key_batch
from transforms.transform_records import to_tft_batch

__all__ = ["ProductionLogger", "pii_hash", "RUNNER"]

RUNNER = "ProductionLogger"
RUN_METADATA = "run_metadata.json"
_STAGES = [s for s in feature_log.STAGES if s != "analyze"]
_BASE = pa.schema([("key", pa.string()), ("event_time", pa.int64()),
                   ("window_start", pa.int64()), ("window_end", pa.int64()),
                   ("shard_id", pa.int64()), ("dropped_stage", pa.string()),
                   ("drop_reason", pa.string())] + [(f"fp_{s}", pa.uint64()) for s in _STAGES])
_PART = re.compile(r"bucket-(\d{5})-of-(\d{5})-part-(\d{6})\.parquet$")
_ROW = "__row__"


def pii_hash(value, secret):
  """HMAC-SHA256 hex of a value's canonical encoding (docs/fingerprint.md), keyed by secret."""
  return hmac.new(secret, fingerprint.encode_record({"value": value}), hashlib.sha256).hexdigest()


def _digest_from_hex(text):
  count, total, mixsum = text.split(":")
  return {"count": int(count), "sum": int(total, 16), "mixsum": int(mixsum, 16)}


def _cell(value):
  """Source text of one cell as bytes, or None for an empty cell."""
  if value is None or value == "" or value == b"":
    return None
  return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _tf_dtype(arrow_type):
  import tensorflow as tf
  if pa.types.is_integer(arrow_type):
    return tf.int64
  if pa.types.is_floating(arrow_type):
    return tf.float64
  return tf.string


class ProductionLogger:
  """Logs raw serving records as feature-log rows (see the module docstring).

  columns: [(name, INT|FLOAT|BYTES)] of the records, as the ingest typed them; key_columns: the
  record key columns ([] = content key: hex of the parse fingerprint + ':<ordinal>' among exact
  duplicates, the ordinal counted in arrival order); aggregates: the WINDOWED_AGGREGATES names
  the caller supplies per record. pii_columns: log columns ("key" or transformed feature names)
  written as pii_hash(value, os.environ[pii_key_env]).
  """

  def __init__(self, transform_fn_dir, profile, log_dir, columns, key_columns,
               event_time_column, aggregates, *, transform_module="", source="serving",
               num_buckets=16, batch_size=1024, transform_batch_size=512, pii_columns=(),
               pii_key_env=None, compression="snappy"):
    if isinstance(profile, str):
      profile = profiles.load_profile(dataset.read_text(profile, "profile")[0])
    self._profile = profile
    self._columns = [(n, t) for n, t in columns]
    self._names = [n for n, _ in self._columns]
    self._key_columns = list(key_columns)
    self._event = event_time_column
    self._aggregates = list(aggregates)
    self._value_columns = self._names + self._aggregates
    for name in self._key_columns + [self._event]:
      if name not in self._names:
        raise common.UsageError(f"column {name!r} is not in the record schema")
    if num_buckets < 1 or batch_size < 1 or transform_batch_size < 1:
      raise common.UsageError("num_buckets, batch_size and transform_batch_size must be >= 1")
    self._num_buckets, self._batch_size = num_buckets, batch_size
    self._transform_batch_size, self._compression = transform_batch_size, compression
    self._pii = sorted(set(pii_columns))
    self._secret = None
    if self._pii:
      if not pii_key_env or not os.environ.get(pii_key_env):
        raise common.UsageError(f"pii_columns need an HMAC key: environment variable "
                                f"{pii_key_env!r} is not set")
      self._secret = os.environ[pii_key_env].encode("utf-8")
    import tensorflow_transform as tft
    self._tft = tft.TFTransformOutput(transform_fn_dir)
    self._layer = self._tft.transform_features_layer()
    self._features = sorted(self._tft.transformed_feature_spec())
    unknown = [c for c in self._pii if c != "key" and c not in self._features]
    if unknown:
      raise common.UsageError(f"pii_columns {', '.join(unknown)}: not a log column (the key or "
                              "a transformed feature)")
    self._log_dir = log_dir
    self._static = {
        "format": "skewtrace.features/1", "profile": profile.to_dict(),
        "transform_module": transform_module,
        "schema": {"columns": [{"name": n, "type": t} for n, t in self._columns],
                   "aggregates": self._aggregates},
        "versions": common.versions(), "runner": RUNNER, "stages": list(feature_log.STAGES),
        "analyze": analyze.analyze_fingerprints(transform_fn_dir)}
    if self._pii:
      self._static["pii"] = {"columns": self._pii, "hash": "hmac-sha256"}
    self._source = source
    self._lock = threading.Lock()        # the open batch
    self._flush_lock = threading.Lock()  # processing, part files, run metadata, counters
    self._buffer, self._closed = [], False
    self._buckets, self._ordinals, self._next_part = {}, {}, 0
    self._content = fingerprint.empty_digest()
    self.stats = {"accepted": 0, "logged": 0, "dropped": 0, "sampled_out": 0, "flushes": 0}
    self._open_log_dir()

  @classmethod
  def from_features_dir(cls, features_dir, log_dir, profile=None, **options):
    """A logger configured from an offline pipelines.features output: its transform_fn, its
    profile (unless one is given), schema, aggregates, key columns and log bucket count."""
    path = os.path.join(features_dir, RUN_METADATA)
    try:
      with open(path, encoding="utf-8") as f:
        meta = json.load(f)
    except (OSError, ValueError) as e:
      raise common.UsageError(f"{path}: cannot read run metadata ({e})") from None
    key_columns = meta["input"].get("key_columns")
    if key_columns is None:  # older metadata: the ingest manifest says
      manifest = dataset.load_manifest(meta["input"]["dir"])
      if manifest is None:
        raise common.UsageError(f"{path} has no input.key_columns and {meta['input']['dir']} "
                                "holds no ingest manifest")
      key_columns = manifest["key_columns"]
    try:
      module = importlib.import_module(meta["transform_module"])
    except ImportError as e:
      raise common.UsageError(f"transform module {meta['transform_module']}: {e}") from None
    options.setdefault("num_buckets", meta["log"]["num_buckets"])
    return cls(os.path.join(features_dir, "transform_fn"),
               profile if profile is not None else profiles.parse_profile(meta["profile"]),
               log_dir, [(c["name"], c["type"]) for c in meta["schema"]["columns"]],
               key_columns, module.EVENT_TIME_COLUMN, meta["schema"]["aggregates"],
               transform_module=meta["transform_module"], **options)

  # ------------------------------------------------------------------ public surface
  def log(self, record, aggregates=None, watermark=None):
    """Accepts one raw record; aggregates: {name: int} (None = not in the store: 0)."""
    self.log_batch([record], [aggregates], watermark)

  def log_batch(self, records, aggregates=None, watermark=None):
    """Accepts several raw records; aggregates: a list of {name: int}, one per record."""
    aggregates = [None] * len(records) if aggregates is None else list(aggregates)
    if len(aggregates) != len(records):
      raise common.UsageError("log_batch: one aggregates mapping per record")
    if watermark is not None and (isinstance(watermark, bool) or not isinstance(
        watermark, (int, np.integer))):
      raise common.UsageError(f"watermark must be an integer event time, got {watermark!r}")
    items = [(self._check_record(r), self._check_aggregates(a), watermark)
             for r, a in zip(records, aggregates)]
    ready = []
    with self._lock:
      if self._closed:
        raise common.UsageError("the logger is closed")
      self._buffer.extend(items)
      self.stats["accepted"] += len(items)
      while len(self._buffer) >= self._batch_size:
        ready.append(self._buffer[:self._batch_size])
        self._buffer = self._buffer[self._batch_size:]
    for batch in ready:
      self._write(batch)

  def flush(self):
    """Logs the open batch now."""
    with self._lock:
      batch, self._buffer = self._buffer, []
    if batch:
      self._write(batch)

  def close(self):
    with self._lock:
      self._closed = True
    self.flush()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()
    return False

  @property
  def metadata(self):
    with self._flush_lock:
      return self._metadata()

  # ------------------------------------------------------------------ input checks
  def _check_record(self, record):
    if not isinstance(record, dict):
      raise common.UsageError(f"a record is a dict column -> source text, got "
                              f"{type(record).__name__}")
    for name in self._names:
      value = record.get(name)
      if value is not None and not isinstance(value, (str, bytes)):
        raise common.UsageError(f"column {name!r}: source text (str, bytes or None) expected, "
                                f"got {type(value).__name__}")
    return record

  def _check_aggregates(self, values):
    values = values or {}
    out = {}
    for name in self._aggregates:
      v = values.get(name)
      if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))):
        raise common.UsageError(f"aggregate {name!r} must be an integer, got {v!r}")
      out[name] = 0 if v is None else int(v)  # a window the store lacks counts 0, as offline
    return out

  # ------------------------------------------------------------------ the stages
  def _parse(self, items):
    """raw + parse: (raw fps, typed batch with bad cells null, reasons per row)."""
    names, pii = self._names, bool(self._pii)
    cells, reasons = [], [[] for _ in items]
    for i, (record, _, _) in enumerate(items):
      row = {n: (_cell(record[n]) if n in record else fingerprint.MISSING) for n in names}
      cells.append(row)
      for n in names:
        if row[n] is fingerprint.MISSING:
          reasons[i].append(f"column {n!r} is absent")
    # The raw stage: each cell's source text (null when empty), before typing, as TypeRows.
    fp_raw = [fingerprint.fingerprint_record(row, names) for row in cells]
    typed = []
    for name, typ in self._columns:
      texts = []
      for i, row in enumerate(cells):
        v = row[name]
        if isinstance(v, bytes):
          try:
            v.decode("utf-8")
          except UnicodeDecodeError:
            reasons[i].append(f"column {name!r} is not UTF-8")
            v = None
        texts.append(v if isinstance(v, bytes) else None)
      arr, bad = schema.type_column(pa.array(texts, pa.binary()), typ)
      for i in bad:  # the same reasons as TypeRows (without the text when values are PII)
        reasons[i].append(f"column {name!r} is not {typ}" if pii else
                          f"column {name!r}: {texts[i].decode('utf-8')!r} is not {typ}")
      typed.append(arr)
    for name in self._key_columns:
      for i, row in enumerate(cells):
        if row[name] is None:
          reasons[i].append(f"key column {name!r} is missing")
    return fp_raw, pa.record_batch(typed, names=names), reasons

  def _keys(self, typed, ok, fp_parse, fp_raw):
    """KeyRows' keys; a record that failed typing is keyed by its raw fingerprint's hex."""
    n = typed.num_rows
    clear = [None] * n
    if self._key_columns:
      keyed = typed.select(self._key_columns)
      texts = key_batch(keyed, self._key_columns, self._key_columns, 1).column(KEY).to_pylist()
      has_key = ~np.any([keyed.column(c).is_null().to_numpy(zero_copy_only=False)
                         for c in self._key_columns], axis=0)
      clear = [t if h else None for t, h in zip(texts, has_key)]
    keys = []
    for i in range(n):
      if clear[i] is not None:
        keys.append(clear[i])
        continue
      h = f"{fp_parse[i] if ok[i] else fp_raw[i]:016x}"
      ordinal = self._ordinals.get(h, 0)  # WriteShards' ':<ordinal>' among exact duplicates
      self._ordinals[h] = ordinal + 1
      keys.append(f"{h}:{ordinal}")
    return keys

  def _window(self, typed, ok, items):
    """{row: (start, end)} kept and {row: reason} dropped, by WindowRecords' assign_windows,
    once per distinct caller watermark in the batch."""
    rows = np.flatnonzero(ok)
    batch = pa.record_batch([typed.column(self._event).take(pa.array(rows)), pa.array(rows)],
                            names=[self._event, _ROW])
    marks = [items[i][2] for i in rows]
    kept, dropped = {}, {}
    for mark in sorted(set(marks), key=lambda m: (m is not None, m or 0)):
      mask = pa.array([m == mark if mark is not None else m is None for m in marks])
      k, d = window_records.assign_windows(batch.filter(mask), self._event, self._profile, mark)
      kept.update(zip(k.column(_ROW).to_pylist(), zip(
          k.column(window_records.WINDOW_START).to_pylist(),
          k.column(window_records.WINDOW_END).to_pylist())))
      dropped.update(zip(d.column(_ROW).to_pylist(),
                         d.column(window_records.DROP_REASON).to_pylist()))
    return kept, dropped

  def _transform(self, decoded, keys):
    """TFT outputs {feature: list of per-record values} through transform_features_layer, fed
    as the pipeline feeds TFT (to_tft_batch: one-value VarLen sparse features, strings as
    bytes); a one-value (rank-1) output is a scalar per record, as feature_log logs it."""
    import tensorflow as tf
    batch = pa.RecordBatch.from_arrays(
        [c.combine_chunks() for c in decoded.columns] + [pa.array(keys, pa.large_string())],
        names=decoded.schema.names + [KEY])
    tft_batch = to_tft_batch(batch, self._value_columns)
    out = {f: [] for f in self._features}
    for lo in range(0, batch.num_rows, self._transform_batch_size):
      chunk = tft_batch.slice(lo, self._transform_batch_size)
      inputs = {}
      for name in self._value_columns:
        arr = chunk.column(name)
        rows = np.flatnonzero(arr.is_valid().to_numpy(zero_copy_only=False))
        flat = arr.flatten()
        dtype = _tf_dtype(flat.type)  # the transform_fn's input dtypes: int64, float64, string
        values = np.array(flat.to_pylist(), dtype=object) if dtype == tf.string else \
            flat.to_numpy(zero_copy_only=False).astype(dtype.as_numpy_dtype)
        inputs[name] = tf.SparseTensor(
            np.stack([rows, np.zeros_like(rows)], axis=1).astype(np.int64),
            tf.constant(values, dtype=dtype), [len(arr), 1])
      # layer.call, not layer(...): Keras' __call__ autocasts float64 inputs to float32, which
      # a transform_fn analysed over float64 columns (as pipelines.features feeds them) refuses.
      result = self._layer.call(inputs)
      for f in self._features:
        t = result[f]
        if isinstance(t, tf.SparseTensor):
          t = tf.RaggedTensor.from_sparse(t)
        out[f].extend(t.to_list() if isinstance(t, tf.RaggedTensor) else t.numpy().tolist())
    return out

  def _rows(self, items):
    """The log rows (dicts) of a batch of accepted records."""
    fp = fingerprint.fingerprint_record
    fp_raw, typed, reasons = self._parse(items)
    ok = [not r for r in reasons]
    py = typed.to_pylist()
    fp_parse = [fp(row, self._names) if good else None for row, good in zip(py, ok)]
    for v in fp_parse:
      if v is not None:  # the input's content digest, as the ingest manifest has it
        self._content = fingerprint.add_digests(self._content, fingerprint.combine_digest([v]))
    keys = self._keys(typed, ok, fp_parse, fp_raw)
    events = typed.column(self._event).cast(pa.int64()).to_pylist()
    kept, late = self._window(typed, ok, items) if any(ok) else ({}, {})
    rows = []
    for i in range(len(items)):
      if not ok[i]:
        rows.append(dict(key=keys[i], event_time=events[i], dropped_stage="parse",
                         drop_reason="; ".join(reasons[i]), fp_raw=fp_raw[i]))
      elif i in late:
        rows.append(dict(key=keys[i], event_time=events[i], dropped_stage="window",
                         drop_reason=late[i], fp_raw=fp_raw[i], fp_parse=fp_parse[i]))
    live = sorted(kept)
    if live:  # ShardRecords' sampling rule, applied to the keys of the windowed records
      sample = shard_records.sample_batch(pa.record_batch(
          [pa.array([keys[i] for i in live], pa.large_string()), pa.array(live)],
          names=[KEY, _ROW]), self._profile)
      chosen = sample.column(_ROW).to_pylist()
      self.stats["sampled_out"] += len(live) - len(chosen)
      live = chosen
    if not live:
      return rows
    idx = pa.array(live)
    aggs = [items[i][1] for i in live]
    values = pa.Table.from_batches([typed]).take(idx)
    for name in self._aggregates:
      values = values.append_column(name, pa.array([a[name] for a in aggs], pa.int64()))
    decoded = serialize_records.round_trip(values, self._profile)
    outputs = self._transform(decoded, [keys[i] for i in live])
    W0, W1 = window_records.WINDOW_START, window_records.WINDOW_END
    prof = self._profile
    for j, (i, dec) in enumerate(zip(live, decoded.to_pylist())):
      start, end = kept[i]
      key = keys[i]
      shard = fp({KEY: key}, seed=prof.hash_seed) % prof.num_shards
      out = {f: outputs[f][j] for f in self._features}
      rows.append(dict(
          key=key, event_time=events[i], window_start=start, window_end=end, shard_id=shard,
          fp_raw=fp_raw[i], fp_parse=fp_parse[i], fp_window=fp({W0: start, W1: end, **aggs[j]}),
          fp_shard=fp({shard_records.SHARD_ID: shard, KEY: key}),
          fp_serialize=fp(dec, self._value_columns), fp_transform=fp(out),
          **{f"fp__{f}": fp({f: v}) for f, v in out.items()},
          **{f"value__{f}": v for f, v in out.items()}))
    return rows

  # ------------------------------------------------------------------ files
  def _schema(self):
    fields = list(_BASE)
    for f in self._features:
      spec = self._tft.transformed_feature_spec()[f]
      typ = {"float32": pa.float32(), "int64": pa.int64()}.get(spec.dtype.name, pa.large_binary())
      if not (hasattr(spec, "shape") and list(spec.shape) == []):
        typ = pa.large_list(typ)
      fields += [(f"fp__{f}", pa.uint64()),
                 (f"value__{f}", pa.string() if f in self._pii else typ)]
    return pa.schema(fields)

  def _write(self, items):
    with self._flush_lock:
      rows = self._rows(items)
      if self._secret is not None:
        for row in rows:
          for col in self._pii:
            name = "key" if col == "key" else f"value__{col}"
            if row.get(name) is not None:
              row[name] = pii_hash(row[name], self._secret)
      table = pa.Table.from_pylist(rows, schema=self._schema())
      part = self._next_part
      buckets = feature_log.bucket_of(table.column("key").combine_chunks(), self._num_buckets)
      for b in np.unique(buckets):
        rows_b = table.filter(pa.array(buckets == b)).sort_by("key")
        path = f"feature_log/bucket-{b:05d}-of-{self._num_buckets:05d}-part-{part:06d}.parquet"
        sink = pa.BufferOutputStream()
        pq.write_table(rows_b, sink, compression=self._compression)
        _write_atomically(os.path.join(self._log_dir, path), sink.getvalue().to_pybytes())
        entry = self._buckets.setdefault(int(b), {
            "rows": 0, "dropped": 0, "parts": [],
            "digests": {s: fingerprint.empty_digest() for s in _STAGES}})
        entry["rows"] += rows_b.num_rows
        entry["dropped"] += rows_b.num_rows - rows_b.column("dropped_stage").null_count
        entry["parts"].append(path)
        for s in _STAGES:
          entry["digests"][s] = fingerprint.add_digests(entry["digests"][s], (
              fingerprint.combine_digest(rows_b.column(f"fp_{s}").drop_null().to_numpy())))
      self._next_part += 1
      self.stats["flushes"] += 1
      self.stats["logged"] += table.num_rows
      self.stats["dropped"] += table.num_rows - table.column("dropped_stage").null_count
      _write_atomically(os.path.join(self._log_dir, RUN_METADATA), (json.dumps(
          self._metadata(), indent=2, sort_keys=True) + "\n").encode("utf-8"))

  def _metadata(self):
    n = self._num_buckets
    buckets = [{"bucket": b, "path": f"feature_log/bucket-{b:05d}-of-{n:05d}*.parquet",
                "parts": list(e["parts"]), "rows": e["rows"], "dropped": e["dropped"],
                "digests": {s: fingerprint.digest_hex(d) for s, d in e["digests"].items()}}
               for b, e in sorted(self._buckets.items())]
    return dict(self._static, input={
        "dir": self._source, "content_digest": fingerprint.digest_hex(self._content),
        "key_columns": self._key_columns}, log={
        "num_buckets": n, "seed": feature_log.LOG_SEED, "parts": self._next_part,
        "rows": sum(b["rows"] for b in buckets), "buckets": buckets})

  def _open_log_dir(self):
    """Creates LOG_DIR, or resumes the log it holds: files the metadata does not list (the
    batch open at a crash, temp files) are removed, so parts and metadata agree."""
    os.makedirs(os.path.join(self._log_dir, "feature_log"), exist_ok=True)
    path = os.path.join(self._log_dir, RUN_METADATA)
    meta = None
    if os.path.exists(path):
      with open(path, encoding="utf-8") as f:
        meta = json.load(f)
      for field in ("format", "profile", "schema", "runner", "stages", "pii"):
        if meta.get(field) != self._static.get(field):
          raise common.UsageError(f"{self._log_dir} holds another log ({field} differs); "
                                  "use a new log directory")
      if meta["analyze"]["fingerprint"] != self._static["analyze"]["fingerprint"] or \
          meta["log"]["num_buckets"] != self._num_buckets or \
          meta["input"]["key_columns"] != self._key_columns:
        raise common.UsageError(f"{self._log_dir} holds another log (transform_fn, buckets or "
                                "key columns differ); use a new log directory")
      self._next_part = meta["log"]["parts"]
      self._content = _digest_from_hex(meta["input"]["content_digest"])
      for b in meta["log"]["buckets"]:
        self._buckets[b["bucket"]] = {
            "rows": b["rows"], "dropped": b["dropped"], "parts": list(b["parts"]),
            "digests": {s: _digest_from_hex(d) for s, d in b["digests"].items()}}
    listed = {p for e in self._buckets.values() for p in e["parts"]}
    for name in os.listdir(os.path.join(self._log_dir, "feature_log")):
      rel = f"feature_log/{name}"
      if rel not in listed and (_PART.search(name) or name.endswith(".tmp")):
        os.remove(os.path.join(self._log_dir, rel))
    if not self._key_columns:  # content keys: continue the duplicate ordinals
      for rel in sorted(listed):
        t = pq.read_table(os.path.join(self._log_dir, rel), columns=["fp_raw", "fp_parse"])
        for raw, parse in zip(t.column("fp_raw").to_pylist(), t.column("fp_parse").to_pylist()):
          h = f"{raw if parse is None else parse:016x}"
          self._ordinals[h] = self._ordinals.get(h, 0) + 1


def _write_atomically(path, data):
  """Temp name, fsync, rename: readers see the whole file or none of it."""
  tmp = path + ".tmp"
  with open(tmp, "wb") as f:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)
