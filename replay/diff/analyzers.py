"""The analyze stage compared numerically: each analyzer output of two runs, under float noise.

The run metadata carry every analyzer output's fingerprint and, for numeric outputs of at most
64 values, the values themselves (transforms/graph/analyze.py). Two runs' analyzers compare:
  equal      fingerprints equal
  noise      float values of the same dtype and shape whose largest relative difference
             max |p - o| / max(|o|, |p|) is at most tau = sqrt(N) * u of the dtype (N the
             records analysed; replay/diff/tolerance.py derives it): another shard count, bundle
             split or runner reorders TFT's float sums and moves them by about that much
  differs    anything else: values beyond tau, integer or vocabulary outputs that differ, other
             dtypes or shapes, outputs whose values are not recorded (more than 64)
  offline_only / production_only   an analyzer one run lacks (a changed preprocessing_fn)
Each entry names the output features the analyzer feeds, as either run metadata records them.
The run's state is `equal` when every analyzer is, `noise` when every one is equal or noise,
else `differs`; `exact_features` then names the features fed by an analyzer that is not noise,
which the value comparison takes exactly (replay/diff/tolerance.py). A relative difference is
taken against the value itself, so an analyzer near 0 by cancellation (the mean of centred
data) is strict: its noise shows as `differs`, never the other way round.
"""
import math

from replay.diff import tolerance

__all__ = ["compare", "exact_features", "STATES", "VERDICTS"]

STATES = ("equal", "noise", "differs")
VERDICTS = ("noise", "differs", "offline_only", "production_only")
_FLOAT_BITS = {"float16": 16, "float32": 32, "float64": 64}


def _max_rel(a, b):
  """The largest relative difference of two equal-length float lists (inf when one is NaN)."""
  worst = 0.0
  for x, y in zip(a, b):
    x, y = float(x), float(y)
    if x == y or (math.isnan(x) and math.isnan(y)):
      continue
    scale = max(abs(x), abs(y))
    worst = max(worst, math.inf if not math.isfinite(scale) else abs(x - y) / scale)
  return worst


def _one(name, a, b, records):
  feeds = sorted(set((a or {}).get("features", [])) | set((b or {}).get("features", [])))
  return {**_verdict(name, a, b, records), "features": feeds}


def _verdict(name, a, b, records):
  if a is None or b is None:
    return {"name": name, "verdict": "production_only" if a is None else "offline_only",
            "max_rel_diff": None, "tolerance": None}
  bits = _FLOAT_BITS.get(a.get("dtype"))
  comparable = (bits is not None and a.get("dtype") == b.get("dtype") and
                a.get("shape") == b.get("shape") and "values" in a and "values" in b and
                len(a["values"]) == len(b["values"]))
  if not comparable:
    return {"name": name, "verdict": "differs", "max_rel_diff": None, "tolerance": None}
  rel, tau = _max_rel(a["values"], b["values"]), tolerance.noise_tau(bits, records)
  return {"name": name, "verdict": "noise" if rel <= tau else "differs",
          "max_rel_diff": rel if math.isfinite(rel) else None, "tolerance": tau}


def compare(offline_analyze, production_analyze, records):
  """{"state", "records", "analyzers": [one entry per analyzer that is not equal, by name]}
  of two run metadata `analyze` sections; `records`: the records the runs analysed (N)."""
  xa = offline_analyze.get("analyzers", {})
  xb = production_analyze.get("analyzers", {})
  entries = []
  for name in sorted(set(xa) | set(xb)):
    a, b = xa.get(name), xb.get(name)
    if a is not None and b is not None and a.get("fingerprint") == b.get("fingerprint"):
      continue
    entries.append(_one(name, a, b, records))
  whole_equal = offline_analyze.get("fingerprint") == production_analyze.get("fingerprint")
  if whole_equal and not entries:
    state = "equal"
  elif entries and all(e["verdict"] == "noise" for e in entries):
    state = "noise"
  else:  # an analyzer differs, or the fingerprints differ with no analyzer to show for it
    state = "differs"
  return {"state": state, "records": int(records), "analyzers": entries}


def exact_features(compared, offline_analyze, production_analyze):
  """The features to compare exactly under the noise default, for compare()'s result: those fed
  by an analyzer that differs or that one run lacks (sorted). An analyzer whose entry names no
  feature feeds none (the run metadata record every link, transforms/graph/analyze.feeds), so
  it moves no value. None when the whole default must be exact: the analyze fingerprints differ
  with no analyzer to show for it, or the run metadata record no links at all."""
  if compared["state"] != "differs":
    return ()
  changed = [a for a in compared["analyzers"] if a["verdict"] != "noise"]
  linked = any("features" in a for side in (offline_analyze, production_analyze)
               for a in side.get("analyzers", {}).values())
  if not changed or not linked:
    return None
  return tuple(sorted({f for a in changed for f in a["features"]}))
