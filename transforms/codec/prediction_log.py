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
__all__ = ["examples_of"]

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
