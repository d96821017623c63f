"""Progress: batches pass through unchanged and are counted per stage under skewtrace.<job>."""
import apache_beam as beam
import pyarrow as pa
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.beam.progress import Progress, stage_counts


def test_batches_pass_through_and_are_counted_per_stage(capsys):
  batches = [pa.record_batch([pa.array(range(n))], names=["x"]) for n in (3, 5, 0, 7)]
  p = TestPipeline()
  out = (p | beam.Create(batches)
         | "A" >> Progress("job", "window", every_seconds=0.0)
         | beam.Map(lambda b: (b.num_rows, b))  # (key, batch) pairs count too
         | "B" >> Progress("job", "shard"))
  assert_that(out | beam.Map(lambda kv: kv[0]), equal_to([3, 5, 0, 7]))
  result = p.run()
  result.wait_until_finish()
  assert stage_counts(result, "job") == {"window": 15, "shard": 15}
  assert "[job] window:" in capsys.readouterr().err  # every_seconds=0: it reports each batch
