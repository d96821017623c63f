"""Pure kernels of the replay diff on small hand-built feature-log tables: compare, tolerance,
drift and run-metadata causes. Expected values are worked out by hand in each test."""
import copy
import json
import math

import numpy as np
import pyarrow as pa
import pytest
import xxhash

from pipelines.common import UsageError
from replay.diff import compare, drift, kernels, runs, summary, tolerance
from replay.diff.causes import suspected_causes
from replay.diff.compare import Context
from replay.report import report_model
from transforms.spec import fingerprint, run_metadata, stages

STAGE_FPS = ("raw", "parse", "window", "shard", "serialize")


def log(rows, types=None):
  """A feature-log table. Each row: {key, dropped (stage or None), fp: {stage: int} (default 1
  per stage; a dropped row has only raw/parse), values: {feature: value}}; fp__F and
  fp_transform are the real fingerprints of the values, as pipelines.features writes them."""
  types = types or {"x": pa.float64(), "c": pa.int64()}
  names = sorted(types)
  cols = {"key": pa.array([r["key"] for r in rows], pa.string()),
          "dropped_stage": pa.array([r.get("dropped") for r in rows], pa.string()),
          "drop_reason": pa.array([r.get("dropped") and "late" for r in rows], pa.string())}
  for s in STAGE_FPS:
    cols[f"fp_{s}"] = pa.array(
        [None if r.get("dropped") and s not in ("raw", "parse") else r.get("fp", {}).get(s, 1)
         for r in rows], pa.uint64())
  kept = [i for i, r in enumerate(rows) if not r.get("dropped") and r.get("values") is not None]
  values = pa.table({n: pa.array([rows[i]["values"].get(n) for i in kept], types[n])
                     for n in names}) if kept else None
  full = {}
  for n in names:
    fp = [None] * len(rows)
    val = [None] * len(rows)
    if kept:
      f = fingerprint.fingerprint_batch(values, [n])
      for j, i in enumerate(kept):
        fp[i], val[i] = int(f[j]), rows[i]["values"].get(n)
    full[n] = (fp, val)
  whole = [None] * len(rows)
  if kept:
    fps = fingerprint.fingerprint_batch(values)
    for j, i in enumerate(kept):
      whole[i] = int(fps[j])
  cols["fp_transform"] = pa.array(whole, pa.uint64())
  for n in names:
    cols[f"fp__{n}"] = pa.array(full[n][0], pa.uint64())
    cols[f"value__{n}"] = pa.array(full[n][1], types[n])
  return pa.table(cols)


def row(key, x=1.0, c=3, dropped=None, **fp):
  return {"key": key, "dropped": dropped, "fp": fp, "values": {"x": x, "c": c}}


BASE = [row("a"), row("b", 2.0, 4), row("c", 3.0, 5), row("d", 4.0, 6)]


def diff(off_rows, prod_rows, types=None, **ctx):
  return compare.compare_bucket(log(off_rows, types), log(prod_rows, types), Context(**ctx))


def nonzero(d):
  return {k: v for k, v in d.items() if v}


# --------------------------------------------------------------------------- compare_bucket
def test_identical_tables_are_identical():
  p = diff(BASE, BASE)
  assert nonzero(p.records) == {"matched_keys": 4, "identical": 4}
  assert nonzero(p.first_stage) == {}
  # predict is compared only where both logs hold it (a model ran): here neither does
  assert all(p.stages[s] == [4, 0] for s in p.stages if s != "predict")
  assert p.stages["predict"] == [0, 0]
  assert p.features["x"]["match"] == 4 and p.features["x"]["kind"] == "numeric"
  assert p.features["c"]["kind"] == "categorical"


@pytest.mark.parametrize("stage", STAGE_FPS)
def test_each_record_stage_can_be_the_first_divergent(stage):
  later = STAGE_FPS[STAGE_FPS.index(stage):]
  prod = [row("a", **{s: 99 for s in later})] + BASE[1:]
  p = diff(BASE, prod)
  assert nonzero(p.first_stage) == {stage: 1}
  # The stage differs, the transformed features agree: latent, not reaching the model.
  assert nonzero(p.records) == {"matched_keys": 4, "latent": 1, "identical": 3}
  assert nonzero(p.reaches_model) == {}
  for s in STAGE_FPS:
    assert p.stages[s] == ([3, 1] if s in later else [4, 0])
  assert p.samples["latent"][0][2] == {"key": "a", "first_divergent_stage": stage,
                                       "features": {}}
  assert p.samples["divergent"] == []
  # The same stage difference with a transformed value that differs: divergent, same stage.
  prod = [row("a", c=8, **{s: 99 for s in later})] + BASE[1:]
  p = diff(BASE, prod)
  assert nonzero(p.first_stage) == {stage: 1} and nonzero(p.reaches_model) == {stage: 1}
  assert nonzero(p.records) == {"matched_keys": 4, "divergent": 1, "identical": 3}
  assert p.samples["divergent"][0][2] == {"key": "a", "first_divergent_stage": stage,
                                          "features": {"c": [3, 8]}}


def test_transform_only_divergence_is_transform_or_analyze():
  prod = [row("a", c=7)] + BASE[1:]
  p = diff(BASE, prod)
  assert nonzero(p.first_stage) == {"transform": 1}
  assert p.stages["transform"] == [3, 1] and p.stages["analyze"] == [4, 0]
  assert p.features["c"]["mismatch"] == 1 and p.features["x"]["match"] == 4
  assert p.samples["divergent"][0][2]["features"] == {"c": [3, 7]}
  p = diff(BASE, prod, transform_stage="analyze", analyze_match=False)
  assert nonzero(p.first_stage) == {"analyze": 1}
  assert p.stages["analyze"] == [0, 4]


