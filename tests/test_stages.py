"""The shard and serialize stages: sampling, shard ids, round trips, their fingerprints."""
import dataclasses

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.test_window_records import BASE
from transforms.spec import fingerprint
from transforms.spec import serialize as serialize_rule, shard as shard_rule, stages
from transforms.stages import serialize_records as sr


def keyed(n=1000):
  return pa.record_batch({"__key__": pa.array([f"k{i}" for i in range(n)], pa.large_string()),
                          "x": pa.array(np.arange(n) / 3.0),
                          "s": pa.array([None if i % 4 == 0 else f"v{i}" for i in range(n)])})


def test_shard_ids_follow_the_key_hash_and_seed():
  b = keyed()
  out = shard_rule.shard_batch(b, BASE)
  ids = out.column(stages.SHARD_ID).to_numpy()
  want = [fingerprint.fingerprint_record({"__key__": f"k{i}"}) % 2 for i in range(1000)]
  assert ids.tolist() == want
  assert out.column(stages.SHARD_FP)[0].as_py() == fingerprint.fingerprint_record(
      {"__key__": "k0", stages.SHARD_ID: int(ids[0])})
  reseeded = shard_rule.shard_batch(b, dataclasses.replace(BASE, hash_seed=7))
  assert reseeded.column(stages.SHARD_ID).to_numpy().tolist() != ids.tolist()


def test_sampling_keeps_the_same_keys_in_any_batching():
  p = dataclasses.replace(BASE, sampling_fraction=0.25, sampling_seed=3)
  b = keyed()
  whole = shard_rule.sample_batch(b, p).column("__key__").to_pylist()
  parts = shard_rule.sample_batch(b.slice(0, 500), p).column("__key__").to_pylist() + \
      shard_rule.sample_batch(b.slice(500), p).column("__key__").to_pylist()
  assert whole == parts and 200 < len(whole) < 300


def test_tfrecord_round_trip_gives_float32_values_and_its_own_fingerprint():
  b = keyed()
  table = pa.Table.from_batches([b]).select(["x", "s"])
  back = serialize_rule.round_trip(table, BASE)
  assert back.column("x").to_pylist() == [float(np.float32(v)) for v in b.column("x").to_pylist()]
  assert back.column("s").to_pylist() == b.column("s").to_pylist()
  parquet64 = dataclasses.replace(BASE, serialization_format="parquet", float_dtype="float64")
  assert serialize_rule.round_trip(table, parquet64).equals(table)


def test_composite_replaces_values_and_fingerprints_them():
  b = keyed(10)
  with test_pipeline.TestPipeline() as p:
    out = p | beam.Create([b]) | sr.SerializeRecords(["x", "s"], BASE)
    got = out | beam.FlatMap(lambda t: [(r["__key__"], r["x"], r[stages.SERIALIZE_FP])
                                        for r in t.to_pylist()])
    want = []
    for r in b.to_pylist():
      x32 = float(np.float32(r["x"]))
      want.append((r["__key__"], x32, fingerprint.fingerprint_record({"x": x32, "s": r["s"]})))
    assert_that(got, equal_to(want))
