"""JSON Lines serving logs -> RecordBatches of their records' values as JSON types them (int64,
double, bool, string), with provenance; SageMaker and Vertex AI request logs as presets.

Each line is a JSON object. `record_path` (keys) leads from it to the record: an object, or a
list of objects, one record each (a list met on the way is expanded too); the empty path makes
the line the record. A preset (request_logs.py) first takes the request payload(s) out of the
line, then applies `record_path` inside each JSON payload (by default its "instances" list when
it is an object holding one, else the payload itself); CSV payloads are header-less lines named
by `payload_names`. `envelope` adds columns taken from the line (dotted paths, e.g.
eventMetadata.inferenceTime), the same value for every record of the line; when the line is the
record, the keys an envelope path starts from are not columns of their own.

Lines, and payloads each wrapped as one line {"p": payload}, go through pyarrow's JSON reader a
block at a time (json_values.py); paths and list expansion are Arrow compute.

A record's line number is its line's (1-based). Its raw bytes are its line (followed by the
line terminator, as csv_records does) when it is the line's only record, else its payload text
when it is the payload's only record, else a JSON rendering of its values (sources.render_json).
A line or payload that yields no record is rejected, so that every line is accounted for.
"""
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.codec import request_logs, sources
from transforms.codec.json_values import JsonReader, dig, joined, loads
from transforms.codec.sources import SourceError

__all__ = ["column_names", "iter_batches"]

_BOM = b"\xef\xbb\xbf"
_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[[9, 10, 13, 32]] = True


def column_names(f, path, opts):
  """The keys of the first record (JSON key order), or the payload names of a CSV payload,
  then the envelope names. None when the file holds no line."""
  for buf, starts, ends, lines, _ in _line_blocks(f, min(opts.block_bytes, 1 << 16)):
    try:
      names = _first_keys(loads(bytes(buf[starts[0]:ends[0]])), opts)
    except ValueError as e:
      raise SourceError(f"{path}: line {lines[0]}: {e}") from None
    envelope = [name for name, _ in opts.envelope] + (
        [opts.response_column] if opts.response_column else [])
    names = [name for name in names if name not in _consumed(opts)]
    both = sorted(set(names) & set(envelope))
    if both:
      raise SourceError(f"{path}: envelope column(s) also keys of the record: {', '.join(both)}")
    return names + envelope
  return None


def _first_keys(obj, opts):
  """The keys of a parsed line's first record (plan time)."""
  if not isinstance(obj, dict):
    raise ValueError("not a JSON object")
  value = obj
  if opts.preset:
    kind, value = request_logs.first_payload(obj, opts.preset)
    if kind == request_logs.CSV:
      if not opts.payload_names:
        raise ValueError("a CSV payload needs column names (payload_names, from the schema)")
      return list(opts.payload_names)
  keys = opts.record_path or (
      ("instances",) if opts.preset and isinstance(value, dict) and "instances" in value else ())
  for depth in range(len(keys) + 1):
    while isinstance(value, list):
      if not value:
        raise ValueError("no record (an empty list)")
      value = value[0]
    if depth < len(keys):
      if not isinstance(value, dict) or value.get(keys[depth]) is None:
        raise ValueError(f"no value at record_path {'.'.join(keys[:depth + 1])}")
      value = value[keys[depth]]
  if not isinstance(value, dict):
    raise ValueError("the record is not a JSON object")
  return list(value)


def _consumed(opts):
  """The line's keys the envelope takes when the line itself is the record: not columns."""
  if opts.preset or opts.record_path:
    return set()
  return {dotted.split(".")[0] for _, dotted in opts.envelope}


def iter_batches(f, path, names, file_index, opts):
  """Yields (batch, rejected, read) per block of lines; see sources.iter_batches."""
  reader = _Reader(path, names, file_index, opts)
  for block in _line_blocks(f, opts.block_bytes):
    yield from reader.block(*block)