def test_numeric_noise_within_tolerance_or_not():
  prod = [row("a", x=1.0001), row("b", 2.0, 4), row("c", 3.0003, 5), row("d", 4.0, 6)]
  loose = diff(BASE, prod, tolerance=tolerance.normalise(rel_tol=1e-3))
  assert nonzero(loose.records) == {"matched_keys": 4, "identical": 2, "noise": 2}
  assert loose.features["x"]["within_tolerance"] == 2 and loose.features["x"]["mismatch"] == 0
  # |delta| = 1e-4 and 3e-4: max 3e-4; mean over the 4 records compared: 4e-4 / 4.
  f = report_model.FeatureSummary.from_totals(loose.features["x"])
  assert f.max_abs_delta == pytest.approx(3e-4) and f.mean_abs_delta == pytest.approx(1e-4)
  tight = diff(BASE, prod, tolerance=tolerance.normalise(rel_tol=1e-5))
  assert nonzero(tight.first_stage) == {"transform": 2}
  assert tight.features["x"]["mismatch"] == 2
  # Absolute tolerance: 2e-4 admits a's 1e-4 only.
  mixed = diff(BASE, prod, tolerance=tolerance.normalise(abs_tol=2e-4))
  assert (mixed.records["noise"], mixed.records["divergent"]) == (1, 1)


def test_per_feature_tolerance_applies_to_its_feature_only():
  types = {"x": pa.float64(), "y": pa.float64()}
  off = [{"key": "a", "values": {"x": 1.0, "y": 1.0}},
         {"key": "b", "values": {"x": 2.0, "y": 2.0}}]
  prod = [{"key": "a", "values": {"x": 1.01, "y": 1.0}},
          {"key": "b", "values": {"x": 2.0, "y": 2.01}}]
  tol = tolerance.from_flags(specs=["x=0.1:0"])
  p = diff(off, prod, types, tolerance=tol)
  assert p.features["x"]["within_tolerance"] == 1 and p.features["y"]["mismatch"] == 1
  assert (p.records["noise"], p.records["divergent"]) == (1, 1)
  assert p.samples["divergent"][0][2]["key"] == "b"


def test_a_categorical_change_beside_numeric_noise_is_divergent():
  prod = [row("a", x=1.0000001, c=9)] + BASE[1:]
  p = diff(BASE, prod, tolerance=tolerance.normalise(rel_tol=1e-3))
  assert p.records["divergent"] == 1 and p.records["noise"] == 0
  assert p.features["x"]["within_tolerance"] == 1 and p.features["c"]["mismatch"] == 1


def test_one_side_only_with_and_without_drop_reason_and_dropped_both():
  off = [row("a"), row("b"), row("c", dropped="window"), row("d"), row("e", dropped="window"),
         row("f", dropped="window")]
  prod = [row("a"), row("b", dropped="window"), row("c"), row("e", dropped="window"),
          row("g"), row("h", dropped="window")]
  p = diff(off, prod)
  # a matched; b offline only (production dropped it at window); d offline only (absent);
  # c production only (offline dropped it); g production only (absent); e dropped on both;
  # f dropped offline and absent in production, h the reverse: kept on neither side.
  assert nonzero(p.records) == {"matched_keys": 1, "identical": 1, "offline_only": 2,
                                "production_only": 2, "dropped_both": 3}
  assert p.one_side == {"offline": {"window": 1, "absent": 1},
                        "production": {"window": 1, "absent": 1}}
  assert sorted(e[2]["key"] + ":" + e[2]["reason"] for e in p.samples["offline_only"]) == \
      ["b:window", "d:absent"]
  assert sorted(e[2]["key"] + ":" + e[2]["reason"] for e in p.samples["production_only"]) == \
      ["c:window", "g:absent"]


def test_a_side_without_the_bucket_makes_every_kept_key_one_side_only():
  p = compare.compare_bucket(log(BASE), None, Context())
  assert p.records["offline_only"] == 4 and p.one_side["offline"] == {"absent": 4}
  p = compare.compare_bucket(None, log(BASE), Context())
  assert p.records["production_only"] == 4


def test_keys_of_another_string_type_still_join():
  prod = log(BASE)
  prod = prod.set_column(0, "key", prod.column("key").cast(pa.large_string()))
  p = compare.compare_bucket(log(BASE), prod, Context())
  assert p.records["identical"] == 4 and p.records["offline_only"] == 0


def test_duplicate_keys_are_excluded_from_both_sides_and_their_rows_counted():
  off = BASE + [row("a", x=5.0)]
  prod = BASE + [row("b"), row("b")]
  p = diff(off, prod)
  # a is duplicated offline, b in production: both keys leave both sides, so production's
  # single a and offline's single b are neither one-side-only nor in the divergent fraction.
  assert nonzero(p.records) == {"matched_keys": 2, "identical": 2,
                                "duplicate_keys_offline": 3, "duplicate_keys_production": 4}
  assert p.one_side == {"offline": {}, "production": {}}
  # Every row is accounted for: 5 offline rows (a, a, b, c, d), 6 production (a, b, b, b, c, d).
  r = p.records
  assert r["matched_keys"] + r["offline_only"] + r["duplicate_keys_offline"] == len(off)
  assert r["matched_keys"] + r["production_only"] + r["duplicate_keys_production"] == len(prod)
  assert report_model.divergent_fraction(r) == 0.0
  assert sorted((e[2]["side"], e[2]["key"]) for e in p.samples["duplicate_keys"]) == \
      [("offline", "a"), ("production", "b")]


def test_null_values_and_missing_transform_rows():
  types = {"x": pa.float64()}
  off = [{"key": "a", "values": {"x": None}}, {"key": "b", "values": {"x": 2.0}},
         {"key": "c", "values": {"x": None}}, {"key": "d", "values": None}]
  prod = [{"key": "a", "values": {"x": None}}, {"key": "b", "values": {"x": None}},
          {"key": "c", "values": None}, {"key": "d", "values": {"x": 1.0}}]
  p = diff(off, prod, types, tolerance=tolerance.normalise(abs_tol=10.0))
  f = p.features["x"]
  # a: null == null; b: value vs null, never within tolerance; c / d: no transformed row on
  # one side (fp__x null there) -> one side only for the feature.
  assert (f["match"], f["mismatch"], f["within_tolerance"]) == (1, 1, 0)
  assert (f["offline_only"], f["production_only"]) == (1, 1)
  assert p.records["divergent"] == 3 and p.records["identical"] == 1


