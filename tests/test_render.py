"""replay.report.render on hand-made report dicts: structure, escaping, self-containment, size, determinism."""
import re

from replay.report import charts
from replay.report import render

STAGES = ["raw", "parse", "window", "shard", "serialize", "analyze", "transform"]


def build_report(n_features=3, divergent_by_stage=None, exit_code=None, names=None,
                 bins=5, samples=3, threshold=0.01):
  """A report.json-shaped dict: feature i has mismatch rate (i + 1) / (n + 1) when divergent."""
  firsts = {s: 0 for s in STAGES}
  firsts.update(divergent_by_stage or {})
  divergent = sum(firsts.values())
  matched = 1000
  names = names or [f"feature_{i:02d}" for i in range(n_features)]
  features, drift = {}, {}
  for i, name in enumerate(names):
    mismatch = (i + 1) * divergent // (len(names) + 1) if divergent else 0
    numeric = i % 2 == 0
    features[name] = {"kind": "numeric" if numeric else "categorical",
                      "match": matched - mismatch, "mismatch": mismatch,
                      "within_tolerance": 0, "offline_only": 0, "production_only": 0,
                      "mismatch_rate": mismatch / matched,
                      "max_abs_delta": 0.5 * i if numeric else None,
                      "mean_abs_delta": 0.25 * i if numeric else None}
    counts = [10 * (b + 1) for b in range(bins)]
    hist = {"bins": ([float(b) for b in range(bins + 1)] if numeric
                     else [f"cat{b}" for b in range(bins)]),
            "offline": counts, "production": counts[::-1] if mismatch else counts}
    metric = {"jensen_shannon": 0.01 * i} if numeric else {"linf": 0.02 * i}
    drift[name] = {"kind": features[name]["kind"], "psi": 0.001 * i, "histogram": hist, **metric}
  fraction = divergent / matched
  keys = [f"k{j:04d}" for j in range(samples)]
  return {
      "format": "skewtrace.report/1",
      "offline": {"dir": "/runs/offline", "runner": "DirectRunner", "rows": matched},
      "production": {"dir": "/runs/production", "runner": "DirectRunner", "rows": matched},
      "tolerance": {"default": {"abs": 0.0, "rel": 0.0}, "features": {}},
      "max_divergent_fraction": threshold,
      "records": {"offline": matched, "production": matched, "matched_keys": matched,
                  "offline_only": 0, "production_only": 0, "dropped_both": 0,
                  "identical": matched - divergent, "noise": 0, "latent": 0,
                  "divergent": divergent, "duplicate_keys_offline": 0,
                  "duplicate_keys_production": 0},
      "divergent_fraction": fraction,
      "one_side_only": {"offline": {}, "production": {}},
      "first_divergent_stage": firsts,
      "stages": {s: {"match": matched, "mismatch": 0} for s in STAGES},
      "features": features,
      "suspected_causes": ([{"stage": "window", "field": "profile.windowing.offset_seconds",
                             "offline": 0, "production": 1800, "records": firsts["window"]}]
                           if firsts["window"] else []),
      "drift": drift,
      "buckets": {"total": 16, "compared": 16 if divergent else 0,
                  "skipped_equal": 0 if divergent else 16},
      "samples": {"divergent": [{"key": k, "first_divergent_stage": "window",
                                 "features": {names[0]: [1.0, 2.0]}}
                                for k in (keys if divergent else [])],
                  "offline_only": [], "production_only": [], "duplicate_keys": []},
      "exit_code": (int(fraction > threshold) if exit_code is None else exit_code),
  }


def _stage_counts(page):
  return re.findall(r'<g class="stage" data-stage="(\w+)" data-count="(\d+)"', page)


