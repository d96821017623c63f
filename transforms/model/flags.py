"""The model flags, defined once for every job that takes a model (pipelines.features, where the
predict stage runs; replay.diff, which predicts a side whose log lacks the stage and attributes
decision flips), and their checked value, a load.ModelSpec."""
from transforms.model.load import ModelSpec
from transforms.spec import decision
from transforms.spec.errors import UsageError

__all__ = ["add_arguments", "spec_of", "NAMES"]

NAMES = ("model_dir", "model_module", "model_signature", "model_output", "decision")


def add_arguments(parser):
  """Adds --model_dir, --model_module, --model_signature, --model_output and --decision to an
  argparse parser (pipelines/common.ModelOptions: the jobs share one definition)."""
  parser.add_argument("--model_dir", default="",
                      help="A TensorFlow SavedModel (TFX Trainer export or Keras export). "
                           "pipelines.features: the predict stage calls it on what the model "
                           "receives; replay.diff: it predicts a side whose log lacks the "
                           "predict stage and attributes decision flips to features "
                           "(docs/features.md, The model and the predict stage). Needs "
                           "--decision.")
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


def spec_of(flags, decision_alone=False):
  """The ModelSpec of the model flags (not given when no model); UsageError for a rule without
  a model (unless decision_alone: a dataset whose served predictions the rule decides on), a
  model without a rule, two models, or a rule that is not one."""
  spec = ModelSpec(model_dir=flags.model_dir or None, module=flags.model_module or None,
                   signature=flags.model_signature or None, output=flags.model_output or None,
                   decision=flags.decision or None)
  if spec.model_dir and spec.module:
    raise UsageError("--model_dir and --model_module: give one model")
  if not spec.given():
    for name in NAMES[2:]:
      if getattr(flags, name) and not (decision_alone and name in ("decision", "model_output")):
        raise UsageError(f"--{name} needs --model_dir or --model_module" + (
            " (or a dataset with served predictions, ingest --served_prediction)"
            if name == "decision" else ""))
    if spec.decision:
      decision.parse(spec.decision)
    return spec
  if not spec.decision:
    raise UsageError(f"{spec.flag()} needs --decision (threshold:T, argmax or top_k:K)")
  decision.parse(spec.decision)
  return spec
