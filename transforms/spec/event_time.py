"""Event time as users have it, normalised to the one canonical event time: int64 Unix seconds
(UTC, floored), what windows (spec/window.py), the feature log's event_time column and the
window fingerprint use.

A feature module declares EVENT_TIME_COLUMN and, when it is not Unix seconds, EVENT_TIME_FORMAT:
  "seconds" (default), "ms", "us", "ns"  an integer (or a whole float) count since 1970-01-01 UTC
  "iso8601"                             text: an ISO-8601 date and time; text without a zone
                                        is read in EVENT_TIME_ZONE (default "UTC")
  "timestamp"                           an Arrow/Parquet TIMESTAMP or DATE column
Before a pipeline starts (check_declaration, check_values) the column's type must suit the
format and every present value must be an instant between PLAUSIBLE_YEARS: an epoch in
milliseconds declared as seconds lands in the year 45,000 and is refused, so no window is ever
1,000x too small.
"""
import datetime
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["FORMATS", "DEFAULT_FORMAT", "DEFAULT_ZONE", "PLAUSIBLE_YEARS", "EventTimeError",
           "declaration", "check_declaration", "to_seconds", "check_values", "source_problem"]

FORMATS = ("seconds", "ms", "us", "ns", "iso8601", "timestamp")
DEFAULT_FORMAT, DEFAULT_ZONE = "seconds", "UTC"
_PER_SECOND = {"seconds": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
PLAUSIBLE_YEARS = (1971, 2200)
_LOW = int(datetime.datetime(PLAUSIBLE_YEARS[0], 1, 1, tzinfo=datetime.timezone.utc).timestamp())
_HIGH = int(datetime.datetime(PLAUSIBLE_YEARS[1], 1, 1, tzinfo=datetime.timezone.utc).timestamp())


class EventTimeError(ValueError):
  """An event-time declaration or column that cannot be used (one line)."""


def declaration(module):
  """(column, format, zone) a feature module declares."""
  return (getattr(module, "EVENT_TIME_COLUMN", None),
          getattr(module, "EVENT_TIME_FORMAT", DEFAULT_FORMAT),
          getattr(module, "EVENT_TIME_ZONE", DEFAULT_ZONE))


def check_declaration(column, form, zone):
  """EventTimeError when the declaration itself is unusable."""
  if not isinstance(column, str) or not column:
    raise EventTimeError(f"EVENT_TIME_COLUMN must be a column name, got {column!r}")
  if form not in FORMATS:
    raise EventTimeError(f"EVENT_TIME_FORMAT {form!r} is not one of {', '.join(FORMATS)}")
  if not isinstance(zone, str) or not zone:
    raise EventTimeError(f"EVENT_TIME_ZONE must be a zone name such as 'UTC', got {zone!r}")
  try:
    pc.assume_timezone(pa.array([0], pa.timestamp("s")), zone)
  except (pa.ArrowInvalid, ValueError):
    raise EventTimeError(f"EVENT_TIME_ZONE {zone!r} is not a known time zone") from None


def _type_ok(typ, form):
  if form in _PER_SECOND:
    return pa.types.is_integer(typ) or pa.types.is_floating(typ)
  if form == "iso8601":
    return pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_binary(typ)
  return pa.types.is_timestamp(typ) or pa.types.is_date(typ)


def source_problem(typ, form, what=None):
  """None when source cells of Arrow type `typ` can carry an event time of the declared form
  through the canonical value model (spec/values.py), else why not, one phrase. A timestamp or
  date is its Unix seconds there: right for "seconds" and "timestamp", not ISO-8601 text nor a
  count of ms, us or ns; a number is not ISO-8601 text. Text and nulls always can (their values
  are the window stage's to judge); a boolean is no instant. what: how the phrase names the
  values' type (default: the Arrow type)."""
  instant = pa.types.is_timestamp(typ) or pa.types.is_date(typ)
  if pa.types.is_boolean(typ):
    return f"a boolean is not an instant (EVENT_TIME_FORMAT {form!r})"
  if instant and form not in ("seconds", "timestamp"):
    return (f"a {what or typ} value is its Unix seconds in the canonical value model, not "
            f"{_expected(form) if form == 'iso8601' else 'a count of ' + form} "
            f"(EVENT_TIME_FORMAT {form!r})")
  number = pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_decimal(typ)
  if form == "iso8601" and number:
    return f"a number is not ISO-8601 text (EVENT_TIME_FORMAT {form!r})"
  return None


def _expected(form):
  return {"iso8601": "text", "timestamp": "a timestamp or date"}.get(form, "a number")


def to_seconds(arr, form, zone=DEFAULT_ZONE):
  """(int64 numpy Unix seconds, numpy bool has-value, numpy bool bad) of an event-time array.

  bad marks present values that are not instants of the declared form (unparseable text, a
  fractional count, a type that does not suit the form); their seconds are 0.
  """
  if isinstance(arr, pa.ChunkedArray):
    arr = arr.combine_chunks()
  n = len(arr)
  valid = arr.is_valid().to_numpy(zero_copy_only=False)
  if not _type_ok(arr.type, form):
    raise EventTimeError(f"event time column has type {arr.type}, but EVENT_TIME_FORMAT "
                         f"{form!r} needs {_expected(form)}")
  bad = np.zeros(n, dtype=bool)
  if form in _PER_SECOND:
    per = _PER_SECOND[form]
    if pa.types.is_floating(arr.type):
      f = arr.fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64)
      whole = np.isfinite(f) & (np.floor(f) == f) & (np.abs(f) < 2.0 ** 63)
      bad = valid & ~whole
      ticks = np.where(whole, f, 0).astype(np.int64)
    else:
      ticks = arr.fill_null(0).cast(pa.int64()).to_numpy()
    seconds = np.floor_divide(ticks, per)
  elif form == "iso8601":
    seconds, bad = _iso_seconds(arr, zone, valid)
  else:
    ts = arr.cast(pa.timestamp("s")) if pa.types.is_date(arr.type) else arr
    ticks = ts.fill_null(0).cast(pa.int64()).to_numpy()
    per = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[ts.type.unit]
    seconds = np.floor_divide(ticks, per)
  seconds = np.where(bad, 0, seconds).astype(np.int64)
  return seconds, valid & ~bad, bad


