"""The nightly skew check: diff one night's offline and production logs, apply thresholds, keep
the history, and exit 0 (held) / 1 (a threshold broken) / 2 (configuration or input error).

  skewtrace check --config nightly.yaml [--date YYYY-MM-DD] [Beam flags]
  python -m replay.check --config nightly.yaml [--date YYYY-MM-DD]

The config (YAML, safe-loaded; every field checked, unknown fields are errors):
  offline:     feature-log folder of the night, a template over the date: /logs/offline/{date}
  production:  the same for production: /logs/production/{date}
  reports:     folder under which the night's report goes, as <reports>/<date>/report.{json,html}
  history:     SQLite file with one row per night (table `nights`, primary key `date`)
  thresholds:  divergent_fraction (required): the largest fraction of divergent records;
               stages: {stage: fraction} of records whose first divergent stage it is;
               features: {feature: mismatch rate}; drift: {feature: distance} (Jensen-Shannon
               for numeric features, L-infinity for categorical ones, as the report gives)
  tolerance:   optional {abs, rel, features: {name: {abs, rel}}}, passed to replay.diff
  beam_args:   optional list of Beam flags for the diff
{date} is YYYY-MM-DD; {yyyy}, {mm} and {dd} are also offered. Without --date the night checked
is yesterday in UTC (the last complete day). A night whose folder is missing is an error
naming the path, never a pass. Rerunning a night replaces its history row.
"""
import datetime
import json
import math
import os
import sqlite3

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import common, dataset
from transforms.spec import feature_log, run_metadata
from transforms.spec.errors import load_yaml, yaml_problem
from transforms.spec.stages import OPTIONAL_STAGES, STAGES

__all__ = ["CheckOptions", "load_config", "evaluate", "report_dir", "run"]

_FIELDS = {"offline", "production", "reports", "history", "thresholds", "tolerance",
           "beam_args"}
_THRESHOLDS = {"divergent_fraction", "stages", "features", "drift", "decision_flip_fraction",
               "max_abs_prediction_delta"}


class CheckOptions(PipelineOptions):
  """Flags of the nightly skew check (replay.check)."""

  @classmethod
  def _add_argparse_args(cls, parser):
    parser.add_argument("--config", help="Required. Nightly check configuration (YAML).")
    parser.add_argument("--date", help="Night to check, YYYY-MM-DD; default: yesterday (UTC).")


def _fraction(where, value):
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
    raise common.UsageError(f"config {where} must be a number in [0, 1], got {value!r}")
  return float(value)


def _number(where, value):
  if isinstance(value, bool) or not isinstance(value, (int, float)) or \
      not math.isfinite(value) or value < 0:
    raise common.UsageError(f"config {where} must be a finite number >= 0, got {value!r}")
  return float(value)


def _mapping(where, value, check):
  if value is None:
    return {}
  if not isinstance(value, dict):
    raise common.UsageError(f"config {where} must be a mapping")
  return {str(k): check(f"{where}.{k}", v) for k, v in sorted(value.items())}


def _tolerance(path, value):
  """The config's tolerance, validated: {abs, rel, features: {name: {abs, rel}}}."""
  value = value or {}
  if not isinstance(value, dict) or set(value) - {"abs", "rel", "features"}:
    raise common.UsageError(f"{path}: tolerance takes abs, rel and features")
  out = {k: _number(f"tolerance.{k}", value[k]) for k in ("abs", "rel") if k in value}
  features = value.get("features") or {}
  if not isinstance(features, dict):
    raise common.UsageError(f"{path}: tolerance.features must be a mapping feature -> "
                            "{abs, rel}")
  out["features"] = {}
  for name, t in sorted(features.items()):
    if not isinstance(t, dict) or not t or set(t) - {"abs", "rel"}:
      raise common.UsageError(f"{path}: tolerance.features.{name} takes abs and/or rel")
    out["features"][str(name)] = {k: _number(f"tolerance.features.{name}.{k}", v)
                                  for k, v in t.items()}
  return out


