"""Run profiles: everything that may legitimately differ between offline and production runs.

A profile is a YAML file (safe-loaded) with four sections; every field is required, unknown
fields are errors, and `load_profile` says which field is wrong and why. Integers are
range-checked: seconds at most 2**60, num_shards at most 2**63 - 1, seeds at most 2**64 - 1.

  windowing:      type fixed|sliding, size_seconds, period_seconds (sliding only; fixed: = size),
                  offset_seconds, allowed_lateness_seconds (null = unlimited)
  sharding:       num_shards, hash_seed
  serialization:  format tfrecord|parquet, float_dtype float32|float64
  sampling:       seed, fraction (0 < fraction <= 1; a record is kept when
                  XXH64(key, seed) / 2^64 < fraction, so both sides keep the same keys)

Watermark rule (batch): the watermark is the largest event time in the run's input. A record
is late, and dropped at the `window` stage, when its window's end + allowed_lateness_seconds is
at or before the watermark -- what a streaming job started at the end of the input would drop.
"""
import dataclasses
import math

import yaml

from transforms.spec.errors import load_yaml, yaml_problem

__all__ = ["Profile", "ProfileError", "load_profile", "parse_profile"]


class ProfileError(ValueError):
  """A profile that cannot be used; the message names the field."""


@dataclasses.dataclass(frozen=True)
class Profile:
  window_type: str
  window_size: int
  window_period: int
  window_offset: int
  allowed_lateness: int | None
  num_shards: int
  hash_seed: int
  serialization_format: str
  float_dtype: str
  sampling_seed: int
  sampling_fraction: float

  def to_dict(self):
    """The profile in its YAML shape (what run metadata records)."""
    return {
        "windowing": {"type": self.window_type, "size_seconds": self.window_size,
                      "period_seconds": self.window_period,
                      "offset_seconds": self.window_offset,
                      "allowed_lateness_seconds": self.allowed_lateness},
        "sharding": {"num_shards": self.num_shards, "hash_seed": self.hash_seed},
        "serialization": {"format": self.serialization_format,
                          "float_dtype": self.float_dtype},
        "sampling": {"seed": self.sampling_seed, "fraction": self.sampling_fraction},
    }


_SECTIONS = {
    "windowing": {"type", "size_seconds", "period_seconds", "offset_seconds",
                  "allowed_lateness_seconds"},
    "sharding": {"num_shards", "hash_seed"},
    "serialization": {"format", "float_dtype"},
    "sampling": {"seed", "fraction"},
}


# Upper bounds, so that no value wraps or overflows where it is used: window size, period,
# offset and lateness are added to int64 event seconds (three of them below 2**62 leave room
# for any event time below 2**62, year 1.5e11); shard ids are int64 columns; seeds are XXH64's
# uint64 (2**64 would silently be seed 0).
MAX_SECONDS, MAX_SHARDS, MAX_SEED = 2**60, 2**63 - 1, 2**64 - 1


def _int(section, name, value, minimum=None, nullable=False, maximum=MAX_SECONDS):
  where = f"{section}.{name}"
  if value is None and nullable:
    return None
  if isinstance(value, bool) or not isinstance(value, int):
    raise ProfileError(f"{where} must be an integer, got {value!r}")
  if minimum is not None and value < minimum:
    raise ProfileError(f"{where} must be >= {minimum}, got {value}")
  if value > maximum:
    raise ProfileError(f"{where} must be <= {maximum}, got {value}")
  return value


def _choice(section, name, value, choices):
  if value not in choices:
    raise ProfileError(f"{section}.{name} must be one of {', '.join(choices)}, got {value!r}")
  return value


def parse_profile(doc):
  """A Profile from a parsed YAML mapping; ProfileError names the first bad field."""
  if not isinstance(doc, dict):
    raise ProfileError("a profile is a mapping with sections " + ", ".join(_SECTIONS))
  unknown = sorted(set(doc) - set(_SECTIONS))
  if unknown:
    raise ProfileError(f"unknown section(s): {', '.join(map(str, unknown))}")
  for section, fields in _SECTIONS.items():
    body = doc.get(section)
    if not isinstance(body, dict):
      raise ProfileError(f"section {section!r} is missing or not a mapping")
    missing = sorted(fields - set(body))
    extra = sorted(set(body) - fields)
    if missing:
      raise ProfileError(f"{section}: missing field(s) {', '.join(missing)}")
    if extra:
      raise ProfileError(f"{section}: unknown field(s) {', '.join(map(str, extra))}")
  w, sh, se, sa = (doc[s] for s in _SECTIONS)
  window_type = _choice("windowing", "type", w["type"], ("fixed", "sliding"))
  size = _int("windowing", "size_seconds", w["size_seconds"], 1)
  period = _int("windowing", "period_seconds", w["period_seconds"], 1)
  if window_type == "fixed" and period != size:
    raise ProfileError("windowing.period_seconds must equal size_seconds for fixed windows")
  if window_type == "sliding" and size % period:
    raise ProfileError("windowing.size_seconds must be a multiple of period_seconds")
  offset = _int("windowing", "offset_seconds", w["offset_seconds"], 0)
  if offset >= period:
    raise ProfileError("windowing.offset_seconds must be < period_seconds")
  lateness = _int("windowing", "allowed_lateness_seconds", w["allowed_lateness_seconds"], 0,
                  nullable=True)
  fraction = sa["fraction"]
  if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) \
      or not math.isfinite(fraction) or not 0 < fraction <= 1:
    raise ProfileError(f"sampling.fraction must be in (0, 1], got {fraction!r}")
  if se.get("format") == "tfrecord" and se.get("float_dtype") == "float64":
    raise ProfileError("serialization: tfrecord (tf.Example) holds float32 only; "
                       "use float_dtype float32 or format parquet")
  return Profile(
      window_type=window_type, window_size=size, window_period=period, window_offset=offset,
      allowed_lateness=lateness,
      num_shards=_int("sharding", "num_shards", sh["num_shards"], 1, maximum=MAX_SHARDS),
      hash_seed=_int("sharding", "hash_seed", sh["hash_seed"], 0, maximum=MAX_SEED),
      serialization_format=_choice("serialization", "format", se["format"],
                                   ("tfrecord", "parquet")),
      float_dtype=_choice("serialization", "float_dtype", se["float_dtype"],
                          ("float32", "float64")),
      sampling_seed=_int("sampling", "seed", sa["seed"], 0, maximum=MAX_SEED),
      sampling_fraction=float(fraction))


def load_profile(text):
  """A Profile from YAML text (safe_load: no Python objects)."""
  try:
    doc = load_yaml(text)
  except (yaml.YAMLError, RecursionError) as e:
    raise ProfileError(f"not valid YAML: {yaml_problem(e)}") from None
  return parse_profile(doc)
