"""The test of truth for serving-log inputs: the taxi sample as CSV offline, and the same records
as JSON Lines (plain, SageMaker Data Capture with JSON and CSV payloads, Vertex AI's BigQuery
export) and Parquet in production, give the same raw and parse fingerprints, the same content
digest, and a diff with 0 divergent records, every bucket skipped; a 10% key sample of them
counts the rest as not_served and exits 0."""
import base64
import csv
import glob
import io
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import verify
from tests.conftest import TAXI_CSV, TAXI_SCHEMA, features, ingest
from transforms.spec import schema as schema_spec

CHUNK = 3  # records per request line


def _taxi():
  """(column names in schema order, typed records as dicts, the CSV rows as text lists)."""
  with open(TAXI_SCHEMA, encoding="utf-8") as f:
    types = schema_spec.load_tfmd(f.read())
  with open(TAXI_CSV, newline="", encoding="utf-8") as f:
    rows = list(csv.DictReader(f))
  cast = {schema_spec.INT: int, schema_spec.FLOAT: float, schema_spec.BYTES: str}
  records = [{n: (cast[types[n]](r[n]) if r[n] != "" else None) for n in types} for r in rows]
  texts = [[r[n] for n in types] for r in rows]
  return list(types), records, texts


def _csv_line(cells):
  out = io.StringIO()
  csv.writer(out, lineterminator="").writerow(cells)
  return out.getvalue()


def _capture(data, encoding, content_type, i):
  return {"captureData": {"endpointInput": {"observedContentType": content_type,
                                            "mode": "INPUT", "data": data,
                                            "encoding": encoding},
                          "endpointOutput": {"observedContentType": "application/json",
                                             "mode": "OUTPUT", "data": "[0.5]",
                                             "encoding": "JSON"}},
          "eventMetadata": {"eventId": f"e-{i}", "inferenceTime": "2024-05-01T10:00:00Z"},
          "eventVersion": "0"}


def _write_lines(path, lines):
  with open(path, "w", encoding="utf-8") as f:
    for line in lines:
      f.write(json.dumps(line) + "\n")


def _shapes(root):
  """{name: (input path, extra ingest flags)} of the same records in each production shape."""
  names, records, texts = _taxi()
  os.makedirs(root, exist_ok=True)
  out = {}
  path = os.path.join(root, "plain.jsonl")
  _write_lines(path, records)
  out["jsonl"] = (path, [])
  chunks = [range(i, min(i + CHUNK, len(records))) for i in range(0, len(records), CHUNK)]
  path = os.path.join(root, "capture_json.jsonl")
  _write_lines(path, [_capture(json.dumps({"instances": [records[j] for j in c]}), "JSON",
                               "application/json", c[0]) for c in chunks])
  out["sagemaker_json"] = (path, ["--preset", "sagemaker"])
  path = os.path.join(root, "capture_csv.jsonl")
  _write_lines(path, [_capture("\n".join(_csv_line(texts[j]) for j in c), "CSV", "text/csv",
                               c[0]) for c in chunks])
  out["sagemaker_csv"] = (path, ["--preset", "sagemaker"])
  path = os.path.join(root, "capture_b64.jsonl")
  _write_lines(path, [_capture(base64.b64encode(json.dumps(
      {"instances": [records[j] for j in c]}).encode()).decode(), "BASE64", "application/json",
      c[0]) for c in chunks])
  out["sagemaker_base64"] = (path, ["--preset", "sagemaker"])
  path = os.path.join(root, "vertex.jsonl")
  _write_lines(path, [{"endpoint": "projects/p/locations/l/endpoints/1",
                       "deployed_model_id": "7", "logging_time": "2024-05-01 10:00:00 UTC",
                       "request_id": c[0],
                       "request_payload": [json.dumps(records[j]) for j in c],
                       "response_payload": ["[0.5]"]} for c in chunks])
  out["vertex"] = (path, ["--preset", "vertex"])
  path = os.path.join(root, "features.parquet")
  table = pa.table({n: [r[n] for r in records] for n in names})
  pq.write_table(table, path)
  out["parquet"] = (path, [])
  return out


def _fingerprints(dataset_dir):
  table = pa.concat_tables([pq.read_table(p) for p in sorted(
      glob.glob(os.path.join(dataset_dir, "parquet", "*.parquet")))])
  return {c: sorted(table.column(c).to_numpy().view(np.uint64).tolist())
          for c in ("__raw_fp__", "__parse_fp__")}