def _line_blocks(f, block_bytes):
  """Yields (block, starts, ends, line numbers, clean) of the non-blank lines of each block of
  whole lines of f: block[starts[i]:ends[i]] is a line without its terminator; clean: the
  blank lines dropped are empty (only line terminators lie between the lines). A UTF-8 BOM at
  the start of the file is skipped."""
  carry, base, first = b"", 1, True
  while True:
    chunk = f.read(block_bytes)
    final = not chunk
    buf = carry + chunk
    if first:
      if len(buf) < len(_BOM) and not final:
        carry = buf
        continue
      buf, first = (buf[len(_BOM):] if buf.startswith(_BOM) else buf), False
    cut = len(buf) if final else buf.rfind(b"\n") + 1
    if not cut and not final:
      carry = buf
      continue
    view = memoryview(buf)  # the block is a view: no copy of its megabytes
    block, carry = view[:cut], bytes(view[cut:])
    if block:
      arr = np.frombuffer(block, dtype=np.uint8)
      nl = np.flatnonzero(arr == 10)
      starts = np.concatenate(([0], nl + 1))
      ends = np.concatenate((nl, [len(arr)]))
      ends -= (ends > starts) & (arr[np.maximum(ends - 1, 0)] == 13)
      # A line is blank when empty or all JSON whitespace; only lines that start with
      # whitespace (rare) are looked at whole, one by one.
      blank = ends == starts
      for i in np.flatnonzero(~blank & _WHITESPACE[arr[np.minimum(starts, len(arr) - 1)]]):
        blank[i] = not bytes(block[starts[i]:ends[i]]).strip(b" \t\r\n")
      keep = ~blank
      clean = bool(np.all(ends[blank] == starts[blank]))
      if keep.any():
        yield block, starts[keep], ends[keep], base + np.flatnonzero(keep), clean
      base += len(nl)
    if final:
      return


def _line_raw(block, starts, ends, clean):
  """Each line's bytes as large_binary: a zero-copy view holding each line's terminator (and
  empty lines after it) when the block is clean, else a copy of the lines alone."""
  if clean:
    offsets = np.append(starts, len(block)) - starts[0]
    data = pa.py_buffer(block)[int(starts[0]):]
  else:
    arr = np.frombuffer(block, dtype=np.uint8)
    lengths = ends - starts
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    data = pa.py_buffer(arr[np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])])
  return pa.Array.from_buffers(pa.large_binary(), len(starts),
                               [None, pa.py_buffer(offsets.astype(np.int64)), data])


def _expand(values, line, payload):
  """The elements of list values as values of their own (empty and null lists vanish)."""
  t = values.type
  if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)):
    return values, line, payload
  parent = pc.list_parent_indices(values).to_numpy()
  return pc.list_flatten(values), line[parent], payload[parent]


def _mask(arr):
  return arr.to_numpy(zero_copy_only=False).astype(bool)


def _ordinal(owner):
  """Each payload's position among its line's payloads (owner: each payload's line, sorted)."""
  if not len(owner):
    return np.zeros(0, np.int64)
  first = np.flatnonzero(np.concatenate(([True], owner[1:] != owner[:-1])))
  return np.arange(len(owner)) - np.repeat(first, np.diff(np.append(first, len(owner))))


def _answers(units):
  """(flat answer texts, each payload's first index in them, each payload's answer count, the
  reason per payload without a usable one) of a piece whose presets' responses were read
  (request_logs.responses, split per record by the records each payload yielded)."""
  texts, bad = units.responses
  split, more = request_logs.split_responses(texts, units.counts()[1])
  counts = np.array([len(x) if x is not None else 0 for x in split], np.int64)
  flat = pa.array([t for x in split if x is not None for t in x], pa.large_string())
  starts = np.concatenate(([0], np.cumsum(counts)))[:-1].astype(np.int64)
  reasons = np.full(len(split) + 1, None, dtype=object)  # the last: payload -1 (none)
  for p, why in {**bad, **more}.items():
    reasons[p] = why
  return flat, starts, counts, reasons


