"""Runner integration: the jobs submitted to Beam's standalone job service with an external SDK
worker pool (the topology Flink uses with the EXTERNAL environment) give the DirectRunner's
bytes; and each pipeline, built for FlinkRunner and DataflowRunner without running it, uses only
standard Beam URNs and deterministic key coders."""
import collections
import concurrent.futures
import glob
import hashlib
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from pipelines import common
from tests.conftest import ROOT, TAXI_CSV, TAXI_SCHEMA

pytestmark = pytest.mark.slow  # the end-to-end tier (pytest.ini)


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _wait_for(port, proc, timeout=60):
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    if proc.poll() is not None:
      raise RuntimeError(f"server exited with {proc.returncode}")
    try:
      with socket.create_connection(("127.0.0.1", port), timeout=1):
        return
    except OSError:
      time.sleep(0.2)
  raise TimeoutError(f"nothing listening on 127.0.0.1:{port}")


@pytest.fixture(scope="module")
def job_service(tmp_path_factory):
  """A Beam job service and an SDK worker pool, each its own process, stopped whatever happens.

  The worker pool starts SDK workers with `python` from PATH: the venv's, with the project on
  PYTHONPATH, as a worker image would have them installed.
  """
  logs = tmp_path_factory.mktemp("job_service")
  env = dict(os.environ, PYTHONPATH=ROOT, PYTHONHASHSEED="0",
             PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
  job_port, pool_port = _free_port(), _free_port()
  procs = []
  try:
    for name, args in (
        ("job_service", ["-m", "apache_beam.runners.portability.local_job_service_main",
                         "--port", str(job_port)]),
        ("worker_pool", ["-m", "apache_beam.runners.worker.worker_pool_main",
                         "--service_port", str(pool_port)])):
      out = open(logs / f"{name}.log", "wb")
      procs.append(subprocess.Popen([sys.executable] + args, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, cwd=ROOT,
                                    start_new_session=True))
    _wait_for(job_port, procs[0])
    _wait_for(pool_port, procs[1])
    yield ["--runner=PortableRunner", f"--job_endpoint=localhost:{job_port}",
           "--environment_type=EXTERNAL", f"--environment_config=localhost:{pool_port}"]
  finally:
    for proc in procs:
      try:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=20)
      except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, 9)
        proc.wait()


def _hashes(root, *subdirs):
  return {os.path.relpath(p, root): hashlib.sha256(open(p, "rb").read()).hexdigest()
          for sub in subdirs for p in sorted(glob.glob(os.path.join(root, sub, "*")))}


def test_ingest_and_features_on_the_job_service_equal_direct_runner(job_service, taxi_runs,
                                                                    taxi_features,
                                                                    tmp_path):
  from tests.conftest import features, ingest
  data = ingest(tmp_path / "ingest", "--num_shards", "4", "--schema", TAXI_SCHEMA,
                *job_service)
  want = json.load(open(os.path.join(taxi_runs["direct"], "manifest.json")))
  got = json.load(open(os.path.join(data, "manifest.json")))
  assert got["content_digest"] == want["content_digest"]
  assert [s["sha256"] for s in got["shards"]] == [s["sha256"] for s in want["shards"]]
  out = features(data, tmp_path / "features", *job_service)
  assert _hashes(out, "feature_log", "transformed") == \
      _hashes(taxi_features["direct"], "feature_log", "transformed")
  meta, direct = (json.load(open(os.path.join(d, "run_metadata.json")))
                  for d in (out, taxi_features["direct"]))
  assert meta["runner"] == "PortableRunner"
  assert meta["log"] == direct["log"] and meta["analyze"] == direct["analyze"]


def test_diff_on_the_job_service_equals_direct_runner(job_service, taxi_features, tmp_path):
  from replay.diff import job as diff
  from tests import logfaults
  production = str(tmp_path / "production")
  moved = logfaults.edit_log(taxi_features["direct"], production, logfaults.window_shift(100))
  reports = {}
  for name, flags in (("direct", []), ("job_service", job_service)):
    out = tmp_path / f"diff_{name}"
    # the shifted windows change no feature: latent records, which --fail_on latent counts
    assert diff.run(["--offline", taxi_features["direct"], "--production", production,
                     "--output_dir", str(out), "--fail_on", "latent"] + flags) == 1
    reports[name] = (out / "report.json").read_bytes()
  assert reports["job_service"] == reports["direct"]
  assert json.loads(reports["direct"])["first_divergent_stage"]["window"] == moved > 0