def load_config(text, path="config"):
  """The validated config dict from YAML text; UsageError names the bad field."""
  try:
    doc = load_yaml(text)
  except (yaml.YAMLError, RecursionError) as e:
    raise common.UsageError(f"{path}: not valid YAML: {yaml_problem(e)}") from None
  if not isinstance(doc, dict):
    raise common.UsageError(f"{path}: a mapping with fields {', '.join(sorted(_FIELDS))}")
  unknown = sorted(set(doc) - _FIELDS, key=str)
  if unknown:
    raise common.UsageError(f"{path}: unknown field(s) "
                            f"{', '.join(common.did_you_mean(u, _FIELDS) for u in unknown)}")
  for name in ("offline", "production", "reports", "history"):
    if not isinstance(doc.get(name), str) or not doc[name]:
      raise common.UsageError(f"{path}: field {name!r} is required (a path)")
  for name in ("offline", "production"):
    if "{date}" not in doc[name] and "{dd}" not in doc[name]:
      raise common.UsageError(f"{path}: {name} must be a template over the date, e.g. "
                              f"{doc[name].rstrip('/')}/{{date}}")
    try:
      _expand(doc[name], datetime.date(2000, 1, 1))
    except (KeyError, ValueError, IndexError) as e:
      raise common.UsageError(f"{path}: {name}: bad template {doc[name]!r} ({e!r}); it may use "
                              "{date}, {yyyy}, {mm} and {dd}") from None
  if "://" in doc["history"]:
    raise common.UsageError(f"{path}: history must be a local file (SQLite), got "
                            f"{doc['history']!r}")
  th = doc.get("thresholds")
  unknown = sorted(set(th) - _THRESHOLDS, key=str) if isinstance(th, dict) else []
  if unknown:  # before what is required: a misspelt threshold is named as such
    raise common.UsageError(f"{path}: unknown threshold(s) "
                            f"{', '.join(common.did_you_mean(u, _THRESHOLDS) for u in unknown)}")
  if not isinstance(th, dict) or "divergent_fraction" not in th:
    raise common.UsageError(f"{path}: thresholds.divergent_fraction is required")
  stages = _mapping("thresholds.stages", th.get("stages"), _fraction)
  bad = sorted(set(stages) - set(STAGES))
  if bad:
    raise common.UsageError(f"{path}: thresholds.stages: unknown stage(s) {', '.join(bad)}")
  beam_args = doc.get("beam_args") or []
  if not isinstance(beam_args, list) or not all(isinstance(a, str) for a in beam_args):
    raise common.UsageError(f"{path}: beam_args must be a list of flags")
  tolerance = _tolerance(path, doc.get("tolerance"))
  return {"offline": doc["offline"], "production": doc["production"],
          "reports": doc["reports"], "history": doc["history"],
          "thresholds": {"divergent_fraction": _fraction("thresholds.divergent_fraction",
                                                         th["divergent_fraction"]),
                         "stages": stages,
                         "features": _mapping("thresholds.features", th.get("features"),
                                              _fraction),
                         "drift": _mapping("thresholds.drift", th.get("drift"), _number),
                         "decision_flip_fraction": None if th.get("decision_flip_fraction") is None
                         else _fraction("thresholds.decision_flip_fraction",
                                        th["decision_flip_fraction"]),
                         "max_abs_prediction_delta": None if th.get(
                             "max_abs_prediction_delta") is None
                         else _number("thresholds.max_abs_prediction_delta",
                                      th["max_abs_prediction_delta"])},
          "tolerance": tolerance, "beam_args": beam_args}


def _night(date_text):
  if date_text is None:
    return (datetime.datetime.now(datetime.timezone.utc).date() - datetime.timedelta(days=1))
  try:
    return datetime.date.fromisoformat(date_text)
  except ValueError:
    raise common.UsageError(f"--date must be YYYY-MM-DD, got {date_text!r}") from None


def report_dir(config_path, date=None):
  """Where the night `date` (--date's forms; default as check's) of the config at config_path
  writes its report.json and report.html."""
  with open(config_path, encoding="utf-8") as f:
    config = load_config(f.read(), config_path)
  return FileSystems.join(config["reports"], _night(date).isoformat())


