"""TransformRecords: TF Transform (analyze + transform) over RecordBatches, keys passed through.

Input batches hold flat columns (one value or null per record); they are fed to
tft_beam.AnalyzeAndTransformDataset as one-value list columns with a TFXIO TensorAdapterConfig
(a VarLenSparse tensor per feature, as TFXIO gives a one-value TFMD feature), and the record
key rides along as a TFT passthrough column. Output: RecordBatches of the transformed features
(as TFT emits them: one list per feature) plus __key__ (string), and the transform_fn.
"""
import apache_beam as beam
import numpy as np
import pyarrow as pa
import tensorflow_transform.beam as tft_beam
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx_bsl.public import tfxio

from transforms.key_rows import KEY

__all__ = ["TransformRecords", "to_tft_batch"]


def _one_value_lists(arr):
  valid = arr.is_valid().to_numpy(zero_copy_only=False)
  offsets = np.zeros(len(arr) + 1, dtype=np.int64)
  np.cumsum(valid, out=offsets[1:])
  return pa.LargeListArray.from_arrays(pa.array(offsets), arr.drop_null(),
                                       mask=pa.array(~valid))


def to_tft_batch(batch, feature_columns):
  """The TFT input batch: features as one-value lists (strings as bytes), key as a list."""
  arrays = []
  for name in feature_columns:
    col = batch.column(name)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
      col = col.cast(pa.large_binary())
    arrays.append(_one_value_lists(col))
  key = batch.column(KEY).cast(pa.large_string())
  arrays.append(pa.ListArray.from_arrays(pa.array(np.arange(len(key) + 1, dtype=np.int32)),
                                         key))
  return pa.RecordBatch.from_arrays(arrays, names=list(feature_columns) + [KEY])


def _from_tft(element):
  batch, _ = element
  key = batch.column(KEY).flatten()
  return batch.set_column(batch.schema.get_field_index(KEY), KEY, key)


class TransformRecords(beam.PTransform):
  """RecordBatches (flat feature columns + __key__) -> (transformed batches, transform_fn).

  Must run inside a tft_beam.Context; `arrow_schema` is the schema to_tft_batch produces.
  """

  def __init__(self, preprocessing_fn, feature_columns, arrow_schema):
    super().__init__()
    self._fn = preprocessing_fn
    self._features = list(feature_columns)
    self._arrow_schema = arrow_schema

  def expand(self, batches):
    reps = {name: schema_pb2.TensorRepresentation(
        varlen_sparse_tensor=schema_pb2.TensorRepresentation.VarLenSparseTensor(
            column_name=name)) for name in self._features}
    adapter = tfxio.TensorAdapterConfig(self._arrow_schema, reps)
    tft_batches = batches | "ToTftBatches" >> beam.Map(to_tft_batch, self._features)
    (transformed, _), transform_fn = (
        (tft_batches, adapter)
        | "AnalyzeAndTransform" >> tft_beam.AnalyzeAndTransformDataset(
            self._fn, output_record_batches=True))
    return transformed | "FlattenKeys" >> beam.Map(_from_tft), transform_fn
