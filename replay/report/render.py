"""Renderers of a replay report (report.json's dict): a terminal summary and one self-contained
HTML page.

The report model is report_model.py, the diff that fills it replay/diff/; this module only turns the
finished dict into text, so the same report always gives the same bytes. The HTML page uses no
network at all -- inline CSS and SVG charts drawn here, no script -- and is built from the
report's aggregates and samples only, so its size does not grow with the logs. Every string
taken from the report (keys, feature names, profile values) is data and is escaped.
"""
import datetime
import math

from replay.report import charts, decisions_view
from replay.report.charts import (COLLAPSE_ROWS, HISTOGRAM_FEATURES, MAX_BINS, TREND_NIGHTS, _e,
                                  _frac, _num, _pct, _plain, _ranked_features, _short, _table,
                                  _value)
from transforms.spec.stages import STAGES

__all__ = ["STAGES", "TREND_NIGHTS", "HISTOGRAM_FEATURES", "MAX_BINS", "COLLAPSE_ROWS", "verdict",
           "render_text", "render_html"]

RECORD_FIELDS = ("offline", "production", "matched_keys", "offline_only", "production_only",
                 "dropped_both", "identical", "noise", "latent", "divergent",
                 "duplicate_keys_offline", "duplicate_keys_production", "not_served")
TOP_FEATURES, TOP_CAUSES = 10, 12  # text summary
CAUSE_VALUE_CHARS = (60, 400)  # text, HTML: long values (analyzer outputs) are shortened


def verdict(report):
  """(status, sentence): status is "divergent" (exit 1), "within_threshold" or "clean"."""
  records = report.get("records", {})
  divergent = int(records.get("divergent", 0) or 0)
  fraction = float(report.get("divergent_fraction", 0.0) or 0.0)
  threshold = float(report.get("max_divergent_fraction", 0.0) or 0.0)
  rest = "".join(f", {int(records[k])} {k}" for k in ("latent", "noise") if records.get(k))
  counted = "divergent" if report.get("fail_on", "divergent") == "divergent" else \
      "divergent + latent"
  if report.get("exit_code", int(fraction > threshold)):
    return "divergent", (f"DIVERGENCE: {divergent} divergent records{rest}, fraction "
                         f"({counted}) {_frac(fraction)} > threshold {_frac(threshold)} "
                         "(exit 1)")
  if divergent or fraction:
    return "within_threshold", (f"divergence within threshold: {divergent} divergent "
                                f"records{rest}, fraction ({counted}) {_frac(fraction)} <= "
                                f"{_frac(threshold)} (exit 0)")
  return "clean", f"no divergence: 0 divergent records{rest} (exit 0)"


def _stage_line(report, s):
  firsts, reach = report.get("first_divergent_stage", {}), report.get("reaches_model", {})
  n, m = firsts.get(s, 0), reach.get(s, 0)
  return f"  {s:<10} {n:>10}" + (f"  ({m} reach the model, {n - m} latent)" if n else "")


def _explanations(report):
  """Lines: why the noise is noise, analyzers that differ, stages nothing explains."""
  out = [f"noise ({report.get('noise', {}).get('records', 0)} records): {why}"
         for why in report.get("noise", {}).get("why", [])]
  an = report.get("analyzers", {})
  differs = [a for a in an.get("analyzers", []) if a.get("verdict") != "noise"]
  for a in differs:
    rel = a.get("max_rel_diff")
    out.append(f"analyzer {a.get('name')}: {a.get('verdict')}" +
               (f" (largest relative difference {rel:.2g} > {a.get('tolerance'):.2g})"
                if rel is not None and a.get("tolerance") is not None else "") +
               (f"; feeds {', '.join(a['features'])}" if a.get("features") else ""))
  columns = report.get("input_differences", {}).get("columns", {})
  if columns:
    out.append("input columns that differ (records of the differing buckets): " + ", ".join(
        f"{c} {k}" for c, k in columns.items()))
  out += [f"input evidence unavailable: {e}" for e in report.get("evidence_errors", [])]
  for u in report.get("unexplained", []):
    out.append(f"{u.get('stage')}: {u.get('records')} records {u.get('note')}")
  return out


