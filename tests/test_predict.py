"""The predict stage and decision flips, with a real model trained here (tests/taxi_model.py):
what the features job logs, what the diff reports, each checked against plain TensorFlow run on
both logs' features by the test itself (not by the code under test)."""
import json
import os

import numpy as np
import pyarrow.compute as pc
import pytest

from tests import taxi_model
from tests.conftest import features
from transforms.spec.errors import UsageError

pytestmark = pytest.mark.slow  # the end-to-end tier (pytest.ini)


def _diff(offline, production, out, *flags):
  from replay.diff import job as diff
  code = diff.run(["--offline", offline, "--production", production, "--output_dir", str(out)]
                  + list(flags))
  with open(os.path.join(str(out), "report.json")) as f:
    return code, json.load(f)


@pytest.fixture(scope="module")
def model(taxi_runs, taxi_features, tmp_path_factory):
  """The taxi offline run, a model trained on it (float32 and the same weights in float16), a
  threshold where the model is unsure, and the offline run with the predict stage."""
  import tensorflow as tf
  root = tmp_path_factory.mktemp("predict")
  ing, off = taxi_runs["direct"], taxi_features["direct"]
  weights = taxi_model.train(off)
  fn_dir = os.path.join(off, "transform_fn")
  m32 = taxi_model.save(weights, str(root / "m32"), fn_dir)
  m16 = taxi_model.save(weights, str(root / "m16"), fn_dir, dtype=tf.float16)
  threshold = taxi_model.threshold_near_median(off, m32)
  rule = f"threshold:{threshold!r}"
  # The predict stage's offline run transforms with the offline run's transform_fn (the one the
  # model was trained on), as serving does: analysing the same records again gives the same.
  offm = features(ing, root / "offm", "--transform_fn_dir", fn_dir, "--model_dir", m32,
                  "--decision", rule)
  return {"root": root, "ingest": ing, "offline": off, "m32": m32, "m16": m16,
          "threshold": threshold, "rule": rule, "offm": offm}


def test_the_log_holds_the_models_own_prediction_and_decision(model):
  t = taxi_model.log_table(model["offm"])
  want = taxi_model.predict(model["m32"], taxi_model.model_inputs(t))
  got = np.array(t.column("prediction").to_pylist())
  assert got.shape == (t.num_rows, 1)
  # float32 scores; TensorFlow's vectorised kernels may round a row 1 ulp apart by its place in
  # the batch (the job calls the model per log bucket, in key order; here, on all rows)
  assert np.all(np.abs(got[:, 0] - want) <= 2.0 ** -21 * np.abs(want))  # a few ulps
  assert np.array_equal(got[:, 0].astype(np.float32), got[:, 0])
  decided = np.array(t.column("decision").to_pylist())[:, 0]
  assert np.array_equal(decided, (got[:, 0] >= model["threshold"]).astype(np.int64))
  assert np.count_nonzero(decided != (want >= model["threshold"])) == 0
  assert 0 < decided.sum() < t.num_rows  # the threshold splits the records
  with open(os.path.join(model["offm"], "run_metadata.json")) as f:
    meta = json.load(f)
  assert meta["model"]["signature"] == "transformed"  # not serving_default over tf.Examples
  assert meta["model"]["output"] == "probability" and meta["model"]["decision"] == model["rule"]
  assert meta["model"]["digest"].startswith("sha256:") and meta["stages"][-1] == "predict"


def test_identical_sides_change_no_decision(model, tmp_path):
  code, r = _diff(model["offm"], model["offm"], tmp_path / "d")
  assert code == 0
  d = r["decisions"]
  assert d["compared"] == r["records"]["matched_keys"] > 0
  assert d["flips"] == 0 and d["max_abs_delta"] == 0.0


