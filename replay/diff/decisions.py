"""What the model decides, in the diff: per matched record whose two logs both hold the predict
stage (spec/stages.py PREDICT), the prediction delta (the largest |offline - production| over
its scores) and whether the decision flipped; totals per first divergent stage and per record
class, a |delta| histogram over fixed decade bins, and the flipped records' rows for the
attribution (replay/diff/attribution.py). docs/replay.md, "Decisions".

A record whose every stage up to serve agrees (its model inputs identical) but whose prediction
differs beyond the prediction tolerance first diverges at `predict`: the same inputs and another
answer (another model version, another device's numerics). Its prediction within the tolerance
is noise. Totals merge associatively (merge), like compare.Partial's.
"""
import math

import numpy as np
import pyarrow as pa

from replay.diff import kernels
from replay.diff.kernels import column_of
from transforms.spec.feature_log import DECISION, PREDICTION, fp_column
from transforms.spec.stages import PREDICT

__all__ = ["FP_PREDICT", "EDGES", "empty", "merge", "has_predictions", "compare", "add",
           "equal_bucket", "summary"]

FP_PREDICT = fp_column(PREDICT.name)
# The |delta| histogram's bin edges: [0, 1e-9), [1e-9, 1e-8), ..., [0.1, 1), [1, inf).
EDGES = (0.0,) + tuple(10.0 ** e for e in range(-9, 1)) + (math.inf,)
_NO_STAGE = "none"  # by_stage's key of records that part at no stage (identical or noise)
_NO_RECORDS = {"records": 0, "flips": 0, "max_abs_delta": 0.0, "mean_abs_delta": 0.0}


def empty():
  return {"compared": 0, "flips": 0, "within_tolerance": 0, "delta_sums": [], "delta_max": 0.0,
          "by_stage": {},
          "by_class": {}, "histogram": [0] * (len(EDGES) - 1), "samples": [],
          # the attribution (replay/diff/predicting.py), where the diff was given the model:
          # flipped records whose inputs differ, the attributed ones, the cap (None: no model)
          "candidates": 0, "attributed": [], "attribution_cap": None}


def _merge_entry(a, b):
  return [a[0] + b[0], a[1] + b[1], max(a[2], b[2]), sorted(a[3] + b[3])]


def merge(a, b, cap=10):
  """The decisions of the union of two disjoint sets of buckets (the `cap` flipped-record
  samples with the smallest key hashes kept)."""
  stages = sorted(set(a["by_stage"]) | set(b["by_stage"]))
  classes = sorted(set(a["by_class"]) | set(b["by_class"]))
  return {"compared": a["compared"] + b["compared"], "flips": a["flips"] + b["flips"],
          "within_tolerance": a["within_tolerance"] + b["within_tolerance"],
          "delta_sums": sorted(a["delta_sums"] + b["delta_sums"]),
          "delta_max": max(a["delta_max"], b["delta_max"]),
          "by_stage": {s: _merge_entry(a["by_stage"].get(s, [0, 0, 0.0, []]),
                                       b["by_stage"].get(s, [0, 0, 0.0, []])) for s in stages},
          "by_class": {c: [x + y for x, y in zip(a["by_class"].get(c, [0, 0]),
                                                  b["by_class"].get(c, [0, 0]))]
                       for c in classes},
          "histogram": [x + y for x, y in zip(a["histogram"], b["histogram"])],
          "samples": sorted(a["samples"] + b["samples"], key=lambda e: (e[0], e[1]))[:cap],
          "candidates": a["candidates"] + b["candidates"],
          "attributed": sorted(a["attributed"] + b["attributed"], key=lambda e: (e[0], e[1]))[
              :max(a["attribution_cap"] or 0, b["attribution_cap"] or 0)],
          "attribution_cap": a["attribution_cap"] if b["attribution_cap"] is None
                             else b["attribution_cap"]}


def has_predictions(table):
  return table is not None and FP_PREDICT in table.schema.names