def _manifest(dataset_dir):
  with open(os.path.join(dataset_dir, "manifest.json"), encoding="utf-8") as f:
    return json.load(f)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
  return _shapes(str(tmp_path_factory.mktemp("shapes")))


@pytest.mark.parametrize("shape", ["jsonl", "sagemaker_json", "sagemaker_csv",
                                   "sagemaker_base64", "vertex", "parquet"])
def test_every_shape_ingests_to_the_csv_datasets_fingerprints(shape, shapes, taxi_runs,
                                                              tmp_path):
  path, flags = shapes[shape]
  out = ingest(tmp_path / "d", "--num_shards", "4", "--schema", TAXI_SCHEMA, *flags,
               inputs=path)
  assert verify.verify(out) == []
  want, got = _manifest(taxi_runs["direct"]), _manifest(out)
  assert got["rows"] == want["rows"]
  assert got["content_digest"] == want["content_digest"]
  assert _fingerprints(out) == _fingerprints(taxi_runs["direct"])
  assert got["options"]["input_format"] == ("parquet" if shape == "parquet" else "jsonl")


@pytest.mark.slow
def test_jsonl_production_diffs_clean_and_a_key_sample_is_not_served(shapes, taxi_features,
                                                                     tmp_path):
  from replay.diff import job as diff
  path, _ = shapes["jsonl"]
  data = ingest(tmp_path / "d", "--num_shards", "4", "--schema", TAXI_SCHEMA, inputs=path)
  prod = features(data, tmp_path / "f")
  code = diff.run(["--offline", taxi_features["direct"], "--production", prod,
                   "--output_dir", str(tmp_path / "diff")])
  with open(tmp_path / "diff" / "report.json", encoding="utf-8") as f:
    report = json.load(f)
  assert code == 0
  assert report["records"]["divergent"] == 0
  assert report["buckets"]["skipped_equal"] == report["buckets"]["total"]
  assert report["scope"] == "all" and report["records"]["not_served"] == 0


@pytest.mark.parametrize("shape,preset", [("vertex", "vertex"),
                                          ("sagemaker_json", "sagemaker")])
def test_a_request_log_read_without_its_preset_is_named(shapes, tmp_path, shape, preset):
  """A Vertex or Data Capture log ingested without --preset: one line listing the columns
  found and naming the preset their shape is; nothing written."""
  from pipelines import common
  from pipelines import ingest as job
  path, _ = shapes[shape]
  with open(path, encoding="utf-8") as f:
    found = sorted(json.loads(f.readline()))  # the first line's top-level fields
  with pytest.raises(common.UsageError) as e:
    job.run(["--input", path, "--output_dir", str(tmp_path / "out"), "--key_columns",
             "trip_id"])
  message = str(e.value)
  assert "\n" not in message and "--key_columns not in the input's columns: trip_id" in message
  assert all(name in message for name in found)
  assert message.endswith(f"request log: pass --preset {preset}")
  assert not os.path.exists(tmp_path / "out")


def test_envelope_columns_are_context_kept_and_never_transformed(shapes, taxi_runs,
                                                                  taxi_features, tmp_path):
  """docs/formats.md's Vertex example, --envelope request_id=request_id,logged=logging_time:
  the envelope columns are kept in the dataset as context, outside the record's fingerprints,
  and the log replays with the offline run's transform_fn: 0 divergent."""
  from replay.diff import job as diff
  path, flags = shapes["vertex"]
  data = ingest(tmp_path / "d", "--num_shards", "4", "--schema", TAXI_SCHEMA, *flags,
                "--envelope", "request_id=request_id,logged=logging_time", inputs=path)
  manifest = _manifest(data)
  assert manifest["side_columns"]["context"] == {"logged": "logging_time",
                                                 "request_id": "request_id"}
  assert {"logged", "request_id"} <= set(pq.read_schema(glob.glob(os.path.join(
      data, "parquet", "*.parquet"))[0]).names)
  assert manifest["content_digest"] == _manifest(taxi_runs["direct"])["content_digest"]
  prod = features(data, tmp_path / "f", "--transform_fn_dir",
                  os.path.join(taxi_features["direct"], "transform_fn"))
  code = diff.run(["--offline", taxi_features["direct"], "--production", prod,
                   "--output_dir", str(tmp_path / "diff")])
  with open(tmp_path / "diff" / "report.json", encoding="utf-8") as f:
    report = json.load(f)
  assert code == 0 and report["records"]["divergent"] == 0 == report["records"]["latent"]


