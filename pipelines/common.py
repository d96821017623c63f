"""What every job shares: strict flag parsing, the exit-code wrapper; the error types
(transforms/spec/errors.py) and versions (transforms/spec/run_metadata.py) re-exported."""
import argparse
import dataclasses
import difflib
import errno
import logging
import os
import re
import sys

from apache_beam.options import pipeline_options
from apache_beam.options.pipeline_options import PipelineOptions

from transforms.beam import loopback
from transforms.spec.errors import DataError, HelpRequested, UsageError
from transforms.spec.run_metadata import versions

__all__ = ["UsageError", "DataError", "HelpRequested", "OutputOptions", "ModelOptions",
           "JobOptions",
           "parse_options", "job_options", "job_help", "versions", "main_wrapper", "exit_now",
           "process_main", "flag_names", "flags_type", "flags_of", "disk_full"]


class OutputOptions(PipelineOptions):
  """Flags every job that writes a folder shares."""

  @classmethod
  def _add_argparse_args(cls, parser):
    parser.add_argument("--output_dir", help="Required. Folder to write.")
    parser.add_argument("--overwrite", action="store_true",
                        help="Replace an output folder that holds something else.")


class ModelOptions(PipelineOptions):
  """The model flags (transforms/model/flags.py), for every job that takes a model: one class,
  so Beam's parser, which gathers every PipelineOptions subclass, defines them once. A job's
  options class lists it in SHARED."""

  @classmethod
  def _add_argparse_args(cls, parser):
    from transforms.model import flags as model_flags
    model_flags.add_arguments(parser)


def _classes(options_class):
  """A job's options classes: its own, OutputOptions, and the shared ones it lists (SHARED)."""
  return [options_class, OutputOptions, *getattr(options_class, "SHARED", ())]


class JobOptions(PipelineOptions):
  """The jobs' PipelineOptions: one view per options class, made on its first use.

  Beam 2.77 checks type hints with typehints.is_consistent_with, which reads --disable_beartype
  through options.view_as(TypeOptions) on every call, and every view parses the flags again
  with a fresh argparse parser: building the features pipeline made ~2,100 views, 0.5 of its
  1.3 s. All views of one options object share its values (Beam's view semantics: a value set
  through one shows in all), so one view per class changes nothing but the time.
  """

  def view_as(self, cls):
    views = self.__dict__.get("_views")
    if views is None:
      views = {}
      object.__setattr__(self, "_views", views)  # PipelineOptions refuses other attributes
    if cls not in views:
      views[cls] = super().view_as(cls)
    return views[cls]


def parse_options(argv, job_classes=None):
  """PipelineOptions from argv, rejecting flags that neither Beam nor the job defines.

  Beam itself only warns about unknown flags and drops them, so a misspelt flag would
  silently fall back to its default. This parses as Beam's get_all_options does (the direct
  PipelineOptions subclasses, first of each name) and fails on leftovers. With `job_classes`,
  only Beam's own options classes and those are accepted, so another job's flag is an error
  too (every job module may be imported in one process, e.g. by the skewtrace command). Every
  job parses its flags here, so here its gRPC servers are set to bind loopback only
  (transforms/beam/loopback.py).
  """
  loopback.bind_loopback()
  argv = list(argv)
  parser = pipeline_options._BeamArgumentParser(allow_abbrev=False)  # pylint: disable=protected-access
  subset = {}
  for cls in PipelineOptions.__subclasses__():
    if job_classes is None or cls.__module__.startswith("apache_beam.") or cls in job_classes:
      subset.setdefault(str(cls), cls)
  for cls in subset.values():
    cls._add_argparse_args(parser)  # pylint: disable=protected-access

  def refuse(message):  # argparse would print its whole usage to stderr and exit: one line
    raise UsageError(f"{message} (flags: {' '.join(argv)})")
  parser.error = refuse
  try:
    _, unknown = parser.parse_known_args(argv)
  except SystemExit:
    raise UsageError(f"cannot parse flags: {' '.join(argv)}") from None
  if unknown:
    known = [o for a in parser._actions for o in a.option_strings  # pylint: disable=protected-access
             if o.startswith("--")]
    raise UsageError("unknown flag(s): " + ", ".join(_did_you_mean(u, known) for u in unknown))
  return JobOptions(argv)


