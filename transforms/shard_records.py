"""ShardRecords: the `shard` stage -- each record's shard id from the profile's sharding rule.

shard = XXH64-fingerprint({__key__: key}, hash_seed) mod num_shards (docs/fingerprint.md); the
stage's fingerprint covers the shard id and the grouping key. Sampling (a profile option) uses
the same key hash with the sampling seed: a record is kept when fingerprint / 2^64 < fraction,
so offline and production keep the same keys.
"""
import apache_beam as beam
import numpy as np
import pyarrow as pa

from transforms import fingerprint
from transforms.key_rows import KEY

__all__ = ["ShardRecords", "shard_batch", "sample_batch", "key_hash", "SHARD_ID", "SHARD_FP"]

SHARD_ID, SHARD_FP = "__shard_id__", "__shard_fp__"


def key_hash(keys, seed):
  """uint64[n]: each key's XXH64 fingerprint {__key__: key} with `seed` (the shard, sampling and
  feature-log bucket hashes, each with its own seed)."""
  return fingerprint.fingerprint_batch(pa.record_batch([keys], names=[KEY]), seed=seed)


def shard_batch(batch, profile):
  """batch + SHARD_ID (int64) + SHARD_FP (uint64)."""
  shard = (key_hash(batch.column(KEY), profile.hash_seed)
           % np.uint64(profile.num_shards)).astype(np.int64)
  batch = batch.append_column(SHARD_ID, pa.array(shard))
  return batch.append_column(SHARD_FP, pa.array(
      fingerprint.fingerprint_batch(batch, [SHARD_ID, KEY])))


def sample_batch(batch, profile):
  """The rows whose key hash falls under the sampling fraction (all when fraction is 1)."""
  if profile.sampling_fraction >= 1:
    return batch
  limit = np.uint64(min(2**64 - 1, int(profile.sampling_fraction * 2**64)))
  return batch.filter(pa.array(key_hash(batch.column(KEY), profile.sampling_seed) < limit))


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