def test_list_features():
  types = {"v": pa.list_(pa.float64())}
  off = [{"key": k, "values": {"v": v}} for k, v in
         [("a", [1.0, 2.0]), ("b", [1.0, 2.0]), ("c", [1.0, None]), ("d", [1.0])]]
  prod = [{"key": k, "values": {"v": v}} for k, v in
          [("a", [1.0, 2.001]), ("b", [1.0, 2.0, 3.0]), ("c", [1.001, None]), ("d", [5.0])]]
  p = diff(off, prod, types, tolerance=tolerance.normalise(abs_tol=0.01))
  f = p.features["v"]
  assert f["kind"] == "numeric"
  # a, c: same length, elements within 0.01 (c's nulls pair up); b: lengths differ; d: 4 away.
  assert (f["within_tolerance"], f["mismatch"]) == (2, 2)
  assert f["delta_max"] == pytest.approx(4.0)
  assert p.records["noise"] == 2 and p.records["divergent"] == 2
  sample = {e[2]["key"]: e[2]["features"]["v"] for e in p.samples["divergent"]}
  assert sample == {"b": [[1.0, 2.0], [1.0, 2.0, 3.0]], "d": [[1.0], [5.0]]}


def test_nan_pairs_and_string_features():
  types = {"x": pa.float64(), "s": pa.string()}
  off = [{"key": "a", "values": {"x": float("nan"), "s": "u"}},
         {"key": "b", "values": {"x": 1.0, "s": "u"}}]
  prod = [{"key": "a", "values": {"x": float("nan"), "s": "v"}},
          {"key": "b", "values": {"x": float("nan"), "s": "u"}}]
  p = diff(off, prod, types, tolerance=tolerance.normalise(abs_tol=1.0))
  assert p.features["x"]["match"] == 1 and p.features["x"]["mismatch"] == 1
  assert p.features["s"] == {**p.features["s"], "kind": "categorical", "mismatch": 1, "match": 1}
  assert {e[2]["key"]: e[2]["features"] for e in p.samples["divergent"]}["b"] == \
      {"x": [1.0, "nan"]}


def test_samples_are_the_smallest_key_hashes_and_merge_keeps_the_smallest():
  keys = [f"k{i:03d}" for i in range(40)]
  off = [row(k) for k in keys]
  prod = [row(k, window=9) for k in keys]
  a = diff(off[:20], prod[:20], samples=5)
  b = diff(off[20:], prod[20:], samples=5)
  expected = sorted(keys, key=lambda k: xxhash.xxh64_intdigest(k.encode(), seed=0))[:5]
  merged = compare.merge(a, b)
  assert [e[1] for e in merged.samples["latent"]] == expected
  assert merged.records == compare.merge(b, a).records
  assert merged.records["latent"] == 40 and merged.first_stage["window"] == 40
  assert merged.buckets == 2


def test_merge_adds_every_counter_and_histogram():
  a = diff(BASE, [row("a", x=1.5)] + BASE[1:])
  b = diff(BASE[:2], BASE[:1])
  m = compare.merge(a, b)
  assert m.records["matched_keys"] == 5 and m.records["offline_only"] == 1
  assert m.features["x"]["match"] == a.features["x"]["match"] + b.features["x"]["match"]
  assert m.stages["transform"] == [a.stages["transform"][0] + b.stages["transform"][0], 1]
  assert int(m.histograms["offline"]["x"]["counts"].sum()) == 6


def test_equal_bucket_counts_from_metadata_alone():
  entry = {"bucket": 0, "rows": 10, "dropped": 3, "digests": {"transform": "7:00:00"}}
  p = compare.equal_bucket(entry, (("c", "categorical"), ("x", "numeric")),
                           Context(analyze_match=False))
  assert nonzero(p.records) == {"matched_keys": 7, "identical": 7, "dropped_both": 3}
  assert p.stages["raw"] == [7, 0] and p.stages["analyze"] == [0, 7]
  assert p.features["x"]["match"] == 7 and p.buckets == 0


# --------------------------------------------------------------------------- tolerance
def test_tolerance_scalar_and_dict_normalise_to_one_structure():
  t = tolerance.normalise(0.5, {"default": 0.1, "x": 0.2})
  assert t.to_dict() == {"default": {"abs": 0.5, "rel": 0.1},
                         "features": {"x": {"abs": 0.5, "rel": 0.2}}}
  assert t.for_feature("x") == (0.5, 0.2) and t.for_feature("other") == (0.5, 0.1)
  t = tolerance.from_flags(0.01, None, ["a=0.5:0.25", "b=2"])
  assert t.for_feature("a") == (0.5, 0.25) and t.for_feature("b") == (2.0, 0.0)
  assert t.for_feature("z") == (0.01, 0.0)


@pytest.mark.parametrize("call", [
    lambda: tolerance.normalise(-1.0), lambda: tolerance.normalise(None, float("nan")),
    lambda: tolerance.normalise({"x": -0.1}), lambda: tolerance.normalise("0.1"),
    lambda: tolerance.from_flags(abs_tol=-0.5), lambda: tolerance.from_flags(specs=["x"]),
    lambda: tolerance.from_flags(specs=["x=a:b"]), lambda: tolerance.from_flags(specs=["x=-1:0"]),
    lambda: tolerance.from_flags(specs=["x=1:2:3"]),
    lambda: tolerance.from_flags(specs=["x=1:0", "x=2:0"]),
    lambda: tolerance.from_flags(specs=["default=0.1"]),
    lambda: tolerance.normalise(float("inf"))])
def test_bad_tolerances_are_usage_errors(call):
  with pytest.raises(UsageError):
    call()


