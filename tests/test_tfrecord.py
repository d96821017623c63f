"""The deterministic tf.Example/TFRecord encoder against protobuf, TensorFlow and tfx_bsl."""
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from transforms.codec import crc32c, example_decode, tfrecord, words


def _table():
  # String lengths 0..299 sweep the 1- and 2-byte varint boundaries of every length field
  # (value, BytesList, Feature, map entry and Features message); ints sweep every varint length
  # (1..10 bytes, negatives included).
  n = 300
  return pa.table({
      "s": pa.array(["x" * i if i % 7 else None for i in range(n)], pa.string()),
      "i": pa.array([(-1) ** i * (2 ** (i % 64) - 1) if i % 5 else None for i in range(n)],
                    pa.int64()),
      "f": pa.array([i / 7 if i % 3 else None for i in range(n)], pa.float64()),
      "ünï": pa.array([str(i) for i in range(n)], pa.string()),
      "a": pa.array([b"\x00\xff" * (i % 3) for i in range(n)], pa.binary()),
      # a 130-byte name: two-byte key and entry lengths in every kind's map entry
      "n" * 130: pa.array([-i if i % 2 else None for i in range(n)], pa.int64()),
      "m" * 130: pa.array([i / 3 for i in range(n)], pa.float32()),
      "o" * 130: pa.array([b"y" * i for i in range(n)], pa.binary()),
  })


def decode_examples(records, columns):
  """The reference decoder (tfx_bsl): a table of flat columns [(name, arrow type)] from serialized tf.Examples.

  FLOAT columns come back as the float32 values widened to float64.
  """
  if not records:
    return pa.table({name: pa.array([], typ) for name, typ in columns})
  from tfx_bsl.coders import example_coder
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
      raise tfrecord.TFRecordError(f"feature {name!r} has more than one value")
    flat = pc.list_element(lists.fill_null(pa.scalar([None], lists.type)), 0) \
        if len(lists) else lists.flatten()
    flat = pc.if_else(pc.equal(lengths, 0), pa.scalar(None, flat.type), flat)
    if pa.types.is_string(typ):
      flat = flat.cast(pa.large_binary()).cast(pa.large_string()).cast(typ)
    else:
      flat = flat.cast(typ)
    arrays.append(flat)
  return pa.table(arrays, names=[name for name, _ in columns])


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
  back = decode_examples(tfrecord.read_records(path.read_bytes()), columns)
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


