"""replay.diff's flags (DiffOptions) and their checked form (DiffFlags), apart from the job."""
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import common
from replay.diff import tolerance as tolerances
from replay.report import report_model
from transforms.model import flags as model_flags

__all__ = ["DiffOptions", "DiffFlags", "SCOPES"]

SCOPES = ("auto", "all", "production")


class DiffOptions(PipelineOptions):
  """Flags of replay.diff."""
  SHARED = (common.ModelOptions,)  # --model_dir and the other model flags

  @classmethod
  def _add_argparse_args(cls, parser):
    parser.add_argument("--offline", help="Required. Offline feature-log folder "
                                          "(pipelines.features output: run_metadata.json + "
                                          "feature_log/).")
    parser.add_argument("--production", help="Required. Production feature-log folder, same "
                                             "layout.")
    parser.add_argument("--abs_tol", type=float, default=None,
                        help="Absolute tolerance on numeric features (default: float noise, "
                             "sqrt(N)*u of the value's dtype; with --rel_tol alone, 0).")
    parser.add_argument("--rel_tol", type=float, default=None,
                        help="Relative tolerance on numeric features (default: float noise; "
                             "with --abs_tol alone, 0).")
    parser.add_argument("--tolerance", action="append", default=None,
                        help="Per-feature tolerance feature=abs:rel (repeatable).")
    parser.add_argument("--max_divergent_fraction", type=float, default=0.0,
                        help="Largest divergent fraction that still exits 0 (default 0).")
    parser.add_argument("--fail_on", default="divergent", choices=report_model.FAIL_ON,
                        help="What counts toward the divergent fraction besides one-side-only "
                             "records: divergent (what the model receives differs; default) or "
                             "latent (also records a stage tells apart, the model inputs "
                             "agreeing).")
    parser.add_argument("--verify_logs", action="store_true",
                        help="First re-read every row of both logs and check it against its "
                             "run metadata (replay/diff/integrity.py); a problem is exit 2.")
    parser.add_argument("--no_verify_logs", action="store_true",
                        help="Skip the default checks (for logs verified separately): the rows "
                             "of each bucket read, against their own fingerprints and run "
                             "metadata, and the page checksums of each bucket skipped as "
                             "equal; a problem is exit 2.")
    parser.add_argument("--samples", type=int, default=10,
                        help="Samples kept per kind (divergent, one side only, duplicates).")
    parser.add_argument("--scope", default="auto", choices=SCOPES,
                        help="Which offline records production is expected to hold: all, or "
                             "production (the keys it saw: the rest are not_served); auto: "
                             "production when its log records partial coverage (a sample).")
    parser.add_argument("--attribution_records", type=int, default=100000,
                        help="Flipped records whose inputs differ that the attribution swaps "
                             "features back for (the smallest key hashes first; default "
                             "100000); needs the model.")
    # --output_dir and --overwrite: common.OutputOptions.

  @staticmethod
  def check(flags):
    """UsageError naming the first of DiffFlags `flags` that cannot be used; the tolerances."""
    if not flags.output_dir:
      raise common.UsageError("--output_dir is required")
    tol = tolerances.from_flags(flags.abs_tol, flags.rel_tol, flags.tolerance or ())
    frac = flags.max_divergent_fraction
    if not 0 <= frac <= 1:
      raise common.UsageError(f"--max_divergent_fraction must be in [0, 1], got {frac}")
    if flags.samples < 0:
      raise common.UsageError(f"--samples must be >= 0, got {flags.samples}")
    if flags.attribution_records < 0:
      raise common.UsageError(f"--attribution_records must be >= 0, got "
                              f"{flags.attribution_records}")
    model_flags.spec_of(flags)
    return tol


# Named as the job's, which re-exports them: help and pickles say replay.diff.job.
DiffOptions.__module__ = "replay.diff.job"
DiffFlags = common.flags_type("DiffFlags", DiffOptions, "replay.diff.job")