def _record_answers(answers, payload, seen):
  """(large_string answer of each record of a part, object array of reasons or None): record r
  is the k-th of its payload, counting its records in the piece's earlier parts (`seen`:
  payload -> records so far, a numpy array updated in place; a payload's records come out in
  order, in one part or in consecutive ones, as a CSV payload's blocks)."""
  flat, starts, counts, reasons = answers
  k = _ordinal(payload) + seen[payload]
  np.add.at(seen, payload, 1)
  ok = (payload >= 0) & (k < counts[payload]) & (reasons[payload] == None)  # noqa: E711
  at = np.where(ok, starts[payload] + k, 0)
  column = flat.take(pa.array(at, mask=~ok)) if len(flat) else pa.nulls(len(payload),
                                                                        pa.large_string())
  return column, reasons[payload]


class _Units:
  """What one piece of a block yields, each tied to its line and payload: parts of records
  (fields, line, payload, own raw(mask)) and rejects (line, payload, own raw, reason)."""

  def __init__(self, n_lines):
    self.n_lines = n_lines
    self.parts, self.rejects = [], []
    self.payload_raw = pa.array([], pa.large_binary())
    self.payload_line = np.zeros(0, dtype=np.int64)
    self.responses = (pa.array([], pa.large_binary()), {})  # request_logs.responses

  def reject(self, line, payload, own, why):
    if len(line):
      self.rejects.append((np.asarray(line), np.asarray(payload), own.cast(pa.large_binary()),
                           why))

  def counts(self):
    """Records and rejects per line and per payload."""
    line = np.concatenate([p[1] for p in self.parts] + [r[0] for r in self.rejects] + [[]])
    payload = np.concatenate([p[2] for p in self.parts] + [r[1] for r in self.rejects] + [[]])
    payload = payload[payload >= 0].astype(np.int64)
    return (np.bincount(line.astype(np.int64), minlength=self.n_lines),
            np.bincount(payload, minlength=len(self.payload_raw)))

  def account(self, empty_line):
    """Rejects the payloads, then the lines, that yield nothing."""
    zero = np.flatnonzero(self.counts()[1] == 0)
    self.reject(self.payload_line[zero], zero, self.payload_raw.take(pa.array(zero)),
                "no record in the payload (an empty list)")
    zero = np.flatnonzero(self.counts()[0] == 0)
    self.reject(zero, np.full(len(zero), -1), pa.nulls(len(zero), pa.large_binary()), empty_line)

  def raw(self, line_raw, line, payload, own):
    """Each entry's raw bytes: its line, else its payload, else its own (own(mask))."""
    per_line, per_payload = self.counts()
    use_line = per_line[line] == 1
    if use_line.all():
      same = len(line) == len(line_raw) and np.array_equal(line, np.arange(len(line)))
      return line_raw if same else line_raw.take(pa.array(line))
    per_payload = np.append(per_payload, 0)  # payload -1 (none) reads the 0 appended
    use_payload = ~use_line & (per_payload[payload] == 1)
    mine = ~use_line & ~use_payload
    index = np.where(use_line, line, len(line_raw) + payload)
    index[mine] = len(line_raw) + len(self.payload_raw) + np.arange(mine.sum())
    pool = [line_raw, self.payload_raw, own(mine).cast(pa.large_binary())]
    return pa.concat_arrays(pool).take(pa.array(index))


