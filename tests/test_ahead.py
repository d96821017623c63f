"""AheadDoFn: outputs in input order with their windows and timestamps, side inputs handed to
the work, errors raised on the calling thread."""
import sys
import threading

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import window

from transforms.beam.ahead import SWITCH_INTERVAL, AheadDoFn


class _Twice(AheadDoFn):
  """Each element, then element + offset (a side input); records the threads it ran on."""

  threads = set()

  def work(self, element, offset=0):
    _Twice.threads.add(threading.get_ident())
    yield element
    yield element + offset


def test_outputs_keep_order_windows_and_timestamps_and_get_side_inputs():
  _Twice.threads.clear()
  p = TestPipeline()
  offset = p | "Offset" >> beam.Create([100])
  out = (p | beam.Create([(i, 10 * i) for i in range(6)])
         | beam.Map(lambda kv: window.TimestampedValue(kv[0], kv[1]))
         | beam.WindowInto(window.FixedWindows(20))
         | beam.ParDo(_Twice(), offset=beam.pvalue.AsSingleton(offset))
         | beam.Map(lambda v, t=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam:
                    (v, int(t), int(w.start))))
  assert_that(out, equal_to([(v, 10 * i, 20 * (10 * i // 20)) for i in range(6)
                             for v in (i, i + 100)]))
  p.run().wait_until_finish()
  assert _Twice.threads and threading.get_ident() not in _Twice.threads


class _Fails(AheadDoFn):

  def work(self, element):
    if element == 2:
      raise ValueError("element 2 is bad")
    yield element


def test_an_error_in_the_work_fails_the_pipeline():
  p = TestPipeline()
  _ = p | beam.Create([1, 2, 3]) | beam.ParDo(_Fails())
  with pytest.raises(Exception, match="element 2 is bad"):
    p.run().wait_until_finish()


def test_order_within_a_bundle_is_the_input_order():
  fn = _Twice()
  fn.setup()
  fn.start_bundle()
  out = []
  for e in range(5):
    out.extend(v.value for v in fn.process(e, timestamp=0, window=window.GlobalWindow(),
                                           offset=1))
  out.extend(v.value for v in fn.finish_bundle())
  fn.teardown()
  assert out == [0, 1, 1, 2, 2, 3, 3, 4, 4, 5]


def test_setup_lowers_the_switch_interval_and_never_raises_it():
  before = sys.getswitchinterval()
  try:
    sys.setswitchinterval(0.005)
    fn = _Twice()
    fn.setup()
    fn.teardown()
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL)
    sys.setswitchinterval(SWITCH_INTERVAL / 5)
    fn.setup()
    fn.teardown()
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL / 5)
  finally:
    sys.setswitchinterval(before)