def _lost(report):
  """Lines: the records a side's logger accepted and never wrote (counted in its run
  metadata), which the other side then holds alone."""
  out = []
  for side, other in (("offline", "production"), ("production", "offline")):
    lost = report.get(side, {}).get("lost") or {}
    if lost:
      out.append(f"{side}'s logger lost {sum(lost.values())} records it accepted (" +
                 ", ".join(f"{r} {n}" for r, n in sorted(lost.items())) +
                 f"): they are among the {other}-only records")
  return out


def render_text(report):
  """The terminal summary (the caller prints the output paths after it)."""
  records = report.get("records", {})
  out = []
  for side in ("offline", "production"):
    info = report.get(side, {})
    out.append(f"{side + ':':<12}{_plain(info.get('dir', '?'))} "
               f"({_plain(info.get('runner', '?'))}, {info.get('rows', '?')} rows)")
  out.append("records:    " + ", ".join(f"{f.replace('_', ' ')} {records.get(f, 0)}"
                                        for f in RECORD_FIELDS))
  out.append(f"divergent fraction: {_frac(report.get('divergent_fraction', 0.0))} "
             f"(threshold {_frac(report.get('max_divergent_fraction', 0.0))})")
  out.append(verdict(report)[1])
  out.extend(decisions_view.lines(report))  # what the model decides, before feature detail
  out.append("first divergent stage:")
  out.extend(_stage_line(report, s) for s in STAGES)
  out.extend(_plain(line) for line in _explanations(report))
  out.extend(_plain(line) for line in _lost(report))
  for side, reasons in sorted(report.get("one_side_only", {}).items()):
    if reasons:
      out.append(f"{side} only: " + ", ".join(f"{_plain(r)} {n}"
                                               for r, n in sorted(reasons.items())))
  ranked = [(name, f) for name, f in _ranked_features(report) if f.get("mismatch", 0)]
  if ranked:
    out.append("top features by mismatch rate:")
    width = max(len(_plain(n)) for n, _ in ranked[:TOP_FEATURES])
    for name, f in ranked[:TOP_FEATURES]:
      out.append(f"  {_plain(name):<{width}}  {_pct(f.get('mismatch_rate'))} "
                 f"({f.get('mismatch', 0)} mismatched, {f.get('within_tolerance', 0)} within "
                 f"tolerance, max |d| {_num(f.get('max_abs_delta'))})")
  else:
    out.append("features: no mismatches")
  served = sorted((n, f) for n, f in report.get("features", {}).items()
                  if f.get("served_mismatch", 0) or f.get("served_within_tolerance", 0))
  for name, f in served:  # the serve stage: what the model received
    out.append(f"served {_plain(name)}: {f.get('served_mismatch', 0)} records the model got "
               f"another value for ({f.get('served_within_tolerance', 0)} within tolerance)")
  causes = report.get("suspected_causes", [])
  out.append("suspected causes:" if causes else "suspected causes: none")
  for c in causes[:TOP_CAUSES]:
    a, b = (_plain(_short(_value(c.get(s)), CAUSE_VALUE_CHARS[0]))
            for s in ("offline", "production"))
    values = f" {a} -> {b}" if not _values_say_nothing(c) else ""
    out.append(f"  {c.get('stage', '?'):<10} {_plain(c.get('field', '?'))}:{values} "
               f"({c.get('records', 0)} records)" +
               (f": {_plain(c['note'])}" if c.get("note") else ""))
  if len(causes) > TOP_CAUSES:
    out.append(f"  ... {len(causes) - TOP_CAUSES} more in the report")
  buckets = report.get("buckets")
  if buckets:
    out.append(f"buckets: {buckets.get('total', 0)} total, {buckets.get('compared', 0)} "
               f"compared, {buckets.get('skipped_equal', 0)} skipped as equal")
  return "\n".join(out) + "\n"


