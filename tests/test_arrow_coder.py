"""RecordBatchCoder: Arrow IPC round trip, size estimates without encoding, and the features
job's RecordBatch PCollections all coded by it (so Beam's size sampling never pickles them)."""
import pickle

import apache_beam as beam
import pyarrow as pa
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.beam.arrow_coder import RecordBatchCoder


def _batch():
  return pa.record_batch({
      "i": pa.array([1, None, -(2**63)], pa.int64()),
      "f": pa.array([0.5, float("nan"), None], pa.float64()),
      "s": pa.array(["a", "", None], pa.large_string()),
      "l": pa.array([[1, 2], [], None], pa.list_(pa.int64())),
      "st": pa.array([{"x": 1}, None, {"x": 3}], pa.struct([("x", pa.int64())])),
  })


def test_round_trip_keeps_values_types_and_nulls():
  batch = _batch()
  coder = RecordBatchCoder()
  back = coder.decode(coder.encode(batch))
  assert back.schema == batch.schema
  for name in batch.schema.names:  # NaN != NaN for equals(): values compared by their repr
    assert repr(back.column(name).to_pylist()) == repr(batch.column(name).to_pylist()), name
  assert back.column("f").is_nan().to_pylist() == [False, True, None]
  sliced = batch.slice(2, 1)  # a slice encodes only its rows
  assert coder.decode(coder.encode(sliced)).equals(sliced)
  assert len(coder.encode(sliced)) < len(coder.encode(batch))


def test_size_estimate_reads_buffer_sizes_and_never_pickles(monkeypatch):
  batch = _batch()
  impl = RecordBatchCoder().get_impl()

  def refuse(*args, **kwargs):
    raise AssertionError("the size estimate pickled the batch")

  monkeypatch.setattr(pickle, "dumps", refuse)
  assert impl.estimate_size(batch) == batch.get_total_buffer_size()


def test_registered_for_record_batch_type_hints():
  assert isinstance(beam.coders.registry.get_coder(pa.RecordBatch), RecordBatchCoder)


def test_batches_cross_a_shuffle_through_the_coder():
  batches = [pa.record_batch([pa.array(range(n))], names=["x"]) for n in (3, 5)]
  p = TestPipeline()
  out = (p | beam.Create(batches).with_output_types(pa.RecordBatch)
         | beam.Reshuffle().with_output_types(pa.RecordBatch)
         | beam.Map(lambda b: b.column("x").to_pylist()))
  assert_that(out, equal_to([[0, 1, 2], [0, 1, 2, 3, 4]]))
  p.run().wait_until_finish()


# The features job's steps that emit RecordBatches, in pipeline order.
FEATURES_STEPS = ["ReadShards/ToRecordBatch", "ReadWindowColumns/ToRecordBatch",
                  "Window/AssignForCounts", "Window/JoinAggregates", "ProgressWindow/Count",
                  "Shard/Sample", "Shard/DropEmpty", "Shard/Shard", "ProgressShard/Count",
                  "Serialize/RoundTrip", "ProgressSerialize/Count", "LogHash", "Transform/ToTftBatches",
                  "Transform/UnpackPassthrough", "ProgressTransform/Count"]


def test_features_job_batches_use_the_coder(taxi_runs, taxi_features, tmp_path):
  from apache_beam.runners import pipeline_context

  from tests.test_portable import _built
  pipeline = _built("features", [], tmp_path, taxi_runs["direct"], taxi_features["direct"])
  proto = pipeline.to_runner_api()
  context = pipeline_context.PipelineContext(proto.components)
  steps = {t.unique_name: t for t in proto.components.transforms.values()}
  for step in FEATURES_STEPS:
    (pcoll,) = steps[step].outputs.values()
    coder = context.coders.get_by_id(proto.components.pcollections[pcoll].coder_id)
    assert isinstance(coder, RecordBatchCoder), (step, coder)
