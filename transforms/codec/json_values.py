"""JSON object texts -> Arrow StructArrays, typed as JSON types them, fast where possible.

pyarrow's JSON reader parses a buffer of newline-separated objects on its threads. Two of its
habits are undone here. It types strings that look like dates or times as timestamps, which
JSON does not have (and a CSV cell "2020-01-01" stays text): such fields are read again as
strings, and remembered as a hint so that later buffers are read once. And it refuses a whole
buffer for one malformed object or one value whose type differs from the lines before: then the
objects are parsed one by one with Python's json, the bad ones named, and the rest grouped by
key structure and agreeing types (an Arrow array has one type; the batches of a file may
differ); each group's own lines are then read by the reader again (a group it refuses, such as
an object giving a key twice, is built from the parsed objects).

Integers beyond int64 become floats (as the reader takes them); NaN and Infinity are not JSON.
Three things no record may carry are refused, the object named with the reason, by either
path: text that is not UTF-8 (raw bytes, or a lone surrogate escape such as "\ud800", which no
UTF-8 text holds), and a number beyond a double's range (1e400, which would read as infinity).
"""
import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

__all__ = ["JsonReader", "loads", "dig", "joined"]


def loads(text):
  """A JSON value (strict: NaN and Infinity are not JSON, nor text holding a lone surrogate,
  nor a number beyond a double); ValueError says what is wrong."""
  try:
    value = json.loads(text, parse_constant=_not_json)
  except UnicodeDecodeError as e:
    raise ValueError(f"not UTF-8 ({e.reason} at byte {e.start})") from None
  except ValueError as e:
    raise ValueError(f"malformed JSON ({e})") from None
  except RecursionError:  # the nesting Python's parser reads (about 1,000 levels) bounds it
    raise ValueError("malformed JSON (nested too deeply to read)") from None
  # A lone surrogate comes only from a \u escape: text without one needs no string check.
  _check_value(value, ("\\u" in text) if isinstance(text, str) else (b"\\u" in bytes(text)))
  return value


def _not_json(name):
  raise ValueError(f"{name} is not JSON")


_TOO_BIG = "a number beyond a double's range (it would read as infinity)"
# The reader's refusal of a key whose JSON type changes (pyarrow 25: "JSON parse error:
# Column(/fare) changed from number to string in row 1"); a nested key is not split on.
_CHANGED = re.compile(r"Column\(/([^()]+)\) changed from [a-z]+ to [a-z]+ in row")
_INF = float("inf")


def _check_value(value, strings=True):
  """ValueError for a string holding a lone surrogate (strings: look at strings) or an
  infinite number, anywhere in it."""
  if type(value) is dict and not strings:  # the common case, a flat object: one loop
    for v in value.values():
      t = type(v)
      if t is float:
        if v in (_INF, -_INF):
          raise ValueError(_TOO_BIG)
      elif t is dict or t is list:
        _check_value(v, strings)
    return
  if isinstance(value, str) and strings:
    try:
      value.encode("utf-8")
    except UnicodeEncodeError:
      bad = next(c for c in value if 0xD800 <= ord(c) <= 0xDFFF)
      raise ValueError(f"text holding a lone surrogate escape (\\u{ord(bad):04x}), not UTF-8 "
                       "text") from None
  elif isinstance(value, float):
    if value in (float("inf"), float("-inf")):
      raise ValueError(_TOO_BIG)
  elif isinstance(value, dict):
    for v in value.values():
      _check_value(v, strings)
  elif isinstance(value, list):
    for v in value:
      _check_value(v, strings)


