"""Record splitting and field parsing: edge cases, provenance, and block-size invariance."""
import io
import os

import pytest
from hypothesis import given, settings, strategies as st

from tests.conftest import EDGE, TAXI_CSV
from transforms.codec import csv_records


def read_all(data, block_bytes=1 << 20):
  """(names, rows as dicts without provenance, lines, rejected) of CSV bytes."""
  names, rows, lines, rejected = None, [], [], []
  for i, block in enumerate(csv_records.iter_blocks(io.BytesIO(data), block_bytes)):
    if names is None:
      names = csv_records.parse_header(block)
      block = csv_records.without_first(block)
    batch, rej = csv_records.parse_block(block, names, 0)
    rows += [{k: r[k] for k in names} for r in batch.to_pylist()]
    lines += batch.column(csv_records.LINE_COLUMN).to_pylist()
    rejected += rej
  return names, rows, lines, rejected


def test_multi_line_quoted_field_with_escaped_quotes():
  with open(os.path.join(EDGE, "multi_line_string.csv"), "rb") as f:
    names, rows, lines, rejected = read_all(f.read())
  assert names == ["A", "B", "C", "D"] and not rejected
  assert rows[1]["B"] == b'"2,\n"3",\n4\n5"'
  assert lines == [2, 3, 7]


def test_empty_cells_are_missing():
  with open(os.path.join(EDGE, "empty_values.csv"), "rb") as f:
    _, rows, _, _ = read_all(f.read())
  assert [r["B"] for r in rows] == [None, None, None]
  assert [r["C"] for r in rows] == [b"x", b"y", None]


def test_bom_crlf_blank_lines_and_quoted_empty():
  data = b'\xef\xbb\xbfa,b\r\n1,""\r\n\r\n2,"x\r\ny"\r\n'
  names, rows, lines, rejected = read_all(data)
  assert names == ["a", "b"] and not rejected
  assert rows == [{"a": b"1", "b": None}, {"a": b"2", "b": b"x\r\ny"}]
  assert lines == [2, 4]


@pytest.mark.parametrize("line,reason", [
    (b"1,2,3", "expected 2 fields, found 3"),
    (b"1", "expected 2 fields, found 1"),
    (b'1,ab"c"', "malformed quoting"),
    (b'1,"ab"c', "malformed quoting"),
    (b"1,\xff\xfe", "invalid UTF-8"),
    (b"a\r,b", "carriage return outside quotes"),
])
def test_bad_records_are_rejected_with_line_raw_and_reason(line, reason):
  data = b"a,b\n0,ok\n" + line + b"\n9,fine\n"
  _, rows, _, rejected = read_all(data)
  assert len(rows) == 2
  assert len(rejected) == 1
  got_line, raw, why = rejected[0]
  assert (got_line, raw) == (3, line) and why.startswith(reason)


def test_unterminated_quote_swallows_the_rest_into_one_rejected_record():
  data = b'a,b\n1,2\n3,"open\n4,5\n'
  _, rows, _, rejected = read_all(data)
  assert len(rows) == 1
  assert rejected == [(3, b'3,"open\n4,5\n', "unterminated quoted field at end of file")]


@pytest.mark.parametrize("header,message", [
    (b"a,,b\n", "empty header name"), (b"a,b,a\n", "duplicate header name"),
    (b"\xff,b\n", "not UTF-8")])
def test_bad_headers(header, message):
  block = next(csv_records.iter_blocks(io.BytesIO(header + b"1,2,3\n")))
  with pytest.raises(csv_records.HeaderError, match=message):
    csv_records.parse_header(block)


def test_taxi_sample_parses_completely():
  with open(TAXI_CSV, "rb") as f:
    names, rows, _, rejected = read_all(f.read())
  assert len(names) == 18 and len(rows) == 15002 and not rejected


CELLS = st.one_of(st.just(""), st.text(alphabet='ab,"\n\r x\u00e9', max_size=6))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(CELLS, min_size=1, max_size=4), min_size=1, max_size=8),
       st.integers(8, 64))
def test_block_size_never_changes_the_result(rows, block_bytes):
  def cell(c):
    return '"' + c.replace('"', '""') + '"' if any(x in c for x in ',"\n\r') else c
  text = "h1,h2,h3\n" + "".join(",".join(cell(c) for c in r) + "\n" for r in rows)
  data = text.encode("utf-8")
  assert read_all(data, block_bytes) == read_all(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80), st.integers(8, 64))
def test_arbitrary_bytes_never_crash_and_every_record_is_kept_or_rejected(body, block_bytes):
  data = b"h1,h2\n" + body
  records = sum(len(b.starts) for b in csv_records.iter_blocks(io.BytesIO(data), 1 << 20)) - 1
  _, rows, _, rejected = read_all(data, block_bytes)
  assert len(rows) + len(rejected) == records


@pytest.mark.parametrize("bad_row", [b"", b"x\n"])
def test_raw_column_holds_each_record_and_its_terminators(bad_row):
  # With and without a rejected record in the block (in-place and copying parse paths).
  data = b'a,b\r\n1,"q\r\nr"\r\n\r\n\n2,z\r\n' + bad_row + b"3,w\n"
  block = csv_records.without_first(next(csv_records.iter_blocks(io.BytesIO(data))))
  batch, rejected = csv_records.parse_block(block, ["a", "b"], 0)
  raws = [r.rstrip(b"\r\n") for r in batch.column(csv_records.RAW_COLUMN).to_pylist()]
  assert raws == [b'1,"q\r\nr"', b"2,z", b"3,w"]
  assert len(rejected) == (1 if bad_row else 0)
