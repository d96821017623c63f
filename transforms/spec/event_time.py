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

A dataset records the form its source wrote the event time in (ingest --event_time
COLUMN=FORM[:ZONE], source_instants): ingest stores that column as the canonical event time and
fingerprints it as the exact instant, so one transform_fn replays a log whatever form it arrived
in. The features job hands the module's preprocessing_fn the column in the module's own
declared form (module_form): the form is the dataset's, not the module's.
"""
import datetime
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["FORMATS", "DEFAULT_FORMAT", "DEFAULT_ZONE", "PLAUSIBLE_YEARS", "EventTimeError",
           "declaration", "check_declaration", "to_seconds", "check_values", "source_problem",
           "parse_flag", "source_instants", "module_form", "ISO_OUT", "NOT_INSTANT", "COMPOSED",
           "composed_text"]

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
    ticks, bad = _iso_ticks(arr, zone, valid)
    seconds = np.floor_divide(ticks, 1_000_000_000)
  else:
    ts = arr.cast(pa.timestamp("s")) if pa.types.is_date(arr.type) else arr
    ticks = ts.fill_null(0).cast(pa.int64()).to_numpy()
    per = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[ts.type.unit]
    seconds = np.floor_divide(ticks, per)
  seconds = np.where(bad, 0, seconds).astype(np.int64)
  return seconds, valid & ~bad, bad


def _iso_ticks(arr, zone, valid):
  """(int64 ns since 1970 UTC, bad) of ISO-8601 text (zoned, or naive in `zone`)."""
  text = arr.cast(pa.string()) if not pa.types.is_string(arr.type) else arr
  text = pc.utf8_trim_whitespace(text)
  zoned = pc.fill_null(pc.match_substring_regex(text, r"(Z|[+-][0-9]{2}(:?[0-9]{2})?)$"),
                       False).to_numpy(zero_copy_only=False)
  ticks = np.zeros(len(arr), dtype=np.int64)
  bad = np.zeros(len(arr), dtype=bool)
  for mask, parse in ((zoned, _parse_zoned), (~zoned, lambda t: _parse_naive(t, zone))):
    idx = np.flatnonzero(mask & valid)
    if not len(idx):
      continue
    ok, part = _parse_each(text.take(pa.array(idx)), parse)
    ticks[idx] = part
    bad[idx] = ~ok
  return ticks, bad


def _parse_zoned(text):
  return text.cast(pa.timestamp("ns", tz="UTC"))


def _parse_naive(text, zone):
  local = text.cast(pa.timestamp("ns"))
  return pc.assume_timezone(local, zone, ambiguous="earliest", nonexistent="earliest")


def _parse_each(text, parse):
  """(ok, ns ticks) of each value: one vectorised parse; a failing batch is bisected so that
  only the unparseable values are marked (whole-array casts, like spec/schema.py)."""
  try:
    ts = parse(text)
    ticks = ts.cast(pa.int64()).to_numpy(zero_copy_only=False)
    return np.ones(len(text), dtype=bool), ticks
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


# The text a module declaring "iso8601" is handed when its dataset holds another form: the
# instant in EVENT_TIME_ZONE with its offset ("2012-11-05T12:00:00+0100"), which every ISO-8601
# reader (and this module) reads back as the same instant.
ISO_OUT = "%Y-%m-%dT%H:%M:%S%z"
# How a dropped event time reads (the parse stage's not_type reason names it as its "type").
NOT_INSTANT = "an instant of event-time form {form!r} within the years {low}-{high}"


COMPOSED = "date+time"  # the form of an event time serving split into a date and a time of day


def parse_flag(text):
  """(column, form, zone, parts) of ingest's --event_time COLUMN=FORM[:ZONE] (parts: ()), or of
  COLUMN=DATE+TIME[:ZONE], an event time serving wrote as two columns, a date and a time of day,
  that ingest composes into the new column COLUMN (form COMPOSED, parts: (DATE, TIME));
  EventTimeError (one line) when malformed, the form unknown or the zone not a known time zone."""
  column, _, rest = (text or "").partition("=")
  form, _, zone = rest.partition(":")
  column, form, zone = column.strip(), form.strip(), zone.strip() or DEFAULT_ZONE
  parts = tuple(p.strip() for p in form.split("+")) if "+" in form else ()
  if not column or not form or (parts and (len(parts) != 2 or not all(parts))):
    raise EventTimeError(f"--event_time wants COLUMN=FORM[:ZONE] or COLUMN=DATE+TIME[:ZONE], "
                         f"got {text!r}")
  try:
    check_declaration(column, "iso8601" if parts else form, zone)
  except EventTimeError as e:
    raise EventTimeError(f"--event_time {text}: " + str(e).replace(
        "EVENT_TIME_FORMAT", "form").replace("EVENT_TIME_ZONE", "zone")) from None
  return column, COMPOSED if parts else form, zone, parts


def composed_text(date, time):
  """ISO-8601 text without a zone ("2014-05-16T19:45:00") of a date column (a DATE, or text
  YYYY-MM-DD) and a time-of-day column (text H[H][:MM[:SS[.f]]], or an integer hour 0-23), for
  source_instants' "iso8601" in the zone given: null where both are null; a value no instant
  reads (bad text, one of the two missing) is kept as text, so that it is rejected with it."""
  def text(arr):
    if isinstance(arr, pa.ChunkedArray):
      arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
      arr = arr.dictionary_decode()
    return arr

  date, time = text(date), text(time)
  if pa.types.is_integer(time.type):  # an hour
    hour = pc.utf8_lpad(time.cast(pa.string()), 2, "0")
    time = pc.binary_join_element_wise(hour, "00", ":")
  else:
    time = pc.utf8_trim_whitespace(time.cast(pa.string()))
    time = pc.replace_substring_regex(time, r"^([0-9])(:|$)", r"0\1\2")  # 7:05 -> 07:05
    time = pc.replace_substring_regex(time, r"^([0-9]{2})$", r"\1:00")  # an hour alone
  date = date.cast(pa.string())  # a DATE's text is YYYY-MM-DD
  both_null = pc.and_(date.is_null(), time.is_null())
  joined = pc.binary_join_element_wise(pc.fill_null(date, ""), pc.fill_null(time, ""), "T")
  return pc.if_else(both_null, pa.scalar(None, pa.string()), joined)


def _in_form(arr, form):
  """`arr` (any source's Arrow column) as the type `form` reads, and a bool mask of present
  values that cannot be: CSV's text of a count becomes int64 by the canonical value model
  (spec/values.py: "1.3e9" and "1300000000.0" are 1300000000); ISO-8601 is text as written."""
  from transforms.spec import values  # values imports nothing from here: no cycle
  valid = arr.is_valid().to_numpy(zero_copy_only=False)
  if form in _PER_SECOND:
    if pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type):
      return arr, np.zeros(len(arr), dtype=bool)
    text = values.canonical_text(arr).cast(pa.string())
    whole = pc.fill_null(pc.match_substring_regex(text, r"^-?[0-9]{1,18}$"), False)
    ints = pc.if_else(whole, text, pa.scalar(None, pa.string())).cast(pa.int64())
    return ints, valid & ~whole.to_numpy(zero_copy_only=False)
  if form == "iso8601":
    if values.is_text(arr.type):
      try:
        return arr.cast(pa.string()), np.zeros(len(arr), dtype=bool)
      except pa.ArrowInvalid:  # bytes that are not UTF-8 are no instant
        return pa.nulls(len(arr), pa.string()), valid
    return pa.nulls(len(arr), pa.string()), valid  # a number or an instant type is no text
  if pa.types.is_timestamp(arr.type) or pa.types.is_date(arr.type):
    return arr, np.zeros(len(arr), dtype=bool)
  return pa.nulls(len(arr), pa.timestamp("s")), valid


def source_instants(arr, form, zone=DEFAULT_ZONE):
  """(seconds, text, bad) of a source column holding event times written in `form` (ingest's
  --event_time): the canonical event time (numpy int64 Unix seconds, floored; 0 where none),
  the exact instant's canonical text (pa.string, spec/values.py: "1352113200",
  "1352113200.123"; null where none or bad), and the present values that are not an instant of
  the form within PLAUSIBLE_YEARS. Vectorised."""
  if isinstance(arr, pa.ChunkedArray):
    arr = arr.combine_chunks()
  if pa.types.is_dictionary(arr.type):
    arr = arr.dictionary_decode()
  from transforms.spec import values
  typed, unfit = _in_form(arr, form)
  seconds, has, bad = to_seconds(typed, form, zone)
  bad = bad | unfit | (has & ((seconds < _LOW) | (seconds >= _HIGH)))
  good = has & ~bad
  if form in _PER_SECOND:
    if pa.types.is_floating(typed.type):  # whole values only (bad ones are masked)
      typed = pc.if_else(pa.array(good), typed, 0.0).cast(pa.int64())
    unit = {"seconds": "s", "ms": "ms", "us": "us", "ns": "ns"}[form]
    instants = pc.if_else(pa.array(good), typed.cast(pa.int64()),
                          pa.scalar(None, pa.int64())).cast(pa.timestamp(unit))
  elif form == "iso8601":
    ticks, _ = _iso_ticks(typed, zone, good)
    instants = pa.array(ticks, pa.int64(), mask=~good).cast(pa.timestamp("ns"))
  else:
    instants = typed.cast(pa.timestamp("s")) if pa.types.is_date(typed.type) else typed
    instants = pc.if_else(pa.array(good), instants, pa.scalar(None, instants.type))
  return np.where(good, seconds, 0), values.canonical_text(instants), bad


def module_form(seconds, form, zone=DEFAULT_ZONE):
  """A canonical event-time column (int64 Unix seconds, nulls kept) in the form a feature module
  declares for its preprocessing_fn: the seconds themselves ("seconds", and "timestamp": a
  dataset holds a timestamp as its Unix seconds), a count of ms/us/ns, or ISO_OUT text in
  `zone`."""
  if form in ("seconds", "timestamp"):
    return seconds
  if form in _PER_SECOND:
    return pc.multiply_checked(seconds, _PER_SECOND[form])
  return pc.strftime(seconds.cast(pa.timestamp("s", tz=zone)), format=ISO_OUT)
