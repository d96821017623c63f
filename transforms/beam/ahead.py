"""AheadDoFn: a DoFn whose per-element work runs one element ahead on a worker thread.

Meant for work in GIL-releasing kernels (numba nogil, Arrow compute, Parquet), which then
overlaps whatever the fused steps after it do with the previous element's outputs: on the
DirectRunner a fused stage runs on one thread, and this puts the stage's second core to use.
Outputs keep the input order and each input's window and timestamp; side inputs (keyword
arguments of the ParDo) are read on the calling thread and handed to the work with the element.

The work's Python stretches between kernels need the GIL back from the calling thread, which
(running the fused steps after this one, TFT's included) holds it most of the time: at
CPython's default 5 ms switch interval each such hand-over can wait that long. setup() lowers
the worker process's interval to SWITCH_INTERVAL (never raises it): 1M taxi rows through
pipelines.features, serialize work in-pipeline 3.4 -> 3.0 s, job 13.1 -> 12.7 s (three runs each).
"""
import collections
import concurrent.futures
import sys

import apache_beam as beam
from apache_beam.utils.windowed_value import WindowedValue

__all__ = ["AheadDoFn", "SWITCH_INTERVAL"]

SWITCH_INTERVAL = 0.0005  # seconds


class AheadDoFn(beam.DoFn):
  """Subclasses define `work(element, **side_inputs) -> iterable of outputs`."""

  _AHEAD = 1

  def work(self, element, **side_inputs):
    raise NotImplementedError

  def setup(self):
    if sys.getswitchinterval() > SWITCH_INTERVAL:
      sys.setswitchinterval(SWITCH_INTERVAL)
    self._pool = concurrent.futures.ThreadPoolExecutor(1)

  def start_bundle(self):
    self._pending = collections.deque()

  def process(self, element, timestamp=beam.DoFn.TimestampParam, window=beam.DoFn.WindowParam,
              **side_inputs):
    self._pending.append((self._pool.submit(lambda: list(self.work(element, **side_inputs))),
                          timestamp, window))
    while len(self._pending) > self._AHEAD:
      yield from self._next()

  def finish_bundle(self):
    while self._pending:
      yield from self._next()

  def _next(self):
    future, timestamp, window = self._pending.popleft()
    return [WindowedValue(v, timestamp, [window]) for v in future.result()]

  def teardown(self):
    self._pool.shutdown()
