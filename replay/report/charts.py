"""The replay report's SVG charts and the small formatters the HTML and text share.

Drawn here, inline, with no script and no network (replay/report/render.py assembles the page):
records by first divergent stage, per-feature mismatch rates, offline vs production
histograms, and the nightly trend of the divergent fraction with its threshold. Every string
taken from the report is data and is escaped.
"""
import html
import json
import math

from transforms.spec.stages import STAGES

__all__ = ["stage_chart", "feature_chart", "histograms", "trend_chart", "HISTOGRAM_FEATURES",
           "MAX_BINS", "TREND_NIGHTS", "COLLAPSE_ROWS"]

HISTOGRAM_FEATURES = 6     # HTML: histograms of this many most divergent features
MAX_BINS = 40              # HTML: bins drawn per histogram (largest kept, in bin order)
OFFLINE_COLOR, PRODUCTION_COLOR = "#3b6fb6", "#e08a2c"
STATUS_COLORS = {0: "#2e8540", 1: "#c0392b", 2: "#7f7f7f"}
SPECIAL_BINS = (("neg_inf", "-inf"), ("pos_inf", "+inf"), ("nan", "NaN"))
TREND_NIGHTS = 30
COLLAPSE_ROWS = 14         # HTML: longer tables are folded


def stage_chart(report):
  firsts = report.get("first_divergent_stage", {})
  counts = [int(firsts.get(s, 0) or 0) for s in STAGES]
  width, height, left, top, bottom = 560, 200, 40, 20, 30
  plot_h = height - top - bottom
  step = (width - left - 10) / len(STAGES)
  top_count = max(counts) or 1
  svg = [_svg_open(width, height, "stage-chart", "records by first divergent stage"),
         _line(left, top + plot_h, width - 10, top + plot_h)]
  for i, (stage, n) in enumerate(zip(STAGES, counts)):
    h = plot_h * n / top_count
    x = left + i * step + step * 0.15
    svg.append(f"<g class=\"stage\" data-stage=\"{stage}\" data-count=\"{n}\">"
               f"<title>{stage}: {n}</title>"
               f"<rect class=\"bar\" x=\"{x:.1f}\" y=\"{top + plot_h - h:.1f}\" "
               f"width=\"{step * 0.7:.1f}\" height=\"{h:.1f}\"/>"
               f"{_text(x + step * 0.35, top + plot_h - h - 4, n, 'middle')}"
               f"{_text(x + step * 0.35, height - 10, stage, 'middle')}</g>")
  svg.append("</svg>\n")
  return "".join(svg)


_SERVED = ("served_mismatch", "served_within_tolerance")


def feature_chart(report):
  ranked = _ranked_features(report)
  if not ranked:
    return "<p class=\"note\">no transformed features in the report</p>\n"
  row, label_w, bar_w = 18, 200, 300
  width, height = label_w + bar_w + 170, row * len(ranked) + 10
  svg = [_svg_open(width, height, "feature-chart", "mismatch rate per feature")]
  for i, (name, f) in enumerate(ranked):
    rate = _float(f.get("mismatch_rate"))
    y = 5 + i * row
    w = bar_w * min(max(rate, 0.0), 1.0)
    svg.append(f"<g class=\"feature\" data-feature=\"{_e(name)}\"><title>{_e(name)}: "
               f"{f.get('mismatch', 0)} mismatched, {f.get('within_tolerance', 0)} within "
               f"tolerance, {f.get('match', 0)} matched ({_e(f.get('kind', '?'))})</title>"
               f"{_text(label_w - 6, y + 12, _short(name, 30), 'end')}"
               f"<rect class=\"rate\" x=\"{label_w}\" y=\"{y + 2}\" width=\"{w:.1f}\" "
               f"height=\"{row - 5}\"/>"
               f"{_text(label_w + w + 4, y + 12, _pct(f.get('mismatch_rate')), 'start')}</g>")
  svg.append("</svg>\n")
  rows = [[name, f.get("kind"), f.get("match", 0), f.get("mismatch", 0),
           f.get("within_tolerance", 0), f.get("offline_only", 0), f.get("production_only", 0),
           _pct(f.get("mismatch_rate")), _num(f.get("max_abs_delta")),
           _num(f.get("mean_abs_delta"))] for name, f in ranked]
  head = ["feature", "kind", "match", "mismatch", "within tol.", "offline only",
          "production only", "mismatch rate", "max |Δ|", "mean |Δ|"]
  if any(f.get(c) for _, f in ranked for c in _SERVED):  # what the model got, where logged
    head += ["served mismatch", "served within tol."]
    rows = [r + [f.get(c, 0) for c in _SERVED] for r, (_, f) in zip(rows, ranked)]
  return "".join(svg) + _table(head, rows, "features")


