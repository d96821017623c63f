"""LogRows: the production logger's per-batch stage rules: accepted records in, log rows out.

replay.logger.ProductionLogger owns the threads, part files and run metadata; this class owns
what turns one batch of accepted records (record, aggregates, watermark) into log rows: the
raw / parse / key / window / sampling / shard / serialize / transform stages, each by the rule
objects and functions of transforms/spec (and the TFT feed of transforms/graph) that
pipelines.features uses, with every fingerprint computed by the per-record coding
(transforms.spec.fingerprint.fingerprint_record). Kept apart so the stage rules
read as one unit and the state they carry across batches is explicit: the content-key ordinals,
the input's content digest and the sampled-out count (the logger restores the first two on
resume). Not thread-safe: the caller serialises calls to rows() (ProductionLogger holds its
flush lock). docs/logger.md.
"""
import numpy as np
import pyarrow as pa

from transforms.graph.feed import transform_values
from transforms.spec import feature_log as log, fingerprint, schema
from transforms.spec.key import content_keys, hex64, key_batch
from transforms.spec.serialize import round_trip
from transforms.spec.shard import sample_mask, shard_ids
from transforms.spec.stages import (DROP_REASON, KEY, PARSE, RAW, SERIALIZE, SHARD, SHARD_ID,
                                    TRANSFORM, WINDOW, WINDOW_END, WINDOW_START, value_columns)
from transforms.spec.window import assign_windows

__all__ = ["LogRows"]

