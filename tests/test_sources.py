"""Source readers (transforms/codec/sources.py): JSON Lines with the SageMaker and Vertex presets,
Parquet, tf.Example TFRecord and CSV through one interface; exact values, types, line numbers,
reasons and counts (read == written + rejected), gzip, block-size invariance, determinism."""
import base64
import datetime
import gzip
import io
import json
import struct

import google_crc32c
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st
from tfx_bsl.coders import example_coder

from transforms.codec import csv_records, sources, tfrecord
from transforms.codec.sources import SourceError, SourceOptions

PROVENANCE = (csv_records.FILE_COLUMN, csv_records.LINE_COLUMN, csv_records.RAW_COLUMN)


def read(data, names=None, path="in.jsonl", file_index=3, opener=io.BytesIO, **options):
  """(names, batches, rejected, read) of one file's bytes; checks the batches' layout and that
  every record is counted once."""
  opts = SourceOptions(**{"format": sources.infer_format(path), **options})
  if names is None:
    names = sources.column_names(opener(data), path, opts)
  batches, rejected, total = [], [], 0
  for batch, rej, n in sources.iter_batches(opener(data), path, names, file_index, opts):
    assert batch.schema.names == list(names) + list(PROVENANCE)
    assert batch.schema.field(csv_records.FILE_COLUMN).type == pa.int32()
    assert batch.schema.field(csv_records.LINE_COLUMN).type == pa.int64()
    assert batch.schema.field(csv_records.RAW_COLUMN).type == pa.large_binary()
    assert set(batch.column(csv_records.FILE_COLUMN).to_pylist()) <= {file_index}
    assert n == batch.num_rows + len(rej)
    batches.append(batch)
    rejected += rej
    total += n
  assert total == sum(b.num_rows for b in batches) + len(rejected)
  return names, batches, rejected, total


def rows(batches, raw=False):
  """The records as dicts: the columns and the line (record) number, the raw bytes if asked."""
  out = []
  for batch in batches:
    for r in batch.to_pylist():
      r.pop(csv_records.FILE_COLUMN)
      text = r.pop(csv_records.RAW_COLUMN)
      if raw:
        r["raw"] = text.rstrip(b"\r\n")
      out.append(r)
  return sorted(out, key=lambda r: r[csv_records.LINE_COLUMN])


def types(batches, name):
  return [b.schema.field(name).type for b in batches if b.num_rows]


def jsonl(*objs):
  return b"".join((o if isinstance(o, bytes) else json.dumps(o).encode()) + b"\n" for o in objs)


# --- options and format inference ---------------------------------------------------------


@pytest.mark.parametrize("path,fmt", [
    ("a.csv", "csv"), ("a.jsonl", "jsonl"), ("a.JSON", "jsonl"), ("a.ndjson.gz", "jsonl"),
    ("gs://b/x/a.parquet", "parquet"), ("a.pq", "parquet"), ("a.tfrecord.gz", "tfrecord"),
    ("a.tfrecords", "tfrecord")])
def test_infer_format(path, fmt):
  assert sources.infer_format(path) == fmt


@pytest.mark.parametrize("path", ["a.txt", "a.gz", "noext", "a.csv.bz2"])
def test_infer_format_refuses_unknown_extensions(path):
  with pytest.raises(SourceError, match="cannot tell the input format"):
    sources.infer_format(path)


@pytest.mark.parametrize("options,match", [
    ({"format": "avro"}, "unknown input format"),
    ({"format": "jsonl", "preset": "kserve"}, "unknown preset"),
    ({"format": "parquet", "record_path": ("a",)}, "apply to JSON Lines"),
    ({"format": "jsonl", "envelope": (("t",),)}, "envelope wants"),
    ({"format": "jsonl", "record_path": ("",)}, "non-empty keys"),
    ({"format": "jsonl", "preset": "tf_serving"}, "preset tf_serving reads tfrecord input, not"),
    ({"format": "tfrecord", "preset": "sagemaker"}, "preset sagemaker reads jsonl input, not")])
def test_bad_options_are_source_errors(options, match):
  with pytest.raises(SourceError, match=match):
    sources.column_names(io.BytesIO(b'{"a": 1}\n'), "x", SourceOptions(**options))


def test_public_surface():
  assert sources.FORMATS == ("csv", "jsonl", "parquet", "tfrecord")
  assert sources.PRESETS == ("vertex", "sagemaker", "tf_serving")
  assert sources.PRESET_FORMATS == {"vertex": "jsonl", "sagemaker": "jsonl",
                                    "tf_serving": "tfrecord"}
  assert issubclass(SourceError, ValueError)
  opts = SourceOptions(format="jsonl")
  assert (opts.record_path, opts.preset, opts.envelope, opts.payload_names, opts.block_bytes) == \
      ((), None, (), (), 8 << 20)
  with pytest.raises(Exception):
    opts.format = "csv"  # frozen