# --------------------------------------------------------------------------- drift
def test_distances_against_hand_computed_values():
  assert drift.linf([2, 1, 0], [0, 2, 1]) == pytest.approx(2 / 3)
  assert drift.jensen_shannon([1, 0], [0, 1]) == 1.0
  assert drift.jensen_shannon([5, 5], [1, 1]) == 0.0
  # P = (.75, .25), Q = (.25, .75), M = (.5, .5): KL(P||M) = .75 log2 1.5 + .25 log2 .5.
  kl = 0.75 * math.log2(1.5) + 0.25 * math.log2(0.5)
  assert drift.jensen_shannon([3, 1], [1, 3]) == pytest.approx(kl)
  assert drift.psi([3, 1], [1, 3]) == pytest.approx(2 * 0.5 * math.log(3))
  # A bin empty on one side: its proportion is raised to epsilon.
  eps = drift.PSI_EPSILON
  assert drift.psi([1, 0], [1, 1]) == pytest.approx(
      (0.5 - 1) * math.log(0.5) + (0.5 - eps) * math.log(0.5 / eps))


def test_categorical_drift_entry():
  a = drift.histogram(pa.array(["a", "a", "b", None]))
  b = drift.histogram(pa.array(["b", "b", "c"]))
  d = drift.compare(a, b)
  assert d["kind"] == "categorical" and d["linf"] == pytest.approx(2 / 3)
  assert d["histogram"] == {"bins": ["a", "b", "c"], "offline": [2, 1, 0], "production": [0, 2, 1]}


def test_numeric_histograms_merge_exactly_and_share_bins():
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=500), rng.normal(1.0, size=400)
  whole = drift.histogram(pa.array(x))
  parts = drift.merge(drift.histogram(pa.array(x[:123])), drift.histogram(pa.array(x[123:])))
  assert np.array_equal(whole["index"], parts["index"])
  assert np.array_equal(whole["counts"], parts["counts"])
  assert (parts["min"], parts["max"]) == (x.min(), x.max())
  d = drift.compare(whole, drift.histogram(pa.array(y)))
  h = d["histogram"]
  assert sum(h["offline"]) == 500 and sum(h["production"]) == 400
  assert len(h["bins"]) == len(h["offline"]) + 1 <= drift.NUM_BINS + 1
  assert h["bins"][0] == min(x.min(), y.min()) and h["bins"][-1] == max(x.max(), y.max())
  assert h["bins"] == sorted(h["bins"])
  # Every value lies in the bin its edges give it (edges fall on fine-bin boundaries).
  inner = np.searchsorted(h["bins"][1:-1], x, side="right")
  assert np.bincount(inner, minlength=len(h["offline"])).tolist() == h["offline"]
  inner = np.searchsorted(h["bins"][1:-1], y, side="right")
  assert np.bincount(inner, minlength=len(h["production"])).tolist() == h["production"]
  assert d["jensen_shannon"] == pytest.approx(
      drift.jensen_shannon(h["offline"], h["production"]))
  assert drift.compare(whole, parts)["jensen_shannon"] == 0.0


def test_numeric_nan_and_infinities_are_bins_of_their_own():
  a = drift.histogram(pa.array([1.0, float("nan"), float("inf")]))
  b = drift.histogram(pa.array([1.0, 1.0, float("-inf"), None]))
  d = drift.compare(a, b)
  h = d["histogram"]
  assert (h["nan"], h["pos_inf"], h["neg_inf"]) == ([1, 0], [1, 0], [0, 1])
  assert d["jensen_shannon"] == pytest.approx(drift.jensen_shannon([1, 1, 1, 0], [2, 0, 0, 1]))
  assert drift.compare(a, drift.histogram(pa.array([], pa.float64()))) is None


# --------------------------------------------------------------------------- metadata
def meta(**changes):
  m = {"format": run_metadata.FORMAT, "transform_module": "transforms.taxi",
       "runner": "DirectRunner",
       "profile": {"windowing": {"type": "fixed", "size_seconds": 3600, "offset_seconds": 0},
                   "sharding": {"num_shards": 4, "hash_seed": 0},
                   "serialization": {"format": "tfrecord", "float_dtype": "float32"},
                   "sampling": {"seed": 0, "fraction": 1.0}},
       "input": {"dir": "/a", "content_digest": "1:00:00", "key_columns": []},
       "schema": {"columns": [{"name": "fare", "type": "FLOAT"}], "aggregates": ["n"]},
       "versions": {"beam": "2.77.0", "tf": "2.21.0"},
       "analyze": {"fingerprint": "f1", "definition": "d1",
                   "analyzers": {"mean": {"fingerprint": "m1", "values": [1.5]}}},
       "log": {"num_buckets": 2, "seed": 24301, "rows": 3, "buckets": [
           {"bucket": 0, "rows": 2, "dropped": 0,
            "digests": dict.fromkeys(runs.DIGEST_STAGES, "2:00:00")},
           {"bucket": 1, "rows": 1, "dropped": 0,
            "digests": dict.fromkeys(runs.DIGEST_STAGES, "1:00:00")}]}}
  m = copy.deepcopy(m)
  for dotted, value in changes.items():
    *path, last = dotted.split("__")
    d = m
    for p in path:
      d = d[p]
    d[last] = value
  return m


def causes(**changes):
  return {(c["stage"], c["field"], str(c["offline"]), str(c["production"]))
          for c in suspected_causes(meta(), meta(**changes))}


