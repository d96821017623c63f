"""The canonical value model: what a cell says, written the one way every source can say it.

Sources differ in what they can express. CSV holds only text; JSON holds numbers, booleans,
strings and null; Parquet and Arrow hold typed columns (integers, floats of two widths,
booleans, timestamps, dates, decimals); tf.Example holds int64, float32 and bytes lists. The
raw stage compares records across sources, so it fingerprints each cell's canonical text
(docs/fingerprint.md, "Canonical values"; golden vectors in tests/golden/canonical_values.json):

  null, an empty list                  -> null
  an integer, or a float whose value is an integer of magnitude <= 2**53
                                       -> its decimal digits: "12", "-3" (-0.0 -> "0")
  any other float                      -> the shortest text that reads back as the same
                                          float64 (Arrow's float64 -> string): "12.45",
                                          "1e+20", "nan", "inf"
  a float32                            -> first the float64 of its shortest float32 text
                                          (float32 12.45 -> 12.45: what the writer wrote)
  a boolean                            -> "true" / "false"
  a timestamp or date, or text that is an ISO-8601 instant with a zone (Z, +01:00, +0100)
                                       -> its Unix seconds as a number: "1362683700",
                                          "1362683700.5"
  text that is a JSON number           -> that number, as above: "1.50" -> "1.5", "0.0" -> "0"
  any other text, bytes                -> as it is

So a CSV cell "0.0", a JSON 0 and a tf.Example float 0.0 compare equal, and so do an epoch
integer and the same instant written in ISO-8601 with its zone. What no source can say stays
apart: ".5" is not a JSON number and stays text; naive ISO text (no zone) is not an instant.

Typing to the dataset's schema (the parse stage, spec/schema.py) reads INT and FLOAT from the
canonical text and BYTES from the source's own text (a string keeps "1.10"), so both stages
follow the same rule for every source.
"""
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["canonical_text", "source_text", "ScalarError", "NUMBER", "INSTANT"]

# JSON's number grammar (RFC 8259 section 6): no leading zeros, no leading '+', no '.5'.
NUMBER = r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$"
_INTEGER = r"^-?(0|[1-9][0-9]{0,17})$"  # at most 18 digits: always within int64
# ISO-8601 date and time with a zone designator (what Arrow's timestamp cast accepts).
INSTANT = (r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,9})?)?"
           r"(Z|[+-][0-9]{2}(:?[0-9]{2})?)$")
_EXACT = float(2 ** 53)  # floats of larger magnitude are not all integers
_NS = 10 ** 9


class ScalarError(ValueError):
  """A column whose type has no scalar canonical value (a list, a struct, a map)."""


def canonical_text(arr):
  """The canonical text (pa.string, or pa.binary for bytes that are not UTF-8 text) of each
  value of Arrow array `arr`; nulls stay null. Vectorised: no per-row Python."""
  if isinstance(arr, pa.ChunkedArray):
    arr = arr.combine_chunks()
  t = arr.type
  if pa.types.is_dictionary(t):
    return canonical_text(arr.dictionary_decode())
  if pa.types.is_null(t):
    return pa.nulls(len(arr), pa.string())
  if pa.types.is_string(t) or pa.types.is_large_string(t):
    return _canonical_strings(arr.cast(pa.string()))
  if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
    arr = arr.cast(pa.binary())
    try:
      return _canonical_strings(arr.cast(pa.string()))
    except pa.ArrowInvalid:  # not UTF-8: bytes compare as bytes
      return arr
  if pa.types.is_boolean(t):
    return pc.if_else(arr, "true", "false")
  if pa.types.is_integer(t):
    return arr.cast(pa.string())
  if pa.types.is_floating(t):
    if t != pa.float64():  # float16/float32: the float64 of the shortest text of that width
      arr = arr.cast(pa.string()).cast(pa.float64())
    return _float_text(arr)
  if pa.types.is_timestamp(t):
    return _instant_text(arr)
  if pa.types.is_date(t):
    return _instant_text(arr.cast(pa.timestamp("s")))
  if pa.types.is_decimal(t):
    return _canonical_strings(arr.cast(pa.string()))
  raise ScalarError(f"type {t} is not a scalar")


def source_text(arr):
  """The text a BYTES column keeps: text and bytes as they are, other types canonical."""
  if isinstance(arr, pa.ChunkedArray):
    arr = arr.combine_chunks()
  t = arr.type
  if pa.types.is_dictionary(t):
    return source_text(arr.dictionary_decode())
  if pa.types.is_string(t) or pa.types.is_large_string(t):
    return arr.cast(pa.string())
  if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
    return arr.cast(pa.binary())
  return canonical_text(arr)


