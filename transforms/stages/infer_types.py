"""InferTypes: one pass over binary CSV batches -> the column types every value fits."""
import apache_beam as beam

from transforms.spec import schema

__all__ = ["InferTypes"]


class _TypeFlagsFn(beam.CombineFn):
  """Combines per-batch type flags; order-independent (or/and), so any bundling agrees."""

  def __init__(self, names):
    self._names = list(names)

  def create_accumulator(self):
    return {}

  def add_input(self, acc, element):
    _, batch = element
    return schema.merge_flags(acc, schema.type_flags(batch, self._names))

  def merge_accumulators(self, accs):
    out = {}
    for acc in accs:
      out = schema.merge_flags(out, acc)
    return out

  def extract_output(self, acc):
    return schema.infer_types(acc, self._names)


class InferTypes(beam.PTransform):
  """PCollection of (id, binary RecordBatch) -> singleton [(name, type)] in header order."""

  def __init__(self, names):
    super().__init__()
    self._names = names

  def expand(self, batches):
    return batches | "CombineFlags" >> beam.CombineGlobally(_TypeFlagsFn(self._names))
