"""Column types: TFMD schema I/O, deterministic inference, and typing of any source's columns.

A dataset's schema is an ordered list of (name, type) with type INT (int64), FLOAT (float64)
or BYTES (UTF-8 text). It comes from a TFMD schema pbtxt when given, otherwise it is inferred
over the whole input: INT if every present value parses as int64, else FLOAT if every present
value parses as float64 and none is an integer beyond int64 (which float64 would round), else
BYTES (also for a column with no present value). Parsing is
pyarrow's cast from text, so inference and typing accept the same literals; typing reads the
canonical text of spec/values.py, so every source (CSV, JSON, Parquet, tf.Example) types alike.
"""
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from transforms.spec import values

__all__ = ["INT", "FLOAT", "BYTES", "ARROW_TYPES", "load_tfmd", "to_tfmd", "to_tfmd_text",
           "type_column", "type_flags", "merge_flags", "infer_types", "SchemaError"]

INT, FLOAT, BYTES = "INT", "FLOAT", "BYTES"
ARROW_TYPES = {INT: pa.int64(), FLOAT: pa.float64(), BYTES: pa.string()}
_TFMD_TYPES = {schema_pb2.INT: INT, schema_pb2.FLOAT: FLOAT, schema_pb2.BYTES: BYTES}


class SchemaError(ValueError):
  """A schema file that cannot be used."""


def load_tfmd(text):
  """{name: type} from TFMD schema text (features of type INT, FLOAT or BYTES)."""
  schema = schema_pb2.Schema()
  try:
    text_format.Parse(text, schema)
  except text_format.ParseError as e:
    raise SchemaError(f"not a TFMD schema: {e}") from None
  types = {}
  for feature in schema.feature:
    if feature.type not in _TFMD_TYPES:
      raise SchemaError(f"feature {feature.name!r} has unsupported type "
                        f"{schema_pb2.FeatureType.Name(feature.type)}")
    types[feature.name] = _TFMD_TYPES[feature.type]
  if not types:
    raise SchemaError("schema has no features")
  return types


def to_tfmd(columns):
  """A TFMD Schema for [(name, type)]: one value per feature, as the CSV has."""
  schema = schema_pb2.Schema()
  inverse = {v: k for k, v in _TFMD_TYPES.items()}
  for name, typ in columns:
    feature = schema.feature.add(name=name, type=inverse[typ])
    feature.value_count.min = 1
    feature.value_count.max = 1
  return schema


def to_tfmd_text(columns):
  return text_format.MessageToString(to_tfmd(columns))


def _bad_positions(arr, target):
  """Indices of arr's non-null values that do not cast to target (bisection over slices:
  whole-array casts, so a clean array costs one cast)."""
  try:
    arr.cast(target)
    return []
  except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
    if len(arr) == 1:
      return [0]
  mid = len(arr) // 2
  return _bad_positions(arr.slice(0, mid), target) + \
      [mid + i for i in _bad_positions(arr.slice(mid), target)]


def _not_utf8(binary):
  """Positions of the values of a binary array that are not UTF-8 text (a failure path: the
  array's cast to string already refused it)."""
  def bad(v):
    try:
      v.decode("utf-8")
      return False
    except UnicodeDecodeError:
      return True
  return np.array([i for i, v in enumerate(binary.to_pylist()) if v is not None and bad(v)],
                  dtype=np.int64)


def type_column(column, typ, canonical=None):
  """Types a column of any scalar Arrow type (CSV's UTF-8-validated binary, JSON, Parquet,
  tf.Example values) to typ. Returns (typed array, bad row indices). canonical: the column's
  values.canonical_text when the caller has it (the raw stage does), else computed here.

  INT and FLOAT are cast from the canonical text (spec/values.py), so every source types alike:
  "1.50", 1.5 and float32 1.5 are the FLOAT 1.5, and a zoned ISO-8601 instant is the INT of its
  Unix seconds. BYTES keeps a text's own text and other values' canonical text. Bad rows become
  null in the typed array; the caller rejects them.
  """
  if typ == BYTES:
    text = values.source_text(column)
    if pa.types.is_string(text.type):
      return text, np.zeros(0, dtype=np.int64)
    try:
      return text.cast(pa.string()), np.zeros(0, dtype=np.int64)  # CSV's is UTF-8-validated
    except pa.ArrowInvalid:  # a binary column (Parquet, tf.Example) holding bytes that are not
      bad = _not_utf8(text)  # UTF-8 text: those rows are rejected, the rest typed
      keep = np.ones(len(text), bool)
      keep[bad] = False
      return pc.if_else(pa.array(keep), text, pa.scalar(None, text.type)).cast(pa.string()), bad
  text = values.canonical_text(column) if canonical is None else canonical
  if not pa.types.is_string(text.type):
    text = text.cast(pa.string())
  target = ARROW_TYPES[typ]
  try:
    return text.cast(target), np.zeros(0, dtype=np.int64)
  except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
    pass
  bad = np.asarray(_bad_positions(text, target), dtype=np.int64)
  mask = np.zeros(len(text), dtype=bool)
  mask[bad] = True
  text = pc.if_else(pa.array(mask), pa.scalar(None, pa.string()), text)
  return text.cast(target), bad


def _casts(text, target):
  try:
    text.cast(target)
    return True
  except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
    return False


_WIDE_DIGITS = 19  # the fewest characters of an integer beyond int64 (9223372036854775808)


def type_flags(batch, names):
  """Per column: [has a present value, all present values parse as INT, ... as FLOAT].

  Text is judged by its own text ("12.0" is FLOAT, an ISO instant is BYTES), floats are FLOAT
  whatever their values, other typed values by their canonical text (spec/values.py).
  Flags of several batches combine with merge_flags (or / and / and).
  """
  out = {}
  for name in names:
    col = batch.column(name).drop_null()
    present = len(col) > 0
    if pa.types.is_floating(col.type) or pa.types.is_decimal(col.type):
      out[name] = [present, False, True]
      continue
    text = values.source_text(col) if values.is_text(col.type) else values.canonical_text(col)
    if not pa.types.is_string(text.type):
      try:
        text = text.cast(pa.string())
      except pa.ArrowInvalid:  # bytes that are not UTF-8: only BYTES fits
        out[name] = [present, False, False]
        continue
    is_int = _casts(text, pa.int64())
    is_float = is_int or _casts(text, pa.float64())
    if is_float and not is_int and (pc.max(pc.utf8_length(text)).as_py() or 0) >= _WIDE_DIGITS:
      # An integer beyond int64 (a uint64 near 2**64, a long id) parses as float64 only
      # rounded: two such values could read as one. Its column is not FLOAT: it keeps its
      # digits. (Only text of _WIDE_DIGITS characters or more can be one.)
      integers = pc.fill_null(pc.match_substring_regex(text, r"^[-+]?[0-9]+$"), False)
      is_float = _casts(text.filter(integers), pa.int64())
    out[name] = [present, is_int, is_float]
  return out


def merge_flags(a, b):
  out = dict(a)
  for name, (present, ints, floats) in b.items():
    if name in out:
      p0, i0, f0 = out[name]
      out[name] = [p0 or present, i0 and ints, f0 and floats]
    else:
      out[name] = [present, ints, floats]
  return out


def infer_types(flags, names):
  """[(name, type)] in header order from merged type_flags."""
  columns = []
  for name in names:
    present, ints, floats = flags.get(name, [False, True, True])
    if present and ints:
      columns.append((name, INT))
    elif present and floats:
      columns.append((name, FLOAT))
    else:
      columns.append((name, BYTES))
  return columns
