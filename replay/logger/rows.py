"""LogRows: the production logger's stage rules: accepted records in, feature-log rows out.

replay.logger.ProductionLogger owns the threads, part files and run metadata; this class owns
what a record must be to be accepted (accept, accept_table: its columns, value types and
aggregates, checked on the caller's thread; replay/logger/accept.py) and what turns one batch of
accepted records (records and their aggregates, served values and watermark) into log rows
(rows: an Arrow table). The stages apply the rule objects and functions of transforms/spec (and
the TFT feed of transforms/graph) that pipelines.features applies, to Arrow columns, in the
rooms of this package: raw, parse and window (record_stages.py), the key (keys.py), sampling
(spec/shard.sample_mask, here), and shard, serialize, transform and serve (live.py); the rows'
schema is log_schema.py's. The cells' values are typed by spec/typing.py (the rule of TypeRows),
the fingerprints are the vectorised coding (fingerprint_batch), as the job's. State across
batches: the content-key ordinals, the input's content digest, the sampled-out count and the
drop counts per reason (the logger restores all but the sampled-out count on resume). Not
thread-safe: the logger's one worker thread calls rows(). docs/logger.md.
"""
import numpy as np
import pyarrow as pa

from replay.logger import record_stages
from replay.logger.accept import (NO_WATERMARK, AcceptRecords, Columns, RecordError,
                                  watermark_seconds)
from replay.logger.keys import ContentKeys
from replay.logger.live import LiveStages
from replay.logger.log_schema import LogSchema
from transforms.spec import event_time, fingerprint
from transforms.spec import feature_log as log
from transforms.spec.pii import pii_hash
from transforms.spec.shard import sample_mask
from transforms.spec.stages import PARSE, RAW, WINDOW
from transforms.spec.window import output_type

# Columns, RecordError and watermark_seconds are replay.logger.accept's, named here for callers.
__all__ = ["LogRows", "Columns", "RecordError", "pii_hash", "watermark_seconds"]

_WINDOW_CODES = {WINDOW.reason(code): code for code, _ in WINDOW.reasons}


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

  State across batches: the content-key ordinals (keys.ContentKeys), `content` (the digest of
  every parse fingerprint so far), `sampled_out` (records the sampling rule dropped) and
  `dropped` ({stage: {reason code: records}}; a record counts once, under its first reason).
  """

  def __init__(self, columns, key_columns, event, aggregates, profile, transform, feature_spec,
               transform_batch_size, pii_columns=(), secret=None, empty_is_null=True,
               served=(), inputs=False, model=None):
    """model: the predict stage's ModelSpec (transforms/model/load.py), or None; loaded here,
    against the transformed features' types, and its identity kept as model_identity."""
    # What AcceptRecords reads (replay/logger/accept.py).
    self._columns = [(n, t) for n, t in columns]
    self._names = [n for n, _ in self._columns]
    self._name_set = frozenset(self._names)
    self._event, self._event_format, self._event_zone = event
    self._event_sources = {}
    self._aggregates = [a["name"] for a in aggregates]
    self._aggregate_types = {a["name"]: output_type(a) for a in aggregates}
    self._aggregate_set = frozenset(self._aggregates)
    self._served = sorted(served)
    # The stages.
    self._key_columns, self._event_declaration = list(key_columns), tuple(event)
    self._profile, self._empty_is_null, self._inputs = profile, empty_is_null, inputs
    self._pii, self._secret = sorted(pii_columns), secret
    self._log = LogSchema(self._names, self._aggregate_types, feature_spec, self._served,
                          self._pii, inputs, predict=model is not None)
    self.model_identity = None
    if model is not None:  # UsageError, one line, for a model that does not fit
      from transforms.model import load
      model = load.load(model, self._log.feature_types)
      self.model_identity = model.identity()
    self._feature_types, self.schema = self._log.feature_types, self._log.schema
    self._keys = ContentKeys(self._key_columns)
    self._live = LiveStages(self._names, self._aggregates, profile, transform, self._log,
                            transform_batch_size, self._served, model)
    self.content, self.sampled_out, self.dropped = fingerprint.empty_digest(), 0, {}

  # ------------------------------------------------------------------ on the worker thread
  def undo_last(self, before):
    """Takes back what the last rows() call counted (its batch was not written): the state
    `before` (checkpoint()'s, taken just before that call) and its content-key ordinals."""
    self.content, self.sampled_out, self.dropped = before
    self._keys.forget_last()

  def checkpoint(self):
    """The state rows() changes, for undo_last: (content, sampled_out, dropped)."""
    return self.content, self.sampled_out, {s: dict(c) for s, c in self.dropped.items()}

  def continue_ordinals(self, fp_raw, fp_parse):
    """Counts already-logged records (their fp_raw / fp_parse) into the content-key ordinals,
    as a resumed log does (meaningful without key columns only)."""
    self._keys.continue_ordinals(fp_raw, fp_parse)

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
                                     self._log.feature_types[f])
                     for j, f in enumerate(self._served))
    fp_raw, typed, bad, canonical = record_stages.parse(records, self._columns, self._key_columns,
                                                         self._empty_is_null, bool(self._pii))
    ok = np.ones(n, dtype=bool)
    ok[list(bad)] = False
    fp_parse = fingerprint.fingerprint_batch(typed, PARSE.fingerprint_fields(columns=self._names))
    # The input's content digest (the ingest manifest's): every record that parsed.
    self.content = fingerprint.add_digests(self.content,
                                           fingerprint.combine_digest(fp_parse[ok]))
    keys = self._keys.keys(typed, ok, fp_parse, fp_raw)
    seconds, has, _ = event_time.to_seconds(typed.column(self._event), self._event_format,
                                            self._event_zone)
    start, end, windowed, late = record_stages.windows(typed, ok, marks, self._event_declaration,
                                                       self._profile)
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
    cols.update(self._live.columns(aggregates, served, typed, keys, live, start, end, out))
    for name, column in zip(self._names, canonical.columns) if self._inputs else ():
      cols[log.input_column(name)] = record_stages.as_text(column).take(pa.array(out))
    for name in self._log.hashed:
      cols[name] = pa.array([None if v is None else pii_hash(v, self._secret)
                             for v in cols[name].to_pylist()], pa.string())
    return pa.Table.from_arrays([cols[f.name] for f in self.schema], schema=self.schema)

  def _count(self, stage, code):
    by_code = self.dropped.setdefault(stage, {})
    by_code[code] = by_code.get(code, 0) + 1
