"""Python values (a serving request's record, a parsed JSON line) under the canonical value model.

TypeRows types a source's Arrow columns with values.canonical_text (the raw stage) and
schema.type_column (the parse stage). A column of Python values may mix types from one record to
the next (12, 12.5, "12.50", None), which no single Arrow array holds. So the values are grouped
by kind, each group becomes the Arrow array a typed source would have given
(arrow_cells), and the two rules run on each group; the results are put back in row order:

  str, numpy str                        -> string
  bytes, bytearray, numpy bytes         -> binary (a value that is not UTF-8 in a group of its
                                           own, so it leaves the other values' text alone)
  bool, numpy bool                      -> bool
  int                                   -> int64; beyond int64, its decimal text (a JSON number:
                                           canonical as that number)
  float                                 -> float64
  numpy integer / floating              -> that numpy type (a float32 keeps its width, so it is
                                           canonical by its shortest float32 text)
  datetime.datetime with a zone         -> timestamp[us, UTC] (the same instant)
  datetime.datetime without a zone      -> timestamp[us] (read as UTC, as Arrow and Parquet do)
  datetime.date                         -> date32
  numpy datetime64                      -> timestamp of its unit
  decimal.Decimal                       -> decimal
  None                                  -> null

Anything else (a list, a dict, an object) is not a scalar: ScalarTypeError. `empty_is_null`
reads "" and b"" as null, as the CSV reader does.
"""
import datetime
import decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.spec import schema, values

__all__ = ["ScalarTypeError", "kind_of", "arrow_class", "arrow_cells", "column_cells",
           "canonical_cells", "type_cells", "cell_text"]


class ScalarTypeError(ValueError):
  """A Python value that is not a scalar of the canonical value model."""


_STR, _BYTES, _BOOL, _INT, _FLOAT, _NUMPY, _DATETIME, _DATE, _DECIMAL, _NONE = (
    "str", "bytes", "bool", "int", "float", "numpy", "datetime", "date", "decimal", "none")
_KINDS = {}  # Python type -> kind, filled on first sight of each type


def kind_of(typ):
  """The kind of a Python type (how arrow_cells converts its values); ScalarTypeError for a
  type that holds no scalar."""
  kind = _KINDS.get(typ)
  if kind is None:
    kind = _KINDS[typ] = _classify(typ)
  return kind


def arrow_class(typ):
  """An Arrow type of the class arrow_cells gives every value of Python type `typ`, whatever
  the value: float64 for a number (int, float, Decimal, a numpy number: an int beyond int64 is
  still a number), bool, timestamp for an instant (datetime, date, numpy datetime64), string
  for text, bytes and None. ScalarTypeError for a type that holds no scalar."""
  kind = kind_of(typ)
  if kind == _NUMPY:
    kind = _DATETIME if issubclass(typ, np.datetime64) else _FLOAT
  return {_INT: pa.float64(), _FLOAT: pa.float64(), _DECIMAL: pa.float64(),
          _BOOL: pa.bool_(), _DATETIME: pa.timestamp("s"), _DATE: pa.timestamp("s")}.get(
              kind, pa.string())


def _classify(typ):
  if typ is type(None):
    return _NONE
  # numpy's scalars first: np.float64 is a float, np.str_ a str.
  if issubclass(typ, np.bool_) or issubclass(typ, bool):
    return _BOOL
  if issubclass(typ, np.str_) or issubclass(typ, str):
    return _STR
  if issubclass(typ, (np.bytes_, bytes, bytearray)):
    return _BYTES
  if issubclass(typ, (np.integer, np.floating, np.datetime64)):
    return _NUMPY
  if issubclass(typ, int):
    return _INT
  if issubclass(typ, float):
    return _FLOAT
  if issubclass(typ, datetime.datetime):
    return _DATETIME
  if issubclass(typ, datetime.date):
    return _DATE
  if issubclass(typ, decimal.Decimal):
    return _DECIMAL
  raise ScalarTypeError(f"a scalar (str, bytes, int, float, bool, datetime, date, Decimal, a "
                        f"numpy scalar or None) expected, got {typ.__name__}")


def _group_key(value, kind):
  """Kinds whose Arrow type depends on the value split further (numpy dtype, zone or none)."""
  if kind == _NUMPY:
    return (kind, value.dtype.str)
  if kind == _DATETIME:
    return (kind, value.tzinfo is not None and value.utcoffset() is not None)
  if kind == _BYTES:
    try:
      bytes(value).decode("utf-8")
      return (kind, True)
    except UnicodeDecodeError:
      return (kind, False)
  return (kind,)


def _array(key, vals):
  kind = key[0]
  if kind == _STR:
    return pa.array(vals, pa.string())
  if kind == _BYTES:
    return pa.array([bytes(v) if v is not None else None for v in vals], pa.binary())
  if kind == _BOOL:
    return pa.array([None if v is None else bool(v) for v in vals], pa.bool_())
  if kind == _INT:
    try:
      return pa.array(vals, pa.int64())
    except (OverflowError, pa.ArrowInvalid):  # beyond int64: the number's decimal text
      return pa.array([None if v is None else str(v) for v in vals], pa.string())
  if kind == _FLOAT:
    return pa.array(vals, pa.float64())
  if kind == _NUMPY:
    dtype = np.dtype(key[1])
    present = [v for v in vals if v is not None]
    arr = pa.array(np.array(present, dtype=dtype))
    if len(present) == len(vals):
      return arr
    idx = np.cumsum([v is not None for v in vals]) - 1
    return arr.take(pa.array(idx, mask=np.array([v is None for v in vals])))
  if kind == _DATETIME:
    if key[1]:
      return pa.array([None if v is None else v.astimezone(datetime.timezone.utc)
                       for v in vals], pa.timestamp("us", tz="UTC"))
    return pa.array(vals, pa.timestamp("us"))
  if kind == _DATE:
    return pa.array(vals, pa.date32())
  if kind == _DECIMAL:
    return pa.array(vals)
  return pa.nulls(len(vals), pa.string())


