"""replay.logger: the taxi sample logged in production equals the offline feature log, drops carry
their reasons, sampling keeps ShardRecords' keys, PII never in clear, crashes, threads."""
import dataclasses
import glob
import json
import os
import re
import shutil
import threading
import time

import jsonschema
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import common
from tests import online_store
from tests.conftest import ROOT
from transforms.spec import feature_log
from transforms.spec import fingerprint
from transforms.spec import profile as profiles
from transforms.spec import values
from transforms.spec.stages import FP_STAGES

AGG = online_store.AGG
_FP_COLUMNS = [feature_log.fp_column(s) for s in FP_STAGES]


def _read_log(root):
  return pa.concat_tables([pq.read_table(p) for p in sorted(glob.glob(
      os.path.join(root, "feature_log", "*.parquet")))])


def _meta(root):
  with open(os.path.join(root, "run_metadata.json"), encoding="utf-8") as f:
    return json.load(f)


def _logger(offline, log_dir, **options):
  from replay.logger import ProductionLogger
  return ProductionLogger.from_features_dir(offline, str(log_dir), **options)


@pytest.fixture(scope="module")
def production(offline, taxi, tmp_path_factory):
  records, aggs = taxi
  log_dir = str(tmp_path_factory.mktemp("production_log"))
  started = time.monotonic()
  with _logger(offline, log_dir, batch_size=4096) as logger:
    for record, agg in zip(records, aggs):
      logger.log(record, agg)
  seconds = time.monotonic() - started
  print(f"logger: {len(records)} taxi records in {seconds:.1f} s "
        f"({len(records) / seconds:.0f} records/s)")
  return log_dir


def json_records(records, offline):
  """The records as a JSON Lines rendering of the CSV gives them, parsed back: null for an
  empty cell, numbers for INT and FLOAT columns, strings for BYTES ones."""
  types = {c["name"]: c["type"] for c in _meta(offline)["schema"]["columns"]}
  cast = {"INT": int, "FLOAT": float}
  lines = [json.dumps({k: None if v == "" else cast.get(types[k], str)(v)
                       for k, v in r.items()}) for r in records]
  return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def production_typed(offline, taxi, tmp_path_factory):
  """The taxi sample logged as typed values (a JSON Lines rendering of the CSV, parsed)."""
  records, aggs = taxi
  log_dir = str(tmp_path_factory.mktemp("production_typed_log"))
  with _logger(offline, log_dir, batch_size=4096) as logger:
    for record, agg in zip(json_records(records, offline), aggs):
      logger.log(record, agg)
  return log_dir


def _assert_logs_as_offline(offline, production):
  off, prod = _read_log(offline), _read_log(production)
  first = sorted(glob.glob(os.path.join(offline, "feature_log", "*.parquet")))[0]
  assert prod.schema == pq.read_schema(first)  # same columns, order and Arrow types
  from tests.test_features import _dictionary_encoded
  part = sorted(glob.glob(os.path.join(production, "feature_log", "*.parquet")))[0]
  assert _dictionary_encoded(part) == _dictionary_encoded(first)  # same Parquet encodings
  assert prod.num_rows == off.num_rows == 15002
  assert prod.column("dropped_stage").null_count == prod.num_rows
  by_key = {r["key"]: r for r in prod.to_pylist()}
  assert len(by_key) == prod.num_rows
  features = [c[len("fp__"):] for c in off.schema.names if c.startswith("fp__")]
  assert len(features) == 18
  for row in off.to_pylist():
    got = by_key[row["key"]]
    for c in _FP_COLUMNS + ["event_time", "window_start", "window_end", "shard_id"]:
      assert got[c] == row[c], (row["key"], c)
    for f in features:
      assert got[f"fp__{f}"] == row[f"fp__{f}"], (row["key"], f)
      assert got[f"value__{f}"] == row[f"value__{f}"], (row["key"], f)
  names = [os.path.basename(p) for p in glob.glob(os.path.join(production, "feature_log", "*"))]
  assert names and all(re.fullmatch(r"bucket-\d{5}-of-00016-part-\d{6}\.parquet", n)
                       for n in names)


