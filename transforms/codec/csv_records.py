"""Splits a CSV byte stream into records and fields with numpy and pyarrow, keeping provenance.

A record ends at a newline outside quotes (quote parity, RFC 4180), so quoted fields may hold
newlines and doubled quotes. The Dialect names the field delimiter and the quote character
(default `,` and `"`). Each record keeps its 1-based physical start line and
its raw bytes, so a row rejected at any later step can be reported exactly as it was read.
Blank lines are not records. A record is rejected here, with its reason, when its quoting is
malformed, its bytes are not UTF-8, or its field count differs from the header's; the rest
are parsed by pyarrow's CSV reader into binary columns (empty and "" cells are null).
"""
import csv
import dataclasses
import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

__all__ = ["RecordBlock", "iter_blocks", "parse_header", "parse_block", "without_first",
           "HeaderError", "Dialect", "DELIMITER", "QUOTE", "DEFAULT", "other_delimiter",
           "other_format", "other_quote"]

BOM = b"\xef\xbb\xbf"
_NL, _CR = ord("\n"), ord("\r")
DELIMITER = ","  # the field delimiter unless a reader is given another (one character)
QUOTE = '"'  # the quote character unless a reader is given another (one character)
# The most columns a header may name. A dataset's columns each become a typed column, a
# fingerprint field and a TF Transform input: a header of a million columns (a file that is not
# a table) kept ingest busy for minutes before it failed; this bound refuses it at once.
MAX_COLUMNS = 10_000
LINE_COLUMN, RAW_COLUMN, FILE_COLUMN = "__line__", "__raw__", "__file__"


@dataclasses.dataclass(frozen=True)
class Dialect:
  """How a CSV file splits: its field delimiter and quote character (one ASCII character
  each, distinct, neither a line end)."""
  delimiter: str = DELIMITER
  quote: str = QUOTE

  def problem(self):
    """(the field at fault: "delimiter" or "quote", why) when this dialect cannot split CSV
    records, else None."""
    for field, what, c in (("delimiter", "delimiter", self.delimiter),
                           ("quote", "quote character", self.quote)):
      if not isinstance(c, str) or len(c) != 1 or not c.isascii() or c in "\r\n":
        return field, f"the {what} must be one ASCII character other than a line end, got {c!r}"
    if self.delimiter == self.quote:
      return ("quote" if self.quote != QUOTE else "delimiter",
              f"the delimiter and the quote character are both {self.quote!r}")
    return None


DEFAULT = Dialect()


def other_quote(raws, dialect=DEFAULT):
  """The quote character that rejected rows seem to quote with instead (' or "), or None: the
  hint ingest's rejected-rows error gives. `raws`: the rejected rows' text. A row counts when
  the other character opens a field (at the row's start or after a delimiter) and closes one
  (before a delimiter or at the row's end); at least half of them must."""
  d = dialect.delimiter
  for quote in ("'", '"'):
    if quote not in (dialect.quote, d) and raws and sum(
        1 for r in raws if (r.startswith(quote) or d + quote in r) and
        (r.endswith(quote) or quote + d in r)) * 2 >= len(raws):
      return quote
  return None


def other_delimiter(names, delimiter=DELIMITER):
  """The delimiter a one-column header seems to be split by instead (';', tab or '|'), or None:
  the hint an error about missing columns gives."""
  if len(names) != 1:
    return None
  found = [d for d in (";", "\t", "|", ",") if d != delimiter and d in names[0]]
  return found[0] if found else None


class HeaderError(ValueError):
  """The file's header is missing or unusable."""


@dataclasses.dataclass
class RecordBlock:
  """Complete records from one file: buf[starts[i]:ends[i]] is record i (terminator excluded)."""
  buf: np.ndarray        # uint8
  starts: np.ndarray     # int64
  ends: np.ndarray       # int64
  lines: np.ndarray      # int64, 1-based physical line where each record starts
  unterminated: bool = False  # the last record hit end of file inside quotes


