"""The source readers' contract: the formats ingest reads, their options, and the batches every
reader yields, so that the job treats a JSON Lines serving log, a Parquet export and a
tf.Example TFRecord file exactly like a CSV file.

A reader turns one input file (a binary file object the caller opened, gzip already undone)
into Arrow RecordBatches of the dataset's columns, one scalar per cell typed as the source
types it (int64, double, float32, bool, string, binary, timestamp, decimal...), followed by the
provenance columns of csv_records (file index, line or record number, the record's raw bytes),
and a list of the records it cannot represent, each with its number, raw bytes and reason. A
record read is in exactly one of the two, so read == written + rejected holds for every file.

Readers: csv_records.py (headed CSV), jsonl_records.py (JSON Lines, with the SageMaker and
Vertex AI request-log shapes), parquet_records.py, example_records.py (tf.Example TFRecord).
No Beam and no TensorFlow here.
"""
import dataclasses
import importlib
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.codec import csv_records
from transforms.codec.csv_records import FILE_COLUMN, LINE_COLUMN, RAW_COLUMN

__all__ = ["FORMATS", "PRESETS", "PRESET_FORMATS", "PRESET_IDENTITY", "PRESET_FIELDS",
           "TF_SERVING", "SourceOptions", "SourceError", "preset_of_columns", "infer_format", "column_names", "iter_batches",
           "finish", "render_json", "empty_batch"]

FORMATS = ("csv", "jsonl", "parquet", "tfrecord")
# Request-logging shapes: SageMaker Data Capture and Vertex AI exports (JSON Lines,
# jsonl_records.py), TF Serving's PredictionLogs (TFRecord, example_records.py).
TF_SERVING = "tf_serving"
PRESET_FORMATS = {"vertex": "jsonl", "sagemaker": "jsonl", TF_SERVING: "tfrecord"}
PRESETS = tuple(PRESET_FORMATS)
# The context columns a preset fills beside its served predictions (ingest --served_prediction):
# {column: the log field naming the model that answered}; among spec/dataset.MODEL_IDENTITY.
PRESET_IDENTITY = {"vertex": {"deployed_model_id": "deployed_model_id"},
                   TF_SERVING: {"model_version": "model_spec.version"}}
# The top-level fields that show a JSON Lines record is a request log, not a record: a Vertex AI
# request-response logging row (BigQuery export) and a SageMaker Data Capture line.
PRESET_FIELDS = {"vertex": ("request_payload", "deployed_model_id"),
                 "sagemaker": ("captureData", "eventMetadata")}


def preset_of_columns(names):
  """The preset whose request-log shape `names` (a record's top-level fields) have, or None."""
  found = set(names)
  return next((p for p, fields in PRESET_FIELDS.items() if found.issuperset(fields)), None)
_EXTENSIONS = {".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl",
               ".parquet": "parquet", ".pq": "parquet", ".tfrecord": "tfrecord",
               ".tfrecords": "tfrecord"}
# Reader module of each format, imported on first use: the readers import this module's
# contract (SourceError, finish), and a TFRecord-only run never loads the JSON code.
_READERS = {"jsonl": "jsonl_records", "parquet": "parquet_records",
            "tfrecord": "example_records"}


class SourceError(ValueError):
  """A file or an option that cannot be read at all (one line, naming the file)."""


@dataclasses.dataclass(frozen=True)
class SourceOptions:
  """How to read the input files of a run (all of one format)."""
  format: str                # one of FORMATS
  record_path: tuple = ()    # keys into each JSON line (or payload) leading to the record(s)
  preset: str | None = None  # None or one of PRESETS
  envelope: tuple = ()       # ((column name, dotted path into the line), ...)
  payload_names: tuple = ()  # column names of header-less CSV payloads (SageMaker "CSV")
  block_bytes: int = 8 << 20
  delimiter: str = csv_records.DELIMITER  # a CSV file's field delimiter (one character)
  quote_char: str = csv_records.QUOTE  # a CSV file's quote character (one character)
  # Columns kept as JSON text: a list or object value there is its JSON text (render_json),
  # not a rejected record (ingest --served_prediction: a model's scores, in any shape).
  text_columns: tuple = ()
  # With a preset: the column filled with each record's answer from the log's response
  # (request_logs.responses; ingest --served_prediction NAME), None: responses not read.
  response_column: str | None = None
  model_output: str | None = None  # a PredictResponse's output holding the scores (tf_serving)

  @property
  def dialect(self):
    """The CSV dialect (transforms/codec/csv_records.Dialect) of these options."""
    return csv_records.Dialect(self.delimiter, self.quote_char)


