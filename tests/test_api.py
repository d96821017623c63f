"""The Python surface (replay/api.py) returns what the command line writes: the same report,
the report's own HTML for Jupyter, the manifest and the run metadata."""
import json
import os

import pytest

from pipelines import common
from replay import api
from replay.diff import job as diff
from tests.conftest import ROOT, TAXI_CSV, TAXI_SCHEMA


@pytest.mark.slow
def test_diff_returns_the_report_the_command_writes(taxi_features, tmp_path, capsys):
  offline, production = taxi_features["direct"], taxi_features["multi_processing"]
  code = diff.run(["--offline", offline, "--production", production, "--output_dir",
                   str(tmp_path / "cli"), "--samples", "3"])
  printed = capsys.readouterr().out
  report = api.diff(offline, production, str(tmp_path / "api"), samples=3)
  with open(tmp_path / "cli" / "report.json") as f:
    written = json.load(f)
  with open(tmp_path / "cli" / "report.html") as f:
    html = f.read()
  strip = lambda d: {k: v for k, v in d.items() if k != "sides"}  # the folders differ
  assert strip(report.to_dict()) == strip(written)
  assert report.exit_code == code
  assert report.summary() in printed
  assert report._repr_html_() == report.html and "<html" in report.html
  assert report.html.replace(str(tmp_path / "api"), "") == html.replace(str(tmp_path / "cli"),
                                                                         "")
  assert "divergent of" in repr(report)


def test_keyword_flags_become_the_command_line_dicts_included():
  """A dict repeats its flag as key=value (a tuple value joined by ':'): per-feature
  tolerances as docs/replay.md gives them."""
  from replay.api import _argv
  assert _argv({"tolerance": {"fare_z": (0.01, 0), "trip_miles": "0.001:0"}, "samples": 3,
                "verify_logs": True, "no_verify_logs": False, "scope": None}, ["--x=1"]) == [
      "--tolerance", "fare_z=0.01:0", "--tolerance", "trip_miles=0.001:0", "--samples", "3",
      "--verify_logs", "--x=1"]


def test_diff_takes_per_feature_tolerances(taxi_features, tmp_path):
  report = api.diff(taxi_features["direct"], taxi_features["direct"], str(tmp_path / "t"),
                    tolerance={"fare_z": (0.5, 0)})
  assert report.exit_code == 0
  assert report.to_dict()["tolerance"]["features"]["fare_z"]["abs"] == 0.5
  with pytest.raises(common.UsageError, match="no_such_feature"):
    api.diff(taxi_features["direct"], taxi_features["direct"], str(tmp_path / "u"),
             tolerance={"no_such_feature": (1, 0)})


@pytest.mark.slow
def test_ingest_and_features_return_their_manifest_and_metadata(tmp_path):
  manifest = api.ingest(TAXI_CSV, str(tmp_path / "ingest"), schema=TAXI_SCHEMA, num_shards=2)
  with open(tmp_path / "ingest" / "manifest.json") as f:
    assert manifest == json.load(f)
  assert manifest["rows"]["written"] == 15002
  with pytest.raises(common.UsageError, match="unknown flag"):
    api.ingest(TAXI_CSV, str(tmp_path / "x"), num_shard=2)
  meta = api.features(str(tmp_path / "ingest"), str(tmp_path / "features"),
                      os.path.join(ROOT, "profiles", "offline.yaml"), log_buckets=4,
                      transform_module="transforms.taxi")
  with open(tmp_path / "features" / "run_metadata.json") as f:
    assert meta == json.load(f)
  assert meta["log"]["num_buckets"] == 4


@pytest.mark.slow
def test_a_feature_module_given_by_its_file_path(taxi_runs, taxi_features, tmp_path):
  """--transform_module takes a .py path as well as a module name: the same features, and the
  run metadata records the file's absolute path."""
  with open(os.path.join(ROOT, "transforms", "features", "taxi.py")) as f:
    source = f.read()
  path = tmp_path / "my_taxi_features.py"
  path.write_text(source)
  meta = api.features(taxi_runs["direct"], str(tmp_path / "out"),
                      os.path.join(ROOT, "profiles", "offline.yaml"),
                      transform_module=os.path.relpath(path))
  with open(os.path.join(taxi_features["direct"], "run_metadata.json")) as f:
    named = json.load(f)
  assert meta["transform_module"] == str(path)
  assert meta["log"]["buckets"] == named["log"]["buckets"]
  assert meta["analyze"]["fingerprint"] == named["analyze"]["fingerprint"]


_QUIET = """
import sys
from replay import api
from replay.logger import ProductionLogger
from tests import online_store
from tests.conftest import TAXI_CSV
offline, log_dir, out = sys.argv[1:]
records, aggs = online_store.records_and_counts(TAXI_CSV, offline)
with ProductionLogger.from_features_dir(offline, log_dir) as logger:
  logger.log_batch(records[:200], aggs[:200])
api.diff(offline, offline, out)
"""


@pytest.mark.slow
def test_the_logger_and_the_api_write_nothing_to_stderr(taxi_features, tmp_path):
  """A library is quiet: TensorFlow's native start-up lines (cuInit, oneDNN, cudart) never reach
  the stderr of a process that logs and diffs through the library (a fresh one, where they would
  be printed)."""
  import subprocess
  import sys
  result = subprocess.run([sys.executable, "-c", _QUIET, taxi_features["direct"],
                           str(tmp_path / "log"), str(tmp_path / "diff")], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
  assert result.returncode == 0 and result.stderr == "", result.stderr[-3000:]
  assert os.path.exists(tmp_path / "diff" / "report.json")


def test_tables_come_as_dataframes(tmp_path, offline, taxi):
  """read_log gives a feature log back as a DataFrame; Report.records() the sampled records;
  ProductionLogger.log_table takes a DataFrame as it takes an Arrow table."""
  import pandas as pd
  import pyarrow.csv as pacsv
  from replay import api
  from tests.conftest import TAXI_CSV
  from tests.online_store import AGG
  from tests.test_logger import _logger
  frame = api.read_log(offline)
  assert isinstance(frame, pd.DataFrame) and len(frame) == 15002
  assert {"key", "fp_raw", "value__fare_z"} <= set(frame.columns)
  table = pacsv.read_csv(TAXI_CSV, convert_options=pacsv.ConvertOptions(
      strings_can_be_null=True)).slice(0, 50)
  counts = {AGG: [a[AGG] for a in taxi[1][:50]]}
  logged = {}
  for name, given in (("arrow", table), ("pandas", table.to_pandas())):
    with _logger(offline, tmp_path / name) as logger:
      logger.log_table(given, counts)
    logged[name] = api.read_log(str(tmp_path / name)).sort_values("key").reset_index(drop=True)
  assert len(logged["pandas"]) == 50
  assert logged["pandas"][["key", "fp_raw", "fp_transform"]].equals(
      logged["arrow"][["key", "fp_raw", "fp_transform"]])
  report = api.diff(offline, offline, str(tmp_path / "d"))
  assert list(report.records().columns) == ["key", "class", "first_stage", "cause", "features"]