def _blank_to_null(arr):
  empty = pc.equal(pc.binary_length(arr), 0)
  if not pc.any(empty).as_py():
    return arr
  return pc.if_else(empty, pa.scalar(None, arr.type), arr)


def arrow_cells(cells, empty_is_null=False):
  """The Arrow arrays of a column of Python values: [(rows, array)], rows the int64 row
  numbers the array holds (None: all rows, in order). Nulls ride in any group."""
  n = len(cells)
  kinds = {kind_of(t) for t in set(map(type, cells))}
  kinds.discard(_NONE)
  if not kinds:
    return [(None, pa.nulls(n, pa.string()))]
  if len(kinds) == 1 and next(iter(kinds)) not in (_NUMPY, _DATETIME, _BYTES):
    groups = {(next(iter(kinds)),): None}
  else:
    by_key = {}
    first = None
    for i, v in enumerate(cells):
      if v is None:
        continue
      key = _group_key(v, kind_of(type(v)))
      by_key.setdefault(key, []).append(i)
      first = key if first is None else first
    if len(by_key) == 1:
      groups = {first: None}
    else:  # nulls ride with the first group
      nulls = [i for i, v in enumerate(cells) if v is None]
      by_key[first] = sorted(by_key[first] + nulls)
      groups = {k: np.asarray(rows, dtype=np.int64) for k, rows in by_key.items()}
  out = []
  for key, rows in groups.items():
    vals = cells if rows is None else [cells[i] for i in rows]
    arr = _array(key, vals)
    if empty_is_null and key[0] in (_STR, _BYTES):
      arr = _blank_to_null(arr)
    out.append((rows, arr))
  return out


def column_cells(arr, empty_is_null=False):
  """arrow_cells of a column that is already an Arrow array (a typed source's column): one
  group, a dictionary-encoded column decoded; "" and b"" null with `empty_is_null`.
  values.ScalarError (a ValueError) for an Arrow type that is not a scalar of the canonical
  value model (a list, a struct, a duration)."""
  if pa.types.is_dictionary(arr.type):
    arr = arr.dictionary_decode()
  typ = arr.type
  values.canonical_text(pa.array([], typ))  # the raw stage's rule says what is a scalar
  text = values.is_text(typ)
  return [(None, _blank_to_null(arr) if empty_is_null and text else arr)]


def _scatter(parts, n):
  """One array of n rows from [(rows, array)] (arrays of one type)."""
  if len(parts) == 1 and parts[0][0] is None:
    return parts[0][1]
  rows = np.concatenate([r for r, _ in parts])
  joined = pa.concat_arrays([a for _, a in parts])
  order = np.empty(n, dtype=np.int64)
  order[rows] = np.arange(n)
  return joined.take(pa.array(order))


def canonical_cells(groups, n):
  """The canonical text of each of the n cells (values.canonical_text): pa.string, or
  pa.binary when some value is bytes that are not UTF-8."""
  parts = [(rows, values.canonical_text(arr)) for rows, arr in groups]
  if any(not pa.types.is_string(a.type) for _, a in parts):
    parts = [(rows, a.cast(pa.binary())) for rows, a in parts]
  return _scatter(parts, n)


def _all_rows(rows, arr):
  return np.arange(len(arr), dtype=np.int64) if rows is None else rows


def type_cells(groups, n, typ):
  """schema.type_column over each group: (typed array of n rows, rows that do not type, rows
  holding bytes that are not UTF-8 text). Both kinds of bad rows are null in the array."""
  parts, bad, not_utf8 = [], [], []
  for rows, arr in groups:
    if pa.types.is_binary(arr.type) and not _is_utf8(arr):
      not_utf8.append(_all_rows(rows, arr))
      parts.append((rows, pa.nulls(len(arr), schema.ARROW_TYPES[typ])))
      continue
    typed, wrong = schema.type_column(arr, typ)
    parts.append((rows, typed))
    if len(wrong):
      bad.append(_all_rows(rows, arr)[wrong])
  empty = np.zeros(0, dtype=np.int64)
  return (_scatter(parts, n), np.sort(np.concatenate(bad)) if bad else empty,
          np.sort(np.concatenate(not_utf8)) if not_utf8 else empty)


def _is_utf8(arr):
  try:
    arr.cast(pa.string())
    return True
  except pa.ArrowInvalid:
    return False


def cell_text(groups, row):
  """The source's text of one cell (values.source_text), for a parse reason."""
  for rows, arr in groups:
    j = row if rows is None else int(np.searchsorted(rows, row))
    if rows is None or (j < len(rows) and rows[j] == row):
      value = values.source_text(arr.slice(j, 1))[0].as_py()
      return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
  raise IndexError(row)
