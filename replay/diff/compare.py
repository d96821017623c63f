"""Pure comparison kernels of the replay diff: one bucket's two feature-log tables -> a Partial.

`compare_bucket(offline, production, context)` joins the bucket's offline and production rows
by key (Arrow `index_in` / `is_in`, no per-row Python), classifies every key (matched, offline
or production only with the other side's drop stage as the reason, not served when production
covers only part of the traffic and never saw the key, dropped on both; a key
duplicated on either side excluded from both), and for matched keys compares the stage
fingerprints in pipeline order and every transformed feature (fingerprint equality, then
numeric tolerance) -- the semantics of docs/replay.md. Every matched record is one class:
identical, noise (only transformed or served values differ, within tolerance), latent (a stage
differs, what the model receives agrees within tolerance) or divergent (what the model
receives differs). The result is a `Partial`: counters,
per-feature sums and maxima, the deterministic samples (smallest XXH64(key, seed 0) first) and
the drift histograms; partials `merge` associatively, which is how the Beam job's CombineFn
totals them.
"""
import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.diff import decisions, drift
from replay.diff import kernels, moved, predicting, served
from replay.diff.kernels import column_of, float_bits, fp_equal, fp_of
from replay.diff.tolerance import Tolerance
from transforms.spec import fingerprint
from transforms.spec.feature_log import (DROPPED_STAGE, EVENT_TIME, KEY, WINDOW_END,
                                         WINDOW_START, aggregate_column, aggregates_of,
                                         feature_fp_column, feature_of,
                                         fp_column, is_feature_fp_column, is_value_column,
                                         value_column)
from transforms.spec.feature_log import DECISION, PREDICTION
from transforms.spec.stages import ANALYZE, PREDICT, RECORD_STAGES, SERVE, STAGES, TRANSFORM, WINDOW

__all__ = ["Context", "Partial", "empty", "merge", "compare_bucket", "equal_bucket",
           "feature_kind", "RECORD_STAGES", "SIDES", "COUNTERS", "CLASSES", "SAMPLE_KINDS"]

SIDES = ("offline", "production")
COUNTERS = ("matched_keys", "offline_only", "production_only", "dropped_both", "identical",
            "noise", "latent", "divergent", "duplicate_keys_offline",
            "duplicate_keys_production", "not_served")
CLASSES = ("identical", "noise", "latent", "divergent")  # each matched record is one
SAMPLE_KINDS = ("divergent", "latent", "offline_only", "production_only", "duplicate_keys")
# A record sample's evidence of when: its event time and window bounds on each side.
_WHEN = (EVENT_TIME, WINDOW_START, WINDOW_END)
_FEATURE_COUNTS = ("match", "mismatch", "within_tolerance", "offline_only", "production_only",
                   "delta_n", "served_mismatch", "served_within_tolerance")


@dataclasses.dataclass(frozen=True)
class Context:
  """What a bucket comparison needs to know about the two runs."""
  tolerance: Tolerance = Tolerance()
  transform_stage: str = "transform"  # first stage of a transform-only divergence
  analyze_match: bool = True          # the runs' analyze fingerprints are equal
  samples: int = 10
  # The production side covers part of the traffic (a sample, some keys): an offline record
  # whose key production never saw is not_served, not offline_only (docs/replay.md, "Scope").
  partial_production: bool = False
  # The diff's model (a ModelSpec, replay/diff/predicting.py): predicts a side lacking the
  # predict stage and attributes flips, at most attribution_records records.
  model: object = None
  attribution_records: int = 100000