def _split(buf, line_base, final, quote):
  """Record boundaries in buf (records start outside quotes). Returns (block, consumed, lines)."""
  arr = np.frombuffer(buf, dtype=np.uint8)
  nl = np.flatnonzero(arr == _NL)
  quotes = np.flatnonzero(arr == quote)
  # Quotes before each newline; even -> the newline ends a record.
  parity = np.searchsorted(quotes, nl) & 1
  ends = nl[parity == 0]
  starts = np.concatenate(([0], ends + 1)).astype(np.int64)
  consumed = int(starts[-1])
  unterminated = False
  if final and consumed < len(arr):
    ends = np.concatenate((ends, [len(arr)]))
    unterminated = bool(len(quotes) - np.searchsorted(quotes, consumed)) and \
        (len(quotes) - np.searchsorted(quotes, consumed)) % 2 == 1
    consumed = len(arr)
  else:
    starts = starts[:-1]
  lines = line_base + np.searchsorted(nl, starts)
  rec_ends = ends.astype(np.int64).copy()
  # Drop the \r of a CRLF terminator.
  has_cr = (rec_ends > starts) & (arr[np.maximum(rec_ends - 1, 0)] == _CR) & \
      (rec_ends < len(arr))
  rec_ends[has_cr] -= 1
  if final and unterminated is False and len(rec_ends) and rec_ends[-1] == len(arr) \
      and rec_ends[-1] > starts[-1] and arr[-1] == _CR:
    rec_ends[-1] -= 1
  lines_used = line_base + int(np.count_nonzero(nl < consumed))
  keep = rec_ends > starts  # blank lines are not records
  block = RecordBlock(arr, starts[keep], rec_ends[keep], lines[keep].astype(np.int64),
                      unterminated)
  return block, consumed, lines_used


def iter_blocks(f, block_bytes=8 << 20, dialect=DEFAULT):
  """Yields RecordBlocks of whole records read from binary file object f, header included.

  Memory is bounded by block_bytes plus the longest record.
  """
  carry = b""
  line_base = 1
  first = True
  while True:
    chunk = f.read(block_bytes)
    final = not chunk
    buf = carry + chunk
    if first and buf.startswith(BOM):
      buf = buf[len(BOM):]
    if first and (len(buf) >= len(BOM) or final):
      first = False
    if not buf:
      return
    block, consumed, line_base_next = _split(buf, line_base, final, ord(dialect.quote))
    if len(block.starts):
      yield block
    carry = buf[consumed:]
    line_base = line_base_next
    if final:
      return


def without_first(block):
  """The block minus its first record (the header)."""
  return dataclasses.replace(block, starts=block.starts[1:], ends=block.ends[1:],
                             lines=block.lines[1:])


# Files that are not CSV text, by their first bytes: (magic, what it is, what to pass).
_BINARY_FORMATS = ((b"PAR1", "a Parquet file", "--input_format parquet"),
                   (b"\x1f\x8b", "gzip-compressed", "a name ending in .gz"))


def other_format(raw):
  """' (it looks like X: pass Y)' when a file's first record `raw` says the file is Parquet,
  gzip or JSON rather than CSV text, else ''."""
  for magic, what, hint in _BINARY_FORMATS:
    if raw.startswith(magic):
      return f" (it looks like {what}: pass {hint})"
  if raw.lstrip()[:1] in (b"{", b"["):
    try:
      json.loads(raw)
      return " (it looks like JSON Lines: pass --input_format jsonl)"
    except ValueError:
      pass
  return ""


def parse_header(block, dialect=DEFAULT):
  """Column names from a block's first record; raises HeaderError if unusable (saying which
  format the file looks like when it is not CSV text)."""
  if not len(block.starts):
    raise HeaderError("no header")
  raw = block.buf[block.starts[0]:block.ends[0]].tobytes()
  hint = other_format(raw)
  try:
    text = raw.decode("utf-8")
  except UnicodeDecodeError as e:
    raise HeaderError(f"header is not UTF-8 ({e.reason} at byte {e.start})"
                      f"{hint or ': not CSV text?'}") from None
  control = sorted({c for c in text if ord(c) < 32 and c not in "\t\r\n" and
                    c not in (dialect.delimiter, dialect.quote)})
  if hint or control:
    raise HeaderError("the header is not CSV text" + (
        hint or f" (it holds the control character {control[0]!r})"))
  body = text[:-2] if text.endswith("\r\n") else text.rstrip("\n")
  if "\r" in body:
    raise HeaderError("the header holds a bare CR (\\r): line ends must be LF or CRLF")
  if "\n" in body:  # the first record spans lines: a quote opened in the header never closes
    raise HeaderError("the header spans several lines (an unterminated quote in it?)")
  try:
    names = next(csv.reader(io.StringIO(text), delimiter=dialect.delimiter,
                            quotechar=dialect.quote))
  except csv.Error as e:
    raise HeaderError(f"the header is not one CSV record ({e})") from None
  if len(names) > MAX_COLUMNS:
    raise HeaderError(f"the header names {len(names):,} columns, more than the {MAX_COLUMNS:,} "
                      "a dataset may have")
  empty = [i + 1 for i, n in enumerate(names) if not n.strip()]
  if empty:
    raise HeaderError(f"empty header name in column(s) {empty}")
  seen, dups = set(), []
  for n in names:
    if n in seen and n not in dups:
      dups.append(n)
    seen.add(n)
  if dups:
    raise HeaderError(f"duplicate header name(s): {', '.join(dups)}")
  return names


