"""replay.logger inside someone else's server: a full disk never reaches the caller (the records
it refuses are taken back whole, counted lost by reason, the logger marked unhealthy, and later
writes try again), or is raised when asked; a full queue blocks, blocks for a bounded time, or
drops, counted. Every log left behind verifies row by row, and its rows are exactly the accepted
records less the lost ones (counted here from the files, apart from the logger's own counts).

The full disk is a real one where the test can mount a small tmpfs (root on Linux); otherwise
the logger's file primitive is patched to raise ENOSPC.
"""
import contextlib
import errno
import glob
import json
import os
import subprocess

import pyarrow.parquet as pq
import pytest


_SMALL = 1024 * 1024  # bytes: room for the run metadata and a few writes, not for the sample


def _logger(offline, log_dir, **options):
  from replay.logger import ProductionLogger
  return ProductionLogger.from_features_dir(offline, str(log_dir), **options)


def _rows_on_disk(log_dir):
  """The log's rows as its files hold them: the parts its run metadata lists."""
  with open(os.path.join(log_dir, "run_metadata.json"), encoding="utf-8") as f:
    meta = json.load(f)
  parts = [p for b in meta["log"]["buckets"] for p in b["parts"]]
  assert sorted(parts) == sorted(os.path.relpath(p, log_dir) for p in glob.glob(
      os.path.join(log_dir, "feature_log", "*.parquet")))  # no part it does not list
  return sum(pq.ParquetFile(os.path.join(log_dir, p)).metadata.num_rows for p in parts), meta


def _intact(log_dir):
  from replay import verify_log
  assert verify_log.verify(log_dir) == []
  assert not glob.glob(os.path.join(log_dir, "**", "*.tmp"), recursive=True)


@contextlib.contextmanager
def _small_disk(path):
  """A tmpfs of _SMALL bytes mounted at `path` (None when this machine lets the test mount
  none); unmounted on the way out. resize(bytes) changes its size: the disk freed."""
  os.makedirs(path)
  mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={_SMALL}", "tmpfs", path],
                           capture_output=True).returncode == 0
  def resize(size):
    subprocess.run(["mount", "-o", f"remount,size={size}", path], check=True)
  try:
    yield resize if mounted else None
  finally:
    if mounted:
      subprocess.run(["umount", "-l", path], check=True)


class _PatchedDisk:
  """Where no tmpfs can be mounted: the logger's staged writes raise ENOSPC once `full`."""

  def __init__(self, monkeypatch):
    from replay.logger import files
    self.full, real = False, files.stage_file
    def stage(path, data):
      if self.full:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
      return real(path, data)
    monkeypatch.setattr(files, "stage_file", stage)


def test_a_full_disk_is_counted_lost_and_serving_goes_on(offline, taxi, tmp_path, monkeypatch):
  from replay.diff import job as diff
  records, aggs = taxi
  first = 6144  # records logged while the disk fills
  with _small_disk(str(tmp_path / "disk")) as resize:
    patched = None if resize else _PatchedDisk(monkeypatch)
    log_dir = str(tmp_path / "disk" / "log")
    logger = _logger(offline, log_dir, batch_size=512)
    if patched:  # the disk fills after the first two batches
      logger.log_batch(records[:1024], aggs[:1024])
      logger.flush()
      patched.full = True
    for i in range(1024 if patched else 0, first, 512):
      logger.log_batch(records[i:i + 512], aggs[i:i + 512])  # no error reaches the caller
    logger.flush()
    stats = logger.stats()
    assert not stats["healthy"] and "No space left" in stats["last_error"], stats
    assert stats["lost"] > 0 and stats["lost_by_reason"] == {"write_failed:ENOSPC": stats["lost"]}
    assert stats["lost"] % 512 == 0  # whole batches: a refused write is taken back whole
    on_disk, _ = _rows_on_disk(log_dir)
    _intact(log_dir)
    assert on_disk == stats["logged"] == first - stats["lost"] > 0
    # The disk is freed: later writes go through, and the loss is in the run metadata.
    if resize:
      resize(64 * 1024 * 1024)
    else:
      patched.full = False
    logger.log_batch(records[first:], aggs[first:])
    logger.close()
    stats = logger.stats()
    assert stats["healthy"] and stats["last_error"] is None
    assert stats["accepted"] == len(records) == \
        stats["logged"] + stats["sampled_out"] + stats["lost"]
    on_disk, meta = _rows_on_disk(log_dir)
    assert on_disk == meta["log"]["rows"] == len(records) - stats["lost"]
    assert meta["log"]["lost_by_reason"] == {"write_failed:ENOSPC": stats["lost"]}
    _intact(log_dir)
    # Against the offline log, the lost records are offline-only and nothing else differs (the
    # content-key ordinals of the lost records were taken back with them).
    diff.run(["--offline", offline, "--production", log_dir, "--output_dir",
              str(tmp_path / "diff")])
    with open(tmp_path / "diff" / "report.json", encoding="utf-8") as f:
      report = json.load(f)
    records_ = report["records"]
    assert records_["offline_only"] == stats["lost"], records_
    assert records_["divergent"] == records_["production_only"] == records_["latent"] == 0
    assert report["production"]["lost"] == {"write_failed:ENOSPC": stats["lost"]}