def _iso_seconds(arr, zone, valid):
  text = arr.cast(pa.string()) if not pa.types.is_string(arr.type) else arr
  text = pc.utf8_trim_whitespace(text)
  zoned = pc.fill_null(pc.match_substring_regex(text, r"(Z|[+-][0-9]{2}(:?[0-9]{2})?)$"),
                       False).to_numpy(zero_copy_only=False)
  seconds = np.zeros(len(arr), dtype=np.int64)
  bad = np.zeros(len(arr), dtype=bool)
  for mask, parse in ((zoned, _parse_zoned), (~zoned, lambda t: _parse_naive(t, zone))):
    idx = np.flatnonzero(mask & valid)
    if not len(idx):
      continue
    part = text.take(pa.array(idx))
    ok, secs = _parse_each(part, parse)
    seconds[idx] = secs
    bad[idx] = ~ok
  return seconds, bad


def _parse_zoned(text):
  return text.cast(pa.timestamp("ns", tz="UTC"))


def _parse_naive(text, zone):
  local = text.cast(pa.timestamp("ns"))
  return pc.assume_timezone(local, zone, ambiguous="earliest", nonexistent="earliest")


def _parse_each(text, parse):
  """(ok, seconds) of each value: one vectorised parse; a failing batch is bisected so that
  only the unparseable values are marked (whole-array casts, like spec/schema.py)."""
  try:
    ts = parse(text)
    ticks = ts.cast(pa.int64()).to_numpy(zero_copy_only=False)
    return np.ones(len(text), dtype=bool), np.floor_divide(ticks, 1_000_000_000)
  except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
    if len(text) == 1:
      return np.zeros(1, dtype=bool), np.zeros(1, dtype=np.int64)
  mid = len(text) // 2
  ok1, s1 = _parse_each(text.slice(0, mid), parse)
  ok2, s2 = _parse_each(text.slice(mid), parse)
  return np.concatenate([ok1, ok2]), np.concatenate([s1, s2])


def check_values(arr, column, form, zone=DEFAULT_ZONE):
  """EventTimeError (one line, naming the column and a value) when a present value is not an
  instant of the declared form or falls outside PLAUSIBLE_YEARS; else None."""
  seconds, has, bad = to_seconds(arr, form, zone)
  if bad.any():
    i = int(np.flatnonzero(bad)[0])
    value = arr[i].as_py()
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    digits = form == "iso8601" and re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", text.strip())
    raise EventTimeError(f"event time column {column!r}: {value!r} is not an instant of "
                         f"EVENT_TIME_FORMAT {form!r}" + (
                             " (Unix seconds: the text a timestamp or number in the source "
                             "becomes; the source must hold the ISO-8601 text)" if digits else ""))
  wild = has & ((seconds < _LOW) | (seconds >= _HIGH))
  if wild.any():
    i = int(np.flatnonzero(wild)[0])
    hint = ""
    if form in _PER_SECOND and seconds[i] >= _HIGH:
      bigger = [f for f, p in _PER_SECOND.items() if p > _PER_SECOND[form]
                and _LOW <= seconds[i] * _PER_SECOND[form] // p < _HIGH]
      if bigger:
        hint = f"; it reads as a plausible time in {bigger[0]!r}"
    raise EventTimeError(
        f"event time column {column!r}: {arr[i].as_py()!r} read as {form!r} is outside the "
        f"years {PLAUSIBLE_YEARS[0]}-{PLAUSIBLE_YEARS[1]}{hint} (declare EVENT_TIME_FORMAT)")
  return None
