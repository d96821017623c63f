"""replay.rerun end to end on the taxi sample (a window-offset change; the same profile twice), and its flags."""
import json
import os

import pytest
import yaml

from pipelines import common
from replay import rerun
from tests.conftest import ROOT, TAXI_CSV, TAXI_SCHEMA

pytestmark = pytest.mark.slow  # the end-to-end tier (pytest.ini)

OFFLINE = os.path.join(ROOT, "profiles", "offline.yaml")
TAXI_ROWS = 15002  # data lines of data/chicago_taxi/data.csv (tests/test_features.py)


def _profile(tmp_path, name, **windowing):
  doc = yaml.safe_load(open(OFFLINE, encoding="utf-8"))
  doc["windowing"].update(windowing)
  path = tmp_path / name
  path.write_text(yaml.safe_dump(doc), encoding="utf-8")
  return str(path)


def _argv(out, profile_b, *extra, profile_a=OFFLINE):
  return ["--input", TAXI_CSV, "--schema", TAXI_SCHEMA, "--transform_module", "transforms.taxi",
          "--profile_a", profile_a, "--profile_b", profile_b, "--output_dir", str(out)] + \
      list(extra)


def _report(out):
  with open(os.path.join(out, "diff", "report.json"), encoding="utf-8") as f:
    return json.load(f)