def test_the_same_weights_in_float16_part_at_predict_with_exactly_the_flips_tf_computes(
    model, tmp_path):
  prod = features(model["ingest"], tmp_path / "p16", "--transform_fn_dir",
                  os.path.join(model["offline"], "transform_fn"), "--model_dir", model["m16"],
                  "--decision", model["rule"])
  want = taxi_model.expected_decisions(model["offm"], prod, model["m32"], model["threshold"],
                                       prod_model_dir=model["m16"])
  code, r = _diff(model["offm"], prod, tmp_path / "d")
  d = r["decisions"]
  assert d["flips"] == want["flips"] > 0
  assert d["compared"] == want["compared"]
  assert d["max_abs_delta"] == pytest.approx(want["max_abs_delta"], rel=1e-3)
  assert d["max_abs_delta"] < 0.01  # noise-level deltas: the same weights, another precision
  # the model inputs are identical: every difference and flip is the model's (or noise)
  assert set(d["by_stage"]) <= {"predict", "none"}
  assert sum(e["flips"] for e in d["by_stage"].values()) == want["flips"]
  assert r["first_divergent_stage"]["predict"] == r["records"]["divergent"] > 0
  assert {c["field"] for c in r["suspected_causes"] if c["stage"] == "predict"} == {
      "model.digest"}
  assert code == 1


def test_a_vocabulary_analysed_otherwise_flips_decisions_the_diff_attributes_to_company_id(
    model, tmp_path):
  """The skew reaches the decision: production's company vocabulary keeps the 20 most frequent
  companies (tests/taxi_top_companies.py). Neither log ran a model: the diff's model predicts
  both and swaps each differing feature back alone."""
  prod = features(model["ingest"], tmp_path / "top", "--transform_module",
                  "tests.taxi_top_companies")
  want = taxi_model.expected_decisions(model["offline"], prod, model["m32"], model["threshold"])
  code, r = _diff(model["offline"], prod, tmp_path / "d", "--model_dir", model["m32"],
                  "--decision", model["rule"])
  d = r["decisions"]
  assert d["flips"] == want["flips"] > 0
  assert d["by_stage"]["analyze"]["flips"] == want["flips"]  # the stage the records part at
  a = d["attribution"]
  assert a["attributed"] == a["flips_with_differing_inputs"] == want["flips"]
  assert a["by_feature"] == want["by_feature"] and a["jointly_caused"] == want["jointly_caused"]
  assert set(a["by_feature"]) == {"company_id"}
  assert {m.get("predicted_by") for m in d["models"].values()} == {
      "the diff's --model_dir / --model_module"}
  # the cap: the first N flips by key hash, deterministic
  _, capped = _diff(model["offline"], prod, tmp_path / "d5", "--model_dir", model["m32"],
                    "--decision", model["rule"], "--attribution_records", "5")
  assert capped["decisions"]["attribution"]["attributed"] == 5
  assert sum(capped["decisions"]["attribution"]["by_feature"].values()) <= 5
  assert code == 1
  with open(os.path.join(str(tmp_path / "d"), "report.html"), encoding="utf-8") as f:
    page = f.read()
  assert page.index(f"{want['flips']} decisions change") < page.index("Divergence by first stage")
  assert "company_id alone explains" in page
  from replay import api  # the records as a notebook gets them
  frame = api.Report(r, page, "").records()
  flipped = frame[frame["class"] == "flipped"]
  assert len(flipped) == len(d["samples"]) > 0 and flipped["flipped"].all()
  assert (flipped["first_stage"] == "analyze").all()
  assert {"company_id_offline", "prediction_offline", "decision_production"} <= set(frame.columns)


def test_check_thresholds_on_decisions(model, tmp_path):
  from replay import check
  _, r = _diff(model["offline"], model["offline"], tmp_path / "d", "--model_dir", model["m32"],
               "--decision", model["rule"])
  th = {"divergent_fraction": 1.0, "stages": {}, "features": {}, "drift": {},
        "decision_flip_fraction": 0.0, "max_abs_prediction_delta": 0.0}
  assert check.evaluate(r, th) == []
  r["decisions"].update(flips=3, flip_fraction=0.5, max_abs_delta=0.25)
  broken = check.evaluate(r, th)
  assert len(broken) == 2 and "decision flips 3" in broken[0]
  del r["decisions"]
  with pytest.raises(UsageError, match="compare no decision"):
    check.evaluate(r, th)


