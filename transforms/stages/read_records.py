"""ReadRecords: input files of any source format -> RecordBatches with provenance, and rejects.

CSV goes through ReadCsv (binary columns); JSON Lines, Parquet and TFRecord through the readers
of transforms/codec/sources.py (columns typed as the source has them). Both give the same
outputs, so TypeRows and everything after it read every format alike.
"""
import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from transforms.codec import sources
from transforms.spec.dataset import rejected_row
from transforms.stages.read_csv import READ, REJECTED, ReadCsv

__all__ = ["ReadRecords", "REJECTED", "READ"]

_NAMESPACE = "skewtrace.ingest"


class _ReadSourceFn(beam.DoFn):
  """(file index, path) -> ((file index, batch number), batch); rejects and counts tagged."""

  def __init__(self, names, options):
    self._names = list(names)
    self._options = options
    self._read = beam.metrics.Metrics.counter(_NAMESPACE, "rows_read")
    self._rejected = beam.metrics.Metrics.counter(_NAMESPACE, "rows_rejected_reading")

  def process(self, element):
    index, path = element
    with FileSystems.open(path) as f:  # compression inferred from the extension (.gz)
      batches = sources.iter_batches(f, path, self._names, index, self._options)
      for batch_no, (batch, rejected, read) in enumerate(batches):
        self._read.inc(read)
        self._rejected.inc(len(rejected))
        yield beam.pvalue.TaggedOutput(READ, read)
        for number, raw, reason in rejected:
          yield beam.pvalue.TaggedOutput(REJECTED, rejected_row(path, number, raw, reason))
        if batch.num_rows:
          yield (index, batch_no), batch


class ReadRecords(beam.PTransform):
  """Reads (file index, path) pairs of one source format (sources.SourceOptions).

  Main output: ((file index, batch number), RecordBatch) with the dataset's columns plus
  __file__, __line__ (line or record number) and __raw__. Tagged outputs: REJECTED dead-letter
  dicts and READ record counts. A file is read by one worker.
  """

  def __init__(self, names, options):
    super().__init__()
    self._names = names
    self._options = options

  def expand(self, files):
    if self._options.format == "csv":
      return files | "ReadCsv" >> ReadCsv(self._names, self._options.block_bytes,
                                          self._options.dialect)
    return files | "ReadSource" >> beam.ParDo(
        _ReadSourceFn(self._names, self._options)).with_outputs(REJECTED, READ, main="rows")