def test_both_crc32c_kernels_agree_with_google_crc32c():
  import google_crc32c

  def masked(data):
    c = google_crc32c.value(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

  kernels = [crc32c.crc32c_masked_table]  # numba dispatchers: callable from Python too
  if crc32c.HARDWARE_CRC:  # this CPU has SSE4.2: its kernel is the one the encoder uses
    kernels.append(crc32c.crc32c_masked_sse42)
  assert crc32c.crc32c_masked is (crc32c.crc32c_masked_sse42 if crc32c.HARDWARE_CRC
                                  else crc32c.crc32c_masked_table)
  buf = np.frombuffer(np.random.default_rng(11).bytes(5000), dtype=np.uint8)
  for lo, hi in [(0, 0), (0, 1), (3, 11), (5, 12), (1, 100), (7, 557), (0, 5000)]:
    for kernel in kernels:
      got = int(kernel(buf, lo, hi, crc32c.CRC_TABLE)) & 0xFFFFFFFF  # callers keep 32 bits
      assert got == masked(buf[lo:hi].tobytes()), (lo, hi)



def test_hardware_crc_follows_the_cpu_features_numba_targets(monkeypatch):
  import platform
  import numba
  x86 = platform.machine().lower() in ("x86_64", "amd64")
  for features, expected in [("", False), ("+sse4.1,-sse4.2", False),
                             ("+sse4.2,+popcnt", x86), ("+popcnt,+sse4.2", x86)]:
    monkeypatch.setattr(numba.core.config, "CPU_FEATURES", features)
    assert crc32c._has_sse42() is expected, features
  monkeypatch.setattr(numba.core.config, "CPU_FEATURES", None)  # the host's, as at import
  assert crc32c._has_sse42() == crc32c.HARDWARE_CRC

def _frame(records):
  """TFRecord framing of record bytes (TensorFlow's writer)."""
  import tensorflow as tf
  import tempfile, os
  with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "r.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
      for r in records:
        w.write(r)
    with open(path, "rb") as f:
      return f.read()


def test_compiled_decoder_equals_tfx_bsl_on_our_encoding():
  table = _table()
  data = tfrecord.encode_tfrecord(table).tobytes()
  columns = [(f.name, f.type) for f in table.schema] + [("absent", pa.int64())]
  assert tfrecord.decode_tfrecord(data, columns).equals(
      decode_examples(tfrecord.read_records(data), columns))




def test_word_intrinsics_refuse_arrays_they_cannot_address():
  """load_u64 / store_u64 address data pointer + position: a strided or non-uint8 array
  would be read wrong, so numba refuses to compile such a call."""
  import numba
  load = numba.njit(lambda a: words.load_u64(a, 0))
  data = np.arange(40, dtype=np.uint8)
  assert load(data) == int.from_bytes(bytes(range(8)), "little")
  for bad in (data[::2], data.view(np.uint32)):
    with pytest.raises(numba.core.errors.TypingError):
      load(bad)

def test_decoder_fast_path_takes_our_encoding_and_agrees_with_the_parser(monkeypatch):
  """The template-matching fast path (_decode_canonical) decodes what encode_tfrecord writes
  exactly as the protobuf parser (parse_examples) does, and gives way to it for anything else."""
  real = example_decode._decode_canonical
  taken = []

  def spy(*args):
    taken.append(bool(real(*args)))
    return taken[-1]

  def both(data, columns):
    # decode_tfrecord reaches the fast path through example_decode's global: patched there.
    monkeypatch.setattr(example_decode, "_decode_canonical", spy)
    fast = tfrecord.decode_tfrecord(data, columns)
    monkeypatch.setattr(example_decode, "_decode_canonical", lambda *args: False)
    return fast, tfrecord.decode_tfrecord(data, columns)

  table = _table()
  nulls = pa.table({n: pa.nulls(5, t) for n, t in zip(table.schema.names, table.schema.types)})
  for t in (table, table.slice(7, 50), nulls, table.slice(0, 0)):
    columns = [(f.name, f.type) for f in t.schema] + [("absent", pa.int64())]
    fast, slow = both(tfrecord.encode_tfrecord(t).tobytes(), columns)
    assert taken[-1] and fast.equals(slow) and fast.num_rows == t.num_rows
  # Fewer columns asked than written: the records hold entries of no column, parsed instead.
  columns = [("i", pa.int64()), ("s", pa.string())]
  fast, slow = both(tfrecord.encode_tfrecord(table).tobytes(), columns)
  assert not taken[-1] and fast.equals(slow)
  # protobuf's own serialization: whatever the fast path says, the same values.
  fast, slow = both(_frame(_protobuf_examples(table)), [(f.name, f.type) for f in table.schema])
  assert fast.equals(slow)

def test_compiled_decoder_reads_any_valid_encoding_as_tfx_bsl_does():
  """Examples written by protobuf in forms our encoder never uses: unpacked lists, an empty
  list, a Feature with no list, a feature of no column, fields in reverse order."""
  import tensorflow as tf
  records = []
  ex = tf.train.Example()
  ex.features.feature["i"].int64_list.value.append(-5)
  ex.features.feature["f"].float_list.value.append(2.5)
  ex.features.feature["s"].bytes_list.value.append(b"abc")
  ex.features.feature["other"].bytes_list.value.extend([b"x", b"y"])
  records.append(ex.SerializeToString())
  ex = tf.train.Example()
  ex.features.feature["i"].int64_list.SetInParent()  # empty list -> null
  ex.features.feature["f"].SetInParent()  # no list at all -> null
  records.append(ex.SerializeToString())
  # Unpacked int64 (wire type 0) and float (wire type 5) by hand, keys in reverse order.
  def entry(key, feature):
    k = key.encode()
    body = b"\x0a" + bytes([len(k)]) + k + b"\x12" + bytes([len(feature)]) + feature
    return b"\x0a" + bytes([len(body)]) + body
  int_list = b"\x08\x07"  # field 1 varint 7
  float_list = b"\x0d" + np.float32(-0.25).tobytes()
  feats = entry("s", b"\x0a\x03\x0a\x01z") + entry("i", b"\x1a" + bytes([len(int_list)]) + int_list) \
      + entry("f", b"\x12" + bytes([len(float_list)]) + float_list)
  records.append(b"\x0a" + bytes([len(feats)]) + feats)
  data = _frame(records)
  columns = [("f", pa.float64()), ("i", pa.int64()), ("s", pa.string())]
  ours = tfrecord.decode_tfrecord(data, columns)
  # What tfx_bsl decodes, as one-value lists (an empty list counts as missing).
  from tfx_bsl.coders import example_coder
  lists = example_coder.ExamplesToRecordBatchDecoder().DecodeBatch(tfrecord.read_records(data))
  for name, _ in columns:
    theirs = [v[0] if v else None for v in lists.column(lists.schema.get_field_index(name))
              .to_pylist()]
    assert [v.encode() if isinstance(v, str) else v for v in ours.column(name).to_pylist()] \
        == theirs
  assert ours.to_pylist() == [{"f": 2.5, "i": -5, "s": "abc"}, {"f": None, "i": None, "s": None},
                              {"f": -0.25, "i": 7, "s": "z"}]


@pytest.mark.parametrize("record, message", [
    (b"\x0a\x05\x0a\x03", "malformed"),  # Features length runs past the record
    (b"\x0a\x0b\x0a\x09\x0a\x01i\x12\x05\x1a\x02\x08\x01", "malformed"),  # value past entry
])
def test_compiled_decoder_rejects_malformed_protobuf(record, message):
  with pytest.raises(tfrecord.TFRecordError, match=message):
    tfrecord.decode_tfrecord(_frame([record]), [("i", pa.int64())])


def test_compiled_decoder_rejects_two_values_and_wrong_list_type():
  import tensorflow as tf
  ex = tf.train.Example()
  ex.features.feature["i"].int64_list.value.extend([1, 2])
  with pytest.raises(tfrecord.TFRecordError, match="more than one value"):
    tfrecord.decode_tfrecord(_frame([ex.SerializeToString()]), [("i", pa.int64())])
  with pytest.raises(tfrecord.TFRecordError, match="another type"):
    tfrecord.decode_tfrecord(_frame([ex.SerializeToString()]), [("i", pa.string())])


def test_unframed_examples_are_the_tfrecord_payloads_and_decode_alike():
  table = _table()
  data, offsets = tfrecord.encode_examples(table)
  raw = data.tobytes()
  assert [raw[offsets[i]:offsets[i + 1]] for i in range(table.num_rows)] == \
      tfrecord.read_records(tfrecord.encode_tfrecord(table).tobytes())
  columns = [(f.name, f.type) for f in table.schema] + [("absent", pa.int64())]
  assert tfrecord.decode_examples(data, offsets, columns).equals(
      tfrecord.decode_tfrecord(tfrecord.encode_tfrecord(table).tobytes(), columns))
  empty, empty_offsets = tfrecord.encode_examples(table.slice(0, 0))
  assert empty.size == 0 and empty_offsets.tolist() == [0]
  assert tfrecord.decode_examples(empty, empty_offsets, columns).num_rows == 0


@pytest.mark.parametrize("record", [
    b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # Features length 2^64 - 1
    b"\x0a\x0d\x0a\x0b\x0a\x01i\x12\x06\x1a\xff\xff\xff\xff\x0f",  # list length past entry
    b"\x12\xff\xff\xff\xff\xff\xff\xff\xff\x7f",  # unknown field, length 2^63 - 1
])
def test_compiled_decoder_rejects_lengths_past_the_record(record):
  with pytest.raises(tfrecord.TFRecordError, match="malformed"):
    tfrecord.decode_tfrecord(_frame([record]), [("i", pa.int64())])


def test_compiled_decoder_counts_past_255_values_as_more_than_one():
  import tensorflow as tf
  ex = tf.train.Example()
  ex.features.feature["i"].int64_list.value.extend(range(256))  # a one-byte count would wrap
  with pytest.raises(tfrecord.TFRecordError, match="more than one value"):
    tfrecord.decode_tfrecord(_frame([ex.SerializeToString()]), [("i", pa.int64())])
