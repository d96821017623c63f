"""Shared fixtures: paths to data, and ingest runs built once per session."""
import collections.abc
import csv
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data")
TAXI_CSV = os.path.join(ROOT, "data", "chicago_taxi", "data.csv")
TAXI_SCHEMA = os.path.join(ROOT, "data", "chicago_taxi", "schema.pbtxt")
EDGE = os.path.join(SHARED, "csv_edge_cases")

RUNNERS = {
    "direct": [],
    "multi_processing": ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
    "portable_embed": ["--runner=PortableRunner", "--job_endpoint=embed",
                       "--environment_type=LOOPBACK"],
}


def ingest(output_dir, *args, inputs=TAXI_CSV):
  from pipelines import ingest as ingest_job
  argv = ["--input", inputs, "--output_dir", str(output_dir)] + list(args)
  assert ingest_job.run(argv) == 0
  return str(output_dir)


class Lazy(collections.abc.Mapping):
  """A mapping whose values are built on first read, each by its own function: a session
  fixture over several runners builds only the runs a test reads (most read "direct" only)."""

  def __init__(self, builders):
    self._builders, self._built = dict(builders), {}

  def __getitem__(self, name):
    if name not in self._built:
      self._built[name] = self._builders[name]()
    return self._built[name]

  def __iter__(self):
    return iter(self._builders)

  def __len__(self):
    return len(self._builders)


@pytest.fixture(scope="session")
def taxi_runs(tmp_path_factory):
  """The taxi sample ingested (4 shards, TFMD schema) on each runner, each built when read."""
  def build(name):
    return lambda: ingest(tmp_path_factory.mktemp(name), "--num_shards", "4", "--schema",
                          TAXI_SCHEMA, *RUNNERS[name])
  return Lazy({name: build(name) for name in RUNNERS})


def keyed_taxi_csv(path, key):
  """The taxi sample written to `path` with a trip_id column, key(i) for the i-th record."""
  with open(TAXI_CSV, newline="") as f:
    rows = list(csv.reader(f))
  with open(path, "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(rows[0] + ["trip_id"])
    for i, row in enumerate(rows[1:]):
      w.writerow(row + [key(i)])
  return str(path)


def features(input_dir, output_dir, *args, profile="offline.yaml"):
  from pipelines import features as features_job
  argv = ["--input_dir", input_dir, "--output_dir", str(output_dir), "--profile",
          os.path.join(ROOT, "profiles", profile)] + list(args)
  if "--transform_module" not in argv:
    argv += ["--transform_module", "transforms.taxi"]
  assert features_job.run(argv) == 0
  return str(output_dir)


@pytest.fixture(scope="module")
def offline(taxi_features):
  """The taxi sample's offline run (DirectRunner) that a production logger logs against."""
  return taxi_features["direct"]


@pytest.fixture(scope="module")
def taxi(offline):
  """(records as a CSV reader gives them, their windowed counts as an online store holds them)."""
  from tests import online_store
  return online_store.records_and_counts(TAXI_CSV, offline)


def listening(proc):
  """{(ip, port)} of the TCP sockets that a psutil process and its children listen on."""
  import psutil
  found = set()
  try:
    procs = [proc] + proc.children(recursive=True)
  except psutil.NoSuchProcess:
    return found
  for p in procs:
    try:
      conns = p.net_connections(kind="tcp")
    except (psutil.NoSuchProcess, psutil.AccessDenied):
      continue
    found |= {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN}
  return found


def watched_features(input_dir, output_dir, *args):
  """pipelines.features run as its own process (python -m, the offline profile and taxi
  module), its listening TCP sockets and its children's read every 20 ms while it runs
  (tests/test_sockets.py asserts on them); (output_dir, {(ip, port)} seen, exit code, stderr)."""
  import subprocess
  import sys
  import time
  import psutil
  cmd = [sys.executable, "-m", "pipelines.features", "--input_dir", input_dir, "--output_dir",
         str(output_dir), "--profile", os.path.join(ROOT, "profiles", "offline.yaml"),
         "--transform_module", "transforms.taxi", *args]
  child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
  proc, seen = psutil.Process(child.pid), set()
  deadline = time.monotonic() + 600
  while child.poll() is None and time.monotonic() < deadline:
    seen |= listening(proc)
    time.sleep(0.02)
  _, err = child.communicate(timeout=60)
  return str(output_dir), seen, child.returncode, err


@pytest.fixture(scope="session")
def watched_runs(taxi_runs, tmp_path_factory):
  """pipelines.features over the taxi ingest, offline profile, on the runners that start
  servers (multi_processing, portable_embed), each run as its own process whose listening
  sockets were watched, each built when read: {runner: (output_dir, sockets seen, exit code,
  stderr)}."""
  def build(name):
    return lambda: watched_features(taxi_runs["direct"],
                                    tmp_path_factory.mktemp("features_" + name), *RUNNERS[name])
  return Lazy({name: build(name) for name in ("multi_processing", "portable_embed")})


@pytest.fixture(scope="session")
def taxi_features(taxi_runs, watched_runs, tmp_path_factory):
  """pipelines.features over the taxi ingest, offline profile, on each runner (in this process
  on DirectRunner; the others as the watched processes of watched_runs), each built when read."""
  def watched(name):
    def build():
      path, _, code, err = watched_runs[name]
      assert code == 0, err[-2000:]
      return path
    return build
  return Lazy({"direct": lambda: features(taxi_runs["direct"],
                                          tmp_path_factory.mktemp("features_direct")),
               **{name: watched(name) for name in ("multi_processing", "portable_embed")}})


def pytest_xdist_make_scheduler(config, log):
  """scripts/test.sh's --dist loadfile, with the modules that share the server runners' runs as
  one unit and the units longest first (tests/schedule.py)."""
  if config.getvalue("dist") != "loadfile":
    return None
  from tests.schedule import LongestFirst
  return LongestFirst(config, log)
