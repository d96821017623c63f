"""Numeric tolerances of the replay diff: one validated structure, per feature with a default.

A transformed numeric value pair (offline o, production p) is within tolerance when
  |p - o| <= abs + rel * |o|            (numpy.isclose's rule, the offline value as reference)
Each of `abs` and `rel` may be given as a scalar (every feature) or as a dict
{feature: value, "default": value}, as datacompy's validate_tolerance_parameter takes them;
both normalise to one `Tolerance`: a default (abs, rel) and per-feature overrides. Negative,
NaN or infinite values are refused (UsageError), so a typo cannot silently widen a threshold.
Categorical features have no tolerance: any difference is a mismatch.

The default, when no flag sets one, is float *noise*: abs = rel = tau(dtype, N) = sqrt(N) * u,
u the unit roundoff of the value's dtype (2**-24 for float32, 2**-53 for float64) and N the
number of records the runs analysed. Reordering a float sum of N terms moves it by about
sqrt(N) * u relative (rounding errors add like a random walk: Higham, Accuracy and Stability of
Numerical Algorithms, 2nd ed., sections 2.8 and 4.2), which is what another shard count, bundle
split or runner does to TFT's means and variances, and a float64 -> float32 cast moves a value
by at most u. The noise default is tied per feature to the analyzers that feed it
(replay/diff/analyzers.py): a feature fed by an analyzer that differs beyond tau, or that one
run lacks, is compared exactly (0, 0) -- `exact_features` -- while the others keep the noise
default. When the analyze fingerprints differ with no analyzer to show for it, or the run
metadata record no analyzer-to-feature links, the whole default is exact.
"""
import dataclasses
import math

from transforms.spec.errors import UsageError
from transforms.spec.feature_log import PREDICTION

__all__ = ["Tolerance", "normalise", "from_flags", "parse_feature_spec", "noise_tau",
           "check_features", "unit_roundoff"]

_UNIT_ROUNDOFF = {16: 2.0 ** -11, 32: 2.0 ** -24, 64: 2.0 ** -53}


def unit_roundoff(bits):
  """u of an IEEE float of `bits` bits (half the distance from 1 to the next float)."""
  return _UNIT_ROUNDOFF[bits]


def noise_tau(bits, records):
  """The float noise tolerance of a `bits`-bit float value over `records` analysed records:
  sqrt(records) * u (at least u)."""
  return math.sqrt(max(1, int(records))) * unit_roundoff(bits)


def _check(where, value):
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    raise UsageError(f"{where} must be a number, got {value!r}")
  value = float(value)
  if math.isnan(value) or math.isinf(value) or value < 0:
    raise UsageError(f"{where} must be a finite number >= 0, got {value!r}")
  return value


def _as_dict(where, value):
  """A scalar or {feature: value[, default]} -> {"default": v, feature: v, ...}, validated."""
  if value is None:
    return {"default": 0.0}
  if isinstance(value, dict):
    out = {"default": _check(f"{where} default", value.get("default", 0.0))}
    for name, v in value.items():
      if name != "default":
        if not isinstance(name, str) or not name:
          raise UsageError(f"{where}: feature names must be non-empty strings, got {name!r}")
        out[name] = _check(f"{where} for {name}", v)
    return out
  return {"default": _check(where, value)}