def infer_format(path):
  """The format of `path` from its extension (a trailing .gz stripped first)."""
  name = str(path).lower()
  if name.endswith(".gz"):
    name = name[:-3]
  dot = name.rfind(".")
  fmt = _EXTENSIONS.get(name[dot:]) if dot >= 0 else None
  if fmt is None:
    raise SourceError(f"{path}: cannot tell the input format from the extension (known: "
                      f"{', '.join(sorted(_EXTENSIONS))}, optionally + .gz)")
  return fmt


def _check(opts):
  if opts.format not in FORMATS:
    raise SourceError(f"unknown input format {opts.format!r} (one of {', '.join(FORMATS)})")
  if opts.preset is not None and opts.preset not in PRESETS:
    raise SourceError(f"unknown preset {opts.preset!r} (one of {', '.join(PRESETS)})")
  if opts.format != "jsonl" and (opts.record_path or opts.envelope):
    raise SourceError(f"record_path and envelope apply to JSON Lines, not {opts.format}")
  if opts.preset is not None and PRESET_FORMATS[opts.preset] != opts.format:
    raise SourceError(f"preset {opts.preset} reads {PRESET_FORMATS[opts.preset]} input, not "
                      f"{opts.format}")
  if not all(isinstance(k, str) and k for k in opts.record_path):
    raise SourceError(f"record_path wants non-empty keys, got {opts.record_path!r}")
  for item in opts.envelope:
    if len(item) != 2 or not item[0] or not item[1]:
      raise SourceError(f"envelope wants (column name, dotted path) pairs, got {item!r}")
  if opts.block_bytes < 1:
    raise SourceError("block_bytes must be positive")
  problem = opts.dialect.problem()
  if problem:
    raise SourceError(problem[1])


def column_names(f, path, opts):
  """The columns of the first record of binary file `f` (plan time), in a deterministic order:
  JSON object key order then envelope names; Parquet schema order; tf.Example feature names
  sorted; the CSV header. None when the file holds no record."""
  _check(opts)
  if opts.format == "csv":
    for block in csv_records.iter_blocks(f, min(opts.block_bytes, 1 << 16), opts.dialect):
      try:
        return csv_records.parse_header(block, opts.dialect)
      except csv_records.HeaderError as e:
        raise SourceError(f"{path}: {e}") from None
    return None
  return importlib.import_module(f"transforms.codec.{_READERS[opts.format]}").column_names(
      f, path, opts)


def iter_batches(f, path, names, file_index, opts):
  """Yields (batch, rejected, read) for the records of binary file `f`: batch holds exactly
  the columns `names` (scalars; a value missing from a record is null) then FILE_COLUMN,
  LINE_COLUMN and RAW_COLUMN; rejected lists (number, raw bytes, reason); read counts the
  records of this step, accepted or rejected."""
  _check(opts)
  if opts.format == "csv":
    yield from _csv_batches(f, path, list(names), file_index, opts.block_bytes, opts.dialect)
    return
  yield from importlib.import_module(f"transforms.codec.{_READERS[opts.format]}").iter_batches(
      f, path, list(names), file_index, opts)


def _csv_batches(f, path, names, file_index, block_bytes, dialect):
  """CSV as stages/read_csv.py reads it: binary columns, the header must be `names`."""
  for block_no, block in enumerate(csv_records.iter_blocks(f, block_bytes, dialect)):
    if block_no == 0:
      try:
        header = csv_records.parse_header(block, dialect)
      except csv_records.HeaderError as e:
        raise SourceError(f"{path}: {e}") from None
      if header != names:
        raise SourceError(f"{path}: header {header} differs from {names}")
      block = csv_records.without_first(block)
    if len(block.starts):
      batch, rejected = csv_records.parse_block(block, names, file_index, dialect)
      yield batch, rejected, len(block.starts)