@pytest.fixture(scope="module")
def offset_rerun(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("rerun_offset")
  out = tmp / "out"
  code = rerun.run(_argv(out, _profile(tmp, "offset.yaml", offset_seconds=1800),
                         "--num_shards", "2"))
  return code, str(out)


@pytest.fixture(scope="module")
def same_rerun(tmp_path_factory):
  """The same profile on both sides, run through the Python surface (replay.api.rerun): its
  Report is the one the command wrote."""
  from replay import api
  out = tmp_path_factory.mktemp("rerun_same") / "out"
  report = api.rerun(TAXI_CSV, str(out), OFFLINE, OFFLINE, schema=TAXI_SCHEMA,
                     transform_module="transforms.taxi")
  assert report.to_dict() == _report(str(out)) and report.path.endswith("diff/report.html")
  return report.exit_code, str(out)


@pytest.fixture(scope="module")
def replay_rerun(taxi_features, tmp_path_factory):
  """Side B transforms with the taxi features run's transform_fn, side A analyses: the same
  snapshot (ingested as that run's input was), the same profile."""
  out = tmp_path_factory.mktemp("rerun_replay") / "out"
  fn_dir = os.path.join(taxi_features["direct"], "transform_fn")
  return rerun.run(_argv(out, OFFLINE, "--num_shards", "4", "--transform_fn_dir_b",
                         fn_dir)), str(out), fn_dir


def test_window_offset_change_is_attributed_to_the_window_stage(offset_rerun):
  code, out = offset_rerun
  assert code == 1
  report = _report(out)
  firsts = report["first_divergent_stage"]
  # a window start is a multiple of 3600 on one side and 1800 past one on the other: every
  # record's window differs, nothing before it does
  assert firsts["raw"] == 0 and firsts["parse"] == 0
  assert firsts["window"] == TAXI_ROWS == report["records"]["divergent"]
  assert report["records"]["matched_keys"] == TAXI_ROWS and report["exit_code"] == 1
  causes = [c for c in report["suspected_causes"] if c["field"].endswith("offset_seconds")]
  assert [(c["stage"], c["offline"], c["production"]) for c in causes] == [("window", 0, 1800)]


def test_rerun_writes_one_ingest_two_feature_runs_and_the_diff(offset_rerun):
  _, out = offset_rerun
  manifest = json.load(open(os.path.join(out, "ingest", "manifest.json"), encoding="utf-8"))
  assert len([s for s in manifest["shards"] if s["format"] == "parquet"]) == 2  # --num_shards
  metas = [json.load(open(os.path.join(out, side, "run_metadata.json"), encoding="utf-8"))
           for side in ("a", "b")]
  assert [m["profile"]["windowing"]["offset_seconds"] for m in metas] == [0, 1800]
  assert metas[0]["input"]["content_digest"] == metas[1]["input"]["content_digest"] == \
      manifest["content_digest"]
  page = open(os.path.join(out, "diff", "report.html"), encoding="utf-8").read()
  assert 'data-stage="window" data-count="%d"' % TAXI_ROWS in page


def test_the_same_profile_twice_shows_no_divergence(same_rerun):
  code, out = same_rerun
  assert code == 0
  report = _report(out)
  assert report["records"]["divergent"] == 0 and report["records"]["identical"] == TAXI_ROWS
  assert set(report["first_divergent_stage"].values()) == {0}
  assert report["suspected_causes"] == []


def test_a_side_given_a_transform_fn_replays_it(replay_rerun):
  code, out, fn_dir = replay_rerun
  report = _report(out)
  assert code == 0 and report["records"]["divergent"] == 0
  metas = [json.load(open(os.path.join(out, side, "run_metadata.json"), encoding="utf-8"))
           for side in ("a", "b")]
  assert metas[0]["transform_fn"]["source"] is None
  assert metas[1]["transform_fn"]["source"] == fn_dir
  assert metas[0]["analyze"] == metas[1]["analyze"]


def test_flags_are_routed_to_the_jobs_that_own_them(tmp_path):
  dirs, options, flags = rerun._plan(_argv(  # pylint: disable=protected-access
      tmp_path / "out", OFFLINE, "--tolerance", "fare=0.1:0", "--tolerance=tips=0:0.01",
      "--max_divergent_fraction", "0.5", "--log_buckets=4", "--direct_num_workers=2",
      "--runner", "DirectRunner", "--overwrite"))
  assert dirs == {d: str(tmp_path / "out" / d) for d in ("ingest", "a", "b", "diff")}
  ingest, b, d = flags["ingest"], flags["b"], flags["diff"]
  assert (ingest.input, ingest.schema, ingest.output_dir, ingest.overwrite) == \
      (TAXI_CSV, TAXI_SCHEMA, dirs["ingest"], True)
  assert ingest.formats == "tfrecord,parquet" and ingest.num_shards == 0  # the job's defaults
  assert (b.input_dir, b.output_dir, b.profile, b.transform_module, b.log_buckets) == \
      (dirs["ingest"], dirs["b"], OFFLINE, "transforms.taxi", 4)
  assert flags["a"].profile == OFFLINE and flags["a"].output_dir == dirs["a"]
  assert flags["a"].transform_fn_dir is None and b.transform_fn_dir is None
  fn_dir = tmp_path / "fn"
  for sub in ("transform_fn/saved_model.pb", "transformed_metadata/schema.pbtxt"):
    (fn_dir / sub).parent.mkdir(parents=True, exist_ok=True)
    (fn_dir / sub).write_text("")
  _, _, flags = rerun._plan(_argv(  # pylint: disable=protected-access
      tmp_path / "out", OFFLINE, "--transform_fn_dir_b", str(fn_dir)))
  assert flags["a"].transform_fn_dir is None and flags["b"].transform_fn_dir == str(fn_dir)
  assert (d.offline, d.production, d.output_dir) == (dirs["a"], dirs["b"], dirs["diff"])
  assert d.tolerance == ["fare=0.1:0", "tips=0:0.01"] and d.max_divergent_fraction == 0.5
  from apache_beam.options.pipeline_options import DirectOptions, StandardOptions
  assert options.view_as(StandardOptions).runner == "DirectRunner"
  assert options.view_as(DirectOptions).direct_num_workers == 2


@pytest.mark.parametrize("extra, message", [
    (["--profle_b", "x"], "unknown flag"),
    (["--profile", OFFLINE], "sets --profile itself"),
    (["--offline", "/tmp"], "sets --offline itself"),
    (["--formats", "tfrecord"], "sets --formats itself"),
    (["--transform_fn_dir", "/tmp"], "sets --transform_fn_dir itself"),  # _a / _b per side
])
def test_flags_that_rerun_does_not_take_are_usage_errors(tmp_path, extra, message):
  out = tmp_path / "out"
  with pytest.raises(common.UsageError, match=message):
    rerun.run(_argv(out, OFFLINE, *extra))
  assert not out.exists()


def test_missing_or_bad_inputs_fail_before_any_job_runs(tmp_path):
  out = tmp_path / "out"
  argv = _argv(out, OFFLINE)
  i = argv.index("--profile_b")
  with pytest.raises(common.UsageError, match="--profile_b is required"):
    rerun.run(argv[:i] + argv[i + 2:])
  bad = _profile(tmp_path, "bad.yaml", size_seconds=-5)
  with pytest.raises(common.UsageError, match="--profile_b .*bad.yaml"):
    rerun.run(_argv(out, bad))
  with pytest.raises(common.UsageError, match="--transform_module"):
    rerun.run(_argv(out, OFFLINE, "--transform_module", "transforms.no_such_module"))
  with pytest.raises(common.UsageError, match="lacks preprocessing_fn"):  # imports, not a module
    rerun.run(_argv(out, OFFLINE, "--transform_module", "transforms.spec.profile"))
  with pytest.raises(common.UsageError, match="--transform_fn_dir_a .*: not a TF Transform"):
    rerun.run(_argv(out, OFFLINE, "--transform_fn_dir_a", str(tmp_path / "no_fn")))
  assert not out.exists()
  out.mkdir()
  (out / "keep.txt").write_text("x")
  with pytest.raises(common.UsageError, match="not empty"):
    rerun.run(_argv(out, OFFLINE))
  assert os.listdir(out) == ["keep.txt"]


def test_help_lists_only_the_flags_rerun_takes():
  with pytest.raises(common.HelpRequested) as e:
    rerun.run(["--help"])
  text = str(e.value)
  for flag in ("--input", "--profile_a", "--profile_b", "--transform_fn_dir_a",
               "--transform_fn_dir_b", "--schema", "--key_columns",
               "--abs_tol", "--tolerance", "--max_divergent_fraction", "--output_dir"):
    assert flag in text, flag
  for flag in ("--input_dir", "--offline", "--production", "--formats", "--profile "):
    assert flag not in text, flag