@pytest.mark.slow
def test_a_sample_whose_column_holds_no_value_takes_the_offline_types(taxi_runs, taxi_features,
                                                                       tmp_path):
  """A sampled JSON Lines log in which pickup_census_tract is null in every record: inferred,
  the column cannot be typed INT. Replayed with the offline transform_fn it takes the type the
  transform_fn expects (it holds no value a type could misread), as --schema_from the offline
  dataset (or its features run) types it; a column holding a value of another type is still
  refused. Either way the log replays, every record equal to offline's up to the window stage
  (whose counts the sample takes over itself: the coverage cause, tests above)."""
  from pipelines import common
  from replay.diff import job as diff
  _, records, _ = _taxi()
  sample = [r for r in records if r["pickup_census_tract"] is None][::3]
  assert sample
  path = tmp_path / "sample.jsonl"
  _write_lines(path, sample)
  fn = os.path.join(taxi_features["direct"], "transform_fn")
  inferred = ingest(tmp_path / "inferred", "--num_shards", "1", "--sampling_rate", "0.05",
                    inputs=str(path))
  typed = {c["name"]: c["type"] for c in _manifest(inferred)["schema"]["columns"]}
  assert typed["pickup_census_tract"] != "INT"
  auto = features(inferred, tmp_path / "f_inferred", "--transform_fn_dir", fn)
  with open(os.path.join(auto, "run_metadata.json"), encoding="utf-8") as f:
    assert {c["name"]: c["type"] for c in json.load(f)["schema"]["columns"]}[
        "pickup_census_tract"] == "INT"
  wrong = tmp_path / "wrong.jsonl"
  _write_lines(wrong, sample + [dict(sample[0], pickup_census_tract="tract 7")])
  with pytest.raises(common.UsageError, match="pickup_census_tract is int64 there, string here"):
    features(ingest(tmp_path / "wrong", "--num_shards", "1", inputs=str(wrong)),
             tmp_path / "f_wrong", "--transform_fn_dir", fn)
  offline_types = {c["name"]: c["type"] for c in _manifest(taxi_runs["direct"])["schema"][
      "columns"]}
  for origin in (taxi_runs["direct"], taxi_features["direct"]):
    data = ingest(tmp_path / f"typed_{len(os.path.basename(origin))}", "--num_shards", "1",
                  "--sampling_rate", "0.05", "--schema_from", origin, inputs=str(path))
    schema = _manifest(data)["schema"]
    assert {c["name"]: c["type"] for c in schema["columns"]} == offline_types
    assert schema["from"] == origin and schema["source"] == "file"
  prod = features(data, tmp_path / "f", "--transform_fn_dir", fn)
  code = diff.run(["--offline", taxi_features["direct"], "--production", prod,
                   "--output_dir", str(tmp_path / "diff")])
  with open(tmp_path / "diff" / "report.json", encoding="utf-8") as f:
    report = json.load(f)
  assert report["scope"] == "production"
  assert report["records"]["matched_keys"] == len(sample)
  for stage in ("raw", "parse"):
    assert report["stages"][stage] == {"match": len(sample), "mismatch": 0}
  parted = {s: n for s, n in report["first_divergent_stage"].items() if n}
  assert set(parted) <= {"window"} and code == (1 if parted else 0)
  assert [c["records"] for c in report["suspected_causes"] if c["field"] == "coverage"] == \
      ([parted["window"]] if parted else [0])
  diff.run(["--offline", taxi_features["direct"], "--production", auto, "--output_dir",
            str(tmp_path / "diff_auto")])
  with open(tmp_path / "diff_auto" / "report.json", encoding="utf-8") as f:
    retyped = json.load(f)
  assert retyped["records"] == report["records"]
  assert retyped["first_divergent_stage"] == report["first_divergent_stage"]