def empty_batch(names):
  """A batch of no row with the columns of `names` and the provenance columns."""
  return finish([], names, 0, np.zeros(0, np.int64), pa.array([], pa.large_binary()))[0]


def finish(fields, names, file_index, numbers, raw, reasons=None, terminated=False,
           text_columns=()):
  """(batch, rejected) from a reader's decoded records.

  fields: [(name, Arrow array)] of the records' values, of any type; numbers: each record's
  line or record number; raw: large_binary, each record's bytes (terminated: followed by its
  line terminator, which rejects drop); reasons: an object array of reasons already found
  (None: none yet). A list of one value is that value and an empty list is null (tf.Example
  and Parquet lists, JSON arrays); a record is rejected when a value is an object or a list of
  more than one value, or when it has a value in a column not among `names`. In the
  `text_columns`, a list or object value is kept as its JSON text instead (render_json).
  """
  n = len(numbers)
  reasons = np.full(n, None, dtype=object) if reasons is None else reasons.copy()
  wanted, columns, unknown = set(names), {}, []
  for name, arr in fields:
    values, bad = _as_text(arr) if name in text_columns else _scalars(arr, name)
    for i, why in bad:
      reasons[i] = why if reasons[i] is None else f"{reasons[i]}; {why}"
    if name in wanted:
      columns[name] = values
    else:
      unknown.append((name, values.is_valid().to_numpy(zero_copy_only=False)))
  if unknown:
    present = np.logical_or.reduce([mask for _, mask in unknown])
    for i in np.flatnonzero(present & (reasons == None)):  # noqa: E711 -- rejects only
      reasons[i] = "column(s) not in the dataset: " + ", ".join(
          name for name, mask in unknown if mask[i])
  arrays = [columns[c] if c in columns else pa.nulls(n) for c in names]
  arrays += [pa.array(np.full(n, file_index, dtype=np.int32)),
             pa.array(np.asarray(numbers, dtype=np.int64)), raw]
  batch = pa.RecordBatch.from_arrays(arrays, names=list(names) + [FILE_COLUMN, LINE_COLUMN,
                                                                   RAW_COLUMN])
  bad = np.flatnonzero(reasons != None)  # noqa: E711
  if not len(bad):
    return batch, []
  rejected = []
  for i in bad:
    text = raw[int(i)].as_py()
    rejected.append((int(numbers[i]), text.rstrip(b"\r\n") if terminated else text, reasons[i]))
  return batch.filter(pa.array(reasons == None)), rejected  # noqa: E711


def _as_text(arr):
  """(JSON text of each list or object value, []) -- a scalar column is left as it is."""
  if isinstance(arr, pa.ChunkedArray):
    arr = arr.combine_chunks()
  t = arr.type
  if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
          or pa.types.is_struct(t) or pa.types.is_map(t)):
    return _scalars(arr, "")[0], []
  text = render_json(arr).cast(pa.large_string())
  return pc.if_else(arr.is_valid(), text, pa.scalar(None, pa.large_string())), []


def _scalars(arr, name):
  """(scalar array, [(row, reason)]) of a column: one-value lists unwrapped, empty lists null,
  longer lists and objects rejected (their cells null)."""
  if isinstance(arr, pa.ChunkedArray):
    arr = arr.combine_chunks()
  t = arr.type
  if pa.types.is_dictionary(t):
    return arr.dictionary_decode(), []
  if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
    n = len(arr)
    parents = pc.list_parent_indices(arr).to_numpy()
    counts = np.bincount(parents, minlength=n)
    first = np.concatenate(([0], np.cumsum(counts)))[:-1]
    one = counts == 1
    values = pc.list_flatten(arr).take(pa.array(first, mask=~one))
    inner, bad = _scalars(values, name)
    bad += [(int(i), f"{name}: a list of {counts[i]} values") for i in np.flatnonzero(counts > 1)]
    return inner, bad
  if pa.types.is_struct(t) or pa.types.is_map(t) or pa.types.is_union(t):
    present = np.flatnonzero(arr.is_valid().to_numpy(zero_copy_only=False))
    return pa.nulls(len(arr)), [(int(i), f"{name}: an object") for i in present]
  return arr, []


_ESCAPES = ((b"\\", b"\\\\"), (b'"', b'\\"'), (b"\n", b"\\n"), (b"\r", b"\\r"), (b"\t", b"\\t"))
_RARE_CONTROL = "[\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f]"


