"""tf.Example shards: Arrow table -> serialized tf.train.Example (tfx_bsl) -> TFRecord framing, and back.

tf.Example holds int64, float32 and bytes lists only, so FLOAT (float64) columns are written
as float32 (rounded to nearest); Parquet keeps them exact. Each CSV value becomes a
one-element list; a missing value is a feature with no value (decoded as null).
"""
import itertools
import struct

import google_crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tfx_bsl.coders import example_coder

__all__ = ["encode_examples", "frame_records", "read_records", "decode_examples",
           "TFRecordError"]

_MASK_DELTA = 0xA282EAD8


class TFRecordError(ValueError):
  """A TFRecord file whose framing or checksums are wrong."""


def _masked_crc(values):
  c = np.asarray(values, dtype=np.uint64)
  return ((((c >> np.uint64(15)) | (c << np.uint64(17))) + np.uint64(_MASK_DELTA))
          & np.uint64(0xFFFFFFFF)).astype("<u4")


def _as_example_column(arr):
  """A flat column as the one-value list column tf.Example encoding needs."""
  if pa.types.is_floating(arr.type):
    arr = arr.cast(pa.float32())
  elif pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
    arr = arr.cast(pa.binary())
  n = len(arr)
  offsets = pa.array(np.arange(n + 1, dtype=np.int32))
  return pa.ListArray.from_arrays(offsets, arr, mask=arr.is_null())


def encode_examples(table):
  """Serialized tf.train.Example bytes, one per row of a table of flat columns."""
  batch = pa.RecordBatch.from_arrays(
      [_as_example_column(table.column(i).combine_chunks()) for i in range(table.num_columns)],
      names=table.schema.names)
  return example_coder.RecordBatchToExamplesEncoder().encode(batch)


def frame_records(records):
  """TFRecord file bytes for a list of record bytes (length, masked CRC32C of it, data, masked
  CRC32C of data). The per-record CRC calls run inside C iterators, not Python loops."""
  n = len(records)
  if not n:
    return b""
  lengths = np.fromiter(map(len, records), dtype="<u8", count=n)
  data_crc = np.fromiter(map(google_crc32c.value, records), dtype=np.uint64, count=n)
  unique, inverse = np.unique(lengths, return_inverse=True)
  length_crc = np.array([google_crc32c.value(u.tobytes()) for u in unique], dtype=np.uint64)
  header = np.empty(n, dtype=[("len", "<u8"), ("crc", "<u4")])
  header["len"] = lengths
  header["crc"] = _masked_crc(length_crc)[inverse]
  heads = header.view("V12").tolist()
  tails = _masked_crc(data_crc).view("V4").tolist()
  return b"".join(itertools.chain.from_iterable(zip(heads, records, tails)))


def read_records(data):
  """Record bytes from TFRecord file bytes, checking framing and every CRC."""
  out = []
  pos, size = 0, len(data)
  view = memoryview(data)
  while pos < size:
    if size - pos < 12:
      raise TFRecordError(f"truncated record header at byte {pos}")
    (length,) = struct.unpack_from("<Q", data, pos)
    (lcrc,) = struct.unpack_from("<I", data, pos + 8)
    if int(_masked_crc([google_crc32c.value(bytes(view[pos:pos + 8]))])[0]) != lcrc:
      raise TFRecordError(f"bad length checksum at byte {pos}")
    end = pos + 12 + length
    if end + 4 > size:
      raise TFRecordError(f"truncated record at byte {pos}")
    record = bytes(view[pos + 12:end])
    (dcrc,) = struct.unpack_from("<I", data, end)
    if int(_masked_crc([google_crc32c.value(record)])[0]) != dcrc:
      raise TFRecordError(f"bad data checksum in record at byte {pos}")
    out.append(record)
    pos = end + 4
  return out


def decode_examples(records, columns):
  """A table of flat columns [(name, arrow type)] from serialized tf.Examples.

  FLOAT columns come back as the float32 values widened to float64.
  """
  if not records:
    return pa.table({name: pa.array([], typ) for name, typ in columns})
  batch = example_coder.ExamplesToRecordBatchDecoder().DecodeBatch(records)
  arrays = []
  for name, typ in columns:
    idx = batch.schema.get_field_index(name)
    if idx < 0:
      arrays.append(pa.nulls(len(records), typ))
      continue
    lists = batch.column(idx)
    lengths = pc.list_value_length(lists).fill_null(0)
    if pc.max(lengths).as_py() > 1:
      raise TFRecordError(f"feature {name!r} has more than one value")
    flat = pc.list_element(lists.fill_null(pa.scalar([None], lists.type)), 0) \
        if len(lists) else lists.flatten()
    flat = pc.if_else(pc.equal(lengths, 0), pa.scalar(None, flat.type), flat)
    if pa.types.is_string(typ):
      flat = flat.cast(pa.large_binary()).cast(pa.large_string()).cast(typ)
    else:
      flat = flat.cast(typ)
    arrays.append(flat)
  return pa.table(arrays, names=[name for name, _ in columns])