# --- JSON Lines --------------------------------------------------------------------------


def test_jsonl_values_types_lines_and_raw():
  data = (b'\xef\xbb\xbf{"i": 1, "f": 2.5, "b": true, "s": "x", "n": null}\n\n  \n'
          b'{"s": "y", "i": -7}\r\n{"i": 3, "f": 1e3, "s": "z\\u00e9"}')
  names, batches, rejected, total = read(data)
  assert names == ["i", "f", "b", "s", "n"]
  assert not rejected and total == 3
  assert rows(batches, raw=True) == [
      {"i": 1, "f": 2.5, "b": True, "s": "x", "n": None, "__line__": 1,
       "raw": b'{"i": 1, "f": 2.5, "b": true, "s": "x", "n": null}'},
      {"i": -7, "f": None, "b": None, "s": "y", "n": None, "__line__": 4,
       "raw": b'{"s": "y", "i": -7}'},
      {"i": 3, "f": 1000.0, "b": None, "s": "z\u00e9", "n": None, "__line__": 5,
       "raw": b'{"i": 3, "f": 1e3, "s": "z\\u00e9"}'}]
  # The last line, unterminated, is a block of its own: a second batch.
  assert set(types(batches, "i")) == {pa.int64()} and set(types(batches, "s")) == {pa.string()}
  assert types(batches, "f")[0] == pa.float64() and types(batches, "b")[0] == pa.bool_()


def test_jsonl_rejects_with_reasons_and_loses_nothing():
  data = jsonl({"a": 1, "b": "x"}, b'{"a": 2,', b'{"a": "\xff"}', b"[1, 2]", {"a": [1, 2]},
               {"a": {"k": 1}}, {"a": 5, "c": 1, "d": [2]}, {"a": [6], "b": []},
               b'{"a": NaN}', {"a": 8, "c": None})
  names, batches, rejected, total = read(data)
  assert names == ["a", "b"] and total == 10
  reasons = {line: why for line, _, why in rejected}
  assert reasons[2].startswith("malformed JSON (Expecting")
  assert reasons[3] == "not UTF-8 (invalid start byte at byte 7)"
  assert reasons[4] == "not a JSON object"
  assert reasons[5] == "a: a list of 2 values"
  assert reasons[6] == "a: an object"
  assert reasons[7] == "column(s) not in the dataset: c, d"
  assert reasons[9] == "malformed JSON (NaN is not JSON)"
  assert {line: raw for line, raw, _ in rejected}[3] == b'{"a": "\xff"}'
  got = rows(batches)
  assert [(r["__line__"], r["a"], r["b"]) for r in got] == [(1, 1, "x"), (8, 6, None),
                                                          (10, 8, None)]
  assert sorted([r["__line__"] for r in got] + list(reasons)) == list(range(1, 11))


@pytest.mark.parametrize("clean", [True, False])  # the reader's path, and the object-by-object one
def test_jsonl_refuses_text_that_is_not_utf8_and_numbers_beyond_a_double(clean):
  """Raw non-UTF-8 bytes inside a string, a lone surrogate escape and 1e400 (which would read as
  infinity), at the top or nested: each object rejected with its reason, the rest kept."""
  lines = [b'{"a": 1, "s": "x", "f": 1.5}', b'{"a": 2, "s": "\xff\xfe", "f": 1.0}',
           b'{"a": 3, "s": "\\ud800", "f": 1.0}', b'{"a": 4, "s": "y", "f": 1e400}',
           b'{"a": 5, "s": "z", "f": -2.5}']
  if not clean:  # a malformed line sends the whole block object by object
    lines.append(b'{"a": 6,')
  names, batches, rejected, total = read(b"\n".join(lines) + b"\n")
  reasons = {line: why for line, _, why in rejected}
  assert reasons[2].startswith("not UTF-8")
  assert reasons[3] == "text holding a lone surrogate escape (\\ud800), not UTF-8 text"
  assert reasons[4] == "a number beyond a double's range (it would read as infinity)"
  assert [(r["__line__"], r["a"], r["f"]) for r in rows(batches)] == [(1, 1, 1.5), (5, 5, -2.5)]
  assert total == len(lines) and len(rejected) == len(lines) - 2


def test_jsonl_nested_infinities_are_refused_in_lists_and_objects():
  from transforms.codec.json_values import JsonReader
  lines = [b'{"f": [1.5, 2.0], "o": {"x": 1.0}}', b'{"f": [1e400], "o": {"x": 1.0}}',
           b'{"f": [2.5], "o": {"x": -1e999}}', b'{"f": [3.5], "o": {"x": 2.0}}']
  buf = b"\n".join(lines)
  starts = np.cumsum([0] + [len(x) + 1 for x in lines[:-1]])
  pieces, bad = JsonReader().parse(buf, starts, starts + np.array([len(x) for x in lines]))
  assert [i for i, _ in bad] == [1, 2]
  assert [list(p) for p, _ in pieces] == [[0, 3]]


