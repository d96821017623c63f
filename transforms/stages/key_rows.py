"""KeyRows: typed batches -> + record key, parse fingerprint and ingest shard, all vectorised.

The rule is spec/key.py's key_batch (the key, the parse fingerprint, the ingest shard).
"""
import apache_beam as beam

from transforms.spec.key import key_batch
from transforms.spec.stages import RAW_FP

__all__ = ["KeyRows"]


class _KeyFn(beam.DoFn):

  def __init__(self, key_columns, num_shards, seed, side):
    self._key_columns = list(key_columns)
    self._num_shards = num_shards
    self._seed = seed
    self._side = frozenset(side)

  def process(self, element):
    batch_id, batch = element
    data_columns = [n for n in batch.schema.names if n != RAW_FP and n not in self._side]
    yield batch_id, key_batch(batch, data_columns, self._key_columns, self._num_shards,
                              self._seed)


class KeyRows(beam.PTransform):
  """(id, typed batch) -> (id, batch + __key__, __parse_fp__, __shard__); the `side` columns
  (spec/dataset.py) are outside the parse fingerprint and the content key."""

  def __init__(self, key_columns, num_shards, seed=0, side=()):
    super().__init__()
    self._args = (key_columns, num_shards, seed, tuple(side))

  def expand(self, batches):
    return batches | "Key" >> beam.ParDo(_KeyFn(*self._args))
