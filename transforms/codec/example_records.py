"""tf.Example TFRecord files -> RecordBatches of their features' values, with provenance.

The framing (each record's length, its masked CRC32C, the bytes, their masked CRC32C) is
checked by tfrecord.py's compiled framing kernel, block by block, so memory stays bounded by
the block size plus the longest record; damaged framing cannot be read past, so it fails the
file (SourceError naming the byte offset). The records are decoded by tfx_bsl's
ExamplesToRecordBatchDecoder (no TensorFlow import): int64_list -> int64, float_list ->
float32, bytes_list -> large_binary. A feature holding one value is that value, an empty list
is null (as an absent feature is); a record is rejected when a feature holds more values, when
it is not a tf.Example, or when a feature is not among the dataset's columns. A record's
number is its 1-based position in the file and its raw bytes are the serialized tf.Example.

With the tf_serving preset, the records are TF Serving PredictionLogs (its request logging):
each log's tf.Examples are records (prediction_log.py), numbered by their log's position; a
log that holds none is rejected with its raw bytes, and an example's raw bytes are its
serialized tf.Example.
"""
import numpy as np
import pyarrow as pa
from tfx_bsl.coders import example_coder

from transforms.codec import prediction_log, sources, tfrecord
from transforms.codec.crc32c import CRC_TABLE
from transforms.codec.sources import SourceError

__all__ = ["column_names", "iter_batches"]

# The context column a PredictionLog's model_spec.version fills (sources.PRESET_IDENTITY).
_IDENTITY = tuple(sources.PRESET_IDENTITY[sources.TF_SERVING])
_TRUNCATED = (1, 3)  # tfrecord framing codes that may only mean "the block ends mid-record"


def column_names(f, path, opts):
  """The feature names of the file's first record, sorted; None when it holds no record. With
  the tf_serving preset, of the first tf.Example its logs hold: a log holding none is a
  rejected row of iter_batches, not a reason to refuse the file."""
  for raw, number in _blocks(f, path, min(opts.block_bytes, 1 << 16)):
    first, what = [raw[0].as_py()], "record 1 is not a tf.Example"
    if opts.preset == sources.TF_SERVING:
      first, origin, _ = prediction_log.examples_of(raw.to_pylist())
      if not first:
        continue
      what = f"the first tf.Example (log {number + origin[0]}) does not decode"
    try:
      batch = example_coder.ExamplesToRecordBatchDecoder().DecodeBatch(first[:1])
    except RuntimeError as e:
      raise SourceError(f"{path}: {what} ({e})") from None
    return sorted(batch.schema.names) + (
        [opts.response_column, *_IDENTITY] if opts.response_column else [])
  return None


def iter_batches(f, path, names, file_index, opts):
  """Yields (batch, rejected, read) per block of records; see sources.iter_batches."""
  decoder = example_coder.ExamplesToRecordBatchDecoder()
  for raw, first in _blocks(f, path, opts.block_bytes):
    records, number, rejected = raw.to_pylist(), np.arange(len(raw)), []
    answers = None
    if opts.preset == sources.TF_SERVING:  # each log's examples, numbered by the log
      logs = records
      records, number, bad = prediction_log.examples_of(logs)
      rejected = [(first + i, raw[i].as_py(), why) for i, why in bad]
      if opts.response_column:  # what the response answered each example
        answers, versions, wrong = prediction_log.responses_of(logs, opts.model_output)
        if wrong:  # a response that cannot be read or miscounts: an input error
          raise SourceError(f"{path}: record {first + wrong[0][0]}: {wrong[0][1]}")
        answers = pa.array(answers, pa.large_string())
        versions = pa.array(versions, pa.large_string())
      raw, number = pa.array(records, pa.large_binary()), np.asarray(number, dtype=np.int64)
    pieces, bad = _decode(decoder, records)
    rejected += [(first + int(number[i]), raw[i].as_py(), why) for i, why in bad]
    outs = []
    for pos, decoded in pieces:
      fields = list(zip(decoded.schema.names, decoded.columns))
      if answers is not None:  # the answer, and which model version gave it
        fields.append((opts.response_column, answers.take(pa.array(pos))))
        fields += [(c, versions.take(pa.array(pos))) for c in _IDENTITY]
      whole = len(pos) == len(raw)
      outs.append(sources.finish(fields, names, file_index, first + number[pos],
                                 raw if whole else raw.take(pa.array(pos)),
                                 text_columns=opts.text_columns))
    if not outs:
      outs.append((sources.empty_batch(names), []))
    outs[0] = (outs[0][0], rejected + outs[0][1])
    for batch, rej in outs:
      yield batch, rej, batch.num_rows + len(rej)


def _blocks(f, path, block_bytes):
  """Yields (records as large_binary, number of the first) per block of whole records."""
  carry, offset, number = b"", 0, 1
  while True:
    chunk = f.read(block_bytes)
    final = not chunk
    data = carry + chunk
    buf = np.frombuffer(data, dtype=np.uint8)
    # tfrecord.py's framing kernel (private there): record bounds up to the first damage.
    starts, ends, error, pos = tfrecord._frames(buf, CRC_TABLE)  # noqa: SLF001
    if error and (final or error not in _TRUNCATED):
      raise SourceError(f"{path}: damaged TFRecord framing: "
                        f"{tfrecord._FRAME_ERRORS[error]} at byte {offset + pos}")  # noqa: SLF001
    if len(starts):
      yield _payloads(buf, starts, ends), number
      number += len(starts)
    consumed = pos if error else len(buf)
    carry, offset = data[consumed:], offset + consumed
    if final:
      return


def _payloads(buf, starts, ends):
  """The records' bytes (framing dropped) as one large_binary array."""
  marks = np.zeros(len(buf) + 1, dtype=np.int8)
  marks[starts] += 1  # starts are distinct, and so are ends
  marks[ends] -= 1
  inside = np.cumsum(marks[:-1]) > 0
  offsets = np.zeros(len(starts) + 1, dtype=np.int64)
  np.cumsum(ends - starts, out=offsets[1:])
  return pa.Array.from_buffers(pa.large_binary(), len(starts),
                               [None, pa.py_buffer(offsets), pa.py_buffer(buf[inside])])


def _decode(decoder, records):
  """([(positions, RecordBatch)], [(position, reason)]) of serialized records."""
  try:
    return [(np.arange(len(records)), decoder.DecodeBatch(records))], []
  except RuntimeError:
    pass
  # The batch holds a record that is not a tf.Example, or a feature whose type changes from
  # record to record. Decoding one record at a time (about 10 us each, 3x the batch rate) finds
  # the bad ones; the rest are decoded in runs whose feature types agree. This block only.
  bad, pieces, run, types = [], [], [], {}

  def flush():
    if run:
      pieces.append((np.array(run), decoder.DecodeBatch([records[i] for i in run])))

  for i, record in enumerate(records):
    try:
      own = decoder.DecodeBatch([record]).schema
    except RuntimeError as e:
      bad.append((i, f"not a tf.Example ({e})"))
      continue
    own = {field.name: field.type for field in own if not pa.types.is_null(field.type)}
    if any(types.get(name, typ) != typ for name, typ in own.items()):
      flush()
      run, types = [], {}
    run.append(i)
    types.update(own)
  flush()
  return pieces, bad