class JsonReader:
  """Parses buffers of JSON objects; keeps the string hint of the fields seen as dates."""

  def __init__(self):
    self._hint = None  # struct type: the fields the reader would type as timestamps, as strings

  def parse(self, buf, starts, ends, unwrap=None):
    """([(positions, StructArray)], [(position, reason)]) of the JSON objects
    buf[starts[i]:ends[i]], the non-blank lines of `buf` (bytes or a memoryview).
    unwrap(text) -> dict parses one text when the reader refuses the buffer (default: loads)."""
    n = len(starts)
    longest = int((ends - starts).max()) if n else 0
    why = []  # the reader's refusal, where the split below starts from
    table = self._read(buf, longest, why)
    if table is not None and table.num_rows == n:
      return _without_infinities([(np.arange(n), _struct(table))], [])
    if n:
      # Split by the JSON type of the key the reader refused, vectorised; each part's struct
      # holds the union of its lines' keys, as the reader gives a typed block.
      offsets = np.append(starts, ends[-1]).astype(np.int64)
      firsts = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(
          offsets - offsets[0]), pa.py_buffer(bytes(buf[offsets[0]:offsets[-1]]))])
      pieces = self._by_kinds(firsts, np.arange(n), longest, why)
      if pieces is not None:
        return _without_infinities(pieces, [])
    # The reader refused the buffer: json.loads object by object (about 4 us for a 200-byte
    # line, several times the reader's cost), for this buffer only.
    good, bad = [], []
    for i in range(n):
      try:
        value = (unwrap or loads)(bytes(buf[starts[i]:ends[i]]))
        if not isinstance(value, dict):
          raise ValueError("not a JSON object")
        good.append((i, value))
      except ValueError as e:
        bad.append((i, str(e)))
    if bad and good:  # most often a few malformed lines: the reader takes the rest at once
      table = self._read(b"\n".join(buf[starts[i]:ends[i]] for i, _ in good), longest)
      if table is not None and table.num_rows == len(good):
        return _without_infinities([(np.array([i for i, _ in good]), _struct(table))], bad)
    lines = None if unwrap else (lambda at: b"\n".join(buf[starts[i]:ends[i]] for i in at))
    pieces = _runs(good, bad, None if lines is None else lambda at: self._group(lines(at), at,
                                                                                longest))
    return pieces, sorted(bad)

  def _group(self, text, at, longest):
    """The StructArray of one group's lines (one key structure, agreeing JSON kinds) read by
    the reader, as pa.array would type the parsed objects; None when the reader refuses it
    (a key given twice, which Python's json reads as its last value). Measured on 60,008 taxi
    records with alternating types: 2.3 s for pa.array of the parsed objects, ~0.1 s read."""
    table = self._read(text, longest)
    return _struct(table) if table is not None and table.num_rows == len(at) else None

  def _read(self, buf, longest, why=None):
    """The reader's table of buf, date-like strings kept as strings; None when it refuses (why,
    a list, gets its last message)."""
    options = pj.ReadOptions(use_threads=True, block_size=max(1 << 20, longest + 2))
    for hint in ((self._hint, None) if self._hint is not None else (None,)):
      try:
        table = _read_json(buf, options, hint)
        fix = _stringify(pa.struct(list(table.schema)))
        if fix is not None:
          self._hint = _merge(hint, fix)
          table = _read_json(buf, options, self._hint)
        # The reader copies string bytes as they are: text that is not UTF-8 refuses the
        # buffer, and the objects are then read one by one, the bad ones named.
        table.validate(full=True)
        return table
      except (pa.ArrowException, UnicodeDecodeError) as e:
        if why is not None:
          why.append(str(e))
        continue
    return None

  def _by_kinds(self, firsts, at, longest, why, depth=0):
    """[(positions, StructArray)] of the lines `at` read by the reader in parts: split each
    time it refuses a part for a key whose JSON type changes (12 here, "12" there), by the
    first character of that key's value in each line (a top-level key), or the one kind of all
    its values in the line (a nested key: _nested_kinds) (firsts: each line and the blank
    lines after it, a LargeBinaryArray; why: the reader's refusal of the lines `at`); a line
    where the value is null or absent joins the first part. None when a refusal is anything
    else, a part does not split, or after 8 splits. No line is parsed or joined in Python:
    ingest of 1M taxi records with fare and trip_seconds alternating in type took 44.4 s (the
    typed log 23.2 s), against 105.4 s with every line parsed one by one."""
    changed = _CHANGED.search(why[-1]) if why else None
    if changed is None or depth >= 8:
      return None
    path = changed.group(1).split("/")
    if path[-1] == "[]":  # a list's elements changed type: no key to split by
      return None
    key = '"' + re.escape(path[-1]) + r'"\s*:\s*'
    if len(path) == 1:  # a top-level key: the kind of its first value in the line
      value = pc.extract_regex(firsts.take(pa.array(at)), key + r"(?P<c>.)")
      kind = pc.fill_null(pc.struct_field(value, [0]), b"n").to_numpy(zero_copy_only=False)
      kind = np.where(np.isin(kind, [bytes([c]) for c in b'"{[tfn']), kind, b"0")  # 0: number
    else:  # a nested one (a payload's instances): the one kind of all its values in the line
      kind = _nested_kinds(firsts.take(pa.array(at)), key)
      if kind is None:
        return None
    parts = [at[kind == k] for k in sorted(set(kind.tolist()) - {b"n"})]
    if len(parts) < 2:
      return None
    parts[0] = np.sort(np.concatenate([parts[0], at[kind == b"n"]]))
    pieces = []
    for part in parts:
      why = []
      table = self._read(_texts(firsts, part), longest, why)
      got = ([(part, _struct(table))] if table.num_rows == len(part) else None) \
          if table is not None else self._by_kinds(firsts, part, longest, why, depth + 1)
      if got is None:
        return None
      pieces += got
    return pieces