def test_jsonl_type_changes_between_lines_keep_each_type():
  data = jsonl({"a": 1}, {"a": "one"}, {"a": 2}, {"a": 2.5}, {"a": True})
  _, batches, rejected, total = read(data)
  assert not rejected and total == 5
  assert [(r["__line__"], r["a"]) for r in rows(batches)] == \
      [(1, 1), (2, "one"), (3, 2.0), (4, 2.5), (5, True)]
  assert pa.string() in types(batches, "a") and pa.bool_() in types(batches, "a")


def test_jsonl_types_alternating_record_by_record_make_one_piece_per_type():
  """12 here, "12" there, record by record: the objects are grouped by shape, one piece per
  shape (not one per record), each value typed as it is alone, each object at its own
  position."""
  from transforms.codec.json_values import JsonReader
  lines = [json.dumps({"a": i if i % 2 else str(i), "b": "x"}).encode() for i in range(9)]
  buf = b"\n".join(lines)
  starts = np.cumsum([0] + [len(x) + 1 for x in lines[:-1]])
  pieces, bad = JsonReader().parse(buf, starts, starts + np.array([len(x) for x in lines]))
  assert not bad and len(pieces) == 2
  got = {int(p): v for positions, values in pieces
         for p, v in zip(positions, values.field("a").to_pylist())}
  assert got == {i: i if i % 2 else str(i) for i in range(9)}


def _split_parse(objects):
  from transforms.codec.json_values import JsonReader
  lines = [o if isinstance(o, bytes) else json.dumps(o).encode() for o in objects]
  buf = b"\n".join(lines)
  starts = np.cumsum([0] + [len(x) + 1 for x in lines[:-1]])
  reader = JsonReader()
  split = []
  by_kinds = reader._by_kinds
  reader._by_kinds = lambda *a, **k: split.append(by_kinds(*a, **k)) or split[-1]  # [-1]: whole
  pieces, bad = reader.parse(buf, starts, starts + np.array([len(x) for x in lines]))
  got = {}
  for positions, values in pieces:
    for p, v in zip(positions, values.to_pylist()):
      assert int(p) not in got
      got[int(p)] = {k: x for k, x in v.items() if x is not None}
  return got, bad, split


def test_jsonl_whole_line_records_with_alternating_types_are_split_by_the_readers_refusal():
  """Records that are whole lines: the reader's refusal of a key whose type changes splits the
  lines by that key's JSON type, vectorised, part by part until each reads; every value as
  Python's json reads it (absent keys and nulls alike), each at its own position."""
  objects = [{"a": i if i % 2 else str(i), "b": [1, 2] if i % 3 else "x", "c": None}
             for i in range(12)] + [{"c": 1}, {"b": None, "a": None}]
  got, bad, split = _split_parse(objects)
  want = {i: {k: v for k, v in o.items() if v is not None} for i, o in enumerate(objects)}
  assert not bad and got == want
  assert split[-1] is not None and len(split[-1]) == 4  # the whole: a 2 kinds x b 2 kinds


def test_jsonl_a_nested_key_whose_type_changes_splits_by_its_kind_in_each_line():
  """Payload-shaped lines (a list of instances) whose nested fare changes type line by line,
  and whose outer shape alternates (an object holding the list, or the bare list): split by
  the one kind of the key's values in each line, every value as Python's json reads it. A
  line mixing two kinds of that key cannot split: every line is parsed."""
  objects = [{"p": {"instances": [{"fare": 1.5 if i % 2 else "1.5", "n": j} for j in range(3)]}
              if i % 3 else [{"fare": i, "n": None}]} for i in range(12)]
  got, bad, split = _split_parse(objects)
  want = {i: {"p": o["p"]} for i, o in enumerate(objects)}
  assert not bad and len(got) == 12 and split[-1] is not None and len(split[-1]) == 3
  assert all(_same_payload(got[i]["p"], want[i]["p"]) for i in want)
  assert [type(got[i]["p"]["instances"][0]["fare"]) for i in (1, 2, 4, 5)] == [float, str, str,
                                                                           float]
  objects[4] = {"p": {"instances": [{"fare": 1.0}, {"fare": "x"}]}}  # two kinds in one line
  got, bad, split = _split_parse(objects)  # parsed one by one: that line's list is refused
  assert split[-1] is None and sorted(got) == [i for i in range(12) if i != 4]
  assert [i for i, _ in bad] == [4] and "different JSON types" in bad[0][1]


def _same_payload(got, want):
  """A parsed payload as the reader gives it (the union of its part's keys, a missing one
  null) against the JSON value: equal where the JSON holds a value."""
  if isinstance(want, dict):
    return all(_same_payload(got.get(k), v) for k, v in want.items())
  if isinstance(want, list):
    return len(got) == len(want) and all(_same_payload(g, w) for g, w in zip(got, want))
  return got == want