def test_stage_chart_has_every_stage_in_order_with_counts():
  page = render.render_html(build_report(divergent_by_stage={"window": 40, "transform": 7}))
  assert _stage_counts(page) == [("raw", "0"), ("parse", "0"), ("window", "40"), ("shard", "0"),
                                 ("serialize", "0"), ("analyze", "0"), ("transform", "7"),
                                 ("serve", "0"), ("predict", "0")]
  # the tallest bar is window's, transform's is 7/40 of it
  heights = dict(re.findall(r'data-stage="(\w+)"[^>]*><title>[^<]*</title><rect class="bar" '
                            r'[^>]*height="([\d.]+)"', page))
  assert float(heights["window"]) > 0 and float(heights["raw"]) == 0
  assert abs(float(heights["transform"]) / float(heights["window"]) - 7 / 40) < 0.01


def test_every_feature_has_a_bar_sorted_by_mismatch_rate():
  report = build_report(n_features=8, divergent_by_stage={"window": 90})
  page = render.render_html(report)
  chart = page[page.index('class="feature-chart"'):]
  chart = chart[:chart.index("</svg>")]
  drawn = re.findall(r'<g class="feature" data-feature="([^"]+)"', chart)
  want = sorted(report["features"], key=lambda n: (-report["features"][n]["mismatch_rate"], n))
  assert drawn == want and len(drawn) == 8
  widths = [float(w) for w in re.findall(r'<rect class="rate" [^>]*width="([\d.]+)"', chart)]
  assert widths == sorted(widths, reverse=True) and widths[0] > widths[-1]


def test_histograms_of_the_most_divergent_features_draw_every_bin():
  report = build_report(n_features=10, divergent_by_stage={"shard": 100}, bins=7)
  page = render.render_html(report)
  hists = re.findall(r'<div class="hist" data-feature="([^"]+)">(.*?)</div>', page, re.S)
  top = sorted(report["features"], key=lambda n: -report["features"][n]["mismatch_rate"])
  assert [name for name, _ in hists] == top[:render.HISTOGRAM_FEATURES]
  for _, body in hists:
    assert body.count('<g class="bin">') == 7
    assert body.count('class="off"') == 7 and body.count('class="prod"') == 7
  # numeric bins are labelled by their edges, categorical ones by their label
  assert "[0, 1)" in page and "cat0" in page


def test_histogram_caps_bins_keeping_the_largest():
  report = build_report(n_features=1, divergent_by_stage={"window": 10},
                        bins=render.MAX_BINS + 20)
  page = render.render_html(report)
  body = re.findall(r'<div class="hist"[^>]*>(.*?)</div>\n', page, re.S)[0]
  assert body.count('<g class="bin">') == render.MAX_BINS
  assert f"{render.MAX_BINS} largest of {render.MAX_BINS + 20} bins" in body


def test_keys_and_feature_names_are_escaped():
  evil = "<script>alert(1)</script>"
  report = build_report(n_features=2, names=[evil, 'q"uote&amp'],
                        divergent_by_stage={"window": 20})
  report["samples"]["divergent"][0]["key"] = "<script>x</script>"
  report["suspected_causes"][0]["production"] = "<b>1800</b>"
  page = render.render_html(report)
  assert "<script" not in page and "<b>" not in page
  assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
  assert 'data-feature="q&quot;uote&amp;amp"' in page
  assert "&lt;script&gt;x&lt;/script&gt;" in page


def test_page_is_self_contained():
  page = render.render_html(build_report(n_features=5, divergent_by_stage={"parse": 3}),
                            trend=[{"date": "2025-01-01", "divergent_fraction": 0.0,
                                    "exit_status": 0}])
  lowered = page.lower()
  for needle in ("http", "<script", "<link", "<img", "@import", "url(", "src="):
    assert needle not in lowered, needle
  assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
  assert page.count("<svg") == page.count("</svg>") >= 3


def test_page_stays_small_for_fifty_features():
  report = build_report(n_features=50, divergent_by_stage={"window": 500, "transform": 100},
                        bins=20, samples=100)
  trend = [{"date": f"2025-01-{d:02d}", "divergent_fraction": d / 1000, "exit_status": d % 2}
           for d in range(1, 31)]
  page = render.render_html(report, trend=trend)
  assert len(page.encode("utf-8")) < 200_000
  assert page.count('<g class="feature"') == 50
  # The nightly page: the verdict, then the trend, then what differs.
  assert page.index('id="verdict"') < page.index("<h2>Last ") < page.index("What differs")


