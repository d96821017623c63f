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
and one optional section:
  aggregate_windows: {aggregate name: window fields} overriding a windowed aggregate's window
                  (its own, or the profile's when it declares none) field by field: how a
                  production window offset is injected (aggregate_window)

A window (WINDOW_FIELDS; the profile's own has no zone) is type fixed|sliding, size_seconds,
period_seconds (sliding: size is a multiple of it; fixed: = size, may be left out),
offset_seconds (< period; default 0) and zone: null for windows on Unix seconds, or an IANA
zone for calendar windows on that zone's wall-clock time (size 86400 is the local day, 23 or 25
hours long across a DST change).

Watermark rule (batch): the watermark is the largest event time in the run's input. A record
is late, and dropped at the `window` stage, when its window's end + allowed_lateness_seconds is
at or before the watermark -- what a streaming job started at the end of the input would drop.
"""
import dataclasses
import math

import yaml

from transforms.spec.errors import load_yaml, yaml_problem

__all__ = ["Profile", "ProfileError", "load_profile", "parse_profile", "WINDOW_FIELDS",
           "parse_window", "aggregate_window"]

WINDOW_FIELDS = ("type", "size_seconds", "period_seconds", "offset_seconds", "zone")


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
  # ((aggregate name, ((field, value), ...)), ...): the aggregate_windows section, sorted
  aggregate_windows: tuple = ()

  def own_window(self):
    """The profile's window as a WINDOW_FIELDS mapping (no zone)."""
    return {"type": self.window_type, "size_seconds": self.window_size,
            "period_seconds": self.window_period, "offset_seconds": self.window_offset,
            "zone": None}

  def to_dict(self):
    """The profile in its YAML shape (what run metadata records; aggregate_windows when it has
    any)."""
    extra = {"aggregate_windows": {n: dict(f) for n, f in self.aggregate_windows}} \
        if self.aggregate_windows else {}
    return {**extra,
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


def parse_window(doc, where, base=None):
  """A window (WINDOW_FIELDS, all given) from mapping `doc`: an aggregate's own window, or with
  `base` (a window) a profile's override of it, which gives only the fields it changes.
  ProfileError, naming `where` and the field, when it is not a window."""
  if not isinstance(doc, dict):
    raise ProfileError(f"{where} must be a mapping of {', '.join(WINDOW_FIELDS)}, got {doc!r}")
  unknown = sorted(set(doc) - set(WINDOW_FIELDS), key=str)
  if unknown:
    raise ProfileError(f"{where}: unknown field(s) {', '.join(map(str, unknown))} (fields: "
                       f"{', '.join(WINDOW_FIELDS)})")
  w = dict(base or {"offset_seconds": 0, "zone": None}, **doc)
  missing = [f for f in ("type", "size_seconds") if f not in w]
  if missing:
    raise ProfileError(f"{where}: missing field(s) {', '.join(missing)}")
  kind = _choice(where, "type", w["type"], ("fixed", "sliding"))
  size = _int(where, "size_seconds", w["size_seconds"], 1)
  if kind == "fixed" and "period_seconds" not in doc:
    w["period_seconds"] = size  # a fixed window's period is its size
  period = _int(where, "period_seconds", w.get("period_seconds"), 1)
  if kind == "fixed" and period != size:
    raise ProfileError(f"{where}.period_seconds must equal size_seconds for fixed windows")
  if kind == "sliding" and size % period:
    raise ProfileError(f"{where}.size_seconds must be a multiple of period_seconds")
  offset = _int(where, "offset_seconds", w["offset_seconds"], 0)
  if offset >= period:
    raise ProfileError(f"{where}.offset_seconds must be < period_seconds")
  zone = w["zone"]
  if zone is not None:
    from transforms.spec import event_time  # pyarrow: only a zoned window pays for it here
    try:
      event_time.check_declaration("t", "seconds", zone)
    except event_time.EventTimeError:
      raise ProfileError(f"{where}: zone {zone!r} is not a known time zone") from None
  return {"type": kind, "size_seconds": size, "period_seconds": period,
          "offset_seconds": offset, "zone": zone}


def aggregate_window(agg, profile):
  """The window an aggregate is counted in, as WINDOW_FIELDS: its own ("window", checked by
  parse_window) or, when it declares none, the profile's; then the profile's aggregate_windows
  override of it. None when that is the profile's own window (the records' window)."""
  own = agg.get("window")
  window = parse_window(own, f"aggregate {agg['name']!r}: window") if own else \
      profile.own_window()
  override = dict(profile.aggregate_windows).get(agg["name"])
  if override:
    window = parse_window(dict(override), f"aggregate_windows.{agg['name']}", window)
  return None if window == profile.own_window() else window


def parse_profile(doc):
  """A Profile from a parsed YAML mapping; ProfileError names the first bad field."""
  if not isinstance(doc, dict):
    raise ProfileError("a profile is a mapping with sections " + ", ".join(_SECTIONS))
  overrides = doc.get("aggregate_windows") or {}
  doc = {k: v for k, v in doc.items() if k != "aggregate_windows"}
  if not isinstance(overrides, dict) or not all(
      isinstance(n, str) and isinstance(f, dict) and f for n, f in overrides.items()):
    raise ProfileError("aggregate_windows must map aggregate names to window fields "
                       f"({', '.join(WINDOW_FIELDS)})")
  for name, fields in overrides.items():  # each field checked where it can be alone
    unknown = sorted(set(fields) - set(WINDOW_FIELDS), key=str)
    if unknown:
      raise ProfileError(f"aggregate_windows.{name}: unknown field(s) "
                         f"{', '.join(map(str, unknown))} (fields: {', '.join(WINDOW_FIELDS)})")
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
  own = parse_window({k: v for k, v in w.items() if k != "allowed_lateness_seconds"},
                     "windowing")  # one window rule for the profile's and an aggregate's
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
      window_type=own["type"], window_size=own["size_seconds"],
      window_period=own["period_seconds"], window_offset=own["offset_seconds"],
      allowed_lateness=lateness,
      num_shards=_int("sharding", "num_shards", sh["num_shards"], 1, maximum=MAX_SHARDS),
      hash_seed=_int("sharding", "hash_seed", sh["hash_seed"], 0, maximum=MAX_SEED),
      serialization_format=_choice("serialization", "format", se["format"],
                                   ("tfrecord", "parquet")),
      float_dtype=_choice("serialization", "float_dtype", se["float_dtype"],
                          ("float32", "float64")),
      sampling_seed=_int("sampling", "seed", sa["seed"], 0, maximum=MAX_SEED),
      sampling_fraction=float(fraction),
      aggregate_windows=tuple((n, tuple(sorted(f.items()))) for n, f in sorted(
          overrides.items())))


def load_profile(text):
  """A Profile from YAML text (safe_load: no Python objects)."""
  try:
    doc = load_yaml(text)
  except (yaml.YAMLError, RecursionError) as e:
    raise ProfileError(f"not valid YAML: {yaml_problem(e)}") from None
  return parse_profile(doc)
