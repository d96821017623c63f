"""Every CLI, every bad input a user can hand it: one line on stderr, exit code 2, nothing written.

Each case runs the console script's entry point (replay.cli.main, in this process: one TF import
for the table) on a real bad input made here -- a missing or damaged file, a folder of the wrong
kind, an impossible flag value -- and checks, independently of the code under test: the exit
code is 2; stderr is exactly one line, `error: ...`, naming what is wrong; stdout is empty; the
output folder was not created (or, when the case hands an existing one, is byte-identical), and
no input was changed.
"""
import hashlib
import os
import shutil
import sys

import pytest
import yaml

from replay import cli
from tests.conftest import ROOT, TAXI_CSV, TAXI_SCHEMA

PROFILE = os.path.join(ROOT, "profiles", "offline.yaml")


@pytest.fixture(scope="module")
def files(taxi_runs, taxi_features, tmp_path_factory):
  """Good inputs (the session's taxi ingest and features) and bad files made from them (a file
  a.b is the placeholder {a_b})."""
  d = tmp_path_factory.mktemp("bad_input")
  out = {"dataset": taxi_runs["direct"], "log": taxi_features["direct"], "dir": d}
  (d / "empty").mkdir()
  (d / "garbage.csv").write_bytes(b"\xff\xfe\x00garbage\x00" * 50)
  (d / "header_only.csv").write_text("a,b,c\n")
  (d / "bad.pbtxt").write_text("feature { name: 'x' type: NOT_A_TYPE }\n")
  (d / "bad_profile.yaml").write_text("windowing: {size_seconds: -5}\n")
  (d / "not_yaml.yaml").write_text("windowing: [unclosed\n")
  (d / "a_file").write_text("not a folder\n")
  damaged_manifest = d / "damaged_manifest"
  shutil.copytree(taxi_runs["direct"], damaged_manifest)
  with open(damaged_manifest / "manifest.json", "r+b") as f:
    f.truncate(100)
  damaged_meta = d / "damaged_meta"
  shutil.copytree(taxi_features["direct"], damaged_meta)
  with open(damaged_meta / "run_metadata.json", "r+b") as f:
    f.truncate(50)
  damaged_bucket = d / "damaged_bucket"
  shutil.copytree(taxi_features["direct"], damaged_bucket)
  bucket = sorted(os.listdir(damaged_bucket / "feature_log"))[0]
  (damaged_bucket / "feature_log" / bucket).write_bytes(b"PAR1 not a parquet file PAR1")
  night = str(d / "nights" / "{date}")
  config = {"offline": night, "production": night, "reports": str(d / "reports"),
            "history": str(d / "history.sqlite"), "thresholds": {"divergent_fraction": 0.01}}
  (d / "unknown_field.yaml").write_text(yaml.safe_dump(dict(config, threshold=0.1)))
  (d / "bad_fraction.yaml").write_text(yaml.safe_dump(
      dict(config, thresholds={"divergent_fraction": 3})))
  (d / "missing_night.yaml").write_text(yaml.safe_dump(config))
  out.update({k.replace(".", "_"): str(d / k) for k in (
      "empty", "garbage.csv", "header_only.csv", "bad.pbtxt", "bad_profile.yaml",
      "not_yaml.yaml", "a_file", "damaged_manifest", "damaged_meta", "damaged_bucket",
      "unknown_field.yaml", "bad_fraction.yaml", "missing_night.yaml")})
  return out