def test_a_partial_production_side_counts_unseen_offline_keys_as_not_served():
  from replay.diff import compare
  from transforms.spec.feature_log import DROPPED_STAGE, KEY

  def side(keys):
    return pa.table({KEY: pa.array(keys, pa.string()),
                     DROPPED_STAGE: pa.nulls(len(keys), pa.string())})
  offline = side([f"k{i}" for i in range(100)])
  production = side([f"k{i}" for i in range(0, 100, 10)])  # a 10% sample of the keys
  unseen = sum(1 for i in range(100) if i % 10)  # computed from the data, not the code
  part = compare.compare_bucket(offline, production,
                                compare.Context(partial_production=True))
  assert part.records["not_served"] == unseen
  assert part.records["offline_only"] == 0
  assert part.records["matched_keys"] == 100 - unseen
  part = compare.compare_bucket(offline, production, compare.Context())
  assert part.records["not_served"] == 0 and part.records["offline_only"] == unseen


@pytest.mark.slow
def test_ingest_records_partial_coverage(shapes, taxi_features, tmp_path):
  """A 10% sample of the serving log, ingested with its sampling rate and without the online
  store's aggregates: its windows are counted over the sample, so the records whose window
  count moved part at window; the diff names the coverage as the cause there, for exactly
  those records, and says what to log (not "not explained by configuration")."""
  from replay.diff import job as diff
  path, _ = shapes["jsonl"]
  with open(path, encoding="utf-8") as f:
    lines = f.readlines()
  sample = tmp_path / "sample.jsonl"
  sample.write_text("".join(lines[::10]), encoding="utf-8")
  data = ingest(tmp_path / "ds", "--num_shards", "2", "--schema", TAXI_SCHEMA,
                "--sampling_rate", "0.1", inputs=str(sample))
  manifest = _manifest(data)
  assert manifest["coverage"] == {"kind": "partial", "sampling_rate": 0.1}
  assert manifest["rows"]["read"] == len(lines[::10])
  prod = features(data, tmp_path / "f", "--transform_fn_dir",  # serving's: not analysed
                  os.path.join(taxi_features["direct"], "transform_fn"))
  off, pro = _feature_log(taxi_features["direct"]), _feature_log(prod)
  joined = off.join(pro, "key", right_suffix=".p")
  at_window = int(np.count_nonzero(
      (joined.column("fp_window").to_numpy() != joined.column("fp_window.p").to_numpy()) &
      (joined.column("fp_raw").to_numpy() == joined.column("fp_raw.p").to_numpy())))
  assert 0 < at_window
  diff.run(["--offline", taxi_features["direct"], "--production", prod,
            "--output_dir", str(tmp_path / "diff")])
  with open(tmp_path / "diff" / "report.json", encoding="utf-8") as f:
    report = json.load(f)
  assert report["first_divergent_stage"]["window"] == at_window
  cause = [c for c in report["suspected_causes"] if c["field"] == "coverage"]
  assert len(cause) == 1 and cause[0]["stage"] == "window"
  assert cause[0]["records"] == at_window
  assert cause[0]["production"] == {"kind": "partial", "sampling_rate": 0.1}
  assert "--logged_aggregates" in cause[0]["note"] and "sampling rate 0.1" in cause[0]["note"]
  assert not [u for u in report["unexplained"] if u["stage"] == "window"]


def _examples(names, records, types):
  """The records as tf.train.Examples, built with TensorFlow's own protos (a float is a float32
  there, as in every tf.Example)."""
  import tensorflow as tf
  out = []
  for r in records:
    feats = {}
    for n in names:
      v = r[n]
      if v is None:
        continue
      if types[n] == schema_spec.INT:
        feats[n] = tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
      elif types[n] == schema_spec.FLOAT:
        feats[n] = tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
      else:
        feats[n] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))
    out.append(tf.train.Example(features=tf.train.Features(feature=feats)))
  return out


def _write_records(path, messages):
  """Serialized protos as a TFRecord file, by TensorFlow's own writer."""
  import tensorflow as tf
  with tf.io.TFRecordWriter(str(path)) as w:
    for m in messages:
      w.write(m.SerializeToString())


def _write_examples(path, names, records, types):
  _write_records(path, _examples(names, records, types))