@pytest.mark.parametrize("flags, message", [
    (["--model_dir", "{root}/nothing", "--decision", "argmax"], "not a SavedModel"),
    (["--model_dir", "{m32}"], "needs --decision"),
    (["--model_dir", "{m32}", "--decision", "maybe"], "is not one of"),
    (["--model_dir", "{m32}", "--decision", "argmax", "--model_signature", "serving_default"],
     "takes input 'examples', which the transformed features lack"),
    (["--model_dir", "{m32}", "--decision", "top_k:3"], "needs at least 3 scores"),
    (["--decision", "argmax"], "needs --model_dir or --model_module"),
])
def test_a_model_that_does_not_fit_is_one_line_before_anything_is_written(model, tmp_path,
                                                                            flags, message):
  from pipelines import features as features_job
  out = tmp_path / "out"
  argv = ["--input_dir", model["ingest"], "--output_dir", str(out), "--profile",
          os.path.join(os.path.dirname(os.path.dirname(__file__)), "profiles", "offline.yaml"),
          "--transform_module", "transforms.taxi"] + [
              f.format(root=model["root"], m32=model["m32"]) for f in flags]
  with pytest.raises(UsageError, match=message) as e:
    features_job.run(argv)
  assert "\n" not in str(e.value)
  assert not out.exists() or not os.listdir(out)


def test_a_module_hook_predicts_as_the_saved_model_does(model, tmp_path):
  """--model_module: predict(features) -> scores, here the same weights in numpy."""
  import tensorflow as tf
  loaded = tf.saved_model.load(model["m32"])
  weights = {k: v.numpy() for k, v in loaded.w.items()}
  hook = tmp_path / "hook.py"
  np.save(tmp_path / "w.npy", weights, allow_pickle=True)
  hook.write_text(
      "import numpy as np\n"
      f"W = np.load({str(tmp_path / 'w.npy')!r}, allow_pickle=True).item()\n"
      f"FLOATS = {taxi_model.FLOATS!r}\nIDS = {taxi_model.IDS!r}\n"
      "def predict(features):\n"
      "  dense = np.stack([features[n] for n in FLOATS], axis=1).astype(np.float64)\n"
      "  logit = dense @ W['dense'].astype(np.float64) + float(W['bias'][0])\n"
      "  for n, size in IDS.items():\n"
      "    logit = logit + W[n].astype(np.float64)[np.clip(features[n], 0, size - 1)]\n"
      "  return 1.0 / (1.0 + np.exp(-logit))\n")
  off = features(model["ingest"], tmp_path / "hooked", "--transform_fn_dir",
                 os.path.join(model["offline"], "transform_fn"), "--model_module", str(hook),
                 "--decision", model["rule"])
  t = taxi_model.log_table(off)
  got = np.array(t.column("prediction").to_pylist())[:, 0]
  want = taxi_model.predict(model["m32"], taxi_model.model_inputs(t))
  assert np.allclose(got, want, atol=1e-5)  # float64 numpy vs float32 TF
  with open(os.path.join(off, "run_metadata.json")) as f:
    assert json.load(f)["model"]["kind"] == "module"
  assert pc.sum(pc.list_value_length(t.column("decision"))).as_py() == t.num_rows


