"""Nothing a job starts listens beyond loopback: its listening sockets, watched while it runs.

pipelines.features runs on DirectRunner's multi_processing mode (the runner the tests use that
starts the most gRPC servers: control, data, state, logging, and SDK worker processes) and on
PortableRunner with the embedded job service and the LOOPBACK environment. Every 20 ms, the
listening TCP sockets of the job's process and its children are read from the OS (psutil);
each must be bound to a loopback address. The test also requires that it saw listening sockets
at all, or it would pass by watching nothing.
"""
import ipaddress
import os
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import ROOT, RUNNERS

PROFILE = os.path.join(ROOT, "profiles", "offline.yaml")
# What TensorFlow's native libraries print when they load (transforms/graph/quiet.py).
_TF_START_UP = ("cuInit", "oneDNN custom operations", "cudart", "cuda_platform", "absl::")


def _listening(proc):
  """{(ip, port)} of the TCP sockets that proc and its children listen on."""
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


def _is_loopback(ip):
  """127.0.0.0/8, ::1, or an IPv4-mapped IPv6 loopback (::ffff:127.0.0.1, how a dual-stack
  socket bound to 127.0.0.1 shows)."""
  addr = ipaddress.ip_address(ip.split("%")[0])
  mapped = getattr(addr, "ipv4_mapped", None)
  return (mapped or addr).is_loopback


@pytest.mark.parametrize("runner", ["multi_processing", "portable_embed"])
def test_a_job_listens_on_loopback_only(runner, taxi_runs, tmp_path):
  cmd = [sys.executable, "-m", "pipelines.features", "--input_dir", taxi_runs["direct"],
         "--output_dir", str(tmp_path / "out"), "--profile", PROFILE,
         "--transform_module", "transforms.taxi"] + RUNNERS[runner]
  child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
  proc, seen = psutil.Process(child.pid), set()
  deadline = time.monotonic() + 600
  while child.poll() is None and time.monotonic() < deadline:
    seen |= _listening(proc)
    time.sleep(0.02)
  _, err = child.communicate(timeout=60)
  assert child.returncode == 0, err[-2000:]
  for noise in _TF_START_UP:  # a real run's stderr holds no TensorFlow start-up line
    assert noise not in err, err[-2000:]
  assert seen, "no listening socket seen: the watch saw nothing"
  beyond = sorted((ip, port) for ip, port in seen if not _is_loopback(ip))
  assert not beyond, f"listening beyond loopback: {beyond}"
