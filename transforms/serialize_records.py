"""SerializeRecords: the `serialize` stage -- a round trip through the profile's serialized form.

format tfrecord: the record becomes a serialized tf.train.Example (transforms/tfrecord.py: the
bytes a TFRecord shard holds, without the file's framing) and is decoded back, so float columns
come back as float32 values; format parquet: a Parquet round trip, with
float columns stored as the profile's float_dtype. The stage's fingerprint covers the decoded
values, so a float32 cast on one side shows up here and nowhere earlier.
"""
import io

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from transforms import fingerprint, tfrecord
from transforms.ahead import AheadDoFn

__all__ = ["SerializeRecords", "round_trip", "serialize_batch", "SERIALIZE_FP"]

SERIALIZE_FP = "__serialize_fp__"


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
  fp = fingerprint.fingerprint_batch(decoded)
  out = batch
  for name in value_columns:  # downstream stages see the decoded values
    idx = out.schema.get_field_index(name)
    out = out.set_column(idx, name, decoded.column(name).combine_chunks())
  return out.append_column(SERIALIZE_FP, pa.array(np.asarray(fp, dtype=np.uint64)))


class _SerializeFn(AheadDoFn):
  """Round trips one batch ahead (the codec and fingerprint kernels release the GIL), so a
  batch's round trip overlaps the stages after it (TFT's analysis) on the previous one."""

  def __init__(self, value_columns, profile):
    self._value_columns = list(value_columns)
    self._profile = profile

  def work(self, element):
    yield serialize_batch(element, self._value_columns, self._profile)


class SerializeRecords(beam.PTransform):
  """RecordBatches -> the same with `value_columns` replaced by their decoded values and
  __serialize_fp__ (fingerprint of those decoded values) appended."""

  def __init__(self, value_columns, profile):
    super().__init__()
    self._value_columns = value_columns
    self._profile = profile

  def expand(self, batches):
    return batches | "RoundTrip" >> beam.ParDo(
        _SerializeFn(self._value_columns, self._profile)).with_output_types(pa.RecordBatch)
