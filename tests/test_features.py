"""pipelines.features end to end on the taxi sample: outputs, stage fingerprints, determinism."""
import glob
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import common
from tests.conftest import ROOT, features


def _log(root):
  return pa.concat_tables([pq.read_table(p) for p in sorted(glob.glob(
      os.path.join(root, "feature_log", "*.parquet")))])


def _file_hashes(root):
  import hashlib
  return {os.path.relpath(p, root): hashlib.sha256(open(p, "rb").read()).hexdigest()
          for p in sorted(glob.glob(os.path.join(root, "feature_log", "*")) +
                          glob.glob(os.path.join(root, "transformed", "*")))}


def test_every_record_is_logged_with_every_stage(taxi_features):
  log = _log(taxi_features["direct"])
  assert log.num_rows == 15002
  assert len(set(log.column("key").to_pylist())) == 15002
  for stage in ("raw", "parse", "window", "shard", "serialize", "transform"):
    assert log.column(f"fp_{stage}").null_count == 0, stage
  assert log.column("dropped_stage").null_count == 15002
  starts = log.column("window_start").to_numpy()
  assert ((log.column("event_time").to_numpy() - starts) < 3600).all() and (starts % 3600 == 0).all()


def test_raw_and_parse_fingerprints_come_from_ingest(taxi_runs, taxi_features):
  shards = pa.concat_tables([pq.read_table(p) for p in glob.glob(
      os.path.join(taxi_runs["direct"], "parquet", "*.parquet"))])
  want = dict(zip(shards.column("__key__").to_pylist(),
                  shards.column("__raw_fp__").to_numpy().view(np.uint64).tolist()))
  log = _log(taxi_features["direct"])
  got = dict(zip(log.column("key").to_pylist(), log.column("fp_raw").to_pylist()))
  assert got == want


def test_transform_fn_loads_and_transformed_examples_are_written(taxi_features):
  import tensorflow as tf
  import tensorflow_transform as tft
  out = tft.TFTransformOutput(os.path.join(taxi_features["direct"], "transform_fn"))
  vocab = out.vocabulary_by_name("payment_type")
  assert b"Cash" in vocab and b"Credit Card" in vocab
  files = sorted(glob.glob(os.path.join(taxi_features["direct"], "transformed", "*.tfrecord")))
  assert sum(1 for _ in tf.data.TFRecordDataset(files)) == 15002


def test_run_metadata_carries_profile_versions_and_bucket_digests(taxi_features, taxi_runs):
  meta = json.load(open(os.path.join(taxi_features["direct"], "run_metadata.json")))
  assert meta["profile"]["windowing"]["size_seconds"] == 3600
  manifest = json.load(open(os.path.join(taxi_runs["direct"], "manifest.json")))
  assert meta["input"]["key_columns"] == manifest["options"]["key_columns"] == []
  assert meta["input"]["content_digest"] == manifest["content_digest"]
  assert meta["log"]["rows"] == 15002 and len(meta["log"]["buckets"]) == 16
  log = _log(taxi_features["direct"])
  from transforms import fingerprint
  total = fingerprint.combine_digest(np.asarray(log.column("fp_window").to_pylist(),
                                                dtype=np.uint64))
  summed = fingerprint.empty_digest()
  for b in meta["log"]["buckets"]:
    count, s, m = b["digests"]["window"].split(":")
    summed = fingerprint.add_digests(summed, {"count": int(count), "sum": int(s, 16),
                                              "mixsum": int(m, 16)})
  assert summed == total


def test_identical_bytes_on_every_runner(taxi_features):
  hashes = {name: _file_hashes(root) for name, root in taxi_features.items()}
  assert len(hashes["direct"]) == 32
  assert hashes["multi_processing"] == hashes["direct"]
  assert hashes["portable_embed"] == hashes["direct"]
  metas = {name: json.load(open(os.path.join(root, "run_metadata.json")))
           for name, root in taxi_features.items()}
  for name in ("multi_processing", "portable_embed"):
    assert metas[name]["log"] == metas["direct"]["log"]
    # Exact here: mean/var and quantiles come out bit-identical on every runner for this input
    # (docs/fingerprint.md says when they may not).
    assert metas[name]["analyze"] == metas["direct"]["analyze"]


