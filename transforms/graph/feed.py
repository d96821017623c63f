"""The TF Transform feed, shared by the features job and the production logger: how a batch of
flat record columns becomes TFT's input (one-value lists, strings as bytes, the passthrough
columns packed in one struct), how TFT's output is unpacked, and how a written transform_fn's
graph is applied to a batch outside Beam (the production logger). Imports no Beam; TensorFlow
only inside transform_values.
"""
import numpy as np
import pyarrow as pa

from transforms.spec.stages import PASSTHROUGH

__all__ = ["to_tft_batch", "passthrough_keys", "from_tft", "transform_values"]


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


def from_tft(element):
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


def transform_values(layer, batch, value_columns, features, batch_size):
  """{feature: per-record values}: `batch`'s value columns through a transform_fn's
  transform_features_layer(), fed as the pipeline feeds TFT (to_tft_batch: one-value VarLen
  sparse features, strings as bytes, the transform_fn's int64 / float64 / string inputs),
  `batch_size` records per call; a rank-1 output gives scalars."""
  import tensorflow as tf
  tft_batch = to_tft_batch(batch, value_columns)
  out = {f: [] for f in features}
  for lo in range(0, batch.num_rows, batch_size):
    chunk, inputs = tft_batch.slice(lo, batch_size), {}
    for name in value_columns:
      arr = chunk.column(name)
      rows = np.flatnonzero(arr.is_valid().to_numpy(zero_copy_only=False))
      flat = arr.flatten()
      if pa.types.is_integer(flat.type) or pa.types.is_floating(flat.type):
        dtype = tf.int64 if pa.types.is_integer(flat.type) else tf.float64
        values = flat.to_numpy(zero_copy_only=False).astype(dtype.as_numpy_dtype)
      else:
        dtype, values = tf.string, np.array(flat.to_pylist(), dtype=object)
      inputs[name] = tf.SparseTensor(np.stack([rows, np.zeros_like(rows)], axis=1),
                                     tf.constant(values, dtype=dtype), [len(arr), 1])
    # layer.call, not layer(...): Keras' __call__ autocasts float64 inputs to float32, which
    # a transform_fn analysed over float64 columns (as pipelines.features feeds them) refuses.
    result = layer.call(inputs)
    for f in features:
      t = result[f]
      t = tf.RaggedTensor.from_sparse(t) if isinstance(t, tf.SparseTensor) else t
      out[f].extend(t.to_list() if isinstance(t, tf.RaggedTensor) else t.numpy().tolist())
  return out
