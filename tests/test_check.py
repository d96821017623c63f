"""skewtrace check: three nights over logs made from the taxi sample (clean, a fault, clean),
the history table, exit codes, reruns, and configuration errors."""
import json
import os
import shutil
import sqlite3

import pytest

from pipelines import common
from replay import check
from tests import logfaults

NIGHTS = ["2026-11-30", "2026-12-01", "2026-12-02"]


def _config(tmp_path, **thresholds):
  th = {"divergent_fraction": 0.001, "stages": {"window": 0.0}}
  th.update(thresholds)
  path = tmp_path / f"nightly-{len(list(tmp_path.glob('nightly-*.yaml')))}.yaml"
  path.write_text(json.dumps({  # JSON is YAML
      "offline": str(tmp_path / "logs" / "offline" / "{date}"),
      "production": str(tmp_path / "logs" / "production" / "{date}"),
      "reports": str(tmp_path / "reports"), "history": str(tmp_path / "history.sqlite"),
      "thresholds": th}))
  return str(path)


@pytest.fixture(scope="module")
def nights(taxi_features, tmp_path_factory):
  """Dated log partitions: night 2's production side has 1% of records' windows moved."""
  root = tmp_path_factory.mktemp("nightly")
  moved = 0
  for i, night in enumerate(NIGHTS):
    shutil.copytree(taxi_features["direct"], root / "logs" / "offline" / night)
    prod = root / "logs" / "production" / night
    if i == 1:
      moved = logfaults.edit_log(taxi_features["direct"], str(prod), logfaults.window_shift(100))
    else:
      shutil.copytree(taxi_features["direct"], prod)
  return root, moved


def _history(root):
  with sqlite3.connect(root / "history.sqlite") as db:
    rows = db.execute("SELECT date, divergent, stage_window, exit_status, broken FROM nights "
                      "ORDER BY date").fetchall()
  return rows


def test_three_nights_clean_fault_clean(nights, capsys):
  root, moved = nights
  assert moved > 0
  config = _config(root)
  codes = [check.run(["--config", config, "--date", night]) for night in NIGHTS]
  assert codes == [0, 1, 0]
  out = capsys.readouterr().out
  # The shifted windows change no feature value: latent records, so the divergent fraction
  # holds and the stage threshold is what breaks.
  assert "broken: divergent fraction" not in out and "broken: stage window" in out
  rows = _history(root)
  assert [r[0] for r in rows] == NIGHTS
  assert [(r[1], r[2], r[3]) for r in rows] == [(0, 0, 0), (0, moved, 1), (0, 0, 0)]
  assert any("stage window" in b for b in json.loads(rows[1][4]))
  for night in NIGHTS:
    assert os.path.exists(root / "reports" / night / "report.json")
  html = (root / "reports" / NIGHTS[2] / "report.html").read_text()
  for night in NIGHTS:  # the trend chart of the last night shows all three
    assert night in html


def test_rerunning_a_night_replaces_its_row(nights):
  from replay import api
  root, _ = nights
  strict, loose = _config(root), _config(root, divergent_fraction=1.0, stages={})
  assert check.run(["--config", strict, "--date", NIGHTS[1]]) == 1
  before = len(_history(root))
  code, report = api.check(loose, NIGHTS[1])  # looser thresholds now; the Python surface
  assert code == 0 and report.path == str(root / "reports" / NIGHTS[1] / "report.html")
  assert report.to_dict() == json.loads((root / "reports" / NIGHTS[1] / "report.json").read_text())
  assert NIGHTS[0] in report.html  # the night's page with its trend
  rows = _history(root)
  assert len(rows) == before
  assert [r[3] for r in rows if r[0] == NIGHTS[1]] == [0]


