"""The canonical value model (spec/values.py) against its golden vectors and an independent
reference (tests/canonical_ref.py); typing of every source alike (spec/schema.py); event time
(spec/event_time.py)."""
import datetime
import decimal
import json
import math
import os
import re

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from tests import canonical_ref as ref
from transforms.spec import event_time, schema, values

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "canonical_values.json")

def _vectors():
  with open(GOLDEN, encoding="utf-8") as f:  # a missing golden file fails, never regenerates
    return json.load(f)["vectors"]


def _arrow_type(name):
  m = re.fullmatch(r"timestamp\[(\w+), tz=(.+)\]", name)
  if m:
    return pa.timestamp(m.group(1), tz=m.group(2))
  m = re.fullmatch(r"decimal128\((\d+), (-?\d+)\)", name)
  if m:
    return pa.decimal128(int(m.group(1)), int(m.group(2)))
  return pa.type_for_alias(name)


def _ticks(iso, unit):
  return int(np.datetime64(iso, unit).astype(np.int64))


def _column(vector):
  """A one-value Arrow array of the vector's type."""
  t, v = _arrow_type(vector["type"]), vector["value"]
  if v is None:
    return pa.array([None], t)
  if pa.types.is_binary(t):
    return pa.array([bytes.fromhex(v)], t)
  if pa.types.is_floating(t):
    return pa.array([float(v)], pa.float64()).cast(t, safe=False)
  if pa.types.is_timestamp(t):
    return pa.array([_ticks(v, t.unit)], pa.int64()).cast(t)
  if pa.types.is_date(t):
    return pa.array([datetime.date.fromisoformat(v)], t)
  if pa.types.is_decimal(t):
    return pa.array([decimal.Decimal(v)], t)
  return pa.array([v], t)


def _reference(vector):
  """The reference's canonical text of the vector's value."""
  t, v = _arrow_type(vector["type"]), vector["value"]
  if v is None:
    return None
  if pa.types.is_binary(t):
    return ref.canonical(bytes.fromhex(v))
  if t == pa.float32():
    return ref.canonical_float32(float(v))
  if t == pa.float16():
    return ref.canonical_half(float(v))
  if pa.types.is_floating(t):
    return ref.canonical(float(v))
  if pa.types.is_timestamp(t):
    return ref.canonical_ticks(_ticks(v, t.unit), t.unit)
  if pa.types.is_date(t):
    return ref.canonical(datetime.date.fromisoformat(v))
  if pa.types.is_decimal(t):
    return ref.canonical(decimal.Decimal(v))
  return ref.canonical(v)


def _expected(vector):
  return bytes.fromhex(vector["canonical_hex"]) if "canonical_hex" in vector \
      else vector["canonical"]


def _id(vector):
  return f"{vector['type']}:{vector['value']!r}"


def _params():
  return [pytest.param(v, id=_id(v)) for v in _vectors()]


@pytest.mark.parametrize("vector", _params())
def test_values_matches_golden(vector):
  assert values.canonical_text(_column(vector)).to_pylist() == [_expected(vector)]


@pytest.mark.parametrize("vector", _params())
def test_reference_matches_golden(vector):
  assert _reference(vector) == _expected(vector)


# ---- values.py and the reference agree on random values ------------------------------------

_SETTINGS = settings(max_examples=150, deadline=None)
_SPECIAL = [0.0, -0.0, 0.1, 12.45, 1e-7, 1.5e-7, 1e-6, 9999999999.5, 1e10, 12345678901.5,
            2.0 ** 53, 2.0 ** 53 + 2, -(2.0 ** 53), 1e16, 1e20, 5e-324, 1.7976931348623157e308,
            math.nan, math.inf, -math.inf]


def _agree(arr, expected):
  got = values.canonical_text(arr).to_pylist()
  assert got == expected


