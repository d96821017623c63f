"""The diff's report from its merged Partial: record counts and the divergent fraction, stages,
features, drift, samples (with vocabulary tokens), causes with their record counts, and why the
noise records are noise. The shape it fills is replay/report/report_model.py's.
"""
from replay.diff import compare, decisions, drift, moved
from replay.report.report_model import (UNEXPLAINED, Buckets, Cause, FeatureSummary, Records,
                                        Report, divergent_fraction)
from transforms.spec.stages import STAGES, WINDOW

# The cause at window of records whose window a record whose event time moved left or entered.
MOVED_FIELD = "moved_event_times"
MOVED_NOTE = "{n} records' event times moved (they part at raw) into or out of these windows"

__all__ = ["build_report", "noise_reasons"]


def _fmt(x):
  return f"{x:.2g}"


def noise_reasons(records, tolerance, analyzers, window_noise=None, values=True,
                  window_records=0):
  """Why the noise records are noise: the analyzers within float noise, windowed aggregates
  within float noise (window_noise: compare.Partial's, over window_records records, said even
  when all of them are divergent at a later stage), the value tolerance (values: some
  transformed or served value differs within it)."""
  if not records.get("noise") and not window_noise:
    return []
  why = []
  noisy = [a for a in analyzers.get("analyzers", []) if a["verdict"] == "noise"]
  if noisy:
    worst = max(noisy, key=lambda a: a["max_rel_diff"])
    why.append(f"{len(noisy)} analyzer(s) differ only by float reduction-order noise (largest "
               f"relative difference {_fmt(worst['max_rel_diff'])} in {worst['name']}, within "
               f"sqrt(N)*u = {_fmt(worst['tolerance'])} for N = {analyzers['records']} records)")
  default = tolerance["default"]
  if window_noise:
    bound = (f"float noise |d| <= t(1 + |offline|), t = sqrt(N)*u = "
             f"{_fmt(default['noise']['float64'])} for float64 values" if "noise" in default
             else f"the given tolerance (abs {default['abs']}, rel {default['rel']})")
    why.append(f"window fingerprints of {window_records} record(s) differ only by windowed "
               f"aggregates within {bound} (window bounds and counts equal; an online store "
               "that adds in another order): " + "; ".join(
                   f"{name} in {r} record(s), largest |d| {_fmt(d)} ({o!r} vs {q!r})" + (
                       f", within its own tolerance abs {tolerance['features'][name]['abs']} "
                       f"rel {tolerance['features'][name]['rel']}"
                       if name in tolerance["features"] else "")
                   for name, (r, d, o, q) in sorted(window_noise.items())) +
               "; each is noise unless what the model receives differs, at that stage")
  if values and "noise" in default:
    n = default["noise"]
    why.append(f"transformed values within float noise |d| <= t(1 + |offline|), t = sqrt(N)*u "
               f"= {_fmt(n['float32'])} for float32 values (N = {n['records']})")
  if "noise" in default and default["noise"].get("exact_features"):
    why.append("features fed by an analyzer that differs are compared exactly: " +
               ", ".join(default["noise"]["exact_features"]))
  elif values:
    why.append(f"transformed values within the given tolerance (abs {default['abs']}, "
               f"rel {default['rel']})")
  if tolerance["features"]:
    why.append("per-feature tolerances: " + ", ".join(
        f"{k} abs {v['abs']} rel {v['rel']}" for k, v in sorted(tolerance["features"].items())))
  return why


def _noise(partial, tol, analyzers):
  """The report's noise: records, why, and where window fingerprints differ by aggregate float
  noise alone, those records (window_records; noise unless their model inputs differ) and per
  aggregate its records, largest |d| and that pair (offline, production)."""
  rec = partial.records
  values = any(f["within_tolerance"] or f["served_within_tolerance"]
               for f in partial.features.values())
  out = {"records": int(rec["noise"]),
         "why": noise_reasons(rec, tol, analyzers, partial.window_noise, values,
                              partial.window_noise_records)}
  within = partial.decisions["within_tolerance"]
  if within and rec["noise"]:
    bound = tol["features"].get("prediction") or tol["default"]
    out["why"].append(f"predictions of {within} record(s) differ within the prediction "
                      f"tolerance (abs {_fmt(bound['abs'])}, rel {_fmt(bound['rel'])}: float "
                      "noise of float32 scores unless --tolerance prediction=... says otherwise)")
  if partial.window_noise:
    out["window_records"] = partial.window_noise_records
    out["aggregates"] = {name: {"records": int(r), "max_abs_delta": d, "largest": [o, q]}
                         for name, (r, d, o, q) in sorted(partial.window_noise.items())}
  return out


