"""The serve stage compared: what the model received on each side, the served value where
serving logged one (served__F), else the transformed value (spec/feature_log.model_inputs).
"""
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.diff import kernels
from replay.diff.kernels import column_of, float_bits
from transforms.spec.feature_log import served_column, value_column

__all__ = ["model_input", "compare_served"]


def model_input(table, name):
  """What the model received for feature `name` on one side: the served value where serving
  logged one (served__F), else the transformed value (spec/feature_log.model_inputs)."""
  value, served = column_of(table, value_column(name)), column_of(table, served_column(name))
  if served is None:
    return value
  if value is None:
    return served
  return pc.if_else(served.is_valid(), served, value)


def compare_served(part, o, p, names, rows_mask, context):
  """Per feature, the `rows_mask` records whose model inputs differ ({name: bool[n]}), and
  which of those differ beyond tolerance (bool[n]); counts served_mismatch and
  served_within_tolerance per feature."""
  n = o.num_rows
  bad = np.zeros(n, bool)
  differs = {}
  if not rows_mask.any():
    return differs, bad
  rows = np.flatnonzero(rows_mask)
  take = pa.array(rows, pa.int64())
  for name in names:
    a, b = model_input(o, name), model_input(p, name)
    if a is None or b is None:
      continue
    a, b = a.take(take), b.take(take)
    same = kernels.values_equal(a, b)
    if same.all():
      continue
    f = part.features[name]
    # served_* count what serving logged: a feature no side logged a served value of is the
    # transform's own value, compared (and counted) there.
    logged = served_column(name) in o.schema.names or served_column(name) in p.schema.names
    close = same.copy()
    if f["kind"] == "numeric":
      close |= kernels.numeric_rows(
          a, b, *context.tolerance.for_feature(name, max(float_bits(a), float_bits(b))))[0]
    differs[name] = np.zeros(n, bool)
    differs[name][rows[~same]] = True
    bad[rows[~close]] = True
    if logged:
      f["served_mismatch"] += int((~close).sum())
      f["served_within_tolerance"] += int((close & ~same).sum())
  return differs, bad
