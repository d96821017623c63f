"""LogRows: the production logger's per-batch stage rules: accepted records in, log rows out.

replay.logger.ProductionLogger owns the threads, part files and run metadata; this class owns
what turns one batch of accepted records (record, aggregates, watermark) into log rows: the
raw / parse / key / window / sampling / shard / serialize / transform stages, each by the rule
function of transforms/ that pipelines.features uses, with every fingerprint computed by the
per-record coding (transforms.fingerprint.fingerprint_record). Kept apart so the stage rules
read as one unit and the state they carry across batches is explicit: the content-key ordinals,
the input's content digest and the sampled-out count (the logger restores the first two on
resume). Not thread-safe: the caller serialises calls to rows() (ProductionLogger holds its
flush lock). docs/logger.md.
"""
import numpy as np
import pyarrow as pa

from transforms import fingerprint, schema, serialize_records, shard_records, window_records
from transforms.key_rows import KEY, key_batch
from transforms.transform_records import to_tft_batch

__all__ = ["LogRows"]

_ROW = "__row__"
_W0, _W1 = window_records.WINDOW_START, window_records.WINDOW_END


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


class LogRows:
  """The stage rules of one logger (see the module docstring).

  columns: [(name, INT|FLOAT|BYTES)]; key_columns ([] = content key); event_time_column;
  aggregates: the windowed aggregate names; profile: a transforms.profile Profile; pii: whether
  the log holds PII (parse reasons then leave out the cell text); layer: the transform_fn's
  tft transform_features_layer(); features: the transformed feature names, sorted;
  transform_batch_size: records per TFT call.

  State across batches: `ordinals` ({content-key hex: next ordinal}), `content` (the digest of
  every parse fingerprint so far) and `sampled_out` (records the sampling rule dropped).
  """

  def __init__(self, columns, key_columns, event_time_column, aggregates, profile, pii, layer,
               features, transform_batch_size):
    self._columns = [(n, t) for n, t in columns]
    self._names = [n for n, _ in self._columns]
    self._key_columns, self._event = list(key_columns), event_time_column
    self._aggregates = list(aggregates)
    self._value_columns = self._names + self._aggregates
    self._profile, self._pii = profile, bool(pii)
    self._layer, self._features = layer, list(features)
    self._transform_batch_size = transform_batch_size
    self.ordinals, self.content, self.sampled_out = {}, fingerprint.empty_digest(), 0

  def continue_ordinals(self, fp_raw, fp_parse):
    """Counts already-logged records (their fp_raw / fp_parse) into the content-key ordinals,
    as a resumed log does (meaningful without key columns only)."""
    for raw, parse in zip(fp_raw, fp_parse):
      h = f"{raw if parse is None else parse:016x}"
      self.ordinals[h] = self.ordinals.get(h, 0) + 1

  def rows(self, items):
    """The log rows (dicts) of a batch of accepted records (record, aggregates, watermark)."""
    fp = fingerprint.fingerprint_record
    fp_raw, typed, reasons = self._parse(items)
    ok = [not r for r in reasons]
    fp_parse = [fp(row, self._names) if good else None
                for row, good in zip(typed.to_pylist(), ok)]
    # The input's content digest (the ingest manifest's): every record that parsed.
    self.content = fingerprint.add_digests(self.content, fingerprint.combine_digest(
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
    self.sampled_out += len(kept) - len(live)
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
      clear = texts.to_pylist()  # null where a key column is null (Arrow's null propagation)
    keys = []
    for i, text in enumerate(clear):
      if text is None:
        h = f"{fp_parse[i] if ok[i] else fp_raw[i]:016x}"
        ordinal = self.ordinals.get(h, 0)  # WriteShards' ':<ordinal>' among exact duplicates
        self.ordinals[h] = ordinal + 1
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
