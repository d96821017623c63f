"""TransformRecords: TF Transform (analyze + transform) over RecordBatches, columns passed through.

Input batches hold flat columns (one value or null per record); they are fed to
tft_beam.AnalyzeAndTransformDataset as one-value list columns with a TFXIO TensorAdapterConfig
(a VarLenSparse tensor per feature, as TFXIO gives a one-value TFMD feature). The `passthrough`
columns (for the feature log: the record's log hash and raw fingerprint) ride along as one TFT
passthrough column, hidden from preprocessing_fn: TFT hands them back row-aligned with its
output. Output: RecordBatches of the transformed features (as TFT emits them: one list per
feature) plus the passthrough columns (flat again), and the transform_fn. Must run inside a
tft_beam.Context whose passthrough_keys are passthrough_keys(passthrough).
"""
import apache_beam as beam
import numpy as np
import pyarrow as pa
import tensorflow_transform.beam as tft_beam
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx_bsl.public import tfxio


__all__ = ["TransformRecords", "to_tft_batch", "passthrough_keys", "PASSTHROUGH"]

PASSTHROUGH = "__passthrough__"


def _one_value_lists(arr):
  """One-value lists (a null list for a null value) with 32-bit offsets: a batch's row count
  always fits, and the batch is materialised between TFT's two passes (4 bytes a record a
  feature fewer). A column without nulls is wrapped zero copy (_as_lists)."""
  if not arr.null_count:
    return _as_lists(arr)
  valid = arr.is_valid().to_numpy(zero_copy_only=False)
  offsets = np.zeros(len(arr) + 1, dtype=np.int32)
  np.cumsum(valid, out=offsets[1:])
  return pa.ListArray.from_arrays(pa.array(offsets), arr.drop_null(), mask=pa.array(~valid))


def _as_lists(arr):
  """Every row a one-element list (TFT passes through list columns only); zero copy."""
  return pa.ListArray.from_arrays(pa.array(np.arange(len(arr) + 1, dtype=np.int32)), arr)


def to_tft_batch(batch, feature_columns, passthrough=None):
  """The TFT input batch: features as one-value lists (strings as bytes); with `passthrough`
  ({name: batch column}), also one PASSTHROUGH column: one-element lists of a struct of those
  columns (one offsets buffer for all of them: this batch is materialised for TFT's second
  pass, so its bytes count). TFT refuses a passthrough column named like a feature, hence the
  one struct."""
  arrays = []
  for name in feature_columns:
    col = batch.column(name)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
      col = col.cast(pa.large_binary())
    arrays.append(_one_value_lists(col))
  names = list(feature_columns)
  if passthrough:
    arrays.append(_as_lists(pa.StructArray.from_arrays(
        [batch.column(source) for source in passthrough.values()], names=list(passthrough))))
    names.append(PASSTHROUGH)
  return pa.RecordBatch.from_arrays(arrays, names=names)


def passthrough_keys(passthrough=None):
  """The tft_beam.Context passthrough_keys for to_tft_batch batches."""
  return {PASSTHROUGH} if passthrough else set()


def _from_tft(element):
  """TFT output -> the passthrough columns back under their names, flat."""
  batch, _ = element
  idx = batch.schema.get_field_index(PASSTHROUGH)
  if idx < 0:
    return batch
  packed = batch.column(idx).flatten()
  batch = batch.remove_column(idx)
  for field, column in zip(packed.type, packed.flatten()):
    batch = batch.append_column(field.name, column)
  return batch


class TransformRecords(beam.PTransform):
  """RecordBatches (flat feature columns) -> (transformed batches, transform_fn).

  Must run inside a tft_beam.Context; `arrow_schema` is the schema to_tft_batch produces (with
  the same passthrough columns).
  """

  def __init__(self, preprocessing_fn, feature_columns, arrow_schema, passthrough=None):
    super().__init__()
    self._fn = preprocessing_fn
    self._features = list(feature_columns)
    self._arrow_schema = arrow_schema
    self._passthrough = dict(passthrough or {})

  def expand(self, batches):
    reps = {name: schema_pb2.TensorRepresentation(
        varlen_sparse_tensor=schema_pb2.TensorRepresentation.VarLenSparseTensor(
            column_name=name)) for name in self._features}
    adapter = tfxio.TensorAdapterConfig(self._arrow_schema, reps)
    tft_batches = batches | "ToTftBatches" >> beam.Map(
        to_tft_batch, self._features, self._passthrough).with_output_types(pa.RecordBatch)
    (transformed, _), transform_fn = (
        (tft_batches, adapter)
        | "AnalyzeAndTransform" >> tft_beam.AnalyzeAndTransformDataset(
            self._fn, output_record_batches=True))
    return (transformed | "UnpackPassthrough" >> beam.Map(_from_tft).with_output_types(
        pa.RecordBatch)), transform_fn
