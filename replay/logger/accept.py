"""What the production logger accepts, checked on the caller's thread (replay.logger.rows.LogRows
takes these checks as its base): a record (a dict of scalars), a batch of records as Arrow
columns (accept_table, the columnar path), their aggregates and served values. A refused input
is one RecordError line; nothing of it is logged."""
import dataclasses
import datetime
import functools

import numpy as np
import pyarrow as pa

from transforms.spec import event_time
from transforms.spec import feature_log as log
from transforms.spec import typing as cells
from transforms.spec import values
from transforms.spec.errors import UsageError

__all__ = ["AcceptRecords", "Columns", "RecordError", "watermark_seconds", "NO_WATERMARK"]

NO_WATERMARK = np.iinfo(np.int64).min  # a record logged without a watermark (Columns)


@dataclasses.dataclass(frozen=True)
class Columns:
  """A batch of records as Arrow columns, accepted (LogRows.accept_table): the record columns
  (a pa.Table), each aggregate's and served feature's values (arrays in declaration order;
  served values null where not logged) and each record's watermark (int64, NO_WATERMARK for
  none)."""
  table: pa.Table
  aggregates: tuple
  served: tuple
  watermarks: np.ndarray

  def joins(self, other):
    """Whether `other` can be written in one batch with this one (same column types)."""
    return isinstance(other, Columns) and other.table.schema == self.table.schema

  @staticmethod
  def joined(batches):
    """One Columns of several that join, in order (fewer, larger writes)."""
    first = batches[0]
    if len(batches) == 1:
      return first
    return Columns(pa.concat_tables([b.table for b in batches]),
                   tuple(pa.concat_arrays([b.aggregates[j] for b in batches])
                         for j in range(len(first.aggregates))),
                   tuple(pa.concat_arrays([b.served[j] for b in batches])
                         for j in range(len(first.served))),
                   np.concatenate([b.watermarks for b in batches]))


class RecordError(UsageError, ValueError):
  """A record, or its aggregates, that the logger does not accept (a one-line message). A
  UsageError (exit code 2) and a ValueError."""


