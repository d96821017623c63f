"""The Python surface: the jobs called as functions, their results returned as values.

  from replay import api
  report = api.diff("out/offline", "out/production", "out/diff")
  report.summary()      # the text the command prints
  report.to_dict()      # report.json, as a dict
  report                # in Jupyter: the report's HTML, inline

Each function runs the job's own command line (the same flags, checks, outputs and exit codes
as `skewtrace ...`): keyword arguments become flags (`samples=20` is `--samples 20`, a True
bool is the bare flag, a list repeats the flag, a dict repeats it as key=value with a tuple
value joined by ':', so `tolerance={"fare_z": (0.01, 0)}` is `--tolerance fare_z=0.01:0`),
and `beam_args` passes Beam flags through. A bad input raises UsageError with the command's
one line. ingest() returns the dataset's manifest, features() the run metadata, as dicts;
diff() and rerun() the Report of the diff they ran; check() the night's (exit code, Report).
"""
import contextlib
import io
import json

from apache_beam.io.filesystems import FileSystems

from pipelines import common
from transforms.spec import dataset as dataset_spec
from transforms.spec import run_metadata

__all__ = ["Report", "diff", "ingest", "features", "rerun", "check"]


class Report:
  """A diff's report: `to_dict()` (report.json), `summary()` (the text the command prints),
  `exit_code` (0 / 1, as the command's), `html` and `path` (report.html), and an HTML
  representation that Jupyter renders inline (the report's own HTML)."""

  def __init__(self, data, html, path):
    self._data, self.html, self.path = data, html, path

  @property
  def exit_code(self):
    return self._data["exit_code"]

  def to_dict(self):
    return json.loads(json.dumps(self._data))  # a copy the caller may change

  def summary(self):
    from replay.report import render
    return render.render_text(self._data)

  def _repr_html_(self):
    return self.html

  def __repr__(self):
    records = self._data.get("records", {})
    return (f"<skewtrace Report: {records.get('divergent', 0)} divergent of "
            f"{records.get('matched_keys', 0)} matched, exit {self.exit_code}; {self.path}>")


def _argv(flags, beam_args):
  argv = []
  for name, value in flags.items():
    if value is None or value is False:
      continue
    if value is True:
      argv.append(f"--{name}")
      continue
    if isinstance(value, dict):  # {key: value or (parts, ...)}: one key=value flag per key
      value = [f"{k}={':'.join(map(str, v)) if isinstance(v, (list, tuple)) else v}"
               for k, v in value.items()]
    for v in value if isinstance(value, (list, tuple)) else [value]:
      argv += [f"--{name}", str(v)]
  return argv + list(beam_args or ())


def _read(path):
  with FileSystems.open(path, compression_type="uncompressed") as f:  # gs:// as well
    return f.read().decode("utf-8")


def _read_json(path):
  return json.loads(_read(path))


def diff(offline, production, output_dir, beam_args=(), **flags):
  """replay.diff on two feature-log folders; returns the Report it wrote to output_dir (the
  text the command prints is its summary(), not printed here)."""
  from replay.diff import job
  with contextlib.redirect_stdout(io.StringIO()):  # the text is the Report's summary()
    job.run(_argv(dict(offline=offline, production=production, output_dir=output_dir,
                       **flags), beam_args), save_main_session=False)
  return _report(output_dir)


def _report(report_dir):
  from replay.diff import job
  html_path = FileSystems.join(report_dir, job.REPORT_HTML)
  return Report(_read_json(FileSystems.join(report_dir, job.REPORT_JSON)), _read(html_path),
                html_path)


def rerun(input, output_dir, profile_a, profile_b, beam_args=(), **flags):  # noqa: A002
  """replay.rerun: one snapshot through ingest, features under two profiles and the diff;
  returns the Report of its diff (output_dir/diff)."""
  from replay import rerun as job
  with contextlib.redirect_stdout(io.StringIO()):
    job.run(_argv(dict(input=input, output_dir=output_dir, profile_a=profile_a,
                       profile_b=profile_b, **flags), beam_args), save_main_session=False)
  return _report(FileSystems.join(output_dir, "diff"))


def check(config, date=None, beam_args=()):
  """replay.check: one night's skew check from its config; returns (exit code: 0 thresholds
  held, 1 broken; the night's Report, whose HTML carries the trend)."""
  from replay import check as job
  with contextlib.redirect_stdout(io.StringIO()):
    code = job.run(_argv(dict(config=config, date=date), beam_args))
  return code, _report(job.report_dir(config, date))


def ingest(input, output_dir, beam_args=(), **flags):  # noqa: A002 -- the flag's name
  """pipelines.ingest; returns the written dataset's manifest."""
  from pipelines import ingest as job
  job.run(_argv(dict(input=input, output_dir=output_dir, **flags), beam_args),
          save_main_session=False)
  return _read_json(FileSystems.join(output_dir, dataset_spec.MANIFEST))


def features(input_dir, output_dir, profile, beam_args=(), **flags):
  """pipelines.features; returns the run's run_metadata.json."""
  from pipelines import features as job
  code = job.run(_argv(dict(input_dir=input_dir, output_dir=output_dir, profile=profile,
                            **flags), beam_args), save_main_session=False)
  if code:
    raise common.UsageError(f"features exited {code}")
  return _read_json(FileSystems.join(output_dir, run_metadata.FILE))
