"""RecordBatchCoder: the Beam coder of pa.RecordBatch PCollections -- Arrow IPC, sized without encoding.

Beam's SDK harness estimates the bytes of the elements of every PCollection it produces, for
its MeanByteCount metrics, by encoding sampled elements with the PCollection's coder (the first
ten of each PCollection, then fewer and fewer: opcounters.OperationCounters.do_sample). A
RecordBatch has no Beam coder, so it falls back to pickling: in a pipeline of a few large
batches every batch was pickled once per step it passed (for 1M taxi rows through
pipelines.features, 171 pickles, 5.4 GB, and as many freshly faulted pages). This coder answers
the estimate from the batch's buffer sizes and, where a runner really moves a batch between
stages or workers, encodes it as one Arrow IPC stream message (decoded zero-copy).

Steps whose outputs are RecordBatches declare `.with_output_types(pa.RecordBatch)`; importing
this module registers the coder for that type (every module declaring such outputs imports it),
and TableCoder, the same for whole pa.Table elements (`.with_output_types(pa.Table)`), for
pa.Table.
"""
import apache_beam as beam
import pyarrow as pa
from apache_beam.coders import coder_impl

__all__ = ["RecordBatchCoder", "TableCoder", "same_type"]


def _encode(value):
  """A RecordBatch or a Table as one Arrow IPC stream (schema, then its batches)."""
  sink = pa.BufferOutputStream()
  with pa.ipc.new_stream(sink, value.schema) as writer:
    writer.write(value)
  return sink.getvalue().to_pybytes()


def _decode_batch(data):
  return pa.ipc.open_stream(pa.py_buffer(data)).read_next_batch()


def _decode_table(data):
  return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def _size(value):
  return value.get_total_buffer_size()


class _ArrowCoder(beam.coders.Coder):
  """An Arrow type <-> one Arrow IPC stream, sized from its buffers; not deterministic (never
  a key: IPC bytes of equal values may differ in buffer layout)."""

  TYPE, DECODE = None, None

  def encode(self, value):
    return _encode(value)

  def decode(self, encoded):
    return type(self).DECODE(encoded)

  def is_deterministic(self):
    return False

  def _create_impl(self):
    return coder_impl.CallbackCoderImpl(_encode, type(self).DECODE, _size)

  def to_type_hint(self):
    return self.TYPE


class RecordBatchCoder(_ArrowCoder):
  """pa.RecordBatch <-> one Arrow IPC stream (schema and batch)."""

  TYPE, DECODE = pa.RecordBatch, staticmethod(_decode_batch)


class TableCoder(_ArrowCoder):
  """pa.Table <-> one Arrow IPC stream (schema and its batches): tables passed whole between
  steps (e.g. the windowed counts side input)."""

  TYPE, DECODE = pa.Table, staticmethod(_decode_table)


beam.coders.registry.register_coder(pa.RecordBatch, RecordBatchCoder)
beam.coders.registry.register_coder(pa.Table, TableCoder)


def same_type(pcoll):
  """The output type hint of a step that passes its input elements on (e.g. a counter)."""
  return pcoll.element_type if pcoll.element_type is not None else beam.typehints.Any
