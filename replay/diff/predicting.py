"""The diff's own model (replay.diff --model_dir / --model_module): the predict stage for a side
whose log lacks it (the model run on that side's serve values, as pipelines.features would), and
the attribution of decision flips to features.

Attribution: for each flipped record whose model inputs differ (its first divergent stage is
before predict), each differing model input is swapped back to its offline value alone, the
model re-run, and the feature named when that swap restores the offline decision; a record no
single swap restores is jointly caused. At most Context.attribution_records records are
attributed: those with the smallest XXH64 key hashes (kernels.samples' order), so the choice
does not depend on bucketing or the runner. docs/replay.md, "Decisions".
"""
import numpy as np
import pyarrow as pa

from replay.diff import kernels, served
from replay.diff.kernels import column_of
from transforms.model import predict
from transforms.spec.feature_log import (DECISION, DROPPED_STAGE, KEY, feature_of, features_of,
                                         is_value_column)

__all__ = ["DIFF_MODEL", "model_for_plan", "predictor_for", "with_predictions", "attribute",
           "attribution_summary"]

# What report.json's decisions.models says of a side whose log lacks the predict stage, when the
# diff's own model predicted it.
DIFF_MODEL = {"predicted_by": "the diff's --model_dir / --model_module"}


def model_for_plan(spec, schemas):
  """The diff's ModelSpec (None without one), loaded and checked against the logs' transformed
  features (their value columns' types, from the parts' footers, `schemas`) before any record
  is read: UsageError, one line, for a model that does not fit. The loaded model stays cached
  for this process's workers."""
  if not spec.given():
    return None
  types = {}
  for schema in schemas:
    for field in schema:
      if is_value_column(field.name):
        types.setdefault(feature_of(field.name), field.type)
  predict.predictor(spec, types)
  return spec


def _features(table):
  return features_of(table.schema.names)


def predictor_for(spec, table):
  """The diff's Predictor for a log table's transformed features (loaded once per process)."""
  types = {n: served.model_input(table, n).type for n in _features(table)}
  return predict.predictor(spec, types)


def _inputs(table, names):
  return pa.table([served.model_input(table, n) for n in names], names=names)


def with_predictions(table, spec):
  """`table` with the predict stage's columns computed by the diff's model where its log lacks
  them (rows a stage dropped stay null); unchanged when it has them or there is no model."""
  if table is None or spec is None or predict.FP_PREDICT in table.schema.names:
    return table
  names = _features(table)
  if not names:
    return table
  model = predictor_for(spec, table)
  dropped = column_of(table, DROPPED_STAGE).is_valid().to_numpy(zero_copy_only=False)
  cols = predict.predict_columns(model, _inputs(table, sorted(model.inputs) or names),
                                 dropped if dropped.any() else None)
  for name, column in cols.items():
    table = table.append_column(name, column)
  return table


def attribute(o, p, rows, spec, cap):
  """[(key hash, key, features whose swap alone restores the offline decision)] of the flipped
  matched rows `rows` (indices into the aligned tables o, p), at most `cap` of them, smallest
  key hashes first."""
  if spec is None or not len(rows) or cap <= 0:
    return []
  keys = column_of(o, KEY).take(pa.array(rows, pa.int64()))
  chosen = kernels.samples(keys, lambda i, k: int(rows[i]), cap)
  picked = np.array([e[2] for e in chosen], np.int64)
  take = pa.array(picked, pa.int64())
  model = predictor_for(spec, p)
  names = sorted(model.inputs) or _features(p)
  off, prod = _inputs(o, names).take(take), _inputs(p, names).take(take)
  # the offline decisions, one row each (a decision's width is the rule's: fixed in a run)
  want = np.array(column_of(o, DECISION).take(take).to_pylist(), np.int64).reshape(
      len(picked), -1)
  restores = np.zeros((len(picked), len(names)), bool)
  for f, name in enumerate(names):
    at = np.flatnonzero(~kernels.values_equal(off.column(name), prod.column(name)))
    if not len(at):
      continue
    idx = pa.array(at, pa.int64())
    swapped = prod.take(idx)
    swapped = swapped.set_column(swapped.schema.get_field_index(name), name,
                                 off.column(name).take(idx))
    got = model.rule.decide(model.predict(swapped))
    restores[at, f] = got.shape == want[at].shape and np.all(got == want[at], axis=1)
  return [(h, k, tuple(n for f, n in enumerate(names) if restores[i, f]))
          for i, (h, k, _) in enumerate(chosen)]


def attribution_summary(entries, candidates, cap):
  """report.json decisions.attribution: the flipped records whose inputs differ (candidates),
  how many were attributed (at most cap), per feature how many its swap alone restores, and how
  many no single swap restores (jointly caused)."""
  by_feature = {}
  for _, _, names in entries:
    for name in names:
      by_feature[name] = by_feature.get(name, 0) + 1
  return {"flips_with_differing_inputs": int(candidates), "attributed": len(entries),
          "limit": int(cap), "by_feature": dict(sorted(by_feature.items(),
                                                       key=lambda kv: (-kv[1], kv[0]))),
          "jointly_caused": sum(1 for e in entries if not e[2])}