def test_output_is_deterministic():
  a = build_report(n_features=6, divergent_by_stage={"window": 30, "serialize": 5})
  b = build_report(n_features=6, divergent_by_stage={"window": 30, "serialize": 5})
  b["features"] = dict(reversed(list(b["features"].items())))  # insertion order is not output
  b["drift"] = dict(reversed(list(b["drift"].items())))
  assert render.render_html(a).encode() == render.render_html(b).encode()
  assert render.render_text(a) == render.render_text(b)


def test_zero_divergence_renders_a_clear_verdict():
  report = build_report(n_features=3)
  page = render.render_html(report)
  assert re.search(r'<p class="verdict clean" id="verdict">no divergence', page)
  assert [n for _, n in _stage_counts(page)] == ["0"] * len(render.STAGES)
  text = render.render_text(report)
  assert "no divergence" in text and "DIVERGENCE" not in text
  assert "features: no mismatches" in text and "suspected causes: none" in text


def test_empty_report_renders():
  report = build_report(names=["x"])
  report["features"], report["drift"], report["samples"] = {}, {}, {}
  page = render.render_html(report)
  assert "no divergence" in page and "no transformed features" in page
  assert [s for s, _ in _stage_counts(page)] == ["raw", "parse", "window", "shard",
                                                 "serialize", "analyze", "transform", "serve",
                                                 "predict"]


def test_verdicts_over_and_within_threshold():
  over = build_report(divergent_by_stage={"window": 50})            # 5% > 1%
  within = build_report(divergent_by_stage={"window": 5})           # 0.5% <= 1%
  assert render.verdict(over)[0] == "divergent" and over["exit_code"] == 1
  assert render.verdict(within)[0] == "within_threshold"
  assert 'class="verdict divergent"' in render.render_html(over)
  assert 'class="verdict within_threshold"' in render.render_html(within)
  assert "DIVERGENCE" in render.render_text(over)
  assert "divergence within threshold" in render.render_text(within)


def test_text_summary_lists_stages_in_order_top_features_and_causes():
  report = build_report(n_features=12, divergent_by_stage={"window": 60, "raw": 2})
  text = render.render_text(report)
  lines = text.splitlines()
  start = lines.index("first divergent stage:")
  stage_lines = lines[start + 1:start + 8]
  assert [ln.split()[0] for ln in stage_lines] == STAGES
  assert [int(ln.split()[1]) for ln in stage_lines] == [2, 0, 60, 0, 0, 0, 0]
  assert "divergent fraction: 0.062 (threshold 0.01)" in text
  top = [ln.split()[0] for ln in lines[lines.index("top features by mismatch rate:") + 1:]
         if ln.startswith("  feature_")]
  assert top == [f"feature_{i:02d}" for i in range(11, 1, -1)]  # 10, highest rate first
  assert "profile.windowing.offset_seconds: 0 -> 1800 (60 records)" in text


def test_text_summary_neutralises_control_characters():
  report = build_report(n_features=1, names=["f\x1b[31mred"], divergent_by_stage={"window": 9})
  text = render.render_text(report)
  assert "\x1b" not in text and "f\\x1b[31mred" in text


def test_page_shows_terminal_control_bytes_escaped():
  """A key or name holding ESC, an OSC sequence or BEL acts on a terminal that `cat`s the page:
  shown escaped, as the text summary shows them; printable non-ASCII text as it is."""
  report = build_report(n_features=1, names=["f\x1b[31mred"], divergent_by_stage={"window": 9})
  report["samples"]["divergent"][0]["key"] = "k\x1b]0;title\x07é"
  page = render.render_html(report)
  assert not {c for c in page if ord(c) < 32 and c not in "\n"}, "a control byte reached the page"
  assert "k\\x1b]0;title\\x07é" in page and "f\\x1b[31mred" in page


