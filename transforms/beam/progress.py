"""Progress: counts the records passing a stage (a Beam counter) and, on long runs, says so.

Each stage of a job gets a `skewtrace.<job>` counter `<stage>_records` (the job's summary reads
them at the end), and each worker process prints the running count of a stage to stderr at most
every `every_seconds` -- so a long local run shows records processed per stage, and short runs
(tests) stay quiet. The clock only paces these messages; nothing it says reaches an output.
"""
import sys
import time

import apache_beam as beam

from transforms.beam.arrow_coder import same_type

__all__ = ["Progress", "stage_counter", "stage_counts"]


def stage_counter(job, stage):
  """The Beam counter of the records passing `stage` in `job` (what stage_counts reads): for a
  stage computed inside another step, such as the features job's predict stage."""
  return beam.metrics.Metrics.counter(f"skewtrace.{job}", f"{stage}_records")


class _CountFn(beam.DoFn):

  def __init__(self, job, stage, every_seconds):
    self._job, self._stage, self._every = job, stage, every_seconds
    self._counter = stage_counter(job, stage)

  def setup(self):
    self._seen = 0
    self._last = time.monotonic()

  def process(self, element):
    rows = (element[1] if isinstance(element, tuple) else element).num_rows
    self._counter.inc(rows)
    self._seen += rows
    now = time.monotonic()
    if now - self._last >= self._every:
      self._last = now
      print(f"[{self._job}] {self._stage}: {self._seen} records so far (this worker)",
            file=sys.stderr, flush=True)
    yield element


class Progress(beam.PTransform):
  """RecordBatches (or (key, RecordBatch) pairs) -> the same, counted as records of `stage`."""

  def __init__(self, job, stage, every_seconds=10.0):
    super().__init__()
    self._args = (job, stage, every_seconds)

  def expand(self, batches):
    return batches | "Count" >> beam.ParDo(_CountFn(*self._args)).with_output_types(
        same_type(batches))


def stage_counts(result, job):
  """{stage: records} from a finished pipeline result's `skewtrace.<job>` counters."""
  counts = {}
  for c in result.metrics().query(beam.metrics.MetricsFilter().with_namespace(
      f"skewtrace.{job}"))["counters"]:
    name = c.key.metric.name
    if name.endswith("_records"):
      counts[name[:-len("_records")]] = counts.get(name[:-len("_records")], 0) + (
          c.committed if c.committed is not None else c.attempted)
  return counts