def test_taxi_sample_logs_exactly_as_offline(offline, production):
  _assert_logs_as_offline(offline, production)


def test_taxi_sample_as_typed_values_logs_exactly_as_offline(offline, production_typed):
  _assert_logs_as_offline(offline, production_typed)


def _bucket_bytes(log_dir):
  return {re.sub(r"-part-\d{6}", "", os.path.basename(p)): open(p, "rb").read()
          for p in glob.glob(os.path.join(log_dir, "feature_log", "*.parquet"))}


def test_typed_values_and_csv_text_give_the_same_log_bytes(production, production_typed):
  """Same fingerprints at every stage and same values: each bucket's one part (after close)
  holds the same bytes."""
  text, typed = _bucket_bytes(production), _bucket_bytes(production_typed)
  assert len(text) == 16 and text.keys() == typed.keys()
  assert all(text[b] == typed[b] for b in text)


def test_a_logger_log_verifies_row_by_row(production):
  from pipelines import common, verify
  from replay import verify_log
  assert verify_log.is_log(production) and verify_log.verify(production) == []
  assert verify_log.run([production]) == 0
  with pytest.raises(common.UsageError, match="is a feature log"):
    verify.run([production])


def test_run_metadata_matches_offline_digests(offline, production):
  off, prod = _meta(offline), _meta(production)
  assert prod["runner"] == "ProductionLogger"
  for field in ("format", "profile", "schema", "stages", "analyze", "transform_module",
                "event_time"):
    assert prod[field] == off[field], field
  assert prod["input"]["content_digest"] == off["input"]["content_digest"]
  assert prod["input"]["key_columns"] == off["input"]["key_columns"] == []
  assert prod["log"]["dropped_by_reason"] == {}
  assert prod["log"]["rows"] == off["log"]["rows"]
  want = {b["bucket"]: b["digests"] for b in off["log"]["buckets"]}
  got = {b["bucket"]: b["digests"] for b in prod["log"]["buckets"]}
  assert got == want
  for b in prod["log"]["buckets"]:  # each bucket's digests are those of its parts' rows
    rows = pa.concat_tables([pq.read_table(os.path.join(production, p)) for p in b["parts"]])
    assert rows.num_rows == b["rows"]
    assert fingerprint.digest_hex(fingerprint.combine_digest(
        rows.column("fp_window").to_numpy())) == b["digests"]["window"]
  with open(os.path.join(ROOT, "manifests", "run_metadata.schema.json"), encoding="utf-8") as f:
    validator = jsonschema.Draft202012Validator(json.load(f))
  errors = [e.message for e in validator.iter_errors(prod)]
  assert not errors, errors


def canonical(text):
  """A cell's canonical text (spec/values.py), one cell at a time."""
  return None if text is None else values.canonical_text(pa.array([text]))[0].as_py()


def _small(taxi, n, start=0):
  records, aggs = taxi
  return [dict(r) for r in records[start:start + n]], aggs[start:start + n]