def _did_you_mean(token, known):
  """An unknown flag as the error names it, with the closest known flag when one is close."""
  name = token.split("=", 1)[0]
  return did_you_mean(name, known, token) if name.startswith("--") else token


def did_you_mean(name, known, shown=None):
  """An unknown name (a flag, a config field) as an error names it (`shown`, default the name),
  with the closest of `known` when one is close."""
  close = difflib.get_close_matches(str(name), [str(k) for k in known], n=1, cutoff=0.75)
  shown = str(name) if shown is None else shown
  return f"{shown} (did you mean {close[0]}?)" if close else shown


BEAM_FLAGS_NOTE = ("Any Beam pipeline flag is accepted as well (--runner, --direct_num_workers, "
                   "--direct_running_mode, --job_endpoint, --environment_type, --project, "
                   "--region, --temp_location, ...); an unknown or misspelt flag is an error.")


class _DefaultsShown(argparse.HelpFormatter):
  """Help lines that end with the flag's default, where it has one worth showing."""

  def _get_help_string(self, action):
    text = action.help or ""
    if action.default not in (None, "", False, argparse.SUPPRESS) and "default" not in text:
      text += " (default: %(default)s)"
    return text


def job_help(prog, options_classes, description):
  """The --help text of a job: each of its own flags with its sentence and default, then the
  Beam note."""
  parser = argparse.ArgumentParser(prog=prog, description=description, epilog=BEAM_FLAGS_NOTE,
                                   add_help=False, formatter_class=_DefaultsShown)
  for cls in options_classes:
    cls._add_argparse_args(parser)  # pylint: disable=protected-access
  return parser.format_help()


# The command a job's help names: "skewtrace SUBCOMMAND" when the skewtrace script runs it
# (replay/cli.py sets it), else "python -m MODULE".
COMMAND = {"prog": None}


def job_options(argv, options_class, save_main_session, prog=None):
  """(all options, the job's own view, its OutputOptions view) from argv, strictly parsed.

  -h / --help raises HelpRequested with the job's help text.
  """
  argv = list(argv or [])
  if "-h" in argv or "--help" in argv:
    doc = (options_class.__doc__ or "").strip()
    module = options_class.__module__
    if module == "__main__":  # run as python -m pkg.job
      module = getattr(sys.modules["__main__"].__spec__, "name", module)
    prog = prog or COMMAND["prog"] or f"python -m {module}"
    raise HelpRequested(job_help(prog, _classes(options_class), doc))
  options = parse_options(argv, _classes(options_class))
  options.view_as(pipeline_options.SetupOptions).save_main_session = save_main_session
  return options, options.view_as(options_class), options.view_as(OutputOptions)


def flag_names(options_class):
  """The flag names (without --) an options class defines, in definition order."""
  parser = argparse.ArgumentParser(add_help=False)
  options_class._add_argparse_args(parser)  # pylint: disable=protected-access
  return [a.dest for a in parser._actions]  # pylint: disable=protected-access


def flags_type(name, options_class, module):
  """A frozen dataclass with one field per flag of options_class and of OutputOptions: a job's
  arguments as a value (what run_job takes), so other jobs compose them (replay.rerun, the
  nightly check) instead of writing argv strings. The flag list stays the options class's."""
  cls = dataclasses.make_dataclass(
      name, [f for c in _classes(options_class) for f in flag_names(c)], frozen=True)
  cls.__module__ = module  # pickled by reference, as a class written in `module` would be
  cls.__doc__ = f"The flags of {options_class.__name__} and OutputOptions, as one value."
  return cls