# --------------------------------------------------------------------------- portability
FLINK = ["--runner=FlinkRunner", "--flink_master=localhost:8081",
         "--environment_type=EXTERNAL", "--environment_config=localhost:50000"]
DATAFLOW = ["--runner=DataflowRunner", "--project=example-project", "--region=us-central1",
            "--temp_location=gs://skewtrace-example/tmp", "--dry_run=True"]
# Primitives every portable runner executes (Beam's standard URNs).
STANDARD_LEAVES = {"beam:transform:pardo:v1", "beam:transform:group_by_key:v1",
                   "beam:transform:impulse:v1", "beam:transform:flatten:v1",
                   "beam:transform:window_into:v1", "beam:transform:read:v1"}


def _built(job, runner_flags, tmp_path, ingest_dir, features_dir):
  """The un-run pipeline of `job` ('ingest', 'features' or 'diff') for the runner flags."""
  from pipelines import features, ingest
  from replay.diff import job as diff
  if job == "diff":
    from tests import logfaults
    production = str(tmp_path / "production")
    logfaults.edit_log(features_dir, production, logfaults.window_shift(100))
    argv = ["--offline", features_dir, "--production", production, "--output_dir",
            str(tmp_path / "d")] + runner_flags
    options, _, _ = common.job_options(argv, diff.DiffOptions, True)
    plan = diff.plan_diff(common.flags_of(diff.DiffFlags, options, diff.DiffOptions))
    assert plan.tasks
    return diff.build_pipeline(plan, options, str(tmp_path / "d" / "report.json"),
                               str(tmp_path / "d" / "errors"))
  if job == "ingest":
    argv = ["--input", TAXI_CSV, "--output_dir", str(tmp_path / "i"), "--schema", TAXI_SCHEMA,
            "--num_shards", "4"] + runner_flags
    options, _, _ = common.job_options(argv, ingest.IngestOptions, True)
    plan = ingest.plan_ingest(common.flags_of(ingest.IngestFlags, options, ingest.IngestOptions))
    return ingest.build_pipeline(plan, options)
  argv = ["--input_dir", ingest_dir, "--output_dir", str(tmp_path / "f"),
          "--profile", os.path.join(ROOT, "profiles", "offline.yaml"),
          "--transform_module", "transforms.taxi"] + runner_flags
  options, _, _ = common.job_options(argv, features.FeaturesOptions, True)
  with concurrent.futures.ThreadPoolExecutor(1) as pool:  # runs the input's verification
    plan, _ = features.plan_features(
        common.flags_of(features.FeaturesFlags, options, features.FeaturesOptions), pool)
  return features.build_pipeline(plan, options, str(tmp_path / "f" / ".tmp"))


@pytest.mark.parametrize("runner", ["flink", "dataflow"])
@pytest.mark.parametrize("job", ["ingest", "features", "diff"])
def test_pipelines_use_standard_urns_and_deterministic_key_coders(job, runner, taxi_runs,
                                                                  taxi_features, tmp_path):
  from apache_beam.runners import pipeline_context
  pipeline = _built(job, FLINK if runner == "flink" else DATAFLOW, tmp_path,
                    taxi_runs["direct"], taxi_features["direct"])
  proto = pipeline.to_runner_api()
  leaves = collections.Counter()
  for t in proto.components.transforms.values():
    if t.subtransforms:
      continue
    if t.spec.urn == "beam:transform:pickled_python:v1":
      # Beam's own Create ends in _MaybeReshuffle, which the runner expands at submission.
      assert t.unique_name.endswith("/MaybeReshuffle"), t.unique_name
      continue
    leaves[t.spec.urn] += 1
  assert set(leaves) <= STANDARD_LEAVES, set(leaves) - STANDARD_LEAVES
  assert leaves["beam:transform:group_by_key:v1"] > 0
  context = pipeline_context.PipelineContext(proto.components)
  for t in proto.components.transforms.values():
    if t.spec.urn == "beam:transform:group_by_key:v1":
      pcoll = proto.components.pcollections[next(iter(t.inputs.values()))]
      key_coder = context.coders.get_by_id(pcoll.coder_id).key_coder()
      assert key_coder.is_deterministic(), (t.unique_name, key_coder)
