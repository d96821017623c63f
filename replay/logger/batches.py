"""Batches: accepted records gathered into batches and handed, in arrival order, to one worker
thread that writes them -- the production logger's batching and threading, apart from what a
batch becomes (replay/logger/rows.py) and where it is written (replay/logger/parts.py).

Callers append records to the open batch under a lock; a full batch goes through a bounded
queue (back-pressure: a caller blocks while max_pending batches wait, and no record is ever
lost); a Columns batch (log_table) queues whole, after the open batch. The worker writes the
batches in queue order, joining those already waiting into one write. A write's failure is
kept and raised on the caller's next call; later batches are not written.
"""
import queue
import threading

from replay.logger.accept import Columns
from transforms.spec.errors import UsageError

__all__ = ["Batches"]

_STOP = object()  # the worker's last task


class Batches:
  """The open batch, the bounded queue and the worker thread of one logger.

  batch_size: records per full batch; max_pending: full batches that may wait for the worker
  before a caller blocks; write(items): the worker's writer, called with a list of accepted
  records (log()'s tuples) or one Columns; name: the worker thread's name."""

  def __init__(self, batch_size, max_pending, write, name):
    self._batch_size, self._write = batch_size, write
    self._lock = threading.Lock()
    self._buffer, self._closed, self.error, self.accepted = [], False, None, 0
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
        self._queue.put(items)
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
      self._hand_over(len(self._buffer))
    self.drain()

  def close(self):
    """Hands the open batch over and waits for the worker to write everything queued; False
    when already closed."""
    with self._lock:
      if self._closed:
        return False
      self._closed = True
      self._hand_over(len(self._buffer))
      self._queue.put(_STOP)
    self._worker.join()
    return True

  def pending(self):
    """Full batches waiting for the worker."""
    return self._queue.qsize()

  def raise_failure(self):
    if self.error is not None:
      raise self.error

  def _hand_over(self, n):
    """Queues the first n buffered records (caller holds _lock, so batches queue in arrival
    order); blocks while max_pending batches wait: back-pressure, never a lost record."""
    if n:
      batch, self._buffer = self._buffer[:n], self._buffer[n:]
      self._queue.put(batch)

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
