"""The `shard` stage's rule: each record's shard id from the profile, and the profile's sampling.

shard = XXH64-fingerprint({__key__: key}, hash_seed) mod num_shards (docs/fingerprint.md); the
stage's fingerprint covers the shard id and the key (stages.SHARD). Sampling uses the same key
hash with the sampling seed: a record is kept when fingerprint / 2^64 < fraction, so offline
and production keep the same keys.
"""
import numpy as np
import pyarrow as pa

from transforms.spec import fingerprint
from transforms.spec.key import key_hash
from transforms.spec.stages import KEY, SHARD, SHARD_FP, SHARD_ID

__all__ = ["shard_ids", "shard_batch", "sample_mask", "sample_batch"]


def shard_ids(keys, profile):
  """int64[n]: the shard id of each key."""
  return (key_hash(keys, profile.hash_seed) % np.uint64(profile.num_shards)).astype(np.int64)


def shard_batch(batch, profile):
  """batch + SHARD_ID (int64) + SHARD_FP (uint64: the SHARD fingerprint)."""
  batch = batch.append_column(SHARD_ID, pa.array(shard_ids(batch.column(KEY), profile)))
  return batch.append_column(SHARD_FP, pa.array(
      fingerprint.fingerprint_batch(batch, SHARD.fingerprint_fields())))


def sample_mask(keys, profile):
  """bool[n]: the keys the sampling keeps (None when it keeps all)."""
  if profile.sampling_fraction >= 1:
    return None
  limit = np.uint64(min(2**64 - 1, int(profile.sampling_fraction * 2**64)))
  return key_hash(keys, profile.sampling_seed) < limit


def sample_batch(batch, profile):
  """The rows whose key hash falls under the sampling fraction (all when fraction is 1)."""
  keep = sample_mask(batch.column(KEY), profile)
  return batch if keep is None else batch.filter(pa.array(keep))
