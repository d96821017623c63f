"""The TF Transform feed, shared by the features job and the production logger: how a batch of
flat record columns becomes TFT's input (one-value lists, strings as bytes, the passthrough
columns packed in one struct), how TFT's output is unpacked, how a written transform_fn's
graph is applied to a batch outside Beam (the production logger), and whether a folder is a
written transform_fn that takes what this feed gives (check_transform_fn: pipelines.features
--transform_fn_dir). Imports no Beam; TensorFlow only inside the functions that need it.
"""
import numpy as np
import pyarrow as pa

from transforms.graph import quiet
from transforms.spec.feature_log import TRANSFORM_FN_DIR
from transforms.spec.stages import PASSTHROUGH

__all__ = ["to_tft_batch", "passthrough_keys", "from_tft", "transform_values", "feed_dtype",
           "transform_fn_inputs", "input_mismatch", "check_transform_fn", "tensor_adapter_config",
           "transform_function"]


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


def feed_dtype(arrow_type):
  """The TF dtype name a flat column of `arrow_type` reaches preprocessing_fn as: int64 for
  integers, float64 for floats (the exact values), string for anything else."""
  if pa.types.is_integer(arrow_type):
    return "int64"
  if pa.types.is_floating(arrow_type):
    return "float64"
  return "string"


def transform_fn_inputs(transform_fn_dir):
  """{input name: tf.TypeSpec} of the transform function of a TFT output folder (what
  tft.TFTransformOutput reads: transform_fn_dir/transform_fn, a TF2 SavedModel). ValueError, one
  line, when it holds no such function."""
  tf = quiet.import_tensorflow()
  import tensorflow_transform as tft
  model_dir = transform_fn_dir.rstrip("/") + "/" + tft.TFTransformOutput.TRANSFORM_FN_DIR
  try:
    loaded = tf.saved_model.load(model_dir)
  except (OSError, ValueError, tf.errors.OpError) as e:
    raise ValueError(f"cannot load {model_dir} ({str(e).splitlines()[0][:200]})") from None
  # TFT saves the function as the attribute named like its folder (impl_helper's
  # write_v2_saved_model(module, transform_fn, "transform_fn", ...)).
  fn = getattr(loaded, tft.TFTransformOutput.TRANSFORM_FN_DIR, None)
  if fn is None:  # TFT's tf.compat.v1 exports hold a signature instead
    raise ValueError(f"{model_dir} holds no TF2 transform_fn (a tf.compat.v1 TFT export?)")
  if hasattr(fn, "concrete_functions"):
    fn = fn.concrete_functions[0]
  return dict(fn.structured_input_signature[0][0])


def input_mismatch(transform_fn_dir, arrow_types):
  """None when the transform_fn in `transform_fn_dir` takes exactly what this feed gives for the
  columns {name: arrow type} -- one VarLen sparse tensor per column, of feed_dtype -- else one
  line naming what differs. ValueError when it holds no transform function."""
  tf = quiet.import_tensorflow()
  inputs = transform_fn_inputs(transform_fn_dir)
  lacking = sorted(set(inputs) - set(arrow_types))
  extra = sorted(set(arrow_types) - set(inputs))
  problems = []
  if lacking:
    problems.append(f"it takes input(s) {', '.join(lacking)} that the dataset + aggregates lack")
  if extra:
    problems.append(f"it does not take {', '.join(extra)}")
  for name in sorted(set(inputs) & set(arrow_types)):
    spec, want = inputs[name], feed_dtype(arrow_types[name])
    if not isinstance(spec, tf.SparseTensorSpec):
      problems.append(f"{name} is a {type(spec).__name__} there, fed as a one-value "
                      "SparseTensor here")
    elif spec.dtype.name != want:
      problems.append(f"{name} is {spec.dtype.name} there, {want} here")
  return "; ".join(problems) or None


def check_transform_fn(transform_fn_dir, arrow_types=None):
  """ValueError, one line, unless `transform_fn_dir` is a TF Transform output folder (its saved
  transform function and transformed metadata, where tft.TFTransformOutput reads them) and,
  given the fed columns' {name: arrow type}, its transform function takes exactly those
  (input_mismatch)."""
  tf = quiet.import_tensorflow()
  import tensorflow_transform as tft
  root = transform_fn_dir.rstrip("/")
  for sub, name in ((tft.TFTransformOutput.TRANSFORM_FN_DIR, "saved_model.pb"),
                    (tft.TFTransformOutput.TRANSFORMED_METADATA_DIR, "schema.pbtxt")):
    if not tf.io.gfile.exists(f"{root}/{sub}/{name}"):
      inner = f"{root}/{TRANSFORM_FN_DIR}"  # a features run's output folder holds one there
      hint = (f"; a features run's output: pass {inner}" if tf.io.gfile.exists(
          f"{inner}/{tft.TFTransformOutput.TRANSFORM_FN_DIR}/saved_model.pb") else "")
      raise ValueError(f"not a TF Transform output (no {sub}/{name}){hint}")
  problem = None if arrow_types is None else input_mismatch(transform_fn_dir, arrow_types)
  if problem:
    raise ValueError(f"its inputs do not match the dataset + aggregates: {problem}")


