"""The canonical value model: what a cell says, written the one way every source can say it.

Sources differ in what they can express. CSV holds only text; JSON holds numbers, booleans,
strings and null; Parquet and Arrow hold typed columns (integers, floats of two widths,
booleans, timestamps, dates, decimals); tf.Example holds int64, float32 and bytes lists. The
raw stage compares records across sources, so it fingerprints each cell's canonical text
(docs/fingerprint.md, "Canonical values"; golden vectors in tests/golden/canonical_values.json):

  null                                 -> null (the readers make an empty list null and a
                                          one-element list its element)
  an integer (any length), or a float whose value is an integer of magnitude <= 2**53
                                       -> its decimal digits: "12", "-3" (-0.0 -> "0")
  any other float                      -> the shortest text that reads back as the same
                                          float64 (Arrow's float64 -> string): "12.45",
                                          "1e+20", "nan", "inf"
  a float32 (float16)                  -> first the float64 of its shortest float32
                                          (float16) text (float32 12.45 -> 12.45: what the
                                          writer wrote)
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

__all__ = ["canonical_text", "source_text", "ScalarError", "NUMBER", "INSTANT", "is_text",
           "is_number"]

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


def is_text(typ):
  """Whether an Arrow type holds text cells of the model: string or binary, either offset
  width (the cells canonical_text reads as text, source_text as the source wrote them)."""
  return pa.types.is_string(typ) or pa.types.is_large_string(typ) or \
      pa.types.is_binary(typ) or pa.types.is_large_binary(typ)


def is_number(typ):
  """Whether an Arrow type holds number cells: an integer of any width or a float."""
  return pa.types.is_integer(typ) or pa.types.is_floating(typ)


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
    except pa.ArrowInvalid:  # some cell is not UTF-8: that cell compares as bytes, the rest
      return _mixed_binary(arr)  # as text (a cell never depends on its neighbours)
  if pa.types.is_boolean(t):
    return pc.if_else(arr, "true", "false")
  if pa.types.is_integer(t):
    return arr.cast(pa.string())
  if pa.types.is_floating(t):
    if t == pa.float16():  # Arrow's float16 text is not the shortest: numpy's repr is
      arr = pa.array(np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float16)
                     .astype(str), pa.string(), mask=arr.is_null().to_numpy(
                         zero_copy_only=False)).cast(pa.float64())
    elif t != pa.float64():  # float32: the float64 of its shortest float32 text
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


def _seconds_text(whole, frac, negative, digits):
  """Exact decimal text of whole + frac / 10**digits seconds (whole truncated toward zero,
  0 <= frac < 10**digits, negative: the value's sign, which "-0.5" needs written by hand)."""
  whole_text = pc.if_else(pc.fill_null(pc.and_(negative, pc.equal(whole, 0)), False), "-0",
                          whole.cast(pa.string()))
  frac_text = pc.utf8_rtrim(pc.utf8_lpad(frac.cast(pa.string()), digits, "0"), "0")
  has_frac = pc.fill_null(pc.not_equal(frac, 0), False)
  return pc.if_else(has_frac, pc.binary_join_element_wise(whole_text, frac_text, "."),
                    whole_text)


def _instant_text(ts):
  """Unix seconds of a timestamp array as exact decimal text ("1362683700", "…700.5")."""
  unit = ts.type.unit
  per_second = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": _NS}[unit]
  ticks = ts.cast(pa.int64())
  if per_second == 1:
    return ticks.cast(pa.string())
  whole = pc.divide(ticks, per_second)  # integer division truncates toward zero
  frac = pc.abs(pc.subtract(ticks, pc.multiply(whole, per_second)))  # |frac| < per_second
  return _seconds_text(whole, frac, pc.less(ticks, 0), len(str(per_second)) - 1)


def _mixed_binary(arr):
  """Canonical text of a binary array holding some cells that are not UTF-8: those stay bytes,
  the others are canonical text (as binary: the fingerprint codes text and bytes alike). Only
  such rare arrays pay the per-cell UTF-8 check."""
  cells = arr.to_pylist()
  utf8 = np.zeros(len(cells), dtype=bool)
  for i, c in enumerate(cells):
    if c is not None:
      try:
        c.decode("utf-8")
        utf8[i] = True
      except UnicodeDecodeError:
        pass
  idx = np.flatnonzero(utf8)
  if not len(idx):
    return arr
  text = _canonical_strings(arr.take(pa.array(idx)).cast(pa.string())).cast(pa.binary())
  out = list(cells)
  for i, v in zip(idx, text.to_pylist()):
    out[i] = v
  return pa.array(out, pa.binary())


# Number text that is already canonical: an integer within int64 without leading zeros, or a
# decimal of at most 15 significant digits (at most 16 characters without the sign: its float64
# prints back the same digits), no trailing zero, 1e-1 <= |x| < 1e9 (where the float text is
# positional). Measured: the raw stage of a 1M-row taxi CSV spent 5.0 s in canonical text through
# the general path, mostly regexes and casts over columns already canonical; 1.5 s with this.
_CANONICAL_NUMBER = (r"^-?(0|[1-9][0-9]{0,17})$|^-?[1-9][0-9]{0,8}\.[0-9]*[1-9]$|"
                     r"^-?0\.[1-9]([0-9]*[1-9])?$")
_SIGNIFICANT = 16  # characters of a _CANONICAL_NUMBER decimal, sign excluded


def _canonical_already(s):
  """bool[n] Arrow array: which values of pa.string array `s` are canonical number text (null
  values count as canonical: they stay null)."""
  unsigned = pc.subtract(pc.utf8_length(s), pc.starts_with(s, "-").cast(pa.int32()))
  integer = pc.match_substring_regex(s, _INTEGER)
  ok = pc.and_(pc.match_substring_regex(s, _CANONICAL_NUMBER),
               pc.or_(integer, pc.less_equal(unsigned, _SIGNIFICANT)))
  return pc.fill_null(ok, True)


def _canonical_strings(s):
  """Canonical text of a pa.string array: JSON numbers and zoned ISO instants rewritten. Values
  already canonical numbers, and text that starts with neither a digit nor "-" (so is neither
  a number nor an instant), are kept as they are; only the others take the general path."""
  candidate = pc.fill_null(pc.match_substring_regex(s, "^[-0-9]"), False)
  if not pc.any(candidate).as_py():
    return s
  fast = _canonical_already(s)
  minus_zero = pc.fill_null(pc.equal(s, "-0"), False)  # the one fast text not canonical
  base = pc.if_else(minus_zero, "0", s) if pc.any(minus_zero).as_py() else s
  slow = pc.and_(candidate, pc.invert(fast))
  if not pc.any(slow).as_py():
    return base
  return pc.replace_with_mask(base, slow, _general_strings(s.filter(slow)))


def _general_strings(s):
  """Canonical text of a pa.string array by the general rules (numbers, instants, text)."""
  number = pc.fill_null(pc.match_substring_regex(s, NUMBER), False)
  # An instant holds a colon: the regex runs only where one is (a plain substring search).
  instant = pc.fill_null(pc.and_(pc.match_substring(s, ":"),
                                 pc.match_substring_regex(s, INSTANT)), False) \
      if pc.any(pc.match_substring(s, ":")).as_py() else pa.array(np.zeros(len(s), bool))
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
  # Longer integer text keeps its digits (a uint64 or decimal column prints them so).
  long_int = pc.fill_null(pc.match_substring_regex(s, r"^-?[1-9][0-9]{18,}$"), False)
  rest = pc.invert(pc.or_(integer, long_int))
  if not pc.any(rest).as_py():
    return pc.if_else(integer, ints, s)
  text = _float_text(pc.if_else(rest, s, "0").cast(pa.float64()))
  return pc.if_else(integer, ints, pc.if_else(long_int, s, text))


def _instants_of(s):
  """Unix-seconds text of zoned ISO-8601 strings (every value matches INSTANT): the whole
  seconds cast at unit "s" (any year), the fraction's digits added exactly, so no year or
  fraction length falls outside a unit's range. A value that is not a real instant (February
  30th) stays as it is: the array is bisected, so a value never depends on its neighbours."""
  try:
    secs = pc.replace_substring_regex(s, r"\.[0-9]+", "").cast(
        pa.timestamp("s", tz="UTC")).cast(pa.int64())
  except pa.ArrowInvalid:
    if len(s) == 1:
      return s
    mid = len(s) // 2
    return pa.concat_arrays([_instants_of(s.slice(0, mid)), _instants_of(s.slice(mid))])
  digits = pc.struct_field(pc.extract_regex(s, r"\.(?P<f>[0-9]+)"), "f")
  frac = pc.fill_null(pc.utf8_rpad(digits, 9, "0").cast(pa.int64()), 0)  # INSTANT: <= 9 digits
  # secs is the floor; before 1970 a fraction moves the truncated whole one second up
  borrow = pc.and_(pc.less(secs, 0), pc.greater(frac, 0))
  whole = pc.if_else(borrow, pc.add(secs, 1), secs)
  frac = pc.if_else(borrow, pc.subtract(_NS, frac), frac)
  return _seconds_text(whole, frac, pc.less(secs, 0), 9)