def _served_log(model, path, answer):
  """The taxi records as JSON Lines, each with what serving answered (`answer(key, scores, i)`
  -> (JSON value, deployed model id)): the offline run's own records, so keys and inputs match."""
  import glob
  import pyarrow as pa
  import pyarrow.parquet as pq
  shards = pa.concat_tables([pq.read_table(p) for p in sorted(glob.glob(
      os.path.join(model["ingest"], "parquet", "*.parquet")))])
  log = taxi_model.log_table(model["offm"])
  scores = dict(zip(log.column("key").to_pylist(), log.column("prediction").to_pylist()))
  columns = [c for c in shards.schema.names if not c.startswith("__")]
  with open(path, "w", encoding="utf-8") as f:
    for i, row in enumerate(shards.to_pylist()):
      value, deployed = answer(row["__key__"], scores[row["__key__"]], i)
      f.write(json.dumps({**{c: row[c] for c in columns}, "pred": value,
                          "deployed_model_id": deployed}) + "\n")
  return str(path)


def _served_run(model, tmp_path, name, answer, *flags):
  from tests.conftest import ingest
  data = ingest(tmp_path / f"{name}_ingest", "--served_prediction", "pred", "--envelope",
                "deployed_model_id=deployed_model_id", "--schema_from", model["ingest"],
                "--num_shards", "4", inputs=_served_log(model, tmp_path / f"{name}.jsonl", answer))
  return features(data, tmp_path / name, "--transform_fn_dir",
                  os.path.join(model["offline"], "transform_fn"), *flags)


@pytest.fixture(scope="module")
def served_own(model, tmp_path_factory):
  """A JSON Lines serving log with the response beside each request, the model's own answers
  from deployed model m-1: a bare score on even lines, a list of scores on odd ones; replayed
  with the offline transform_fn and --decision alone (no model of the run's own)."""
  return _served_run(model, tmp_path_factory.mktemp("served"), "own",
                     lambda key, s, i: (s if i % 2 else s[0], "m-1"), "--decision", model["rule"])


def test_served_answers_that_are_the_models_own_change_no_decision(model, served_own, tmp_path):
  prod = served_own
  with open(os.path.join(prod, "run_metadata.json")) as f:
    meta = json.load(f)["model"]
  assert (meta["kind"], meta["served"], meta["deployed_model_id"]) == ("served", "pred", "m-1")
  code, r = _diff(model["offm"], prod, tmp_path / "d")
  assert r["decisions"]["compared"] == r["records"]["matched_keys"] > 0
  assert r["decisions"]["flips"] == 0 and r["decisions"]["max_abs_delta"] == 0.0
  assert r["records"]["identical"] == r["records"]["matched_keys"] and code == 0


def test_another_model_version_answering_some_requests_parts_at_predict(model, served_own,
                                                                        tmp_path):
  """One request in 20 answered by model m-2, whose score is 1 - p: the inputs are identical,
  the prediction is not; the cause names the deployed model ids. Both sides log it."""
  other = lambda key, s, i: ([1.0 - s[0]], "m-2") if i % 20 == 0 else (s, "m-1")  # noqa: E731
  base = served_own
  prod = _served_run(model, tmp_path, "two", other, "--decision", model["rule"])
  o, p = taxi_model.matched(base, prod)
  po = np.array(o.column("prediction").to_pylist())[:, 0]
  pp = np.array(p.column("prediction").to_pylist())[:, 0]
  flips = int(np.count_nonzero((po >= model["threshold"]) != (pp >= model["threshold"])))
  differs = int(np.count_nonzero(po != pp))
  code, r = _diff(base, prod, tmp_path / "d")
  assert r["first_divergent_stage"]["predict"] == differs == 15002 // 20 + 1
  assert r["decisions"]["flips"] == flips > 0
  assert r["decisions"]["by_stage"]["predict"]["flips"] == flips
  causes = {c["field"]: c for c in r["suspected_causes"] if c["stage"] == "predict"}
  assert causes["model.deployed_model_id"]["offline"] == "m-1"
  assert causes["model.deployed_model_id"]["production"] == "m-1,m-2"
  assert code == 1


