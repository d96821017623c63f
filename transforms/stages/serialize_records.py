"""SerializeRecords: the `serialize` stage on RecordBatches, by the rule of spec/serialize.py."""
import apache_beam as beam
import pyarrow as pa

from transforms.beam import arrow_coder  # noqa: F401  (registers the RecordBatch coder)
from transforms.beam.ahead import AheadDoFn
from transforms.spec.serialize import serialize_batch

__all__ = ["SerializeRecords"]


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
