"""ProductionLogger: the serving side's feature log -- the offline stages and fingerprints, per record.

Serving code hands it raw records (dict column -> source text, as a CSV reader gives them) one
at a time or in small batches, with the windowed aggregate values it read from its online store
and, optionally, its watermark. Every `batch_size` records (and on flush / close) the open batch
goes through the rules of pipelines.features -- the rule functions of transforms/ applied to a
small Arrow table -- and the TF Transform graph of a written transform_fn
(tft.TFTransformOutput), while every fingerprint is computed with the per-record coding
(transforms.fingerprint.fingerprint_record): a production log equal to the offline one also
holds the two codings together. Rows of the offline feature-log schema are appended as one
Parquet part per bucket per flush (feature_log/bucket-BBBBB-of-NNNNN-part-PPPPPP.parquet), each
written under a temp name and renamed, then run_metadata.json (runner "ProductionLogger") is
rewritten the same way: a crash loses at most the open batch. Thread-safe. docs/logger.md.

  with ProductionLogger.from_features_dir("out/features", "out/serving_log") as log:
    log.log(record, {"area_trips_in_window": n}, watermark=t)
"""
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

RUNNER, RUN_METADATA = "ProductionLogger", "run_metadata.json"
_STAGES = [s for s in feature_log.STAGES if s != "analyze"]
_BASE = [("key", pa.string()), ("event_time", pa.int64()), ("window_start", pa.int64()),
         ("window_end", pa.int64()), ("shard_id", pa.int64()), ("dropped_stage", pa.string()),
         ("drop_reason", pa.string())] + [(f"fp_{s}", pa.uint64()) for s in _STAGES]
_PART = re.compile(r"^bucket-\d{5}-of-\d{5}-part-\d{6}\.parquet$")
_ROW = "__row__"
_W0, _W1 = window_records.WINDOW_START, window_records.WINDOW_END


def pii_hash(value, secret):
  """HMAC-SHA256 hex of a value's canonical encoding (docs/fingerprint.md), keyed by secret."""
  return hmac.new(secret, fingerprint.encode_record({"value": value}), hashlib.sha256).hexdigest()


def _digest(text):
  count, total, mixsum = text.split(":")
  return {"count": int(count), "sum": int(total, 16), "mixsum": int(mixsum, 16)}