def test_each_metadata_difference_names_the_stage_it_can_affect():
  assert causes() == set()
  assert causes(profile__windowing__offset_seconds=1800) == \
      {("window", "windowing.offset_seconds", "0", "1800")}
  assert causes(profile__sharding__hash_seed=7) == {("shard", "sharding.hash_seed", "0", "7")}
  assert causes(profile__sampling__fraction=0.5) == {("shard", "sampling.fraction", "1.0", "0.5")}
  assert causes(profile__serialization__float_dtype="float64") == \
      {("serialize", "serialization.float_dtype", "float32", "float64")}
  assert causes(schema__columns=[{"name": "fare", "type": "BYTES"}]) == \
      {("parse", "schema.columns.fare", "FLOAT", "BYTES")}
  assert causes(input__content_digest="2:00:00") == \
      {("raw", "input.content_digest", "1:00:00", "2:00:00")}
  assert causes(transform_module="m2") == {("transform", "transform_module", "transforms.taxi",
                                            "m2")}
  assert causes(runner="FlinkRunner") == {
      ("window", "runner", "DirectRunner", "FlinkRunner"),
      ("analyze", "runner", "DirectRunner", "FlinkRunner")}
  # A logger differs in runner by construction: not a cause.
  assert causes(runner="ProductionLogger") == set()
  assert causes(versions__tf="2.22.0") == {("analyze", "versions.tf", "2.21.0", "2.22.0"),
                                           ("transform", "versions.tf", "2.21.0", "2.22.0")}
  assert causes(analyze__fingerprint="f2",
                analyze__analyzers={"mean": {"fingerprint": "m2", "values": [1.6]}}) == {
      ("analyze", "analyze.fingerprint", "f1", "f2"),
      ("analyze", "analyze.analyzers.mean", "[1.5]", "[1.6]")}
  assert causes(analyze__definition="d2") == {("transform", "analyze.definition", "d1", "d2")}
  assert causes(input__dir="/b") == set()  # where a log lives is no cause


def test_a_source_format_cause_counts_only_what_a_format_can_explain():
  """evidence.format_explained over typed input (joined by key): null against "" and floats
  equal in float32 are a format's doing; x10 is not, and a record with both counts as not. The
  cause takes that count, and is dropped when it is 0."""
  from replay.diff import evidence
  keys = pa.array(["a", "b", "c", "d"], pa.large_string())
  off = pa.table({"key": keys, "s": pa.array([None, "x", None, "y"]),
                  "f": pa.array([1.0, 0.1, 3.0, 4.0])})
  prod = pa.table({"key": keys, "s": pa.array(["", "x", "", "y"]),
                   "f": pa.array([1.0, float(np.float32(0.1)), 30.0, 4.0])})
  assert evidence.format_explained(off, ["s", "f"], prod, ["s", "f"]) == 2  # a and b; not c
  cause = {"stage": "raw", "field": "source.format", "offline": "csv", "production": "jsonl",
           "records": 9}
  other = {"stage": "raw", "field": "input.content_digest", "offline": 1, "production": 2,
           "records": 9}
  report = {"suspected_causes": [dict(cause), dict(other)]}
  evidence._format_cause(report, 2)
  assert report["suspected_causes"] == [dict(cause, records=2), other]
  evidence._format_cause(report, 0)
  assert report["suspected_causes"] == [other]


def test_causes_are_sorted_by_stage_then_field():
  found = suspected_causes(meta(), meta(transform_module="m2", runner="X",
                                                 profile__sharding__num_shards=8))
  assert [(c["stage"], c["field"]) for c in found] == [
      ("window", "runner"), ("shard", "sharding.num_shards"), ("analyze", "runner"),
      ("transform", "transform_module")]


def test_source_event_time_and_side_columns_are_causes_at_their_stages():
  off = meta(source={"format": "csv"},
             event_time={"column": "t", "format": "seconds", "zone": "UTC"})
  prod = meta(source={"format": "jsonl", "side_columns": {"served": {"s": "fare_z"},
                                                          "aggregates": {"n_online": "n"}}},
              event_time={"column": "t", "format": "iso8601", "zone": "UTC"})
  found = [(c["stage"], c["field"], c["offline"], c["production"])
           for c in suspected_causes(off, prod)]
  held = "iso8601 as its source wrote it (ingest it with --event_time)"
  assert found == [("raw", "source.event_time", "Unix seconds", held),
                   ("raw", "source.format", "csv", "jsonl"),
                   ("parse", "source.event_time", "Unix seconds", held),
                   ("window", "event_time.format", "seconds", "iso8601"),
                   ("window", "source.side_columns.aggregates", {}, {"n_online": "n"}),
                   ("serve", "source.side_columns.served", {}, {"s": "fare_z"})]
  assert suspected_causes(off, off) == []
  # A dataset ingested with --event_time holds Unix seconds whatever its source's form: no
  # cause against one already in seconds, nor against another such dataset.
  declared = dict(prod["source"], event_time={"column": "t", "format": "timestamp",
                                               "zone": "UTC"})
  assert not [c for c in suspected_causes(off, meta(source=declared,
                                                    event_time=prod["event_time"]))
              if c["field"] == "source.event_time"]
  # A side that records no source format (a logger) is not a format difference.
  assert suspected_causes(off, meta(event_time=off["event_time"])) == []
  # Another ingest shard count moves TFT's float sums: named at analyze; the schema's source
  # at parse.
  shards = [(c["stage"], c["field"], c["offline"], c["production"]) for c in
            suspected_causes(meta(source={"format": "csv", "num_shards": 4,
                                                   "schema": "file"}),
                                      meta(source={"format": "csv", "num_shards": 3,
                                                   "schema": "inferred"}))]
  assert shards == [("parse", "source.schema", "file", "inferred"),
                    ("analyze", "source.num_shards", 4, 3)]


def test_plan_buckets_and_compatibility():
  off = meta()
  prod = meta()
  prod["log"]["buckets"][1]["digests"]["window"] = "1:00:01"
  differing, equal = runs.plan_buckets(off, prod)
  assert differing == [1] and [e["bucket"] for e in equal] == [0]
  del prod["log"]["buckets"][0]
  assert runs.plan_buckets(off, prod)[0] == [0, 1]
  with pytest.raises(UsageError, match="num_buckets"):
    runs.check_compatible(off, meta(log__num_buckets=4))
  with pytest.raises(UsageError, match="seed"):
    runs.check_compatible(off, meta(log__seed=1))


def test_report_model_fraction_counts_one_side_records():
  rec = {"divergent": 2, "offline_only": 1, "production_only": 1, "matched_keys": 6}
  assert report_model.divergent_fraction(rec) == pytest.approx(4 / 8)
  assert report_model.divergent_fraction(dict.fromkeys(rec, 0)) == 0.0