def histograms(report):
  drift = report.get("drift", {})
  features = report.get("features", {})
  chosen = sorted((n for n in drift if drift[n].get("histogram")),
                  key=lambda n: (-_float(features.get(n, {}).get("mismatch_rate")),
                                 -_float(drift[n].get("linf", drift[n].get("jensen_shannon"))),
                                 n))[:HISTOGRAM_FEATURES]
  if not chosen:
    return "<p class=\"note\">no feature histograms in the report</p>\n"
  charts = [_histogram(name, drift[name]) for name in chosen]
  rows = [[n, d.get("kind"), "L∞" if "linf" in d else "Jensen–Shannon",
           _num(d.get("linf", d.get("jensen_shannon"))), _num(d.get("psi"))]
          for n, d in sorted(drift.items())]
  return (f"<p class=\"note\">share of each side's records per bin; "
          f"<span style=\"color:{OFFLINE_COLOR}\">■ offline</span> "
          f"<span style=\"color:{PRODUCTION_COLOR}\">■ production</span></p>\n"
          + "".join(charts) + _table(["feature", "kind", "metric", "value", "PSI"], rows, "drift"))


def _histogram(name, drift):
  hist = drift["histogram"]
  a, b = list(hist.get("offline", [])), list(hist.get("production", []))
  bins = list(hist.get("bins", []))
  if len(bins) == len(a) + 1:     # numeric: edges -> "[lo, hi)"
    labels = [f"[{_num(lo)}, {_num(hi)})" for lo, hi in zip(bins, bins[1:])]
    ticks = [f"{lo:.4g}" if isinstance(lo, float) else str(lo) for lo in bins[:-1]]
  else:                           # categorical: one label per bin
    labels = [_value(x) for x in bins] + [""] * (len(a) - len(bins))
    ticks = labels[:]
  for special, label in SPECIAL_BINS:  # numeric NaN / inf counts: bins of their own
    if len(hist.get(special) or ()) == 2:
      labels, ticks = labels + [label], ticks + [label]
      a, b = a + [hist[special][0]], b + [hist[special][1]]
  n = min(len(a), len(b), len(labels))
  ta, tb = (sum(a) or 1), (sum(b) or 1)
  idx = list(range(n))
  if n > MAX_BINS:                # keep the largest bins, in bin order
    idx = sorted(sorted(idx, key=lambda i: (-(a[i] / ta + b[i] / tb), i))[:MAX_BINS])
  width, height, top, bottom, left = 360, 170, 18, 22, 8
  plot_h = height - top - bottom
  step = (width - 2 * left) / max(1, len(idx))
  top_share = max([a[i] / ta for i in idx] + [b[i] / tb for i in idx] + [1e-12])
  svg = [f"<div class=\"hist\" data-feature=\"{_e(name)}\">",
         _svg_open(width, height, "histogram", f"histogram of {name}"),
         _text(left, 12, _short(name, 48), "start"),
         _line(left, top + plot_h, width - left, top + plot_h)]
  for j, i in enumerate(idx):
    x = left + j * step
    bar = step * 0.42
    svg.append(f"<g class=\"bin\"><title>{_e(labels[i])}: offline {a[i]}, production {b[i]}"
               f"</title>")
    for k, (share, cls) in enumerate(((a[i] / ta, "off"), (b[i] / tb, "prod"))):
      h = plot_h * share / top_share
      svg.append(f"<rect class=\"{cls}\" x=\"{x + step * 0.08 + k * bar:.1f}\" "
                 f"y=\"{top + plot_h - h:.1f}\" width=\"{bar:.1f}\" height=\"{h:.1f}\"/>")
    svg.append("</g>")
  label_every = max(1, math.ceil(len(idx) / 6))
  for j in range(0, len(idx), label_every):  # axis ticks; the first and last kept inside
    x, anchor = ((left, "start") if j == 0 else (width - left, "end") if j == len(idx) - 1
                 else (left + j * step + step * 0.5, "middle"))
    svg.append(_text(x, height - 6, _short(ticks[idx[j]], 12), anchor))
  svg.append(_text(width - left, 12, f"peak {_pct(top_share)}", "end"))
  svg.append("</svg>")
  if n > MAX_BINS:
    svg.append(f"<div class=\"note\">{MAX_BINS} largest of {n} bins</div>")
  svg.append("</div>\n")
  return "".join(svg)