def test_a_full_disk_raises_when_asked_and_leaves_a_log_that_resumes(offline, taxi, tmp_path,
                                                                     monkeypatch):
  records, aggs = taxi
  patched = _PatchedDisk(monkeypatch)
  log_dir = str(tmp_path / "log")
  logger = _logger(offline, log_dir, batch_size=100, on_write_error="raise")
  logger.log_batch(records[:300], aggs[:300])
  logger.flush()
  patched.full = True
  logger.log_batch(records[300:400], aggs[300:400])
  with pytest.raises(OSError, match="No space left"):
    logger.flush()
  with pytest.raises(OSError, match="No space left"):
    logger.close()
  assert not logger.stats()["healthy"]
  assert _rows_on_disk(log_dir)[0] == 300
  _intact(log_dir)
  patched.full = False  # a new logger resumes the log the refused write left
  with _logger(offline, log_dir) as again:
    again.log_batch(records[300:400], aggs[300:400])
  assert _rows_on_disk(log_dir)[0] == 400
  _intact(log_dir)


def _stalled(offline, taxi, log_dir, monkeypatch, **options):
  """A logger of 10-record batches, one batch allowed to wait, whose worker stalls on its first
  batch until `release` is set: (logger, release, records, aggregates)."""
  import threading
  records, aggs = taxi
  logger = _logger(offline, log_dir, batch_size=10, max_pending_batches=1, **options)
  release, rows = threading.Event(), logger._rules.rows
  def slow_rows(items):
    release.wait(timeout=120)
    return rows(items)
  monkeypatch.setattr(logger._rules, "rows", slow_rows)
  return logger, release, records[:65], aggs[:65]


def _returns_within(call, seconds):
  """call() on a thread: True when it returned within `seconds` (it did not wait for room)."""
  import threading
  done = threading.Thread(target=call, daemon=True)
  done.start()
  done.join(seconds)
  return not done.is_alive()


@pytest.mark.parametrize("options", [{"when_full": "drop"},
                                     {"when_full": "block", "full_wait_seconds": 0.05}])
def test_a_full_queue_drops_or_waits_a_bounded_time_and_counts_the_loss(offline, taxi, tmp_path,
                                                                        monkeypatch, options):
  logger, release, records, aggs = _stalled(offline, taxi, tmp_path / "log", monkeypatch,
                                            **options)
  import time
  logger.log_batch(records[:10], aggs[:10])  # the worker takes it and stalls
  while logger.stats()["pending_batches"]:
    time.sleep(0.01)
  # One batch may wait; the next four meet a full queue and are lost, the caller not held.
  assert _returns_within(lambda: [logger.log_batch(records[i:i + 10], aggs[i:i + 10])
                                  for i in range(10, 60, 10)], 30)
  assert logger.stats()["lost_by_reason"] == {"queue_full": 40}
  logger.log_batch(records[60:], aggs[60:])  # the open batch: close() waits for room for it
  release.set()
  logger.close()
  stats = logger.stats()
  assert stats["logged"] == 25 and stats["lost"] == 40 and stats["healthy"]
  assert stats["accepted"] == 65
  on_disk, meta = _rows_on_disk(str(tmp_path / "log"))
  assert on_disk == 25 and meta["log"]["lost_by_reason"] == {"queue_full": 40}
  _intact(str(tmp_path / "log"))


def test_a_full_queue_blocks_by_default_and_loses_nothing(offline, taxi, tmp_path, monkeypatch):
  logger, release, records, aggs = _stalled(offline, taxi, tmp_path / "log", monkeypatch)
  logger.log_batch(records[:20], aggs[:20])  # one batch on the worker, one waiting
  assert not _returns_within(lambda: logger.log_batch(records[20:], aggs[20:]), 0.5)
  release.set()
  logger.close()
  stats = logger.stats()
  assert stats["logged"] == 65 and stats["lost"] == 0 and stats["lost_by_reason"] == {}
  assert "lost_by_reason" not in _rows_on_disk(str(tmp_path / "log"))[1]["log"]


def test_write_and_queue_policies_are_checked(offline, tmp_path):
  from transforms.spec.errors import UsageError
  for options, match in (({"on_write_error": "ignore"}, "on_write_error must be one of"),
                         ({"when_full": "wait"}, "when_full must be one of"),
                         ({"full_wait_seconds": -1}, "full_wait_seconds must be >= 0")):
    with pytest.raises(UsageError, match=match):
      _logger(offline, tmp_path / "log", **options).close()
    assert not os.path.exists(tmp_path / "log" / ".skewtrace-lock")
