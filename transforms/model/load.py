"""Loading the model the `predict` stage calls, checking it against the transformed features,
and calling it on a table of what the model receives.

Two kinds (docs/features.md, "The model and the predict stage"):
  SavedModel  --model_dir: a TensorFlow SavedModel. --model_signature names the signature; by
              default the one signature whose inputs are all transformed features (a TFX Trainer
              export also has serving_default over serialized tf.Examples, which applies the
              TFT layer itself: that one is not it); serving_default when several do (a Keras
              export holds "serve" and "serving_default", the same function). --model_output
              names the output; by default the signature's only one.
  module hook --model_module: a module (dotted name or .py file) defining
              predict(features: dict[str, numpy array]) -> numpy array, fed every transformed
              feature (strings as bytes objects): scikit-learn, XGBoost, anything.
A model that cannot be loaded, a signature or output that is not there or is not unique, an input
the transformed features lack or hold in another dtype, or a decision rule the output width does
not suit is a UsageError (one line, exit 2) before any record is read.
"""
import dataclasses
import hashlib
import os

import numpy as np
import pyarrow as pa

from transforms.spec import decision, modules
from transforms.spec.errors import UsageError, first_line

__all__ = ["ModelSpec", "Predictor", "load", "saved_model_digest", "BATCH_ROWS"]

BATCH_ROWS = 65536  # rows per model call: bounds the memory of one call's tensors
# Arrow types of transformed features -> the TensorFlow dtype name a model input must have.
_DTYPES = {pa.float32(): "float32", pa.float64(): "float64", pa.int64(): "int64",
           pa.string(): "string", pa.large_string(): "string", pa.binary(): "string",
           pa.large_binary(): "string", pa.int32(): "int32"}


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """The model flags, as a job pickles them to its workers (each loads the model once)."""
  model_dir: str = None
  module: str = None
  signature: str = None
  output: str = None
  decision: str = None

  def given(self):
    return bool(self.model_dir or self.module)

  def flag(self):
    return (f"--model_dir {self.model_dir}" if self.model_dir
            else f"--model_module {self.module}")


def saved_model_digest(model_dir):
  """"sha256:<hex>" over every file of a SavedModel folder (its relative path and content
  digest, in path order): the model's identity in run metadata."""
  import tensorflow as tf
  entries = []
  root = model_dir.rstrip("/")
  for folder, _, names in tf.io.gfile.walk(root):
    for name in names:
      path = f"{folder.rstrip('/')}/{name}"
      h = hashlib.sha256()
      with tf.io.gfile.GFile(path, "rb") as f:
        while chunk := f.read(8 << 20):
          h.update(chunk)
      entries.append(f"{os.path.relpath(path, root)} {h.hexdigest()}\n")
  return "sha256:" + hashlib.sha256("".join(sorted(entries)).encode("utf-8")).hexdigest()


class Predictor:
  """A loaded model: predict(table) -> float64 scores[rows, width]; identity() for run
  metadata; rule: the decision rule (spec/decision.py)."""

  def __init__(self, spec, call, inputs, width, identity):
    self.spec, self._call, self.inputs, self.width = spec, call, inputs, width
    self.rule = decision.parse(spec.decision)
    self._identity = identity

  def identity(self):
    return dict(self._identity, decision=self.rule.text())

  def predict(self, table):
    """float64[rows, width]: the model's scores for each row of `table` (one column per
    transformed feature, as the serve stage gives them)."""
    out = []
    for lo in range(0, max(table.num_rows, 1), BATCH_ROWS):
      part = table.slice(lo, BATCH_ROWS)
      if not part.num_rows:
        break
      scores = decision.as_scores(self._call(part), part.num_rows)
      self.rule.check_width(scores.shape[1], self.spec.flag())  # a hook's width shows here
      if self.width is not None and scores.shape[1] != self.width:
        raise ValueError(f"{self.spec.flag()}: the model returned {scores.shape[1]} scores "
                         f"per record, not {self.width}")
      out.append(scores)
    return np.concatenate(out) if out else np.zeros((0, self.width or 1))


def _numpy(column, dtype):
  arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
  if dtype == "string":
    return np.array(arr.cast(pa.binary()).to_pylist(), dtype=object)
  return arr.to_numpy(zero_copy_only=False)


def _feature_dtypes(features):
  """{feature: dtype name} of {feature: Arrow type or TF dtype name}; a feature of several
  values per record maps to None."""
  return {n: t if isinstance(t, str) or t is None else _DTYPES.get(t)
          for n, t in features.items()}


