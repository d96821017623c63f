"""Row kernels of the replay diff (replay/diff/compare.py), vectorised over Arrow arrays: the
numeric difference of two aligned value columns under a tolerance, the deterministic sample of keys
(smallest XXH64(key, seed 0) first), and the column helpers (a column, a fingerprint column as
numpy, null-aware fingerprint equality, a value column's float width), and the window float
noise of windowed aggregates (window_noise)."""
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.codec import xxh64
from transforms.spec.feature_log import WINDOW_END, WINDOW_START, aggregate_column

__all__ = ["numeric_rows", "samples", "jsonable", "column_of", "fp_of", "fp_equal",
           "float_bits", "values_equal", "window_noise"]


def _as_elements(col):
  """(length per row, -1 for a null value; float64 elements; element valid) or None when the
  values are not numbers."""
  typ = col.type
  if pa.types.is_list(typ) or pa.types.is_large_list(typ):
    lengths = pc.list_value_length(col).fill_null(-1).to_numpy(zero_copy_only=False)
    flat = col.flatten()
  else:
    lengths = np.where(col.is_valid().to_numpy(zero_copy_only=False), 1, -1)
    flat = col.drop_null()
  if not (pa.types.is_floating(flat.type) or pa.types.is_integer(flat.type)):
    return None
  valid = flat.is_valid().to_numpy(zero_copy_only=False)
  values = flat.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
  return lengths.astype(np.int64), values, valid


def numeric_rows(a_col, b_col, abs_tol, rel_tol):
  """Per row of two aligned value columns: (within tolerance, |delta| defined, |delta|).

  |delta| of a list is its largest element difference; it is defined when both values have
  the same length and every element pair is finite (or both null / equal infinities).
  """
  n = len(a_col)
  none = np.zeros(n, bool)
  ea, eb = _as_elements(a_col), _as_elements(b_col)
  if ea is None or eb is None:
    return none, none, np.zeros(n)
  (la, xa, va), (lb, xb, vb) = ea, eb
  comparable = (la >= 0) & (la == lb)
  row_a = np.repeat(np.arange(n), np.maximum(la, 0))
  row_b = np.repeat(np.arange(n), np.maximum(lb, 0))
  keep_a, keep_b = comparable[row_a], comparable[row_b]
  a, b, va, vb, row = xa[keep_a], xb[keep_b], va[keep_a], vb[keep_b], row_a[keep_a]
  both = va & vb
  with np.errstate(invalid="ignore"):
    diff = np.abs(b - a)
    equal = both & ((a == b) | (np.isnan(a) & np.isnan(b)))
    close = equal | (both & (diff <= abs_tol + rel_tol * np.abs(a))) | (~va & ~vb)
  finite = both & np.isfinite(diff)
  quantified = finite | equal | (~va & ~vb)
  bad_close = np.bincount(row, weights=~close, minlength=n)
  bad_delta = np.bincount(row, weights=~quantified, minlength=n)
  delta = np.zeros(n)
  np.maximum.at(delta, row[finite], diff[finite])
  return comparable & (bad_close == 0), comparable & (bad_delta == 0), delta


def _key_hashes(keys):
  """XXH64(key UTF-8, seed 0) of each key of a string Array, the sample order, in one compiled
  loop over the Arrow buffers (the fingerprint encoding pads and tags, so it cannot serve)."""
  keys = keys.cast(pa.large_string())
  _, offsets, data = keys.buffers()
  offsets = np.frombuffer(offsets, np.int64, count=len(keys) + 1, offset=8 * keys.offset)
  data = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
  return xxh64.xxh64_spans(data, offsets)


def samples(keys, make, cap):
  """[(hash, key, entry)] of the `cap` keys (a string Array) with the smallest hashes, ties by
  key then position; make(i, key) -> entry is called for those only."""
  if not len(keys) or cap <= 0:
    return []
  h = _key_hashes(keys)
  # Every key whose hash is at most the cap-th smallest: cap of them unless hashes tie.
  rows = np.arange(len(h)) if len(h) <= cap else \
      np.flatnonzero(h <= np.partition(h, cap - 1)[cap - 1])
  picked = keys.take(pa.array(rows, pa.int64())).to_pylist()
  order = sorted(range(len(rows)), key=lambda t: (h[rows[t]], picked[t]))[:cap]
  return [(int(h[rows[t]]), picked[t], make(int(rows[t]), picked[t])) for t in order]