def test_parse_failure_and_late_records_are_logged_as_dropped_with_reasons(offline, taxi,
                                                                             tmp_path):
  prof = dataclasses.replace(profiles.parse_profile(_meta(offline)["profile"]),
                             allowed_lateness=0)
  records, aggs = _small(taxi, 4)
  records[0]["fare"] = "twelve"
  records[1]["trip_start_timestamp"] = ""
  watermark = int(records[3]["trip_start_timestamp"]) + 7200
  records[2]["trip_start_timestamp"] = str(watermark)  # on time: its window ends after
  with _logger(offline, tmp_path, profile=prof) as logger:
    logger.log_batch(records, aggs, watermark=watermark)
  rows = {r["fp_raw"]: r for r in _read_log(str(tmp_path)).to_pylist()}
  assert len(rows) == 4
  names = [c["name"] for c in _meta(offline)["schema"]["columns"]]
  # The raw stage covers each cell's canonical text ("0.0" -> "0"), by the per-record coding.
  raw = [fingerprint.fingerprint_record({n: canonical(r[n] or None) for n in names})
         for r in records]
  bad, untimed, kept, late = (rows[fp] for fp in raw)
  assert (bad["dropped_stage"], bad["drop_reason"]) == ("parse",
                                                        "column 'fare': 'twelve' is not FLOAT")
  assert bad["fp_parse"] is None and bad["fp_window"] is None and bad["fp_transform"] is None
  assert (untimed["dropped_stage"], untimed["drop_reason"]) == ("window", "missing event time")
  assert (late["dropped_stage"], late["drop_reason"]) == (
      "window", "late: window end + allowed lateness <= watermark")
  for row in (untimed, late):
    assert row["fp_parse"] is not None and row["fp_window"] is None and row["shard_id"] is None
  assert kept["dropped_stage"] is None and kept["fp_transform"] is not None
  with open(os.path.join(ROOT, "manifests", "feature_log.schema.json"), encoding="utf-8") as f:
    row_schema = json.load(f)
  for row in rows.values():
    jsonschema.validate(row, row_schema)
  meta = _meta(str(tmp_path))
  assert sum(b["dropped"] for b in meta["log"]["buckets"]) == 3
  by_reason = {"parse": {"not_type": 1}, "window": {"late": 1, "no_event_time": 1}}
  assert meta["log"]["dropped_by_reason"] == logger.stats()["dropped_by_reason"] == by_reason
  assert sum(int(b["digests"]["parse"].split(":")[0]) for b in meta["log"]["buckets"]) == 3


def test_sampling_keeps_the_keys_shard_records_keeps(offline, taxi, tmp_path):
  import apache_beam as beam
  from apache_beam.testing.util import assert_that, equal_to
  from transforms.spec.stages import KEY
  from transforms.stages.shard_records import ShardRecords
  prof = dataclasses.replace(profiles.parse_profile(_meta(offline)["profile"]),
                             sampling_fraction=0.25, sampling_seed=7)
  records, aggs = taxi
  with _logger(offline, tmp_path, profile=prof, batch_size=4096) as logger:
    logger.log_batch(records, aggs)
  stats = logger.stats()
  got = _read_log(str(tmp_path)).column("key").to_pylist()
  keys = _read_log(offline).column("key")
  assert 0.2 * len(keys) < len(got) < 0.3 * len(keys)
  assert stats["sampled_out"] == len(keys) - len(got)
  with beam.Pipeline() as p:
    kept = (p | beam.Create([pa.record_batch([keys.combine_chunks()], names=[KEY])])
            | ShardRecords(prof) | beam.FlatMap(lambda b: b.column(KEY).to_pylist()))
    assert_that(kept, equal_to(got))


def test_pii_columns_are_never_written_in_clear(offline, taxi, tmp_path, monkeypatch):
  from replay.logger import pii_hash
  secret = "s3cret-hmac-key-for-the-test"
  monkeypatch.setenv("SKEWTRACE_TEST_PII_KEY", secret)
  records, aggs = _small(taxi, 300)
  with _logger(offline, tmp_path / "clear", compression="none") as logger:
    logger.log_batch(records, aggs)
  with _logger(offline, tmp_path / "pii", compression="none", pii_columns=["key", "company_id"],
               pii_key_env="SKEWTRACE_TEST_PII_KEY") as logger:
    logger.log_batch(records, aggs)
  clear = {r["fp_parse"]: r for r in _read_log(str(tmp_path / "clear")).to_pylist()}
  hashed = _read_log(str(tmp_path / "pii"))
  assert hashed.schema.field("value__company_id").type == pa.string()
  written = b"".join(open(p, "rb").read() for p in glob.glob(str(tmp_path / "pii" / "**" / "*"),
                                                               recursive=True)
                     if os.path.isfile(p))
  assert secret.encode() not in written
  for row in hashed.to_pylist():
    plain = clear[row["fp_parse"]]
    assert plain["key"].encode() not in written
    assert row["key"] == pii_hash(plain["key"], secret.encode())
    assert row["value__company_id"] == pii_hash(plain["value__company_id"], secret.encode())
    assert row["fp__company_id"] == plain["fp__company_id"]  # fingerprints still compare
    assert row["value__fare_z"] == plain["value__fare_z"]
  assert _meta(str(tmp_path / "pii"))["pii"] == {"columns": ["company_id", "key"],
                                                 "hash": "hmac-sha256"}