def load(spec, features):
  """The Predictor of ModelSpec `spec`, checked against the transformed features ({name: Arrow
  type as the serve stage gives them, or TF dtype name as TFT's output schema does}); UsageError,
  one line, when it cannot be used."""
  decision.parse(spec.decision)  # a bad rule is named before the model is read
  if spec.model_dir and spec.module:
    raise UsageError("--model_dir and --model_module: give one model")
  if spec.module:
    return _load_module(spec, features)
  return _load_saved_model(spec, features)


def _load_module(spec, features):
  try:
    module = modules.import_feature_module(spec.module, "--model_module")
  except ImportError as e:
    raise UsageError(f"--model_module {spec.module}: {first_line(e)}") from None
  fn = getattr(module, "predict", None)
  if not callable(fn):
    raise UsageError(f"--model_module {spec.module} lacks predict(features) -> scores")
  dtypes = _feature_dtypes(features)
  names = sorted(features)

  def call(table):
    return fn({n: _numpy(table.column(n), dtypes[n]) for n in names})
  identity = {"source": spec.module, "kind": "module", "digest": modules.source_digest(module)}
  return Predictor(spec, call, dict(dtypes), None, identity)


def _signature_inputs(fn):
  return dict(fn.structured_input_signature[1])


def _choose_signature(spec, signatures, features):
  where = spec.flag()
  if spec.signature:
    if spec.signature not in signatures:
      raise UsageError(f"{where}: no signature {spec.signature!r} (it has "
                       f"{', '.join(sorted(signatures)) or 'none'})")
    return spec.signature
  fitting = [name for name, fn in sorted(signatures.items())
             if set(_signature_inputs(fn)) <= set(features)]
  if len(fitting) == 1:
    return fitting[0]
  if "serving_default" in fitting:  # a Keras export: "serve" and "serving_default", the same
    return "serving_default"
  described = "; ".join(f"{name}({', '.join(sorted(_signature_inputs(fn)))})"
                        for name, fn in sorted(signatures.items()))
  if not fitting:
    raise UsageError(f"{where}: no signature takes only transformed features "
                     f"({', '.join(sorted(features))}); it has {described or 'none'}")
  raise UsageError(f"{where}: signatures {', '.join(fitting)} all take transformed features; "
                   "pass --model_signature")


def _load_saved_model(spec, features):
  from transforms.graph import quiet
  tf = quiet.import_tensorflow()
  where = spec.flag()
  if not tf.io.gfile.exists(f"{spec.model_dir.rstrip('/')}/saved_model.pb"):
    raise UsageError(f"{where}: not a SavedModel (no saved_model.pb)")
  try:
    loaded = tf.saved_model.load(spec.model_dir)
  except Exception as e:  # pylint: disable=broad-except  (TF raises many kinds)
    raise UsageError(f"{where}: cannot be loaded: {first_line(e)}") from None
  signatures = dict(loaded.signatures)
  name = _choose_signature(spec, signatures, features)
  fn = signatures[name]
  wanted = _signature_inputs(fn)
  dtypes = _feature_dtypes(features)
  for input_name, tensor in sorted(wanted.items()):
    if input_name not in features:
      raise UsageError(f"{where}: signature {name!r} takes input {input_name!r}, which the "
                       f"transformed features lack ({', '.join(sorted(features))})")
    if dtypes[input_name] != tensor.dtype.name:
      raise UsageError(f"{where}: signature {name!r} input {input_name!r} is "
                       f"{tensor.dtype.name}, the transformed feature is "
                       f"{dtypes[input_name] or features[input_name]}")
  outputs = dict(fn.structured_outputs)
  output = spec.output or (next(iter(outputs)) if len(outputs) == 1 else None)
  if output not in outputs:
    raise UsageError(f"{where}: signature {name!r} has output(s) {', '.join(sorted(outputs))}; "
                     + (f"no {spec.output!r}" if spec.output else "pass --model_output"))
  shape = outputs[output].shape
  width = 1 if shape.rank == 1 else (shape[-1] if shape.rank == 2 else None)
  if width is not None:
    decision.parse(spec.decision).check_width(width, where)
  ranks = {n: t.shape.rank for n, t in wanted.items()}

  def call(table):
    feed = {}
    for n, tensor in wanted.items():
      values = _numpy(table.column(n), tensor.dtype.name)
      feed[n] = tf.constant(values.reshape(-1, 1) if ranks[n] == 2 else values, tensor.dtype)
    return fn(**feed)[output].numpy()
  identity = {"source": spec.model_dir, "kind": "saved_model",
              "digest": saved_model_digest(spec.model_dir), "signature": name, "output": output,
              "tf": tf.__version__}
  return Predictor(spec, call, {n: t.dtype.name for n, t in wanted.items()}, width, identity)