def _expand(template, night):
  return template.format(date=night.isoformat(), yyyy=f"{night.year:04d}",
                         mm=f"{night.month:02d}", dd=f"{night.day:02d}")


def _diff_flags(config, offline, production, out):
  """The diff's flags the config sets: {flag: value}, values as the flags parse them."""
  tol = config["tolerance"]
  specs = []
  for name, t in sorted(tol["features"].items()):
    spec = f"{name}={t.get('abs', tol.get('abs', 0.0))!r}"  # no rel: the default rel holds
    specs.append(spec + (f":{t['rel']!r}" if "rel" in t else ""))
  return {"offline": offline, "production": production, "output_dir": out,
          "max_divergent_fraction": float(config["thresholds"]["divergent_fraction"]),
          "abs_tol": float(tol["abs"]) if "abs" in tol else None,
          "rel_tol": float(tol["rel"]) if "rel" in tol else None,
          "tolerance": specs or None}



def evaluate(report, thresholds):
  """The thresholds a report breaks, each as one sentence (empty: all held); UsageError when
  a threshold names a feature the report lacks."""
  # Here: the CLI's start-up imports no report or diff code.
  from replay.report.report_model import FEATURE_TOTAL
  broken = []
  total = report["divergent_fraction"]
  if total > thresholds["divergent_fraction"]:
    broken.append(f"divergent fraction {total:.6g} > {thresholds['divergent_fraction']:.6g}")
  records = report["records"]
  denominator = max(1, records["matched_keys"] + records["offline_only"]
                    + records["production_only"])
  for stage, limit in thresholds["stages"].items():
    frac = report["first_divergent_stage"].get(stage, 0) / denominator
    if frac > limit:
      broken.append(f"stage {stage}: {frac:.6g} of records first diverge there > {limit:.6g}")
  unknown = sorted((set(thresholds["features"]) | set(thresholds["drift"])) -
                   set(report["features"]))
  if unknown:  # a misspelt threshold must not pass silently
    raise common.UsageError(f"thresholds name feature(s) the logs lack: {', '.join(unknown)}")
  for name, limit in thresholds["features"].items():
    f = report["features"][name]
    rate = f["mismatch_rate"]
    if rate > limit:
      broken.append(f"feature {name}: mismatch rate {rate:.6g} > {limit:.6g}")
    # where serving logged what it fed the model, that value's mismatches count alike
    served = f.get("served_mismatch", 0) / max(1, sum(f.get(k, 0) for k in FEATURE_TOTAL))
    if served > limit:
      broken.append(f"feature {name}: served mismatch rate {served:.6g} > {limit:.6g}")
  broken += _decision_thresholds(report, thresholds)
  for name, limit in thresholds["drift"].items():
    entry = report.get("drift", {}).get(name, {})
    value = entry.get("jensen_shannon", entry.get("linf", 0.0))
    if value > limit:
      broken.append(f"feature {name}: drift {value:.6g} > {limit:.6g}")
  return broken


def _decision_thresholds(report, thresholds):
  """The decision thresholds a report breaks; UsageError when one is set and the report
  compared no decision (neither log holds predictions on both sides): it must not pass
  silently."""
  limits = {k: thresholds.get(k) for k in ("decision_flip_fraction", "max_abs_prediction_delta")}
  if all(v is None for v in limits.values()):
    return []
  d = report.get("decisions") or {}
  if not d.get("compared"):
    named = ", ".join(k for k, v in limits.items() if v is not None)
    raise common.UsageError(f"thresholds {named}: the logs compare no decision (run the "
                            "features job with --model_dir or --model_module on both sides)")
  broken = []
  if limits["decision_flip_fraction"] is not None and \
      d["flip_fraction"] > limits["decision_flip_fraction"]:
    broken.append(f"decision flips {d['flips']} of {d['compared']}: fraction "
                  f"{d['flip_fraction']:.6g} > {limits['decision_flip_fraction']:.6g}")
  if limits["max_abs_prediction_delta"] is not None and \
      d["max_abs_delta"] > limits["max_abs_prediction_delta"]:
    broken.append(f"largest |prediction delta| {d['max_abs_delta']:.6g} > "
                  f"{limits['max_abs_prediction_delta']:.6g}")
  return broken


