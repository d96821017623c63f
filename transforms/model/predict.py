"""The `predict` stage (spec/stages.py PREDICT) over a bucket's rows: the model called on what it
received (the serve stage's values), its scores and the declared rule's decision
(spec/decision.py) as the log's prediction and decision columns, and their fingerprint as
fp_predict. The features job's merge (stages/write_feature_log.py) calls it, and anything else
that writes the stage must (no Beam here).
"""
import threading

import numpy as np
import pyarrow as pa

from transforms.model import load
from transforms.spec import decision, fingerprint
from transforms.spec.feature_log import DECISION, PREDICTION, fp_column
from transforms.spec.stages import PREDICT

__all__ = ["FP_PREDICT", "predict_columns", "predictor"]

FP_PREDICT = fp_column(PREDICT.name)
_LOADED, _LOCK = {}, threading.Lock()


def predictor(spec, features):
  """The Predictor of a ModelSpec for transformed features {name: Arrow type}, loaded once per
  process (a worker's merges share it; TensorFlow's calls are thread-safe)."""
  key = (spec, tuple(sorted((n, str(t)) for n, t in features.items())))
  with _LOCK:
    if key not in _LOADED:
      _LOADED[key] = load.load(spec, features)
    return _LOADED[key]


def predict_columns(predictor, inputs, mask=None, served=None, rule=None):
  """{fp_predict, prediction, decision} of every row of `inputs` (the model's inputs, one column
  per transformed feature). Rows where `mask` (bool numpy array) is True did not reach the model.
  served: (scores[n, width], valid[n]) of what serving answered (spec/decision.scores_of_text),
  taken as the prediction where valid; the model (`predictor`; None: none given) predicts the
  other rows. rule: the decision rule (default: the predictor's). A row with no prediction is
  null in all three."""
  n = inputs.num_rows
  rule = rule or predictor.rule
  reached = np.ones(n, bool) if mask is None else ~mask
  have = np.zeros(n, bool) if served is None else served[1] & reached
  need = reached & ~have if predictor is not None else np.zeros(n, bool)
  width = served[0].shape[1] if served is not None and have.any() else None
  if need.all():
    scores = predictor.predict(inputs)
  elif need.any():
    scores = predictor.predict(inputs.take(pa.array(np.flatnonzero(need), pa.int64())))
  if need.any():
    if width is not None and scores.shape[1] != width:
      raise ValueError(f"serving logged {width} scores per record, the model gives "
                       f"{scores.shape[1]}")
    width = scores.shape[1]
  full = np.zeros((n, width or (predictor.width if predictor else None) or 1))
  if need.any():
    full[need] = scores
  if have.any():
    full[have] = served[0][have]
  null = ~(need | have)
  null = null if null.any() else None
  decisions = rule.decide(full)
  prediction = decision.prediction_array(full)
  chosen = decision.decision_array(decisions)
  if null is not None:
    prediction = _with_nulls(prediction, null)
    chosen = _with_nulls(chosen, null)
  fp = fingerprint.fingerprint_batch(decision.fingerprint_fields(full, decisions))
  return {FP_PREDICT: pa.array(fp, mask=null), PREDICTION: prediction, DECISION: chosen}


def _with_nulls(lists, mask):
  """A list array with the rows where `mask` is True null."""
  return pa.ListArray.from_arrays(lists.offsets, lists.values, mask=pa.array(mask))
