"""The production logger's per-record stages before the key: raw and parse (each cell's canonical
text and typed value, by the rules of transforms/spec/typing.py that TypeRows applies, and the
reasons a record does not parse) and window (assign_windows, once per watermark). Pure functions
over Arrow columns; replay/logger/rows.py applies them batch by batch. docs/logger.md.
"""
import operator

import numpy as np
import pyarrow as pa

from replay.logger.accept import NO_WATERMARK
from transforms.spec import fingerprint
from transforms.spec import typing as cells
from transforms.spec.stages import (PARSE, RAW, WINDOW_END, WINDOW_START, DROP_REASON)
from transforms.spec.window import assign_windows

__all__ = ["parse", "windows", "as_text"]

_ROW = "__row__"


def as_text(canonical):
  """Canonical text as pa.string: a column holding bytes that are not UTF-8 (canonical_cells
  then gives pa.binary) shows those bytes backslash-escaped (rare: one pass in Python)."""
  if pa.types.is_string(canonical.type):
    return canonical
  return pa.array([None if v is None else v.decode("utf-8", "backslashreplace")
                   for v in canonical.to_pylist()], pa.string())


def parse(records, column_types, key_columns, empty_is_null, pii):
  """raw + parse of a list of records or a table (accept_table's): (raw fingerprints, typed
  batch (bad cells null), {row: [(reason code, reason)]} of the records that do not parse,
  the cells' canonical text). column_types: [(name, INT|FLOAT|BYTES)]; key_columns: those a record
  must have; empty_is_null: "" and b"" read as null; pii: the log holds PII (a reason then
  leaves out the cell text)."""
  names = [n for n, _ in column_types]
  bad = {}
  if isinstance(records, pa.Table):  # Arrow columns: each is one group of cells
    n = records.num_rows
    columns = [records.column(c).combine_chunks() if c in records.column_names else
               pa.nulls(n, pa.string()) for c in names]
    cells_of = lambda column: cells.column_cells(column, empty_is_null)  # noqa: E731
  else:
    # Records to columns: one C-level call per record (a dict.get per cell is a tenth of
    # it). A column a record lacks is null, as the source readers of ingest read a missing
    # JSON key and csv.DictReader a short row.
    n = len(records)
    row = operator.itemgetter(*names) if len(names) > 1 else \
        (lambda r, name=names[0]: (r[name],))
    whole = dict.fromkeys(names)
    columns = list(zip(*[row(r) if len(r) == len(whole) else row({**whole, **r})
                         for r in records])) or [()] * len(names)
    cells_of = lambda column: cells.arrow_cells(column, empty_is_null)  # noqa: E731
  canonical, typed = [], []
  for (name, typ), column in zip(column_types, columns):
    groups = cells_of(column)
    canonical.append(cells.canonical_cells(groups, n))
    arr, wrong, not_utf8 = cells.type_cells(groups, n, typ)
    for i in not_utf8:
      bad.setdefault(int(i), []).append(("not_utf8", PARSE.reason("not_utf8", name=name)))
    for i in wrong:  # TypeRows' reasons (without the cell text when the log holds PII)
      bad.setdefault(int(i), []).append(
          ("not_type_pii", PARSE.reason("not_type_pii", name=name, type=typ)) if pii
          else ("not_type", PARSE.reason("not_type", name=name, type=typ,
                                         text=cells.cell_text(groups, int(i)))))
    typed.append(arr)
  for name in key_columns:  # TypeRows' required columns
    column = canonical[names.index(name)]
    for i in np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False)):
      bad.setdefault(int(i), []).append(("key_missing",
                                         PARSE.reason("key_missing", name=name)))
  # The raw stage: each cell's canonical text (spec/values.py), before typing, as TypeRows.
  canonical = pa.RecordBatch.from_arrays(canonical, names=names)
  fp_raw = fingerprint.fingerprint_batch(canonical, RAW.fingerprint_fields(columns=names))
  return fp_raw, pa.RecordBatch.from_arrays(typed, names=names), bad, canonical


def windows(typed, ok, watermarks, event, profile):
  """(start[n], end[n], rows windowed (sorted), {row: drop reason}) by assign_windows in the
  declared event-time format, once per distinct watermark among the parsed records
  (watermarks: int64 per record, NO_WATERMARK for none; event: the module's (column, format,
  zone) declaration)."""
  column, form, zone = event
  n = typed.num_rows
  start, end = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
  parsed = np.flatnonzero(ok)
  parsed = parsed[np.argsort(watermarks[parsed], kind="stable")]  # grouped by watermark
  marks = watermarks[parsed]
  cuts = np.flatnonzero(marks[1:] != marks[:-1]) + 1
  kept, dropped = [], {}
  for rows in np.split(parsed, cuts) if len(parsed) else ():
    mark = None if watermarks[rows[0]] == NO_WATERMARK else int(watermarks[rows[0]])
    batch = pa.record_batch([typed.column(column).take(pa.array(rows)), pa.array(rows)],
                            names=[column, _ROW])
    k, d = assign_windows(batch, column, profile, mark, form, zone)
    at = k.column(_ROW).to_numpy()
    start[at] = k.column(WINDOW_START).to_numpy()
    end[at] = k.column(WINDOW_END).to_numpy()
    kept.append(at)
    dropped.update(zip(d.column(_ROW).to_pylist(), d.column(DROP_REASON).to_pylist()))
  windowed = np.sort(np.concatenate(kept)) if kept else np.zeros(0, dtype=np.int64)
  return start, end, windowed, dropped
