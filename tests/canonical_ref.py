"""An independent pure-Python reference of the canonical value model (docs/fingerprint.md,
"Canonical values (the raw stage)"): the canonical text of one Python value.

Written from the documented rule, not from transforms/spec/values.py (which it must not import),
so tests can recompute canonical texts and raw fingerprints without sharing a bug with the
vectorised implementation. No Arrow: floats are formatted from Python's repr digits, instants
are computed with integer calendar arithmetic.

  canonical(value)            int, float, bool, str, bytes, None, datetime, date, Decimal
  canonical_float32(x)        x read as a float32 (tf.Example, Parquet FLOAT)
  canonical_half(x)           x read as a float16
  canonical_ticks(ticks, unit) a timestamp given as an integer count of "s", "ms", "us", "ns"
  float_text(x)               Arrow's float64 -> string text of x (no integral rewrite)
"""
import datetime
import decimal
import math
import re

import numpy as np

__all__ = ["canonical", "canonical_float32", "canonical_half", "canonical_ticks",
           "canonical_text", "float_text", "EXACT"]

EXACT = 2 ** 53  # integral floats up to this magnitude are written as integers

# RFC 8259 section 6, written out independently of values.NUMBER.
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?P<frac>\.\d+)?(?P<exp>[eE][+-]?\d+)?", re.ASCII)
_ZONED = re.compile(
    r"(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})[T ](?P<h>\d{2}):(?P<mi>\d{2})"
    r"(?::(?P<s>\d{2})(?:\.(?P<f>\d{1,9}))?)?"
    r"(?:(?P<z>Z)|(?P<sign>[+-])(?P<oh>\d{2})(?::?(?P<om>\d{2}))?)", re.ASCII)
_PER_SECOND = {"s": 1, "ms": 10 ** 3, "us": 10 ** 6, "ns": 10 ** 9}


def canonical(value):
  """Canonical text of one value: a str, bytes (non-UTF-8 bytes only) or None."""
  if value is None:
    return None
  if isinstance(value, bool):  # before int: bool is an int in Python
    return "true" if value else "false"
  if isinstance(value, int):
    return str(value)
  if isinstance(value, float):
    return _float(value)
  if isinstance(value, decimal.Decimal):
    return canonical_text(_decimal_text(value))
  if isinstance(value, datetime.datetime):
    return _datetime(value)
  if isinstance(value, datetime.date):
    return _seconds_text(_days(value.year, value.month, value.day) * 86400 * 10 ** 9)
  if isinstance(value, bytes):
    try:
      return canonical_text(value.decode("utf-8"))
    except UnicodeDecodeError:  # not text: bytes compare as bytes
      return value
  if isinstance(value, str):
    return canonical_text(value)
  raise TypeError(f"no canonical text for {type(value).__name__}")


def canonical_float32(x):
  """Canonical text of x stored as a float32: the float64 of its shortest float32 text."""
  return _float(float(str(np.float32(x))))


def canonical_half(x):
  """Canonical text of x stored as a float16: the float64 of its shortest float16 text."""
  return _float(float(str(np.float16(x))))


