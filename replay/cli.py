"""The `skewtrace` console script: one command with a subcommand per job.

  skewtrace ingest|features|verify|diff|rerun|check [flags]    (each as its python -m module)
  skewtrace --help | skewtrace SUBCOMMAND --help

Each subcommand takes exactly the flags of its module (`skewtrace ingest ...` is
`python -m pipelines.ingest ...`), with the same exit codes: 0 done / no divergence, 1 damage or
divergence over the threshold, 2 usage or input error. Modules are imported only when their
subcommand runs, so `skewtrace diff` never pays for TensorFlow's import.
"""
import importlib
import sys

from pipelines import common

__all__ = ["SUBCOMMANDS", "main"]

# name -> (module, one sentence)
SUBCOMMANDS = {
    "ingest": ("pipelines.ingest", "Raw CSV -> deterministic sharded TFRecord + Parquet, "
                                   "manifest and dead letters."),
    "features": ("pipelines.features", "TF Transform features over an ingest dataset, with a "
                                       "fingerprint of every record after every stage."),
    "verify": ("replay.verify_log", "Check an ingest dataset against its manifest, or a "
                                    "feature log row by row against its run metadata."),
    "diff": ("replay.diff.job", "Diff offline vs production feature logs; name each record's "
                            "first divergent stage."),
    "rerun": ("replay.rerun", "Ingest a CSV snapshot, run features under two profiles, and "
                              "diff them."),
    "check": ("replay.check", "The nightly skew check: diff one night's logs, apply "
                              "thresholds, keep the history."),
}


def usage():
  width = max(len(n) for n in SUBCOMMANDS)
  lines = ["usage: skewtrace SUBCOMMAND [flags]   (skewtrace SUBCOMMAND --help for its flags)",
           "", "Find where offline (training) and production (serving) features part ways.",
           "", "subcommands:"]
  lines += [f"  {name:<{width}}  {sentence}" for name, (_, sentence) in SUBCOMMANDS.items()]
  lines += ["", "Exit codes: 0 done / no divergence, 1 damage or divergence over the "
            "threshold, 2 usage or input error."]
  return "\n".join(lines)


def run(argv):
  """Runs a subcommand; returns its exit code (UsageError / HelpRequested propagate)."""
  argv = list(argv)
  if not argv or argv[0] in ("-h", "--help"):
    raise common.HelpRequested(usage())
  name, rest = argv[0], argv[1:]
  if name not in SUBCOMMANDS:
    raise common.UsageError(f"unknown subcommand {name!r}; one of: {', '.join(SUBCOMMANDS)}")
  module = importlib.import_module(SUBCOMMANDS[name][0])
  common.COMMAND["prog"] = f"skewtrace {name}"
  try:
    return module.run(rest)
  finally:
    common.COMMAND["prog"] = None


def main():
  """The console script's command: SystemExit with its exit code (common.main_wrapper)."""
  sys.argv = ["skewtrace"] + sys.argv[1:]
  common.main_wrapper(run)


def console():
  """Entry point of the console script: main() as its process's entry (common.process_main)."""
  common.process_main(main)


if __name__ == "__main__":
  console()