def jsonable(v):
  """A log value as report.json holds it: non-finite floats as "nan" / "inf" / "-inf",
  bytes as text, lists element by element."""
  if isinstance(v, float) and not np.isfinite(v):
    return "nan" if np.isnan(v) else ("inf" if v > 0 else "-inf")
  if isinstance(v, list):
    return [jsonable(x) for x in v]
  if isinstance(v, bytes):
    return v.decode("utf-8", "replace")
  return v


def column_of(table, name):
  """A log table's column as one array, or None when the table has no such column."""
  if name not in table.schema.names:
    return None
  col = table.column(name)
  return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def fp_of(table, name):
  """(valid bool[n], values uint64[n]) of a fingerprint column; a missing column is all null."""
  col = column_of(table, name)
  if col is None:
    return np.zeros(table.num_rows, bool), np.zeros(table.num_rows, np.uint64)
  valid = col.is_valid().to_numpy(zero_copy_only=False)
  return valid, col.cast(pa.uint64()).fill_null(0).to_numpy(zero_copy_only=False)


def float_bits(col):
  """The float width whose noise a value column's tolerance uses (64 for float64 values)."""
  typ = col.type
  while pa.types.is_list(typ) or pa.types.is_large_list(typ):
    typ = typ.value_type
  return 64 if pa.types.is_float64(typ) else 32


def fp_equal(a, b):
  """Null-aware equality of two (valid, values) pairs: equal when both null or both equal."""
  return (a[0] == b[0]) & (~a[0] | (a[1] == b[1]))


def values_equal(a, b):
  """Per row of two aligned arrays: equal values, null on both sides, or NaN on both sides
  (NaN equals NaN, as numeric_rows has it) (bool[n])."""
  same = pc.fill_null(pc.equal(a, b), False).to_numpy(zero_copy_only=False)
  same |= (a.is_null().to_numpy(zero_copy_only=False) &
           b.is_null().to_numpy(zero_copy_only=False))
  if pa.types.is_floating(a.type) and pa.types.is_floating(b.type):
    same |= pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False).to_numpy(
        zero_copy_only=False)
  return same


def window_noise(o, p, rows, aggregates, tolerance):
  """The `rows` (bool[n]) whose window fingerprint differs by float noise in their windowed
  aggregates alone: both sides hold every aggregate, the window bounds agree, integer aggregates
  are equal, float ones equal or within tolerance.for_feature(name, 64), and a float one
  differs (an online store that adds the window's values in another order). Returns (those rows,
  {aggregate: [records, largest |d|, offline value, production value]} over them, the pair of
  the largest |d|, ties to the largest pair: the same whatever the row order)."""
  explained = rows.copy()
  if not rows.any() or not aggregates:
    return np.zeros_like(rows), {}
  for name in (WINDOW_START, WINDOW_END):
    a, b = column_of(o, name), column_of(p, name)
    if a is None or b is None:
      return np.zeros_like(rows), {}
    explained &= values_equal(a, b)
  differs, any_differs = {}, np.zeros_like(rows)
  for name in aggregates:
    a, b = column_of(o, aggregate_column(name)), column_of(p, aggregate_column(name))
    if a is None or b is None:
      return np.zeros_like(rows), {}
    same = values_equal(a, b)
    if pa.types.is_floating(a.type) and pa.types.is_floating(b.type):
      explained &= same | numeric_rows(a, b, *tolerance.for_feature(name, 64))[0]
      differs[name] = (a, b, ~same)
      any_differs |= ~same
    else:  # a count is exact
      explained &= same
  explained &= any_differs
  stats = {}
  for name, (a, b, changed) in differs.items():
    at = np.flatnonzero(explained & changed)
    if len(at):
      v, q = (x.take(pa.array(at)).to_numpy(zero_copy_only=False) for x in (a, b))
      delta = np.abs(q - v)
      top = np.lexsort((q, v, delta))[-1]  # the largest (|d|, offline, production)
      stats[name] = [len(at), float(delta[top]), float(v[top]), float(q[top])]
  return explained, stats