class _Reader:
  """Reads the blocks of one file."""

  def __init__(self, path, names, file_index, opts):
    self.path, self.names, self.file_index, self.opts = path, names, file_index, opts
    self.lines = JsonReader()  # each keeps its own hint
    self.payloads = JsonReader()

  def block(self, block, starts, ends, lines, clean):
    """Yields (batch, rejected, read) for one block of lines."""
    line_raw = _line_raw(block, starts, ends, clean)
    pieces, bad = self.lines.parse(block, starts, ends)
    outs = [(sources.empty_batch(self.names),
             [(int(lines[i]), bytes(block[starts[i]:ends[i]]), why) for i, why in bad])]
    for pos, objs in pieces:
      whole = len(pos) == len(starts)
      outs += self._piece(objs, lines[pos], line_raw if whole else line_raw.take(pa.array(pos)))
    for batch, rejected in outs:
      if batch.num_rows or rejected:
        yield batch, rejected, batch.num_rows + len(rejected)

  def _piece(self, objs, numbers, line_raw):
    """[(batch, rejected)] of the line objects of one parsed piece of a block."""
    n, opts = len(objs), self.opts
    units = _Units(n)
    if opts.preset:
      self._payloads(objs, units)
      empty = "no record in the line (no payload, or an empty list)"
    else:
      self._walk(objs, np.arange(n), np.full(n, -1), opts.record_path, "record_path", units)
      empty = "no record in the line (an empty list" + (
          f" at record_path {'.'.join(opts.record_path)})" if opts.record_path else ")")
    units.account(empty)
    envelope = [(name, dig(objs, dotted.split("."))) for name, dotted in opts.envelope]
    consumed = _consumed(opts)
    answers = _answers(units) if opts.response_column else None
    if answers is not None:  # a response that cannot be read or miscounts: an input error
      bad = np.flatnonzero(answers[3][:-1] != None)  # noqa: E711
      if len(bad):
        p = int(bad[0])
        raise SourceError(f"{self.path}: line {int(numbers[units.payload_line[p]])}: "
                          f"{answers[3][p]}")
    outs, seen = [], np.zeros(len(units.payload_raw) + 1, np.int64)
    for fields, line, payload, own in units.parts:
      raw = units.raw(line_raw, line, payload, own)
      reasons = np.full(len(line), None, dtype=object)
      fields = [(k, v) for k, v in fields if k not in consumed]
      for key, values in fields:
        if key in dict(envelope):
          reasons[_mask(values.is_valid())] = f"key {key!r} is also an envelope column"
      fields = [(k, v) for k, v in fields if k not in dict(envelope)]
      fields += [(name, values.take(pa.array(line))) for name, values in envelope]
      if answers is not None:  # each record's own answer, or the reason it has none
        column, why = _record_answers(answers, np.asarray(payload), seen)
        fields.append((opts.response_column, column))
        for i in np.flatnonzero(why != None):  # noqa: E711
          reasons[i] = why[i] if reasons[i] is None else f"{reasons[i]}; {why[i]}"
      outs.append(sources.finish(fields, self.names, self.file_index, numbers[line], raw, reasons,
                                 terminated=True, text_columns=opts.text_columns))
    rejected = []
    for line, payload, own, why in units.rejects:
      raw = units.raw(line_raw, line, payload, lambda mine, own=own: own.filter(pa.array(mine)))
      rejected += [(int(numbers[i]), r.rstrip(b"\r\n"), why) for i, r in zip(line, raw.to_pylist())]
    return outs + [(sources.empty_batch(self.names), rejected)]

  def _walk(self, values, line, payload, keys, label, units):
    """Follows `keys` from each value to its record(s), expanding lists on the way and at the
    end; what does not lead to an object is rejected."""
    for depth in range(len(keys) + 1):
      if depth:  # the value at keys[:depth] must be there (an empty list is, and yields none)
        ok = _mask(values.is_valid())
        if not ok.all():
          units.reject(line[~ok], payload[~ok], pa.nulls(int((~ok).sum()), pa.large_binary()),
                       f"no value at {label} {'.'.join(keys[:depth])}")
          values, line, payload = values.filter(pa.array(ok)), line[ok], payload[ok]
      values, line, payload = _expand(values, line, payload)
      t = values.type
      where = " ".join([label] + ([".".join(keys[:depth + 1])] if keys else []))
      if depth < len(keys):
        field = t.get_field_index(keys[depth]) if pa.types.is_struct(t) else -1
        ok = _mask(values.is_valid()) & (field >= 0)
        why = f"no value at {where}"
      else:
        ok = _mask(values.is_valid()) & pa.types.is_struct(t)
        why = f"{where}: not an object"
      if not ok.all():
        units.reject(line[~ok], payload[~ok], sources.render_json(values.filter(pa.array(~ok))),
                     why)
        values, line, payload = values.filter(pa.array(ok)), line[ok], payload[ok]
      if depth < len(keys):
        if field < 0:
          return
        values = pc.struct_field(values, [field])
    if not pa.types.is_struct(values.type):  # no value left (all were rejected)
      return
    fields = list(zip([f.name for f in values.type], values.flatten()))
    units.parts.append((fields, line, payload,
                        lambda mine: sources.render_json(values.filter(pa.array(mine)))))

  def _payloads(self, objs, units):
    """The records of the lines' payloads (request_logs.py)."""
    texts, owner, kinds, bad = request_logs.payloads(objs, self.opts.preset)
    for i, why in bad:
      units.reject([i], [-1], pa.nulls(1, pa.large_binary()), why)
    units.payload_raw, units.payload_line = texts, owner
    if self.opts.response_column:  # what the model answered each payload (presets)
      units.responses = request_logs.responses(objs, self.opts.preset, owner, _ordinal(owner))
    csv = kinds == request_logs.CSV
    if csv.any():
      if not self.opts.payload_names:
        raise SourceError(f"{self.path}: a CSV payload needs column names (payload_names, "
                          "from the schema)")
      index = np.flatnonzero(csv)
      parts, bad = request_logs.csv_payloads(texts.take(pa.array(index)),
                                             list(self.opts.payload_names), self.file_index)
      for j, raw, why in bad:
        units.reject(owner[index[j:j + 1]], index[j:j + 1], pa.array([raw]), why)
      for fields, j, rows in parts:
        units.parts.append((fields, owner[index[j]], index[j],
                            lambda mine, rows=rows: rows.filter(pa.array(mine))))
    index = np.flatnonzero(~csv)
    if not len(index):
      return
    chosen, bad = request_logs.one_line(texts.take(pa.array(index)), kinds[index])
    for j, why in bad:
      units.reject(owner[index[j:j + 1]], index[j:j + 1], texts.take(pa.array(index[j:j + 1])),
                   f"payload: {why}")
    keep = np.ones(len(index), dtype=bool)
    keep[[j for j, _ in bad]] = False
    index, chosen = index[keep], chosen.filter(pa.array(keep))
    if not len(index):
      return
    buf, offsets = joined(chosen, b'{"p":', b"}\n")
    starts, ends = offsets[:-1], offsets[1:] - 1
    pieces, more = self.payloads.parse(buf, starts, ends, lambda t: {"p": loads(t[5:-1])})
    for j, why in more:
      i = index[j:j + 1]
      units.reject(owner[i], i, texts.take(pa.array(i)), f"payload: {why}")
    for pos, wrappers in pieces:
      self._payload_records(dig(wrappers, ("p",)), index[pos], units)

  def _payload_records(self, p, payload, units):
    """The records of parsed JSON payloads: record_path inside them, or their "instances"."""
    line, keys = units.payload_line[payload], self.opts.record_path
    field = p.type.get_field_index("instances") if pa.types.is_struct(p.type) else -1
    if not keys and field >= 0:
      has = _mask(pc.struct_field(p, [field]).is_valid())
      if has.any():
        inst = pc.struct_field(p.filter(pa.array(has)), [field])
        self._walk(inst, line[has], payload[has], (), "payload instances", units)
      p, line, payload = p.filter(pa.array(~has)), line[~has], payload[~has]
    self._walk(p, line, payload, keys, "payload record_path" if keys else "payload", units)