def test_jsonl_a_split_that_cannot_hold_falls_back_to_parsing_each_line():
  """The key met first in a line's text is a nested one, so its top-level value is misread:
  the split does not hold and every line is parsed, the malformed one named."""
  objects = [{"m": {"a": "s"}, "a": i} if i == 3 else {"a": i if i % 2 else str(i)}
             for i in range(6)] + [b'{"a": oops}']
  got, bad, split = _split_parse(objects)
  assert split[-1] is None and [i for i, _ in bad] == [6] and "malformed JSON" in bad[0][1]
  assert got == {i: o for i, o in enumerate(objects[:6])}
  objects[-1] = {"a": 7}  # no malformed line: the misread key alone sends it to parsing
  got, bad, split = _split_parse(objects)
  assert split[-1] is None and not bad and got == {i: o for i, o in enumerate(objects)}


def test_jsonl_date_like_strings_stay_strings_in_every_block():
  lines = [{"t": "2020-01-01", "u": "2020-01-01 10:00:00", "k": i} for i in range(40)]
  for block_bytes in (64, 1 << 20):
    _, batches, _, _ = read(jsonl(*lines), block_bytes=block_bytes)
    assert set(types(batches, "t")) == {pa.string()} == set(types(batches, "u"))
    assert rows(batches)[-1]["t"] == "2020-01-01"


def test_jsonl_record_path_expands_lists_and_renders_elements():
  data = jsonl({"req": {"rows": [{"a": 1, "b": "x"}, {"a": 2}]}, "ts": "t1"},
               {"req": {"rows": {"a": 3, "b": "z"}}, "ts": "t2"},
               {"req": {"rows": []}, "ts": "t3"},
               {"req": {}, "ts": "t4"},
               {"req": {"rows": [None, {"a": 6}]}, "ts": "t5"})
  opts = dict(record_path=("req", "rows"), envelope=(("when", "ts"),))
  names, batches, rejected, total = read(data, **opts)
  assert names == ["a", "b", "when"] and total == 7
  assert rows(batches, raw=True) == [
      {"a": 1, "b": "x", "when": "t1", "__line__": 1, "raw": b'{"a":1,"b":"x"}'},
      {"a": 2, "b": None, "when": "t1", "__line__": 1, "raw": b'{"a":2,"b":null}'},
      {"a": 3, "b": "z", "when": "t2", "__line__": 2,
       "raw": b'{"req": {"rows": {"a": 3, "b": "z"}}, "ts": "t2"}'},
      {"a": 6, "b": None, "when": "t5", "__line__": 5, "raw": b'{"a":6,"b":null}'}]
  assert sorted((line, raw, why) for line, raw, why in rejected) == [
      (3, b'{"req": {"rows": []}, "ts": "t3"}',
       "no record in the line (an empty list at record_path req.rows)"),
      (4, b'{"req": {}, "ts": "t4"}', "no value at record_path req.rows"),
      (5, b"null", "record_path req.rows: not an object")]


def test_jsonl_envelope_objects_and_key_clashes_are_rejected():
  data = jsonl({"a": 1, "m": {"t": {"x": 1}}}, {"a": 2, "m": {"t": "ok"}})
  names, batches, rejected, _ = read(data, envelope=(("t", "m.t"),))
  assert names == ["a", "t"]  # the line is the record: the envelope takes "m"
  assert [(r["a"], r["t"]) for r in rows(batches)] == [(2, "ok")]
  assert rejected == [(1, b'{"a": 1, "m": {"t": {"x": 1}}}', "t: an object")]
  data = jsonl({"r": {"a": 1}, "a": 5}, {"r": {"b": 1}, "a": 6})
  with pytest.raises(SourceError, match="envelope column.*also keys of the record: a"):
    read(data, record_path=("r",), envelope=(("a", "a"),))
  _, batches, rejected, _ = read(data, names=["b", "a"], record_path=("r",),
                                 envelope=(("a", "a"),))
  assert [(r["a"], r["b"]) for r in rows(batches)] == [(6, 1)]
  assert [why for _, _, why in rejected] == ["key 'a' is also an envelope column"]


def test_jsonl_column_names_errors_and_empty_files():
  opts = SourceOptions(format="jsonl")
  assert sources.column_names(io.BytesIO(b"\n \n"), "e.jsonl", opts) is None
  assert sources.column_names(io.BytesIO(b""), "e.jsonl", opts) is None
  with pytest.raises(SourceError, match=r"bad.jsonl: line 2: malformed JSON"):
    sources.column_names(io.BytesIO(b"\n{x\n"), "bad.jsonl", opts)
  with pytest.raises(SourceError, match="no value at record_path r"):
    sources.column_names(io.BytesIO(b'{"a": 1}\n'), "p.jsonl",
                         SourceOptions(format="jsonl", record_path=("r",)))