def _quote_errors(arr, starts, ends, sep, quote):
  """Per record: True if its quoting is malformed.

  Records start outside quotes, so a quote's index among all quotes of the buffer says
  whether it opens (even) or closes (odd) a quoted run. An opening quote must start a field
  or directly follow a closing one (a doubled quote); a closing quote must end the field or
  directly precede an opening one.
  """
  bad = np.zeros(len(starts), dtype=bool)
  quotes = np.flatnonzero(arr == quote)
  if not len(quotes) or not len(starts):
    return bad
  rec = np.searchsorted(starts, quotes, side="right") - 1
  opening = np.arange(len(quotes)) % 2 == 0
  prev = arr[np.maximum(quotes - 1, 0)]
  nxt = arr[np.minimum(quotes + 1, len(arr) - 1)]
  rec_ok = rec >= 0
  rec_c = np.maximum(rec, 0)
  at_start = quotes == starts[rec_c]
  at_end = quotes + 1 >= ends[rec_c]
  after_close = np.zeros(len(quotes), dtype=bool)
  after_close[1:] = ~opening[:-1] & (np.diff(quotes) == 1)
  before_open = np.zeros(len(quotes), dtype=bool)
  before_open[:-1] = opening[1:] & (np.diff(quotes) == 1)
  open_ok = at_start | (prev == sep) | after_close
  close_ok = at_end | (nxt == sep) | before_open
  wrong = rec_ok & (quotes < ends[rec_c]) & np.where(opening, ~open_ok, ~close_ok)
  bad[rec[wrong]] = True
  return bad


def _bare_cr(arr, starts, ends, quote):
  """Per record: True if it holds a '\r' outside quotes (CSV readers would end the row there)."""
  bad = np.zeros(len(starts), dtype=bool)
  crs = np.flatnonzero(arr == _CR)
  if not len(crs) or not len(starts):
    return bad
  quotes = np.flatnonzero(arr == quote)
  crs = crs[np.searchsorted(quotes, crs) % 2 == 0]
  rec = np.searchsorted(starts, crs, side="right") - 1
  inside = (rec >= 0) & (crs < ends[np.maximum(rec, 0)])
  bad[rec[inside]] = True
  return bad


def _field_counts(arr, starts, ends, sep, quote):
  """Fields per record: delimiters outside quotes (an even number of quotes before them) + 1."""
  commas = np.flatnonzero(arr == sep)
  quotes = np.flatnonzero(arr == quote)
  commas = commas[np.searchsorted(quotes, commas) % 2 == 0]
  return np.searchsorted(commas, ends) - np.searchsorted(commas, starts) + 1


