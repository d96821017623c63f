"""The `serialize` stage's rule: a round trip through the profile's serialized form.

format tfrecord: the record becomes a serialized tf.train.Example (codec/tfrecord.py: the bytes
a TFRecord shard holds, without the file's framing) and is decoded back, so float columns come
back as float32 values; format parquet: a Parquet round trip, with float columns stored as the
profile's float_dtype. The stage's fingerprint covers the decoded values (stages.SERIALIZE), so
a float32 cast on one side shows up here and nowhere earlier.
"""
import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from transforms.codec import tfrecord
from transforms.spec import fingerprint
from transforms.spec.stages import SERIALIZE, SERIALIZE_FP

__all__ = ["round_trip", "serialize_batch"]


def round_trip(table, profile):
  """The table's columns as decoded from the profile's serialized form (same names/order)."""
  columns = [(f.name, f.type) for f in table.schema]
  if profile.serialization_format == "tfrecord":  # the tf.Examples, as the shards hold them
    return tfrecord.decode_examples(*tfrecord.encode_examples(table), columns)
  if profile.float_dtype == "float32":
    table = pa.table([c.cast(pa.float32()) if pa.types.is_floating(c.type) else c
                      for c in table.columns], names=table.schema.names)
  sink = io.BytesIO()
  pq.write_table(table, sink)
  back = pq.read_table(io.BytesIO(sink.getvalue()))
  return pa.table([back.column(n).cast(t) for n, t in columns], names=[n for n, _ in columns])


def serialize_batch(batch, value_columns, profile):
  """batch with `value_columns` replaced by their round-tripped values + SERIALIZE_FP."""
  values = pa.Table.from_batches([batch]).select(value_columns)
  decoded = round_trip(values, profile)
  fp = fingerprint.fingerprint_batch(decoded, SERIALIZE.fingerprint_fields(
      columns=value_columns))
  out = batch
  for name in value_columns:  # downstream stages see the decoded values
    idx = out.schema.get_field_index(name)
    out = out.set_column(idx, name, decoded.column(name).combine_chunks())
  return out.append_column(SERIALIZE_FP, pa.array(np.asarray(fp, dtype=np.uint64)))