@_SETTINGS
@given(st.lists(st.integers(-2 ** 63, 2 ** 63 - 1), max_size=30),
       st.lists(st.integers(0, 2 ** 64 - 1), max_size=10))
def test_agrees_on_ints(ints, uints):
  _agree(pa.array(ints, pa.int64()), [ref.canonical(i) for i in ints])
  _agree(pa.array(uints, pa.uint64()), [ref.canonical(i) for i in uints])


@_SETTINGS
@given(st.lists(st.floats() | st.sampled_from(_SPECIAL) |
                st.integers(-2 ** 60, 2 ** 60).map(float), max_size=30))
def test_agrees_on_floats(xs):
  _agree(pa.array(xs, pa.float64()), [ref.canonical(x) for x in xs])


@_SETTINGS
@given(st.lists(st.floats(width=32) | st.sampled_from([12.45, 0.1, 16777217.0, 1e10, -0.0]),
                max_size=30))
def test_agrees_on_float32(xs):
  arr = pa.array(xs, pa.float64()).cast(pa.float32(), safe=False)
  _agree(arr, [ref.canonical_float32(x) for x in xs])


_digits = st.text("0123456789", min_size=1, max_size=22)
_number_like = st.builds(
    lambda sign, whole, frac, exp, pad: pad[0] + sign + whole + frac + exp + pad[1],
    st.sampled_from(["", "", "-", "+"]),
    _digits | st.just(""),
    st.just("") | st.just(".") | _digits.map(lambda d: "." + d),
    st.just("") | st.builds(lambda e, s, d: e + s + d, st.sampled_from("eE"),
                            st.sampled_from(["", "+", "-"]), st.text("0123456789", max_size=3)),
    st.sampled_from([("", "")] * 8 + [(" ", ""), ("", " ")]))


@_SETTINGS
@given(st.lists(_number_like |
                st.sampled_from(["nan", "inf", "true", "2013-03-07T19:15:00", "x", ""]),
                max_size=30))
def test_agrees_on_number_like_text(texts):
  _agree(pa.array(texts, pa.string()), [ref.canonical(t) for t in texts])
  _agree(pa.array([t.encode() for t in texts], pa.binary()), [ref.canonical(t) for t in texts])


def _instant_text(years, frac_digits):
  def build(dt, frac, sep, zone):
    text = f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}{sep}{dt.hour:02d}:{dt.minute:02d}"
    if frac is not None:
      text += f":{dt.second:02d}" + ("." + frac if frac else "")
    return text + zone
  zones = st.just("Z") | st.builds(
      lambda s, h, m, colon: f"{s}{h:02d}{colon}{m:02d}", st.sampled_from("+-"),
      st.integers(0, 23), st.integers(0, 59), st.sampled_from([":", ""]))
  fracs = st.none() | st.text("0123456789", max_size=frac_digits)  # None: no seconds
  return st.builds(build, st.datetimes(datetime.datetime(years[0], 1, 1),
                                       datetime.datetime(years[1], 12, 31)),
                   fracs, st.sampled_from("T "), zones)


@_SETTINGS
@given(st.lists(_instant_text((1678, 2261), 9), max_size=20))
def test_agrees_on_zoned_iso_text(texts):
  _agree(pa.array(texts, pa.string()), [ref.canonical(t) for t in texts])


@_SETTINGS
@given(st.lists(_instant_text((1, 9999), 9), max_size=20))
def test_agrees_on_zoned_iso_text_of_any_year(texts):
  _agree(pa.array(texts, pa.string()), [ref.canonical(t) for t in texts])


@_SETTINGS
@given(st.sampled_from(["s", "ms", "us", "ns"]),
       st.lists(st.integers(-2 ** 63 + 1, 2 ** 63 - 1) | st.integers(-10 ** 12, 10 ** 12),
                max_size=20))