@dataclasses.dataclass(frozen=True)
class Tolerance:
  """abs/rel per feature; `default` applies to every feature without its own entry.

  noise_records > 0: the default is the float noise tolerance of the value's dtype over that
  many analysed records (noise_tau), not default_abs / default_rel, except for the
  exact_features (fed by an analyzer that really changed), whose default is exact.
  """
  default_abs: float = 0.0
  default_rel: float = 0.0
  features: tuple = ()  # ((name, abs, rel), ...) sorted by name: hashable, picklable
  noise_records: int = 0
  exact_features: tuple = ()  # sorted names: under the noise default, compared exactly

  def for_feature(self, name, bits=32):
    """(abs, rel) of feature `name`, whose values are `bits`-bit floats."""
    for n, a, r in self.features:
      if n == name:
        return a, r
    if self.noise_records and name not in self.exact_features:
      tau = noise_tau(bits, self.noise_records)
      return tau, tau
    if self.noise_records:
      return 0.0, 0.0
    return self.default_abs, self.default_rel

  @property
  def is_noise(self):
    return self.noise_records > 0

  def with_noise(self, records):
    """This tolerance with the noise default over `records` analysed records."""
    return dataclasses.replace(self, noise_records=max(1, int(records)))

  def exact(self):
    """This tolerance with an exact default (per-feature entries kept)."""
    return dataclasses.replace(self, noise_records=0, default_abs=0.0, default_rel=0.0,
                               exact_features=())

  def with_exact(self, names):
    """This noise tolerance with the features `names` compared exactly by default."""
    return dataclasses.replace(self, exact_features=tuple(sorted(set(names))))

  def to_dict(self):
    if self.noise_records:
      default = {"abs": noise_tau(32, self.noise_records),
                 "rel": noise_tau(32, self.noise_records),
                 "noise": {"records": self.noise_records,
                           "float32": noise_tau(32, self.noise_records),
                           "float64": noise_tau(64, self.noise_records),
                           "exact_features": list(self.exact_features)}}
    else:
      default = {"abs": self.default_abs, "rel": self.default_rel}
    return {"default": default,
            "features": {n: {"abs": a, "rel": r} for n, a, r in self.features}}


def normalise(abs_tol=None, rel_tol=None):
  """A Tolerance from abs and rel, each a scalar or a per-feature dict with a `default`."""
  a = _as_dict("abs tolerance", abs_tol)
  r = _as_dict("rel tolerance", rel_tol)
  names = sorted((set(a) | set(r)) - {"default"})
  return Tolerance(a["default"], r["default"],
                   tuple((n, a.get(n, a["default"]), r.get(n, r["default"])) for n in names))


def parse_feature_spec(spec):
  """'feature=abs:rel' (or 'feature=abs') -> (feature, abs, rel|None); UsageError otherwise."""
  name, sep, values = str(spec).partition("=")
  name = name.strip()
  if not sep or not name or not values:
    raise UsageError(f"--tolerance takes feature=abs:rel, got {spec!r}")
  if name == "default":
    raise UsageError("--tolerance default=...: the default tolerance is --abs_tol / --rel_tol")
  parts = values.split(":")
  if len(parts) > 2:
    raise UsageError(f"--tolerance takes feature=abs:rel, got {spec!r}")
  try:
    nums = [float(p) for p in parts]
  except ValueError:
    raise UsageError(f"--tolerance {spec!r}: abs and rel must be numbers") from None
  a = _check(f"--tolerance {name} abs", nums[0])
  r = _check(f"--tolerance {name} rel", nums[1]) if len(nums) == 2 else None
  return name, a, r


def from_flags(abs_tol=None, rel_tol=None, specs=()):
  """The Tolerance of the diff's flags: --abs_tol, --rel_tol and repeated --tolerance specs.

  Neither --abs_tol nor --rel_tol given: the default is float noise (noise_records 1 here; the
  diff sets the analysed record count). Either given: the default is exact in the other. A
  spec without a rel part keeps the default rel (0 under the noise default). A feature named
  twice is an error.
  """
  noise = abs_tol is None and rel_tol is None
  default_abs = _check("--abs_tol", abs_tol) if abs_tol is not None else 0.0
  default_rel = _check("--rel_tol", rel_tol) if rel_tol is not None else 0.0
  abs_map, rel_map = {"default": default_abs}, {"default": default_rel}
  for spec in specs or ():
    name, a, r = parse_feature_spec(spec)
    if name in abs_map:
      raise UsageError(f"--tolerance names feature {name!r} twice")
    abs_map[name] = a
    rel_map[name] = default_rel if r is None else r
  tol = normalise(abs_map, rel_map)
  return tol.with_noise(1) if noise else tol


def check_features(tol, kinds, predicted=False):
  """UsageError unless each per-feature tolerance names a numeric feature of the logs (kinds:
  {feature: "numeric" | "categorical"}), or `prediction` where the predictions are compared
  (predicted): a typo would otherwise leave the default in force without a word."""
  for name, _, _ in tol.features:
    if name == PREDICTION and predicted:
      continue
    if name not in kinds:
      raise UsageError(f"--tolerance names feature {name!r}, which the logs lack "
                       f"(features: {', '.join(sorted(kinds)) or 'none'})")
    if kinds[name] != "numeric":
      raise UsageError(f"--tolerance {name}: a {kinds[name]} feature has no tolerance "
                       "(any difference is a mismatch)")