def test_trend_axis_top_is_a_short_round_number():
  """The y axis ends at a round number above the largest fraction: its label fits the margin
  (a computed 0.267864 was clipped to '.267864')."""
  import re
  trend = [{"date": f"2025-02-{d:02d}", "divergent_fraction": f, "exit_status": 1}
           for d, f in ((1, 0.2435), (2, 0.1))]
  page = render.render_html(build_report(), trend=trend)
  chart = page[page.index("trend-chart"):]
  labels = re.findall(r'text-anchor="end"[^>]*>([^<]*)</text>', chart)
  assert labels[:2] == ["0.3", "0"], labels


def test_trend_chart_plots_the_last_thirty_nights_in_date_order():
  trend = [{"date": f"2025-02-{d:02d}", "divergent_fraction": d / 100, "exit_status": int(d > 20)}
           for d in range(28, 0, -1)]
  trend += [{"date": f"2025-03-{d:02d}", "divergent_fraction": 0.0, "exit_status": 2}
            for d in range(1, 6)]
  page = render.render_html(build_report(), trend=trend)
  nights = re.findall(r'<circle class="night" [^>]*fill="([^"]+)"><title>([\d-]+):', page)
  assert len(nights) == 30
  dates = [d for _, d in nights]
  assert dates == sorted(dates) and dates[0] == "2025-02-04" and dates[-1] == "2025-03-05"
  colors = dict((d, c) for c, d in nights)
  assert colors["2025-02-10"] == charts.STATUS_COLORS[0]
  assert colors["2025-02-25"] == charts.STATUS_COLORS[1]
  assert colors["2025-03-01"] == charts.STATUS_COLORS[2]
  assert 'class="threshold"' in page
  assert "Last 30 nights" in page and "Last 30 nights" not in render.render_html(build_report())


def test_numeric_nan_and_inf_counts_are_bins_of_their_own():
  report = build_report(n_features=1, divergent_by_stage={"serialize": 10}, bins=4)
  report["drift"]["feature_00"]["histogram"].update(nan=[3, 0], pos_inf=[0, 2])
  body = re.findall(r'<div class="hist"[^>]*>(.*?)</div>\n', render.render_html(report), re.S)[0]
  assert body.count('<g class="bin">') == 6
  assert "<title>+inf: offline 0, production 2</title>" in body
  assert "<title>NaN: offline 3, production 0</title>" in body


def test_long_cause_values_are_shortened():
  report = build_report(divergent_by_stage={"window": 20})
  report["suspected_causes"][0].update(offline=list(range(500)), production=list(range(1, 501)))
  text = render.render_text(report)
  cause = [ln for ln in text.splitlines() if "offset_seconds" in ln][0]
  assert len(cause) < 200 and "…" in cause
  page = render.render_html(report)
  assert "[0, 1, 2, 3" in page and ", 499]" not in page


def test_page_tags_are_balanced():
  from html.parser import HTMLParser
  void = {"meta", "rect", "line", "polyline", "circle", "br"}

  class Balance(HTMLParser):
    def __init__(self):
      super().__init__()
      self.stack, self.errors = [], []

    def handle_starttag(self, tag, attrs):
      if tag not in void:
        self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
      pass

    def handle_endtag(self, tag):
      if tag in void:
        return
      if not self.stack or self.stack.pop() != tag:
        self.errors.append(tag)

  report = build_report(n_features=7, divergent_by_stage={"window": 30, "analyze": 3})
  report["one_side_only"]["offline"] = {"window": 2}
  report["samples"]["offline_only"] = [{"key": "k9", "reason": "window"}]
  report["samples"]["duplicate_keys"] = [{"side": "production", "key": "k7"}]
  checker = Balance()
  checker.feed(render.render_html(report, trend=[
      {"date": "2025-01-0%d" % d, "divergent_fraction": 0.001 * d, "exit_status": 0}
      for d in range(1, 4)]))
  assert checker.errors == [] and checker.stack == []


