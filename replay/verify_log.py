"""`skewtrace verify DIR`: an ingest dataset verified against its manifest (pipelines.verify), or
a feature log (a pipelines.features output or a production logger's folder) with every row
re-read and re-fingerprinted against its run metadata (replay/diff/integrity.py).

  skewtrace verify DIR
  python -m replay.verify_log DIR

Exit 0 intact, 1 damaged (each problem printed), 2 usage or not a dataset or log.
"""
from apache_beam.io.filesystems import FileSystems

from replay.diff.integrity import verify
from transforms.spec import lock, run_metadata
from transforms.spec.errors import UsageError

__all__ = ["verify", "is_log", "run"]


def is_log(directory):
  """Whether `directory` is a feature-log folder (it holds run_metadata.json)."""
  return FileSystems.exists(FileSystems.join(directory, run_metadata.FILE))


def run(argv=None):
  """`skewtrace verify DIR`: a feature-log folder is verified here, anything else is an ingest
  dataset for pipelines.verify. Exit 0 intact, 1 damaged (each problem printed), 2 usage."""
  from pipelines import verify as verify_dataset
  argv = list(argv or [])
  if len(argv) != 1 or argv[0].startswith("-") or not is_log(argv[0]):
    return verify_dataset.run(argv)
  writer = lock.live_writer(argv[0])
  if writer is not None:  # a logger compacting, a job publishing: not damage, not yet a log
    raise UsageError(f"{argv[0]} is being written by {writer}; verify it once that writer is "
                     "done")
  return verify_dataset.report(argv[0], verify(argv[0]),
                               "intact (every row re-read and re-fingerprinted)")


if __name__ == "__main__":
  from pipelines import common as _common
  _common.process_main(_common.main_wrapper, run)
