"""TF Serving request logs: the tf.Examples of PredictionLog records.

TF Serving's request logging (its --logging_config) writes TFRecord files of
tensorflow.serving.PredictionLog. The tf.Examples a request carried are found where TF Serving
itself reads them: a classify, regress or multi-inference log's request.input (example_list, or
example_list_with_context, whose context is serialized before each example and parsed with it,
as TF Serving's InputToSerializedExampleTensor does: an example's own feature wins over the
context's), or a predict log's DT_STRING input tensor of serialized tf.Examples (the input
named "examples", else the only string input). A log holding none (a session_run_log, a predict
request of raw tensors) is rejected with its reason. The protos (tensorflow-serving-api) import
TensorFlow: this module is imported only for that input, and imports them on first use.

Each log is parsed in Python (upb), one call per log: the protos offer no batch parser, and
bench/ingest_jsonl.py measures the cost: 200,000 examples in PredictionLogs of 10 ingest in
1.44x the time of the same plain tf.Example file, most of it the protos' TensorFlow import.
"""
__all__ = ["examples_of", "responses_of"]

_STRING = 7  # tensorflow.DataType DT_STRING (types.proto)
_INPUT_LOGS = ("classify_log", "regress_log", "multi_inference_log")


def examples_of(records):
  """(examples, origin, rejected) of serialized PredictionLog records: the serialized tf.Examples
  in log order, the position of the log each came from, and [(position, reason)] of the logs
  that are not PredictionLogs or hold no tf.Example."""
  from google.protobuf.message import DecodeError
  from tensorflow_serving.apis import prediction_log_pb2
  examples, origin, rejected = [], [], []
  log = prediction_log_pb2.PredictionLog()
  for i, record in enumerate(records):
    try:
      log.ParseFromString(record)
    except DecodeError as e:
      rejected.append((i, f"not a TF Serving PredictionLog ({e})"))
      continue
    kind = log.WhichOneof("log_type")
    found = _examples(log, kind)
    if not found:
      rejected.append((i, f"a PredictionLog ({kind or 'empty'}) holding no tf.Example"))
      continue
    examples += found
    origin += [i] * len(found)
  return examples, origin, rejected


def _examples(log, kind):
  if kind in _INPUT_LOGS:
    given = getattr(log, kind).request.input
    which = given.WhichOneof("kind")
    if which == "example_list":
      return [e.SerializeToString() for e in given.example_list.examples]
    if which == "example_list_with_context":
      listed = given.example_list_with_context
      context = listed.context.SerializeToString()
      return [context + e.SerializeToString() for e in listed.examples]
    return []
  if kind == "predict_log":
    inputs = log.predict_log.request.inputs
    strings = sorted(k for k, t in inputs.items() if t.dtype == _STRING)
    name = "examples" if "examples" in strings else (strings[0] if len(strings) == 1 else None)
    return list(inputs[name].string_val) if name else []
  return []


def responses_of(records, output=None):
  """(answers, versions, rejected): per tf.Example of examples_of(records), in the same order,
  the JSON text of the scores the log's response gave it (None where the log has no response)
  and the model version that answered (model_spec.version of the response, else of the
  request; None where neither says), and [(position, reason)] of the logs whose response does
  not answer each example. The three kinds
  (tensorflow_serving/apis): a classify log's ClassificationResult (classifications[i].classes:
  the scores in class order), a regress log's RegressionResult (regressions[i].value), a predict
  log's PredictResponse output tensor (`output`, else its only one; float_val or double_val,
  [examples] or [examples, scores]). A multi-inference log's results are not read (None)."""
  import json
  from tensorflow_serving.apis import prediction_log_pb2
  answers, versions, rejected = [], [], []
  log = prediction_log_pb2.PredictionLog()
  for i, record in enumerate(records):
    try:
      log.ParseFromString(record)
    except Exception:  # pylint: disable=broad-except  (examples_of rejects it, with its reason)
      continue
    kind = log.WhichOneof("log_type")
    found = _examples(log, kind)
    if not found:
      continue
    scores, why = _scores(log, kind, output)
    if scores is not None and len(scores) != len(found):
      scores, why = None, f"the response holds {len(scores)} results for {len(found)} examples"
    if why:
      rejected.append((i, why))
    answers += [None] * len(found) if scores is None else [json.dumps(s) for s in scores]
    versions += [_version(getattr(log, kind))] * len(found)
  return answers, versions, rejected


def _version(entry):
  """model_spec.version (as text) of a log entry's response, else of its request; None."""
  for message in (entry.response, entry.request):
    spec = getattr(message, "model_spec", None)
    if spec is not None and spec.HasField("version"):
      return str(spec.version.value)
  return None


def _scores(log, kind, output):
  """([scores per example] or None, reason or None) of a log's response."""
  if kind == "classify_log":
    result = log.classify_log.response.result
    if not result.classifications:
      return None, None
    return [[c.score for c in cl.classes] for cl in result.classifications], None
  if kind == "regress_log":
    result = log.regress_log.response.result
    if not result.regressions:
      return None, None
    return [[r.value] for r in result.regressions], None
  if kind == "predict_log":
    outputs = log.predict_log.response.outputs
    if not outputs:
      return None, None
    name = output if output is not None and output in outputs else (
        next(iter(outputs)) if len(outputs) == 1 else None)
    if name is None:
      return None, (f"the PredictResponse has outputs {', '.join(sorted(outputs))}: only a "
                    "response of one output is read")
    import numpy as np
    from tensorflow import make_ndarray  # the protos import TensorFlow already
    try:  # float_val / double_val / half_val or the packed tensor_content, as TF reads them
      values = make_ndarray(outputs[name])
    except (TypeError, ValueError) as e:
      return None, f"output {name!r} cannot be read ({e})"
    if values.dtype.kind not in "fiu" or values.ndim not in (1, 2):
      return None, f"output {name!r} is not [examples] or [examples, scores] numbers"
    values = values.astype(np.float64).reshape(len(values), -1)
    return values.tolist(), None
  return None, None
