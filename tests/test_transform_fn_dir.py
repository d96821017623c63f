"""pipelines.features --transform_fn_dir: transforming with a given transform_fn (production's
artifacts) instead of analysing the input, on the taxi sample; its usage errors."""
import glob
import hashlib
import json
import os

import pytest

from pipelines import common
from pipelines import features as job
from replay.diff import job as diff
from tests.conftest import ROOT, TAXI_CSV, TAXI_SCHEMA, features, ingest

OFFLINE = os.path.join(ROOT, "profiles", "offline.yaml")
CHANGED_ROWS = 200


def _hashes(root, *subs):
  return {os.path.relpath(p, root): hashlib.sha256(open(p, "rb").read()).hexdigest()
          for sub in subs for p in sorted(glob.glob(os.path.join(root, sub, "**"),
                                                    recursive=True)) if os.path.isfile(p)}


def _meta(root):
  with open(os.path.join(root, "run_metadata.json"), encoding="utf-8") as f:
    return json.load(f)


def _analyze_match(offline, production, out):
  """Whether replay.diff finds the two runs' analyze stages equal (its plan, not a run)."""
  options, _, _ = common.job_options(["--offline", offline, "--production", production,
                                      "--output_dir", str(out)], diff.DiffOptions, False)
  return diff.plan_diff(common.flags_of(diff.DiffFlags, options, diff.DiffOptions)) \
      .context.analyze_match


def test_replaying_a_runs_own_transform_fn_reproduces_it_byte_for_byte(taxi_features, taxi_runs,
                                                                       tmp_path):
  a = taxi_features["direct"]
  b = features(taxi_runs["direct"], tmp_path / "b", "--transform_fn_dir",
               os.path.join(a, "transform_fn"))
  assert _hashes(b, "feature_log", "transformed") == _hashes(a, "feature_log", "transformed")
  assert len(_hashes(b, "feature_log", "transformed")) == 32
  # the run folder holds a byte-exact copy of the transform_fn it used
  assert _hashes(b, "transform_fn") == _hashes(a, "transform_fn")
  meta_a, meta_b = _meta(a), _meta(b)
  assert meta_b["analyze"] == meta_a["analyze"] and meta_b["log"] == meta_a["log"]
  assert meta_a["transform_fn"]["source"] is None
  assert meta_b["transform_fn"] == {"source": os.path.join(a, "transform_fn"),
                                    "digest": meta_a["transform_fn"]["digest"]}
  code = diff.run(["--offline", a, "--production", b, "--output_dir", str(tmp_path / "d")])
  report = json.load(open(tmp_path / "d" / "report.json", encoding="utf-8"))
  assert code == 0 and report["records"]["divergent"] == 0
  assert report["records"]["identical"] == 15002


def _changed_csv(tmp_path):
  """The taxi sample with the fare of its first CHANGED_ROWS records raised by 100."""
  lines = open(TAXI_CSV, encoding="utf-8").read().splitlines(keepends=True)
  for i in range(1, CHANGED_ROWS + 1):
    area, fare, rest = lines[i].split(",", 2)
    lines[i] = f"{area},{float(fare or 0) + 100},{rest}"
  path = tmp_path / "changed.csv"
  path.write_text("".join(lines), encoding="utf-8")
  return str(path)


@pytest.mark.slow
def test_replay_on_other_data_keeps_the_analyze_stage(taxi_features, tmp_path):
  a = taxi_features["direct"]
  changed = ingest(tmp_path / "ingest", "--num_shards", "4", "--schema", TAXI_SCHEMA,
                   inputs=_changed_csv(tmp_path))
  replayed = features(changed, tmp_path / "replayed", "--transform_fn_dir",
                      os.path.join(a, "transform_fn"))
  analysed = features(changed, tmp_path / "analysed")
  assert _meta(replayed)["analyze"] == _meta(a)["analyze"]
  assert _meta(analysed)["analyze"]["fingerprint"] != _meta(a)["analyze"]["fingerprint"]
  assert _meta(analysed)["analyze"]["definition"] == _meta(a)["analyze"]["definition"]
  assert _analyze_match(a, replayed, tmp_path / "d1")
  assert not _analyze_match(a, analysed, tmp_path / "d2")


def _module(tmp_path, monkeypatch, name, aggregates):
  """A feature module for the taxi dataset with other windowed aggregates (importable)."""
  (tmp_path / f"{name}.py").write_text(
      "from transforms.taxi import EVENT_TIME_COLUMN, preprocessing_fn  # noqa: F401\n"
      f"WINDOWED_AGGREGATES = {aggregates!r}\n", encoding="utf-8")
  monkeypatch.syspath_prepend(str(tmp_path))
  return name