def test_agrees_on_timestamps(unit, ticks):
  arr = pa.array(ticks, pa.int64()).cast(pa.timestamp(unit))
  _agree(arr, [ref.canonical_ticks(t, unit) for t in ticks])
  _agree(arr.cast(pa.timestamp(unit, tz="America/Chicago")),
         [ref.canonical_ticks(t, unit) for t in ticks])


@pytest.mark.parametrize("cells,expected", [
    (pa.array(["1.50", "x", "2013-03-07T19:15:00Z", None, "2013-03-07T19:15:00"]),
     ["1.5", "x", "1362683700", None, "2013-03-07T19:15:00"]),
    (pa.array([b"1.50", b"\xff"]), ["1.5", b"\xff"]),
    (pa.array(["1500-01-01T00:00:00Z", "2013-03-07T19:15:00.123456789Z"]),
     ["-14831769600", "1362683700.123456789"]),
    (pa.array(["2013-02-30T00:00:00Z", "2013-03-07T19:15:00Z"]),
     ["2013-02-30T00:00:00Z", "1362683700"]),
    (pa.array(["9223372036854775808", "1.50"]), ["9223372036854775808", "1.5"]),
], ids=["mixed", "utf8_beside_non_utf8", "ns_fraction_beside_year_1500", "invalid_date_beside_date",
        "beyond_int64_beside_decimal"])
def test_a_cell_does_not_depend_on_its_neighbours(cells, expected):
  def coded(v):  # the fingerprint codes text and bytes alike
    return v.encode() if isinstance(v, str) else v
  together = values.canonical_text(cells).to_pylist()
  alone = [values.canonical_text(cells.slice(i, 1)).to_pylist()[0] for i in range(len(cells))]
  assert [coded(v) for v in together] == [coded(v) for v in alone] == [coded(v) for v in expected]


# ---- what sources say alike compares equal -------------------------------------------------

@pytest.mark.parametrize("arrays", [
    [pa.array(["0.0"]), pa.array(["0"]), pa.array(["-0"]), pa.array([0]), pa.array([0.0]),
     pa.array([-0.0]), pa.array([0.0], pa.float32()), pa.array([b"0.0"])],
    [pa.array(["12.45"]), pa.array(["1.245e1"]), pa.array([12.45]),
     pa.array([12.45], pa.float32()), pa.array([decimal.Decimal("12.450")])],
    [pa.array(["1e3"]), pa.array(["1000.0"]), pa.array([1000]), pa.array([1000.0]),
     pa.array([1000.0], pa.float32())],
    [pa.array(["1362683700"]), pa.array([1362683700]), pa.array(["2013-03-07T19:15:00Z"]),
     pa.array(["2013-03-07T20:15:00+01:00"]), pa.array([1362683700], pa.timestamp("s")),
     pa.array([1362683700000], pa.int64()).cast(pa.timestamp("ms", tz="UTC"))],
    [pa.array(["true"]), pa.array([True])],
], ids=["zero", "12.45", "1000", "instant", "true"])
def test_sources_compare_equal_after_canonicalisation(arrays):
  texts = {values.canonical_text(a).to_pylist()[0] for a in arrays}
  assert len(texts) == 1, texts


def test_what_no_source_can_say_stays_apart():
  for a, b in [(".5", "0.5"), ("2013-03-07T19:15:00", "2013-03-07T19:15:00Z"), ("01", "1"),
               ("1.5 ", "1.5")]:
    assert values.canonical_text(pa.array([a, b])).to_pylist() == [a, ref.canonical(b)]
    assert ref.canonical(a) == a != ref.canonical(b)


# ---- spec/schema.type_column types every source alike --------------------------------------

_SOURCES = {
    "string": lambda xs: pa.array([None if x is None else str(x) for x in xs], pa.string()),
    "int64": lambda xs: pa.array(xs, pa.int64()),
    "float64": lambda xs: pa.array(xs, pa.float64()),
    "float32": lambda xs: pa.array(xs, pa.float32()),
}


