"""Profiles: the shipped ones load and agree; every bad field is named."""
import os
import re

import pytest
import yaml

from tests.conftest import ROOT
from transforms.spec import profile


def _shipped(name):
  with open(os.path.join(ROOT, "profiles", name), encoding="utf-8") as f:
    return f.read()


def test_shipped_profiles_load_and_are_equal():
  offline = profile.load_profile(_shipped("offline.yaml"))
  production = profile.load_profile(_shipped("production.yaml"))
  assert offline == production
  assert profile.parse_profile(offline.to_dict()) == offline


def _with(path, value):
  doc = yaml.safe_load(_shipped("offline.yaml"))
  section, field = path.split(".")
  if value is KeyError:
    del doc[section][field]
  else:
    doc[section][field] = value
  return doc


@pytest.mark.parametrize("path,value,message", [
    ("windowing.type", "session", "windowing.type must be one of fixed, sliding"),
    ("windowing.size_seconds", 0, "windowing.size_seconds must be >= 1"),
    ("windowing.size_seconds", "1h", "windowing.size_seconds must be an integer"),
    ("windowing.period_seconds", 60, "period_seconds must equal size_seconds"),
    ("windowing.offset_seconds", 3600, "offset_seconds must be < period_seconds"),
    ("windowing.allowed_lateness_seconds", -1, "allowed_lateness_seconds must be >= 0"),
    ("sharding.num_shards", 0, "sharding.num_shards must be >= 1"),
    ("sharding.hash_seed", True, "sharding.hash_seed must be an integer"),
    ("serialization.format", "csv", "serialization.format must be one of"),
    ("serialization.float_dtype", "float16", "float_dtype must be one of"),
    ("serialization.float_dtype", "float64", "tfrecord (tf.Example) holds float32 only"),
    ("sampling.fraction", 0, "sampling.fraction must be in (0, 1]"),
    ("sampling.fraction", float("nan"), "sampling.fraction must be in (0, 1]"),
    ("sampling.seed", KeyError, "sampling: missing field(s) seed"),
    ("sampling.extra", 1, "sampling: unknown field(s) extra"),
    # Range: nothing wraps or overflows where it is used.
    ("sharding.num_shards", 1180591620717411303424, "sharding.num_shards must be <= " +
     str(2**63 - 1)),
    ("sharding.hash_seed", 2**64, f"sharding.hash_seed must be <= {2**64 - 1}"),
    ("sampling.seed", 2**64, f"sampling.seed must be <= {2**64 - 1}"),
    ("windowing.size_seconds", 10**30, f"windowing.size_seconds must be <= {2**60}"),
    ("windowing.allowed_lateness_seconds", 10**30,
     f"windowing.allowed_lateness_seconds must be <= {2**60}"),
])
def test_bad_fields_are_named(path, value, message):
  with pytest.raises(profile.ProfileError, match=re.escape(message)):
    profile.parse_profile(_with(path, value))


def test_yaml_tags_are_not_executed():
  with pytest.raises(profile.ProfileError, match="not valid YAML"):
    profile.load_profile("windowing: !!python/object/apply:os.system ['true']")


def test_sliding_windows_need_a_period_dividing_the_size():
  doc = _with("windowing.type", "sliding")
  doc["windowing"]["period_seconds"] = 1800
  assert profile.parse_profile(doc).window_period == 1800
  doc["windowing"]["period_seconds"] = 1700
  with pytest.raises(profile.ProfileError, match="multiple of period_seconds"):
    profile.parse_profile(doc)