@pytest.mark.parametrize("case, message", [
    ("missing", r"no_such: not a TF Transform output \(no transform_fn/saved_model.pb"),
    ("feature_log", r"feature_log: not a TF Transform output \(no transform_fn/saved_model.pb\)$"),
    ("run_folder", r"not a TF Transform output \(no transform_fn/saved_model.pb\); a features "
                   r"run's output: pass .*/transform_fn$"),
    ("no_aggregate", r"its inputs do not match the dataset \+ aggregates: it takes input\(s\) "
                     r"area_trips_in_window that the dataset \+ aggregates lack$"),
    ("renamed", r"takes input\(s\) area_trips_in_window .*; it does not take trips$"),
], ids=["missing", "feature_log", "run_folder", "no_aggregate", "renamed"])
def test_transform_fn_dir_that_does_not_fit_is_a_one_line_usage_error(
    taxi_features, taxi_runs, tmp_path, monkeypatch, case, message):
  a = taxi_features["direct"]
  fn_dir = {"missing": str(tmp_path / "no_such"),
            "feature_log": os.path.join(a, "feature_log"),
            "run_folder": a}.get(case, os.path.join(a, "transform_fn"))
  module = "transforms.taxi"
  if case == "no_aggregate":
    module = _module(tmp_path, monkeypatch, "taxi_no_aggregate", [])
  elif case == "renamed":
    module = _module(tmp_path, monkeypatch, "taxi_renamed", [
        {"name": "trips", "group_by": "pickup_community_area", "fn": "count"}])
  out = tmp_path / "out"
  with pytest.raises(common.UsageError, match=message) as e:
    job.run(["--input_dir", taxi_runs["direct"], "--output_dir", str(out), "--profile",
             OFFLINE, "--transform_module", module, "--transform_fn_dir", fn_dir])
  assert "\n" not in str(e.value)
  assert not out.exists()


def test_verify_covers_the_whole_run_and_a_damaged_transform_fn_is_never_applied(
    taxi_runs, taxi_features, tmp_path):
  """transformed/ and transform_fn/ are listed with their sha256 in the run metadata: verify
  names a changed, truncated, deleted or extra file there, and --transform_fn_dir and the
  production logger refuse a transform_fn whose vocabulary was edited or deleted, naming the
  file, before they load it."""
  import shutil
  from replay import verify_log
  from replay.logger import ProductionLogger
  run = str(tmp_path / "run")
  shutil.copytree(taxi_features["direct"], run)
  listed = {e["path"] for e in _meta(run)["files"]}
  assert listed == set(_hashes(run, "transform_fn", "transformed"))  # every file, none more
  assert verify_log.verify(run) == []
  vocab = "transform_fn/transform_fn/assets/payment_type"
  example = sorted(p for p in listed if p.startswith("transformed/"))[0]
  with open(os.path.join(run, vocab), "a", encoding="utf-8") as f:
    f.write("Bitcoin\n")  # an edited vocabulary
  data = bytearray(open(os.path.join(run, example), "rb").read())
  data[len(data) // 2] ^= 1
  open(os.path.join(run, example), "wb").write(bytes(data))
  os.remove(os.path.join(run, "transform_fn/transform_fn/saved_model.pb"))
  open(os.path.join(run, "transformed", "stray.tfrecord"), "wb").write(b"x")
  problems = verify_log.verify(run)
  assert problems == [
      f"{os.path.join(run, vocab)}: longer than recorded ("
      f"{os.path.getsize(os.path.join(run, vocab))} bytes, run_metadata.json says "
      f"{next(e['bytes'] for e in _meta(run)['files'] if e['path'] == vocab)})",
      f"{os.path.join(run, 'transform_fn/transform_fn/saved_model.pb')}: missing "
      "(run_metadata.json lists it)",
      f"{os.path.join(run, example)}: content changed (sha256 differs from run_metadata.json)",
      f"{os.path.join(run, 'transformed/stray.tfrecord')}: extra file not in "
      "run_metadata.json's files"], problems
  fn_dir = os.path.join(run, "transform_fn")
  with pytest.raises(common.UsageError, match="payment_type: longer than recorded"):
    job.run(["--input_dir", taxi_runs["direct"], "--output_dir", str(tmp_path / "replayed"),
             "--profile", OFFLINE, "--transform_module", "transforms.taxi",
             "--transform_fn_dir", fn_dir])
  assert not os.path.exists(tmp_path / "replayed")
  with pytest.raises(common.UsageError, match="payment_type: longer than recorded"):
    ProductionLogger.from_features_dir(run, str(tmp_path / "log"))
  assert not os.path.exists(tmp_path / "log")
