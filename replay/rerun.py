"""Rerun: one raw CSV snapshot through ingest, features under two profiles, and the replay diff.

The way to test whether a configuration change explains an observed skew: the same records,
the same transform module, only the profile differs, so every divergence the diff reports is
the profile's doing (and its suspected causes name the profile fields). With
--transform_fn_dir_a / --transform_fn_dir_b a side transforms with a given transform_fn (e.g.
production's) instead of analysing the snapshot (pipelines.features --transform_fn_dir).

DirectRunner:
  python -m replay.rerun --input data/chicago_taxi/data.csv --transform_module transforms.taxi \
      --profile_a profiles/offline.yaml --profile_b profiles/production.yaml --output_dir out/rerun \
      [--schema data/chicago_taxi/schema.pbtxt] [--key_columns a,b] \
      [--abs_tol X] [--rel_tol Y] [--tolerance feature=abs:rel ...] \
      [--max_divergent_fraction F] [--fail_on divergent|latent] [--transform_fn_dir_a DIR] \
      [--transform_fn_dir_b DIR]
Dataflow: add --runner DataflowRunner --project P --region R --temp_location gs://B/tmp
  --setup_file ./setup.py (input and output on gs://); every Beam flag goes to all three jobs.

Writes OUT/ingest (pipelines.ingest, once), OUT/a and OUT/b (pipelines.features under
--profile_a and --profile_b; A is the diff's offline side, B its production side) and OUT/diff
(replay.diff: report.json, report.html). Exit code: replay.diff's (0 no divergence over
--max_divergent_fraction, 1 divergence), 2 usage or input error.
"""
import argparse

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions

from pipelines import common, dataset, features, ingest
from replay.diff import job as diff

__all__ = ["RerunOptions", "run"]

# The flags rerun takes from each job it runs (same names, same meaning; the jobs' option
# classes define them, since a flag may be defined only once per process). The jobs' other
# flags (--input_dir, --profile, --offline, --production, --formats, ...) rerun sets itself.
INGEST_FLAGS = ("input", "schema", "key_columns", "num_shards", "max_rejected_fraction")
FEATURES_FLAGS = ("transform_module", "log_buckets")
DIFF_FLAGS = ("abs_tol", "rel_tol", "tolerance", "max_divergent_fraction", "fail_on", "samples")
SUBDIRS = ("ingest", "a", "b", "diff")


class RerunOptions(PipelineOptions):
  """Flags of replay.rerun of its own; it also takes some of ingest's, features' and diff's."""

  @classmethod
  def _add_argparse_args(cls, parser):
    parser.add_argument("--profile_a", help="Required. Run profile of side A (the diff's "
                                            "offline side).")
    parser.add_argument("--profile_b", help="Required. Run profile of side B (the diff's "
                                            "production side).")
    parser.add_argument("--transform_fn_dir_a",
                        help="Side A transforms with this TF Transform output folder instead of "
                             "analysing the snapshot (pipelines.features --transform_fn_dir).")
    parser.add_argument("--transform_fn_dir_b",
                        help="Side B transforms with this TF Transform output folder, e.g. "
                             "production's transform_fn.")
    # --output_dir and --overwrite: common.OutputOptions.


_SOURCES = ((ingest.IngestOptions, INGEST_FLAGS), (features.FeaturesOptions, FEATURES_FLAGS),
            (diff.DiffOptions, DIFF_FLAGS),
            (RerunOptions, ("profile_a", "profile_b", "transform_fn_dir_a", "transform_fn_dir_b")),
            (common.OutputOptions, ("output_dir", "overwrite")))


class _Only:
  """An argparse parser stand-in that keeps only the named flags of an options class."""

  def __init__(self, parser, names):
    self._parser, self._names = parser, set(names)

  def add_argument(self, *flags, **kwargs):
    if flags[0][2:] in self._names:
      self._parser.add_argument(*flags, **kwargs)


def _own_parser(prog="python -m replay.rerun"):
  parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0],
                                   epilog=common.BEAM_FLAGS_NOTE, add_help=False,
                                   allow_abbrev=False)
  for cls, names in _SOURCES:
    cls._add_argparse_args(_Only(parser, names))  # pylint: disable=protected-access
  return parser


