"""LogRows: the production logger's stage rules: accepted records in, feature-log rows out.

replay.logger.ProductionLogger owns the threads, part files and run metadata; this class owns
what a record must be to be accepted (accept, accept_table: its columns, value types and
aggregates, checked on the caller's thread; replay/log_accept.py) and what turns one batch of
accepted records (records and their aggregates, served values and watermark) into log rows
(rows: an Arrow table). The raw / parse / key / window / sampling / shard / serialize /
transform / serve stages each apply the rule objects and functions of transforms/spec (and the
TFT feed of transforms/graph) that pipelines.features applies, to Arrow columns: the cells'
values are typed by spec/typing.py (values.canonical_text and schema.type_column, the rule of
TypeRows), the fingerprints are the vectorised coding (fingerprint_batch), as the job's. Kept
apart so the stage rules read as one unit and the state they carry across batches is explicit:
the content-key ordinals, the input's content digest, the sampled-out count and the drop counts
per reason (the logger restores all but the sampled-out count on resume). Not thread-safe: the
logger's one worker thread calls rows(). docs/logger.md.
"""
import operator

import numpy as np
import pyarrow as pa

from replay.log_accept import (NO_WATERMARK, AcceptRecords, Columns, RecordError,
                               watermark_seconds)
from transforms.graph.feed import transform_values
from transforms.spec import event_time, fingerprint
from transforms.spec import feature_log as log
from transforms.spec import typing as cells
from transforms.spec.errors import UsageError
from transforms.spec.key import content_keys, hex64, key_batch
from transforms.spec.pii import pii_hash
from transforms.spec.serialize import round_trip
from transforms.spec.shard import sample_mask, shard_ids
from transforms.spec.stages import (KEY, PARSE, RAW, SERIALIZE, SERVE, SHARD, SHARD_ID,
                                    TRANSFORM,
                                    WINDOW, WINDOW_END, WINDOW_START, DROP_REASON, value_columns)
from transforms.spec.window import assign_windows, output_type

# Columns, RecordError and watermark_seconds are replay.log_accept's, named here for callers.
__all__ = ["LogRows", "Columns", "RecordError", "pii_hash", "watermark_seconds"]

_ROW = "__row__"
_WINDOW_CODES = {WINDOW.reason(code): code for code, _ in WINDOW.reasons}


def _as_text(canonical):
  """Canonical text as pa.string: a column holding bytes that are not UTF-8 (canonical_cells
  then gives pa.binary) shows those bytes backslash-escaped (rare: one pass in Python)."""
  if pa.types.is_string(canonical.type):
    return canonical
  return pa.array([None if v is None else v.decode("utf-8", "backslashreplace")
                   for v in canonical.to_pylist()], pa.string())