def test_jsonl_gzip_and_determinism(tmp_path):
  data = jsonl(*[{"a": i, "s": str(i) * (i % 5)} for i in range(500)], b"{oops")
  plain = read(data)
  path = tmp_path / "log.jsonl.gz"
  with gzip.open(path, "wb") as f:
    f.write(data)
  zipped = read(str(path), path=str(path), opener=lambda p: gzip.open(p, "rb"))
  assert plain[0] == zipped[0] and plain[2] == zipped[2] and plain[3] == zipped[3] == 501
  assert [b.to_pylist() for b in plain[1]] == [b.to_pylist() for b in zipped[1]]
  again = read(data)
  assert all(a.equals(b) for a, b in zip(plain[1], again[1])) and plain[2] == again[2]


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 63, 2 ** 63 - 1),
                         st.floats(allow_nan=False, allow_infinity=False),
                         st.text(max_size=6))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["a", "b", "c"]), json_scalars, min_size=1),
                min_size=1, max_size=25),
       st.sampled_from([1, 7, 50, 1 << 20]))
def test_jsonl_matches_json_loads_at_any_block_size(records, block_bytes):
  data = jsonl(*records)
  _, batches, rejected, total = read(data, names=["a", "b", "c"], block_bytes=block_bytes)
  assert not rejected and total == len(records)
  got = rows(batches)
  for record, row in zip(records, got):
    for key in "abc":
      want = record.get(key)
      assert row[key] == want or (isinstance(want, int) and not isinstance(want, bool)
                                  and row[key] == float(want)), (key, record, row)


# --- SageMaker Data Capture -----------------------------------------------------------------


def capture(data, encoding="JSON", content_type="application/json", when="2022-02-14T17:25:49Z"):
  """One Data Capture line, in the shape of the SageMaker guide's sample."""
  return {"captureData": {
      "endpointInput": {"observedContentType": content_type, "mode": "INPUT", "data": data,
                        "encoding": encoding},
      "endpointOutput": {"observedContentType": "text/csv; charset=utf-8", "mode": "OUTPUT",
                         "data": "0.0254181120544672", "encoding": "CSV"}},
      "eventMetadata": {"eventId": "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
                        "inferenceTime": when},
      "eventVersion": "0"}


SAGEMAKER = dict(path="capture.jsonl", preset="sagemaker",
                 envelope=(("inference_time", "eventMetadata.inferenceTime"),))


def test_sagemaker_json_payloads():
  b64 = base64.b64encode(json.dumps([{"fare": 7.5, "company": "Sun"}]).encode()).decode()
  data = jsonl(capture(json.dumps({"instances": [{"fare": 1.5, "company": "Flash"},
                                                  {"fare": 2, "company": "Taxi"}]})),
               capture(json.dumps({"fare": 3.25, "company": "Sun"}), when="2022-02-14T17:26:00Z"),
               capture(b64, "BASE64"),
               capture('{"fare": 4}\n{"fare": 5}\n', content_type="application/jsonlines"),
               capture(json.dumps({"instances": []})),
               capture("{not json"),
               capture("AAAA!!", "BASE64"),
               capture("x", "BASE64", "image/png"),
               capture("x", "NONE"))
  names, batches, rejected, total = read(data, **SAGEMAKER)
  assert names == ["fare", "company", "inference_time"]
  assert total == 11
  got = [(r["__line__"], r["fare"], r["company"], r["inference_time"]) for r in rows(batches)]
  t0, t1 = "2022-02-14T17:25:49Z", "2022-02-14T17:26:00Z"
  assert got == [(1, 1.5, "Flash", t0), (1, 2.0, "Taxi", t0), (2, 3.25, "Sun", t1),
                 (3, 7.5, "Sun", t0), (4, 4, None, t0), (4, 5, None, t0)]
  raws = {(r["__line__"], r["fare"]): r["raw"] for r in rows(batches, raw=True)}
  assert raws[(1, 1.5)] == b'{"fare":1.5,"company":"Flash"}'  # one of two: rendered
  assert raws[(2, 3.25)] == jsonl(capture(json.dumps({"fare": 3.25, "company": "Sun"}),
                                          when="2022-02-14T17:26:00Z")).rstrip()  # the line
  assert raws[(4, 4)] == b'{"fare":4}'  # rendered with its own keys, none added
  reasons = sorted((line, why) for line, _, why in rejected)
  assert reasons[0] == (5, "no record in the payload (an empty list)")
  assert reasons[1][0] == 6 and reasons[1][1].startswith("payload: malformed JSON (Expecting")
  assert reasons[2][0] == 7 and reasons[2][1].startswith("BASE64 payload that is not base64")
  assert reasons[3:] == [
      (8, "BASE64 payload of content type 'image/png' (neither JSON nor CSV)"),
      (9, "payload encoding 'NONE' (not JSON, CSV or BASE64)")]
  assert all(raw.startswith(b'{"captureData"') for _, raw, _ in rejected)


