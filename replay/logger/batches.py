"""Batches: accepted records gathered into batches and handed, in arrival order, to one worker
thread that writes them -- the production logger's batching and threading, apart from what a
batch becomes (replay/logger/rows.py) and where it is written (replay/logger/parts.py).

Callers append records to the open batch under a lock; a full batch goes through a bounded
queue; a Columns batch (log_table) queues whole, after the open batch. When the queue is full,
when_full="block" makes the caller wait for room (at most full_wait seconds when given: then
the batch is lost), when_full="drop" loses the batch at once; lost records are counted by reason
(LOST_QUEUE_FULL). The worker writes the batches in queue order, joining those already waiting
into one write. An exception the writer raises is kept and raised on the caller's next call;
later batches are not written (a write failure the logger keeps serving through never reaches
here: the writer counts it with lose() and returns).
"""
import queue
import threading

from replay.logger.accept import Columns
from transforms.spec.errors import UsageError

__all__ = ["Batches", "check_policy", "WHEN_FULL", "LOST_QUEUE_FULL"]

_STOP = object()  # the worker's last task
WHEN_FULL = ("block", "drop")  # what a caller meets when the queue is full
LOST_QUEUE_FULL = "queue_full"  # the lost-records reason of a batch the full queue refused


def check_policy(when_full, full_wait):
  """UsageError unless when_full is one of WHEN_FULL and full_wait None or a number >= 0."""
  if when_full not in WHEN_FULL:
    raise UsageError(f"when_full must be one of {', '.join(WHEN_FULL)}, not {when_full!r}")
  if full_wait is not None and not (isinstance(full_wait, (int, float)) and full_wait >= 0):
    raise UsageError(f"full_wait_seconds must be >= 0, not {full_wait!r}")


class Batches:
  """The open batch, the bounded queue and the worker thread of one logger.

  batch_size: records per full batch; max_pending: full batches that may wait for the worker;
  write(items): the worker's writer, called with a list of accepted records (log()'s tuples) or
  one Columns; name: the worker thread's name; when_full, full_wait: what a caller meets when
  max_pending batches wait (see the module docstring). `lost`: {reason: records} (lost_counts()
  reads a copy)."""

  def __init__(self, batch_size, max_pending, write, name, when_full="block", full_wait=None):
    check_policy(when_full, full_wait)
    self._batch_size, self._write = batch_size, write
    self._when_full, self._full_wait = when_full, full_wait
    self._lock, self._lost_lock = threading.Lock(), threading.Lock()
    self._buffer, self._closed, self.error, self.accepted = [], False, None, 0
    self._lost = {}
    self._queue = queue.Queue(maxsize=max_pending)
    self._worker = threading.Thread(target=self._work, name=name, daemon=True)
    self._worker.start()

  def submit(self, items):
    """Appends records (a list) to the open batch, or queues a Columns batch after it."""
    self.raise_failure()
    with self._lock:
      if self._closed:
        raise UsageError("the logger is closed")
      if isinstance(items, Columns):  # arrival order: the open batch goes first
        self._hand_over(len(self._buffer))
        self.accepted += items.table.num_rows
        self._queue_batch(items, items.table.num_rows)
        return
      self._buffer.extend(items)
      self.accepted += len(items)
      while len(self._buffer) >= self._batch_size:
        self._hand_over(self._batch_size)

  def drain(self):
    """Returns once every full batch handed to the worker so far is written (not the open one)."""
    with self._lock:
      if self._closed:
        return
      done = threading.Event()
      self._queue.put(done)
    done.wait()
    self.raise_failure()

  def flush(self):
    """Hands the open batch to the worker and returns once it is written."""
    with self._lock:
      self._hand_over(len(self._buffer), wait=True)
    self.drain()

  def close(self):
    """Hands the open batch over and waits for the worker to write everything queued; False
    when already closed."""
    with self._lock:
      if self._closed:
        return False
      self._closed = True
      self._hand_over(len(self._buffer), wait=True)
      self._queue.put(_STOP)
    self._worker.join()
    return True

  def pending(self):
    """Full batches waiting for the worker."""
    return self._queue.qsize()

  def refuse_when_full(self, records):
    """With when_full "drop" and the queue full now: counts `records` taken and lost
    (queue_full) and returns True -- a caller's batch the full queue would refuse, lost before
    any work is spent on it. False otherwise (the batch goes the usual way)."""
    if self._when_full != "drop" or not self._queue.full():
      return False
    self.raise_failure()
    with self._lock:
      if self._closed:
        raise UsageError("the logger is closed")
      self.accepted += records
    self.lose(records, LOST_QUEUE_FULL)
    return True

  def lose(self, records, reason):
    """Counts `records` lost for `reason` (never written: the log will not hold them)."""
    with self._lost_lock:
      self._lost[reason] = self._lost.get(reason, 0) + records

  def lost_counts(self):
    with self._lost_lock:
      return dict(sorted(self._lost.items()))

  def raise_failure(self):
    if self.error is not None:
      raise self.error

  def _hand_over(self, n, wait=False):
    """Queues the first n buffered records (caller holds _lock, so batches queue in arrival
    order); wait: for room, whatever the policy (flush and close wait by definition)."""
    if n:
      batch, self._buffer = self._buffer[:n], self._buffer[n:]
      self._queue_batch(batch, n, wait)

  def _queue_batch(self, batch, n, wait=False):
    """Puts a batch of n records on the queue; when it is full, waits (`wait`, or when_full
    "block", at most full_wait seconds when given) or not at all ("drop"), then counts the
    batch lost."""
    if wait:
      self._queue.put(batch)
      return
    try:
      if self._when_full == "drop":
        self._queue.put_nowait(batch)
      else:
        self._queue.put(batch, timeout=self._full_wait)
    except queue.Full:
      self.lose(n, LOST_QUEUE_FULL)

  def _work(self):
    """The worker: writes the batches in queue order. Batches already waiting are written
    together, up to max_pending of them (fewer, larger TFT calls and part files when logging
    outpaces writing); a failure is kept and raised on the caller's next call."""
    task = None
    while True:
      task = self._queue.get() if task is None else task
      if task is _STOP:
        return
      if isinstance(task, threading.Event):
        task.set()
        task = None
        continue
      items, task = [task] if isinstance(task, Columns) else list(task), None
      columns = isinstance(items[0], Columns)  # Columns join Columns, records join records
      for _ in range(self._queue.maxsize - 1):
        try:
          task = self._queue.get_nowait()
        except queue.Empty:
          task = None
          break
        if not (items[0].joins(task) if columns else isinstance(task, list)):
          break
        items += [task] if columns else task
        task = None
      items = Columns.joined(items) if columns else items
      if self.error is None:  # after a failure, later batches are not written
        try:
          self._write(items)
        except Exception as e:  # noqa: BLE001 -- raised again on the caller's next call
          self.error = e