@pytest.mark.parametrize("source", sorted(_SOURCES))
def test_type_column_int_alike(source):
  typed, bad = schema.type_column(_SOURCES[source]([12, -3, None, 0]), schema.INT)
  assert typed.type == pa.int64() and typed.to_pylist() == [12, -3, None, 0]
  assert list(bad) == []


@pytest.mark.parametrize("source", ["string", "float64", "float32"])
def test_type_column_float_alike(source):
  typed, bad = schema.type_column(_SOURCES[source]([12.45, -0.0, None, 1.5]), schema.FLOAT)
  assert typed.type == pa.float64() and typed.to_pylist() == [12.45, 0.0, None, 1.5]
  assert list(bad) == []


def test_type_column_int_refuses_fractions_and_text_alike():
  for column in [pa.array(["1.5", "7", "x"]), pa.array([1.5, 7.0, math.nan])]:
    typed, bad = schema.type_column(column, schema.INT)
    assert list(bad) == [0, 2] and typed.to_pylist() == [None, 7, None]


def test_type_column_instants_alike():
  arrays = [pa.array([1362683700]), pa.array(["2013-03-07T19:15:00Z"]),
            pa.array(["2013-03-07T20:15:00+0100"]), pa.array([1362683700], pa.timestamp("s")),
            pa.array([1362683700000], pa.int64()).cast(pa.timestamp("ms"))]
  for a in arrays:
    assert schema.type_column(a, schema.INT)[0].to_pylist() == [1362683700]
  typed, bad = schema.type_column(pa.array([1362683700500], pa.int64())
                                  .cast(pa.timestamp("ms")), schema.FLOAT)
  assert typed.to_pylist() == [1362683700.5] and list(bad) == []


def test_type_column_bools_alike():
  for a in [pa.array([True, False]), pa.array(["true", "false"])]:
    assert schema.type_column(a, schema.BYTES)[0].to_pylist() == ["true", "false"]
    assert list(schema.type_column(a, schema.INT)[1]) == [0, 1]


def test_type_column_bytes_keep_the_source_text():
  assert schema.type_column(pa.array(["1.10", "01"]), schema.BYTES)[0].to_pylist() == \
      ["1.10", "01"]
  assert schema.type_column(pa.array([1.10]), schema.BYTES)[0].to_pylist() == ["1.1"]


# ---- spec/event_time.py --------------------------------------------------------------------

T = 1362683700  # 2013-03-07T19:15:00Z


@pytest.mark.parametrize("form,arr,seconds", [
    ("seconds", pa.array([T, None]), [T, 0]),
    ("seconds", pa.array([float(T), None]), [T, 0]),
    ("ms", pa.array([T * 1000 + 999, -1500]), [T, -2]),  # floored
    ("us", pa.array([T * 10 ** 6 + 1]), [T]),
    ("ns", pa.array([T * 10 ** 9 + 5, None]), [T, 0]),
    ("iso8601", pa.array(["2013-03-07T19:15:00Z", "2013-03-07T20:15:00.9+01:00", None]),
     [T, T, 0]),
    ("iso8601", pa.array([b"2013-03-07T19:15:00Z"]), [T]),
    ("timestamp", pa.array([T * 1000 + 500], pa.int64()).cast(pa.timestamp("ms")), [T]),
    ("timestamp", pa.array([T], pa.int64()).cast(pa.timestamp("s", tz="Asia/Tokyo")), [T]),
    ("timestamp", pa.array([datetime.date(2013, 3, 7)]), [T - 69300]),
], ids=["seconds", "seconds_float", "ms", "us", "ns", "iso8601", "iso8601_binary",
        "timestamp_ms", "timestamp_zoned", "date"])
def test_to_seconds_each_format(form, arr, seconds):
  got, has, bad = event_time.to_seconds(arr, form)
  assert got.tolist() == seconds
  assert has.tolist() == [v is not None for v in arr.to_pylist()]
  assert not bad.any()