def _schema_valid(m):
  """meta() made to satisfy manifests/run_metadata.schema.json (what runs.load checks)."""
  hex16, digest = "0" * 16, "1:" + "0" * 16 + ":" + "0" * 16
  m.update(stages=list(stages.STAGES), versions=dict.fromkeys(
      ["python", "beam", "tft", "tf", "pyarrow", "skewtrace"], "1"))
  m["input"]["content_digest"] = digest
  m["analyze"].update(fingerprint=hex16, definition=hex16,
                      analyzers={"mean": {"fingerprint": hex16, "values": [1.5]}})
  for b in m["log"]["buckets"]:
    b.update(path=f"feature_log/bucket-{b['bucket']:05d}-of-00002.parquet",
             digests=dict.fromkeys(runs.DIGEST_STAGES, digest))
  return m


def test_schema_valid_metadata_loads(tmp_path):
  (tmp_path / run_metadata.FILE).write_text(json.dumps(_schema_valid(meta())))
  assert runs.load(str(tmp_path), "production")["log"]["rows"] == 3


@pytest.mark.parametrize("field,edit", [
    ("log.rows", lambda m: m["log"].pop("rows")),
    ("log.buckets.0.digests.raw", lambda m: m["log"]["buckets"][0]["digests"].update(raw="1:0")),
    ("profile", lambda m: m.update(profile=["fixed"])),
    ("analyze", lambda m: m.update(analyze="f1")),
    ("schema.columns", lambda m: m["schema"]["columns"][0].pop("type"))])
def test_malformed_metadata_fields_are_one_line_usage_errors(tmp_path, field, edit):
  m = _schema_valid(meta())
  edit(m)
  (tmp_path / run_metadata.FILE).write_text(json.dumps(m))
  with pytest.raises(UsageError) as e:
    runs.load(str(tmp_path), "production")
  msg = str(e.value)
  assert "\n" not in msg and run_metadata.FILE in msg and field in msg
  assert msg.startswith("--production ")


def test_key_hashes_are_the_reference_xxh64_of_every_length_and_slice():
  rng = np.random.default_rng(7)
  keys = ["", "a", "é", "日本語キー"] + [
      bytes(rng.integers(97, 123, n, dtype=np.uint8)).decode() for n in range(1, 80)]
  for arr in (pa.array(keys), pa.array(["x"] + keys, pa.large_string()).slice(1)):
    assert kernels._key_hashes(arr).tolist() == \
        [xxhash.xxh64_intdigest(k.encode("utf-8"), seed=0) for k in keys]


def test_samples_match_a_full_sort_on_many_candidates_and_ties():
  keys = [f"key-{i}" for i in range(3000)] + ["key-7", "key-7"]
  ref = sorted(range(len(keys)),
               key=lambda i: (xxhash.xxh64_intdigest(keys[i].encode(), seed=0), keys[i], i))
  got = kernels.samples(pa.array(keys), lambda i, k: i, 12)
  assert [e[2] for e in got] == ref[:12] and [e[1] for e in got] == [keys[i] for i in ref[:12]]
  cut = [e[2] for e in kernels.samples(pa.array(keys), lambda i, k: i, 3)]
  assert cut == ref[:3]
  tied = [e[2] for e in kernels.samples(pa.array(["b", "a", "b"]), lambda i, k: i, 2)]
  assert tied == sorted([0, 1, 2], key=lambda i: (xxhash.xxh64_intdigest(
      ["b", "a", "b"][i].encode()), ["b", "a", "b"][i], i))[:2]


def test_high_cardinality_categorical_drift_folds_into_hash_bins_in_any_merge_order():
  n = drift.MAX_DISTINCT + 500
  parts = [drift.histogram(pa.array([f"id-{i}" for i in range(lo, n, 3)])) for lo in range(3)]
  assert not any(p["hashed"] for p in parts)  # each part alone is under the cap
  forward = drift.merge(drift.merge(parts[0], parts[1]), parts[2])
  backward = drift.merge(parts[2], drift.merge(parts[1], parts[0]))
  assert forward["hashed"] and forward == backward
  assert len(forward["values"]) <= drift.HASH_BINS
  assert sum(forward["values"].values()) == n
  small = drift.histogram(pa.array(["id-1", "id-2"]))
  d = drift.compare(forward, small)  # the unfolded side is folded before the distance
  assert d["histogram"]["bins"][0].startswith("hash bin ")
  assert 0 < d["linf"] <= 1


def test_a_tolerance_named_default_points_at_the_default_flags():
  with pytest.raises(UsageError, match="--abs_tol / --rel_tol"):
    tolerance.from_flags(specs=["default=0.1"])


# --------------------------------------------------------------------------- float noise
def test_noise_tolerance_is_sqrt_n_unit_roundoffs_of_the_values_dtype():
  assert tolerance.noise_tau(32, 15002) == math.sqrt(15002) * 2.0 ** -24
  assert tolerance.noise_tau(64, 100) == 10 * 2.0 ** -53
  assert tolerance.noise_tau(32, 0) == 2.0 ** -24  # at least one unit roundoff
  t = tolerance.from_flags()  # no flag: the noise default
  assert t.is_noise
  t = t.with_noise(10000)
  assert t.for_feature("x", 32) == (100 * 2.0 ** -24,) * 2
  assert t.for_feature("x", 64) == (100 * 2.0 ** -53,) * 2
  assert t.to_dict()["default"]["noise"] == {"records": 10000, "float32": 100 * 2.0 ** -24,
                                             "float64": 100 * 2.0 ** -53, "exact_features": []}
  assert t.exact().for_feature("x") == (0.0, 0.0) and not t.exact().is_noise
  # Any default flag makes the default explicit (the other one 0); a spec keeps its own.
  assert not tolerance.from_flags(abs_tol=0.0).is_noise
  assert tolerance.from_flags(rel_tol=1e-3).for_feature("x") == (0.0, 1e-3)
  spec = tolerance.from_flags(specs=["x=0.5"]).with_noise(4)
  assert spec.for_feature("x") == (0.5, 0.0) and spec.for_feature("y") == (2 * 2.0 ** -24,) * 2


