"""The `predict` stage's rule: a model's output per record (its prediction) and the decision a
declared rule takes from it, as the features job, the production logger and the diff read them.

A prediction is the model's output for one record as float64 values (a score: one value; class
scores or logits: one per class). The decision rule is declared (--decision):
  threshold:T  one score per record; decision [1] when score >= T, else [0]
  argmax       decision [the index of the largest score] (the first on a tie)
  top_k:K      decision: the indices of the K largest scores, ascending (a set: the order among
               them is no decision; ties go to the lower index)
A decision is a list of int64 class indices, so two decisions are equal when their lists are.
docs/features.md, "The model and the predict stage". Imports neither Beam nor TensorFlow.
"""
import dataclasses
import re

import numpy as np
import pyarrow as pa

from transforms.spec.errors import UsageError

__all__ = ["Rule", "parse", "PREDICTION_TYPE", "DECISION_TYPE", "as_scores", "prediction_array",
           "decision_array", "fingerprint_fields", "margin"]

PREDICTION_TYPE = pa.list_(pa.float64())  # the log's prediction column
DECISION_TYPE = pa.list_(pa.int64())      # the log's decision column
_FORMS = "threshold:T (a number), argmax or top_k:K (a whole number >= 1)"


@dataclasses.dataclass(frozen=True)
class Rule:
  """A decision rule: kind 'threshold' (value T), 'argmax' or 'top_k' (value K)."""
  kind: str
  value: float = None

  def text(self):
    """The rule as --decision takes it and run metadata records it."""
    if self.kind == "argmax":
      return "argmax"
    value = self.value if self.kind == "threshold" else int(self.value)
    return f"{self.kind}:{value!r}"

  def check_width(self, width, where):
    """UsageError unless a prediction of `width` values per record suits the rule."""
    if self.kind == "threshold" and width != 1:
      raise UsageError(f"{where}: --decision {self.text()} needs one score per record, the "
                       f"model gives {width}; use argmax or top_k:K")
    if self.kind == "top_k" and width < self.value:
      raise UsageError(f"{where}: --decision {self.text()} needs at least {int(self.value)} "
                       f"scores per record, the model gives {width}")

  def decide(self, scores):
    """int64[n, m]: the decision of each row of float scores[n, width]."""
    if self.kind == "threshold":
      return (scores[:, :1] >= self.value).astype(np.int64)
    if self.kind == "argmax":
      return np.argmax(scores, axis=1).astype(np.int64)[:, None]
    order = np.argsort(-scores, axis=1, kind="stable")[:, :int(self.value)]
    return np.sort(order, axis=1).astype(np.int64)


def parse(text):
  """The Rule of a --decision value; UsageError naming the forms."""
  text = (text or "").strip()
  if text == "argmax":
    return Rule("argmax")
  m = re.fullmatch(r"(threshold|top_k):(.+)", text)
  if m:
    kind, value = m.groups()
    try:
      number = float(value) if kind == "threshold" else int(value)
    except ValueError:
      number = None
    if number is not None and np.isfinite(number) and (kind == "threshold" or number >= 1):
      return Rule(kind, float(number))
  raise UsageError(f"--decision {text!r} is not one of {_FORMS}")


def as_scores(output, rows):
  """float64[rows, width] of a model's output for `rows` records (a [rows] output is one score
  per record); ValueError when the output does not hold one row per record."""
  out = np.asarray(output)
  if out.ndim == 1:
    out = out[:, None]
  if out.ndim != 2 or out.shape[0] != rows:
    raise ValueError(f"the model returned shape {list(out.shape)} for {rows} records; it must "
                     "return [records] or [records, scores]")
  return out.astype(np.float64)


def prediction_array(scores):
  """The log's prediction column of float64 scores[n, width]."""
  n, width = scores.shape
  return pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * width),
                                  pa.array(scores.reshape(-1), pa.float64()))


def decision_array(decisions):
  """The log's decision column of int64 decisions[n, m]."""
  n, width = decisions.shape
  return pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * width),
                                  pa.array(decisions.reshape(-1), pa.int64()))


def fingerprint_fields(scores, decisions):
  """The fields the predict stage's fingerprint covers, as a table: prediction.0 ...
  prediction.{width-1} (float64) and decision.0 ... (int64), one scalar column per score and
  per decided index. (A model's output width is fixed, so the same fields on every row; scalar
  columns fingerprint ~13x faster than the two list columns: 0.034 s vs 0.46 s per 1M records,
  bench/predict.py.)"""
  cols = {f"prediction.{i}": pa.array(scores[:, i], pa.float64())
          for i in range(scores.shape[1])}
  cols.update({f"decision.{i}": pa.array(decisions[:, i], pa.int64())
               for i in range(decisions.shape[1])})
  return pa.table(cols)


def margin(rule, scores):
  """float64[n]: how far each row's scores lie from the rule's boundary (threshold: |score - T|;
  argmax: the largest score minus the second; top_k: the K-th largest minus the next; inf when
  there is no next). A flip whose margins on both sides are within the prediction noise lies
  at the boundary."""
  if rule.kind == "threshold":
    return np.abs(scores[:, 0] - rule.value)
  k = 1 if rule.kind == "argmax" else int(rule.value)
  if scores.shape[1] <= k:
    return np.full(scores.shape[0], np.inf)
  top = -np.sort(-scores, axis=1)
  return top[:, k - 1] - top[:, k]