def test_missing_hmac_key_is_a_clear_error(offline, tmp_path, monkeypatch):
  monkeypatch.delenv("SKEWTRACE_TEST_PII_KEY", raising=False)
  with pytest.raises(common.UsageError, match="SKEWTRACE_TEST_PII_KEY.*not set"):
    _logger(offline, tmp_path, pii_columns=["key"], pii_key_env="SKEWTRACE_TEST_PII_KEY")
  assert not os.path.exists(tmp_path / "run_metadata.json")


def _process_died(log_dir):
  """What a crashed serving process leaves: its logger's lock file, naming a process that no
  longer runs (here the test's own process stays alive, so the lock is made to name an exited
  one); the next logger takes it over."""
  import subprocess
  import sys
  from transforms.spec.lock import LOCK_FILE
  gone = subprocess.Popen([sys.executable, "-c", "pass"])
  gone.wait()
  path = os.path.join(log_dir, LOCK_FILE)
  with open(path) as f:
    holder = json.load(f)
  with open(path, "w") as f:
    json.dump(dict(holder, pid=gone.pid), f)


def _consistent(log_dir):
  """Rows on disk == rows in run_metadata.json, bucket by bucket, digests included."""
  meta = _meta(log_dir)
  total = 0
  for b in meta["log"]["buckets"]:
    files = sorted(glob.glob(os.path.join(
        log_dir, f"feature_log/bucket-{b['bucket']:05d}-of-00016*.parquet")))
    assert [os.path.relpath(f, log_dir) for f in files] == sorted(b["parts"])
    rows = pa.concat_tables([pq.read_table(f) for f in files])
    assert rows.num_rows == b["rows"]
    for s in ("raw", "parse", "transform"):
      assert fingerprint.digest_hex(fingerprint.combine_digest(
          rows.column(f"fp_{s}").drop_null().to_numpy())) == b["digests"][s]
    total += rows.num_rows
  assert total == meta["log"]["rows"]
  return meta


def test_a_crash_loses_at_most_the_open_batch(offline, taxi, tmp_path):
  records, aggs = _small(taxi, 300)
  log_dir = str(tmp_path)
  logger = _logger(offline, log_dir, batch_size=100)
  logger.log_batch(records[:250], aggs[:250])
  logger.drain()  # the two full batches are written; the open one (50 records) is not
  del logger  # abandoned without close: the open batch is lost
  _process_died(log_dir)
  assert _consistent(log_dir)["log"]["rows"] == 200
  # A crash between a part's rename and the metadata: the part is not listed.
  part = sorted(glob.glob(os.path.join(log_dir, "feature_log", "*.parquet")))[0]
  orphan = re.sub(r"part-\d{6}", "part-000099", part)
  shutil.copy(part, orphan)
  shutil.copy(part, part.replace(".parquet", ".parquet.tmp"))
  # The diff reads such a log at once, before any logger resumes it: the listed parts only.
  from replay.diff import job as diff
  diff.run(["--offline", offline, "--production", log_dir, "--output_dir",
            str(tmp_path / "diff")])
  with open(tmp_path / "diff" / "report.json", encoding="utf-8") as f:
    report = json.load(f)
  assert report["records"]["matched_keys"] == report["records"]["identical"] == 200
  assert report["records"]["production_only"] == 0
  # A listed part that is gone is an input error naming it, never a divergence.
  shutil.move(part, part + ".away")
  with pytest.raises(common.UsageError, match=re.escape(f"{part} is listed in run_metadata.json "
                                                        "but missing")):
    diff.run(["--offline", offline, "--production", log_dir, "--output_dir",
              str(tmp_path / "diff2")])
  shutil.move(part + ".away", part)
  with _logger(offline, log_dir, batch_size=100) as logger:  # resumes the log
    logger.log_batch(records[250:], aggs[250:])
  assert not os.path.exists(orphan) and not glob.glob(os.path.join(log_dir, "*", "*.tmp"))
  meta = _consistent(log_dir)
  assert meta["log"]["rows"] == 250
  assert all(len(b["parts"]) == 1 for b in meta["log"]["buckets"])  # merged on close
  keys = _read_log(log_dir).column("key").to_pylist()
  assert len(set(keys)) == 250


