"""PII end to end: pipelines.features hashes the key and PII features with the production
logger's keyed hash (spec/pii.py), so the two logs join, and no clear key reaches any output.

The taxi sample gets keys no output could hold by chance (T000000Z ...); the features job and
the logger hash `key` and `company_id` with the same HMAC key from the environment. Checked
independently of the code under test: every key and company_id value in both logs is 64 hex
digits and is the HMAC of a clear value; the diff matches every record, 0 divergent, exit 0;
and no clear key appears in any output -- not in a Parquet column value, not in any byte of the
other files (JSON, HTML, TFRecord).
"""
import glob
import hashlib
import hmac
import json
import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests import online_store
from tests.conftest import TAXI_SCHEMA, features, ingest, keyed_taxi_csv
from transforms.spec import fingerprint, pii
from transforms.spec.errors import UsageError

ENV, SECRET = "SKEWTRACE_TEST_PII_SECRET", "a-secret-never-written"
PII = "key,company_id"
CLEAR_KEY = re.compile(rb"T\d{6}Z")


def _hmac(value):
  """The keyed hash as docs/logger.md states it, computed here: HMAC-SHA256 over the value's
  canonical encoding."""
  return hmac.new(SECRET.encode(), fingerprint.encode_record({"value": value}),
                  hashlib.sha256).hexdigest()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  d = tmp_path_factory.mktemp("pii")
  path = keyed_taxi_csv(d / "taxi.csv", lambda i: f"T{i:06d}Z")
  data = ingest(d / "ingest", "--num_shards", "2", "--schema", TAXI_SCHEMA, "--key_columns",
                "trip_id", inputs=str(path))
  os.environ[ENV] = SECRET
  try:
    offline = features(data, d / "offline", "--pii_columns", PII, "--pii_key_env", ENV)
    from replay.logger import ProductionLogger
    records, aggregates = online_store.records_and_counts(str(path), offline)
    prod = str(d / "production")
    with ProductionLogger.from_features_dir(offline, prod, pii_columns=PII.split(","),
                                            pii_key_env=ENV, log_inputs=True) as logger:
      logger.log_batch(records, aggregates)
    from replay.diff import job as diff
    code = diff.run(["--offline", offline, "--production", prod, "--output_dir",
                     str(d / "diff"), "--samples", "20"])
  finally:
    del os.environ[ENV]
  with open(d / "diff" / "report.json") as f:
    report = json.load(f)
  return {"dir": d, "offline": offline, "production": prod, "code": code, "report": report,
          "records": records}


def _log(root):
  return pa.concat_tables([pq.read_table(p) for p in sorted(glob.glob(
      os.path.join(root, "feature_log", "*.parquet")))])


@pytest.mark.slow
def test_hashed_logs_join_and_agree(runs):
  n = len(runs["records"])
  r = runs["report"]
  assert runs["code"] == 0
  assert r["records"]["matched_keys"] == n
  assert r["records"]["divergent"] == 0 and r["records"]["offline_only"] == 0
  for side in ("offline", "production"):
    log = _log(runs[side])
    keys = log.column("key").to_pylist()
    assert sorted(keys) == sorted(_hmac(rec["trip_id"]) for rec in runs["records"])
    companies = {v for v in log.column("value__company_id").to_pylist() if v is not None}
    assert companies and all(re.fullmatch(r"[0-9a-f]{64}", v) for v in companies)
    if side == "production":  # the logged input of the key's column is hashed with the key
      assert sorted(log.column("input__trip_id").to_pylist()) == sorted(keys)
    with open(os.path.join(runs[side], "run_metadata.json")) as f:  # the key and its column
      assert json.load(f)["pii"] == {"columns": ["company_id", "key", "trip_id"],
                                     "hash": "hmac-sha256"}


@pytest.mark.slow
def test_no_clear_key_in_any_output(runs):
  roots = [runs["offline"], runs["production"], str(runs["dir"] / "diff")]
  files = [p for root in roots for p in glob.glob(os.path.join(root, "**", "*"), recursive=True)
           if os.path.isfile(p)]
  assert any(p.endswith(".parquet") for p in files) and any(p.endswith(".html") for p in files)
  for p in files:
    with open(p, "rb") as f:
      data = f.read()
    assert not CLEAR_KEY.search(data), p
    assert SECRET.encode() not in data, p
    if p.endswith(".parquet"):  # compressed pages: the values themselves, read back
      table = pq.read_table(p)
      for name in table.schema.names:
        if pa.types.is_string(table.schema.field(name).type):
          assert not any(CLEAR_KEY.search(v.encode()) for v in table.column(name).to_pylist()
                         if v), (p, name)


@pytest.mark.slow
def test_pii_without_its_key_is_refused_before_anything_is_written(runs, tmp_path, monkeypatch):
  from pipelines import features as features_job
  from pipelines import common
  monkeypatch.delenv(ENV, raising=False)
  with pytest.raises(common.UsageError, match=f"{ENV}.*not set"):
    features_job.run(["--input_dir", os.path.join(str(runs["dir"]), "ingest"), "--output_dir",
                      str(tmp_path / "out"), "--profile", os.path.join(
                          os.path.dirname(TAXI_SCHEMA), "..", "..", "profiles", "offline.yaml"),
                      "--pii_columns", PII, "--pii_key_env", ENV,
                      "--transform_module", "transforms.taxi"])
  assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_pii_column_that_is_no_feature_is_refused_before_the_pipeline_runs(runs, tmp_path,
                                                                             monkeypatch):
  import apache_beam as beam
  from pipelines import common
  from pipelines import features as features_job

  def never(*args, **kwargs):
    raise AssertionError("the pipeline ran")

  monkeypatch.setattr(beam.Pipeline, "run", never)
  monkeypatch.setenv(ENV, SECRET)
  with pytest.raises(common.UsageError, match="--pii_columns fare_zz: not a log column"):
    features_job.run(["--input_dir", os.path.join(str(runs["dir"]), "ingest"), "--output_dir",
                      str(tmp_path / "out"), "--profile", os.path.join(
                          os.path.dirname(TAXI_SCHEMA), "..", "..", "profiles", "offline.yaml"),
                      "--pii_columns", "key,fare_zz", "--pii_key_env", ENV,
                      "--transform_module", "transforms.taxi"])
  assert not (tmp_path / "out").exists()


def test_a_worker_without_the_key_says_where_it_is_missing(monkeypatch):
  """The rule a Beam worker applies (Pii.hashed) names the variable and the workers'
  environment when the key is not set there; with it set, equal values hash alike."""
  rule = pii.Pii.parse("key", ENV)
  monkeypatch.delenv(ENV, raising=False)
  with pytest.raises(UsageError, match=f"'{ENV}' is not set in this worker's environment"):
    rule.hashed(pa.array(["a"]))
  monkeypatch.setenv(ENV, SECRET)
  out = rule.hashed(pa.array(["a", None, "a"])).to_pylist()
  assert out == [_hmac("a"), None, _hmac("a")]