# (subcommand, its flags with {placeholders} from `files` and {out}, a word the line must hold)
CASES = [
    ("ingest", ["--input", "{dir}/nowhere.csv", "--output_dir", "{out}"], "nowhere.csv"),
    ("ingest", ["--input", TAXI_CSV, "--output_dir", "{out}", "--num_shards", "-1"],
     "num_shards"),
    ("ingest", ["--input", "{garbage_csv}", "--output_dir", "{out}", "--input_format", "csv"],
     "garbage.csv"),
    ("ingest", ["--input", TAXI_CSV, "--output_dir", "{out}", "--schema", "{bad_pbtxt}"],
     "bad.pbtxt"),
    ("ingest", ["--input", TAXI_CSV, "--output_dir", "{out}", "--schema", "{dir}/no.pbtxt"],
     "no.pbtxt"),
    ("ingest", ["--input", TAXI_CSV, "--output_dir", "{a_file}"], "a_file"),
    ("ingest", ["--input", TAXI_CSV, "--output_dir", "{out}", "--input_format", "xml"],
     "input_format"),
    ("features", ["--input_dir", "{empty}", "--output_dir", "{out}", "--profile", PROFILE],
     "empty"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile",
                  "{dir}/no_profile.yaml"], "no_profile.yaml"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile",
                  "{bad_profile_yaml}"], "windowing"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile",
                  "{not_yaml_yaml}"], "not_yaml.yaml"),
    ("features", ["--input_dir", "{damaged_manifest}", "--output_dir", "{out}", "--profile",
                  PROFILE], "manifest.json"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile", PROFILE,
                  "--log_buckets", "0"], "log_buckets"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile", PROFILE,
                  "--transform_module", "no.such.module"], "no.such.module"),
    ("verify", ["{dir}/nowhere"], "nowhere"),
    ("verify", ["{empty}"], "empty"),
    ("verify", ["{damaged_meta}"], "run_metadata.json"),
    ("diff", ["--offline", "{dir}/nowhere", "--production", "{log}", "--output_dir", "{out}"],
     "nowhere"),
    ("diff", ["--offline", "{log}", "--production", "{dataset}", "--output_dir", "{out}"],
     "production"),
    ("diff", ["--offline", "{log}", "--production", "{damaged_meta}", "--output_dir", "{out}"],
     "run_metadata.json"),
    ("diff", ["--offline", "{log}", "--production", "{damaged_bucket}", "--output_dir",
              "{out}"], "damaged_bucket"),
    ("diff", ["--offline", "{log}", "--production", "{log}", "--output_dir", "{out}",
              "--max_divergent_fraction", "2"], "max_divergent_fraction"),
    ("diff", ["--offline", "{log}", "--production", "{log}", "--output_dir", "{out}",
              "--abs_tol", "-1"], "abs_tol"),
    ("rerun", ["--input", "{dir}/nowhere.csv", "--output_dir", "{out}", "--profile_a", PROFILE,
               "--profile_b", PROFILE, "--schema", TAXI_SCHEMA], "nowhere.csv"),
    ("rerun", ["--input", TAXI_CSV, "--output_dir", "{out}", "--profile_a", PROFILE,
               "--profile_b", "{dir}/no_profile.yaml", "--schema", TAXI_SCHEMA],
     "no_profile.yaml"),
    ("check", ["--config", "{dir}/no_config.yaml"], "no_config.yaml"),
    ("check", ["--config", "{not_yaml_yaml}"], "not_yaml.yaml"),
    ("check", ["--config", "{unknown_field_yaml}"], "threshold"),
    ("check", ["--config", "{bad_fraction_yaml}"], "divergent_fraction"),
    ("check", ["--config", "{missing_night_yaml}", "--date", "2026-01-02"], "2026-01-02"),
    ("check", ["--config", "{missing_night_yaml}", "--date", "yesterday"], "date"),
]


def _tree(path):
  """{relative path: sha256} of every file under path ({} when it does not exist)."""
  out = {}
  for root, _, names in os.walk(path):
    for name in names:
      p = os.path.join(root, name)
      with open(p, "rb") as f:
        out[os.path.relpath(p, path)] = hashlib.sha256(f.read()).hexdigest()
  return out


@pytest.mark.parametrize("name,flags,word", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(name, flags, word, files, tmp_path,
                                                         capsys, monkeypatch):
  out = tmp_path / "out"
  values = dict(files, out=str(out))
  argv = [f.format(**values) for f in flags]
  inputs = {p: _tree(p) for p in (files["dataset"], files["log"], str(files["dir"]))}
  monkeypatch.setattr(sys, "argv", ["skewtrace", name] + argv)
  with pytest.raises(SystemExit) as e:
    cli.main()
  captured = capsys.readouterr()
  lines = captured.err.splitlines()
  assert e.value.code == 2, captured.err[-2000:]
  assert len(lines) == 1 and lines[0].startswith("error: "), captured.err[-2000:]
  assert word.format(**values) in lines[0] or word in lines[0], lines[0]
  assert captured.out == ""
  assert not out.exists() or _tree(out) == {}, sorted(_tree(out))
  assert {p: _tree(p) for p in inputs} == inputs  # nothing handed in was changed