def _cell(value):
  """A cell's source text as bytes; None for an empty cell (as the CSV reader: "" is null)."""
  if value is None or len(value) == 0:
    return None
  return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _feature_fp(memo, name, value):
  """fingerprint_record({name: value}), memoised per flush (features repeat few values; the
  type is part of the memo key, so 1 and 1.0 never share an entry)."""
  if isinstance(value, list):
    return fingerprint.fingerprint_record({name: value})
  k = (name, value.__class__, value)
  if k not in memo:
    memo[k] = fingerprint.fingerprint_record({name: value})
  return memo[k]


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
      profile = profiles.load_profile(dataset.read_text(profile, "profile")[0])
    self._profile, self._columns = profile, [(n, t) for n, t in columns]
    self._names = [n for n, _ in self._columns]
    self._key_columns, self._event = list(key_columns), event_time_column
    self._aggregates = list(aggregates)
    self._value_columns = self._names + self._aggregates
    for name in self._key_columns + [self._event]:
      if name not in self._names:
        raise common.UsageError(f"column {name!r} is not in the record schema")
    if min(num_buckets, batch_size, transform_batch_size) < 1:
      raise common.UsageError("num_buckets, batch_size and transform_batch_size must be >= 1")
    self._num_buckets, self._batch_size = num_buckets, batch_size
    self._transform_batch_size, self._compression = transform_batch_size, compression
    self._pii, self._secret = sorted(set(pii_columns)), None
    if self._pii:
      if not pii_key_env or not os.environ.get(pii_key_env):
        raise common.UsageError(f"pii_columns need an HMAC key: environment variable "
                                f"{pii_key_env!r} is not set")
      self._secret = os.environ[pii_key_env].encode("utf-8")
    import tensorflow_transform as tft
    tft_output = tft.TFTransformOutput(transform_fn_dir)
    self._layer = tft_output.transform_features_layer()
    spec = tft_output.transformed_feature_spec()
    self._features = sorted(spec)
    unknown = [c for c in self._pii if c != "key" and c not in spec]
    if unknown:
      raise common.UsageError(f"pii_columns {', '.join(unknown)}: not a log column (the key or "
                              "a transformed feature)")
    fields = list(_BASE)
    for f in self._features:  # a one-value feature is logged as a scalar, as feature_log does
      typ = {"float32": pa.float32(), "int64": pa.int64()}.get(spec[f].dtype.name,
                                                               pa.large_binary())
      fields += [(f"fp__{f}", pa.uint64()), (f"value__{f}", pa.string() if f in self._pii else
                                             typ if list(spec[f].shape) == [] else
                                             pa.large_list(typ))]
    self._schema = pa.schema(fields)
    self._static = {
        "format": "skewtrace.features/1", "profile": profile.to_dict(),
        "transform_module": transform_module,
        "schema": {"columns": [{"name": n, "type": t} for n, t in self._columns],
                   "aggregates": self._aggregates},
        "versions": common.versions(), "runner": RUNNER, "stages": list(feature_log.STAGES),
        "analyze": analyze.analyze_fingerprints(transform_fn_dir)}
    if self._pii:
      self._static["pii"] = {"columns": self._pii, "hash": "hmac-sha256"}
    self._log_dir, self._source = log_dir, source
    self._lock = threading.Lock()        # the open batch and the count of batches in flight
    self._idle = threading.Condition(self._lock)
    self._in_flight = 0
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
    """Accepts one raw record; aggregates: {name: int} (a name absent or None counts 0, as a
    window the offline counts lack)."""
    self.log_batch([record], [aggregates], watermark)

  def log_batch(self, records, aggregates=None, watermark=None):
    """Accepts several raw records; aggregates: one {name: int} per record (or None)."""
    aggregates = [None] * len(records) if aggregates is None else list(aggregates)
    if len(aggregates) != len(records):
      raise common.UsageError("log_batch: one aggregates mapping per record")
    if watermark is not None and (isinstance(watermark, bool) or not isinstance(
        watermark, (int, np.integer))):
      raise common.UsageError(f"watermark must be an integer event time, got {watermark!r}")
    items = [self._accept(r, a, watermark) for r, a in zip(records, aggregates)]
    ready = []
    with self._lock:
      if self._closed:
        raise common.UsageError("the logger is closed")
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
      raise common.UsageError(f"a record is a dict column -> source text, got "
                              f"{type(record).__name__}")
    for name in self._names:
      if not isinstance(record.get(name), (str, bytes, type(None))):
        raise common.UsageError(f"column {name!r}: source text (str, bytes or None) expected, "
                                f"got {type(record[name]).__name__}")
    values = {}
    for name in self._aggregates:
      v = (aggregates or {}).get(name)
      if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))):
        raise common.UsageError(f"aggregate {name!r} must be an integer, got {v!r}")
      values[name] = 0 if v is None else int(v)
    return record, values, watermark

  # ------------------------------------------------------------------ the stages
  def _parse(self, items):
    """raw + parse: (raw fps, typed batch (bad cells null), reasons per record)."""
    cells, reasons = [], [[] for _ in items]
    for i, (record, _, _) in enumerate(items):
      cells.append({n: _cell(record[n]) if n in record else fingerprint.MISSING
                    for n in self._names})
      reasons[i] += [f"column {n!r} is absent" for n in self._names
                     if cells[i][n] is fingerprint.MISSING]
    # The raw stage: each cell's source text (null when empty), before typing, as TypeRows.
    fp_raw = [fingerprint.fingerprint_record(row, self._names) for row in cells]
    typed = []
    for name, typ in self._columns:
      texts = [row[name] if isinstance(row[name], bytes) else None for row in cells]
      for i, text in enumerate(texts):
        try:
          text is None or text.decode("utf-8")
        except UnicodeDecodeError:
          reasons[i].append(f"column {name!r} is not UTF-8")
          texts[i] = None
      arr, bad = schema.type_column(pa.array(texts, pa.binary()), typ)
      for i in bad:  # TypeRows' reasons (without the cell text when the log holds PII)
        reasons[i].append(f"column {name!r} is not {typ}" if self._pii else
                          f"column {name!r}: {texts[i].decode('utf-8')!r} is not {typ}")
      typed.append(arr)
    for name in self._key_columns:
      for i, row in enumerate(cells):
        if row[name] is None:
          reasons[i].append(f"key column {name!r} is missing")
    return fp_raw, pa.record_batch(typed, names=self._names), reasons

  def _keys(self, typed, ok, fp_parse, fp_raw):
    """KeyRows' keys (key_batch); a record without them is keyed by the hex of its parse
    fingerprint -- or, when it failed typing, of its raw one -- + ':<ordinal>'."""
    clear = [None] * typed.num_rows
    if self._key_columns:
      keyed = typed.select(self._key_columns)
      texts = key_batch(keyed, self._key_columns, self._key_columns, 1).column(KEY)
      clear = [t if all(keyed.column(c)[i].is_valid for c in self._key_columns) else None
               for i, t in enumerate(texts.to_pylist())]
    keys = []
    for i, text in enumerate(clear):
      if text is None:
        h = f"{fp_parse[i] if ok[i] else fp_raw[i]:016x}"
        ordinal = self._ordinals.get(h, 0)  # WriteShards' ':<ordinal>' among exact duplicates
        self._ordinals[h] = ordinal + 1
        text = f"{h}:{ordinal}"
      keys.append(text)
    return keys

  def _window(self, typed, ok, items):
    """({row: (start, end)}, {row: drop reason}) by assign_windows, once per distinct
    watermark among the batch's records."""
    groups = {}
    for i in np.flatnonzero(ok):
      groups.setdefault(items[i][2], []).append(int(i))
    kept, dropped = {}, {}
    for mark, rows in groups.items():
      batch = pa.record_batch([typed.column(self._event).take(pa.array(rows)), pa.array(rows)],
                              names=[self._event, _ROW])
      k, d = window_records.assign_windows(batch, self._event, self._profile, mark)
      kept.update(zip(k.column(_ROW).to_pylist(), zip(k.column(_W0).to_pylist(),
                                                      k.column(_W1).to_pylist())))
      dropped.update(zip(d.column(_ROW).to_pylist(),
                         d.column(window_records.DROP_REASON).to_pylist()))
    return kept, dropped

  def _transform(self, decoded, keys):
    """{feature: per-record values} through transform_features_layer, fed as the pipeline
    feeds TFT (to_tft_batch: one-value VarLen sparse features, strings as bytes, the
    transform_fn's int64 / float64 / string inputs); a rank-1 output gives scalars."""
    import tensorflow as tf
    batch = pa.RecordBatch.from_arrays(
        [c.combine_chunks() for c in decoded.columns] + [pa.array(keys, pa.large_string())],
        names=decoded.schema.names + [KEY])
    tft_batch = to_tft_batch(batch, self._value_columns)
    out = {f: [] for f in self._features}
    for lo in range(0, batch.num_rows, self._transform_batch_size):
      chunk, inputs = tft_batch.slice(lo, self._transform_batch_size), {}
      for name in self._value_columns:
        arr = chunk.column(name)
        rows = np.flatnonzero(arr.is_valid().to_numpy(zero_copy_only=False))
        flat = arr.flatten()
        if pa.types.is_integer(flat.type) or pa.types.is_floating(flat.type):
          dtype = tf.int64 if pa.types.is_integer(flat.type) else tf.float64
          values = flat.to_numpy(zero_copy_only=False).astype(dtype.as_numpy_dtype)
        else:
          dtype, values = tf.string, np.array(flat.to_pylist(), dtype=object)
        inputs[name] = tf.SparseTensor(np.stack([rows, np.zeros_like(rows)], axis=1),
                                       tf.constant(values, dtype=dtype), [len(arr), 1])
      # layer.call, not layer(...): Keras' __call__ autocasts float64 inputs to float32, which
      # a transform_fn analysed over float64 columns (as pipelines.features feeds them) refuses.
      result = self._layer.call(inputs)
      for f in self._features:
        t = result[f]
        t = tf.RaggedTensor.from_sparse(t) if isinstance(t, tf.SparseTensor) else t
        out[f].extend(t.to_list() if isinstance(t, tf.RaggedTensor) else t.numpy().tolist())
    return out

  def _rows(self, items):
    """The log rows (dicts) of a batch of accepted records."""
    fp = fingerprint.fingerprint_record
    fp_raw, typed, reasons = self._parse(items)
    ok = [not r for r in reasons]
    fp_parse = [fp(row, self._names) if good else None
                for row, good in zip(typed.to_pylist(), ok)]
    # The input's content digest (the ingest manifest's): every record that parsed.
    self._content = fingerprint.add_digests(self._content, fingerprint.combine_digest(
        [v for v in fp_parse if v is not None]))
    keys = self._keys(typed, ok, fp_parse, fp_raw)
    events = typed.column(self._event).cast(pa.int64()).to_pylist()
    kept, late = self._window(typed, ok, items)
    rows = []
    for i in range(len(items)):
      if not ok[i] or i in late:
        rows.append(dict(key=keys[i], event_time=events[i], fp_raw=fp_raw[i],
                         fp_parse=fp_parse[i], dropped_stage="window" if ok[i] else "parse",
                         drop_reason=late[i] if ok[i] else "; ".join(reasons[i])))
    live = sorted(kept)
    if live:  # ShardRecords' sampling rule, over the keys of the windowed records
      live = shard_records.sample_batch(pa.record_batch(
          [pa.array([keys[i] for i in live], pa.large_string()), pa.array(live)],
          names=[KEY, _ROW]), self._profile).column(_ROW).to_pylist()
    self.stats["sampled_out"] += len(kept) - len(live)
    if not live:
      return rows
    aggs = [items[i][1] for i in live]
    values = pa.Table.from_batches([typed]).take(pa.array(live))
    for name in self._aggregates:
      values = values.append_column(name, pa.array([a[name] for a in aggs], pa.int64()))
    decoded = serialize_records.round_trip(values, self._profile)
    outputs = self._transform(decoded, [keys[i] for i in live])
    prof, memo = self._profile, {}
    for j, (i, dec) in enumerate(zip(live, decoded.to_pylist())):
      (start, end), key = kept[i], keys[i]
      shard = fp({KEY: key}, seed=prof.hash_seed) % prof.num_shards
      out = {f: outputs[f][j] for f in self._features}
      rows.append(dict(
          key=key, event_time=events[i], window_start=start, window_end=end, shard_id=shard,
          fp_raw=fp_raw[i], fp_parse=fp_parse[i], fp_window=fp({_W0: start, _W1: end, **aggs[j]}),
          fp_shard=fp({shard_records.SHARD_ID: shard, KEY: key}),
          fp_serialize=fp(dec, self._value_columns), fp_transform=fp(out),
          **{f"fp__{f}": _feature_fp(memo, f, v) for f, v in out.items()},
          **{f"value__{f}": v for f, v in out.items()}))
    return rows

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
      rows = self._rows(items)
      for row in rows if self._secret is not None else ():
        for col in self._pii:
          name = "key" if col == "key" else f"value__{col}"
          if row.get(name) is not None:
            row[name] = pii_hash(row[name], self._secret)
      table = pa.Table.from_pylist(rows, schema=self._schema)
      buckets = feature_log.bucket_of(table.column("key").combine_chunks(), self._num_buckets)
      for b in np.unique(buckets):
        part = table.filter(pa.array(buckets == b)).sort_by("key")
        path = (f"feature_log/bucket-{b:05d}-of-{self._num_buckets:05d}-part-"
                f"{self._next_part:06d}.parquet")
        sink = pa.BufferOutputStream()
        pq.write_table(part, sink, compression=self._compression)
        _write_atomically(os.path.join(self._log_dir, path), sink.getvalue().to_pybytes())
        entry = self._buckets.setdefault(int(b), {
            "rows": 0, "dropped": 0, "parts": [],
            "digests": {s: fingerprint.empty_digest() for s in _STAGES}})
        entry["rows"] += part.num_rows
        entry["dropped"] += part.num_rows - part.column("dropped_stage").null_count
        entry["parts"].append(path)
        for s in _STAGES:
          entry["digests"][s] = fingerprint.add_digests(entry["digests"][s], (
              fingerprint.combine_digest(part.column(f"fp_{s}").drop_null().to_numpy())))
      self._next_part += 1
      self.stats["flushes"] += 1
      self.stats["logged"] += table.num_rows
      self.stats["dropped"] += table.num_rows - table.column("dropped_stage").null_count
      self._save_metadata()

  def _save_metadata(self):
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
    """Creates LOG_DIR, or resumes the log it holds. Part and temp files its metadata does not
    list (the batch open at a crash) are removed, so parts and metadata agree."""
    os.makedirs(os.path.join(self._log_dir, "feature_log"), exist_ok=True)
    path = os.path.join(self._log_dir, RUN_METADATA)
    if os.path.exists(path):
      with open(path, encoding="utf-8") as f:
        meta = json.load(f)
      same = {k: meta.get(k) == self._static.get(k)
              for k in ("format", "profile", "schema", "runner", "stages", "pii")}
      same.update(analyze=meta["analyze"]["fingerprint"] == self._static["analyze"][
          "fingerprint"], num_buckets=meta["log"]["num_buckets"] == self._num_buckets,
                  key_columns=meta["input"]["key_columns"] == self._key_columns)
      if not all(same.values()):
        raise common.UsageError(f"{self._log_dir} holds another log ("
                                f"{', '.join(k for k, v in same.items() if not v)} differ); "
                                "use a new log directory")
      self._next_part = meta["log"]["parts"]
      self._content = _digest(meta["input"]["content_digest"])
      for b in meta["log"]["buckets"]:
        self._buckets[b["bucket"]] = {
            "rows": b["rows"], "dropped": b["dropped"], "parts": list(b["parts"]),
            "digests": {s: _digest(d) for s, d in b["digests"].items()}}
    listed = {p for e in self._buckets.values() for p in e["parts"]}
    for name in os.listdir(os.path.join(self._log_dir, "feature_log")):
      if f"feature_log/{name}" not in listed and (_PART.match(name) or name.endswith(".tmp")):
        os.remove(os.path.join(self._log_dir, "feature_log", name))
    if not os.path.exists(path):  # a log directory always holds its run metadata
      self._save_metadata()
    for rel in sorted(listed) if not self._key_columns else ():  # continue the ordinals
      t = pq.read_table(os.path.join(self._log_dir, rel), columns=["fp_raw", "fp_parse"])
      for raw, parse in zip(t.column("fp_raw").to_pylist(), t.column("fp_parse").to_pylist()):
        h = f"{raw if parse is None else parse:016x}"
        self._ordinals[h] = self._ordinals.get(h, 0) + 1