def test_sagemaker_csv_payloads_use_payload_names():
  b64 = base64.b64encode(b"9,1.5\n").decode()
  data = jsonl(capture("69,0.25\n", "CSV", "text/csv"),
               capture("1,2\n3,4\n", "CSV", "text/csv"),
               capture(b64, "BASE64", "text/csv"),
               capture("1,2,3\n", "CSV", "text/csv"),
               capture('"open,2\n', "CSV", "text/csv"))
  names, batches, rejected, total = read(data, payload_names=("trips", "fare"), **SAGEMAKER)
  assert names == ["trips", "fare", "inference_time"] and total == 6
  assert [(r["__line__"], r["trips"], r["fare"], r["raw"]) for r in rows(batches, raw=True)] == [
      (1, b"69", b"0.25", jsonl(capture("69,0.25\n", "CSV", "text/csv")).rstrip()),
      (2, b"1", b"2", b"1,2"), (2, b"3", b"4", b"3,4"),
      (3, b"9", b"1.5", jsonl(capture(b64, "BASE64", "text/csv")).rstrip())]
  assert types(batches, "trips") == [pa.binary()]
  assert sorted((line, why) for line, _, why in rejected) == [
      (4, "CSV payload: expected 2 fields, found 3"),
      (5, "CSV payload: unterminated quoted field")]
  with pytest.raises(SourceError, match="a CSV payload needs column names"):
    read(data, **SAGEMAKER)
  with pytest.raises(SourceError, match="a CSV payload needs column names"):
    read(data, names=["trips", "fare"], **SAGEMAKER)


def test_sagemaker_record_path_inside_the_payload():
  data = jsonl(capture(json.dumps({"inputs": {"rows": [{"a": 1}, {"a": 2}]}})))
  _, batches, rejected, total = read(data, record_path=("inputs", "rows"), **SAGEMAKER)
  assert not rejected and total == 2
  assert [r["a"] for r in rows(batches)] == [1, 2]


# --- Vertex AI request-response logging (BigQuery export) -------------------------------------


def vertex(*payloads, request_id="4171813914447831040"):
  """One exported row of the request-response logging table."""
  return {"endpoint": "projects/p/locations/us-central1/endpoints/123",
          "deployed_model_id": "456", "logging_time": "2024-05-01 12:00:00.123456 UTC",
          "request_id": request_id, "request_payload": list(payloads),
          "response_payload": ['{"predictions": [0.1]}']}


def test_vertex_instances_are_records():
  data = jsonl(vertex('{"fare": 1.5, "company": "Flash"}', '{"fare": 2.5, "company": "Sun"}'),
               vertex('{"instances": [{"fare": 3.5}]}', request_id="7"),
               vertex(),
               vertex('{"fare": ', '{"fare": 4.5}', request_id="9"))
  names, batches, rejected, total = read(data, path="rr.jsonl", preset="vertex",
                                         envelope=(("request_id", "request_id"),))
  assert names == ["fare", "company", "request_id"] and total == 6
  assert [(r["__line__"], r["fare"], r["company"], r["request_id"], r["raw"])
          for r in rows(batches, raw=True)] == [
      (1, 1.5, "Flash", "4171813914447831040", b'{"fare": 1.5, "company": "Flash"}'),
      (1, 2.5, "Sun", "4171813914447831040", b'{"fare": 2.5, "company": "Sun"}'),
      (2, 3.5, None, "7", jsonl(vertex('{"instances": [{"fare": 3.5}]}', request_id="7")).rstrip()),
      (4, 4.5, None, "9", b'{"fare": 4.5}')]
  reasons = sorted((line, raw, why[:30]) for line, raw, why in rejected)
  assert reasons == [(3, jsonl(vertex()).rstrip(), "no record in the line (no payl"),
                     (4, b'{"fare": ', "payload: malformed JSON (Expec")]


# --- Parquet ---------------------------------------------------------------------------------


def parquet_bytes(table, **kw):
  out = io.BytesIO()
  pq.write_table(table, out, **kw)
  return out.getvalue()


PARQUET = pa.table({
    "i": pa.array([1, None, 3, 4], pa.int64()),
    "f": pa.array([0.5, 2.0, None, 1e20], pa.float64()),
    "g": pa.array([1.5, None, 2.25, 0.1], pa.float32()),
    "b": pa.array([True, False, None, True]),
    "s": pa.array(["x", None, 'q"\n', "z"]),
    "ts": pa.array([datetime.datetime(2013, 3, 7, 19, 15), None,
                    datetime.datetime(2013, 3, 7, 19, 15, 0, 500000), None], pa.timestamp("us")),
    "l": pa.array([[7], [], None, [1, 2]], pa.list_(pa.int64())),
    "m": pa.array([None, None, {"k": 1}, None], pa.struct([("k", pa.int64())]))})


