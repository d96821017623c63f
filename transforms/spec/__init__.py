"""Beam-free contracts the offline job, the production logger and the diff share: importing any
of these modules imports neither Beam nor TensorFlow (tests/test_spec.py holds it)."""
__all__ = ["errors", "stages", "fingerprint", "key", "shard", "window", "serialize", "profile",
           "schema", "feature_log", "run_metadata", "dataset", "values", "event_time", "typing",
           "pii", "modules", "lock", "run_files", "decision", "exact_sum"]
