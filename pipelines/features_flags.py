"""The flags of pipelines.features (FeaturesOptions, FeaturesFlags) and their checks: one
definition that the entry point (pipelines/features.py, also when run as __main__) and the job
(pipelines/features_job.py) share. Beam registers every PipelineOptions subclass, and two
classes defining --input_dir would conflict."""
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import common
from transforms.spec import feature_log, pii

__all__ = ["FeaturesOptions", "FeaturesFlags", "model_flags"]


def model_flags(flags):
  """The ModelSpec of the model flags (transforms/model/load.py; not given when no model);
  UsageError for a rule without a model, a model without a rule, or a rule that is not one."""
  from transforms.model.load import ModelSpec
  from transforms.spec import decision
  spec = ModelSpec(model_dir=flags.model_dir or None, module=flags.model_module or None,
                   signature=flags.model_signature or None, output=flags.model_output or None,
                   decision=flags.decision or None)
  if spec.model_dir and spec.module:
    raise common.UsageError("--model_dir and --model_module: give one model")
  if not spec.given():
    for name in ("model_signature", "model_output", "decision"):
      if getattr(flags, name):
        raise common.UsageError(f"--{name} needs --model_dir or --model_module")
    return spec
  if not spec.decision:
    raise common.UsageError(f"{spec.flag()} needs --decision (threshold:T, argmax or top_k:K)")
  decision.parse(spec.decision)
  return spec


class FeaturesOptions(PipelineOptions):
  """Flags of pipelines.features."""

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
    parser.add_argument("--pii_columns", default="",
                        help="Comma-separated log columns written as HMAC-SHA256 hex, as the "
                             "production logger writes them: 'key' and/or transformed feature "
                             "names (docs/logger.md, PII).")
    parser.add_argument("--pii_key_env", default="",
                        help="Name of the environment variable holding the HMAC key of "
                             "--pii_columns (the key itself is never written).")

    parser.add_argument("--model_dir", default="",
                        help="A TensorFlow SavedModel (TFX Trainer export or Keras export) the "
                             "predict stage calls on what the model receives (docs/features.md, "
                             "The model and the predict stage). Needs --decision.")
    parser.add_argument("--model_module", default="",
                        help="Instead of --model_dir: a module (dotted name or .py file) "
                             "defining predict(features: dict[str, numpy array]) -> scores.")
    parser.add_argument("--model_signature", default="",
                        help="The SavedModel signature to call (default: the one whose inputs "
                             "are all transformed features).")
    parser.add_argument("--model_output", default="",
                        help="The signature output holding the scores (default: its only one).")
    parser.add_argument("--decision", default="",
                        help="The decision rule on the scores: threshold:T (one score; >= T "
                             "decides 1), argmax or top_k:K.")

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
    model_flags(flags)  # a bad rule or a model flag without a model: before anything is read
    # --output_dir and --overwrite: common.OutputOptions.


# Named as the entry point's, which re-exports them: help and pickles say pipelines.features.
FeaturesOptions.__module__ = "pipelines.features"
FeaturesFlags = common.flags_type("FeaturesFlags", FeaturesOptions, "pipelines.features")