def test_tf_example_input_agrees_where_float32_holds_the_value_and_differs_where_it_cannot(
    taxi_runs, tmp_path):
  """tf.Example holds floats as float32: a record whose every float survives float32 (its
  shortest float32 text is the CSV value) gets the CSV record's raw fingerprint; the others
  differ at raw -- a real difference, never hidden. The count comes from the reference."""
  from tests import canonical_ref as ref
  names, records, texts = _taxi()
  with open(TAXI_SCHEMA, encoding="utf-8") as f:
    types = schema_spec.load_tfmd(f.read())
  path = tmp_path / "serving.tfrecord"
  _write_examples(path, names, records, types)
  out = ingest(tmp_path / "d", "--num_shards", "4", "--schema", TAXI_SCHEMA, inputs=str(path))
  assert verify.verify(out) == []
  assert _manifest(out)["options"]["input_format"] == "tfrecord"
  assert _manifest(out)["rows"]["written"] == len(records)
  floats = [i for i, n in enumerate(names) if types[n] == schema_spec.FLOAT]
  lossy = sum(1 for row in texts
              if any(row[i] != "" and ref.canonical_float32(float(row[i])) !=
                     ref.canonical(row[i]) for i in floats))
  assert 0 < lossy < len(records)
  offline = _fingerprints(taxi_runs["direct"])["__raw_fp__"]
  got = _fingerprints(out)["__raw_fp__"]
  remaining = list(offline)
  unmatched = 0
  index = {}
  for fp in remaining:
    index[fp] = index.get(fp, 0) + 1
  for fp in got:
    if index.get(fp, 0):
      index[fp] -= 1
    else:
      unmatched += 1
  assert unmatched == lossy


def _prediction_logs(examples):
  """TF Serving request logs of the examples, CHUNK a request, cycling through the shapes TF
  Serving logs them in: classify (example_list), regress (example_list_with_context, the
  context's trip_seconds overridden by every example that has its own), multi-inference, and
  predict (a DT_STRING "examples" tensor); then one session_run_log, which holds no example."""
  from tensorflow_serving.apis import prediction_log_pb2 as logs
  logs_out = []
  for n, lo in enumerate(range(0, len(examples), CHUNK)):
    chunk, log = examples[lo:lo + CHUNK], logs.PredictionLog()
    log.log_metadata.model_spec.name = "taxi"
    shape = n % 4
    if shape == 0:
      log.classify_log.request.input.example_list.examples.extend(chunk)
    elif shape == 1 and all("trip_seconds" in e.features.feature for e in chunk):
      listed = log.regress_log.request.input.example_list_with_context
      listed.context.features.feature["trip_seconds"].int64_list.value.append(-1)
      listed.examples.extend(chunk)
    elif shape == 2:
      log.multi_inference_log.request.input.example_list.examples.extend(chunk)
    else:
      tensor = log.predict_log.request.inputs["examples"]
      tensor.dtype = 7  # DT_STRING
      tensor.string_val.extend(e.SerializeToString() for e in chunk)
    logs_out.append(log)
  empty = logs.PredictionLog()
  empty.session_run_log.SetInParent()
  return logs_out + [empty]


def test_tf_serving_prediction_logs_ingest_as_their_tf_examples(tmp_path):
  """The tf_serving preset reads each PredictionLog's tf.Examples where TF Serving reads them:
  the same records as the plain tf.Example file, fingerprint for fingerprint; a log holding no
  example is rejected, counted, with its reason."""
  names, records, _ = _taxi()
  with open(TAXI_SCHEMA, encoding="utf-8") as f:
    types = schema_spec.load_tfmd(f.read())
  examples = _examples(names, records, types)
  logs = _prediction_logs(examples)
  _write_records(tmp_path / "plain.tfrecord", examples)
  _write_records(tmp_path / "requests.tfrecord", logs)
  plain = ingest(tmp_path / "plain", "--num_shards", "4", "--schema", TAXI_SCHEMA,
                 inputs=str(tmp_path / "plain.tfrecord"))
  served = ingest(tmp_path / "served", "--num_shards", "4", "--schema", TAXI_SCHEMA,
                  "--preset", "tf_serving", "--max_rejected_fraction", "0.01",
                  inputs=str(tmp_path / "requests.tfrecord"))
  assert verify.verify(served) == []
  got, want = _manifest(served), _manifest(plain)
  assert got["options"]["preset"] == "tf_serving"
  assert got["rows"] == {"read": len(examples) + 1, "written": len(examples), "rejected": 1}
  assert got["content_digest"] == want["content_digest"]
  assert _fingerprints(served) == _fingerprints(plain)
  with open(os.path.join(served, got["rejected"]["path"]), encoding="utf-8") as f:
    rejected = [json.loads(line) for line in f]
  assert [(r["line"], r["reason"]) for r in rejected] == [
      (len(logs), "a PredictionLog (session_run_log) holding no tf.Example")]