def flags_of(flags_class, options, options_class, **overrides):
  """flags_class's value from the parsed options' views (each flag's default included), with
  `overrides` (flag name -> value) in place of the parsed ones."""
  views = [options.view_as(c) for c in _classes(options_class)]
  values = {}
  for field in dataclasses.fields(flags_class):
    if field.name in overrides:
      values[field.name] = overrides[field.name]
    else:
      values[field.name] = next(getattr(v, field.name) for v in views
                                if field.name in flag_names(type(v)))
  return flags_class(**values)


def main_wrapper(run):
  """Calls run(argv); UsageError -> message on stderr and its exit code; never a traceback."""
  logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
  # Beam logs a failing DoFn's traceback before it re-raises the exception: the exception is
  # what this wrapper reports (one line), or Python prints once, unhandled.
  logging.getLogger("apache_beam.runners.common").setLevel(logging.CRITICAL)
  try:
    code = run(sys.argv[1:])
  except HelpRequested as e:
    try:
      print(e)
    except BrokenPipeError:  # help piped into `head`: what was read is all that was wanted
      sys.stdout = open(os.devnull, "w", encoding="utf-8")  # no second error at exit
    code = e.exit_code
  except UsageError as e:  # one line, whatever a library put in the message
    print("error: " + "; ".join(line.strip() for line in str(e).splitlines() if line.strip()),
          file=sys.stderr)
    code = e.exit_code
  except Exception as e:  # noqa: BLE001 -- a full disk is the one failure named, else re-raised
    full = disk_full(e)
    if full is None:
      raise
    print(f"error: {full}", file=sys.stderr)
    code = UsageError.exit_code
  sys.exit(code or 0)


_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_FULL_TEXT = re.compile(r"\[Errno (%s)\][^\[]*" % "|".join(str(n) for n in sorted(_FULL_ERRNOS)))


def disk_full(error):
  """One line when `error` (or what it wraps: a Beam runner re-raises a worker's OSError as a
  RuntimeError naming it) is a write refused for want of space, else None. The jobs clean up
  after themselves on the way out (their temp folders, their lock), so nothing is left."""
  seen = error
  while seen is not None:
    if isinstance(seen, OSError) and seen.errno in _FULL_ERRNOS:
      what = f"[Errno {seen.errno}] {seen.strerror}"
      break
    found = _FULL_TEXT.search(str(seen))
    if found:
      what = found.group(0).strip()
      break
    seen = seen.__cause__ or seen.__context__
  else:
    return None
  named = argparse.ArgumentParser(add_help=False)
  named.add_argument("--output_dir")
  out = named.parse_known_args(sys.argv[1:])[0].output_dir
  where = f"the device holding {out}" if out else "the output's device"
  return (f"no space left on {where} ({what}); nothing was published: free space there or "
          "write to another folder")


def process_main(main, *args):
  """Runs main(*args) as the entry point of a command's process (`python -m`, the console
  script), then ends the process through exit_now with the code it exits with. main_wrapper
  alone raises SystemExit, so that a caller in the same process (a test) gets it back."""
  try:
    main(*args)
    code = 0
  except SystemExit as e:
    code = e.code
    if code is not None and not isinstance(code, int):  # sys.exit("message"), as Python does
      print(code, file=sys.stderr)
      code = 1
  exit_now(code or 0)


def exit_now(code):
  """Ends a finished command with `code`: Python's exit handlers run and its output is flushed,
  then the process ends without the C++ static destructors. Those tear down Arrow's thread
  pools while their workers may still be alive, and std::thread then aborts the process
  ('terminate called without an active exception', exit 134) after it printed its result:
  `skewtrace verify` did so in 1 run of 40 under load (apache/arrow#34314, #39862). A command's
  outputs are all written and closed by then (every job publishes before it returns)."""
  import atexit
  import threading
  try:
    threading._shutdown()  # noqa: SLF001 -- what the interpreter does first at exit: join
    atexit._run_exitfuncs()  # noqa: SLF001 -- then the exit handlers, as sys.exit would
    logging.shutdown()
  finally:
    for stream in (sys.stdout, sys.stderr):
      try:
        stream.flush()
      except (OSError, ValueError):  # a closed pipe: nothing more can be said
        pass
    os._exit(code)