def test_parquet_types_values_numbers_and_rejects():
  names, batches, rejected, total = read(parquet_bytes(PARQUET, row_group_size=2),
                                         path="p.parquet", names=[c for c in PARQUET.column_names
                                                                  if c != "m"])
  assert total == 4
  assert types(batches, "i")[0] == pa.int64() and types(batches, "g")[0] == pa.float32()
  assert types(batches, "ts")[0] == pa.timestamp("us") and types(batches, "l")[0] == pa.int64()
  assert rows(batches, raw=True) == [
      {"i": 1, "f": 0.5, "g": 1.5, "b": True, "s": "x", "ts": datetime.datetime(2013, 3, 7, 19, 15),
       "l": 7, "__line__": 1,
       "raw": b'{"i":1,"f":0.5,"g":1.5,"b":true,"s":"x","ts":"2013-03-07 19:15:00.000000",'
              b'"l":[7],"m":null}'},
      {"i": None, "f": 2.0, "g": None, "b": False, "s": None, "ts": None, "l": None, "__line__": 2,
       "raw": b'{"i":null,"f":2,"g":null,"b":false,"s":null,"ts":null,"l":[],"m":null}'}]
  assert rejected == [
      (3, b'{"i":3,"f":null,"g":2.25,"b":null,"s":"q\\"\\n","ts":"2013-03-07 19:15:00.500000",'
          b'"l":null,"m":{"k":1}}', "m: an object"),
      (4, b'{"i":4,"f":1e+20,"g":0.1,"b":true,"s":"z","ts":null,"l":[1,2],"m":null}',
       "l: a list of 2 values")]


def test_parquet_column_names_gzip_and_errors(tmp_path):
  data = parquet_bytes(PARQUET.select(["i", "s"]))
  opts = SourceOptions(format="parquet")
  assert sources.column_names(io.BytesIO(data), "p.parquet", opts) == ["i", "s"]
  path = tmp_path / "p.parquet.gz"
  with gzip.open(path, "wb") as f:
    f.write(data)
  _, batches, _, total = read(str(path), path=str(path), opener=lambda p: gzip.open(p, "rb"),
                              names=["i", "s", "extra"])
  assert total == 4 and rows(batches)[0] == {"i": 1, "s": "x", "extra": None, "__line__": 1}
  _, _, rejected, _ = read(data, path="p.parquet", names=["i"])
  assert [why for _, _, why in rejected] == ["column(s) not in the dataset: s"] * 3
  assert sources.column_names(io.BytesIO(parquet_bytes(PARQUET.slice(0, 0))), "e.parquet",
                              opts) is None
  with pytest.raises(SourceError, match="bad.parquet: not a readable Parquet file"):
    sources.column_names(io.BytesIO(b"PAR1 not really"), "bad.parquet", opts)


def test_parquet_batches_follow_block_bytes():
  table = pa.table({"a": pa.array(range(5000))})
  _, small, _, total = read(parquet_bytes(table), path="p.parquet", block_bytes=1)
  assert total == 5000 and len(small) == 5 and rows(small)[4999] == {"a": 4999, "__line__": 5000}


# --- tf.Example TFRecord ---------------------------------------------------------------------


def framed(*records):
  """TFRecord framing written here independently of tfrecord.py (google_crc32c)."""
  def masked(b):
    crc = google_crc32c.value(b)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)
  out = b""
  for r in records:
    head = struct.pack("<Q", len(r))
    out += head + masked(head) + r + masked(r)
  return out


def examples(**columns):
  """Serialized tf.Examples of list columns (tfx_bsl's encoder; no TensorFlow)."""
  batch = pa.RecordBatch.from_pydict(columns)
  return example_coder.RecordBatchToExamplesEncoder().encode(batch)


def test_tfrecord_from_the_project_encoder():
  table = pa.table({"trips": pa.array([1, None, 3], pa.int64()),
                    "fare": pa.array([1.5, 2.25, None], pa.float64()),
                    "company": pa.array([b"Flash", b"Sun", None], pa.binary())})
  data = tfrecord.encode_tfrecord(table).tobytes()
  names, batches, rejected, total = read(data, path="x.tfrecord", file_index=0)
  assert names == ["company", "fare", "trips"] and not rejected and total == 3
  assert rows(batches) == [{"company": b"Flash", "fare": 1.5, "trips": 1, "__line__": 1},
                           {"company": b"Sun", "fare": 2.25, "trips": None, "__line__": 2},
                           {"company": None, "fare": None, "trips": 3, "__line__": 3}]
  assert types(batches, "fare") == [pa.float32()] and types(batches, "trips") == [pa.int64()]
  raw = batches[0].column(csv_records.RAW_COLUMN).to_pylist()
  assert raw == tfrecord.read_records(data)  # the serialized tf.Examples