def tensor_adapter_config(arrow_schema, feature_columns):
  """The TFXIO TensorAdapterConfig of to_tft_batch batches (schema `arrow_schema`): one VarLen
  sparse tensor per feature column, as TFXIO gives a one-value TFMD feature. (tfx_bsl's
  tensor_adapter imports TensorFlow, not Beam: imported here, not at the top.)"""
  from tensorflow_metadata.proto.v0 import schema_pb2
  from tfx_bsl.tfxio import tensor_adapter
  varlen = schema_pb2.TensorRepresentation.VarLenSparseTensor
  return tensor_adapter.TensorAdapterConfig(arrow_schema, {
      name: schema_pb2.TensorRepresentation(varlen_sparse_tensor=varlen(column_name=name))
      for name in feature_columns})


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


def transform_function(transform_fn_dir, input_names):
  """(transform, feature_spec): the transform function of a TFT output folder as tft_beam
  applies it (impl.py's _GraphStateV2: a SavedModelLoader finalized for exactly these inputs and
  every output), a callable {input: tensor} -> {feature: tensor}; feature_spec: its
  transformed_feature_spec() ({feature: tf.io feature spec}).
  Twice the records/s of transform_features_layer() on the same tensors (bench/logger.py): the
  layer calls the loaded function with flat arguments, which TF first tries to bind to its
  structured signature and formats into an error message."""
  quiet.import_tensorflow()  # its native start-up lines kept off a library caller's stderr
  import tensorflow_transform as tft
  from tensorflow_transform.saved import saved_transform_io_v2
  output = tft.TFTransformOutput(transform_fn_dir)
  loader = saved_transform_io_v2.SavedModelLoader(output.transform_savedmodel_dir)
  loader.finalize(list(input_names), sorted(loader.structured_outputs))
  return loader.apply_transform_model, output.transformed_feature_spec()


def transform_values(transform, batch, value_columns, features, batch_size, types=None):
  """{feature: Arrow array of per-record values}: `batch`'s value columns through `transform`
  (transform_function's), fed as the pipeline feeds TFT -- to_tft_batch, then TFXIO's
  TensorAdapter (one-value VarLen sparse features, strings as bytes), as tft_beam converts its
  RecordBatches -- `batch_size` records per call; a rank-1 output gives scalars, others lists.
  types: {feature: its Arrow type} (default: inferred). Outputs go to Arrow through numpy
  buffers, never through Python lists (7x the transform's own time was lists)."""
  from tfx_bsl.tfxio import tensor_adapter
  tft_batch = to_tft_batch(batch, value_columns)
  adapter = tensor_adapter.TensorAdapter(tensor_adapter_config(tft_batch.schema, value_columns))
  types = types or {}
  out = {f: [] for f in features}
  for lo in range(0, batch.num_rows, batch_size):
    result = transform(adapter.ToBatchTensors(tft_batch.slice(lo, batch_size)))
    for f in features:
      out[f].append(_to_arrow(result[f], types.get(f)))
  return {f: pa.concat_arrays(chunks) if chunks else pa.array([], types.get(f))
          for f, chunks in out.items()}


def _to_arrow(tensor, typ):
  """A transform output tensor as an Arrow array: rank 1 -> scalars; ragged, sparse or rank 2
  -> large lists (typ: the array's type, or None to infer it)."""
  tf = quiet.import_tensorflow()
  if isinstance(tensor, tf.SparseTensor):
    tensor = tf.RaggedTensor.from_sparse(tensor)
  value_type = typ.value_type if typ is not None and pa.types.is_large_list(typ) else typ
  if isinstance(tensor, tf.RaggedTensor):
    values, splits = tensor.flat_values.numpy(), tensor.row_splits.numpy().astype(np.int64)
  else:
    values = tensor.numpy()
    if values.ndim == 1:
      return pa.array(values, typ)
    splits = np.arange(0, values.size + 1, max(1, values.shape[1]), dtype=np.int64)
    values = values.reshape(-1)
  return pa.LargeListArray.from_arrays(pa.array(splits), pa.array(values, value_type))
