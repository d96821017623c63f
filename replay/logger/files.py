"""The production logger's file primitives: a part's Parquet bytes, and a file staged under a
temp name with fsync before it is published by rename (the crash-consistency rule of
replay.logger: a part or run_metadata.json is whole or absent). docs/logger.md.
"""
import os

import pyarrow as pa
import pyarrow.parquet as pq

from transforms.spec import feature_log

__all__ = ["parquet_bytes", "read_part", "stage_file"]


def parquet_bytes(table, compression):
  """A feature-log part's Parquet bytes, written as the job writes its files."""
  sink = pa.BufferOutputStream()
  pq.write_table(table, sink, compression=compression,
                 **feature_log.parquet_options(table.schema.names))
  return sink.getvalue().to_pybytes()


def read_part(path):
  """A part's table, its page checksums verified."""
  return pq.read_table(path, **feature_log.read_options())


def stage_file(path, data):
  """Writes and fsyncs path + '.tmp'; returns that name (publish with os.replace)."""
  tmp = path + ".tmp"
  with open(tmp, "wb") as f:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
  return tmp