def _decisions(partial, models, causes):
  """report.json's decisions (None when neither side ran a model): the totals, or why none
  were compared (a side logs no prediction)."""
  if not any(models.values()):
    return None
  out = decisions.summary(partial.decisions, causes)
  lacking = [s for s in compare.SIDES if not models.get(s)]
  out["models"] = {s: models.get(s) for s in compare.SIDES}
  if lacking:
    out["note"] = (f"{' and '.join(lacking)} logs no prediction (no --model_dir or "
                   "--model_module, and no served response): no decision is compared")
  return out


def _with_tokens(entry, vocab):
  """A record sample with, beside each vocabulary-fed feature's ids, their tokens on each side
  (null for an id outside the vocabulary: its OOV bucket)."""
  tokens = {}
  for name, pair in entry.get("features", {}).items():
    sides = [vocab.get(s, {}).get(name) for s in compare.SIDES]
    if any(sides):
      tokens[name] = [t[v] if t and isinstance(v, int) and 0 <= v < len(t) else None
                      for t, v in zip(sides, pair)]
  return {**entry, "tokens": tokens} if tokens else entry


def build_report(partial, offline, production, tolerance, max_divergent_fraction, causes,
                 buckets_total, scope="all", fail_on="divergent", analyzers=None,
                 vocabularies=None, models=None):
  """The Report of a merged Partial. offline / production: Side; tolerance: Tolerance;
  causes: metadata.suspected_causes(...) (their record counts are filled in here: the records
  whose first divergent stage is the cause's, and those one side alone dropped there);
  analyzers: replay/analyzers.compare(...); vocabularies: {side: metadata.vocabularies(...)};
  models: {side: its run metadata's model or None} (the report's decisions, when either has
  one: replay/diff/decisions.py)."""
  rec = dict(partial.records, offline=offline.rows, production=production.rows)
  fraction = divergent_fraction(rec, fail_on)
  firsts = {s: int(partial.first_stage.get(s, 0)) for s in STAGES}
  names = sorted(set(partial.histograms["offline"]) | set(partial.histograms["production"]))
  drifts = {}
  for name in names:
    entry = drift.compare(partial.histograms["offline"].get(name),
                          partial.histograms["production"].get(name))
    if entry is not None:
      drifts[name] = entry
  vocab = vocabularies or {}
  samples = {k: [_with_tokens(e[2], vocab) if k in ("divergent", "latent") else e[2]
                 for e in partial.samples[k]] for k in compare.SAMPLE_KINDS}
  analyzers = analyzers or {"state": "equal", "records": 0, "analyzers": []}
  linked = moved.linked(partial) if firsts[WINDOW.name] else 0
  explained = {c["stage"] for c in causes}
  tol = tolerance.to_dict()
  found = [Cause(records=firsts[c["stage"]] + sum(
      partial.one_side[s].get(c["stage"], 0) for s in compare.SIDES), **c) for c in causes]
  if linked:  # window neighbours of records whose event time moved: tied to those records
    found.append(Cause(stage=WINDOW.name, field=MOVED_FIELD, offline=None, production=None,
                       records=linked, note=MOVED_NOTE.format(n=partial.moved_records)))
    found.sort(key=lambda c: (STAGES.index(c.stage), c.field))
  unexplained = {s: firsts[s] for s in STAGES if firsts[s] and s not in explained}
  if WINDOW.name in unexplained:  # what the moved records do not explain stays unexplained
    unexplained[WINDOW.name] -= linked
  unexplained = {s: n for s, n in unexplained.items() if n}
  return Report(
      decisions=_decisions(partial, models or {}, [c.to_dict() for c in found]),
      offline=offline, production=production, tolerance=tol,
      max_divergent_fraction=float(max_divergent_fraction),
      records=Records(**{k: int(rec[k]) for k in ("offline", "production") + compare.COUNTERS}),
      divergent_fraction=fraction,
      one_side_only={s: dict(sorted(partial.one_side[s].items())) for s in compare.SIDES},
      first_divergent_stage=firsts,
      reaches_model={s: int(partial.reaches_model.get(s, 0)) for s in STAGES},
      stages={s: {"match": int(partial.stages[s][0]), "mismatch": int(partial.stages[s][1])}
              for s in STAGES},
      features={n: FeatureSummary.from_totals(f) for n, f in partial.features.items()},
      suspected_causes=tuple(found),
      drift=drifts,
      buckets=Buckets(total=buckets_total, compared=partial.buckets,
                      skipped_equal=buckets_total - partial.buckets),
      samples=samples, exit_code=int(fraction > max_divergent_fraction), scope=scope,
      fail_on=fail_on, analyzers=analyzers,
      noise=_noise(partial, tol, analyzers),
      unexplained=tuple({"stage": s, "records": n, "note": UNEXPLAINED}
                        for s, n in unexplained.items()))