# within_tolerance holds the report's noise class (its name before latent records were told
# apart): the column keeps its name so a history file of earlier nights stays writable. For the
# same reason the stage columns are the stages every log has (an optional stage, predict, is
# in report.json and its decisions, not in the history's columns).
_HISTORY_STAGES = tuple(s for s in STAGES if s not in OPTIONAL_STAGES)
_COLUMNS = (["date TEXT PRIMARY KEY", "offline INTEGER", "production INTEGER",
             "matched_keys INTEGER", "identical INTEGER", "within_tolerance INTEGER",
             "divergent INTEGER", "offline_only INTEGER", "production_only INTEGER",
             "divergent_fraction REAL"] + [f"stage_{s} INTEGER" for s in _HISTORY_STAGES] +
            ["feature_mismatch_rates TEXT", "drift TEXT", "broken TEXT", "exit_status INTEGER",
             "report TEXT"])


def _history_row(night, report, broken, code, report_path):
  r = report["records"]
  drift = {name: d.get("jensen_shannon", d.get("linf")) for name, d in
           sorted(report.get("drift", {}).items())}
  return ([night.isoformat(), r["offline"], r["production"], r["matched_keys"], r["identical"],
           r["noise"], r["divergent"], r["offline_only"], r["production_only"],
           report["divergent_fraction"]] +
          [report["first_divergent_stage"].get(s, 0) for s in _HISTORY_STAGES] +
          [json.dumps({n: f["mismatch_rate"] for n, f in sorted(report["features"].items())},
                      sort_keys=True),
           json.dumps(drift, sort_keys=True), json.dumps(broken), code, report_path])


def check_threshold_features(thresholds, offline):
  """UsageError, before the diff runs, when a threshold names a feature the offline log lacks
  (its feature names from one part's Parquet footer)."""
  from replay.diff import runs
  named = set(thresholds["features"]) | set(thresholds["drift"])
  if not named:
    return
  meta = runs.load(offline, "offline")
  listed = runs.listed_parts(meta, offline, "offline")
  paths = [p for b in sorted(listed) for p in listed[b]][:1]
  if not paths:
    return  # an empty log: the diff reports it
  try:
    with FileSystems.open(paths[0], compression_type="uncompressed") as f:
      names = pq.read_schema(f).names
  except (OSError, pa.ArrowException) as e:
    raise common.UsageError(f"{paths[0]} is not a readable Parquet file ({e})") from None
  unknown = sorted(named - set(feature_log.features_of(names)))
  if unknown:  # a misspelt threshold must not pass silently, nor cost the night's report
    raise common.UsageError(f"thresholds name feature(s) the logs lack: {', '.join(unknown)}")


def check_history(history_path):
  """UsageError unless the history can take the night's row: absent (it is created), or an
  SQLite file whose `nights` table, if any, has this version's columns. Checked before the diff,
  so a bad history path never costs the night's report."""
  if os.path.isdir(history_path):
    raise common.UsageError(f"history {history_path} is a folder, not an SQLite file")
  if not os.path.exists(history_path):
    return
  try:
    with sqlite3.connect(f"file:{history_path}?mode=ro", uri=True) as db:
      found = [r[1] for r in db.execute("PRAGMA table_info(nights)").fetchall()]
    db.close()
  except sqlite3.Error as e:
    raise common.UsageError(f"history {history_path} is not an SQLite file ({e})") from None
  want = [c.split()[0] for c in _COLUMNS]
  if found and found != want:
    raise common.UsageError(f"history {history_path}: table nights has other columns than "
                            "this version writes (start a new history file)")


