"""Distribution drift per transformed feature: mergeable histograms and TFDV's distances.

Definitions (TFDV `FeatureComparator`, tensorflow_data_validation/anomalies/metrics.cc):
  categorical  L-infinity distance: max over values v of |P(v) - Q(v)|, P and Q each side's
               value counts normalised by its own total (TFDV's `infinity_norm`).
  numeric      Jensen-Shannon divergence over shared histogram bins, base-2 logarithms
               (so it lies in [0, 1]), JSD = (KL(P||M) + KL(Q||M)) / 2 with M = (P + Q) / 2,
               terms with a zero probability skipped, capped at 1 (TFDV's
               `jensen_shannon_divergence`). NaN, +inf and -inf are bins of their own.
  both         PSI = sum_i (Q_i - P_i) * ln(Q_i / P_i), P offline and Q production, with every
               proportion below PSI_EPSILON (1e-4) raised to it first, so an empty bin on one
               side gives a large finite term instead of infinity.

Histograms are computed per bucket and merge exactly (counts add), so drift over many buckets
needs no second pass. Numeric values go to fine data-independent bins (64 per octave, about
1.1% wide, plus one bin for |x| < 2^-30); at the end the two sides' merged fine histograms are
cut into at most NUM_BINS shared bins at quantiles of the pooled counts (bin edges fall on fine
bin boundaries, so the cut is exact), the first edge the smallest and the last the largest
finite value seen. TFDV's own numeric histograms are equal-width with 10 buckets; quantile
bins keep a few outliers (common in z-scores) from putting every value in one bin.
List-valued features contribute every element.

A categorical histogram keeps exact counts for up to MAX_DISTINCT values. Past that (a
high-cardinality feature, e.g. a hashed id) its values are folded into HASH_BINS bins by
XXH64 of their text, so the accumulator stays bounded by a constant, not the log; whether a
feature is folded depends only on its distinct values, never on merge order, and a folded side
makes the other side fold too before the distance is taken.
"""
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

__all__ = ["NUM_BINS", "PSI_EPSILON", "MAX_LABELS", "MAX_DISTINCT", "HASH_BINS",
           "histogram", "merge", "compare",
           "linf", "jensen_shannon", "psi", "is_numeric_type"]

NUM_BINS = 10
PSI_EPSILON = 1e-4
MAX_LABELS = 20   # categorical bins shown in the report (all values count in the distance)
MAX_DISTINCT = 4096  # exact categorical values kept per feature before folding into hash bins
HASH_BINS = 1024
_SUB = 64         # fine bins per octave
_TINY_EXP = -29   # frexp exponent of 2^-30: smaller magnitudes go to the zero bin


# --------------------------------------------------------------------------- distances
def _normalised(counts):
  c = np.asarray(counts, dtype=np.float64)
  total = c.sum()
  return c / total if total > 0 else c


def linf(p_counts, q_counts):
  """max |P - Q| of the two count vectors (aligned by value), each normalised by its total."""
  return float(np.max(np.abs(_normalised(p_counts) - _normalised(q_counts)), initial=0.0))


def _kl2(p, m):
  keep = (p > 0) & (m > 0)
  return float(np.sum(p[keep] * np.log2(p[keep] / m[keep])))


def jensen_shannon(p_counts, q_counts):
  """Jensen-Shannon divergence (base 2, capped at 1) of two aligned count vectors."""
  p, q = _normalised(p_counts), _normalised(q_counts)
  m = (p + q) / 2
  return min(1.0, (_kl2(p, m) + _kl2(q, m)) / 2)


def psi(p_counts, q_counts, epsilon=PSI_EPSILON):
  """Population stability index, P offline (expected) and Q production (actual)."""
  p = np.maximum(_normalised(p_counts), epsilon)
  q = np.maximum(_normalised(q_counts), epsilon)
  return float(np.sum((q - p) * np.log(q / p)))


# --------------------------------------------------------------------------- histograms
def is_numeric_type(typ):
  while pa.types.is_list(typ) or pa.types.is_large_list(typ):
    typ = typ.value_type
  return pa.types.is_floating(typ)