def _rows(lists):
  """(values[n, width], decisions as a comparable 2-D array) of a list column, or None when
  its rows are not all of one width."""
  arr = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
  n = len(arr)
  if arr.null_count:
    return None
  values = arr.flatten().to_numpy(zero_copy_only=False)
  if n == 0:
    return values.reshape(0, 0)
  if len(values) % n:
    return None
  out = values.reshape(n, len(values) // n)
  offsets = arr.offsets.to_numpy()
  return out if np.array_equal(offsets, np.arange(n + 1) * out.shape[1]) else None


def compare(o, p, tolerance):
  """(predicted on both, prediction fingerprints equal, within tolerance, |delta|, flipped) per
  matched row of two aligned log tables that both hold the predict stage."""
  a, b = kernels.fp_of(o, FP_PREDICT), kernels.fp_of(p, FP_PREDICT)
  both = a[0] & b[0]
  equal = both & (a[1] == b[1])
  po, pp = column_of(o, PREDICTION), column_of(p, PREDICTION)
  within, quantified, delta = kernels.numeric_rows(po, pp, *tolerance.for_feature(PREDICTION, 32))
  delta = np.where(equal | ~both, 0.0, np.where(quantified, delta, np.inf))
  flipped = np.zeros(len(o), bool)
  rows = np.flatnonzero(both & ~equal)
  if len(rows):
    take = pa.array(rows, pa.int64())
    lo, lp = (column_of(t, DECISION).take(take) for t in (o, p))
    do, dp = _rows(lo), _rows(lp)
    if do is not None and dp is not None and do.shape == dp.shape:
      flipped[rows] = ~np.all(do == dp, axis=1)
    else:  # decisions of other widths (another rule or model): compared row by row
      flipped[rows] = [x != y for x, y in zip(lo.to_pylist(), lp.to_pylist())]
  return both, equal, (within | equal) & both, delta, flipped


def add(d, both, delta, flipped, first, classes, within):
  """Adds one bucket's matched rows to decisions `d`: first[r] the record's first divergent
  stage ("" for none), classes[r] its class, within[r] its predictions differ within the
  prediction tolerance."""
  rows = np.flatnonzero(both)
  d["within_tolerance"] += int(np.count_nonzero(within[rows]))
  d["compared"] += len(rows)
  d["flips"] += int(np.count_nonzero(flipped))
  finite = np.isfinite(delta[rows])
  d["delta_sums"] = sorted(d["delta_sums"] + [float(delta[rows][finite].sum())])
  d["delta_max"] = max(d["delta_max"], float(delta[rows][finite].max(initial=0.0)))
  hist = np.histogram(np.minimum(delta[rows], 1e300), bins=np.array(EDGES[:-1] + (1e301,)))[0]
  d["histogram"] = [x + int(y) for x, y in zip(d["histogram"], hist)]
  stages = np.where(first[rows] == "", _NO_STAGE, first[rows])
  for stage in sorted(set(stages.tolist())):
    at = rows[stages == stage]
    e = d["by_stage"].setdefault(stage, [0, 0, 0.0, []])
    ok = np.isfinite(delta[at])
    d["by_stage"][stage] = [e[0] + len(at), e[1] + int(np.count_nonzero(flipped[at])),
                            max(e[2], float(delta[at][ok].max(initial=0.0))),
                            sorted(e[3] + [float(delta[at][ok].sum())])]
  for cls in sorted(set(classes[rows].tolist())):
    at = rows[classes[rows] == cls]
    e = d["by_class"].setdefault(cls, [0, 0])
    d["by_class"][cls] = [e[0] + len(at), e[1] + int(np.count_nonzero(flipped[at]))]


def equal_bucket(entry, cap=None):
  """The decisions of a bucket whose digests agree on every stage (predict included): every
  predicted record identical, no flip. cap: the diff's attribution cap when it was given the
  model, which predicts every kept record of a log lacking the stage."""
  d = empty()
  d["attribution_cap"] = cap
  digest = entry["digests"].get(PREDICT.name)
  if digest is None and cap is None:
    return d
  from transforms.spec import fingerprint
  n = (fingerprint.parse_digest(digest)["count"] if digest is not None
       else entry["rows"] - entry["dropped"])
  d["compared"] = n
  d["delta_sums"] = [0.0]
  d["histogram"][0] = n
  if n:
    d["by_stage"][_NO_STAGE] = [n, 0, 0.0, [0.0]]
    d["by_class"]["identical"] = [n, 0]
  return d


def summary(d, causes=()):
  """report.json's `decisions` of merged decisions `d`; causes: the report's suspected causes
  (dicts with stage and field), each given its stage's records, flips and |delta|s."""
  from replay.diff import predicting
  n = d["compared"]
  mean = math.fsum(d["delta_sums"]) / n if n else 0.0
  by_stage = {s: {"records": e[0], "flips": e[1], "max_abs_delta": e[2],
                  "mean_abs_delta": math.fsum(e[3]) / e[0] if e[0] else 0.0}
              for s, e in sorted(d["by_stage"].items())}
  return {
      "compared": n, "flips": d["flips"], "flip_fraction": d["flips"] / n if n else 0.0,
      "within_tolerance": d["within_tolerance"],
      "max_abs_delta": d["delta_max"], "mean_abs_delta": mean,
      "by_stage": by_stage,
      "by_class": {c: {"records": e[0], "flips": e[1]} for c, e in sorted(d["by_class"].items())},
      "by_cause": [{"stage": c["stage"], "field": c["field"],
                    **{k: by_stage.get(c["stage"], _NO_RECORDS)[k] for k in _NO_RECORDS}}
                   for c in causes],
      "histogram": {"edges": [e if math.isfinite(e) else None for e in EDGES],
                    "counts": list(d["histogram"])},
      "samples": [e[2] for e in d["samples"]],
      **({} if d["attribution_cap"] is None else {"attribution": predicting.attribution_summary(
          d["attributed"], d["candidates"], d["attribution_cap"])})}
