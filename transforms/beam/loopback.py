"""Nothing a job starts listens beyond loopback.

Beam's in-process gRPC servers bind '[::]:PORT', which is every interface of the machine, and
are then reached at 'localhost:PORT'. These are the FnApiRunner's control, data, state and
logging servers that DirectRunner's multi_processing mode starts
(fn_api_runner/worker_handlers.py), the LOOPBACK environment's worker pool
(worker/worker_pool_main.py), and the embedded job service's servers
(portability/local_job_service.py). None of them is configurable. bind_loopback() rewrites
that one address form, '[::]:PORT', to 'localhost:PORT' in this process's gRPC servers. The
clients already dial 'localhost', so nothing else changes. An explicit host:port, for example
a worker pool a user starts for Flink with its own flags, is left alone. This is measured, not
assumed: tests/test_sockets.py watches a multi_processing run's listening sockets.
"""
from grpc import _server

__all__ = ["ANY", "LOOPBACK", "bind_loopback", "loopback_address"]

ANY, LOOPBACK = "[::]:", "localhost:"


def loopback_address(address):
  """'[::]:PORT' -> 'localhost:PORT'; any other address unchanged."""
  return LOOPBACK + address[len(ANY):] if address.startswith(ANY) else address


def bind_loopback():
  """Makes every gRPC server of this process bind loopback where Beam asks for every interface
  (idempotent)."""
  cls = _server._Server  # pylint: disable=protected-access  (the class grpc.server() returns)
  if getattr(cls.add_insecure_port, "_loopback", False):
    return
  original = cls.add_insecure_port

  def add_insecure_port(self, address):
    return original(self, loopback_address(address))
  add_insecure_port._loopback = True  # pylint: disable=protected-access
  cls.add_insecure_port = add_insecure_port