@dataclasses.dataclass
class Partial:
  """Mergeable totals over some buckets (plain data; `merge` returns a new one)."""
  samples_cap: int
  buckets: int = 0
  records: dict = dataclasses.field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
  one_side: dict = dataclasses.field(default_factory=lambda: {s: {} for s in SIDES})
  first_stage: dict = dataclasses.field(default_factory=lambda: dict.fromkeys(STAGES, 0))
  # of first_stage's records, those whose model inputs differ (divergent, not latent)
  reaches_model: dict = dataclasses.field(default_factory=lambda: dict.fromkeys(STAGES, 0))
  stages: dict = dataclasses.field(default_factory=lambda: {s: [0, 0] for s in STAGES})
  # name -> {kind, match, mismatch, within_tolerance, offline_only, production_only,
  #          delta_n, delta_sums (one per bucket), delta_max}
  features: dict = dataclasses.field(default_factory=dict)
  # kind -> [(xxh64 of key, key, entry dict)], at most samples_cap, smallest hash first
  samples: dict = dataclasses.field(default_factory=lambda: {k: [] for k in SAMPLE_KINDS})
  histograms: dict = dataclasses.field(default_factory=lambda: {s: {} for s in SIDES})
  # aggregate -> [records, largest |d|, offline, production]: the records whose window
  # fingerprint differs by float noise in that aggregate alone (kernels.window_noise); those
  # records in all (an aggregate of two can differ in one record)
  window_noise: dict = dataclasses.field(default_factory=dict)
  window_noise_records: int = 0
  # The window intervals (start, end) that matched records whose event time moved (first
  # differing at raw or parse) left or entered, and the records first differing at window per
  # offline window interval: summary links the two (moved records change their windows' counts).
  moved_records: int = 0
  moved_windows: frozenset = frozenset()
  window_first: dict = dataclasses.field(default_factory=dict)
  # What the model decides where both logs hold the predict stage (replay/diff/decisions.py)
  decisions: dict = dataclasses.field(default_factory=decisions.empty)


def empty(samples_cap=10):
  return Partial(samples_cap=samples_cap)


def _add_counts(a, b):
  out = dict(a)
  for k, v in b.items():
    out[k] = out.get(k, 0) + v
  return out


def _merge_feature(a, b):
  if a is None or b is None:
    return dict(b if a is None else a)
  out = {k: a[k] + b[k] for k in _FEATURE_COUNTS}
  # Per-bucket sums are kept apart and added with math.fsum at the end (model.py), so the
  # total does not depend on the order in which a runner merges buckets.
  out.update(kind=a["kind"], delta_sums=a["delta_sums"] + b["delta_sums"],
             delta_max=max(a["delta_max"], b["delta_max"]))
  return out


def _merge_window_noise(a, b):
  if a is None or b is None:
    return list(b if a is None else a)
  return [a[0] + b[0], *max(a[1:], b[1:])]  # the largest (|d|, offline, production)


def _smallest(entries, cap):
  return sorted(entries, key=lambda e: (e[0], e[1]))[:cap]


def merge(a, b):
  """The Partial of the union of two disjoint sets of buckets."""
  cap = max(a.samples_cap, b.samples_cap)
  names = sorted(set(a.features) | set(b.features))
  return Partial(
      samples_cap=cap, buckets=a.buckets + b.buckets,
      records=_add_counts(a.records, b.records),
      one_side={s: _add_counts(a.one_side[s], b.one_side[s]) for s in SIDES},
      first_stage=_add_counts(a.first_stage, b.first_stage),
      reaches_model=_add_counts(a.reaches_model, b.reaches_model),
      stages={s: [a.stages[s][0] + b.stages[s][0], a.stages[s][1] + b.stages[s][1]]
              for s in STAGES},
      features={n: _merge_feature(a.features.get(n), b.features.get(n)) for n in names},
      samples={k: _smallest(a.samples[k] + b.samples[k], cap) for k in SAMPLE_KINDS},
      histograms={s: {n: drift.merge(a.histograms[s].get(n), b.histograms[s].get(n))
                      for n in sorted(set(a.histograms[s]) | set(b.histograms[s]))}
                  for s in SIDES},
      window_noise={n: _merge_window_noise(a.window_noise.get(n), b.window_noise.get(n))
                    for n in sorted(set(a.window_noise) | set(b.window_noise))},
      window_noise_records=a.window_noise_records + b.window_noise_records,
      moved_records=a.moved_records + b.moved_records,
      moved_windows=a.moved_windows | b.moved_windows,
      window_first=_add_counts(a.window_first, b.window_first),
      decisions=decisions.merge(a.decisions, b.decisions, cap))


def feature_kind(typ):
  """'numeric' for float values (or lists of them), else 'categorical'."""
  return "numeric" if drift.is_numeric_type(typ) else "categorical"


def _new_feature(kind):
  return {"kind": kind, **dict.fromkeys(_FEATURE_COUNTS, 0), "delta_sums": [],
          "delta_max": 0.0}


# --------------------------------------------------------------------------- helpers
def _duplicated(table):
  """The keys that occur more than once on one side."""
  vc = pc.value_counts(column_of(table, KEY))
  return vc.field("values").filter(pc.greater(vc.field("counts"), 1)).cast(pa.large_string())


def _without(table, keys):
  """(the rows whose key is not in `keys`, how many rows were removed)."""
  if not len(keys):
    return table, 0
  out = pc.is_in(column_of(table, KEY), value_set=keys)
  return table.filter(pc.invert(out)), int(pc.sum(out).as_py() or 0)


