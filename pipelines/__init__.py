"""skewtrace jobs: each module is a composite + builder from a typed plan + a thin run(argv)."""
__all__ = ["common", "dataset", "feature_module", "features", "features_checks", "features_flags",
           "features_job", "features_output", "ingest", "ingest_columns", "verify"]
