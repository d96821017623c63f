"""The fingerprint spec: golden vectors, and the two codings agreeing on random records."""
import json
import math
import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from transforms.spec import fingerprint

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "fingerprint_vectors.json")


def _decode(v):
  if "int" in v:
    return int(v["int"])
  if "float" in v:
    f = v["float"]
    return float(f) if isinstance(f, str) else f
  if "str" in v:
    return v["str"]
  if "bytes_hex" in v:
    return bytes.fromhex(v["bytes_hex"])
  if "null" in v:
    return None
  return [_decode(x) for x in v["list"]]


def _vectors():
  with open(GOLDEN, encoding="utf-8") as f:  # a missing golden file fails, never regenerates
    return json.load(f)["vectors"]


@pytest.mark.parametrize("vector", _vectors(), ids=lambda v: v["name"])
def test_per_record_coding_matches_golden(vector):
  record = {k: _decode(v) for k, v in vector["record"].items()}
  assert fingerprint.encode_record(record, vector["fields"]).hex() == vector["encoding_hex"]
  got = fingerprint.fingerprint_record(record, vector["fields"], seed=vector["seed"])
  assert f"{got:016x}" == vector["fingerprint_hex"]


def _arrow_type(values):
  present = [v for v in values if v is not None]
  if any(isinstance(v, list) for v in present):
    inner = [x for v in present for x in v if x is not None]
    return pa.list_(_arrow_type(inner) if inner else pa.int64())
  if any(isinstance(v, float) for v in present):
    return pa.float64()
  if any(isinstance(v, str) for v in present):
    return pa.string()
  if any(isinstance(v, bytes) for v in present):
    return pa.binary()
  return pa.int64()


@pytest.mark.parametrize("vector", [v for v in _vectors() if v["record"]],
                         ids=lambda v: v["name"])
def test_vectorised_coding_matches_golden(vector):
  record = {k: _decode(v) for k, v in vector["record"].items()}
  batch = pa.record_batch({k: pa.array([v], _arrow_type([v])) for k, v in record.items()})
  got = fingerprint.fingerprint_batch(batch, vector["fields"], seed=vector["seed"])
  assert f"{int(got[0]):016x}" == vector["fingerprint_hex"]


def test_missing_null_and_empty_list_differ():
  fps = {fingerprint.fingerprint_record({}, ["a"]), fingerprint.fingerprint_record({"a": None}),
         fingerprint.fingerprint_record({"a": []}), fingerprint.fingerprint_record({"a": ""})}
  assert len(fps) == 4


def test_nan_payloads_and_signed_zero_are_canonical():
  quiet_other = np.frombuffer(np.uint64(0x7FF8000000000123).tobytes(), dtype=np.float64)[0]
  assert math.isnan(quiet_other)
  batch = pa.record_batch({"x": pa.array([float("nan"), quiet_other, -0.0, 0.0])})
  fps = fingerprint.fingerprint_batch(batch)
  assert fps[0] == fps[1] and fps[2] == fps[3] and fps[0] != fps[2]


@st.composite
def columns(draw):
  """A column: a name, an Arrow type, and row values of that type (None = null)."""
  kind = draw(st.sampled_from(["int", "float", "str", "list_int", "list_str"]))
  base = {"int": st.integers(-2**63, 2**63 - 1),
          "float": st.floats(allow_nan=True, allow_infinity=True),
          "str": st.text(max_size=12)}
  if kind.startswith("list_"):
    elem = base[kind[5:]]
    values = st.one_of(st.none(), st.lists(st.one_of(st.none(), elem), max_size=4))
    typ = pa.list_(pa.int64() if kind == "list_int" else pa.string())
  else:
    values = st.one_of(st.none(), base[kind])
    typ = {"int": pa.int64(), "float": pa.float64(), "str": pa.string()}[kind]
  return typ, values


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_codings_agree_on_random_records(data):
  n = data.draw(st.integers(1, 6))
  names = data.draw(st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=5,
                             unique=True))
  cols = {}
  for name in names:
    typ, values = data.draw(columns())
    cols[name] = pa.array([data.draw(values) for _ in range(n)], typ)
  extra = data.draw(st.lists(st.text(min_size=1, max_size=4), max_size=2))
  fields = sorted(set(names) | set(extra))
  seed = data.draw(st.integers(0, 2**64 - 1))
  batch = pa.record_batch(cols)
  vectorised = fingerprint.fingerprint_batch(batch, fields, seed=seed)
  record_fps, field_fps = fingerprint.fingerprint_fields(batch, fields, seed=seed)
  assert sorted(field_fps) == fields
  for i, row in enumerate(batch.to_pylist()):
    assert int(vectorised[i]) == fingerprint.fingerprint_record(row, fields, seed=seed)
    assert int(record_fps[i]) == int(vectorised[i])
    for name in fields:  # each field's own fingerprint (MISSING where the batch lacks it)
      assert int(field_fps[name][i]) == fingerprint.fingerprint_record(row, [name], seed=seed)


def test_sliced_and_chunked_inputs_fingerprint_like_whole_ones():
  table = pa.table({"a": [1, None, 3, 4], "s": ["w", "x", None, "zzzzzzzzzzz"]})
  whole = fingerprint.fingerprint_batch(table)
  chunked = pa.concat_tables([table.slice(0, 2), table.slice(2)])
  assert list(fingerprint.fingerprint_batch(chunked)) == list(whole)
  assert list(fingerprint.fingerprint_batch(table.slice(1, 2))) == list(whole[1:3])


def test_digest_is_order_independent_and_counts_duplicates():
  fps = np.array([5, 7, 7, 2**64 - 1], dtype=np.uint64)
  d = fingerprint.combine_digest(fps)
  assert d == fingerprint.combine_digest(fps[::-1])
  halves = fingerprint.add_digests(fingerprint.combine_digest(fps[:2]),
                                   fingerprint.combine_digest(fps[2:]))
  assert halves == d
  assert fingerprint.combine_digest(fps[:3]) != fingerprint.combine_digest(fps[[0, 1]])


def test_fingerprint_fields_equals_one_fingerprint_per_field_across_chunks():
  n = 20_000  # several of the kernels' row chunks
  rng = np.random.default_rng(5)
  table = pa.table({"i": pa.array(rng.integers(-9, 9, n), mask=rng.random(n) < 0.1),
                    "f": pa.array(rng.normal(size=n).astype(np.float32)),
                    "s": pa.array([f"v{k % 37}" for k in range(n)]),
                    "l": pa.array([[k] * (k % 3) for k in range(n)], pa.large_list(pa.int64()))})
  record_fps, field_fps = fingerprint.fingerprint_fields(table, seed=7)
  assert (record_fps == fingerprint.fingerprint_batch(table, seed=7)).all()
  for name in table.schema.names:
    assert (field_fps[name] == fingerprint.fingerprint_batch(table, [name], seed=7)).all()
  assert len(set(field_fps["i"].tolist())) > 2 and not (field_fps["i"] == field_fps["f"]).any()