def _float_text(f):
  """Canonical text of a float64 array."""
  integral = pc.and_(pc.is_finite(f), pc.and_(pc.equal(pc.floor(f), f),
                                              pc.less_equal(pc.abs(f), _EXACT)))
  integral = pc.fill_null(integral, False)
  as_int = pc.if_else(integral, f, 0.0).cast(pa.int64()).cast(pa.string())
  return pc.if_else(integral, as_int, f.cast(pa.string()))


def _instant_text(ts):
  """Unix seconds of a timestamp array as exact decimal text ("1362683700", "…700.5")."""
  unit = ts.type.unit
  per_second = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": _NS}[unit]
  ticks = ts.cast(pa.int64())
  if per_second == 1:
    return ticks.cast(pa.string())
  magnitude = pc.abs_checked(ticks)
  whole = pc.divide(magnitude, per_second)  # integer division of non-negative integers
  frac = pc.subtract(magnitude, pc.multiply(whole, per_second))
  digits = len(str(per_second)) - 1
  frac_text = pc.utf8_rtrim(pc.utf8_lpad(frac.cast(pa.string()), digits, "0"), "0")
  whole_text = whole.cast(pa.string())
  has_frac = pc.fill_null(pc.not_equal(frac, 0), False)
  text = pc.if_else(has_frac, pc.binary_join_element_wise(whole_text, frac_text, "."),
                    whole_text)
  negative = pc.fill_null(pc.less(ticks, 0), False)
  return pc.if_else(negative, pc.binary_join_element_wise("-", text, ""), text)


def _canonical_strings(s):
  """Canonical text of a pa.string array: JSON numbers and zoned ISO instants rewritten."""
  number = pc.fill_null(pc.match_substring_regex(s, NUMBER), False)
  instant = pc.fill_null(pc.match_substring_regex(s, INSTANT), False)
  any_number, any_instant = pc.any(number).as_py(), pc.any(instant).as_py()
  if not any_number and not any_instant:
    return s
  out = s
  if any_number:
    out = pc.if_else(number, _number_text(pc.if_else(number, s, "0")), out)
  if any_instant:
    out = pc.if_else(instant, _instants_of(pc.if_else(instant, s, "1970-01-01T00:00:00Z")),
                     out)
  return out


def _number_text(s):
  """Canonical text of JSON-number strings (every value matches NUMBER)."""
  integer = pc.fill_null(pc.match_substring_regex(s, _INTEGER), False)
  ints = pc.if_else(integer, s, "0").cast(pa.int64()).cast(pa.string())  # "-0" -> "0"
  rest = pc.invert(integer)
  if not pc.any(rest).as_py():
    return ints
  floats = pc.if_else(rest, s, "0").cast(pa.float64())
  text = _float_text(floats)
  long_ints = _long_integers(s, rest)
  if long_ints is not None:
    text = pc.if_else(long_ints[0], long_ints[1], text)
  return pc.if_else(integer, ints, text)


def _long_integers(s, rest):
  """Integers of 19+ digits that fit int64 keep their digits (an int64 column prints them so);
  larger ones are floats. Rare, so this loop runs only over those values."""
  long_int = pc.fill_null(pc.and_(rest, pc.match_substring_regex(s, r"^-?[1-9][0-9]{18}$")),
                          False)
  idx = np.flatnonzero(long_int.to_numpy(zero_copy_only=False))
  if not len(idx):
    return None
  values = s.to_pylist()
  mask = np.zeros(len(s), dtype=bool)
  texts = [None] * len(s)
  for i in idx:  # per-row only for 19-digit integers
    v = int(values[i])
    if -2 ** 63 <= v < 2 ** 63:
      mask[i], texts[i] = True, str(v)
  if not mask.any():
    return None
  return pa.array(mask), pa.array(texts, pa.string())


def _instants_of(s):
  """Unix-seconds text of zoned ISO-8601 strings (every value matches INSTANT)."""
  try:
    return _instant_text(s.cast(pa.timestamp("ns", tz="UTC")))
  except pa.ArrowInvalid:  # outside 1677..2262 at ns: microseconds cover any year
    return _instant_text(s.cast(pa.timestamp("us", tz="UTC")))