def test_analyze_stage_fingerprints_each_analyzer_output(taxi_features, taxi_runs):
  import pyarrow as pa
  import pyarrow.parquet as pq
  import tensorflow_transform as tft
  from transforms import fingerprint
  root = taxi_features["direct"]
  analyze = json.load(open(os.path.join(root, "run_metadata.json")))["analyze"]["analyzers"]
  out = tft.TFTransformOutput(os.path.join(root, "transform_fn"))
  with open(out.vocabulary_file_by_name("payment_type"), "rb") as f:
    vocab = f.read()
  assert analyze["vocabulary/payment_type"]["fingerprint"] == \
      f"{fingerprint.fingerprint_record({'value': vocab}):016x}"
  # One z-score mean is the mean of trip_miles as TFT saw it (after the float32 round trip).
  miles = pa.concat_tables([pq.read_table(p, columns=["trip_miles"]) for p in glob.glob(
      os.path.join(taxi_runs["direct"], "parquet", "*.parquet"))]).column(0)
  miles = miles.drop_null().cast(pa.float32()).cast(pa.float64()).to_numpy()
  means = [a["values"][0] for name, a in analyze.items()
           if name.startswith("scale_to_z_score") and name.endswith("_sub_y")]
  assert len(means) == 4
  assert min(abs(m - miles.mean()) for m in means) < 1e-5 * abs(miles.mean())
  boundaries = [a for name, a in analyze.items() if name.startswith("bucketize")]
  assert len(boundaries) == 4 and all(b["shape"] == [1, 9] for b in boundaries)


def _bad_profile(tmp_path):
  path = tmp_path / "bad.yaml"
  path.write_text(open(os.path.join(ROOT, "profiles", "offline.yaml")).read().replace(
      "num_shards: 4", "num_shards: 0"))
  return str(path)


@pytest.mark.parametrize("make_args,message", [
    (lambda d, i: ["--input_dir", i, "--profile", _bad_profile(d)],
     "sharding.num_shards must be >= 1"),
    (lambda d, i: ["--input_dir", i, "--profile", os.path.join(ROOT, "profiles",
                                                               "offline.yaml"),
                   "--transform_module", "no_such.module"], "No module named"),
    (lambda d, i: ["--input_dir", str(d), "--profile", os.path.join(ROOT, "profiles",
                                                                    "offline.yaml")],
     "holds no manifest.json"),
])
def test_bad_input_exits_with_usage_error_and_writes_nothing(tmp_path, taxi_runs, make_args,
                                                             message):
  from pipelines import features as job
  out = tmp_path / "out"
  with pytest.raises(common.UsageError, match=message):
    job.run(make_args(tmp_path, taxi_runs["direct"]) + ["--output_dir", str(out)])
  assert not out.exists()


def test_dataset_lacking_the_modules_columns_is_refused(tmp_path):
  from pipelines import features as job
  from tests.conftest import EDGE, ingest
  small = ingest(tmp_path / "small", "--num_shards", "1",
                 inputs=os.path.join(EDGE, "empty_values.csv"))
  with pytest.raises(common.UsageError, match=r"lacks column\(s\) trip_start_timestamp"):
    job.run(["--input_dir", small, "--output_dir", str(tmp_path / "out"), "--profile",
             os.path.join(ROOT, "profiles", "offline.yaml")])
  assert not (tmp_path / "out").exists()


def test_log_rows_and_run_metadata_match_their_json_schemas(taxi_features):
  import jsonschema
  root = taxi_features["direct"]
  with open(os.path.join(ROOT, "manifests", "run_metadata.schema.json")) as f:
    meta_schema = json.load(f)
  meta = json.load(open(os.path.join(root, "run_metadata.json")))
  jsonschema.validate(meta, meta_schema)
  del meta["input"]["key_columns"]  # the production logger relies on it being there
  with pytest.raises(jsonschema.ValidationError, match="key_columns"):
    jsonschema.validate(meta, meta_schema)
  with open(os.path.join(ROOT, "manifests", "feature_log.schema.json")) as f:
    row_schema = json.load(f)
  for row in _log(root).slice(0, 200).to_pylist():
    jsonschema.validate(row, row_schema)