@pytest.mark.slow
def test_a_crash_while_merging_leaves_a_log_that_resumes(offline, taxi, tmp_path):
  """close() stages every merged part, renames them, rewrites the metadata, deletes the old
  parts: a crash after any step leaves a log whose files agree with its metadata on resume."""
  records, aggs = _small(taxi, 300)
  for step in ("staged", "renamed", "listed"):
    log_dir = str(tmp_path / step)
    logger = _logger(offline, log_dir, batch_size=100, compact_on_close=False)
    for lo in range(0, 300, 100):
      logger.log_batch(records[lo:lo + 100], aggs[lo:lo + 100])
      logger.drain()  # one part per bucket per batch
    logger.close()
    before = _consistent(log_dir)
    assert all(len(b["parts"]) > 1 for b in before["log"]["buckets"])
    # on_write_error="raise": the failure stops close() where it happened, as a crash would
    logger = _logger(offline, log_dir, batch_size=100, on_write_error="raise")
    crash = {"staged": "replace", "renamed": "_save_metadata", "listed": "remove"}[step]
    with pytest.MonkeyPatch.context() as m:
      if crash == "_save_metadata":
        m.setattr(logger, "_save_metadata", _boom)
      else:
        m.setattr(os, crash, _boom)
      with pytest.raises(OSError, match="crash"):
        logger.close()
    if step == "listed":  # the crash stopped close() before it removed its lock, too
      _process_died(log_dir)
    with _logger(offline, log_dir, batch_size=100) as again:
      pass
    meta = _consistent(log_dir)
    assert {b["bucket"]: b["digests"] for b in meta["log"]["buckets"]} == \
        {b["bucket"]: b["digests"] for b in before["log"]["buckets"]}
    assert again.stats()["logged"] == 0 and meta["log"]["rows"] == 300
    assert all(len(b["parts"]) == 1 for b in meta["log"]["buckets"])


def _boom(*args, **kwargs):
  raise OSError("crash")


def test_concurrent_threads_lose_and_duplicate_nothing(offline, taxi, tmp_path):
  records, aggs = _small(taxi, 800)
  with _logger(offline, tmp_path / "one", batch_size=100) as logger:
    logger.log_batch(records, aggs)
  logger = _logger(offline, tmp_path / "threads", batch_size=100)

  def work(k):
    for i in range(k, len(records), 4):
      if i % 3:
        logger.log(records[i], aggs[i])
      else:
        logger.log_batch([records[i]], [aggs[i]])

  threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  logger.close()
  one, many = _read_log(str(tmp_path / "one")), _read_log(str(tmp_path / "threads"))
  assert many.num_rows == 800 and len(set(many.column("key").to_pylist())) == 800
  assert sorted(many.column("key").to_pylist()) == sorted(one.column("key").to_pylist())
  digests = [{b["bucket"]: b["digests"] for b in _meta(str(d))["log"]["buckets"]}
             for d in (tmp_path / "one", tmp_path / "threads")]
  assert digests[0] == digests[1]
  _consistent(str(tmp_path / "threads"))


