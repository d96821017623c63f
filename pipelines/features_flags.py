"""The flags of pipelines.features (FeaturesOptions, FeaturesFlags) and their checks: one
definition that the entry point (pipelines/features.py, also when run as __main__) and the job
(pipelines/features_job.py) share. Beam registers every PipelineOptions subclass, and two
classes defining --input_dir would conflict."""
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import common
from transforms.model import flags as model_flags
from transforms.spec import feature_log, pii

__all__ = ["FeaturesOptions", "FeaturesFlags"]


class FeaturesOptions(PipelineOptions):
  """Flags of pipelines.features."""
  SHARED = (common.ModelOptions,)  # --model_dir and the other model flags

  @classmethod
  def _add_argparse_args(cls, parser):
    parser.add_argument("--input_dir", help="Required. An ingest dataset folder (it must "
                                            "verify).")
    parser.add_argument("--transform_module", default="",
                        help="Required. The feature module (preprocessing_fn and the feature "
                             "declarations, docs/features.md): a dotted module name or the "
                             "path of its .py file.")
    parser.add_argument("--profile", help="Required. Run profile YAML (profiles/offline.yaml, "
                                          "...).")
    parser.add_argument("--log_buckets", type=int, default=16,
                        help="Key-hash buckets of the feature log.")
    parser.add_argument("--transform_fn_dir",
                        help="Transform with this TF Transform output folder (a features run's "
                             "OUTPUT/transform_fn, or any TFT job's) instead of analysing the "
                             "input: production's artifacts over offline data.")
    parser.add_argument("--bounded_memory", action="store_true",
                        help="Read the dataset twice, once for TF Transform's analysis and once "
                             "for the transform and the feature log, so that no runner holds the "
                             "whole input while the analysis runs: a local run's memory stays "
                             "flat as the data grows (with --log_buckets growing with it). Same "
                             "output bytes; the stages before TFT run twice "
                             "(docs/features.md, \"Memory\").")
    parser.add_argument("--pii_columns", default="",
                        help="Comma-separated log columns written as HMAC-SHA256 hex, as the "
                             "production logger writes them: 'key' and/or transformed feature "
                             "names (docs/logger.md, PII).")
    parser.add_argument("--pii_key_env", default="",
                        help="Name of the environment variable holding the HMAC key of "
                             "--pii_columns (the key itself is never written).")

  @staticmethod
  def check(flags):
    """UsageError naming the first of FeaturesFlags `flags` that cannot be used."""
    for name in ("input_dir", "output_dir", "profile", "transform_module"):
      if not getattr(flags, name):
        raise common.UsageError(f"--{name} is required")
    if not 1 <= flags.log_buckets <= feature_log.MAX_BUCKETS:
      raise common.UsageError(f"--log_buckets must be 1 to {feature_log.MAX_BUCKETS}, not "
                              f"{flags.log_buckets}")
    if pii.Pii.parse(flags.pii_columns, flags.pii_key_env).columns:
      if not flags.pii_key_env:
        raise common.UsageError("--pii_columns needs --pii_key_env, the environment variable "
                                "holding the HMAC key")
      pii.secret_from_env(flags.pii_key_env)  # UsageError when the key is not there
    # a bad rule, a model flag without a model: before anything (--decision alone is checked
    # against the dataset's served predictions when the plan reads its manifest)
    model_flags.spec_of(flags, decision_alone=True)
    # --output_dir and --overwrite: common.OutputOptions.


# Named as the entry point's, which re-exports them: help and pickles say pipelines.features.
FeaturesOptions.__module__ = "pipelines.features"
FeaturesFlags = common.flags_type("FeaturesFlags", FeaturesOptions, "pipelines.features")