def _flat(column):
  arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
  while pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
    arr = arr.flatten()
  if pa.types.is_dictionary(arr.type):
    arr = arr.dictionary_decode()
  return arr


def _fine_index(x):
  """int64 fine-bin index of each finite float64, monotone in x (0: |x| < 2^-30)."""
  m, e = np.frexp(np.abs(x))
  idx = 1 + (e.astype(np.int64) - _TINY_EXP) * _SUB + \
      np.floor((m - 0.5) * 2 * _SUB).astype(np.int64)
  idx[np.abs(x) < 2.0 ** (_TINY_EXP - 1)] = 0
  return np.where(x < 0, -idx, idx)


def _fine_upper(idx):
  """Upper boundary of each fine bin (the edge between bin idx and bin idx + 1)."""
  idx = np.asarray(idx, dtype=np.int64)
  out = np.empty(idx.shape, dtype=np.float64)
  tiny = 2.0 ** (_TINY_EXP - 1)
  pos = idx > 0
  k = idx[pos] - 1
  out[pos] = np.ldexp(0.5 + (k % _SUB + 1) / (2 * _SUB), (k // _SUB + _TINY_EXP).astype(np.int32))
  neg = idx < 0
  k = -idx[neg] - 1  # bin [-hi, -lo): its upper edge is -lo
  out[neg] = -np.ldexp(0.5 + (k % _SUB) / (2 * _SUB), (k // _SUB + _TINY_EXP).astype(np.int32))
  out[idx == 0] = tiny
  return out


def histogram(column):
  """The mergeable histogram of a feature column (Arrow, scalar or list): a plain dict."""
  arr = _flat(column)
  if pa.types.is_floating(arr.type):
    x = arr.cast(pa.float64()).drop_null().to_numpy(zero_copy_only=False)
    nan = np.isnan(x)
    inf = np.isinf(x)
    fin = x[~nan & ~inf]
    idx, counts = np.unique(_fine_index(fin), return_counts=True)
    return {"kind": "numeric", "index": idx.astype(np.int64), "counts": counts.astype(np.int64),
            "nan": int(nan.sum()), "pos_inf": int(np.count_nonzero(x[inf] > 0)),
            "neg_inf": int(np.count_nonzero(x[inf] < 0)),
            "min": float(fin.min()) if fin.size else None,
            "max": float(fin.max()) if fin.size else None}
  counts = {}
  arr = arr.drop_null()  # as TFDV: missing values are not a category
  if len(arr):
    vc = pc.value_counts(arr)
    counts = dict(zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist()))
  return _bounded({"kind": "categorical", "values": counts, "hashed": False})


def _folded(h):
  """A categorical histogram with its values folded into HASH_BINS bins by XXH64 of the text."""
  if h["hashed"]:
    return h
  values = {}
  for v, n in h["values"].items():
    b = xxhash.xxh64_intdigest(_label(v).encode("utf-8")) % HASH_BINS
    values[b] = values.get(b, 0) + n
  return {"kind": "categorical", "values": values, "hashed": True}


def _bounded(h):
  return _folded(h) if len(h["values"]) > MAX_DISTINCT else h


def _merge_bound(a, b, fn):
  vals = [v for v in (a, b) if v is not None]
  return fn(vals) if vals else None


def merge(a, b):
  """Sum of two histograms of the same feature (None is the empty histogram)."""
  if a is None or b is None:
    return b if a is None else a
  if a["kind"] != b["kind"]:
    raise ValueError("cannot merge a numeric and a categorical histogram")
  if a["kind"] == "categorical":
    if a["hashed"] or b["hashed"]:
      a, b = _folded(a), _folded(b)
    values = dict(a["values"])
    for v, n in b["values"].items():
      values[v] = values.get(v, 0) + n
    return _bounded({"kind": "categorical", "values": values, "hashed": a["hashed"]})
  idx, inv = np.unique(np.concatenate([a["index"], b["index"]]), return_inverse=True)
  counts = np.bincount(inv, weights=np.concatenate([a["counts"], b["counts"]]),
                       minlength=idx.size).astype(np.int64)
  return {"kind": "numeric", "index": idx, "counts": counts,
          **{k: a[k] + b[k] for k in ("nan", "pos_inf", "neg_inf")},
          "min": _merge_bound(a["min"], b["min"], min),
          "max": _merge_bound(a["max"], b["max"], max)}


def _total(h):
  if h["kind"] == "categorical":
    return sum(h["values"].values())
  return int(h["counts"].sum()) + h["nan"] + h["pos_inf"] + h["neg_inf"]


def _label(v):
  return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _order(v):
  """Integers in numeric order first, then texts."""
  number = isinstance(v, (int, float)) and not isinstance(v, bool)
  return (not number, v if number else 0, _label(v))


def _compare_categorical(a, b):
  if a["hashed"] or b["hashed"]:
    a, b = _folded(a), _folded(b)
  values = sorted(set(a["values"]) | set(b["values"]), key=_order)
  p = np.array([a["values"].get(v, 0) for v in values], dtype=np.int64)
  q = np.array([b["values"].get(v, 0) for v in values], dtype=np.int64)
  order = np.lexsort((np.arange(len(values)), -(p + q)))[:MAX_LABELS]
  shown = sorted(order.tolist())
  labels = [f"hash bin {values[i]}" if a["hashed"] else _label(values[i]) for i in shown]
  hp, hq = p[shown].tolist(), q[shown].tolist()
  if len(values) > len(shown):
    labels.append("(other)")
    hp.append(int(p.sum()) - sum(hp))
    hq.append(int(q.sum()) - sum(hq))
  return {"kind": "categorical", "linf": linf(p, q), "psi": psi(p, q),
          "histogram": {"bins": labels, "offline": hp, "production": hq}}


def _coarse_edges(idx, pooled, num_bins):
  """Indices into idx after which a coarse bin ends (quantiles of pooled counts)."""
  cum = np.cumsum(pooled)
  targets = cum[-1] * np.arange(1, num_bins) / num_bins
  cuts = np.unique(np.searchsorted(cum, targets, side="left"))
  return cuts[cuts < idx.size - 1]


def _compare_numeric(a, b, num_bins):
  idx, inv = np.unique(np.concatenate([a["index"], b["index"]]), return_inverse=True)
  na = a["index"].size
  p_fine = np.bincount(inv[:na], weights=a["counts"], minlength=idx.size)
  q_fine = np.bincount(inv[na:], weights=b["counts"], minlength=idx.size)
  lo = _merge_bound(a["min"], b["min"], min)
  hi = _merge_bound(a["max"], b["max"], max)
  if idx.size:
    cuts = _coarse_edges(idx, p_fine + q_fine, num_bins)
    starts = np.concatenate([[0], cuts + 1])
    p = np.add.reduceat(p_fine, starts).astype(np.int64)
    q = np.add.reduceat(q_fine, starts).astype(np.int64)
    edges = [lo] + _fine_upper(idx[cuts]).tolist() + [hi]
  else:
    p = q = np.zeros(0, dtype=np.int64)
    edges = []
  extra = [(k, a[k], b[k]) for k in ("nan", "pos_inf", "neg_inf") if a[k] or b[k]]
  p_all = np.concatenate([p, [e[1] for e in extra]]).astype(np.int64)
  q_all = np.concatenate([q, [e[2] for e in extra]]).astype(np.int64)
  hist = {"bins": edges, "offline": p.tolist(), "production": q.tolist()}
  for k, x, y in extra:
    hist[k] = [int(x), int(y)]
  return {"kind": "numeric", "jensen_shannon": jensen_shannon(p_all, q_all),
          "psi": psi(p_all, q_all), "histogram": hist}


def compare(offline, production, num_bins=NUM_BINS):
  """The drift entry of one feature from the two sides' merged histograms, or None when a
  side has no value (a distance between an empty and a non-empty distribution is undefined)."""
  if offline is None or production is None or not _total(offline) or not _total(production):
    return None
  if offline["kind"] != production["kind"]:
    return None
  if offline["kind"] == "categorical":
    return _compare_categorical(offline, production)
  out = _compare_numeric(offline, production, num_bins)
  if not all(math.isfinite(v) for v in out["histogram"]["bins"]):
    raise ValueError("numeric histogram edges must be finite")
  return out
