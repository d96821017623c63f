"""skewtrace replay: diff offline vs production feature logs, stage by stage.

Modules (imported on use, so `import replay` costs nothing and never loads TensorFlow):
  diff      python -m replay.diff, the Beam diff job (CLI, exit codes 0 / 1 / 2)
  compare   pure comparison kernels over Arrow tables, the mergeable Partial;  kernels  its
            vectorised row kernels (numeric deltas, deterministic samples)
  tolerance the validated numeric tolerances
  metadata  run-metadata comparison: suspected causes, equal and differing buckets
  drift     mergeable histograms; L-infinity, Jensen-Shannon and PSI as TFDV defines them
  model     the report model (frozen dataclasses, report.json's shape)
  render    text and HTML renderers of a report;  charts  its SVG charts and formatters
  analyzers the analyze stage compared numerically under float noise
  evidence  the input columns of sampled records, from each side's dataset
  verify_log  a feature log's every row re-read and re-fingerprinted against its metadata
  logger    the production-side feature logger;  log_rows  its stage rules;  log_accept
            what it accepts;  log_files  its part and staging primitives;  logger_config  its
            configuration from an offline run's metadata
  check     the nightly skew check;  cli  the skewtrace console script
"""
__all__ = ["analyzers", "api", "charts", "check", "cli", "compare", "diff", "drift", "evidence",
           "kernels", "log_accept", "log_files", "log_rows", "logger", "logger_config",
           "metadata", "model", "render", "rerun", "tolerance", "verify_log"]
