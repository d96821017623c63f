"""TransformRecords: TF Transform (analyze + transform) over RecordBatches, columns passed through.

Input batches hold flat columns (one value or null per record); they are fed to
tft_beam.AnalyzeAndTransformDataset as one-value list columns with a TFXIO TensorAdapterConfig
(a VarLenSparse tensor per feature, as TFXIO gives a one-value TFMD feature). The `passthrough`
columns (for the feature log: the record's log hash and raw fingerprint) ride along as one TFT
passthrough column, hidden from preprocessing_fn: TFT hands them back row-aligned with its
output. Output: RecordBatches of the transformed features (as TFT emits them: one list per
feature) plus the passthrough columns (flat again), and the transform_fn. With a
`transform_fn_dir`, that transform_fn (tft_beam.ReadTransformFn) transforms the batches
(tft_beam.TransformDataset): no analysis. Must run inside a tft_beam.Context whose
passthrough_keys are passthrough_keys(passthrough).
"""
import apache_beam as beam
import pyarrow as pa
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from tensorflow_transform.tf_metadata import schema_utils

from transforms.beam import arrow_coder  # noqa: F401  (registers the RecordBatch coder)
from transforms.graph.feed import from_tft, tensor_adapter_config, to_tft_batch


__all__ = ["TransformRecords"]


class TransformRecords(beam.PTransform):
  """RecordBatches (flat feature columns) -> (transformed batches, transform_fn).

  Must run inside a tft_beam.Context; `arrow_schema` is the schema to_tft_batch produces (with
  the same passthrough columns). preprocessing_fn is None when a `transform_fn_dir` is given.
  """

  def __init__(self, preprocessing_fn, feature_columns, arrow_schema, passthrough=None,
               transform_fn_dir=None):
    super().__init__()
    self._fn = preprocessing_fn
    self._features = list(feature_columns)
    self._arrow_schema = arrow_schema
    self._passthrough = dict(passthrough or {})
    self._dir = transform_fn_dir
    self.output_features = None  # the transformed feature names, known once expanded
    self.output_dtypes = None  # {feature: TF dtype name, None when not one value per record}

  def expand(self, batches):
    if self._dir:
      return self._transform_with_fn(batches)
    adapter = tensor_adapter_config(self._arrow_schema, self._features)
    tft_batches = batches | "ToTftBatches" >> beam.Map(
        to_tft_batch, self._features, self._passthrough).with_output_types(pa.RecordBatch)
    (transformed, metadata), transform_fn = (
        (tft_batches, adapter)
        | "AnalyzeAndTransform" >> tft_beam.AnalyzeAndTransformDataset(
            self._fn, output_record_batches=True))
    self._outputs(schema_utils.schema_as_feature_spec(metadata.schema).feature_spec)
    return (transformed | "UnpackPassthrough" >> beam.Map(from_tft).with_output_types(
        pa.RecordBatch)), transform_fn

  def _outputs(self, feature_spec):
    self.output_features = sorted(feature_spec)
    self.output_dtypes = {n: s.dtype.name if getattr(s, "shape", None) in ([], [1], ()) else None
                          for n, s in sorted(feature_spec.items())}

  def _transform_with_fn(self, batches):
    adapter = tensor_adapter_config(self._arrow_schema, self._features)
    tft_batches = batches | "ToTftBatches" >> beam.Map(
        to_tft_batch, self._features, self._passthrough).with_output_types(pa.RecordBatch)
    transform_fn = batches.pipeline | "ReadTransformFn" >> tft_beam.ReadTransformFn(self._dir)
    transformed, _ = ((tft_batches, adapter), transform_fn) | "Transform" >> \
        tft_beam.TransformDataset(output_record_batches=True)
    self._outputs(tft.TFTransformOutput(self._dir).transformed_feature_spec())
    return (transformed | "UnpackPassthrough" >> beam.Map(from_tft).with_output_types(
        pa.RecordBatch)), transform_fn