# --------------------------------------------------------------------------- kernels
def _empty_like(table):
  return table.schema.empty_table()


def compare_bucket(offline, production, context=Context()):
  """The Partial of one bucket. Either side may be None (the bucket has no rows there)."""
  if offline is None and production is None:
    raise ValueError("compare_bucket needs at least one side")
  offline, production = (predicting.with_predictions(t, context.model)
                         for t in (offline, production))
  offline = _empty_like(production) if offline is None else offline
  production = _empty_like(offline) if production is None else production
  part = empty(context.samples)
  part.buckets = 1
  for side, table in zip(SIDES, (offline, production)):
    for name in table.schema.names:
      if is_value_column(name):
        part.histograms[side][feature_of(name)] = drift.histogram(column_of(table, name))
  # A key duplicated on either side leaves both (its rows counted), so the other side's row
  # of it is not taken for a one-side-only record.
  off_dup, prod_dup = _duplicated(offline), _duplicated(production)
  dups = pa.concat_arrays([off_dup, prod_dup])
  rec = part.records
  off, rec["duplicate_keys_offline"] = _without(offline, dups)
  prod, rec["duplicate_keys_production"] = _without(production, dups)
  part.samples["duplicate_keys"] = kernels.samples(
      dups, lambda i, k: {"side": SIDES[int(i >= len(off_dup))], "key": k}, context.samples)

  ok, pk = column_of(off, KEY), column_of(prod, KEY)
  pos = pc.index_in(ok, value_set=pk)
  in_prod = pos.is_valid().to_numpy(zero_copy_only=False)
  prod_in_off = pc.is_in(pk, value_set=ok).to_numpy(zero_copy_only=False)
  j = pos.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
  off_stage = column_of(off, DROPPED_STAGE).cast(pa.string())
  prod_stage = column_of(prod, DROPPED_STAGE).cast(pa.string())
  off_kept = off_stage.is_null().to_numpy(zero_copy_only=False)
  prod_kept = prod_stage.is_null().to_numpy(zero_copy_only=False)
  prod_kept_at = in_prod & (prod_kept[j] if len(pk) else False)
  matched = in_prod & off_kept & prod_kept_at
  # Offline rows kept there only: the reason is production's drop stage, or "absent".
  other = prod_stage.take(pa.array(j)) if len(pk) else pa.nulls(len(ok), pa.string())
  reasons = pc.if_else(pa.array(in_prod), other, pa.scalar(None, pa.string()))
  offline_only = off_kept & ~matched
  if context.partial_production:
    unseen = offline_only & ~in_prod
    rec["not_served"] = int(np.count_nonzero(unseen))
    offline_only &= ~unseen
  _one_side(part, "offline", ok, reasons.fill_null("absent"), offline_only, context.samples)
  # Production rows kept there only: matched keys offline dropped, then keys offline lacks.
  from_off = in_prod & ~off_kept & prod_kept_at
  lacking = ~prod_in_off & prod_kept
  rows = np.concatenate([j[from_off], np.flatnonzero(lacking)]).astype(np.int64)
  reasons = pa.concat_arrays([off_stage.filter(pa.array(from_off)),
                              pa.repeat(pa.scalar("absent"), int(lacking.sum()))])
  _one_side(part, "production", pk.take(pa.array(rows)), reasons, None, context.samples)
  rec["dropped_both"] = int(np.count_nonzero(~off_kept & ~prod_kept_at)) + \
      int(np.count_nonzero(~prod_in_off & ~prod_kept))
  _compare_matched(part, off.filter(pa.array(matched)),
                   prod.take(pa.array(j[matched], pa.int64())), context)
  return part


def _one_side(part, side, keys, reasons, mask, cap):
  if mask is not None:
    keys, reasons = keys.filter(pa.array(mask)), reasons.filter(pa.array(mask))
  part.records[f"{side}_only"] = len(keys)
  if not len(keys):
    return
  vc = pc.value_counts(reasons)
  part.one_side[side] = dict(zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist()))
  part.samples[f"{side}_only"] = kernels.samples(
      keys, lambda i, k: {"key": k, "reason": reasons[i].as_py()}, cap)


