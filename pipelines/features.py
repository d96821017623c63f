"""Features: TF Transform over an ingest dataset, fingerprinting every record after every stage.

DirectRunner:
  python -m pipelines.features --input_dir out/ingest --output_dir out/features \
      --transform_module transforms.taxi --profile profiles/offline.yaml \
      [--transform_fn_dir out/production_features/transform_fn]
Dataflow: add --runner DataflowRunner --project P --region R --temp_location gs://B/tmp
  --setup_file ./setup.py (input and output on gs://).
Stages, in order (names as in logs and reports): raw and parse (carried from ingest), window
(WindowRecords), shard (ShardRecords, with the profile's sampling), serialize
(SerializeRecords), transform (TFT; with --transform_fn_dir, that transform_fn, not analysed).
Writes DIR/transform_fn/ (tft.TFTransformOutput, or a copy of the given one), DIR/transformed/
(tf.Example TFRecord), DIR/feature_log/*.parquet and DIR/run_metadata.json.
"""
import importlib

from pipelines import common
from pipelines.features_flags import FeaturesFlags, FeaturesOptions

__all__ = ["FeaturesOptions", "FeaturesFlags", "FeaturesPlan", "plan_features", "build_pipeline",
           "load_profile_and_module", "check_transform_fn_dir", "read_dataset_column", "run_job",
           "run"]

# The job itself (pipelines/features_job.py) imports TensorFlow, TF Transform and tfx_bsl: it
# is imported when the job runs, so --help and a flag error answer without them.
_JOB = "pipelines.features_job"
_JOB_NAMES = ("FeaturesPlan", "plan_features", "build_pipeline", "load_profile_and_module",
              "check_transform_fn_dir", "read_dataset_column", "run_job", "LOG_INFO",
              "_check_key_columns")


def __getattr__(name):
  if name in _JOB_NAMES:
    return getattr(importlib.import_module(_JOB), name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run(argv=None, save_main_session=True):
  """Runs the features job from its command line; returns the exit code. Raises UsageError for
  bad flags/input."""
  options, _, _ = common.job_options(argv, FeaturesOptions, save_main_session)
  job = importlib.import_module(_JOB)
  return job.run_job(common.flags_of(FeaturesFlags, options, FeaturesOptions), options)


if __name__ == "__main__":
  common.process_main(common.main_wrapper, run)
