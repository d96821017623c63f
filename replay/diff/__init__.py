"""The diff engine: the Beam diff job and the pure kernels it applies.

  job        the Beam job (python -m replay.diff, skewtrace diff): plan, read, join, compare,
             total, report; exit codes 0 / 1 / 2
  flags      its flags (DiffOptions) and their checked value (DiffFlags)
  runs       the two runs' metadata loaded and checked, buckets planned by digest, parts listed
  causes     suspected causes: the two runs' metadata differences, each tied to its stage
  compare    pure comparison of joined Arrow tables into the mergeable Partial
  served     the serve stage: what the model received on each side, compared
  decisions  the predict stage: prediction deltas and decision flips, per stage and class
  predicting the diff's own model: predicts a side lacking the stage, attributes flips
  moved      records whose event time moved, and the window neighbours they change
  kernels    its vectorised row kernels (numeric deltas, deterministic samples, window noise)
  tolerance  the validated numeric tolerances
  analyzers  the analyze stage compared numerically under float noise
  drift      mergeable histograms; L-infinity, Jensen-Shannon and PSI as TFDV defines them
  evidence   the input columns of sampled records, from each side's dataset
  integrity  a feature log's every row re-read and re-fingerprinted against its run metadata
             (skewtrace verify; --verify_logs; by default, the buckets the diff reads)
  summary    the report built from the merged Partial (the shape is replay.report's)

May import transforms, pipelines (the job's options and dataset readers) and replay.report (the
shape it fills, the renderers it writes with); never replay.logger nor replay's jobs. Only job,
runs, evidence and integrity import Beam (job its pipeline, the others its FileSystems); the
kernels (compare, served, decisions, predicting, moved, kernels, tolerance, analyzers, drift, causes, summary) are
plain functions over Arrow tables and dicts. Importing this package imports none of them.
"""
__all__ = ["analyzers", "causes", "compare", "decisions", "drift", "evidence", "flags",
           "integrity", "job", "kernels", "moved", "predicting", "runs", "served", "summary",
           "tolerance"]