# The JSON kinds a value can start with (booleans one kind, numbers by their first character).
_KIND_STARTS = ((b'"', '"'), (b"{", r"\{"), (b"[", r"\["), (b"t", "[tf]"), (b"0", "[-0-9]"))


def _nested_kinds(lines, key):
  """bytes[n]: the one JSON kind of every value of `key` (a regex of the quoted key and its
  colon) in each line, b"n" where it has none but nulls; None when a line holds two kinds."""
  kind = np.full(len(lines), b"n", dtype=object)
  seen = np.zeros(len(lines), dtype=np.int64)
  for k, start in _KIND_STARTS:
    has = pc.fill_null(pc.count_substring_regex(lines, key + start), 0).to_numpy(
        zero_copy_only=False) > 0
    kind[has], seen = k, seen + has
  return None if (seen > 1).any() else kind.astype(bytes)


def _texts(lines, at):
  """The elements `at` (in order) of LargeBinaryArray `lines` back to back, as one buffer."""
  part = lines.take(pa.array(at))
  offsets = np.frombuffer(part.buffers()[1], np.int64)[part.offset:part.offset + len(part) + 1]
  return part.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))


def _without_infinities(pieces, bad):
  """(pieces, bad) with the objects holding an infinite number (a JSON number beyond a double,
  which the reader reads as infinity) moved from their piece to `bad`."""
  out = []
  for positions, values in pieces:
    hit = _infinite(values)
    if hit is None or not hit.any():
      out.append((positions, values))
      continue
    bad = bad + [(int(i), _TOO_BIG) for i in positions[hit]]
    if not hit.all():
      out.append((positions[~hit], values.filter(pa.array(~hit))))
  return out, sorted(bad)


def _infinite(values):
  """bool[n]: whether each value of an array (struct, list or scalar, nested) holds +-inf;
  None when no part of its type is floating."""
  t = values.type
  if pa.types.is_floating(t):
    return pc.fill_null(pc.is_inf(values), False).to_numpy(zero_copy_only=False)
  if pa.types.is_struct(t):
    hits = [h for i in range(t.num_fields)
            if (h := _infinite(pc.struct_field(values, [i]))) is not None]
    return np.logical_or.reduce(hits) if hits else None
  if pa.types.is_list(t) or pa.types.is_large_list(t):
    inner = _infinite(values.flatten())
    if inner is None:
      return None
    out = np.zeros(len(values), bool)
    parents = pc.list_parent_indices(values).to_numpy()
    out[parents[inner]] = True
    return out
  return None


def _read_json(buf, options, hint):
  parse = pj.ParseOptions(explicit_schema=None if hint is None else pa.schema(list(hint)),
                          unexpected_field_behavior="infer")
  return pj.read_json(pa.BufferReader(buf), read_options=options, parse_options=parse)


def _stringify(t):
  """Type t with its temporal parts as strings, cut to the parts holding them (None: none)."""
  if pa.types.is_temporal(t):
    return pa.string()
  if pa.types.is_struct(t):
    kids = [pa.field(f.name, k) for f in t for k in [_stringify(f.type)] if k is not None]
    return pa.struct(kids) if kids else None
  if pa.types.is_list(t) or pa.types.is_large_list(t):
    kid = _stringify(t.value_type)
    return None if kid is None else pa.list_(kid)
  return None


def _merge(a, b):
  """The union of two such types (b wins where they differ)."""
  if a is None or not (pa.types.is_struct(a) and pa.types.is_struct(b)):
    return b if b is not None else a
  fields = {f.name: f.type for f in a}
  for f in b:
    fields[f.name] = _merge(fields.get(f.name), f.type)
  return pa.struct([pa.field(name, typ) for name, typ in fields.items()])


def _struct(table):
  """A table's rows as one StructArray."""
  if not table.num_columns:
    return pa.array([{}] * table.num_rows, pa.struct([]))
  return table.to_struct_array().combine_chunks()