def test_features_fed_by_an_analyzer_that_differs_are_exact_and_the_others_keep_the_noise():
  from replay.diff import analyzers
  def side(mean, vocab, sub):
    return {"fingerprint": f"{mean}{vocab}{sub}", "definition": "d", "analyzers": {
        "z_mean": {"fingerprint": str(mean), "dtype": "float32", "shape": [], "values": [mean],
                   "features": ["fare_z"]},
        "vocabulary/company": {"fingerprint": vocab, "features": ["company_id"]},
        "vocab_sub_x": {"fingerprint": str(sub), "dtype": "int64", "shape": [], "values": [sub]}}}
  noise = 1.0 + 2.0 ** -23  # one float32 ulp: within sqrt(N) * u
  compared = analyzers.compare(side(1.0, "a", 5), side(noise, "b", 6), 10000)
  assert compared["state"] == "differs"
  # vocab_sub_x differs but feeds no feature (its entry names none): it moves no value.
  assert analyzers.exact_features(compared, side(1.0, "a", 5), side(noise, "b", 6)) == \
      ("company_id",)
  t = tolerance.from_flags().with_noise(10000).with_exact(["company_id"])
  assert t.for_feature("company_id") == (0.0, 0.0)
  assert t.for_feature("fare_z") == (100 * 2.0 ** -24,) * 2
  assert t.to_dict()["default"]["noise"]["exact_features"] == ["company_id"]
  assert tolerance.from_flags(specs=["company_id=0.5"]).with_noise(4).with_exact(
      ["company_id"]).for_feature("company_id") == (0.5, 0.0)  # a feature's own flag wins
  # No links recorded at all, or fingerprints that differ with no analyzer to show for it:
  # the whole default is exact.
  bare = {"fingerprint": "x", "definition": "d", "analyzers": {
      "m": {"fingerprint": "1", "dtype": "int64", "shape": [], "values": [1]}}}
  other = {"fingerprint": "y", "definition": "d", "analyzers": {
      "m": {"fingerprint": "2", "dtype": "int64", "shape": [], "values": [2]}}}
  assert analyzers.exact_features(analyzers.compare(bare, other, 10), bare, other) is None
  whole = dict(bare, fingerprint="z")
  assert analyzers.exact_features(analyzers.compare(bare, whole, 10), bare, whole) is None
  assert analyzers.exact_features(analyzers.compare(bare, bare, 10), bare, bare) == ()


def test_float32_values_one_ulp_apart_are_noise_and_exact_zero_stays_available():
  types = {"x": pa.float32()}
  one = np.float32(1.2345678)
  off = [{"key": k, "values": {"x": float(one)}} for k in "ab"]
  prod = [{"key": "a", "values": {"x": float(np.nextafter(one, np.float32(2)))}},
          {"key": "b", "values": {"x": float(one)}}]
  noise = tolerance.from_flags().with_noise(100)
  p = diff(off, prod, types, tolerance=noise)
  assert nonzero(p.records) == {"matched_keys": 2, "identical": 1, "noise": 1}
  assert nonzero(p.first_stage) == {}
  p = diff(off, prod, types, tolerance=tolerance.from_flags(0.0, 0.0))
  assert nonzero(p.records) == {"matched_keys": 2, "identical": 1, "divergent": 1}
  # 1e-4 relative is far beyond sqrt(100) * 2**-24 = 6e-7: divergent at the defaults.
  prod[0]["values"]["x"] = float(one) * (1 + 1e-4)
  p = diff(off, prod, types, tolerance=noise)
  assert p.records["divergent"] == 1


def _analyzer(values, dtype="float32", fp=None):
  return {"fingerprint": fp or json.dumps(values), "dtype": dtype, "shape": [len(values)],
          "values": values, "features": ["m_z"] if dtype.startswith("float") else []}


def test_analyzers_compare_numerically_under_float_noise():
  from replay.diff import analyzers
  mean = float(np.float32(5.665441513061523))
  ulp = float(np.nextafter(np.float32(mean), np.float32(6)))
  base = {"fingerprint": "f0", "analyzers": {"m": _analyzer([mean]), "n": _analyzer([3], "int64"),
                                             "vocabulary/v": {"fingerprint": "v0", "lines": 3}}}
  assert analyzers.compare(base, copy.deepcopy(base), 100) == \
      {"state": "equal", "records": 100, "analyzers": []}
  moved = copy.deepcopy(base)
  moved["fingerprint"], moved["analyzers"]["m"] = "f1", _analyzer([ulp])
  out = analyzers.compare(base, moved, 100)
  rel = abs(ulp - mean) / ulp
  assert out["state"] == "noise"
  assert out["analyzers"] == [{"name": "m", "verdict": "noise", "max_rel_diff": rel,
                               "tolerance": 10 * 2.0 ** -24, "features": ["m_z"]}]
  # One analyzer beyond noise, an integer one changed, a vocabulary changed, one side only,
  # values not recorded: each differs, and the run's state is differs.
  far = copy.deepcopy(moved)
  far["analyzers"]["m"] = _analyzer([mean * 1.001])
  assert analyzers.compare(base, far, 100)["analyzers"][0]["verdict"] == "differs"
  for edit in (lambda a: a.update(n=_analyzer([4], "int64")),
               lambda a: a.update({"vocabulary/v": {"fingerprint": "v1", "lines": 3}}),
               lambda a: a.pop("n"),
               lambda a: a.update(m={"fingerprint": "big", "dtype": "float32", "shape": [99]})):
    other = copy.deepcopy(moved)
    edit(other["analyzers"])
    assert analyzers.compare(base, other, 100)["state"] == "differs"
  gone = copy.deepcopy(base)
  del gone["analyzers"]["n"]
  assert analyzers.compare(gone, base, 100)["analyzers"] == [
      {"name": "n", "verdict": "production_only", "max_rel_diff": None, "tolerance": None,
       "features": []}]
  # A mean near 0 by cancellation: its noise is relative to itself, so it is strict.
  tiny = copy.deepcopy(base)
  tiny["analyzers"]["m"] = _analyzer([1e-9])
  tiny2 = copy.deepcopy(tiny)
  tiny2["analyzers"]["m"] = _analyzer([2e-9])
  assert analyzers.compare(tiny, tiny2, 10**6)["state"] == "differs"