@pytest.mark.parametrize("flags,message", [
    (["--preset", "tf_serving"], "--preset tf_serving reads tfrecord input, not csv"),
    (["--input_format", "tfrecord", "--preset", "vertex"],
     "--preset vertex reads jsonl input, not tfrecord"),
    (["--input_format", "tfrecord", "--record_path", "a"], "apply to JSON Lines input only")])
def test_a_preset_or_json_flag_for_another_format_is_a_usage_error(tmp_path, flags, message):
  from pipelines import common
  from pipelines import ingest as job
  with pytest.raises(common.UsageError, match=message):
    job.run(["--input", TAXI_CSV, "--output_dir", str(tmp_path / "out")] + flags)
  assert not (tmp_path / "out").exists()


def _feature_log(root):
  return pa.concat_tables([pq.read_table(p) for p in sorted(glob.glob(
      os.path.join(root, "feature_log", "*.parquet")))]).sort_by("key")


@pytest.fixture(scope="module")
def three_shards(tmp_path_factory):
  """The taxi sample ingested into 3 shards (the session's ingest has 4)."""
  return ingest(tmp_path_factory.mktemp("three_shards"), "--num_shards", "3", "--schema",
                TAXI_SCHEMA)


@pytest.mark.slow
def test_another_ingest_shard_count_is_float_noise_named_at_analyze(taxi_runs, taxi_features,
                                                                    three_shards, tmp_path):
  """The same CSV ingested into 3 shards instead of 4: the content is identical, TFT's float
  analyzers move in their last bits (the order of their sums follows the shards). At the
  defaults every record whose transform moved is noise (0 divergent, exit 0), the analyzers
  are named as noise and the shard count as the cause at analyze; --abs_tol 0 --rel_tol 0
  makes the same records divergent at analyze."""
  from replay.diff import job as diff
  data = three_shards
  assert _manifest(data)["content_digest"] == _manifest(taxi_runs["direct"])["content_digest"]
  prod = features(data, tmp_path / "f")
  with open(os.path.join(prod, "run_metadata.json"), encoding="utf-8") as f:
    assert json.load(f)["source"] == {"format": "csv", "num_shards": 3, "schema": "file"}
  off_log, prod_log = _feature_log(taxi_features["direct"]), _feature_log(prod)
  assert off_log.column("key").equals(prod_log.column("key"))
  for stage in ("raw", "parse", "window", "shard", "serialize"):
    assert off_log.column(f"fp_{stage}").equals(prod_log.column(f"fp_{stage}")), stage
  moved = int(np.count_nonzero(off_log.column("fp_transform").to_numpy() !=
                               prod_log.column("fp_transform").to_numpy()))
  total = off_log.num_rows
  assert 0 < moved <= total
  code = diff.run(["--offline", taxi_features["direct"], "--production", prod,
                   "--output_dir", str(tmp_path / "diff")])
  with open(tmp_path / "diff" / "report.json", encoding="utf-8") as f:
    report = json.load(f)
  assert code == 0 == report["exit_code"]
  assert report["records"]["divergent"] == 0 == report["records"]["latent"]
  assert report["records"]["noise"] == moved == report["noise"]["records"]
  assert report["records"]["identical"] == total - moved
  assert report["analyzers"]["state"] == "noise" and report["analyzers"]["analyzers"]
  assert any("reduction-order noise" in why for why in report["noise"]["why"])
  named = [(c["stage"], c["field"], c["offline"], c["production"])
           for c in report["suspected_causes"]]
  assert ("analyze", "source.num_shards", 4, 3) in named
  assert not [c for c in named if c[1] in ("source.format", "source.schema", "runner")]
  # Exact comparison stays available: the same records are divergent at analyze.
  code = diff.run(["--offline", taxi_features["direct"], "--production", prod,
                   "--output_dir", str(tmp_path / "exact"), "--abs_tol", "0", "--rel_tol", "0"])
  with open(tmp_path / "exact" / "report.json", encoding="utf-8") as f:
    report = json.load(f)
  assert code == 1
  assert report["first_divergent_stage"]["analyze"] == moved == report["records"]["divergent"]