@pytest.mark.parametrize("answer, message", [
    (lambda key, s, i: ("yes" if i == 7 else s[0], "m-1"), "not numbers"),
    (lambda key, s, i: ([s[0], 0.5] if i == 7 else s, "m-1"), "every record needs the same"),
])
def test_a_served_answer_that_cannot_be_read_is_one_line(model, tmp_path, answer, message):
  with pytest.raises(UsageError, match="served prediction column 'pred': .*" + message) as e:
    _served_run(model, tmp_path, "bad", answer, "--decision", model["rule"])
  assert "\n" not in str(e.value) and not (tmp_path / "bad").exists()


def test_the_logger_given_the_model_logs_the_decisions_the_job_logs(model, tmp_path):
  """The production logger with the offline model: the same records, the same decisions."""
  import pyarrow.csv as pacsv
  from replay.logger import ProductionLogger
  from tests.conftest import TAXI_CSV
  from tests.online_store import AGG, records_and_counts
  table = pacsv.read_csv(TAXI_CSV, convert_options=pacsv.ConvertOptions(strings_can_be_null=True))
  _, counts = records_and_counts(TAXI_CSV, model["offline"])
  with ProductionLogger.from_features_dir(model["offline"], str(tmp_path / "log"),
                                          model_dir=model["m32"], decision=model["rule"]) as log:
    log.log_table(table, {AGG: [c[AGG] for c in counts]})
  code, r = _diff(model["offm"], str(tmp_path / "log"), tmp_path / "d")
  assert r["decisions"]["compared"] == r["records"]["matched_keys"] == 15002
  assert r["decisions"]["flips"] == 0 and r["records"]["divergent"] == 0 and code == 0
  assert r["decisions"]["max_abs_delta"] <= 1e-6
  with pytest.raises(UsageError, match="needs --decision"):
    ProductionLogger.from_features_dir(model["offline"], str(tmp_path / "log2"),
                                       model_dir=model["m32"])


def _taxi_rows(model):
  """(the offline run's records as the ingest shards hold them, {key: the model's scores})."""
  import glob
  import pyarrow as pa
  import pyarrow.parquet as pq
  shards = pa.concat_tables([pq.read_table(p) for p in sorted(glob.glob(
      os.path.join(model["ingest"], "parquet", "*.parquet")))])
  log = taxi_model.log_table(model["offm"])
  scores = dict(zip(log.column("key").to_pylist(), log.column("prediction").to_pylist()))
  columns = [c for c in shards.schema.names if not c.startswith("__")]
  return [({c: r[c] for c in columns}, scores[r["__key__"]]) for r in shards.to_pylist()], columns


def _csv_cell(v):
  return "" if v is None else repr(v) if isinstance(v, float) else str(v)


def _preset_diff(model, tmp_path, name, lines, preset):
  from tests.conftest import ingest
  path = tmp_path / f"{name}.jsonl"
  path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
  data = ingest(tmp_path / f"{name}_ingest", "--preset", preset, "--served_prediction", "pred",
                "--schema_from", model["ingest"], "--num_shards", "4", inputs=str(path))
  prod = features(data, tmp_path / name, "--transform_fn_dir",
                  os.path.join(model["offline"], "transform_fn"), "--decision", model["rule"])
  return _diff(model["offm"], prod, tmp_path / f"d_{name}")


def test_vertex_responses_that_are_the_models_own_change_no_decision(model, tmp_path):
  """Vertex AI request-response logging exported as JSON Lines (BigQuery table columns
  request_payload and response_payload, repeated STRING): two instances per request, the i-th
  response answering the i-th instance, a bare score or an object as the model wrote it."""
  rows, _ = _taxi_rows(model)
  lines = []
  for i in range(0, len(rows), 2):
    pair = rows[i:i + 2]
    lines.append({"endpoint": "e", "deployed_model_id": "m-1", "request_id": str(i),
                  "logging_time": "2024-05-01T00:00:00Z",
                  "request_payload": [json.dumps(r) for r, _ in pair],
                  "response_payload": [json.dumps(s[0] if k else {"probability": s})
                                       for k, (_, s) in enumerate(pair)]})
  code, r = _preset_diff(model, tmp_path, "vertex", lines, "vertex")
  d = r["decisions"]
  assert d["compared"] == r["records"]["matched_keys"] == len(rows)
  assert d["flips"] == 0 and d["max_abs_delta"] == 0.0 and code == 0


