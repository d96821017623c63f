"""Crash consistency: each job killed with SIGKILL at several points, then run again.

A run killed with -9 never reaches its own cleanup. Asserted after every kill, from the files
alone: no published output next to incomplete data (a folder holding a manifest or run
metadata verifies, else it holds nothing but temp folders); then the same command run again
exits 0, removes the dead run's temp folders, verifies, and gives the same result as a run
never interrupted (the manifest's content digest; the feature log's digests). The production
logger killed between flushes: its folder verifies as it is, every flushed record is in it,
and a new logger resumes it.
"""
import contextlib
import glob
import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests import online_store
from tests.conftest import ROOT, TAXI_CSV, TAXI_SCHEMA
from transforms.spec.lock import LOCK_FILE

pytestmark = pytest.mark.slow  # the end-to-end tier (pytest.ini)

PY = sys.executable
PROFILE = os.path.join(ROOT, "profiles", "offline.yaml")


def _temps(folder):
  return sorted(glob.glob(os.path.join(folder, ".tmp-*")))


def _kill_when(cmd, ready, delay):
  """Starts cmd, waits until ready() (or it exits), sleeps delay, kills it with SIGKILL;
  returns whether it was killed before it finished."""
  proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.monotonic() + 120
  while proc.poll() is None and not ready() and time.monotonic() < deadline:
    time.sleep(0.02)
  time.sleep(delay)
  killed = proc.poll() is None
  if killed:
    proc.send_signal(signal.SIGKILL)
  proc.wait()
  return killed


def _verify(folder):
  """`skewtrace verify FOLDER` as its command runs it (common.main_wrapper), in this process: a
  process of its own would add Beam's import (about 4 s) to each of these checks; the command's
  own process and exit code are tests/test_cli.py's. A CompletedProcess."""
  from pipelines import common
  from replay import verify_log
  out, err, argv = io.StringIO(), io.StringIO(), sys.argv
  sys.argv = ["verify", folder]
  try:
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      common.main_wrapper(verify_log.run)
    code = 0
  except SystemExit as e:
    code = e.code
  finally:
    sys.argv = argv
  return subprocess.CompletedProcess(["verify", folder], code, out.getvalue(), err.getvalue())


# What a run moves into place before it writes its marker (the commit point, docs/formats.md
# "Atomic publish"): a kill in between leaves them, unpublished, beside the run's temp folder.
_PUBLISHED_FIRST = {"manifest.json": {"tfrecord", "parquet", "rejected", "schema.pbtxt"},
                    "run_metadata.json": {"transform_fn", "transformed", "feature_log"}}


def _published_or_nothing(folder, marker):
  """A folder holding `marker` verifies. One without holds nothing but temp folders, the dead
  run's lock file and what the run moved into place before its marker, and is then no output:
  verify refuses it (exit 2), naming the temp folder the interrupted run left."""
  if not os.path.exists(folder):
    return
  if os.path.exists(os.path.join(folder, marker)):
    result = _verify(folder)
    assert result.returncode == 0, result.stdout + result.stderr
    return
  temps = {os.path.basename(t) for t in _temps(folder)}
  assert set(os.listdir(folder)) <= temps | {LOCK_FILE} | _PUBLISHED_FIRST[marker], \
      os.listdir(folder)
  if set(os.listdir(folder)) & _PUBLISHED_FIRST[marker]:  # a kill inside the publish
    assert temps, os.listdir(folder)  # the run's temp folder goes after its marker
    result = _verify(folder)
    assert result.returncode == 2 and sorted(temps)[0] in result.stderr, result.stderr


def _run(cmd):
  result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-2000:]


def _digests(features_dir):
  with open(os.path.join(features_dir, "run_metadata.json")) as f:
    meta = json.load(f)
  return meta["input"]["content_digest"], [b["digests"] for b in meta["log"]["buckets"]]