def _runs(good, bad, read=None):
  """[(positions, StructArray)] of parsed objects, in groups of one key structure (every key
  path, null-valued ones included) whose JSON kinds agree at every path: each object joins the
  first such group it agrees with, so values whose types alternate record by record (12 here,
  "12" there) make a few pieces, not one per record, and each object's struct has its own keys
  (measured on 100,000 taxi records with alternating types: ingest 2.0x the same records typed
  alike with each group read back by the reader and flat objects' shapes taken in one loop,
  2.5x before those two, 5.9x with the runs merged by type, ~15x with one piece per run);
  `bad` gets the objects whose own lists mix kinds (no Arrow type holds them). read(positions):
  the group's StructArray read from its lines (None: built from the parsed objects)."""
  groups = {}  # key structure -> [(kinds, [(i, value)])], each list in order of creation
  order = []   # every group's members, in order of creation
  for i, value in good:
    shape = _shape(value)
    if shape is None:
      bad.append((i, "a list holds values of different JSON types"))
      continue
    structure, own = shape
    same_keys = groups.setdefault(structure, [])
    for kinds, members in same_keys:
      if all(path not in kinds for path, _ in own.items() - kinds.items()):
        members.append((i, value))
        kinds.update(own)
        break
    else:
      same_keys.append((own, [(i, value)]))
      order.append(same_keys[-1][1])
  pieces = []
  for members in order:
    at = np.array([i for i, _ in members])
    values = read(at) if read is not None else None
    if values is not None:
      pieces.append((at, values))
      continue
    try:
      pieces.append((at, pa.array([_fit(v) for _, v in members])))
    except (pa.ArrowException, OverflowError, TypeError) as e:
      bad.extend((i, f"cannot be typed ({e})") for i, _ in members)
  return pieces


def _shape(value):
  """(_keys(value), its JSON kinds per path as _kinds records them) of a parsed object; None
  when one of its lists mixes kinds. A flat object (no object or list value), the common
  case, takes one loop (about 3x faster than the two walks)."""
  structure, own = ["{"], {"": "dict"}
  for k, v in value.items():
    t = type(v)
    if t is dict or t is list:
      own = {}
      return (_keys(value), own) if _kinds(value, "", own) else None
    structure.append((k, ""))
    if v is not None:
      own["." + k] = "number" if t is float or (t is int and abs(v) <= 2 ** 53) else \
          "wide_integer" if t is int else t.__name__
  return tuple(structure), own


def _keys(value):
  """A hashable description of value's key structure: its objects' keys in order (null-valued
  ones included), lists by the structures of their elements."""
  if isinstance(value, dict):
    return ("{",) + tuple((k, _keys(v)) for k, v in value.items())
  if isinstance(value, list):
    return ("[",) + tuple(sorted({_keys(v) for v in value}, key=repr))
  return ""


def _kinds(value, path, kinds):
  """Records the JSON kind at each path of value in `kinds`; False when value itself mixes
  kinds at a path. Integers and floats are both numbers (Arrow reads them as doubles), but an
  integer a double cannot hold exactly (beyond 2**53) is a kind of its own: it never shares a
  run (an Arrow column) with floats."""
  if value is None:
    return True
  kind = "number" if type(value) in (int, float) else type(value).__name__
  if type(value) is int and abs(value) > 2 ** 53:
    kind = "wide_integer"
  if kinds.setdefault(path, kind) != kind:
    return False
  if kind == "dict":
    return all(_kinds(v, f"{path}.{k}", kinds) for k, v in value.items())
  if kind == "list":
    return all(_kinds(v, path + "[]", kinds) for v in value)
  return True


def _fit(value):
  """value with integers beyond int64 as floats, as pyarrow's reader takes them."""
  if isinstance(value, dict):
    return {k: _fit(v) for k, v in value.items()}
  if isinstance(value, list):
    return [_fit(v) for v in value]
  if type(value) is int and not -2 ** 63 <= value < 2 ** 63:
    return float(value)
  return value


def dig(values, keys):
  """The value at `keys` of each object of StructArray `values` (null where there is none)."""
  for key in keys:
    i = values.type.get_field_index(key) if pa.types.is_struct(values.type) else -1
    if i < 0:
      return pa.nulls(len(values))
    values = pc.struct_field(values, [i])
  return values


def joined(texts, prefix, suffix):
  """(bytes, offsets): the texts of binary array `texts`, each between prefix and suffix, back
  to back; text i with its affixes is at [offsets[i], offsets[i + 1])."""
  arr = pc.binary_join_element_wise(prefix, texts.cast(pa.binary()), suffix, b"")
  offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset:arr.offset + len(arr) + 1]
  offsets = offsets.astype(np.int64)
  data = arr.buffers()[2]
  data = data.to_pybytes()[offsets[0]:offsets[-1]] if data is not None else b""
  return data, offsets - offsets[0]