def watermark_seconds(watermark):
  """The watermark as Unix seconds: an integer, or an aware datetime (floored); None stays."""
  if watermark is None:
    return None
  if isinstance(watermark, datetime.datetime) and watermark.utcoffset() is not None:
    return int(watermark.timestamp() // 1)
  if isinstance(watermark, (bool, np.bool_)) or not isinstance(watermark, (int, np.integer)):
    raise UsageError(f"watermark must be Unix seconds (an integer) or a datetime with a zone, "
                     f"got {watermark!r}")
  return int(watermark)


class AcceptRecords:
  """The caller's-thread checks of LogRows, over the attributes its __init__ sets: _names,
  _name_set, _aggregates (names), _aggregate_set, _aggregate_types, _served, _feature_types,
  _event, _event_format and _event_sources ({Python type: event_time.source_problem}, filled
  as types are met)."""

  def accept(self, record, aggregates, served=None):
    """(a copy of the record, its aggregate values in declaration order, its served values in
    the order of the served features (None: not logged)); RecordError when a column is not in
    the schema, a value is not a scalar, the aggregates are not exactly the module's (each an
    integer) or a served value names another feature or is not of its feature's kind."""
    if not isinstance(record, dict):
      raise RecordError(f"a record is a dict column -> value, got {type(record).__name__}")
    unknown = record.keys() - self._name_set
    if unknown:
      raise RecordError(f"unknown column(s) {', '.join(map(repr, sorted(unknown)))}: not in "
                        "the record schema of the offline run")
    for typ in set(map(type, record.values())):
      try:
        cells.kind_of(typ)
      except cells.ScalarTypeError as e:
        name = next(n for n, v in record.items() if type(v) is typ)
        raise RecordError(f"column {name!r}: {e}") from None
    when = type(record.get(self._event))
    if when not in self._event_sources:  # once a Python type: its class decides, not a value
      self._event_sources[when] = event_time.source_problem(
          cells.arrow_class(when), self._event_format, when.__name__)
    self._event_problem(self._event_sources[when])
    return dict(record), self._accept_aggregates(aggregates), self._accept_served(served)

  def _event_problem(self, problem):
    if problem:  # every record would be dropped at window: refused on the caller's thread
      raise RecordError(f"column {self._event!r}, the event time: {problem}; log it as the "
                        "offline data holds it")

  def _accept_served(self, served):
    if not served:
      return (None,) * len(self._served)
    if not isinstance(served, dict) or served.keys() - set(self._served):
      what = sorted(served.keys() - set(self._served)) if isinstance(served, dict) else served
      raise RecordError(f"served: {what!r} not among the served features "
                        f"({', '.join(self._served) or 'none declared'})")
    for f, v in served.items():
      binary = pa.types.is_large_binary(self._feature_types[f])
      kind = (str, bytes) if binary else (int, float, np.integer, np.floating)
      if v is not None and (not isinstance(v, kind) or isinstance(v, (bool, np.bool_))):
        raise RecordError(f"served {f!r}: {'text' if binary else 'a number'} expected, "
                          f"got {v!r}")
    return tuple(served.get(f) for f in self._served)

  def _accept_aggregates(self, aggregates):
    if not self._aggregates:
      if aggregates:
        raise RecordError(f"aggregate(s) {', '.join(map(repr, sorted(aggregates)))}: the "
                          "feature module declares no windowed aggregate")
      return ()
    self._check_aggregate_names(aggregates)
    out = []
    for name in self._aggregates:  # counts: an integer; sum, mean, min, max: a number or None
      v, count = aggregates[name], self._aggregate_types[name] == pa.int64()
      kinds = (int, np.integer) if count else (int, float, np.integer, np.floating)
      if type(v) is not int and (isinstance(v, (bool, np.bool_)) or not isinstance(v, kinds)):
        if count or v is not None:
          what = "an integer" if count else "a number or None"
          raise RecordError(f"aggregate {name!r} must be {what}, got {v!r}")
      out.append(v if v is None else int(v) if count else float(v))
    return tuple(out)

  def _check_aggregate_names(self, aggregates):
    if not isinstance(aggregates, dict):
      raise RecordError(f"aggregates {', '.join(map(repr, self._aggregates))} expected (one "
                        f"{{name: value}} per record), got {type(aggregates).__name__}")
    if aggregates.keys() != self._aggregate_set:
      unknown = sorted(aggregates.keys() - self._aggregate_set)
      missing = [n for n in self._aggregates if n not in aggregates]
      what = ([f"{', '.join(map(repr, unknown))} not declared by the feature module"]
              if unknown else []) + ([f"{', '.join(map(repr, missing))} missing"]
                                     if missing else [])
      raise RecordError(f"aggregates: {'; '.join(what)} (declared: "
                        f"{', '.join(map(repr, self._aggregates))})")

  def accept_table(self, table, aggregates=None, served=None, watermark=None):
    """A Columns batch: Arrow record columns (a pa.Table or RecordBatch; a schema column it
    lacks is null, as a record lacking it), aggregates {name: one value per record (an Arrow
    array or a sequence)} holding exactly the module's, served {feature: one value per record};
    watermark in Unix seconds (watermark_seconds). RecordError as accept() says, and for an
    array of another length."""
    if isinstance(table, pa.RecordBatch):
      table = pa.Table.from_batches([table])
    if type(table).__module__.startswith("pandas") and type(table).__name__ == "DataFrame":
      try:  # a notebook's frame: its columns, not its index (pandas is imported by the caller)
        table = pa.Table.from_pandas(table, preserve_index=False)
      except (pa.ArrowException, TypeError, ValueError) as e:
        raise RecordError(f"a pandas DataFrame Arrow cannot convert: {e}") from None
    if not isinstance(table, pa.Table):
      raise RecordError(f"a pyarrow Table or RecordBatch (or a pandas DataFrame) expected, got "
                        f"{type(table).__name__}")
    names, n = table.column_names, table.num_rows
    unknown = sorted(set(names) - self._name_set)
    if unknown or len(set(names)) != len(names):
      raise RecordError(f"unknown column(s) {', '.join(map(repr, unknown))}: not in the record "
                        "schema of the offline run" if unknown else "a column repeats")
    for name in names:
      problem = _type_problem(table.schema.field(name).type)
      if problem:
        raise RecordError(f"column {name!r}: {problem}")
    if self._event in names:
      typ = table.schema.field(self._event).type
      self._event_problem(event_time.source_problem(
          typ.value_type if pa.types.is_dictionary(typ) else typ, self._event_format))
    if not self._aggregates and aggregates:
      self._accept_aggregates(aggregates)  # the error for aggregates no module declares
    self._check_aggregate_names(aggregates or {} if self._aggregates else {})
    arrays = []
    for name in self._aggregates:
      count = self._aggregate_types[name] == pa.int64()
      arr = _column(aggregates[name], n, f"aggregate {name!r}")
      kind = pa.types.is_integer(arr.type) or (not count and pa.types.is_floating(arr.type))
      if not (kind or pa.types.is_null(arr.type)) or (count and arr.null_count):
        raise RecordError(f"aggregate {name!r}: {'integers' if count else 'numbers or nulls'} "
                          f"expected, got {arr.type}" + (" with nulls" if kind else ""))
      try:
        arrays.append(arr.cast(self._aggregate_types[name]))
      except pa.ArrowInvalid as e:  # an unsigned integer beyond int64
        raise RecordError(f"aggregate {name!r}: {str(e).splitlines()[0]}") from None
    self._accept_served(dict.fromkeys(served or {}))  # the names only
    out = []
    for f in self._served:
      typ = self._feature_types[f]
      if f not in (served or {}):
        out.append(pa.nulls(n, typ))
        continue
      arr = _column(served[f], n, f"served {f!r}")
      text, number = values.is_text(arr.type), values.is_number(arr.type)
      if not (pa.types.is_null(arr.type) or (text if pa.types.is_large_binary(typ) else number)):
        raise RecordError(f"served {f!r}: {'text' if pa.types.is_large_binary(typ) else 'numbers'}"
                          f" expected, got {arr.type}")
      out.append(log.cast_served(arr, typ))
    return Columns(table, tuple(arrays), tuple(out),
                   np.full(n, NO_WATERMARK if watermark is None else watermark, np.int64))


@functools.lru_cache(maxsize=256)
def _type_problem(typ):
  """Why a column of Arrow type `typ` is not scalars of the canonical value model (None: it
  is): column_cells run on an empty column of the type, once per type (the run costs tens of
  microseconds, which a log_table() call of 18 columns would pay on every call)."""
  try:
    cells.column_cells(pa.array([], typ))
  except ValueError as e:  # values.ScalarError
    return str(e)
  return None


def _column(values, n, what):
  """One value per record as an Arrow array: RecordError unless it is n scalars."""
  try:  # a numpy array is copied: Arrow would wrap its buffer, read later on the worker
    arr = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(
        np.array(values, copy=True) if isinstance(values, np.ndarray) else values)
  except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as e:
    raise RecordError(f"{what}: not one scalar per record ({str(e).splitlines()[0]})") from None
  arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
  if len(arr) != n:
    raise RecordError(f"{what}: {len(arr)} values for {n} records")
  return arr