def test_a_module_is_compared_by_its_source_digest_wherever_its_file_lies():
  from transforms.spec import run_metadata as rm
  same, other = "sha256:" + "a" * 64, "sha256:" + "b" * 64
  a = meta(transform_module="/checkout1/rides.py", **{rm.MODULE_DIGEST: same})
  fields = lambda m: {c["field"] for c in suspected_causes(a, m)}  # noqa: E731
  assert fields(meta(transform_module="/checkout2/rides.py", **{rm.MODULE_DIGEST: same})) == set()
  assert fields(meta(transform_module="/checkout2/rides.py", **{rm.MODULE_DIGEST: other})) == {
      rm.MODULE_DIGEST}
  # a side without a digest (a logger, older metadata): the names are compared
  assert fields(meta(transform_module="/checkout2/rides.py")) == {"transform_module"}


# --------------------------------------------------------------------------- window noise
def _windowed(rows, bounds, means, counts):
  """log(rows) with window bounds (start, end) and aggregates m (float64) and n (int64)."""
  t = log(rows)
  for name, values in (("window_start", [b[0] for b in bounds]),
                       ("window_end", [b[1] for b in bounds])):
    t = t.append_column(name, pa.array(values, pa.int64()))
  t = t.append_column("aggregate__m", pa.array(means, pa.float64()))
  return t.append_column("aggregate__n", pa.array(counts, pa.int64()))


def test_a_window_fingerprint_moved_by_aggregate_float_noise_alone_is_noise():
  up = float(np.nextafter(2.5, np.inf))
  keys = "abcdefghi"
  nan = float("nan")
  off = _windowed([row(k) for k in keys], [(0, 60)] * 9, [2.5] * 6 + [None, 2.5, nan], [4] * 9)
  # a: the mean one ulp up (noise); b: the mean 1e-6 up (beyond noise); c: a bound differs;
  # d: the count differs too; e: nothing to show for the window fp; f: serialize differs too;
  # g: a mean on one side only; h: the mean one ulp up and a transformed value that differs
  # (divergent at transform, not at window); i: NaN on both sides (equal: nothing to show).
  prod = _windowed([row(k, window=2) for k in "abcde"] + [
      row("f", window=2, serialize=2), row("g", window=2), row("h", x=9.0, window=2),
      row("i", window=2)], [(0, 60), (0, 60), (0, 61)] + [(0, 60)] * 6,
      [up, 2.5 + 1e-6, 2.5, up, 2.5, up, 2.5, up, nan], [4, 4, 4, 5, 4, 4, 4, 4, 4])
  ctx = Context(tolerance=tolerance.Tolerance().with_noise(100))
  p = compare.compare_bucket(off, prod, ctx)
  assert nonzero(p.records) == {"matched_keys": 9, "noise": 1, "latent": 7, "divergent": 1}
  assert nonzero(p.first_stage) == {"window": 7, "transform": 1}
  assert p.stages["window"] == [0, 9]
  assert p.window_noise == {"m": [2, up - 2.5, 2.5, up]} and p.window_noise_records == 2
  assert "a" not in {s[1] for s in p.samples["latent"]}
  exact = compare.compare_bucket(off, prod, Context())
  assert nonzero(exact.records) == {"matched_keys": 9, "latent": 8, "divergent": 1}
  assert exact.first_stage["window"] == 9 and not exact.window_noise


def test_window_noise_merges_to_its_largest_pair_in_any_order():
  a, b, c = compare.empty(), compare.empty(), compare.empty()
  a.window_noise, a.window_noise_records = {"m": [2, 1e-16, 1.0, 1.0000000000000002]}, 2
  b.window_noise = {"m": [1, 4e-16, 2.0, 2.0000000000000004], "s": [3, 0.0, 5.0, 5.0]}
  c.window_noise = {"m": [4, 4e-16, 1.5, 1.5000000000000004]}
  want = {"m": [7, 4e-16, 2.0, 2.0000000000000004], "s": [3, 0.0, 5.0, 5.0]}
  assert compare.merge(compare.merge(a, b), c).window_noise == want
  assert compare.merge(c, compare.merge(b, a)).window_noise == want
  assert compare.merge(c, compare.merge(b, a)).window_noise_records == 2


def test_the_window_noise_reason_names_the_bound_each_aggregate_was_held_to():
  """Under the noise default the float64 bound; an aggregate with a tolerance of its own (a
  --tolerance NAME=abs:rel) is said to be within that one."""
  window = {"m": [3, 4e-16, 2.5, 2.5000000000000004], "s": [1, 0.01, 1.0, 1.01]}
  tol = tolerance.Tolerance(features=(("s", 0.05, 0.0),)).with_noise(100).to_dict()
  why = summary.noise_reasons({"noise": 3}, tol, {}, window, values=False, window_records=3)
  assert len(why) == 2 and why[1] == "per-feature tolerances: s abs 0.05 rel 0.0"
  assert why[0].startswith("window fingerprints of 3 record(s) differ only by windowed "
                           "aggregates within float noise |d| <= t(1 + |offline|), t = sqrt(N)*u "
                           f"= {tolerance.noise_tau(64, 100):.2g} for float64 values")
  assert "m in 3 record(s), largest |d| 4e-16 (2.5 vs 2.5000000000000004); " in why[0]
  assert "s in 1 record(s), largest |d| 0.01 (1.0 vs 1.01), within its own tolerance abs 0.05 " \
      "rel 0.0" in why[0]
  assert summary.noise_reasons({"noise": 0}, tol, {}, {}, values=False) == []
