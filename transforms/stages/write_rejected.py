"""WriteRejected: dead-letter dicts -> one JSON-lines file sorted by (file, line), plus a count."""
import json

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from transforms.spec.dataset import REJECTED_PATH

__all__ = ["WriteRejected"]


class _WriteFn(beam.DoFn):

  def __init__(self, temp_dir):
    self._temp_dir = temp_dir

  def process(self, element):
    _, rows = element
    rows = sorted((r for r in rows if r is not None), key=lambda r: (r["file"], r["line"]))
    data = "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows)
    with FileSystems.create(FileSystems.join(self._temp_dir, REJECTED_PATH)) as f:
      f.write(data.encode("utf-8"))
    yield len(rows)


class WriteRejected(beam.PTransform):
  """Rejected rows are few (bounded by --max_rejected_fraction), so one sorted file holds them.

  Outputs the number of rows written (0 when there are none: the file is still written).
  """

  def __init__(self, temp_dir):
    super().__init__()
    self._temp_dir = temp_dir

  def expand(self, rejected):
    always = rejected.pipeline | "Anchor" >> beam.Create([(0, None)])
    return ((rejected | "KeyAll" >> beam.Map(lambda r: (0, r)), always)
            | "Merge" >> beam.Flatten()
            | "GroupAll" >> beam.GroupByKey()
            | "Write" >> beam.ParDo(_WriteFn(self._temp_dir)))