def render_json(arr):
  """JSON text (large_binary) of each value of Arrow array `arr`; a null is `null`. What a
  reader shows as the raw text of a record it decoded from a typed form (a Parquet row, one of
  several records of a JSON line): objects keep their field order (a missing value written as
  null), floats are written shortest (NaN and infinities as Python's json writes them),
  timestamps and dates as Arrow's text, bytes that are not UTF-8 as they are. Vectorised: no
  per-row Python except for maps and strings holding rare control characters."""
  return pc.fill_null(_render(arr), b"null").cast(pa.large_binary())


def _join(*parts):
  """Element-wise concatenation of binary arrays and bytes; null where any part is null."""
  return pc.binary_join_element_wise(*parts, b"")


def _quoted(b):
  """JSON string literals (binary) of a binary array."""
  out = b
  special = pc.fill_null(pc.match_substring_regex(b, '["\\\\\\x00-\\x1f]'), False)
  odd = None
  if pc.any(special).as_py():  # escapes are needed only when quotes or controls are there
    for old, new in _ESCAPES:
      out = pc.replace_substring(out, old, new)
    odd = pc.fill_null(pc.match_substring_regex(b, _RARE_CONTROL), False)
  out = _join(b'"', out, b'"')
  if odd is not None and pc.any(odd).as_py():  # per row only for rarer control characters
    texts = out.to_pylist()
    for i in np.flatnonzero(odd.to_numpy(zero_copy_only=False)):
      value = b[int(i)].as_py().decode("utf-8", "surrogateescape")
      texts[i] = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogateescape")
    out = pa.array(texts, pa.binary())
  return out


def _render(arr):
  """JSON text (pa.binary; null for null) of each value."""
  if isinstance(arr, pa.ChunkedArray):
    arr = arr.combine_chunks()
  t = arr.type
  if pa.types.is_dictionary(t):
    return _render(arr.dictionary_decode())
  if pa.types.is_null(t):
    return pa.nulls(len(arr), pa.binary())
  if pa.types.is_boolean(t):
    return pc.if_else(arr, b"true", b"false")
  if pa.types.is_integer(t) or pa.types.is_decimal(t):
    return arr.cast(pa.string()).cast(pa.binary())
  if pa.types.is_floating(t):
    text = arr.cast(pa.string()).cast(pa.binary())
    if pc.any(pc.invert(pc.is_finite(arr))).as_py():
      for old, new in ((b"-inf", b"-Infinity"), (b"inf", b"Infinity"), (b"nan", b"NaN")):
        text = pc.if_else(pc.equal(text, old), new, text)
    return text
  if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or \
      pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
    return _quoted(arr.cast(pa.binary()))
  if pa.types.is_temporal(t):
    return _quoted(arr.cast(pa.string()).cast(pa.binary()))
  if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
    counts = np.bincount(pc.list_parent_indices(arr).to_numpy(), minlength=len(arr))
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    items = pc.fill_null(_render(pc.list_flatten(arr)), b"null")
    lists = pa.LargeListArray.from_arrays(pa.array(offsets), items, mask=arr.is_null())
    return _join(b"[", pc.binary_join(lists, b","), b"]")
  if pa.types.is_struct(t):
    kids = arr.flatten()
    if not kids:
      return pc.if_else(arr.is_valid(), b"{}", pa.scalar(None, pa.binary()))
    pieces = []
    for i, child in enumerate(kids):  # '{"a":1' ... '"z":null}', joined by commas
      key = (b"{" if i == 0 else b"") + json.dumps(t.field(i).name, ensure_ascii=False).encode()
      value = pc.fill_null(_render(child), b"null")
      pieces.append(_join(key + b":", value, b"}") if i == len(kids) - 1 else
                    _join(key + b":", value))
    text = pc.binary_join_element_wise(*pieces, b",") if len(pieces) > 1 else pieces[0]
    return pc.if_else(arr.is_valid(), text, pa.scalar(None, pa.binary()))
  # Maps, unions and anything rarer: Python's writer, per row.
  return pa.array([None if v is None else json.dumps(v, default=str, ensure_ascii=False).encode()
                   for v in arr.to_pylist()], pa.binary())
