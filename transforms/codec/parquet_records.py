"""Parquet files -> RecordBatches of their columns as Arrow reads them, with provenance.

Any column type Arrow reads keeps its type (integers, floats, booleans, strings, binary,
timestamps, dates, decimals...); a dictionary column is decoded. A list column holding one
value is that value and an empty list is null, as for tf.Example features; a row is rejected
when a list holds more values, when a struct or map column holds a value (an object), or when
a column not among the dataset's holds a value. A row's number is its 1-based position in the
file; its raw bytes are a JSON rendering of the row (sources.render_json).
"""
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from transforms.codec import sources
from transforms.codec.sources import SourceError

__all__ = ["column_names", "schema_of", "iter_batches"]

_MIN_ROWS, _MAX_ROWS = 1024, 1 << 20


def _open(f, path):
  """A ParquetFile over binary file object f."""
  try:
    # Parquet is read footer first, then by row group: it needs random access. A gzip stream
    # (Beam opens .gz files decompressing) seeks only by decompressing again from the start,
    # so such a file, or one that cannot seek, is read into memory once.
    seekable = getattr(f, "seekable", lambda: False)()
    if str(path).lower().endswith(".gz") or not seekable:
      return pq.ParquetFile(pa.BufferReader(f.read()))
    return pq.ParquetFile(f)
  except (pa.ArrowException, OSError) as e:
    raise SourceError(f"{path}: not a readable Parquet file ({e})") from None


def schema_of(f, path):
  """(the file's Arrow schema, its row count): what a plan checks of every input file."""
  pf = _open(f, path)
  return pf.schema_arrow, pf.metadata.num_rows


def column_names(f, path, opts):
  """The file's columns in schema order; None when it holds no row."""
  pf = _open(f, path)
  return list(pf.schema_arrow.names) if pf.metadata.num_rows else None


def iter_batches(f, path, names, file_index, opts):
  """Yields (batch, rejected, read) per batch of rows; see sources.iter_batches."""
  pf = _open(f, path)
  meta = pf.metadata
  row_bytes = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)) / \
      max(1, meta.num_rows)
  batch_rows = int(min(_MAX_ROWS, max(_MIN_ROWS, opts.block_bytes // max(1.0, row_bytes))))
  batches = pf.iter_batches(batch_size=batch_rows, use_threads=True)
  first = 1
  while True:
    try:
      rb = next(batches)
    except StopIteration:
      return
    except (pa.ArrowException, OSError) as e:
      raise SourceError(f"{path}: Parquet data cannot be read past row {first - 1} ({e})") \
          from None
    n = rb.num_rows
    raw = sources.render_json(pa.StructArray.from_arrays(rb.columns, fields=list(rb.schema))) \
        if rb.num_columns else pa.array([b"{}"] * n, pa.large_binary())
    batch, rejected = sources.finish(list(zip(rb.schema.names, rb.columns)), names, file_index,
                                     np.arange(first, first + n, dtype=np.int64), raw,
                                     text_columns=opts.text_columns)
    first += n
    yield batch, rejected, n
