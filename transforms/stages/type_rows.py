"""TypeRows: read batches (CSV binary or typed source columns) -> typed batches (int64 / float64 /
string), rejecting misfits."""
import apache_beam as beam
import numpy as np
import pyarrow as pa

from transforms.codec import csv_records
from transforms.spec import event_time, fingerprint
from transforms.spec import schema
from transforms.spec import values
from transforms.spec.dataset import rejected_row
from transforms.spec.stages import PARSE, RAW, RAW_FP
from transforms.stages.read_csv import REJECTED

__all__ = ["TypeRows", "type_batch"]


def type_batch(batch, columns, paths, required=(), side=(), event=None):
  """Types `batch` per columns [(name, type)]. Returns (typed batch, rejected dicts).

  The typed batch keeps only rows whose every value fits its type and whose `required`
  columns are present, with the data columns in `columns` order and __raw_fp__ (the raw-stage
  fingerprint of the cells' canonical text, spec/values.py, over the record's columns: not the
  `side` ones, spec/dataset.py); provenance is dropped.
  event: (column, form, zone, parts) of the column the source wrote event times in (ingest
  --event_time; parts: the date and time-of-day columns it is composed of, or ()): typed as the
  canonical event time (INT Unix seconds) and fingerprinted at raw as the exact instant
  (spec/event_time.source_instants); a value that is no instant is rejected.
  """
  n = batch.num_rows
  typed, bad_by_column = [], []
  source = None  # the event time's source cells (composed from two columns, or its own)
  if event:
    column, form, _, parts = event
    source = event_time.composed_text(batch.column(parts[0]), batch.column(parts[1])) \
        if parts else batch.column(column)  # a date and a time of day: ISO-8601 in the zone
    not_instant = event_time.NOT_INSTANT.format(form=form, low=event_time.PLAUSIBLE_YEARS[0],
                                                high=event_time.PLAUSIBLE_YEARS[1])
  # Each cell's canonical text (spec/values.py), once: the raw fingerprint and typing read it.
  canonical = {name: values.canonical_text(batch.column(name)) for name, _ in columns
               if not event or name != event[0]}
  for name, typ in columns:
    if event and name == event[0]:
      seconds, canonical[name], bad = event_time.source_instants(
          source, "iso8601" if event[3] else event[1], event[2])
      typed.append(pa.array(seconds, pa.int64(), mask=canonical[name].is_null().to_numpy(
          zero_copy_only=False)))
      bad_by_column.append((name, not_instant, np.flatnonzero(bad)))
      continue
    arr, bad = schema.type_column(batch.column(name), typ, canonical[name])
    typed.append(arr)
    bad_by_column.append((name, typ, bad))
  for name in required:
    missing = np.flatnonzero(batch.column(name).is_null().to_numpy(zero_copy_only=False))
    bad_by_column.append((name, None, missing))
  bad_rows = np.zeros(n, dtype=bool)
  for _, _, bad in bad_by_column:
    bad_rows[bad] = True
  rejected = []
  if bad_rows.any():
    lines = batch.column(csv_records.LINE_COLUMN).to_numpy()
    files = batch.column(csv_records.FILE_COLUMN).to_numpy()
    raw = batch.column(csv_records.RAW_COLUMN)
    reasons = {}
    for name, typ, bad in bad_by_column:  # per-row work only for rejected rows
      col = source if event and name == event[0] else batch.column(name)
      for i in bad:
        reasons.setdefault(int(i), []).append(
            PARSE.reason("key_missing", name=name) if typ is None else
            PARSE.reason("not_utf8", name=name) if typ == schema.BYTES else  # its only failure
            PARSE.reason("not_type", name=name, text=_cell_text(col, int(i)), type=typ))
    for i in sorted(reasons):
      rejected.append(rejected_row(paths[files[i]], lines[i], raw[i].as_py().rstrip(b"\r\n"),
                                   "; ".join(reasons[i])))
  keep = pa.array(~bad_rows)
  # The raw-stage fingerprint: each cell's canonical text, before typing.
  names = [name for name, _ in columns if name not in side]
  canonical = pa.RecordBatch.from_arrays([canonical[n] for n in names], names=names)
  raw_fp = fingerprint.fingerprint_batch(canonical, fields=RAW.fingerprint_fields(columns=names))
  out = pa.RecordBatch.from_arrays(typed + [pa.array(raw_fp)],
                                   names=[name for name, _ in columns] + [RAW_FP])
  return (out.filter(keep) if bad_rows.any() else out), rejected


def _cell_text(column, i):
  """The source's text of one cell, for a rejection reason."""
  value = values.source_text(column.slice(i, 1))[0].as_py()
  return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class _TypeFn(beam.DoFn):

  def __init__(self, paths, required, side, event):
    self._paths = list(paths)
    self._required = list(required)
    self._side = frozenset(side)
    self._event = event
    self._rejected = beam.metrics.Metrics.counter("skewtrace.ingest", "rows_rejected_typing")

  def process(self, element, columns):
    batch_id, batch = element
    typed, rejected = type_batch(batch, columns, self._paths, self._required, self._side,
                                 self._event)
    self._rejected.inc(len(rejected))
    for row in rejected:
      yield beam.pvalue.TaggedOutput(REJECTED, row)
    if typed.num_rows:
      yield batch_id, typed


class TypeRows(beam.PTransform):
  """(id, binary batch) -> (id, typed batch); REJECTED rows tagged.

  `columns` is [(name, type)] or a singleton PCollection of it (inferred types); rows
  missing a `required` (key) column are rejected; `side` columns are typed but outside the raw
  fingerprint; `event` (column, form, zone, parts): the event-time column, as type_batch reads
  it.
  """

  def __init__(self, columns, paths, required=(), side=(), event=None):
    super().__init__()
    self._event = tuple(event) if event else None
    self._columns = columns
    self._paths = paths
    self._required = required
    self._side = tuple(side)

  def expand(self, batches):
    columns = self._columns
    if isinstance(columns, beam.pvalue.PCollection):
      columns = beam.pvalue.AsSingleton(columns)
    return batches | "Cast" >> beam.ParDo(
        _TypeFn(self._paths, self._required, self._side, self._event), columns).with_outputs(
        REJECTED, main="rows")
