"""skewtrace replay: diff offline vs production feature logs, stage by stage.

One sub-package per role, and at the top the jobs and entry points:
  logger    the production logger, in serving's own process (imports no Beam, nothing of the
            diff or the report)
  diff      the diff engine: the Beam diff job (python -m replay.diff) and its pure kernels
  report    the report model (report.json's shape) and its text and HTML renderers (no Beam)
  verify_log  a feature log's every row re-read and re-fingerprinted against its metadata
            (skewtrace verify, with pipelines.verify for datasets)
  rerun     one CSV, two profiles, features twice and the diff
  check     the nightly skew check
  cli       the skewtrace console script;  api  the jobs as Python functions

Imports flow logger -> (nothing of replay); report -> (nothing of replay); diff -> report,
verify_log; the jobs and entry points -> any (tests/test_import.py holds it). Modules are
imported on use, so `import replay` costs nothing and never loads TensorFlow.
"""
__all__ = ["api", "check", "cli", "diff", "logger", "report", "rerun", "verify_log"]
