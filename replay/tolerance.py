"""Numeric tolerances of the replay diff: one validated structure, per feature with a default.

A transformed numeric value pair (offline o, production p) is within tolerance when
  |p - o| <= abs + rel * |o|            (numpy.isclose's rule, the offline value as reference)
Each of `abs` and `rel` may be given as a scalar (every feature) or as a dict
{feature: value, "default": value}, as datacompy's validate_tolerance_parameter takes them;
both normalise to one `Tolerance`: a default (abs, rel) and per-feature overrides. Negative,
NaN or infinite values are refused (UsageError), so a typo cannot silently widen a threshold.
Categorical features have no tolerance: any difference is a mismatch.
"""
import dataclasses
import math

from transforms.spec.errors import UsageError

__all__ = ["Tolerance", "normalise", "from_flags", "parse_feature_spec"]


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
  """abs/rel per feature; `default` applies to every feature without its own entry."""
  default_abs: float = 0.0
  default_rel: float = 0.0
  features: tuple = ()  # ((name, abs, rel), ...) sorted by name: hashable, picklable

  def for_feature(self, name):
    for n, a, r in self.features:
      if n == name:
        return a, r
    return self.default_abs, self.default_rel

  def to_dict(self):
    return {"default": {"abs": self.default_abs, "rel": self.default_rel},
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

  A spec without a rel part keeps the default rel. A feature named twice is an error.
  """
  default_abs = _check("--abs_tol", abs_tol) if abs_tol is not None else 0.0
  default_rel = _check("--rel_tol", rel_tol) if rel_tol is not None else 0.0
  abs_map, rel_map = {"default": default_abs}, {"default": default_rel}
  for spec in specs or ():
    name, a, r = parse_feature_spec(spec)
    if name in abs_map:
      raise UsageError(f"--tolerance names feature {name!r} twice")
    abs_map[name] = a
    rel_map[name] = default_rel if r is None else r
  return normalise(abs_map, rel_map)
