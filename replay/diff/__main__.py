"""python -m replay.diff: the diff job of replay/diff/job.py, under the package's name."""
from pipelines import common
from replay.diff import job

if __name__ == "__main__":
  common.COMMAND["prog"] = "python -m replay.diff"
  common.process_main(common.main_wrapper, job.run)