@pytest.mark.parametrize("zone,seconds", [
    ("UTC", T),
    ("Europe/Paris", T - 3600),
    ("America/Chicago", T + 6 * 3600),  # CST in March before the DST switch
])
def test_naive_iso_is_read_in_the_declared_zone(zone, seconds):
  arr = pa.array(["2013-03-07T19:15:00", "2013-03-07 19:15:00", "2013-03-07T19:15:00Z"])
  got, _, bad = event_time.to_seconds(arr, "iso8601", zone)
  assert got.tolist() == [seconds, seconds, T] and not bad.any()


def test_to_seconds_marks_values_that_are_not_instants():
  got, has, bad = event_time.to_seconds(pa.array([float(T), 1.5, math.nan]), "seconds")
  assert bad.tolist() == [False, True, True] and has.tolist() == [True, False, False]
  assert got.tolist() == [T, 0, 0]
  _, _, bad = event_time.to_seconds(pa.array(["2013-03-07T19:15:00Z", "soon", "2013-02-30"]),
                                    "iso8601")
  assert bad.tolist() == [False, True, True]


def test_to_seconds_refuses_a_type_that_does_not_suit_the_format():
  with pytest.raises(event_time.EventTimeError, match="needs text"):
    event_time.to_seconds(pa.array([T]), "iso8601")
  with pytest.raises(event_time.EventTimeError, match="needs a number"):
    event_time.to_seconds(pa.array(["1"]), "seconds")


def _one_line_error(arr, form, zone="UTC"):
  with pytest.raises(event_time.EventTimeError) as e:
    event_time.check_values(arr, "ts", form, zone)
  message = str(e.value)
  assert "\n" not in message and "'ts'" in message
  return message


def test_check_values_refuses_ms_declared_as_seconds_with_a_hint():
  message = _one_line_error(pa.array([T * 1000]), "seconds")
  assert "outside the years 1971-2200" in message
  assert "it reads as a plausible time in 'ms'" in message
  assert "it reads as a plausible time in 'us'" in \
      _one_line_error(pa.array([T * 10 ** 6]), "seconds")


def test_check_values_errors_without_a_hint():
  assert "plausible" not in _one_line_error(pa.array([0]), "seconds")  # 1970: too early
  assert "is not an instant of EVENT_TIME_FORMAT 'iso8601'" in \
      _one_line_error(pa.array(["2013-03-07T19:15:00Z", "noon"]), "iso8601")
  assert "'noon'" in _one_line_error(pa.array(["noon"]), "iso8601")
  assert "Unix seconds" not in _one_line_error(pa.array(["noon"]), "iso8601")


def test_check_values_says_where_digits_for_iso_text_come_from():
  """A timestamp or number held in a text column is its Unix seconds (the canonical value)."""
  for text in (str(T), f"{T}.5", f"-{T}", str(T).encode()):
    message = _one_line_error(pa.array([text]), "iso8601")
    assert message.endswith("(Unix seconds: the text a timestamp or number in the source "
                            "becomes; the source must hold the ISO-8601 text)"), text


def test_check_values_accepts_plausible_instants():
  assert event_time.check_values(pa.array([T, None]), "ts", "seconds") is None
  assert event_time.check_values(pa.array(["2013-03-07T19:15:00"]), "ts", "iso8601",
                                 "Europe/Paris") is None


@pytest.mark.parametrize("column,form,zone,match", [
    ("", "seconds", "UTC", "EVENT_TIME_COLUMN"),
    ("ts", "minutes", "UTC", "EVENT_TIME_FORMAT 'minutes' is not one of"),
    ("ts", "iso8601", "Mars/Olympus", "not a known time zone"),
])
def test_check_declaration(column, form, zone, match):
  with pytest.raises(event_time.EventTimeError, match=match):
    event_time.check_declaration(column, form, zone)
  event_time.check_declaration("ts", "iso8601", "Europe/Paris")