def test_feature_thresholds_and_beam_flags_reach_the_diff(nights, capsys):
  root, _ = nights
  config = _config(root, divergent_fraction=1.0, stages={}, features={"fare_z": 0.0},
                   drift={"fare_z": 1.0})
  # window_shift moves windows only: the features' values agree, so these thresholds hold.
  assert check.run(["--config", config, "--date", NIGHTS[1],
                    "--direct_running_mode=multi_processing", "--direct_num_workers=2"]) == 0
  # A misspelt threshold feature is refused before the diff: the night's report stays as it was.
  page = root / "reports" / NIGHTS[1] / "report.json"
  before = (page.read_bytes(), os.stat(page).st_mtime_ns)
  with pytest.raises(common.UsageError, match="lack: fare_zz"):
    check.run(["--config", _config(root, features={"fare_zz": 0.0}), "--date", NIGHTS[1]])
  assert (page.read_bytes(), os.stat(page).st_mtime_ns) == before
  with pytest.raises(common.UsageError, match="unknown flag"):
    check.run(["--config", config, "--date", NIGHTS[1], "--runer=DirectRunner"])
  with pytest.raises(common.UsageError, match="not its flags"):
    check.run(["--config", config, "--date", NIGHTS[1], "--output_dir", str(root / "x")])


def test_a_missing_partition_is_an_error_naming_its_path(nights, taxi_features):
  root, _ = nights
  with pytest.raises(common.UsageError, match=r"no offline partition at .*2026-12-03"):
    check.run(["--config", _config(root), "--date", "2026-12-03"])
  shutil.copytree(taxi_features["direct"], root / "logs" / "offline" / "2026-12-03")
  with pytest.raises(common.UsageError, match=r"no production partition at .*2026-12-03"):
    check.run(["--config", _config(root), "--date", "2026-12-03"])


@pytest.mark.parametrize("text,message", [
    ("offline: a/{date}\n", "field 'production' is required"),
    ("offline: a\nproduction: b/{date}\nreports: r\nhistory: h\nthresholds: "
     "{divergent_fraction: 0.1}\n", "template over the date"),
    ("offline: a/{date}\nproduction: b/{date}\nreports: r\nhistory: h\nthresholds: {}\n",
     "divergent_fraction is required"),
    ("offline: a/{date}\nproduction: b/{date}\nreports: r\nhistory: h\nthresholds: "
     "{divergent_fraction: 2}\n", r"must be a number in \[0, 1\]"),
    ("offline: a/{date}\nproduction: b/{date}\nreports: r\nhistory: h\nthresholds: "
     "{divergent_fraction: 0.1, stages: {windw: 0}}\n", "unknown stage"),
    ("offline: a/{date}\nproduction: b/{date}\nreports: r\nhistory: h\nthresholds: "
     "{divergent_fraction: 0.1}\nextra: 1\n", "unknown field"),
    ("offline: a/{date}\nproduction: b/{date}\nreports: r\nhistory: h\nthresholds: "
     "{divergent_fracton: 0.1}\n", r"unknown threshold\(s\) divergent_fracton \(did you mean "
                                   r"divergent_fraction\?\)$"),
    ("offline: a/{date}\nproduction: b/{date}\nreports: r\nhistroy: h\nthresholds: "
     "{divergent_fraction: 0.1}\n", r"unknown field\(s\) histroy \(did you mean history\?\)"),
    ("offline: a/{region}/{date}\nproduction: b/{date}\nreports: r\nhistory: h\n"
     "thresholds: {divergent_fraction: 0.1}\n", "bad template"),
    ("offline: a/{date}\nproduction: b/{date}\nreports: r\nhistory: h\nthresholds: "
     "{divergent_fraction: 0.1}\ntolerance: {abs: fast}\n", "tolerance.abs must be"),
    ("offline: a/{date}\nproduction: b/{date}\nreports: r\nhistory: h\nthresholds: "
     "{divergent_fraction: 0.1}\ntolerance: {features: [1]}\n", "must be a mapping"),
    ("offline: a/{date}\nproduction: b/{date}\nreports: r\nhistory: gs://b/h.sqlite\n"
     "thresholds: {divergent_fraction: 0.1}\n", "local file"),
])
def test_bad_config_is_a_usage_error(text, message):
  with pytest.raises(common.UsageError, match=message):
    check.load_config(text)