def _compare_matched(part, o, p, context):
  n = o.num_rows
  rec = part.records
  rec["matched_keys"] = n
  early = np.zeros((n, len(RECORD_STAGES)), bool)
  for s, stage in enumerate(RECORD_STAGES):
    eq = fp_equal(fp_of(o, fp_column(stage)), fp_of(p, fp_column(stage)))
    early[:, s] = ~eq
    part.stages[stage] = [int(eq.sum()), int(n - eq.sum())]
  part.stages[ANALYZE.name] = [n, 0] if context.analyze_match else [0, n]
  t_eq = fp_equal(fp_of(o, fp_column(TRANSFORM.name)), fp_of(p, fp_column(TRANSFORM.name)))
  part.stages[TRANSFORM.name] = [int(t_eq.sum()), int(n - t_eq.sum())]
  names = sorted({feature_of(c) for t in (o, p) for c in t.schema.names
                  if is_feature_fp_column(c)})
  differs_any, bad_any = np.zeros(n, bool), np.zeros(n, bool)
  differs = {}
  for name in names:
    a, b = fp_of(o, feature_fp_column(name)), fp_of(p, feature_fp_column(name))
    va, vp = column_of(o, value_column(name)), column_of(p, value_column(name))
    kind = feature_kind((va if va is not None else vp).type) if (va is not None or
                                                                vp is not None) else "categorical"
    f = part.features.setdefault(name, _new_feature(kind))
    both = a[0] & b[0]
    match = both & (a[1] == b[1])
    diff = both & ~match
    within = np.zeros(n, bool)
    if kind == "numeric" and va is not None and vp is not None and diff.any():
      rows = np.flatnonzero(diff)
      w, quantified, delta = kernels.numeric_rows(
          va.take(pa.array(rows)), vp.take(pa.array(rows)),
          *context.tolerance.for_feature(name, max(float_bits(va), float_bits(vp))))
      within[rows[w]] = True
      f["delta_n"] += int(quantified.sum())
      f["delta_sums"] = sorted(f["delta_sums"] + [float(delta[quantified].sum())])
      f["delta_max"] = max(f["delta_max"], float(delta[quantified].max(initial=0.0)))
    one = a[0] != b[0]
    f["match"] += int(match.sum())
    f["delta_n"] += int(match.sum()) if kind == "numeric" else 0
    f["within_tolerance"] += int(within.sum())
    f["mismatch"] += int((diff & ~within).sum())
    f["offline_only"] += int((a[0] & ~b[0]).sum())
    f["production_only"] += int((~a[0] & b[0]).sum())
    differs[name] = diff | one
    differs_any |= differs[name]
    bad_any |= (diff & ~within) | one
  # What the model receives: the transformed features (a fingerprint that differs with no
  # feature to show for it is a difference, never hidden), then the served values.
  t_bad = ~t_eq & (bad_any | ~differs_any)
  s_eq = fp_equal(fp_of(o, fp_column(SERVE.name)), fp_of(p, fp_column(SERVE.name)))
  part.stages[SERVE.name] = [int(s_eq.sum()), int(n - s_eq.sum())]
  serve_check = ~s_eq & ~t_bad
  served_differs, serve_bad = served.compare_served(part, o, p, names, serve_check, context)
  served_any = np.zeros(n, bool)
  for mask in served_differs.values():
    served_any |= mask
  s_bad = serve_check & (serve_bad | ~served_any)
  model = t_bad | s_bad
  # A window fingerprint that differs by float noise in an aggregate alone (no other stage
  # before transform differs) is not a window difference: the record is noise, or divergent at
  # the stage where what the model receives differs. The report gives the reason.
  w = RECORD_STAGES.index(WINDOW.name)
  only_window = early[:, w] & (early.sum(axis=1) == 1)
  aggregates = aggregates_of(sorted(set(o.schema.names) | set(p.schema.names)))
  window_noise, part.window_noise = kernels.window_noise(o, p, only_window, aggregates,
                                                         context.tolerance)
  part.window_noise_records = int(np.count_nonzero(window_noise))
  early[window_noise, w] = False
  any_early = early.any(axis=1)
  # The predict stage, where both logs hold it: identical model inputs and a prediction beyond
  # its tolerance part at predict (the same inputs, another answer); within it, noise.
  predicted = decisions.has_predictions(o) and decisions.has_predictions(p)
  both, p_eq, p_within, delta, flipped = (decisions.compare(o, p, context.tolerance)
                                          if predicted else (np.zeros(n, bool),) * 5)
  p_diff = both & ~p_eq
  p_bad = ~any_early & t_eq & s_eq & ~window_noise & p_diff & ~p_within
  if predicted:
    part.stages[PREDICT.name] = [int(np.count_nonzero(both & p_eq)), int(np.count_nonzero(p_diff))]
  model |= p_bad
  identical = ~any_early & t_eq & s_eq & ~window_noise & ~p_diff
  rec["identical"] = int(np.count_nonzero(identical))
  rec["noise"] = int(np.count_nonzero(~any_early & ~model & ~identical))
  rec["latent"] = int(np.count_nonzero(any_early & ~model))
  rec["divergent"] = int(np.count_nonzero(model))
  first = np.full(n, "", dtype=object)
  first[t_bad] = context.transform_stage
  first[s_bad & ~t_bad] = SERVE.name
  first[p_bad] = PREDICT.name
  first[any_early] = np.array(RECORD_STAGES, dtype=object)[early[any_early].argmax(axis=1)]
  part.moved_records, part.moved_windows, part.window_first = moved.windows(o, p, first)
  for stage in RECORD_STAGES + (context.transform_stage, SERVE.name, PREDICT.name):
    at = first == stage
    part.first_stage[stage] += int(np.count_nonzero(at))
    part.reaches_model[stage] += int(np.count_nonzero(at & model))

  def pair(column, r):  # a log cell of row r on each side, as report.json holds it
    return [kernels.jsonable(_cell(t, column, r)) for t in (o, p)]

  def entry_of(rows):
    def entry(i, key):
      r = int(rows[i])
      if s_bad[r] and not t_bad[r]:  # the values the model received on each side
        feats = {name: [kernels.jsonable(served.model_input(t, name)[r].as_py()) for t in (o, p)]
                 for name in sorted(served_differs) if served_differs[name][r]}
      else:
        feats = {name: pair(value_column(name), r) for name in names if differs[name][r]}
      out = {"key": key, "first_divergent_stage": first[r], "features": feats}
      if aggregates:  # the windowed aggregates' values before TFT, on each side
        out["aggregates"] = {a: pair(aggregate_column(a), r) for a in aggregates}
      if predicted and both[r]:  # what the model answered and decided on each side
        out.update(prediction=pair(PREDICTION, r), decision=pair(DECISION, r))
      when = {c: pair(c, r) for c in _WHEN if c in o.schema.names or c in p.schema.names}
      return {**out, "when": when} if when else out
    return entry
  for kind, mask in (("divergent", model), ("latent", any_early & ~model)):
    rows = np.flatnonzero(mask)
    keys = column_of(o, KEY).take(pa.array(rows, pa.int64()))
    part.samples[kind] = kernels.samples(keys, entry_of(rows), context.samples)
  if predicted:
    classes = np.where(model, "divergent", np.where(any_early, "latent", np.where(
        identical, "identical", "noise")))
    decisions.add(part.decisions, both, delta, flipped, first, classes, p_diff & p_within)
    if context.model is not None:  # flips whose model inputs differ, swapped back one by one
      rows = np.flatnonzero(flipped & (first != "") & (first != PREDICT.name))
      part.decisions.update(candidates=len(rows), attribution_cap=context.attribution_records,
                            attributed=predicting.attribute(o, p, rows, context.model,
                                                            context.attribution_records))
    rows = np.flatnonzero(flipped)
    keys = column_of(o, KEY).take(pa.array(rows, pa.int64()))
    part.decisions["samples"] = kernels.samples(keys, entry_of(rows), context.samples)


def _cell(table, column, row):
  col = column_of(table, column)
  return None if col is None else col[row].as_py()


def equal_bucket(entry, feature_names, context=Context()):
  """The Partial of a bucket whose digests agree on every stage, from its metadata entry
  alone (it is not read): every kept record identical, every dropped one dropped on both."""
  part = empty(context.samples)
  kept = entry["rows"] - entry["dropped"]
  transformed = fingerprint.parse_digest(entry["digests"][TRANSFORM.name])["count"]
  rec = part.records
  rec["matched_keys"] = rec["identical"] = kept
  rec["dropped_both"] = entry["dropped"]
  for stage in RECORD_STAGES + (TRANSFORM.name, SERVE.name):
    part.stages[stage] = [kept, 0]
  part.stages[ANALYZE.name] = [kept, 0] if context.analyze_match else [0, kept]
  for name, kind in feature_names:
    f = part.features[name] = _new_feature(kind)
    f["match"] = transformed
    f["delta_n"] = transformed if kind == "numeric" else 0
  part.decisions = decisions.equal_bucket(
      entry, context.attribution_records if context.model is not None else None)
  if part.decisions["compared"]:
    part.stages[PREDICT.name] = [part.decisions["compared"], 0]
  return part