def test_bad_input_is_a_usage_error(offline, taxi, tmp_path):
  from replay.logger import RecordError
  records, aggs = _small(taxi, 2)
  logger = _logger(offline, tmp_path / "a")
  with pytest.raises(common.UsageError, match="dict"):
    logger.log(["not", "a", "dict"])
  with pytest.raises(RecordError, match="column 'fare': a scalar .* got list"):
    logger.log(dict(records[0], fare=[12.5]), aggs[0])
  with pytest.raises(RecordError, match=f"aggregate '{AGG}' must be an integer, got '3'"):
    logger.log(records[0], {AGG: "3"})
  with pytest.raises(common.UsageError, match="watermark"):
    logger.log(records[0], aggs[0], watermark="late")
  logger.close()
  with pytest.raises(common.UsageError, match="closed"):
    logger.log(records[1], aggs[1])
  other = dataclasses.replace(profiles.parse_profile(_meta(offline)["profile"]), num_shards=8)
  with pytest.raises(common.UsageError, match="another log.*profile"):
    with _logger(offline, tmp_path / "a", profile=other) as again:
      again.log(records[1], aggs[1])
  with pytest.raises(common.UsageError, match="another log.*logged_inputs"):
    _logger(offline, tmp_path / "a", log_inputs=True)
  with pytest.raises(common.UsageError, match="pii_columns fare_typo: not a log column"):
    _logger(offline, tmp_path / "b", pii_columns=["fare_typo"], pii_key_env="HOME")
  assert feature_log.LOG_SEED == _meta(str(tmp_path / "a"))["log"]["seed"]
  assert np.sum([b["rows"] for b in _meta(str(tmp_path / "a"))["log"]["buckets"]]) == 0


@pytest.mark.parametrize("record,aggregates,message", [
    ({"fare_typo": "1"}, "valid", "unknown column(s) 'fare_typo': not in the record schema of the "
                               "offline run"),
    ({}, {AGG: 3, "trips_in_area": 1}, "aggregates: 'trips_in_area' not declared by the feature "
                                       f"module (declared: '{AGG}')"),
    ({}, {}, f"aggregates: '{AGG}' missing (declared: '{AGG}')"),
    ({}, {AGG: None}, f"aggregate '{AGG}' must be an integer, got None"),
    ({}, None, f"aggregates '{AGG}' expected (one {{name: value}} per record), got NoneType"),
    ({}, {AGG: True}, f"aggregate '{AGG}' must be an integer, got True")])
def test_an_unknown_column_or_aggregate_is_a_one_line_value_error(offline, taxi, tmp_path,
                                                                  record, aggregates, message):
  """Never a silent 0 (nor a silently dropped column): a ValueError naming what is wrong."""
  records, aggs = _small(taxi, 1)
  with _logger(offline, tmp_path) as logger:
    with pytest.raises(ValueError) as e:
      logger.log(dict(records[0], **record), aggs[0] if aggregates == "valid" else aggregates)
    assert str(e.value) == message and "\n" not in str(e.value)
    assert isinstance(e.value, common.UsageError)
  assert logger.stats()["accepted"] == 0 and _meta(str(tmp_path))["log"]["rows"] == 0


def test_log_returns_before_the_transform_runs(offline, taxi, tmp_path, monkeypatch):
  """A full batch goes to the worker thread: log() does not wait for it, close() does."""
  records, aggs = _small(taxi, 20)
  logger = _logger(offline, tmp_path, batch_size=10)
  release, rows = threading.Event(), logger._rules.rows

  def slow_rows(items):
    release.wait(timeout=60)
    return rows(items)

  monkeypatch.setattr(logger._rules, "rows", slow_rows)
  logger.log_batch(records, aggs)  # two full batches: handed over, not processed here
  assert logger.stats()["logged"] == 0
  release.set()
  logger.close()
  assert logger.stats()["logged"] == 20 and _meta(str(tmp_path))["log"]["rows"] == 20


def test_a_failure_on_the_worker_is_raised_to_the_caller(offline, taxi, tmp_path, monkeypatch):
  records, aggs = _small(taxi, 4)
  logger = _logger(offline, tmp_path, batch_size=2)
  monkeypatch.setattr(logger._rules, "rows", _boom)
  logger.log_batch(records[:2], aggs[:2])
  with pytest.raises(OSError, match="crash"):
    logger.flush()
  with pytest.raises(OSError, match="crash"):
    logger.log(records[2], aggs[2])
  with pytest.raises(OSError, match="crash"):
    logger.close()