def trend_chart(trend, report):
  nights = sorted(trend, key=lambda t: str(t.get("date", "")))[-TREND_NIGHTS:]
  threshold = _float(report.get("max_divergent_fraction"))
  width, height, left, top, bottom = 560, 190, 50, 15, 30
  plot_w, plot_h = width - left - 15, height - top - bottom
  top_y = _nice_ceiling(max([_float(t.get("divergent_fraction")) for t in nights] +
                             [threshold, 1e-12]) * 1.1)
  step = plot_w / max(1, len(nights) - 1)
  y = lambda v: top + plot_h - plot_h * v / top_y  # noqa: E731
  points = [(left + i * step, y(_float(t.get("divergent_fraction"))))
            for i, t in enumerate(nights)]
  svg = [_svg_open(width, height, "trend-chart", "divergent fraction per night"),
         _line(left, top + plot_h, width - 15, top + plot_h), _line(left, top, left, top + plot_h),
         _text(left - 4, top + 4, f"{top_y:.3g}", "end"), _text(left - 4, top + plot_h, "0", "end"),
         f"<line class=\"threshold\" x1=\"{left}\" x2=\"{width - 15}\" y1=\"{y(threshold):.1f}\" "
         f"y2=\"{y(threshold):.1f}\" stroke=\"#c0392b\" stroke-dasharray=\"4 3\"/>",
         "<polyline fill=\"none\" stroke=\"#3b6fb6\" points=\"" +
         " ".join(f"{px:.1f},{py:.1f}" for px, py in points) + "\"/>"]
  for (px, py), t in zip(points, nights):
    status = t.get("exit_status")
    svg.append(f"<circle class=\"night\" cx=\"{px:.1f}\" cy=\"{py:.1f}\" r=\"3.5\" "
               f"fill=\"{STATUS_COLORS.get(status, '#000')}\"><title>{_e(t.get('date'))}: "
               f"{_e(_frac(t.get('divergent_fraction')))}, exit {_e(status)}</title></circle>")
  every, last = max(1, math.ceil(len(nights) / 5)), len(nights) - 1
  for i in [i for i in range(0, last, every) if last - i >= every] + [last]:
    svg.append(_text(points[i][0], height - 8, nights[i].get("date", ""),
                     "end" if i == last and i else "middle"))
  svg.append(_text(width - 15, y(threshold) - 4, f"max {_frac(threshold)}", "end"))
  svg.append("</svg>\n")
  return "".join(svg)


def _nice_ceiling(v):
  """The smallest of 1, 1.5, 2, 2.5, 3, 4, 5, 6 and 8 times a power of ten that is >= v > 0: an
  axis top whose label is short (0.3, not 0.267864, which the chart's margin clipped)."""
  power = 10.0 ** math.floor(math.log10(v))
  return next(float(f"{m * power:.3g}") for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10)
              if m * power >= v * (1 - 1e-12))


def _svg_open(width, height, cls, label):
  return (f"<svg class=\"{cls}\" width=\"{width}\" height=\"{height}\" "
          f"viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"{_e(label)}\">")


def _line(x1, y1, x2, y2):
  return f"<line class=\"axis\" x1=\"{x1}\" y1=\"{y1}\" x2=\"{x2}\" y2=\"{y2}\"/>"


def _text(x, y, value, anchor):
  return f"<text x=\"{x:.1f}\" y=\"{y:.1f}\" text-anchor=\"{anchor}\">{_e(value)}</text>"


def _table(header, rows, cls=""):
  """An HTML table; one of more than COLLAPSE_ROWS rows is folded (<details>, no script)."""
  head = "".join(f"<th>{_e(h)}</th>" for h in header)
  body = "".join(
      "<tr>" + "".join((f"<td class=\"n\">{_e(v)}</td>" if isinstance(v, (int, float))
                        else f"<td>{_e('' if v is None else v)}</td>") for v in r) + "</tr>\n"
      for r in rows)
  table = f"<table class=\"{_e(cls)}\"><tr>{head}</tr>\n{body}</table>\n"
  if len(rows) <= COLLAPSE_ROWS:
    return table
  return f"<details><summary>{len(rows)} rows</summary>\n{table}</details>\n"


# -- formatters (render.py uses them too) ------------------------------------------------


def _ranked_features(report):
  """(name, stats) by mismatch rate, highest first; ties by name."""
  return sorted(report.get("features", {}).items(),
                key=lambda kv: (-_float(kv[1].get("mismatch_rate")), kv[0]))


def _e(value):
  """Text for the HTML page: control characters shown escaped, as the terminal summary shows
  them (_plain: a key holding ESC or BEL acts on a terminal that prints the file), then HTML
  escaped."""
  return html.escape(_plain(value), quote=True)


def _short(value, n):
  s = str(value)
  return s if len(s) <= n else s[:n - 1] + "…"


def _plain(value):
  """A string safe for a terminal: each control or other non-printable character shown as its
  Python escape (\x1b, \x07, \n); printable text, non-ASCII letters included, as it is."""
  s = str(value)
  if s.isprintable():
    return s
  return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                 for c in s)


def _value(v):
  return v if isinstance(v, str) else json.dumps(v, sort_keys=True)


def _float(v):
  try:
    f = float(v)
  except (TypeError, ValueError):
    return 0.0
  return f if math.isfinite(f) else 0.0


def _num(v):
  return "–" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v)


def _frac(v):
  return f"{_float(v):.6g}"


def _pct(v):
  return "–" if v is None else f"{100 * _float(v):.2f}%"