def test_data_capture_responses_in_json_csv_and_base64_change_no_decision(model, tmp_path):
  """SageMaker Data Capture lines (captureData.endpointInput / endpointOutput): JSON bodies of
  two instances answered by {"predictions": [...]}, CSV payloads answered by CSV lines, and
  BASE64 JSON captures, one after the other."""
  import base64
  rows, columns = _taxi_rows(model)

  def capture(data_in, data_out, encoding, content_type):
    side = lambda mode, data: {"observedContentType": content_type, "mode": mode,  # noqa: E731
                               "data": data, "encoding": encoding}
    return {"captureData": {"endpointInput": side("INPUT", data_in),
                            "endpointOutput": side("OUTPUT", data_out)},
            "eventMetadata": {"eventId": "e", "inferenceTime": "2024-05-01T00:00:00Z"},
            "eventVersion": "0"}
  lines, i = [], 0
  while i < len(rows):
    kind = (i // 2) % 3
    pair = rows[i:i + 2]
    if kind == 0:
      lines.append(capture(json.dumps({"instances": [r for r, _ in pair]}),
                           json.dumps({"predictions": [s for _, s in pair]}), "JSON",
                           "application/json"))
    elif kind == 1:
      text = "\n".join(",".join(_csv_cell(r[c]) for c in columns) for r, _ in pair)
      lines.append(capture(text, "\n".join(repr(s[0]) for _, s in pair), "CSV", "text/csv"))
    else:
      lines += [capture(base64.b64encode(json.dumps(r).encode()).decode(),
                        base64.b64encode(json.dumps(s).encode()).decode(), "BASE64",
                        "application/json") for r, s in pair]
    i += 2
  code, r = _preset_diff(model, tmp_path, "capture", lines, "sagemaker")
  d = r["decisions"]
  assert d["compared"] == r["records"]["matched_keys"] == len(rows)
  assert d["flips"] == 0 and d["max_abs_delta"] == 0.0 and code == 0


def test_prediction_log_responses_of_the_three_kinds_are_each_examples_answer(tmp_path):
  """TF Serving PredictionLogs (tensorflow_serving/apis/prediction_log.proto): a classify log's
  class scores, a regress log's value, a predict log's output tensor, each example its own; a
  response answering another number of examples is a dead letter with its reason."""
  import pyarrow.parquet as pq
  import tensorflow as tf
  from tensorflow_serving.apis import prediction_log_pb2
  from tests.conftest import ingest

  def example(i):
    return tf.train.Example(features=tf.train.Features(feature={
        "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))}))
  logs = []
  log = prediction_log_pb2.PredictionLog()
  log.classify_log.request.input.example_list.examples.extend([example(1), example(2)])
  for scores in ([0.25, 0.75], [0.5, 0.5]):
    c = log.classify_log.response.result.classifications.add()
    for j, v in enumerate(scores):
      c.classes.add(label=str(j), score=v)
  logs.append(log.SerializeToString())
  log = prediction_log_pb2.PredictionLog()
  log.regress_log.request.input.example_list.examples.extend([example(3)])
  log.regress_log.request.model_spec.version.value = 7  # the model version that answered
  log.regress_log.response.result.regressions.add(value=0.125)
  logs.append(log.SerializeToString())
  log = prediction_log_pb2.PredictionLog()
  log.predict_log.request.inputs["examples"].CopyFrom(tf.make_tensor_proto(
      [example(4).SerializeToString(), example(5).SerializeToString()]))
  log.predict_log.response.outputs["probability"].CopyFrom(
      tf.make_tensor_proto([[0.375], [0.625]], dtype=tf.float32))
  logs.append(log.SerializeToString())
  path = str(tmp_path / "logs.tfrecord")
  with tf.io.TFRecordWriter(path) as w:
    for record in logs:
      w.write(record)
  out = ingest(tmp_path / "ingest", "--preset", "tf_serving", "--key_columns", "id",
               "--served_prediction", "pred", inputs=path)
  import glob
  got = pq.read_table(glob.glob(os.path.join(out, "parquet", "*.parquet"))[0]).to_pylist()
  assert {r["id"]: json.loads(r["pred"]) for r in got} == {
      1: [0.25, 0.75], 2: [0.5, 0.5], 3: [0.125], 4: [0.375], 5: [0.625]}
  assert {r["id"]: r["model_version"] for r in got} == {1: None, 2: None, 3: 7, 4: None,
                                                         5: None}
  with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:  # context, no record
    assert json.load(f)["side_columns"]["context"] == {"model_version": "model_spec.version"}
  log = prediction_log_pb2.PredictionLog()  # two examples, one regression: an input error
  log.regress_log.request.input.example_list.examples.extend([example(6), example(7)])
  log.regress_log.response.result.regressions.add(value=0.5)
  with tf.io.TFRecordWriter(path) as w:
    for record in logs + [log.SerializeToString()]:
      w.write(record)
  from pipelines import ingest as job
  with pytest.raises(UsageError) as e:
    job.run(["--input", path, "--output_dir", str(tmp_path / "miscounted"), "--preset",
             "tf_serving", "--key_columns", "id", "--served_prediction", "pred"])
  assert str(e.value) == f"{path}: record 4: the response holds 1 results for 2 examples"
  assert not (tmp_path / "miscounted").exists()


def _example(record):
  """A tf.train.Example of a record as ingest shards hold it: int -> int64_list, float ->
  float_list, text -> bytes_list, null -> no feature."""
  import tensorflow as tf
  feature = {}
  for name, v in record.items():
    if isinstance(v, bool) or v is None:
      continue
    if isinstance(v, int):
      feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
    elif isinstance(v, float):
      feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
    else:
      feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))
  return tf.train.Example(features=tf.train.Features(feature=feature))


def test_prediction_log_responses_that_are_the_models_own_change_no_decision(model, tmp_path,
                                                                             capsys):
  """TF Serving request logs whose responses are the model's own answers diff to no flip
  against the offline run of the same tf.Examples: predict (an output tensor), classify (a
  class score) and regress (a value) logs in turn, each request of two examples. The offline
  side is a TFRecord of the examples (float_list: float32 on both sides), run with the model."""
  import glob
  import pyarrow as pa
  import pyarrow.parquet as pq
  import tensorflow as tf
  from tensorflow_serving.apis import prediction_log_pb2
  from tests.conftest import ingest
  rows, _ = _taxi_rows(model)
  examples = [_example(r) for r, _ in rows[:3000]]
  plain = str(tmp_path / "examples.tfrecord")
  with tf.io.TFRecordWriter(plain) as w:
    for e in examples:
      w.write(e.SerializeToString())
  fn_dir = os.path.join(model["offline"], "transform_fn")
  data = ingest(tmp_path / "off_ingest", "--schema_from", model["ingest"], "--num_shards", "2",
                inputs=plain)
  off = features(data, tmp_path / "off", "--transform_fn_dir", fn_dir, "--model_dir",
                 model["m32"], "--decision", model["rule"])
  assert f"transform {len(examples)}, predict {len(examples)}\n" in capsys.readouterr().out
  # each example's answer: the offline log's prediction of the record with its content key
  shards = pa.concat_tables([pq.read_table(p) for p in sorted(glob.glob(
      os.path.join(data, "parquet", "*.parquet")))])
  log = taxi_model.log_table(off)
  score = dict(zip(log.column("key").to_pylist(), log.column("prediction").to_pylist()))
  columns = [c for c in shards.schema.names if not c.startswith("__")]
  answered = [(_example({c: r[c] for c in columns}), score[r["__key__"]][0])
              for r in shards.to_pylist()]
  logs = []
  for i in range(0, len(answered), 2):
    pair, log = answered[i:i + 2], prediction_log_pb2.PredictionLog()
    kind = (i // 2) % 3
    if kind == 0:
      log.predict_log.request.inputs["examples"].CopyFrom(tf.make_tensor_proto(
          [e.SerializeToString() for e, _ in pair]))
      log.predict_log.response.outputs["probability"].CopyFrom(
          tf.make_tensor_proto([[p] for _, p in pair], dtype=tf.float32))
    elif kind == 1:
      log.classify_log.request.input.example_list.examples.extend([e for e, _ in pair])
      for _, p in pair:
        log.classify_log.response.result.classifications.add().classes.add(label="1", score=p)
    else:
      log.regress_log.request.input.example_list.examples.extend([e for e, _ in pair])
      for _, p in pair:
        log.regress_log.response.result.regressions.add(value=p)
    logs.append(log.SerializeToString())
  path = str(tmp_path / "requests.tfrecord")
  with tf.io.TFRecordWriter(path) as w:
    for record in logs:
      w.write(record)
  served = ingest(tmp_path / "prod_ingest", "--preset", "tf_serving", "--served_prediction",
                  "pred", "--schema_from", data, "--num_shards", "2", inputs=path)
  prod = features(served, tmp_path / "prod", "--transform_fn_dir", fn_dir, "--decision",
                  model["rule"])
  code, r = _diff(off, prod, tmp_path / "d")
  d = r["decisions"]
  assert r["records"]["matched_keys"] == len(examples) and r["records"]["divergent"] == 0
  assert d["compared"] == len(examples)
  assert d["flips"] == 0 and d["max_abs_delta"] == 0.0 and code == 0
  assert r["decisions"]["models"]["offline"]["digest"].startswith("sha256:")


def test_a_keras_export_given_to_the_diff_predicts_the_side_that_logs_none(model, tmp_path):
  """A Keras model exported for serving (model.export: signatures serve and serving_default,
  output output_0) given to the diff: it predicts the offline side, which ran no model; the
  production side logs the float32 model's answers. The flips are those plain TF gives."""
  import keras
  import tensorflow as tf
  keras.utils.set_random_seed(3)
  inputs = {n: keras.Input(shape=(), name=n, dtype="float32" if n in taxi_model.FLOATS
                           else "int64") for n in taxi_model.INPUTS}
  dense = keras.layers.Concatenate()([keras.layers.Reshape((1,))(inputs[n])
                                      for n in taxi_model.FLOATS])
  score = keras.layers.Dense(1, activation="sigmoid")(keras.layers.Dense(8, "relu")(dense))
  export = str(tmp_path / "keras")
  keras.Model(inputs, score).export(export, verbose=False)
  o, p = taxi_model.matched(model["offline"], model["offm"])
  fn = tf.saved_model.load(export).signatures["serving_default"]
  xo = taxi_model.model_inputs(o)
  keras_scores = fn(**{n: tf.constant(xo[n]) for n in taxi_model.INPUTS})["output_0"].numpy()
  logged = np.array(p.column("prediction").to_pylist())[:, 0]
  want = int(np.count_nonzero((keras_scores[:, 0] >= model["threshold"]) !=
                              (logged >= model["threshold"])))
  _, r = _diff(model["offline"], model["offm"], tmp_path / "d", "--model_dir", export,
               "--decision", model["rule"])
  d = r["decisions"]
  assert d["models"]["offline"]["predicted_by"] and d["models"]["production"]["kind"] == \
      "saved_model"
  assert d["compared"] == 15002 and d["flips"] == want > 0
  assert r["first_divergent_stage"]["predict"] > 0  # the same inputs, another model