class LogRows(AcceptRecords):
  """The stage rules of one logger (see the module docstring).

  columns: [(name, INT|FLOAT|BYTES)]; key_columns ([] = content key); event: the feature module's
  event-time declaration (column, format, zone) (spec/event_time.py); aggregates: the windowed
  aggregates (spec/window.py: name, fn, ...); profile: a transforms.spec.profile Profile; transform:
  the transform_fn as transforms.graph.feed.transform_function gives it, finalized for the value
  columns (value_columns(columns, aggregates)); feature_spec: its transformed_feature_spec();
  transform_batch_size: records per TFT call; pii_columns, secret: log columns written as
  pii_hash(value, secret) (parse reasons then leave out the cell text); empty_is_null: "" and b""
  read as null, as the CSV reader reads an empty cell; inputs: log each record column's canonical
  text as input__C (a PII record column's hashed). `schema` is the log's Arrow schema.

  State across batches: `ordinals` ({content-key hex: next ordinal}), `content` (the digest of
  every parse fingerprint so far), `sampled_out` (records the sampling rule dropped) and
  `dropped` ({stage: {reason code: records}}; a record counts once, under its first reason).
  """

  def __init__(self, columns, key_columns, event, aggregates, profile, transform, feature_spec,
               transform_batch_size, pii_columns=(), secret=None, empty_is_null=True,
               served=(), inputs=False):
    self._columns = [(n, t) for n, t in columns]
    self._names = [n for n, _ in self._columns]
    self._name_set = frozenset(self._names)
    self._key_columns = list(key_columns)
    self._event, self._event_format, self._event_zone = event
    self._event_sources = {}
    self._aggregates = [a["name"] for a in aggregates]
    self._aggregate_types = {a["name"]: output_type(a) for a in aggregates}
    self._aggregate_set = frozenset(self._aggregates)
    self._value_columns = value_columns(self._names, self._aggregates)
    self._profile, self._transform, self._empty_is_null = profile, transform, empty_is_null
    self._pii, self._secret = sorted(pii_columns), secret
    unknown = [c for c in self._pii if c != log.KEY and c not in feature_spec and
               c not in self._name_set]
    if unknown:
      raise UsageError(f"pii_columns {', '.join(unknown)}: not a log column (the key, a "
                       "transformed feature or a record column)")
    self._served, self._inputs = sorted(served), inputs
    several = [f for f in self._served if f not in feature_spec or feature_spec[f].shape]
    if several:
      raise UsageError(f"served {', '.join(several)}: not a one-value transformed feature of "
                       f"the transform_fn ({', '.join(sorted(feature_spec))})")
    self._features, self._feature_types = sorted(feature_spec), {}
    clear = list(log.HEAD) + [(log.aggregate_column(a), self._aggregate_types[a])
                              for a in sorted(self._aggregates)]
    clear += [(log.input_column(c), pa.string()) for c in self._names] if inputs else []
    fields = list(clear)
    for f in self._features:  # a one-value feature is logged as a scalar, as the job's log is
      typ = {"float32": pa.float32(), "int64": pa.int64()}.get(feature_spec[f].dtype.name,
                                                               pa.large_binary())
      typ = typ if list(feature_spec[f].shape) == [] else pa.large_list(typ)
      self._feature_types[f] = typ
      own = [(log.value_column(f), typ)] + ([(log.served_column(f), typ)]
                                            if f in self._served else [])
      clear += [(log.feature_fp_column(f), pa.uint64())] + own
      fields += [clear[-1 - len(own)]] + [(c, pa.string() if f in self._pii else t)
                                          for c, t in own]
    self._clear, self.schema = pa.schema(clear), pa.schema(fields)
    self._hashed = [n for c in self._pii for n in ([log.KEY] if c == log.KEY else (
        [log.value_column(c)] * (c in feature_spec) +
        [log.served_column(c)] * (c in self._served) +
        [log.input_column(c)] * (inputs and c in self._name_set)))]
    self._transform_batch_size = transform_batch_size
    self.ordinals, self.content, self.sampled_out = {}, fingerprint.empty_digest(), 0
    self.dropped = {}

  # ------------------------------------------------------------------ on the worker thread
  def continue_ordinals(self, fp_raw, fp_parse):
    """Counts already-logged records (their fp_raw / fp_parse) into the content-key ordinals,
    as a resumed log does (meaningful without key columns only)."""
    for raw, parse in zip(fp_raw, fp_parse):
      h = f"{raw if parse is None else parse:016x}"
      self.ordinals[h] = self.ordinals.get(h, 0) + 1

  def rows(self, items):
    """The log rows (an Arrow table of the log schema, arrival order; sampled-out records left
    out) of a batch of accepted records: a list of (record, aggregates, served, watermark), or
    one Columns."""
    if isinstance(items, Columns):
      records, n = items.table, items.table.num_rows
      aggregates, served, marks = items.aggregates, items.served, items.watermarks
    else:
      records, n = [it[0] for it in items], len(items)
      marks = np.fromiter((NO_WATERMARK if it[3] is None else it[3] for it in items), np.int64, n)
      aggregates = tuple(pa.array([it[1][j] for it in items], self._aggregate_types[name])
                         for j, name in enumerate(self._aggregates))
      served = tuple(log.cast_served(pa.array([it[2][j] for it in items]),
                                     self._feature_types[f]) for j, f in enumerate(self._served))
    fp_raw, typed, bad, canonical = self._parse(records)
    ok = np.ones(n, dtype=bool)
    ok[list(bad)] = False
    fp_parse = fingerprint.fingerprint_batch(typed, PARSE.fingerprint_fields(columns=self._names))
    # The input's content digest (the ingest manifest's): every record that parsed.
    self.content = fingerprint.add_digests(self.content,
                                           fingerprint.combine_digest(fp_parse[ok]))
    keys = self._keys(typed, ok, fp_parse, fp_raw)
    seconds, has, _ = event_time.to_seconds(typed.column(self._event), self._event_format,
                                            self._event_zone)
    start, end, windowed, late = self._window(typed, ok, marks)
    stage, reason = [None] * n, [None] * n
    for i, why in bad.items():
      stage[i], reason[i] = PARSE.name, "; ".join(text for _, text in why)
      self._count(PARSE.name, why[0][0])
    for i, text in late.items():
      stage[i], reason[i] = WINDOW.name, text
      self._count(WINDOW.name, _WINDOW_CODES.get(text, text))
    live = windowed
    if len(live):  # the shard stage's sampling rule, over the keys of the windowed records
      keep = sample_mask(keys.take(pa.array(live)), self._profile)
      live = live if keep is None else live[keep]
    self.sampled_out += len(windowed) - len(live)
    out = np.sort(np.concatenate([np.fromiter(bad, np.int64, len(bad)),
                                  np.fromiter(late, np.int64, len(late)), live]))
    cols = {log.KEY: keys.take(pa.array(out)).cast(pa.string()),
            log.EVENT_TIME: pa.array(seconds[out], mask=~has[out]),
            log.DROPPED_STAGE: pa.array([stage[i] for i in out], pa.string()),
            log.DROP_REASON: pa.array([reason[i] for i in out], pa.string()),
            log.fp_column(RAW.name): pa.array(fp_raw[out]),
            log.fp_column(PARSE.name): pa.array(fp_parse[out], mask=~ok[out])}
    cols.update(self._live_columns(aggregates, served, typed, keys, live, start, end, out))
    for name, column in zip(self._names, canonical.columns) if self._inputs else ():
      cols[log.input_column(name)] = _as_text(column).take(pa.array(out))
    for name in self._hashed:
      cols[name] = pa.array([None if v is None else pii_hash(v, self._secret)
                             for v in cols[name].to_pylist()], pa.string())
    return pa.Table.from_arrays([cols[f.name] for f in self.schema], schema=self.schema)

  def _count(self, stage, code):
    by_code = self.dropped.setdefault(stage, {})
    by_code[code] = by_code.get(code, 0) + 1

  def _live_columns(self, aggregates, served, typed, keys, live, start, end, out):
    """The window, shard, serialize and transform columns of the `out` rows (null but for the
    `live` ones, which reach TFT); aggregates, served: the batch's arrays (rows())."""
    position = np.full(typed.num_rows, -1, dtype=np.int64)
    position[live] = np.arange(len(live))
    source = position[out]
    absent = source < 0
    take = pa.array(np.where(absent, 0, source), mask=absent)
    fields = {f.name: f.type for f in self._clear}
    if not len(live):  # all but the head columns rows() fills itself
      return {name: pa.nulls(len(out), typ) for name, typ in fields.items() if name not in (
          log.KEY, log.EVENT_TIME, log.DROPPED_STAGE, log.DROP_REASON,
          log.fp_column(RAW.name), log.fp_column(PARSE.name))}
    rows = pa.array(live)
    aggregates = {name: aggregates[j].take(rows) for j, name in enumerate(self._aggregates)}
    values = pa.Table.from_batches([typed]).take(rows)
    for name, column in aggregates.items():
      values = values.append_column(name, column)
    decoded = round_trip(values, self._profile)
    decoded = pa.RecordBatch.from_arrays([c.combine_chunks() for c in decoded.columns],
                                         names=decoded.schema.names)
    bounds = pa.table({WINDOW_START: start[live], WINDOW_END: end[live], **aggregates})
    live_keys = keys.take(rows)
    shards = shard_ids(live_keys, self._profile)
    outputs = transform_values(self._transform, decoded, self._value_columns, self._features,
                               self._transform_batch_size, self._feature_types)
    features = pa.table({f: outputs[f] for f in self._features})
    fp_transform, fp_features = fingerprint.fingerprint_fields(
        features, TRANSFORM.fingerprint_fields(features=self._features))
    live_cols = {
        log.WINDOW_START: pa.array(start[live]), log.WINDOW_END: pa.array(end[live]),
        log.SHARD_ID: pa.array(shards),
        log.fp_column(WINDOW.name): fingerprint.fingerprint_batch(
            bounds, WINDOW.fingerprint_fields(aggregates=self._aggregates)),
        log.fp_column(SHARD.name): fingerprint.fingerprint_batch(
            pa.record_batch([pa.array(shards), live_keys], names=[SHARD_ID, KEY]),
            SHARD.fingerprint_fields()),
        log.fp_column(SERIALIZE.name): fingerprint.fingerprint_batch(
            decoded, SERIALIZE.fingerprint_fields(columns=self._names,
                                                  aggregates=self._aggregates)),
        log.fp_column(TRANSFORM.name): fp_transform,
        log.fp_column(SERVE.name): fp_transform,
        **{log.aggregate_column(name): column for name, column in aggregates.items()}}
    if self._served:  # what the model got: the served value where serving logged one
      served = {f: served[j].take(rows) for j, f in enumerate(self._served)}
      live_cols[log.fp_column(SERVE.name)] = fingerprint.fingerprint_fields(
          log.model_inputs(features, served), SERVE.fingerprint_fields(
              features=self._features))[0]
      live_cols.update((log.served_column(f), a) for f, a in served.items())
    for f in self._features:
      live_cols[log.feature_fp_column(f)] = fp_features[f]
      live_cols[log.value_column(f)] = features.column(f).combine_chunks()
    return {name: (pa.array(col) if isinstance(col, np.ndarray) else col).take(take)
            for name, col in live_cols.items()}

  # ------------------------------------------------------------------ the stages
  def _parse(self, records):
    """raw + parse of a list of records or a table (accept_table's): (raw fingerprints, typed
    batch (bad cells null), {row: [(reason code, reason)]} of the records that do not parse,
    the cells' canonical text)."""
    bad = {}
    if isinstance(records, pa.Table):  # Arrow columns: each is one group of cells
      n = records.num_rows
      columns = [records.column(c).combine_chunks() if c in records.column_names else
                 pa.nulls(n, pa.string()) for c in self._names]
      cells_of = lambda column: cells.column_cells(column, self._empty_is_null)  # noqa: E731
    else:
      # Records to columns: one C-level call per record (a dict.get per cell is a tenth of
      # it). A column a record lacks is null, as the source readers of ingest read a missing
      # JSON key and csv.DictReader a short row.
      n = len(records)
      row = operator.itemgetter(*self._names) if len(self._names) > 1 else \
          (lambda r, name=self._names[0]: (r[name],))
      whole = dict.fromkeys(self._names)
      columns = list(zip(*[row(r) if len(r) == len(whole) else row({**whole, **r})
                           for r in records])) or [()] * len(self._names)
      cells_of = lambda column: cells.arrow_cells(column, self._empty_is_null)  # noqa: E731
    canonical, typed = [], []
    for (name, typ), column in zip(self._columns, columns):
      groups = cells_of(column)
      canonical.append(cells.canonical_cells(groups, n))
      arr, wrong, not_utf8 = cells.type_cells(groups, n, typ)
      for i in not_utf8:
        bad.setdefault(int(i), []).append(("not_utf8", PARSE.reason("not_utf8", name=name)))
      for i in wrong:  # TypeRows' reasons (without the cell text when the log holds PII)
        bad.setdefault(int(i), []).append(
            ("not_type_pii", PARSE.reason("not_type_pii", name=name, type=typ)) if self._pii
            else ("not_type", PARSE.reason("not_type", name=name, type=typ,
                                           text=cells.cell_text(groups, int(i)))))
      typed.append(arr)
    for name in self._key_columns:  # TypeRows' required columns
      column = canonical[self._names.index(name)]
      for i in np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False)):
        bad.setdefault(int(i), []).append(("key_missing",
                                           PARSE.reason("key_missing", name=name)))
    # The raw stage: each cell's canonical text (spec/values.py), before typing, as TypeRows.
    canonical = pa.RecordBatch.from_arrays(canonical, names=self._names)
    fp_raw = fingerprint.fingerprint_batch(canonical, RAW.fingerprint_fields(columns=self._names))
    return fp_raw, pa.RecordBatch.from_arrays(typed, names=self._names), bad, canonical

  def _keys(self, typed, ok, fp_parse, fp_raw):
    """key_batch's keys (large_string); a record without them gets the content key
    (spec/key.py): the hex of its parse fingerprint -- or, when it failed typing, of its raw
    one -- + ':<ordinal>', the ordinal counted in arrival order."""
    n = typed.num_rows
    clear = [None] * n
    if self._key_columns:
      keyed = typed.select(self._key_columns)
      texts = key_batch(keyed, self._key_columns, self._key_columns, 1).column(KEY)
      clear = texts.to_pylist()  # null where a key column is null (Arrow's null propagation)
      content = [i for i, text in enumerate(clear) if text is None]
    else:
      content = range(n)
    if content:
      rows = np.asarray(content, dtype=np.int64)
      hexes = hex64(np.where(ok, fp_parse, fp_raw)[rows])
      ordinals = []
      for h in hexes.to_pylist():
        ordinals.append(self.ordinals.get(h, 0))
        self.ordinals[h] = ordinals[-1] + 1
      keyed = content_keys(hexes, ordinals)
      if not self._key_columns:
        return keyed
      for i, key in zip(content, keyed.to_pylist()):
        clear[i] = key
    return pa.array(clear, pa.large_string())

  def _window(self, typed, ok, watermarks):
    """(start[n], end[n], rows windowed (sorted), {row: drop reason}) by assign_windows in the
    declared event-time format, once per distinct watermark among the parsed records
    (watermarks: int64 per record, NO_WATERMARK for none)."""
    n = typed.num_rows
    start, end = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    parsed = np.flatnonzero(ok)
    parsed = parsed[np.argsort(watermarks[parsed], kind="stable")]  # grouped by watermark
    marks = watermarks[parsed]
    cuts = np.flatnonzero(marks[1:] != marks[:-1]) + 1
    kept, dropped = [], {}
    for rows in np.split(parsed, cuts) if len(parsed) else ():
      mark = None if watermarks[rows[0]] == NO_WATERMARK else int(watermarks[rows[0]])
      batch = pa.record_batch([typed.column(self._event).take(pa.array(rows)), pa.array(rows)],
                              names=[self._event, _ROW])
      k, d = assign_windows(batch, self._event, self._profile, mark, self._event_format,
                            self._event_zone)
      at = k.column(_ROW).to_numpy()
      start[at] = k.column(WINDOW_START).to_numpy()
      end[at] = k.column(WINDOW_END).to_numpy()
      kept.append(at)
      dropped.update(zip(d.column(_ROW).to_pylist(), d.column(DROP_REASON).to_pylist()))
    windowed = np.sort(np.concatenate(kept)) if kept else np.zeros(0, dtype=np.int64)
    return start, end, windowed, dropped