def render_html(report, trend=None):
  """One self-contained HTML page; trend: optional [{date, divergent_fraction, exit_status}]."""
  status, sentence = verdict(report)
  records = report.get("records", {})
  off, prod = report.get("offline", {}), report.get("production", {})
  stages = report.get("stages", {})
  parts = [
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>skewtrace replay report</title>\n<style>", _CSS, "</style>\n</head>\n<body>\n",
      "<h1>skewtrace replay report</h1>\n",
      f"<p class=\"verdict {status}\" id=\"verdict\">{_e(sentence)}</p>\n",
  ]
  if trend:  # the nightly check's page: the trend first, under the verdict
    parts += [f"<h2>Last {TREND_NIGHTS} nights</h2>\n", charts.trend_chart(trend, report)]
  parts += [
      decisions_view.html(report),  # what the model decides, before feature-level detail
      _what_differs(report),
      "<h2>Divergence by first stage</h2>\n", charts.stage_chart(report),
      _table(["stage", "match", "mismatch", "first divergent stage of",
              "of which reach the model"],
             [[s, stages.get(s, {}).get("match", 0), stages.get(s, {}).get("mismatch", 0),
               report.get("first_divergent_stage", {}).get(s, 0),
               report.get("reaches_model", {}).get(s, 0)] for s in STAGES], "stages"),
      "<h2>Suspected causes</h2>\n", _causes(report),
      "<h2>Records</h2>\n",
      _table(["side", "dir", "runner", "rows"],
             [["offline", off.get("dir"), off.get("runner"), off.get("rows")],
              ["production", prod.get("dir"), prod.get("runner"), prod.get("rows")]]),
      _table(["count", "records"], [[f.replace("_", " "), records.get(f, 0)]
                                    for f in RECORD_FIELDS], "records"),
      "".join(f"<p class=\"note\" id=\"lost\">{_e(line)}</p>\n" for line in _lost(report)),
      _table(["one side only", "reason", "records"],
             [[side, r, n] for side, reasons in sorted(report.get("one_side_only", {}).items())
              for r, n in sorted(reasons.items())], "one-side-only"),
      "<h2>Per-feature mismatch rate</h2>\n", charts.feature_chart(report),
      "<h2>Offline vs production distributions</h2>\n", charts.histograms(report),
      "<h2>Samples</h2>\n", _samples(report),
  ]
  parts.append(_footer(report))
  parts.append("</body>\n</html>\n")
  return "".join(parts)


