"""The replay report model: frozen dataclasses with to_dict(), the shape of report.json.

Built by the diff (replay/diff/summary.py, from its merged Partial and what the run metadata
says); the renderers (replay/report/render.py: text and HTML) and the nightly check read only
its dict form, validated by manifests/report.schema.json. Plain data: imports neither Beam nor
the diff.
"""
import dataclasses
import math

__all__ = ["REPORT_FORMAT", "Side", "Records", "FeatureSummary", "Cause", "Buckets", "Report",
           "divergent_fraction", "FAIL_ON", "UNEXPLAINED", "FEATURE_TOTAL"]

# The records a feature's mismatch_rate (and the nightly check's served rate) is over.
FEATURE_TOTAL = ("match", "mismatch", "within_tolerance", "offline_only", "production_only")
FAIL_ON = ("divergent", "latent")  # what the exit code counts besides one-side-only records
UNEXPLAINED = "not explained by configuration: a data or code difference"

REPORT_FORMAT = "skewtrace.report/1"


class _Part:
  """A flat part of the report: its dict is its fields."""

  def to_dict(self):
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Side(_Part):
  dir: str
  runner: str
  rows: int
  lost: dict = dataclasses.field(default_factory=dict)  # {reason: records} a logger lost

  def to_dict(self):  # "lost" only where the side's log lost records
    out = dataclasses.asdict(self)
    if not out["lost"]:
      del out["lost"]
    return out


@dataclasses.dataclass(frozen=True)
class Records(_Part):
  offline: int
  production: int
  matched_keys: int
  offline_only: int
  production_only: int
  dropped_both: int
  identical: int
  noise: int       # only transformed / served values differ, within tolerance
  latent: int      # a stage differs, what the model receives agrees within tolerance
  divergent: int   # what the model receives differs
  duplicate_keys_offline: int
  duplicate_keys_production: int
  not_served: int  # offline records a partial production side never saw (not divergence)


@dataclasses.dataclass(frozen=True)
class FeatureSummary(_Part):
  kind: str
  match: int
  mismatch: int
  within_tolerance: int
  offline_only: int
  production_only: int
  mismatch_rate: float
  max_abs_delta: float | None
  mean_abs_delta: float | None
  # serve: records whose model input (the served value where logged) differs from the other
  # side's beyond tolerance / within it, among those that agree up to transform
  served_mismatch: int = 0
  served_within_tolerance: int = 0


  @classmethod
  def from_totals(cls, f):
    total = sum(f[k] for k in FEATURE_TOTAL)
    numeric = f["kind"] == "numeric"
    return cls(kind=f["kind"], match=f["match"], mismatch=f["mismatch"],
               within_tolerance=f["within_tolerance"], offline_only=f["offline_only"],
               production_only=f["production_only"],
               mismatch_rate=(f["mismatch"] + f["offline_only"] + f["production_only"]) /
               max(1, total),
               max_abs_delta=float(f["delta_max"]) if numeric else None,
               mean_abs_delta=math.fsum(f["delta_sums"]) / f["delta_n"]
               if numeric and f["delta_n"]
               else (0.0 if numeric else None),
               served_mismatch=f.get("served_mismatch", 0),
               served_within_tolerance=f.get("served_within_tolerance", 0))


@dataclasses.dataclass(frozen=True)
class Cause(_Part):
  stage: str
  field: str
  offline: object
  production: object
  records: int
  note: str = ""  # what the difference does and what to do, where the values alone do not say

  def to_dict(self):  # "note" only where there is one
    out = dataclasses.asdict(self)
    if not out["note"]:
      del out["note"]
    return out


@dataclasses.dataclass(frozen=True)
class Buckets(_Part):
  total: int
  compared: int
  skipped_equal: int


@dataclasses.dataclass(frozen=True)
class Report:
  offline: Side
  production: Side
  tolerance: dict
  max_divergent_fraction: float
  records: Records
  divergent_fraction: float
  one_side_only: dict
  first_divergent_stage: dict
  reaches_model: dict     # of first_divergent_stage's records, the divergent ones (per stage)
  stages: dict
  features: dict          # name -> FeatureSummary
  suspected_causes: tuple  # of Cause
  drift: dict
  buckets: Buckets
  samples: dict
  exit_code: int
  scope: str = "all"  # "production": offline records a partial production log never saw are
                      # not_served (replay/diff/compare.py Context.partial_production)
  fail_on: str = "divergent"
  analyzers: dict = dataclasses.field(default_factory=dict)  # replay/diff/analyzers.compare
  noise: dict = dataclasses.field(default_factory=dict)       # {records, why: [...]}
  unexplained: tuple = ()  # ({stage, records, note}) stages no configuration difference explains
  format: str = REPORT_FORMAT
  decisions: dict = None  # what the model decides (replay/diff/decisions.summary); None: no model

  def to_dict(self):
    out = {
        "format": self.format, "offline": self.offline.to_dict(),
        "production": self.production.to_dict(), "tolerance": self.tolerance,
        "max_divergent_fraction": self.max_divergent_fraction,
        "records": self.records.to_dict(), "divergent_fraction": self.divergent_fraction,
        "one_side_only": self.one_side_only,
        "first_divergent_stage": self.first_divergent_stage,
        "reaches_model": self.reaches_model, "stages": self.stages,
        "features": {n: f.to_dict() for n, f in sorted(self.features.items())},
        "suspected_causes": [c.to_dict() for c in self.suspected_causes],
        "drift": self.drift, "buckets": self.buckets.to_dict(), "samples": self.samples,
        "exit_code": self.exit_code, "scope": self.scope, "fail_on": self.fail_on,
        "analyzers": self.analyzers, "noise": self.noise,
        "unexplained": [dict(u) for u in self.unexplained]}
    if self.decisions is not None:
      out["decisions"] = self.decisions
    return out


def divergent_fraction(records, fail_on="divergent"):
  """(divergent + offline_only + production_only) / (matched_keys + offline_only +
  production_only): a key kept on one side only is a divergence too (a record the other side
  never served or never trained on); with fail_on "latent", latent records count as well.
  Records a partial production log never saw (not_served) are in neither."""
  r = records
  latent = r.get("latent", 0) if fail_on == "latent" else 0
  return (r["divergent"] + latent + r["offline_only"] + r["production_only"]) / \
      max(1, r["matched_keys"] + r["offline_only"] + r["production_only"])