def test_replay_diff_finds_no_divergent_record(offline, production, taxi, tmp_path):
  from replay.diff import job as diff
  assert diff.run(["--offline", offline, "--production", production,
                   "--output_dir", str(tmp_path / "full")]) == 0
  report = json.load(open(tmp_path / "full" / "report.json", encoding="utf-8"))
  assert report["records"]["identical"] == report["records"]["matched_keys"] == 15002
  assert report["records"]["divergent"] == 0 and report["exit_code"] == 0
  assert sum(report["first_divergent_stage"].values()) == 0
  # A partial log in several parts per bucket: every bucket differs, so each is read and joined.
  records, aggs = _small(taxi, 500)
  reports = {}
  for merged in (False, True):
    name = "merged" if merged else "parts"
    with _logger(offline, tmp_path / name, batch_size=100, compact_on_close=merged) as logger:
      for lo in range(0, 500, 100):
        logger.log_batch(records[lo:lo + 100], aggs[lo:lo + 100])
        logger.drain()  # one part per bucket per batch
    code = diff.run(["--offline", offline, "--production", str(tmp_path / name),
                     "--output_dir", str(tmp_path / f"out_{name}")])
    report = json.load(open(tmp_path / f"out_{name}" / "report.json", encoding="utf-8"))
    assert report["buckets"]["compared"] == 16 and code == report["exit_code"]
    assert report["records"]["identical"] == report["records"]["matched_keys"] == 500
    assert report["records"]["divergent"] == 0 and report["records"]["offline_only"] == 14502
    assert sum(report["first_divergent_stage"].values()) == 0
    reports[name] = report
  parts = {name: glob.glob(str(tmp_path / name / "feature_log" / "*.parquet"))
           for name in reports}
  listed = sum(len(b["parts"]) for b in _meta(str(tmp_path / "parts"))["log"]["buckets"])
  assert len(parts["parts"]) == listed > 4 * 16  # most buckets have a part from every batch
  assert len(parts["merged"]) == 16  # one part per bucket
  assert _without_paths(reports["parts"]) == _without_paths(reports["merged"])


def _without_paths(report):
  """A report with the production directory left out: what the diff found."""
  text = json.dumps(report, sort_keys=True)
  return re.sub(r'"[^"]*/(parts|merged)\b[^"]*"', '"DIR"', text)


def test_a_wrong_online_aggregate_is_at_window_with_the_online_store_as_the_suspect(
    offline, taxi, tmp_path):
  """Serving's online store counts one trip too many for every 7th record: those records part
  at window, the model sees another count, and the suspect is what the logger records it was
  given, as ingest records a serving log's: the aggregates came from the online store
  (source.side_columns.aggregates), for exactly those records."""
  from replay.diff import job as diff
  records, aggs = _small(taxi, 700)
  wrong = [dict(a) for a in aggs]
  for i in range(0, len(wrong), 7):
    wrong[i][online_store.AGG] += 1
  with _logger(offline, tmp_path / "log") as logger:
    logger.log_batch(records, wrong)
  code = diff.run(["--offline", offline, "--production", str(tmp_path / "log"),
                   "--output_dir", str(tmp_path / "out"), "--scope", "production"])
  report = json.load(open(tmp_path / "out" / "report.json", encoding="utf-8"))
  changed = len(range(0, len(wrong), 7))
  assert code == 1
  assert {s: n for s, n in report["first_divergent_stage"].items() if n} == {"window": changed}
  assert report["reaches_model"]["window"] == changed == report["records"]["divergent"]
  assert [(c["field"], c["offline"], c["production"], c["records"])
          for c in report["suspected_causes"] if c["stage"] == "window"] == [
      ("source.side_columns.aggregates", {}, {online_store.AGG: online_store.AGG}, changed)]
  assert report["unexplained"] == []
  # Both aggregate values, as each side had them before TFT: production's one more.
  shown = [s["aggregates"][online_store.AGG] for s in report["samples"]["divergent"]]
  assert shown and all(b == a + 1 for a, b in shown)
