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


def predict_columns(predictor, inputs, mask=None):
  """{fp_predict, prediction, decision} of every row of `inputs` (the model's inputs, one column
  per transformed feature); rows where `mask` (bool numpy array) is True did not reach the
  model and are null in all three."""
  n = inputs.num_rows
  if mask is None:
    full = predictor.predict(inputs)
  else:
    rows = np.flatnonzero(~mask)
    scores = predictor.predict(inputs.take(pa.array(rows, pa.int64())))
    full = np.zeros((n, scores.shape[1] if len(rows) else (predictor.width or 1)))
    full[rows] = scores
  decisions = predictor.rule.decide(full)
  prediction = decision.prediction_array(full)
  chosen = decision.decision_array(decisions)
  if mask is not None:
    prediction = _with_nulls(prediction, mask)
    chosen = _with_nulls(chosen, mask)
  fp = fingerprint.fingerprint_batch(decision.fingerprint_fields(full, decisions))
  return {FP_PREDICT: pa.array(fp, mask=mask), PREDICTION: prediction, DECISION: chosen}


def _with_nulls(lists, mask):
  """A list array with the rows where `mask` is True null."""
  return pa.ListArray.from_arrays(lists.offsets, lists.values, mask=pa.array(mask))