def record_night(history_path, row, nights):
  """Inserts or replaces the night's row; returns the last `nights` nights up to it."""
  os.makedirs(os.path.dirname(os.path.abspath(history_path)), exist_ok=True)
  with sqlite3.connect(history_path) as db:
    db.execute(f"CREATE TABLE IF NOT EXISTS nights ({', '.join(_COLUMNS)})")
    db.execute(f"INSERT OR REPLACE INTO nights VALUES ({', '.join('?' * len(_COLUMNS))})", row)
    rows = db.execute("SELECT date, divergent_fraction, exit_status FROM nights WHERE date <= ? "
                      "ORDER BY date DESC LIMIT ?", (row[0], nights)).fetchall()
  db.close()
  return [{"date": d, "divergent_fraction": f, "exit_status": s} for d, f, s in reversed(rows)]


def _beam_flags(argv):
  """argv without check's own flags: the Beam flags, passed on to the diff."""
  out, skip = [], False
  for arg in argv:
    if skip:
      skip = False
    elif arg in ("--config", "--date"):
      skip = True
    elif not arg.startswith(("--config=", "--date=")):
      out.append(arg)
  return out


def run(argv=None):
  """Runs one night's check; returns 0 (thresholds held) or 1 (broken); UsageError -> 2."""
  from replay.diff import job as diff
  from replay.report import render
  argv = list(argv or [])
  _, opts, out_opts = common.job_options(argv, CheckOptions, False)
  if not opts.config:
    raise common.UsageError("--config is required")
  if out_opts.output_dir or out_opts.overwrite:
    raise common.UsageError("check writes under the config's `reports`: --output_dir and "
                            "--overwrite are not its flags")
  try:
    with open(opts.config, encoding="utf-8") as f:
      config = load_config(f.read(), opts.config)
  except OSError as e:
    raise common.UsageError(f"--config {opts.config}: {e.strerror}") from None
  except UnicodeDecodeError as e:
    raise common.UsageError(f"--config {opts.config}: not UTF-8 text ({e.reason} at byte "
                            f"{e.start})") from None
  night = _night(opts.date)
  offline, production = (_expand(config[s], night) for s in ("offline", "production"))
  for side, path in (("offline", offline), ("production", production)):
    if not FileSystems.exists(FileSystems.join(path, run_metadata.FILE)):
      raise common.UsageError(f"{night}: no {side} partition at {path}")
  check_history(config["history"])
  for what, path, folder in (("reports", config["reports"], True),
                             ("history", config["history"], False)):
    problem = dataset.write_problem(path, folder)
    if problem:  # before the diff: a path the night cannot be written to costs no report
      raise common.UsageError(f"{what} {path}: {problem}")
  check_threshold_features(config["thresholds"], offline)
  out = FileSystems.join(config["reports"], night.isoformat())
  # The config's beam_args, then the command line's: Beam flags only (a diff flag there is an
  # unknown flag: the config sets them).
  options = common.parse_options(list(config["beam_args"]) + _beam_flags(argv), job_classes=[])
  diff.run_job(common.flags_of(diff.DiffFlags, options, diff.DiffOptions,
                               **_diff_flags(config, offline, production, out)), options)
  with FileSystems.open(FileSystems.join(out, "report.json"),
                        compression_type="uncompressed") as f:
    report = json.loads(f.read().decode("utf-8"))
  broken = evaluate(report, config["thresholds"])
  code = 1 if broken else 0
  trend = record_night(config["history"], _history_row(night, report, broken, code,
                                                       FileSystems.join(out, "report.json")),
                       render.TREND_NIGHTS)
  # diff wrote the night's page; it is replaced by the same page with the trend.
  dataset.write_atomically(FileSystems.join(out, "report.html"),
                           render.render_html(report, trend=trend).encode("utf-8"))
  print(f"night {night}: {'THRESHOLDS BROKEN' if broken else 'all thresholds held'}")
  for sentence in broken:
    print(f"  broken: {sentence}")
  print(f"report: {out}/report.html   history: {config['history']} "
        f"({len(trend)} {'night' if len(trend) == 1 else 'nights'} in the trend)")
  return code


if __name__ == "__main__":
  common.process_main(common.main_wrapper, run)