_ROW = "__row__"


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
  aggregates: the windowed aggregate names; profile: a transforms.spec.profile Profile; pii: whether
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
    self._value_columns = value_columns(self._names, self._aggregates)
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
    parse_fields = PARSE.fingerprint_fields(columns=self._names)
    fp_parse = [fp(row, parse_fields) if good else None
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
        rows.append({log.KEY: keys[i], log.EVENT_TIME: events[i],
                     log.fp_column(RAW.name): fp_raw[i], log.fp_column(PARSE.name): fp_parse[i],
                     log.DROPPED_STAGE: WINDOW.name if ok[i] else PARSE.name,
                     log.DROP_REASON: late[i] if ok[i] else "; ".join(reasons[i])})
    live = sorted(kept)
    if live:  # the shard stage's sampling rule, over the keys of the windowed records
      keep = sample_mask(pa.array([keys[i] for i in live], pa.large_string()), self._profile)
      live = live if keep is None else [i for i, k in zip(live, keep) if k]
    self.sampled_out += len(kept) - len(live)
    if not live:
      return rows
    aggs = [items[i][1] for i in live]
    live_keys = [keys[i] for i in live]
    values = pa.Table.from_batches([typed]).take(pa.array(live))
    for name in self._aggregates:
      values = values.append_column(name, pa.array([a[name] for a in aggs], pa.int64()))
    decoded = round_trip(values, self._profile)
    outputs = transform_values(
        self._layer, pa.RecordBatch.from_arrays([c.combine_chunks() for c in decoded.columns],
                                                names=decoded.schema.names),
        self._value_columns, self._features, self._transform_batch_size)
    shards = shard_ids(pa.array(live_keys, pa.large_string()), self._profile).tolist()
    window_fields = WINDOW.fingerprint_fields(aggregates=self._aggregates)
    shard_fields = SHARD.fingerprint_fields()
    serialize_fields = SERIALIZE.fingerprint_fields(columns=self._names,
                                                    aggregates=self._aggregates)
    transform_fields = TRANSFORM.fingerprint_fields(features=self._features)
    memo = {}
    for j, (i, dec) in enumerate(zip(live, decoded.to_pylist())):
      (start, end), key, shard = kept[i], keys[i], shards[j]
      out = {f: outputs[f][j] for f in self._features}
      row = {log.KEY: key, log.EVENT_TIME: events[i], log.WINDOW_START: start,
             log.WINDOW_END: end, log.SHARD_ID: shard}
      row.update({
          log.fp_column(RAW.name): fp_raw[i], log.fp_column(PARSE.name): fp_parse[i],
          log.fp_column(WINDOW.name): fp({WINDOW_START: start, WINDOW_END: end, **aggs[j]},
                                         window_fields),
          log.fp_column(SHARD.name): fp({SHARD_ID: shard, KEY: key}, shard_fields),
          log.fp_column(SERIALIZE.name): fp(dec, serialize_fields),
          log.fp_column(TRANSFORM.name): fp(out, transform_fields)})
      for f, v in out.items():
        row[log.feature_fp_column(f)] = _feature_fp(memo, f, v)
        row[log.value_column(f)] = v
      rows.append(row)
    return rows

  # ------------------------------------------------------------------ the stages
  def _parse(self, items):
    """raw + parse: (raw fps, typed batch (bad cells null), reasons per record)."""
    cells, reasons = [], [[] for _ in items]
    for i, (record, _, _) in enumerate(items):
      cells.append({n: _cell(record[n]) if n in record else fingerprint.MISSING
                    for n in self._names})
      reasons[i] += [PARSE.reason("absent", name=n) for n in self._names
                     if cells[i][n] is fingerprint.MISSING]
    # The raw stage: each cell's source text (null when empty), before typing, as TypeRows.
    raw_fields = RAW.fingerprint_fields(columns=self._names)
    fp_raw = [fingerprint.fingerprint_record(row, raw_fields) for row in cells]
    typed = []
    for name, typ in self._columns:
      texts = [row[name] if isinstance(row[name], bytes) else None for row in cells]
      for i, text in enumerate(texts):
        try:
          text is None or text.decode("utf-8")
        except UnicodeDecodeError:
          reasons[i].append(PARSE.reason("not_utf8", name=name))
          texts[i] = None
      arr, bad = schema.type_column(pa.array(texts, pa.binary()), typ)
      for i in bad:  # TypeRows' reasons (without the cell text when the log holds PII)
        reasons[i].append(PARSE.reason("not_type_pii", name=name, type=typ) if self._pii else
                          PARSE.reason("not_type", name=name, text=texts[i].decode("utf-8"),
                                       type=typ))
      typed.append(arr)
    for name in self._key_columns:
      for i, row in enumerate(cells):
        if row[name] is None:
          reasons[i].append(PARSE.reason("key_missing", name=name))
    return fp_raw, pa.record_batch(typed, names=self._names), reasons

  def _keys(self, typed, ok, fp_parse, fp_raw):
    """key_batch's keys; a record without them gets the content key (spec/key.py): the hex of
    its parse fingerprint -- or, when it failed typing, of its raw one -- + ':<ordinal>', the
    ordinal counted in arrival order."""
    clear = [None] * typed.num_rows
    if self._key_columns:
      keyed = typed.select(self._key_columns)
      texts = key_batch(keyed, self._key_columns, self._key_columns, 1).column(KEY)
      clear = texts.to_pylist()  # null where a key column is null (Arrow's null propagation)
    content = [i for i, text in enumerate(clear) if text is None]
    if content:
      hexes = hex64([fp_parse[i] if ok[i] else fp_raw[i] for i in content]).to_pylist()
      ordinals = []
      for h in hexes:
        ordinals.append(self.ordinals.get(h, 0))
        self.ordinals[h] = ordinals[-1] + 1
      for i, key in zip(content, content_keys(hexes, ordinals).to_pylist()):
        clear[i] = key
    return clear

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
      k, d = assign_windows(batch, self._event, self._profile, mark)
      kept.update(zip(k.column(_ROW).to_pylist(), zip(k.column(WINDOW_START).to_pylist(),
                                                      k.column(WINDOW_END).to_pylist())))
      dropped.update(zip(d.column(_ROW).to_pylist(), d.column(DROP_REASON).to_pylist()))
    return kept, dropped