def test_text_summary_caps_the_suspected_causes():
  report = build_report(divergent_by_stage={"window": 20})
  cause = report["suspected_causes"][0]
  report["suspected_causes"] = [dict(cause, field=f"f{i:02d}") for i in range(20)]
  lines = render.render_text(report).splitlines()
  shown = [ln for ln in lines if ln.startswith("  window     f")]
  assert [ln.split()[1] for ln in shown] == [f"f{i:02d}:" for i in range(render.TOP_CAUSES)]
  assert f"  ... {20 - render.TOP_CAUSES} more in the report" in lines
  assert render.render_html(report).count("<td>f1") == 10  # the page lists all of them


def test_served_mismatches_are_named_in_the_text_summary():
  report = build_report(n_features=2, divergent_by_stage={"serve": 6})
  name = sorted(report["features"])[0]
  report["features"][name].update(served_mismatch=6, served_within_tolerance=2)
  text = render.render_text(report)
  assert f"served {name}: 6 records the model got another value for (2 within tolerance)" in text
  other = sorted(report["features"])[1]
  assert f"served {other}:" not in text
  # the page's feature table gains the served columns, with each feature's counts
  table = charts.feature_chart(report)
  assert "<th>served mismatch</th><th>served within tol.</th>" in table
  row = table[table.index(f"<td>{name}</td>"):]
  assert row[:row.index("</tr>")].endswith('<td class="n">6</td><td class="n">2</td>')
  assert "served mismatch" not in charts.feature_chart(build_report(n_features=2))


def test_window_float_noise_is_said_in_what_differs_even_when_no_record_is_noise():
  report = build_report(n_features=2, divergent_by_stage={"serve": 6})
  why = "window fingerprints of 4 record(s) differ only by windowed aggregates"
  report["noise"] = {"records": 0, "why": [why], "window_records": 4}
  block = render.render_html(report)
  block = block[block.index('id="what-differs"'):]
  assert f"<strong>noise</strong>: 0 records — {why}" in block[:block.index("</div>")]
  report["noise"] = {"records": 0, "why": []}
  page = render.render_html(report)
  assert "<strong>noise</strong>" not in page


def test_the_verdict_and_what_differs_come_first_with_a_worked_example():
  report = build_report(n_features=2, divergent_by_stage={"window": 20})
  report["reaches_model"] = {s: 0 for s in render.STAGES}
  report["reaches_model"]["window"] = 5
  report["unexplained"] = []
  report["samples"]["divergent"][0]["when"] = {"event_time": [1414092600, 1414092600],
                                               "window_start": [1414090800, 1414090740]}
  page = render.render_html(report)
  order = [page.index(s) for s in ('id="verdict"', 'id="what-differs"', "<h2>Divergence by",
                                   "<h2>Suspected causes", "<h2>Records", "<h2>Samples")]
  assert order == sorted(order)
  block = page[page.index('id="what-differs"'):page.index("</div>", page.index('id="what-d'))]
  assert "<strong>window</strong>: 20 records first differ here — 5 reach the model, 15 latent" \
      in block
  assert "offset_seconds 0 → 1800" in block
  assert "Worked example" in block and report["samples"]["divergent"][0]["key"] in block
  # the event time shown once (equal), the window start on both sides, as UTC
  assert "event_time: 2014-10-23T19:30:00Z" in block
  assert "window_start: 2014-10-23T19:00:00Z → 2014-10-23T18:59:00Z" in block
  # a stage no configuration explains says so
  report["suspected_causes"], report["unexplained"] = [], [
      {"stage": "window", "records": 20, "note": "not explained by configuration"}]
  assert "not explained by configuration" in render.render_html(report)


def test_floats_are_shown_with_the_digits_that_tell_them_apart_and_long_tables_fold():
  assert render._to_difference(1.2345678, 1.2345679) == ("1.2345678", "1.2345679")
  assert render._to_difference(0.5, 0.25) == ("0.5", "0.25")
  assert render._to_difference(3, "x") == ("3", "x")
  rows = [[i] for i in range(render.COLLAPSE_ROWS + 1)]
  assert render._table(["n"], rows).startswith("<details><summary>")
  assert not render._table(["n"], rows[:-1]).startswith("<details>")
