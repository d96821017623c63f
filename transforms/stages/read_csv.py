"""ReadCsv: CSV files -> RecordBatches of binary columns with provenance, and rejected records."""
import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from transforms.codec import csv_records
from transforms.spec.dataset import rejected_row

__all__ = ["ReadCsv", "REJECTED", "READ"]

REJECTED, READ = "rejected", "read"
_NAMESPACE = "skewtrace.ingest"


class _ReadFileFn(beam.DoFn):
  """(file index, path) -> ((file index, block), batch); rejected dicts and read counts tagged."""

  def __init__(self, names, block_bytes, dialect):
    self._names = list(names)
    self._block_bytes, self._dialect = block_bytes, dialect
    self._read = beam.metrics.Metrics.counter(_NAMESPACE, "rows_read")
    self._rejected = beam.metrics.Metrics.counter(_NAMESPACE, "rows_rejected_reading")

  def process(self, element):
    index, path = element
    with FileSystems.open(path) as f:  # compression inferred from the extension (.gz)
      for block_no, block in enumerate(csv_records.iter_blocks(f, self._block_bytes,
                                                               self._dialect)):
        if block_no == 0:
          names = csv_records.parse_header(block, self._dialect)
          if names != self._names:
            raise ValueError(f"{path}: header {names} differs from {self._names}")
          block = csv_records.without_first(block)
        if not len(block.starts):
          continue
        batch, rejected = csv_records.parse_block(block, self._names, index, self._dialect)
        self._read.inc(len(block.starts))
        self._rejected.inc(len(rejected))
        yield beam.pvalue.TaggedOutput(READ, len(block.starts))
        for line, raw, reason in rejected:
          yield beam.pvalue.TaggedOutput(REJECTED, rejected_row(path, line, raw, reason))
        if batch.num_rows:
          yield (index, block_no), batch


class ReadCsv(beam.PTransform):
  """Reads (file index, path) pairs of headed CSV files.

  Main output: ((file index, block number), RecordBatch) with the header's columns as binary
  (null for empty cells) plus __file__, __line__ and __raw__. Tagged outputs: REJECTED
  dead-letter dicts and READ record counts. A file is read by one worker, in blocks.
  """

  def __init__(self, names, block_bytes=8 << 20, dialect=csv_records.DEFAULT):
    super().__init__()
    self._names = names
    self._block_bytes, self._dialect = block_bytes, dialect

  def expand(self, files):
    return files | "ParseBlocks" >> beam.ParDo(
        _ReadFileFn(self._names, self._block_bytes, self._dialect)).with_outputs(
            REJECTED, READ, main="rows")