def canonical_ticks(ticks, unit):
  """Canonical text of a timestamp of `ticks` counts of `unit` since 1970-01-01 UTC."""
  return _seconds_text(ticks * (10 ** 9 // _PER_SECOND[unit]))


def canonical_text(text):
  """Canonical text of a text value: JSON numbers and zoned instants rewritten."""
  m = _JSON_NUMBER.fullmatch(text)
  if m:
    if m.group("frac") is None and m.group("exp") is None:
      return str(int(text))  # an integer of any length keeps its digits; "-0" -> "0"
    return _float(float(text))  # out of range: inf or 0, as a float64 reader has it
  nanos = _instant_nanos(text)
  if nanos is not None:
    return _seconds_text(nanos)
  return text


def float_text(x):
  """Arrow's float64 -> string text: shortest round-trip digits (Python repr's), plain when the
  scientific exponent e has -7 < e < 10, else d[.ddd]e+X / d[.ddd]e-X."""
  x = float(x)  # repr of a numpy float is not its digits
  if math.isnan(x):
    return "nan"
  if math.isinf(x):
    return "inf" if x > 0 else "-inf"
  sign = "-" if math.copysign(1.0, x) < 0 else ""
  if x == 0:
    return sign + "0"
  _, digit_tuple, exp = decimal.Decimal(repr(abs(x))).as_tuple()
  digits = "".join(map(str, digit_tuple)).lstrip("0")
  stripped = digits.rstrip("0")
  exp += len(digits) - len(stripped)
  digits = stripped
  e = len(digits) - 1 + exp  # x = d.ddd * 10**e
  if -7 < e < 10:
    if exp >= 0:
      body = digits + "0" * exp
    elif e >= 0:
      body = digits[:e + 1] + "." + digits[e + 1:]
    else:
      body = "0." + "0" * (-e - 1) + digits
  else:
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    body = f"{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"
  return sign + body


def _float(x):
  if math.isfinite(x) and x == math.floor(x) and abs(x) <= EXACT:
    return str(int(x))  # -0.0 -> "0"
  return float_text(x)


def _decimal_text(d):
  """A decimal's value as JSON-number text: its digits as written (scale kept), so the text rule
  decides ("1.50" -> "1.5", "100" -> "100")."""
  if not d.is_finite():
    raise ValueError(f"decimal {d} has no canonical text")
  return format(d, "f")


def _days(y, m, d):
  """Days from 1970-01-01 to the proleptic Gregorian date (y, m, d) (Hinnant's days_from_civil)."""
  y -= m <= 2
  era = y // 400
  yoe = y - era * 400
  doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
  doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
  return era * 146097 + doe - 719468


def _month_days(y, m):
  if m == 2:
    return 29 if (y % 4 == 0 and y % 100 != 0) or y % 400 == 0 else 28
  return 30 if m in (4, 6, 9, 11) else 31


def _instant_nanos(text):
  """Nanoseconds since the epoch of a zoned ISO-8601 date and time, or None when `text` is not
  one (a naive time, a date alone, a field out of range)."""
  m = _ZONED.fullmatch(text)
  if not m:
    return None
  y, mo, d, h, mi = (int(m.group(k)) for k in ("y", "mo", "d", "h", "mi"))
  s = int(m.group("s") or 0)
  if not (1 <= mo <= 12 and 1 <= d <= _month_days(y, mo) and h < 24 and mi < 60 and s < 60):
    return None
  offset = 0
  if m.group("sign"):
    oh, om = int(m.group("oh")), int(m.group("om") or 0)
    if oh >= 24 or om >= 60:
      return None
    offset = (oh * 3600 + om * 60) * (1 if m.group("sign") == "+" else -1)
  frac = int((m.group("f") or "").ljust(9, "0"))
  seconds = _days(y, mo, d) * 86400 + h * 3600 + mi * 60 + s - offset
  return seconds * 10 ** 9 + frac


def _datetime(value):
  """A datetime's Unix seconds; a naive datetime is read as UTC (an Arrow timestamp without a
  zone holds UTC wall-clock ticks)."""
  if value.tzinfo is not None:
    value = value.astimezone(datetime.timezone.utc)
  seconds = _days(value.year, value.month, value.day) * 86400 + value.hour * 3600 + \
      value.minute * 60 + value.second
  return _seconds_text(seconds * 10 ** 9 + value.microsecond * 1000)


def _seconds_text(nanos):
  """Exact decimal seconds of a nanosecond count: "1362683700", "-1.5", "0.000000001"."""
  sign = "-" if nanos < 0 else ""
  whole, frac = divmod(abs(nanos), 10 ** 9)
  text = str(whole)
  if frac:
    text += "." + str(frac).rjust(9, "0").rstrip("0")
  return sign + text
