"""Exact float64 sums that merge in any order: the state of the windowed aggregates `sum` and
`mean` (spec/window.py: partial_state -> merge_states -> result), so a sum is the same bytes
however the records were partitioned and merged."""
import math

import numpy as np
import pyarrow as pa

__all__ = ["parts", "value", "POS_INF", "NEG_INF"]

# sum and mean are exact: each value is m * 2^(x - 53) with m a 53-bit integer (numpy frexp);
# a state row holds, per group, window end and exponent x, the sums of m's high 27 and low 26
# bits (int64: exact for 2^36 values an exponent) and the values' count. Summing those is
# associative, so partial states merge in any order to the same integers; result() turns
# them into the correctly rounded sum (and mean), one Python big-int sum per group.
POS_INF, NEG_INF = 1 << 20, -(1 << 20)  # the exponent rows counting +inf and -inf values
_LOW_BITS = 26


def parts(v):
  """{x, hi, lo, n} state columns of float64 values (no NaN): v == (hi * 2^26 + lo) *
  2^(x - 53) exactly; an infinity is counted (hi) under the POS_INF / NEG_INF exponent."""
  finite = np.isfinite(v)
  frac, x = np.frexp(np.where(finite, v, 0.0))
  m = np.ldexp(frac, 53).astype(np.int64)  # |frac| < 1: exact
  hi, lo, x = m >> _LOW_BITS, m & ((1 << _LOW_BITS) - 1), x.astype(np.int64)
  x[~finite] = np.where(v[~finite] > 0, POS_INF, NEG_INF)
  hi[~finite], lo[~finite] = 1, 0
  return {"x": pa.array(x), "hi": pa.array(hi), "lo": pa.array(lo),
          "n": pa.array(np.ones(len(v), dtype=np.int64))}


def value(xs, his, los, count, mean):
  """The correctly rounded sum (or mean, over `count` values) of one group's state rows."""
  pos = sum(int(h) for x, h in zip(xs, his) if x == POS_INF)
  neg = sum(int(h) for x, h in zip(xs, his) if x == NEG_INF)
  if pos or neg:
    return math.nan if pos and neg else math.inf if pos else -math.inf
  terms = [((int(h) << _LOW_BITS) + int(lo), int(x) - 53) for x, h, lo in zip(xs, his, los)]
  low = min(e for _, e in terms)
  total = sum(m << (e - low) for m, e in terms)  # the exact sum is total * 2^low
  top, bottom = (total << max(low, 0)), (1 << max(-low, 0)) * (count if mean else 1)
  try:
    return top / bottom  # Python's int / int is correctly rounded
  except OverflowError:  # beyond float64: an infinity, as float addition gives
    return math.inf if top > 0 else -math.inf