def test_tfrecord_rejects_and_type_changes():
  good = examples(a=pa.array([[1], [2, 3], [], [4]], pa.large_list(pa.int64())),
                  z=pa.array([None, None, None, [b"q"]], pa.large_list(pa.large_binary())))
  text = examples(a=pa.array([[b"seven"]], pa.large_list(pa.large_binary())))
  data = framed(good[0], good[1], b"\xff\xfe not a proto", good[2], text[0], good[3])
  names, batches, rejected, total = read(data, path="x.tfrecord", names=["a"], block_bytes=40)
  assert names == ["a"] and total == 6
  assert [(r["__line__"], r["a"]) for r in rows(batches)] == [(1, 1), (4, None), (5, b"seven")]
  assert [(n, why.split(" (")[0]) for n, _, why in rejected] == [
      (2, "a: a list of 2 values"), (3, "not a tf.Example"),
      (6, "column(s) not in the dataset: z")]
  assert rejected[1][1] == b"\xff\xfe not a proto"


def test_tfrecord_damage_is_a_source_error_naming_the_offset():
  data = framed(*examples(a=pa.array([[1], [2]], pa.large_list(pa.int64()))))
  length = len(data) // 2
  broken = bytearray(data)
  broken[length + 14] ^= 0xFF  # a byte of the second record's data
  for bad, match in ((bytes(broken), f"bad data checksum in record at byte {length}"),
                     (data[:-3], f"truncated record at byte {length}")):
    with pytest.raises(SourceError, match=f"x.tfrecord: damaged TFRecord framing: {match}"):
      read(bad, path="x.tfrecord", names=["a"], block_bytes=16)
  opts = SourceOptions(format="tfrecord")
  assert sources.column_names(io.BytesIO(b""), "e.tfrecord", opts) is None
  with pytest.raises(SourceError, match="record 1 is not a tf.Example"):
    sources.column_names(io.BytesIO(framed(b"\xff\xff")), "x.tfrecord", opts)


def test_tfrecord_gzip_and_block_size_invariance(tmp_path):
  table = pa.table({"k": pa.array(range(300), pa.int64()),
                    "v": pa.array([str(i).encode() * (i % 7) for i in range(300)])})
  data = tfrecord.encode_tfrecord(table).tobytes()
  want = rows(read(data, path="x.tfrecord")[1])
  for block_bytes in (1, 33, 1000):
    assert rows(read(data, path="x.tfrecord", block_bytes=block_bytes)[1]) == want
  path = tmp_path / "x.tfrecord.gz"
  with gzip.open(path, "wb") as f:
    f.write(data)
  assert rows(read(str(path), path=str(path), opener=lambda p: gzip.open(p, "rb"))[1]) == want


# --- CSV through the same interface -------------------------------------------------------


def test_csv_through_the_dispatcher():
  data = b"a,b\n1,x\n2\n3,\n"
  names, batches, rejected, total = read(data, path="t.csv")
  assert names == ["a", "b"] and total == 3
  assert [(r["a"], r["b"], r["__line__"]) for r in rows(batches)] == [(b"1", b"x", 2),
                                                                       (b"3", None, 4)]
  assert rejected == [(3, b"2", "expected 2 fields, found 1")]
  with pytest.raises(SourceError, match="t.csv: header"):
    read(data, path="t.csv", names=["a", "c"])
  assert sources.column_names(io.BytesIO(b""), "t.csv", SourceOptions(format="csv")) is None


# --- the shared JSON rendering ---------------------------------------------------------------


def test_render_json_reads_back():
  arr = pa.array([{"s": 'a"\\\n\x01é', "f": -0.5, "l": [1, None], "n": None, "o": {"k": True}},
                  None, {"s": None, "f": None, "l": [], "n": None, "o": None}])
  out = sources.render_json(arr).to_pylist()
  assert out[1] == b"null" and out[2] == b'{"s":null,"f":null,"l":[],"n":null,"o":null}'
  assert json.loads(out[0]) == {"s": 'a"\\\n\x01é', "f": -0.5, "l": [1, None], "n": None,
                                "o": {"k": True}}


def test_csv_payloads_give_every_record_its_own_payload():
  """The last record of the last CSV payload belongs to that payload, not to the first one
  (its offsets were once counted from 0 in a block of its own)."""
  import numpy as np
  import pyarrow as pa
  from transforms.codec import request_logs
  texts = pa.array([b"1,a\n2,b", b"3,c", b"4,d\n5,e"], pa.large_binary())
  parts, rejected = request_logs.csv_payloads(texts, ["n", "s"], 0)
  assert not rejected
  owners = np.concatenate([good for _, good, _ in parts]).tolist()
  cells = [v for fields, _, _ in parts for v in fields[0][1].to_pylist()]
  assert list(zip(cells, owners)) == [(b"1", 0), (b"2", 0), (b"3", 1), (b"4", 2), (b"5", 2)]