@pytest.mark.slow
def test_one_analyzer_that_really_changed_leaves_the_noise_of_the_others_as_noise(
    taxi_features, three_shards, tmp_path):
  """Production ingests into 3 shards (every float analyzer moves by reduction-order noise)
  and keeps the 20 most frequent companies instead of 1,000 (tests/taxi_top_companies.py: the
  company vocabulary really changes, and company_id with it for the rarer companies). The
  feature fed by the changed analyzer is compared exactly; the z-scores, fed only by
  analyzers within noise, keep the noise tolerance. Divergent, noise and identical are worked
  out here from the two logs alone: divergent where an integer feature differs at all or a
  float feature beyond |p - o| <= t(1 + |o|), t = sqrt(N) * 2**-24."""
  from replay.diff import job as diff
  prod = features(three_shards, tmp_path / "f", "--transform_module", "tests.taxi_top_companies")
  off, pro = _feature_log(taxi_features["direct"]), _feature_log(prod)
  assert off.column("key").equals(pro.column("key"))
  tau = np.sqrt(off.num_rows) * 2.0 ** -24
  bad = np.zeros(off.num_rows, bool)
  noisy, exact = [], []
  for name in [n for n in off.schema.names if n.startswith("value__")]:
    o = off.column(name).to_numpy(zero_copy_only=False).astype(np.float64)
    p = pro.column(name).to_numpy(zero_copy_only=False).astype(np.float64)
    differs = ~((o == p) | (np.isnan(o) & np.isnan(p)))
    if pa.types.is_floating(off.schema.field(name).type):
      with np.errstate(invalid="ignore"):
        bad |= differs & ~(np.abs(p - o) <= tau * (1 + np.abs(o)))
      noisy += [name[len("value__"):]] if differs.any() else []
    else:
      bad |= differs
      exact += [name[len("value__"):]] if differs.any() else []
  moved = int(np.count_nonzero(off.column("fp_transform").to_numpy() !=
                               pro.column("fp_transform").to_numpy()))
  divergent = int(np.count_nonzero(bad))
  assert noisy and exact == ["company_id"] and 0 < divergent < moved  # some records only noise
  code = diff.run(["--offline", taxi_features["direct"], "--production", prod,
                   "--output_dir", str(tmp_path / "diff")])
  with open(tmp_path / "diff" / "report.json", encoding="utf-8") as f:
    report = json.load(f)
  assert code == 1
  # The analyzers' names, dtypes and shapes are the same: the records part at analyze.
  assert report["records"]["divergent"] == divergent == report["first_divergent_stage"][
      "analyze"]
  assert report["records"]["noise"] == moved - divergent
  assert report["records"]["identical"] == off.num_rows - moved
  assert report["analyzers"]["state"] == "differs"
  assert report["tolerance"]["default"]["noise"]["exact_features"] == ["company_id"]
  assert any("compared exactly: company_id" in why for why in report["noise"]["why"])


def test_a_first_log_without_examples_is_a_rejected_row_and_damaged_framing_an_input_error(
    tmp_path):
  """The tf_serving preset takes its columns from the first tf.Example any log holds (a first
  log without one is rejected like any other); a TFRecord file whose framing is damaged is one
  line, exit 2 (DataError), nothing published."""
  from pipelines import common
  from pipelines import ingest as job
  from tensorflow_serving.apis import prediction_log_pb2 as logs
  names, records, _ = _taxi()
  with open(TAXI_SCHEMA, encoding="utf-8") as f:
    types = schema_spec.load_tfmd(f.read())
  empty = logs.PredictionLog()
  empty.session_run_log.SetInParent()
  path = tmp_path / "requests.tfrecord"
  _write_records(path, [empty] + _prediction_logs(_examples(names, records[:30], types))[:-1])
  out = ingest(tmp_path / "d", "--schema", TAXI_SCHEMA, "--preset", "tf_serving",
               "--max_rejected_fraction", "0.2", inputs=str(path))
  assert _manifest(out)["rows"] == {"read": 31, "written": 30, "rejected": 1}
  from transforms.codec import sources
  with open(path, "rb") as f:  # the columns a run without --schema takes: the first example's
    assert sources.column_names(f, str(path), sources.SourceOptions(
        format="tfrecord", preset="tf_serving")) == sorted(
            n for n in names if records[0][n] is not None)
  data = path.read_bytes()
  path.write_bytes(data[:-7])  # the last record cut short
  with pytest.raises(common.DataError) as e:
    job.run(["--input", str(path), "--output_dir", str(tmp_path / "cut"), "--preset",
             "tf_serving"])
  assert str(e.value).startswith(f"{path}: damaged TFRecord framing: truncated record at byte")
  assert "\n" not in str(e.value) and not (tmp_path / "cut").exists()
