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

Tables come as pandas DataFrames: Report.records() (the report's sampled records, one row each:
key, class, first stage, cause, each differing feature's two values, both predictions and
decisions and the flip) and read_log(dir) (a feature log read back, its checksums verified);
replay.logger.ProductionLogger.log_table takes a DataFrame as it takes an Arrow table.
"""
import contextlib
import io
import json

from apache_beam.io.filesystems import FileSystems

from pipelines import common
from transforms.spec import dataset as dataset_spec
from transforms.spec import run_metadata

__all__ = ["Report", "diff", "ingest", "features", "rerun", "check", "read_log"]

# Report.records(): the sample kinds, as the record class each stands for.
_SAMPLE_CLASSES = (("divergent", "divergent"), ("latent", "latent"),
                   ("offline_only", "offline_only"), ("production_only", "production_only"),
                   ("duplicate_keys", "duplicate_key"))


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

  def records(self):
    """The report's sampled records as a pandas DataFrame, one row per record: key, class
    (divergent, latent, offline_only, production_only, duplicate_key, and flipped for a
    decision flip's sample), first_stage, cause (the suspected causes at that stage, `; `
    joined), features (the differing features, `, ` joined), <F>_offline and <F>_production per
    differing feature, and where predictions were compared prediction_offline,
    prediction_production, decision_offline, decision_production and flipped."""
    import pandas as pd
    causes = {}
    for c in self._data.get("suspected_causes", []):
      causes.setdefault(c["stage"], []).append(c["field"])
    samples = self._data.get("samples", {})
    listed = [(cls, e) for kind, cls in _SAMPLE_CLASSES for e in samples.get(kind, [])]
    listed += [("flipped", e) for e in (self._data.get("decisions") or {}).get("samples", [])]
    rows = []
    for cls, e in listed:
      stage = e.get("first_divergent_stage") or None
      feats = e.get("features", {})
      row = {"key": e["key"], "class": cls, "first_stage": stage,
             "cause": "; ".join(causes.get(stage, [])) or None,
             "features": ", ".join(sorted(feats)) or None}
      for name, (a, b) in sorted(feats.items()):
        row[f"{name}_offline"], row[f"{name}_production"] = a, b
      if "prediction" in e:
        row.update(prediction_offline=e["prediction"][0], prediction_production=e["prediction"][1],
                   decision_offline=e["decision"][0], decision_production=e["decision"][1],
                   flipped=e["decision"][0] != e["decision"][1])
      rows.append(row)
    return pd.DataFrame(rows, columns=None if rows else ["key", "class", "first_stage", "cause",
                                                          "features"])

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


def read_log(log_dir):
  """A feature log (a features run's or a logger's folder) read back as a pandas DataFrame,
  every bucket file or part in path order, each Parquet page's checksum verified (a damaged
  page is an error, not other values)."""
  import pyarrow as pa
  import pyarrow.parquet as pq
  from transforms.spec import feature_log
  paths = sorted(m.path for m in FileSystems.match(
      [FileSystems.join(log_dir, feature_log.LOG_DIR, "*.parquet")])[0].metadata_list)
  if not paths:
    raise common.UsageError(f"{log_dir}: no feature log (no {feature_log.LOG_DIR}/*.parquet)")
  tables = []
  for path in paths:
    with FileSystems.open(path, compression_type="uncompressed") as f:
      tables.append(pq.read_table(f, **feature_log.read_options()))
  return pa.concat_tables(tables, promote_options="default").to_pandas()