def test_bad_date_is_a_usage_error(nights):
  root, _ = nights
  with pytest.raises(common.UsageError, match="YYYY-MM-DD"):
    check.run(["--config", _config(root), "--date", "12/01/2026"])


def test_per_feature_tolerance_without_rel_keeps_the_default_rel():
  config = check.load_config(
      "offline: a/{date}\nproduction: b/{date}\nreports: r\nhistory: h\nthresholds: "
      "{divergent_fraction: 0.1}\ntolerance: {abs: 0.5, rel: 0.01, features: {fare_z: "
      "{abs: 0.1}, tips: {rel: 0.2}}}\n")
  flags = check._diff_flags(config, "o", "p", "out")  # pylint: disable=protected-access
  assert flags["tolerance"] == ["fare_z=0.1", "tips=0.5:0.2"]
  assert flags["rel_tol"] == 0.01 and flags["abs_tol"] == 0.5


def _report(**features):
  """A minimal report dict: 100 matched records, none divergent, the given feature entries."""
  return {"divergent_fraction": 0.0, "first_divergent_stage": {},
          "records": {"matched_keys": 100, "offline_only": 0, "production_only": 0},
          "features": {n: {"mismatch_rate": rate} for n, (rate, _) in features.items()},
          "drift": {n: d for n, (_, d) in features.items() if d is not None}}


def test_evaluate_breaks_feature_and_drift_thresholds_by_name():
  th = {"divergent_fraction": 0.1, "stages": {}, "features": {"fare_z": 0.01},
        "drift": {"fare_z": 0.05, "company_id": 0.2}}
  report = _report(fare_z=(0.02, {"jensen_shannon": 0.07}), company_id=(0.0, {"linf": 0.1}))
  assert check.evaluate(report, th) == ["feature fare_z: mismatch rate 0.02 > 0.01",
                                        "feature fare_z: drift 0.07 > 0.05"]
  held = _report(fare_z=(0.01, {"jensen_shannon": 0.05}), company_id=(0.0, None))
  assert check.evaluate(held, th) == []  # at the limit holds; no drift entry: nothing drifted


def test_a_feature_threshold_counts_what_serving_fed_the_model():
  """A feature whose transformed values all match but whose served values (what the model got)
  differ in 3 of its 200 records breaks a 0.01 threshold: 3 / 200 = 0.015."""
  th = {"divergent_fraction": 1.0, "stages": {}, "features": {"fare_z": 0.01}, "drift": {}}
  report = _report(fare_z=(0.0, None))
  report["features"]["fare_z"].update(match=190, within_tolerance=10, served_mismatch=3)
  assert check.evaluate(report, th) == ["feature fare_z: served mismatch rate 0.015 > 0.01"]
  report["features"]["fare_z"]["served_mismatch"] = 2  # 0.01: at the limit holds
  assert check.evaluate(report, th) == []


@pytest.mark.parametrize("make,message", [
    (lambda p: p.mkdir(), "is a folder, not an SQLite file"),
    (lambda p: p.write_text("not a database, a text file\n" * 200), "is not an SQLite file"),
    (lambda p: sqlite3.connect(p).execute("CREATE TABLE nights (date TEXT)").connection.commit(),
     "other columns"),
])
def test_a_history_that_cannot_take_the_night_is_refused_before_the_diff(nights, tmp_path,
                                                                         make, message):
  """Checked before the diff runs: the night's report is not written (nor replaced)."""
  root, _ = nights
  history = tmp_path / "history.sqlite"
  make(history)
  config = json.loads(open(_config(root)).read())
  config.update(history=str(history), reports=str(tmp_path / "reports"))
  path = tmp_path / "nightly.yaml"
  path.write_text(json.dumps(config))
  with pytest.raises(common.UsageError, match=message):
    check.run(["--config", str(path), "--date", NIGHTS[0]])
  assert not (tmp_path / "reports").exists()
