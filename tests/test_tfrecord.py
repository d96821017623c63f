"""The deterministic tf.Example/TFRecord encoder against protobuf, TensorFlow and tfx_bsl."""
import numpy as np
import pyarrow as pa
import pytest

from transforms import tfrecord


def _table():
  # String lengths 0..299 sweep the 1- and 2-byte varint boundaries of every length field
  # (value, BytesList, Feature, map entry and Features message).
  n = 300
  return pa.table({
      "s": pa.array(["x" * i if i % 7 else None for i in range(n)], pa.string()),
      "i": pa.array([(-1) ** i * (2 ** (i % 64) - 1) if i % 5 else None for i in range(n)],
                    pa.int64()),
      "f": pa.array([i / 7 if i % 3 else None for i in range(n)], pa.float64()),
      "ünï": pa.array([str(i) for i in range(n)], pa.string()),
      "a": pa.array([b"\x00\xff" * (i % 3) for i in range(n)], pa.binary()),
  })


def _protobuf_examples(table):
  import tensorflow as tf
  out = []
  for row in table.to_pylist():
    ex = tf.train.Example()
    for k, v in row.items():
      if v is None:
        continue
      feature = ex.features.feature[k]
      if isinstance(v, int):
        feature.int64_list.value.append(v)
      elif isinstance(v, float):
        feature.float_list.value.append(v)
      else:
        feature.bytes_list.value.append(v if isinstance(v, bytes) else v.encode("utf-8"))
    out.append(ex.SerializeToString(deterministic=True))
  return out


def test_records_equal_protobuf_deterministic_serialization():
  table = _table()
  records = tfrecord.read_records(tfrecord.encode_tfrecord(table).tobytes())
  assert records == _protobuf_examples(table)


def test_tensorflow_reads_the_file_and_tfx_bsl_decodes_the_values(tmp_path):
  import tensorflow as tf
  table = _table()
  path = tmp_path / "x.tfrecord"
  path.write_bytes(tfrecord.encode_tfrecord(table).tobytes())
  assert sum(1 for _ in tf.data.TFRecordDataset([str(path)])) == table.num_rows
  columns = [(f.name, f.type) for f in table.schema]
  back = tfrecord.decode_examples(tfrecord.read_records(path.read_bytes()), columns)
  expected = table.set_column(2, "f", table.column("f").cast(pa.float32()).cast(pa.float64()))
  assert back.equals(expected)


def test_encoding_does_not_depend_on_chunking():
  table = _table()
  chunked = pa.concat_tables([table.slice(0, 100), table.slice(100)])
  assert tfrecord.encode_tfrecord(chunked).tobytes() == tfrecord.encode_tfrecord(table).tobytes()


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_reader_checks_framing_and_checksums(damage):
  data = bytearray(tfrecord.encode_tfrecord(_table()).tobytes())
  if damage == "flip":
    data[len(data) // 2] ^= 0x10
  else:
    data = data[:-3]
  with pytest.raises(tfrecord.TFRecordError):
    tfrecord.read_records(bytes(data))


def test_empty_table_is_an_empty_file():
  table = _table().slice(0, 0)
  assert tfrecord.encode_tfrecord(table).tobytes() == b""
  assert np.asarray(tfrecord.read_records(b"")).size == 0


def test_framing_checksums_agree_with_google_crc32c():
  import struct

  import google_crc32c

  def masked(data):
    c = google_crc32c.value(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

  data = tfrecord.encode_tfrecord(_table()).tobytes()
  pos, count = 0, 0
  while pos < len(data):
    (length,) = struct.unpack_from("<Q", data, pos)
    assert struct.unpack_from("<I", data, pos + 8)[0] == masked(data[pos:pos + 8])
    end = pos + 12 + length
    assert struct.unpack_from("<I", data, end)[0] == masked(data[pos + 12:end])
    pos, count = end + 4, count + 1
  assert count == _table().num_rows
