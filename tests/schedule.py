"""How scripts/test.sh shares the test modules among its pytest-xdist workers (--dist loadfile).

Each worker builds the session fixtures its modules read (conftest.py); a module's fixtures are
built once because a module runs whole on one worker. Two changes to xdist's file scheduling:
- the modules that read the features runs on the runners that start servers (conftest
  watched_runs: multi_processing and portable_embed, about 30 s each) run as one unit, so one
  worker builds those runs, not every worker;
- the units go out longest first (the longest-processing-time rule), by the seconds each took
  in a measured run (`pytest --durations=0`; docs/benchmarks.md, "Test suite"), so that no long
  module starts last while the other worker idles. A unit not in the table counts as short.
The table orders the work and nothing else: a wrong figure costs balance, never a test.
"""
from xdist.scheduler.loadscope import LoadScopeScheduling

# Modules that read watched_runs (through taxi_features["multi_processing" | "portable_embed"]).
SERVER_RUNNERS = ("tests/test_api.py", "tests/test_diff.py", "tests/test_features.py",
                  "tests/test_sockets.py")
SERVER_UNIT = "server-runner modules"

# Seconds per unit, measured (2026-12-08, the whole suite, 2 workers; rounded). Only their order
# matters; the fast tier (-m "not slow") keeps the order of the whole suite's.
SECONDS = {
    "tests/test_faults.py": 330, SERVER_UNIT: 270, "tests/test_predict.py": 215,
    "tests/test_crash.py": 200, "tests/test_ingest_sources.py": 140,
    "tests/test_aggregates.py": 130, "tests/test_rerun.py": 105, "tests/test_wheel.py": 100,
    "tests/test_event_time_forms.py": 100, "tests/test_bad_input.py": 95,
    "tests/test_logger.py": 90, "tests/test_cli.py": 80, "tests/test_portable.py": 60,
    "tests/test_ingest.py": 60, "tests/test_serve.py": 60, "tests/test_lock.py": 45,
    "tests/test_transform_fn_dir.py": 35, "tests/test_pii.py": 30,
    "tests/test_logger_table.py": 30, "tests/test_logger_values.py": 25,
    "tests/test_logger_disk.py": 20, "tests/test_check.py": 20, "tests/test_delimiter.py": 20,
    "tests/test_values.py": 20, "tests/test_window_records.py": 15,
}


def unit_of(nodeid):
  """The unit a test runs in: its module, or SERVER_UNIT for the SERVER_RUNNERS modules."""
  module = nodeid.split("::", 1)[0]
  return SERVER_UNIT if module in SERVER_RUNNERS else module


class LongestFirst(LoadScopeScheduling):
  """xdist's scope scheduling with unit_of as the scope, the units sent longest first."""

  _ordered = False

  def _split_scope(self, nodeid):
    return unit_of(nodeid)

  def _assign_work_unit(self, node):
    if not self._ordered:  # the queue is complete when the first unit is assigned
      units = sorted(self.workqueue.items(), key=lambda u: -SECONDS.get(u[0], 0))
      self.workqueue.clear()
      self.workqueue.update(units)
      self._ordered = True
    super()._assign_work_unit(node)