def _plan(argv):
  """(the output folders, the parsed options, each job's flags as a value) for rerun's argv.

  The jobs' flags are built from the same parsed options (their defaults included), with the
  flags rerun sets itself (folders, profiles, --overwrite) put in place: no argv is rewritten.
  """
  argv = list(argv or [])
  if "-h" in argv or "--help" in argv:
    raise common.HelpRequested(_own_parser().format_help())
  options = common.parse_options(argv, [cls for cls, _ in _SOURCES])  # unknown flags -> error
  given = {t[2:].split("=", 1)[0] for t in argv if t.startswith("--")}
  taken = {n for _, names in _SOURCES for n in names}
  foreign = sorted(given & {n for cls, _ in _SOURCES[:3] for n in common.flag_names(cls)}
                   - taken)
  if foreign:
    raise common.UsageError(f"replay.rerun sets --{foreign[0]} itself; it takes: "
                            + ", ".join(f"--{n}" for cls, names in _SOURCES for n in names))
  own = options.view_as(RerunOptions)
  out_opts = options.view_as(common.OutputOptions)
  for name, value in (("input", options.view_as(ingest.IngestOptions).input),
                      ("profile_a", own.profile_a), ("profile_b", own.profile_b),
                      ("transform_module",
                       options.view_as(features.FeaturesOptions).transform_module),
                      ("output_dir", out_opts.output_dir)):
    if not value:
      raise common.UsageError(f"--{name} is required")
  module = options.view_as(features.FeaturesOptions).transform_module
  for name in ("profile_a", "profile_b"):
    try:
      features.load_profile_and_module(getattr(own, name), module)
    except common.UsageError as e:  # name the flag rerun was given
      raise common.UsageError(str(e).replace("--profile ", f"--{name} ", 1)) from None
  for side in ("a", "b"):  # whether its inputs fit the snapshot: when that side's job plans
    if getattr(own, f"transform_fn_dir_{side}"):
      features.check_transform_fn_dir(getattr(own, f"transform_fn_dir_{side}"),
                                      flag=f"--transform_fn_dir_{side}")
  out, overwrite = out_opts.output_dir, out_opts.overwrite
  dataset.refuse_foreign_entries(out, overwrite)
  dirs = {d: FileSystems.join(out, d) for d in SUBDIRS}
  flags = {
      "ingest": common.flags_of(ingest.IngestFlags, options, ingest.IngestOptions,
                                output_dir=dirs["ingest"]),
      "a": common.flags_of(features.FeaturesFlags, options, features.FeaturesOptions,
                           input_dir=dirs["ingest"], output_dir=dirs["a"],
                           profile=own.profile_a, transform_fn_dir=own.transform_fn_dir_a),
      "b": common.flags_of(features.FeaturesFlags, options, features.FeaturesOptions,
                           input_dir=dirs["ingest"], output_dir=dirs["b"],
                           profile=own.profile_b, transform_fn_dir=own.transform_fn_dir_b),
      "diff": common.flags_of(diff.DiffFlags, options, diff.DiffOptions, offline=dirs["a"],
                              production=dirs["b"], output_dir=dirs["diff"]),
  }
  ingest.plan_ingest(flags["ingest"])  # the snapshot and its flags, before any job runs
  return dirs, options, flags


def run(argv=None, save_main_session=True):
  """Runs ingest, features twice and the diff; returns the diff's exit code (0 / 1).

  Raises UsageError for bad flags or input, before any job runs when the flags are at fault.
  """
  dirs, options, flags = _plan(argv)
  options.view_as(SetupOptions).save_main_session = save_main_session
  root = FileSystems.split(dirs["ingest"])[0]  # --output_dir
  with dataset.one_writer(root, "skewtrace rerun"):
    return _run_planned(dirs, options, flags)


def _run_planned(dirs, options, flags):
  """run()'s jobs, under the rerun folder's lock (each job also takes its own folder's)."""
  print(f"== ingest -> {dirs['ingest']}")
  ingest.run_job(flags["ingest"], options)
  for side in ("a", "b"):
    given = flags[side].transform_fn_dir
    print(f"== features, profile {side.upper()}"
          + (f", transform_fn {given}" if given else "") + f" -> {dirs[side]}")
    features.run_job(flags[side], options)
  print(f"== diff A (offline) vs B (production) -> {dirs['diff']}")
  return diff.run_job(flags["diff"], options)


if __name__ == "__main__":
  common.process_main(common.main_wrapper, run)