def parse_block(block, names, file_index, dialect=DEFAULT):
  """Parses a RecordBlock's records into a RecordBatch of binary columns + provenance columns.

  Returns (batch, rejected) where rejected is a list of (line, raw bytes, reason) and batch has
  the header's columns (binary, null for empty cells) plus __file__, __line__ and __raw__.
  """
  arr, starts, ends = block.buf, block.starts, block.ends
  n = len(starts)
  reasons = np.full(n, None, dtype=object)
  if block.unterminated:
    reasons[n - 1] = "unterminated quoted field at end of file"
  sep, quote = ord(dialect.delimiter), ord(dialect.quote)
  quote_bad = _quote_errors(arr, starts, ends, sep, quote)
  reasons[(reasons == None) & quote_bad] = "malformed quoting"  # noqa: E711
  reasons[(reasons == None) & _bare_cr(arr, starts, ends, quote)] = \
      "carriage return outside quotes"  # noqa: E711
  counts = _field_counts(arr, starts, ends, sep, quote)
  ragged = np.flatnonzero((counts != len(names)) & (reasons == None))  # noqa: E711
  for i in ragged:
    reasons[i] = f"expected {len(names)} fields, found {counts[i]}"
  try:
    if n:
      arr[starts[0]:ends[-1]].tobytes().decode("utf-8")
  except UnicodeDecodeError:
    for i in np.flatnonzero(reasons == None):  # noqa: E711 -- only in a block with bad bytes
      try:
        arr[starts[i]:ends[i]].tobytes().decode("utf-8")
      except UnicodeDecodeError as e:
        reasons[i] = f"invalid UTF-8 ({e.reason} at byte {e.start} of the record)"
  good = np.flatnonzero(reasons == None)  # noqa: E711
  try:
    batch = _to_batch(arr, starts[good], ends[good], block.lines[good], names, file_index,
                      contiguous=len(good) == n, dialect=dialect)
  except (pa.ArrowInvalid, AssertionError):
    # The vectorised checks missed a record pyarrow cannot read: find it record by record
    # (only in this block) so that it is rejected, never lost, and never crashes the job.
    for i in good:
      try:
        _to_batch(arr, starts[i:i + 1], ends[i:i + 1], block.lines[i:i + 1], names, file_index,
                  contiguous=True, dialect=dialect)
      except (pa.ArrowInvalid, AssertionError) as e:
        reasons[i] = f"unparseable record ({e})"
    good = np.flatnonzero(reasons == None)  # noqa: E711
    batch = _to_batch(arr, starts[good], ends[good], block.lines[good], names, file_index,
                      contiguous=len(good) == n, dialect=dialect)
  rejected = [(int(block.lines[i]), arr[starts[i]:ends[i]].tobytes(), reasons[i])
              for i in np.flatnonzero(reasons != None)]  # noqa: E711
  return batch, rejected


def _to_batch(arr, starts, ends, lines, names, file_index, contiguous, dialect=DEFAULT):
  """One pyarrow parse of the given records. __raw__ holds each record followed by its line
  terminator(s) (callers strip them); it is a zero-copy view of the parsed text.

  contiguous: the records are every record between the first and the last, so only line
  terminators and blank lines lie between them.
  """
  n = len(starts)
  if n and contiguous:
    # Fast path, the common case: parse the block's bytes in place (pyarrow skips the blank
    # lines too).
    text = arr[starts[0]:ends[-1]]
    raw_offsets = np.append(starts, ends[-1]) - starts[0]
  else:
    # Some records of the span were rejected: copy the rest, each followed by '\n'.
    lengths = ends - starts
    raw_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths + 1, out=raw_offsets[1:])
    total = int(raw_offsets[-1])
    within = np.arange(total, dtype=np.int64) - np.repeat(raw_offsets[:-1], lengths + 1)
    is_data = within < np.repeat(lengths, lengths + 1)
    text = np.full(total, _NL, dtype=np.uint8)
    text[is_data] = arr[(np.repeat(starts, lengths + 1) + within)[is_data]]
  if n:
    table = pacsv.read_csv(
        pa.py_buffer(text),
        # Parse in 1 MiB pieces on pyarrow's threads; a piece must hold the longest record.
        read_options=pacsv.ReadOptions(column_names=names, use_threads=True,
                                       block_size=max(1 << 20, int((ends - starts).max()) + 2)),
        parse_options=pacsv.ParseOptions(delimiter=dialect.delimiter, quote_char=dialect.quote,
                                         newlines_in_values=True, ignore_empty_lines=True),
        convert_options=pacsv.ConvertOptions(column_types={c: pa.binary() for c in names},
                                             null_values=[""], strings_can_be_null=True,
                                             quoted_strings_can_be_null=True))
    if table.num_rows != n:
      raise AssertionError(f"CSV reader returned {table.num_rows} rows for {n} records")
    columns = {c: table.column(c).combine_chunks() for c in names}
  else:
    columns = {c: pa.array([], pa.binary()) for c in names}
  columns[FILE_COLUMN] = pa.array(np.full(n, file_index, dtype=np.int32))
  columns[LINE_COLUMN] = pa.array(np.asarray(lines, dtype=np.int64))
  columns[RAW_COLUMN] = pa.Array.from_buffers(
      pa.large_binary(), n, [None, pa.py_buffer(raw_offsets.astype(np.int64)),
                             pa.py_buffer(text)])
  return pa.record_batch(list(columns.values()), names=list(columns))
