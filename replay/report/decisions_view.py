"""The report's decisions (report.json `decisions`, replay/diff/decisions.py) as the text summary's
lines and the HTML page's first section: how many decisions change and what share of the traffic,
from which first stage and record class, the |delta prediction| histogram, and one flipped
record with both sides' predictions and decisions. Nothing here when no side ran a model.
"""
from replay.report.charts import _e, _num, _pct, _plain, _table

__all__ = ["headline", "lines", "html"]

_STAGE_WORDS = {"none": "none (identical or noise)"}


def headline(report):
  """"N decisions change (x% of traffic)", or None without decisions."""
  d = report.get("decisions")
  if not d:
    return None
  if not d.get("compared"):
    return "decisions: not compared (" + d.get("note", "no record predicted on both sides") + ")"
  return (f"{d['flips']} decisions change ({_pct(d['flip_fraction'])} of the "
          f"{d['compared']} records predicted on both sides); largest |d prediction| "
          f"{_num(d['max_abs_delta'])}, mean {_num(d['mean_abs_delta'])}")


def _origin(d):
  """(stage, records, flips, max |d|) per first stage, flips first."""
  rows = [(_STAGE_WORDS.get(s, s), e["records"], e["flips"], e["max_abs_delta"])
          for s, e in d.get("by_stage", {}).items()]
  return sorted(rows, key=lambda r: (-r[2], -r[1], r[0]))


def lines(report):
  """The text summary's decision lines (none without decisions)."""
  first = headline(report)
  if first is None:
    return []
  d = report["decisions"]
  out = [first]
  for stage, records, flips, top in _origin(d):
    if flips or stage != _STAGE_WORDS["none"]:  # the records that part nowhere: only flips
      out.append(f"  from {_plain(stage)}: {flips} flips in {records} records "
                 f"(max |d| {_num(top)})")
  noise = d.get("by_class", {}).get("noise", {}).get("flips", 0)
  if noise:
    out.append(f"  {noise} flips come from numeric noise alone (model inputs within tolerance): "
               "records at the decision boundary, not skew")
  for c in d.get("by_cause", []):
    if c.get("flips"):
      out.append(f"  cause {_plain(c['stage'])} {_plain(c['field'])}: {c['flips']} flips")
  return out + _attribution(d)


def _attribution(d):
  """Lines: which feature's difference, swapped back alone, restores the decision."""
  a = d.get("attribution")
  if a is None:
    return ["  (give the diff the model, --model_dir or --model_module, to name the features "
            "behind the flips)"] if d.get("flips") else []
  out = []
  of = (f"{a['attributed']} attributed flips whose inputs differ"
        + (f" (the first {a['limit']} by key hash of {a['flips_with_differing_inputs']})"
           if a["attributed"] < a["flips_with_differing_inputs"] else ""))
  for name, n in a.get("by_feature", {}).items():
    out.append(f"  {_plain(name)} alone explains {n} of {of}")
  if a.get("jointly_caused"):
    out.append(f"  {a['jointly_caused']} of {of}: no single feature restores the decision "
               "(jointly caused)")
  return out


def _histogram(d):
  """The |delta prediction| histogram as an inline SVG bar chart over its decade bins; bar
  heights on a log scale (the records with no delta would flatten every other bar), the
  counts printed under them."""
  import math
  counts = d["histogram"]["counts"]
  edges = d["histogram"]["edges"]
  top = math.log1p(max(counts) or 1)
  width, height, bar = 40 * len(counts) + 20, 140, 32
  parts = [f"<svg width=\"{width}\" height=\"{height}\" role=\"img\" "
           "aria-label=\"|delta prediction| histogram\">"]
  for i, n in enumerate(counts):
    h = int(90 * math.log1p(n) / top)
    x = 10 + 40 * i
    lo = edges[i]
    label = "0" if lo == 0 else (f"{lo:.0e}" if lo < 1 else ">=1")
    parts.append(f"<rect class=\"bar\" x=\"{x}\" y=\"{100 - h}\" width=\"{bar}\" "
                 f"height=\"{h}\"><title>{_e(n)} records</title></rect>"
                 f"<text x=\"{x}\" y=\"{115}\">{_e(label)}</text>"
                 f"<text x=\"{x}\" y=\"{130}\">{_e(n)}</text>")
  parts.append("</svg>\n")
  return "".join(parts)


def html(report):
  """The HTML page's decisions section (empty without decisions)."""
  first = headline(report)
  if first is None:
    return ""
  d = report["decisions"]
  out = [f"<h2 id=\"decisions\">{_e(first)}</h2>\n"]
  if not d.get("compared"):
    return "".join(out)
  out.append(_table(["first divergent stage", "records", "decision flips", "max |d prediction|"],
                    [[s, n, f, _num(m)] for s, n, f, m in _origin(d)], "decisions"))
  out.append(_table(["record class", "records", "decision flips"],
                    [[c, e["records"], e["flips"]] for c, e in d.get("by_class", {}).items()],
                    "decision-classes"))
  out.extend(f"<p class=\"note\">{_e(line.strip())}</p>\n" for line in lines(report)[1:]
             if "numeric noise" in line)
  out.extend(f"<p class=\"attribution\">{_e(line.strip())}</p>\n" for line in _attribution(d))
  out.append("<p>|&Delta; prediction| per record (decade bins):</p>\n" + _histogram(d))
  sample = (d.get("samples") or [None])[0]
  if sample:
    pred, dec = sample.get("prediction", [None, None]), sample.get("decision", [None, None])
    out.append(f"<p class=\"explain\" id=\"decision-example\">Record {_e(sample['key'])} "
               f"(first divergent stage {_e(sample.get('first_divergent_stage') or 'none')}): "
               f"offline predicts {_e(pred[0])} and decides {_e(dec[0])}; production predicts "
               f"{_e(pred[1])} and decides {_e(dec[1])}" + (
                   "; features that differ: " + ", ".join(
                       f"{_e(n)} {_e(v[0])} vs {_e(v[1])}"
                       for n, v in sorted(sample.get("features", {}).items()))
                   if sample.get("features") else "") + ".</p>\n")
  return "".join(out)