_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:70em}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}
td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}
.verdict{font-weight:bold;padding:.6em;border-radius:4px}
.verdict.clean{background:#e3f4e6;color:#1d5e2c}
.verdict.within_threshold{background:#fdf3d9;color:#7a5a00}
.verdict.divergent{background:#f8dedb;color:#8c1f14}
svg text{font-size:11px;fill:#333}svg .axis{stroke:#999;stroke-width:1}
.off{fill:#3b6fb6}.prod{fill:#e08a2c}.bar{fill:#c0392b}.rate{fill:#3b6fb6}
.hist{display:inline-block;margin:0 1em 1em 0;vertical-align:top}
.note{color:#666;font-size:.9em}
.explain{background:#f7f7f7;border-left:4px solid #999;padding:.2em 1em;margin:1em 0}
.explain h2{border:none;margin-top:.4em}.explain li{margin:.3em 0}
details{margin:.5em 0}summary{cursor:pointer;color:#3b6fb6}
"""


def _what_differs(report):
  """The explanation under the verdict: per stage what differs, for how many records, why
  (the causes, or that no configuration explains it), the noise and why, one worked example."""
  firsts, reach = report.get("first_divergent_stage", {}), report.get("reaches_model", {})
  causes = report.get("suspected_causes", [])
  unexplained = {u.get("stage"): u.get("records", 0) for u in report.get("unexplained", [])}
  items = []
  for s in STAGES:
    n = int(firsts.get(s, 0) or 0)
    if not n:
      continue
    m = int(reach.get(s, 0) or 0)
    why = [_cause_line(c, 40) for c in causes if c.get("stage") == s]
    because = ("suspected: " + "; ".join(why[:3]) + (f" (+{len(why) - 3} more)"
                                                     if len(why) > 3 else "")) if why else ""
    if s in unexplained:  # all of them, or those the causes do not reach
      because += (f"; {unexplained[s]} of them {UNEXPLAINED_HTML}" if why else UNEXPLAINED_HTML)
    columns = report.get("input_differences", {}).get("columns", {})
    inputs = ("; input columns that differ: " + ", ".join(
        f"{c} ({k} records)" for c, k in list(columns.items())[:8])
              if s in ("raw", "parse") and columns else "")
    items.append(f"<li><strong>{_e(s)}</strong>: {n} records first differ here — {m} reach "
                 f"the model, {n - m} latent. {_e(because)}{_e(inputs)}</li>")
  one = report.get("one_side_only", {})
  for side in ("offline", "production"):
    for reason, n in sorted(one.get(side, {}).items()):
      items.append(f"<li><strong>{_e(side)} only</strong> ({_e(reason)}): {int(n)} records</li>")
  moved = [a for a in report.get("analyzers", {}).get("analyzers", [])
           if a.get("verdict") != "noise"]
  if moved:
    items.append("<li><strong>analyzers</strong> beyond float noise: " + _e("; ".join(
        a.get("name", "?") + (f" (relative {a['max_rel_diff']:.2g} > {a['tolerance']:.2g})"
                              if a.get("max_rel_diff") is not None and a.get("tolerance")
                              else f" ({a.get('verdict')})") +
        (" feeds " + ", ".join(a["features"]) if a.get("features") else "")
        for a in moved[:6])) +
                 (f" (+{len(moved) - 6} more)" if len(moved) > 6 else "") + "</li>")
  for error in report.get("evidence_errors", []):
    items.append(f"<li><strong>input evidence unavailable</strong>: {_e(error)}</li>")
  noise = report.get("noise", {})
  if noise.get("records") or noise.get("window_records"):  # the reason, even if none is noise
    items.append(f"<li><strong>noise</strong>: {int(noise['records'])} records — "
                 f"{_e('; '.join(noise.get('why', [])))}</li>")
  out = ["<div class=\"explain\" id=\"what-differs\"><h2>What differs</h2>\n"]
  out.append("<ul>" + "".join(items) + "</ul>\n" if items else
             "<p>Nothing: every record is identical on every stage.</p>\n")
  samples = report.get("samples", {})
  # The example comes from the earliest stage any sample parts at: the root, not a consequence.
  ranked = sorted(samples.get("divergent", []) + samples.get("latent", []),
                  key=lambda x: STAGES.index(x.get("first_divergent_stage", STAGES[-1])))
  example = ranked[0] if ranked else None
  if example:
    row = _record_row(example)
    out.append("<p class=\"example\"><strong>Worked example</strong>: record " + _e(row[0]) +
               f" first differs at {_e(row[1])}" +
               (f"; features {_e(row[2])}" if row[2] else "; no feature value differs") +
               (f"; {_e(row[3])}" if row[3] else "") +
               (f"; input {_e(row[4])}" if row[4] else "") +
               ("; " + _e(_pairs({k: example[k] for k in ("prediction", "decision")}))
                if "prediction" in example else "") + ".</p>\n")
  out.append("</div>\n")
  return "".join(out)


UNEXPLAINED_HTML = "not explained by configuration: a data or code difference (see the samples)"


def _values_say_nothing(cause):
  """A cause found in the data, not in the metadata (moved_event_times): no values, a note."""
  return cause.get("offline") is None and cause.get("production") is None and cause.get("note")


def _cause_line(cause, chars):
  """'field offline → production', or 'field: note' for a cause with a note (what it does and
  what to do say more than its values; the table shows both)."""
  if cause.get("note"):
    return f"{cause.get('field')}: {_short(cause['note'], 10 * chars)}"
  return (f"{cause.get('field')} {_short(_value(cause.get('offline')), chars)} → "
          f"{_short(_value(cause.get('production')), chars)}")


def _causes(report):
  causes = report.get("suspected_causes", [])
  if not causes:
    return "<p class=\"note\">none: run metadata agree on every profile field, version, " \
           "runner and analyzer</p>\n"
  return _table(["stage", "field", "offline", "production", "records"],
                [[c.get("stage"), c.get("field") + (f": {c['note']}" if c.get("note") else ""),
                  "–" if _values_say_nothing(c) else
                  _short(_value(c.get("offline")), CAUSE_VALUE_CHARS[1]),
                  "–" if _values_say_nothing(c) else
                  _short(_value(c.get("production")), CAUSE_VALUE_CHARS[1]),
                  c.get("records", 0)] for c in causes], "causes")


def _pairs(pairs, show=None):
  """'name: offline → production' per entry ('name: value' when both sides agree)."""
  out = []
  for name, v in sorted(pairs.items()):
    a, b = (list(v) + [None, None])[:2]
    if a == b:
      out.append(f"{name}: {(show or _value)(a)}")
    else:
      x, y = (show(a), show(b)) if show else _to_difference(a, b)
      out.append(f"{name}: {x} → {y}")
  return "; ".join(out)


def _to_difference(a, b):
  """Two values as text; two floats with as many significant digits as it takes to tell them
  apart (at least 4): 1.2345678 → 1.2345679, not 17 digits each."""
  if all(isinstance(v, float) and math.isfinite(v) for v in (a, b)):
    for digits in range(4, 18):
      x, y = f"{a:.{digits}g}", f"{b:.{digits}g}"
      if x != y:
        return x, y
  return _value(a), _value(b)


def _utc(v):
  """Seconds since the epoch as ISO-8601 UTC (the feature log's event time and windows)."""
  if isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2 ** 40:
    return datetime.datetime.fromtimestamp(v, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
  return _value(v)


def _record_row(x):
  tokens = x.get("tokens", {})
  feats = {f: [f"{a} ({t[0]})" if t[0] is not None else a,
               f"{b} ({t[1]})" if t[1] is not None else b] if (t := tokens.get(f)) else [a, b]
           for f, (a, b, *_) in ((f, list(v) + [None, None])
                                 for f, v in x.get("features", {}).items())}
  inputs = _pairs({c: x["input"][c] for c in x.get("input_differs", [])})
  if x.get("input_unknown"):  # an input not known is no difference: say why none is shown
    inputs = "; ".join(f"{side} input {why}" for side, why in sorted(x["input_unknown"].items()))
  when = "; ".join(p for p in (_pairs(x.get("when", {}), _utc),
                                _pairs(x.get("aggregates", {}))) if p)
  return [x.get("key"), x.get("first_divergent_stage"), _pairs(feats), when, inputs]


def _samples(report):
  samples = report.get("samples", {})
  record = ["key", "first stage", "features (offline → production)",
            "event time, window (UTC) and windowed aggregates", "input columns that differ"]
  kinds = [("Divergent records", "divergent", record, _record_row),
           ("Latent differences (the model inputs agree)", "latent", record, _record_row),
           ("Offline only", "offline_only", ["key", "reason"],
            lambda x: [x.get("key"), x.get("reason")]),
           ("Production only", "production_only", ["key", "reason"],
            lambda x: [x.get("key"), x.get("reason")]),
           ("Duplicate keys", "duplicate_keys", ["side", "key"],
            lambda x: [x.get("side"), x.get("key")])]
  out = []
  for title, kind, header, row in kinds:
    rows = samples.get(kind, [])
    out.append(f"<h3>{title} ({len(rows)})</h3>\n")
    out.append(_table(header, [row(x) for x in rows], "samples-" + kind.replace("_", "-"))
               if rows else "<p class=\"note\">none</p>\n")
  return "".join(out)


def _footer(report):
  tol = report.get("tolerance", {})
  default = tol.get("default", {})
  per = tol.get("features", {})
  noise = default.get("noise")
  text = (f"tolerance: float noise sqrt(N)*u, N = {noise.get('records')} (float32 "
          f"{_num(noise.get('float32'))}, float64 {_num(noise.get('float64'))})" if noise else
          f"tolerance: abs {_num(default.get('abs'))}, rel {_num(default.get('rel'))}")
  if noise and noise.get("exact_features"):
    text += ("; exact for the features an analyzer that differs feeds: " +
             ", ".join(noise["exact_features"]))
  text = (text
          + "".join(f"; {f}: abs {_num(t.get('abs'))}, rel {_num(t.get('rel'))}"
                    for f, t in sorted(per.items())))
  buckets = report.get("buckets", {})
  if buckets:
    text += (f". buckets: {buckets.get('total', 0)} total, {buckets.get('compared', 0)} "
             f"compared, {buckets.get('skipped_equal', 0)} skipped as equal")
  return f"<p class=\"note\">{_e(text)}. {_e(report.get('format', ''))}</p>\n"


# -- small pieces ---------------------------------------------------------------------------