def _kill_and_rerun(cmd, tmp_path, delays, marker, result_of, clean=None):
  """cmd + [an output folder] killed `delays` seconds after its temp folder appears, once per
  delay, each time checked and rerun; returns how many kills landed mid-run. The rerun's
  result_of(folder) must equal a never-interrupted run's: `clean`, the output of the same
  command run elsewhere, or else run here first."""
  if clean is None:
    clean = str(tmp_path / "clean")
    _run(cmd + [clean])
  killed = 0
  for i, delay in enumerate(delays):
    out = str(tmp_path / f"out{i}")
    killed += _kill_when(cmd + [out], lambda out=out: bool(_temps(out)), delay)
    _published_or_nothing(out, marker)
    _run(cmd + [out])
    assert not _temps(out) and not os.path.exists(os.path.join(out, LOCK_FILE))
    result = _verify(out)
    assert result.returncode == 0, result.stdout
    assert result_of(out) == result_of(clean)
  return killed


def _content_digest(dataset_dir):
  with open(os.path.join(dataset_dir, "manifest.json")) as f:
    return json.load(f)["content_digest"]


def test_ingest_killed_at_any_point_reruns_to_the_same_dataset(tmp_path):
  cmd = [PY, "-m", "pipelines.ingest", "--input", TAXI_CSV, "--schema", TAXI_SCHEMA,
         "--num_shards", "3", "--output_dir"]
  killed = _kill_and_rerun(cmd, tmp_path, (0.0, 0.2, 0.5, 1.0), "manifest.json",
                           _content_digest)
  assert killed >= 2  # most kills landed mid-run


def test_features_killed_at_any_point_reruns_to_the_same_log(taxi_runs, taxi_features, tmp_path):
  """The never-interrupted run is the session's: taxi_features["direct"] is this command's
  output (the same input, profile and module; conftest.features)."""
  cmd = [PY, "-m", "pipelines.features", "--input_dir", taxi_runs["direct"], "--profile",
         PROFILE, "--transform_module", "transforms.taxi", "--output_dir"]
  assert _kill_and_rerun(cmd, tmp_path, (0.5, 4.0), "run_metadata.json", _digests,
                         clean=taxi_features["direct"]) == 2


LOGGER = r'''
import json, sys
from replay.logger import ProductionLogger
from tests import online_store
offline, log_dir, csv_path, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
records, aggs = online_store.records_and_counts(csv_path, offline)
logger = ProductionLogger.from_features_dir(offline, log_dir, batch_size=batch)
for lo in range(0, len(records), batch):
  logger.log_batch(records[lo:lo + batch], aggs[lo:lo + batch])
  logger.flush()
  print(lo + len(records[lo:lo + batch]), flush=True)
logger.close()
'''


@pytest.mark.parametrize("kill_after", [2, 5])
def test_logger_killed_between_flushes_loses_no_flushed_record(taxi_features, tmp_path,
                                                                kill_after):
  offline, log_dir = taxi_features["direct"], str(tmp_path / "log")
  proc = subprocess.Popen([PY, "-c", LOGGER, offline, log_dir, TAXI_CSV, "1000"], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
  flushed = 0
  for _ in range(kill_after):
    line = proc.stdout.readline()
    assert line, "the logger exited before the kill"
    flushed = int(line)
  proc.send_signal(signal.SIGKILL)  # mid-flush of the next batch, or between two
  proc.wait()
  result = _verify(log_dir)
  assert result.returncode == 0, result.stdout + result.stderr
  with open(os.path.join(log_dir, "run_metadata.json")) as f:
    rows = json.load(f)["log"]["rows"]
  assert rows >= flushed  # every flushed record is in the log
  from replay.logger import ProductionLogger  # resumes: the rest logged, then merged
  records, aggs = online_store.records_and_counts(TAXI_CSV, offline)
  with ProductionLogger.from_features_dir(offline, log_dir) as logger:
    logger.log_batch(records[rows:], aggs[rows:])
  assert _verify(log_dir).returncode == 0
  with open(os.path.join(log_dir, "run_metadata.json")) as f:
    assert json.load(f)["log"]["rows"] == len(records)
