"""tf.Example shards: Arrow table -> deterministic tf.train.Example TFRecord bytes, and back.

This module is the TFRecord framing (each record: its length, the length's masked CRC32C, the
bytes, their masked CRC32C) and the entry points the rest of the project imports. The parts
are their own modules: example_encode.py writes the Examples (and their framing, in the same
compiled pass), example_decode.py and example_parse.py read them back, crc32c.py checksums.
encode_examples, decode_examples and TFRecordError are re-exported from there so that callers
keep one import, `from transforms.codec import tfrecord`.
"""
import numba
import numpy as np
import pyarrow as pa

from transforms.codec.crc32c import CRC_TABLE, crc32c_masked
from transforms.codec.example_decode import TFRecordError, decode_examples, decode_records
from transforms.codec.example_encode import encode_examples, encode_table

__all__ = ["encode_tfrecord", "decode_tfrecord", "encode_examples", "decode_examples",
           "read_records", "TFRecordError"]


def encode_tfrecord(table):
  """TFRecord file bytes (a uint8 numpy array): one tf.train.Example per row of a table of flat
  columns.

  Serialization is deterministic (features sorted by name, as protobuf's deterministic mode
  orders map keys; a null value is an absent feature), so equal tables give equal bytes.
  tfx_bsl's RecordBatchToExamplesEncoder serializes the feature map in an unspecified order
  that changes between calls, which would break byte-identical shards.
  """
  return encode_table(table, True)[0]


@numba.njit(cache=True, nogil=True)
def _frames(buf, table):
  """(record starts, record ends, error code, error position) of TFRecord bytes.

  Error codes: 0 none, 1 truncated header, 2 bad length checksum, 3 truncated record,
  4 bad data checksum.
  """
  size = buf.size
  starts = np.empty(size // 16 + 1, dtype=np.int64)
  ends = np.empty(size // 16 + 1, dtype=np.int64)
  n = 0
  pos = 0
  while pos < size:
    if size - pos < 12:
      return starts[:n], ends[:n], 1, pos
    length = 0
    for q in range(8):
      length |= np.int64(buf[pos + q]) << (8 * q)
    stored = np.uint32(0)
    for q in range(4):
      stored |= np.uint32(buf[pos + 8 + q]) << np.uint32(8 * q)
    if np.uint32(crc32c_masked(buf, pos, pos + 8, table) & 0xFFFFFFFF) != stored:
      return starts[:n], ends[:n], 2, pos
    end = pos + 12 + length
    if length < 0 or end + 4 > size:
      return starts[:n], ends[:n], 3, pos
    stored = np.uint32(0)
    for q in range(4):
      stored |= np.uint32(buf[end + q]) << np.uint32(8 * q)
    if np.uint32(crc32c_masked(buf, pos + 12, end, table) & 0xFFFFFFFF) != stored:
      return starts[:n], ends[:n], 4, pos
    starts[n] = pos + 12
    ends[n] = end
    n += 1
    pos = end + 4
  return starts[:n], ends[:n], 0, pos


_FRAME_ERRORS = {1: "truncated record header", 2: "bad length checksum",
                 3: "truncated record", 4: "bad data checksum in record"}


def read_records(data):
  """Record bytes (a list) from TFRecord file bytes, checking framing and every CRC."""
  buf = np.frombuffer(data, dtype=np.uint8)
  starts, ends, error, pos = _frames(buf, CRC_TABLE)
  if error:
    raise TFRecordError(f"{_FRAME_ERRORS[error]} at byte {pos}")
  offsets = np.zeros(len(starts) + 1, dtype=np.int64)
  np.cumsum(ends - starts, out=offsets[1:])
  data_bytes = np.ones(buf.size, dtype=bool)  # all but each record's 12 + 4 framing bytes
  data_bytes[(starts[:, None] - 12 + np.arange(12)).ravel()] = False
  data_bytes[(ends[:, None] + np.arange(4)).ravel()] = False
  array = pa.Array.from_buffers(pa.large_binary(), len(starts),
                                [None, pa.py_buffer(offsets), pa.py_buffer(buf[data_bytes])])
  return array.to_pylist()


def decode_tfrecord(data, columns):
  """A table of flat columns [(name, arrow type)] from TFRecord bytes of one-value tf.Examples.

  Checks framing and every CRC, then parses the Example protobufs in one compiled pass (packed
  or unpacked lists, unknown fields skipped, repeated keys last-wins). An absent feature or an
  empty list decodes as null; FLOAT columns come back as the float32 values widened to the
  column's type. Raises TFRecordError for damage, more than one value, or a feature whose list
  type is not its column's.
  """
  buf = np.frombuffer(data, dtype=np.uint8)
  starts, ends, error, pos = _frames(buf, CRC_TABLE)
  if error:
    raise TFRecordError(f"{_FRAME_ERRORS[error]} at byte {pos}")
  return decode_records(buf, starts, ends, columns)
