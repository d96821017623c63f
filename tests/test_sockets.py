"""Nothing a job starts listens beyond loopback: its listening sockets, watched while it runs.

pipelines.features runs on DirectRunner's multi_processing mode (the runner the tests use that
starts the most gRPC servers: control, data, state, logging, and SDK worker processes) and on
PortableRunner with the embedded job service and the LOOPBACK environment. Every 20 ms, the
listening TCP sockets of the job's process and its children are read from the OS (psutil);
each must be bound to a loopback address. The test also requires that it saw listening sockets
at all, or it would pass by watching nothing. The runs are the session's own features runs on
those runners (conftest.watched_runs), which the other tests read the outputs of.
"""
import ipaddress

import pytest

pytestmark = pytest.mark.slow  # the end-to-end tier (pytest.ini)

# What TensorFlow's native libraries print when they load (transforms/graph/quiet.py).
_TF_START_UP = ("cuInit", "oneDNN custom operations", "cudart", "cuda_platform", "absl::")


def _is_loopback(ip):
  """127.0.0.0/8, ::1, or an IPv4-mapped IPv6 loopback (::ffff:127.0.0.1, how a dual-stack
  socket bound to 127.0.0.1 shows)."""
  addr = ipaddress.ip_address(ip.split("%")[0])
  mapped = getattr(addr, "ipv4_mapped", None)
  return (mapped or addr).is_loopback


@pytest.mark.parametrize("runner", ["multi_processing", "portable_embed"])
def test_a_job_listens_on_loopback_only(runner, watched_runs):
  _, seen, code, err = watched_runs[runner]
  assert code == 0, err[-2000:]
  for noise in _TF_START_UP:  # a real run's stderr holds no TensorFlow start-up line
    assert noise not in err, err[-2000:]
  assert seen, "no listening socket seen: the watch saw nothing"
  beyond = sorted((ip, port) for ip, port in seen if not _is_loopback(ip))
  assert not beyond, f"listening beyond loopback: {beyond}"


def test_the_loopback_check_sees_a_wildcard_address():  # the check above can fail
  assert _is_loopback("127.0.0.1") and _is_loopback("::1") and _is_loopback("::ffff:127.0.0.1")
  assert not _is_loopback("0.0.0.0") and not _is_loopback("::") and not _is_loopback("10.1.2.3")
