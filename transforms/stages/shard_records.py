"""ShardRecords: the `shard` stage -- the profile's sampling, then each record's shard id.

The rule is spec/shard.py's (sample_batch, shard_batch); docs/fingerprint.md.
"""
import apache_beam as beam
import pyarrow as pa

from transforms.beam import arrow_coder  # noqa: F401  (registers the RecordBatch coder)
from transforms.spec.shard import sample_batch, shard_batch

__all__ = ["ShardRecords"]


class ShardRecords(beam.PTransform):
  """RecordBatches -> sampled RecordBatches with __shard_id__ and __shard_fp__."""

  def __init__(self, profile):
    super().__init__()
    self._profile = profile

  def expand(self, batches):
    return (batches
            | "Sample" >> beam.Map(sample_batch, self._profile).with_output_types(pa.RecordBatch)
            | "DropEmpty" >> beam.Filter(lambda b: b.num_rows > 0).with_output_types(
                pa.RecordBatch)
            | "Shard" >> beam.Map(shard_batch, self._profile).with_output_types(pa.RecordBatch))
