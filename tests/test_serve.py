"""The served-value stage and logged aggregates end to end: the taxi sample offline from CSV; in
production the same records as a JSON Lines serving log that also carries the value serving fed
the model for `fare_z` (a served side column) and the windowed aggregate its online store gave
(a logged aggregate). Expected counts are computed here from the offline run's own files (its
shards and feature log), never from the code under test:

- served values equal to the offline transform and correct aggregates -> 0 divergent, exit 0;
- serving clips fare_z at 1.0 (its own re-implementation) -> `serve` for exactly the records
  whose offline fare_z exceeds 1.0; an online aggregate off by one for some keys -> `window`
  for exactly those (window comes first where both apply), replayed with the offline
  transform_fn (the model's);
- a 10% key sample replayed with the offline transform_fn and the logged aggregates -> 0
  divergent, the rest not_served, exit 0.
"""
import glob
import json
import math
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import common
from tests.conftest import TAXI_SCHEMA, features, ingest

SERVED, FEATURE = "served_fare_z", "fare_z"
LOGGED, AGGREGATE, GROUP = "online_area_trips", "area_trips_in_window", "pickup_community_area"
CLIP = 1.0


def _table(pattern):
  return pa.concat_tables([pq.read_table(p) for p in sorted(glob.glob(pattern))])


@pytest.fixture(scope="module")
def offline(taxi_runs, taxi_features):
  """Per offline record, in shard order: its typed columns (dict), its log key, its fare_z and
  its windowed aggregate counted here from the log's windows and the shards' columns."""
  shards = _table(os.path.join(taxi_runs["direct"], "parquet", "*.parquet"))
  log = _table(os.path.join(taxi_features["direct"], "feature_log", "*.parquet"))
  log = log.filter(pa.compute.is_null(log.column("dropped_stage"))).to_pylist()
  by_key = {row["key"]: row for row in log}
  columns = [c for c in shards.schema.names if not c.startswith("__")]
  records = []
  for row in shards.to_pylist():
    logged = by_key[row["__key__"]]
    # a content key: the record's fingerprint in hex, then its ordinal among equal records
    records.append({"record": {c: row[c] for c in columns}, "hex": row["__key__"].split(":")[0],
                    "window": logged["window_start"], "fare_z": logged["value__" + FEATURE]})
  counts = {}
  for r in records:
    g = (r["window"], r["record"][GROUP])
    counts[g] = counts.get(g, 0) + 1
  for r in records:
    r["count"] = counts[(r["window"], r["record"][GROUP])]
  return records


def _write_log(path, records, served, logged):
  with open(path, "w", encoding="utf-8") as f:
    for r in records:
      line = dict(r["record"], **{SERVED: served(r), LOGGED: logged(r)})
      f.write(json.dumps(line) + "\n")


def _production(tmp_path, records, served, logged, *flags, features_flags=()):
  path = tmp_path / "serving.jsonl"
  _write_log(path, records, served, logged)
  # The offline run's shard count: TFT's float analyzers follow the order of the data in their
  # last bits, which another shard count changes (the issue of float-reduction noise).
  data = ingest(tmp_path / "d", "--num_shards", "4", "--schema", TAXI_SCHEMA,
                "--served", f"{SERVED}={FEATURE}", "--logged_aggregates",
                f"{LOGGED}={AGGREGATE}", *flags, inputs=str(path))
  return features(data, tmp_path / "f", *features_flags)


def _diff(offline_dir, production_dir, out):
  from replay.diff import job as diff
  code = diff.run(["--offline", offline_dir, "--production", production_dir,
                   "--output_dir", str(out)])
  with open(out / "report.json", encoding="utf-8") as f:
    return code, json.load(f)


@pytest.mark.slow
def test_served_values_and_logged_aggregates_as_offline_computed_them_diff_clean(
    offline, taxi_features, tmp_path):
  prod = _production(tmp_path, offline, lambda r: r["fare_z"], lambda r: r["count"])
  with open(os.path.join(prod, "run_metadata.json"), encoding="utf-8") as f:
    meta = json.load(f)
  assert meta["source"]["side_columns"] == {"served": {SERVED: FEATURE},
                                            "aggregates": {LOGGED: AGGREGATE}}
  assert LOGGED not in [c["name"] for c in meta["schema"]["columns"]]
  code, report = _diff(taxi_features["direct"], prod, tmp_path / "diff")
  assert code == 0
  assert report["records"]["divergent"] == 0
  assert report["records"]["identical"] == report["records"]["matched_keys"] == len(offline)
  assert report["stages"]["serve"] == {"match": len(offline), "mismatch": 0}


def test_a_serving_reimplementation_shows_at_serve_and_a_wrong_online_aggregate_at_window(
    offline, taxi_features, tmp_path):
  off_by_one = {r["hex"] for r in offline if r["hex"][-1] in "01"}
  clipped = {r["hex"] for r in offline if r["fare_z"] is not None and r["fare_z"] > CLIP}
  assert off_by_one and clipped and clipped - off_by_one
  # Replayed with the model's transform_fn, as production ran it: the wrong aggregates must
  # not move the analyzers (an analysis of production's data would move every record).
  prod = _production(
      tmp_path, offline,
      lambda r: r["fare_z"] if r["fare_z"] is None else min(r["fare_z"], CLIP),
      lambda r: r["count"] + (r["hex"] in off_by_one),
      features_flags=["--transform_fn_dir", os.path.join(taxi_features["direct"],
                                                         "transform_fn")])
  code, report = _diff(taxi_features["direct"], prod, tmp_path / "diff")
  assert code == 1
  firsts = report["first_divergent_stage"]
  assert firsts["window"] == sum(1 for r in offline if r["hex"] in off_by_one)
  assert firsts["serve"] == sum(1 for r in offline
                                if r["hex"] in clipped and r["hex"] not in off_by_one)
  assert sum(firsts.values()) == report["records"]["divergent"]
  assert report["features"][FEATURE]["served_mismatch"] == firsts["serve"]
  serve_samples = [s for s in report["samples"]["divergent"]
                   if s["first_divergent_stage"] == "serve"]
  assert serve_samples
  for s in serve_samples:  # the values the model got on each side
    assert list(s["features"]) == [FEATURE]
    want, got = s["features"][FEATURE]
    assert want > CLIP and math.isclose(got, CLIP, rel_tol=1e-7)


def test_a_sampled_log_replayed_with_the_offline_transform_fn_diffs_clean(
    offline, taxi_features, tmp_path):
  sample = [r for r in offline if int(r["hex"][:2], 16) % 10 == 0]
  assert 0 < len(sample) < len(offline)
  fn_dir = os.path.join(taxi_features["direct"], "transform_fn")
  prod = _production(tmp_path, sample, lambda r: r["fare_z"], lambda r: r["count"],
                     "--sampling_rate", "0.1", features_flags=["--transform_fn_dir", fn_dir])
  code, report = _diff(taxi_features["direct"], prod, tmp_path / "diff")
  assert code == 0
  assert report["scope"] == "production"
  assert report["records"]["divergent"] == 0
  assert report["records"]["matched_keys"] == len(sample)
  assert report["records"]["not_served"] == len(offline) - len(sample)


@pytest.mark.parametrize("flags, message", [
    (["--served", "nope=fare_z"], "not in the input's columns: nope"),
    (["--served", f"{SERVED}"], "--served wants COLUMN=FEATURE items"),
    (["--served", f"{SERVED}=fare_z", "--logged_aggregates", f"{SERVED}=x"],
     "both served and a logged aggregate"),
    (["--key_columns", SERVED, "--served", f"{SERVED}=fare_z"], "cannot be side columns"),
])
def test_side_column_flags_that_do_not_fit_are_usage_errors(offline, tmp_path, flags, message):
  path = tmp_path / "serving.jsonl"
  _write_log(path, offline[:5], lambda r: 0.5, lambda r: 1)
  from pipelines import ingest as job
  with pytest.raises(common.UsageError, match=message):
    job.run(["--input", str(path), "--output_dir", str(tmp_path / "out"), "--schema",
             TAXI_SCHEMA] + flags)
  assert not (tmp_path / "out").exists()


def test_a_logged_aggregate_the_module_does_not_compute_is_a_usage_error(offline, tmp_path):
  path = tmp_path / "serving.jsonl"
  _write_log(path, offline[:20], lambda r: 0.5, lambda r: 1)
  data = ingest(tmp_path / "d", "--num_shards", "1", "--schema", TAXI_SCHEMA,
                "--logged_aggregates", f"{LOGGED}=no_such_aggregate", inputs=str(path))
  from pipelines import features as job
  with pytest.raises(common.UsageError, match="no_such_aggregate"):
    job.run(["--input_dir", data, "--output_dir", str(tmp_path / "f"), "--profile",
             os.path.join(os.path.dirname(TAXI_SCHEMA), "..", "..", "profiles",
                          "offline.yaml"), "--transform_module", "transforms.taxi"])


@pytest.mark.parametrize("value, why", [
    (2.5, "2.5 is not a whole number"), ("NaN", "nan is not a whole number"),
    (2.0 ** 53, "9007199254740992.0 is beyond 2**53")])
def test_a_logged_count_that_is_not_whole_is_refused_before_the_job_runs(offline, tmp_path,
                                                                         value, why):
  """A side column --schema does not type is FLOAT; the module's aggregate is a count, so every
  logged value must be whole: one line naming the column and the value, nothing written."""
  path = tmp_path / "serving.jsonl"
  _write_log(path, offline[:20], lambda r: 0.5, lambda r: value if r is offline[7] else None)
  data = ingest(tmp_path / "d", "--num_shards", "1", "--schema", TAXI_SCHEMA,
                "--logged_aggregates", f"{LOGGED}={AGGREGATE}", inputs=str(path))
  with open(os.path.join(data, "manifest.json"), encoding="utf-8") as f:
    types = {c["name"]: c["type"] for c in json.load(f)["schema"]["columns"]}
  assert types[LOGGED] == "FLOAT" and types[SERVED] == "BYTES"  # not a side column here
  from pipelines import features as job
  with pytest.raises(common.UsageError) as e:
    job.run(["--input_dir", data, "--output_dir", str(tmp_path / "f"), "--profile",
             os.path.join(os.path.dirname(TAXI_SCHEMA), "..", "..", "profiles",
                          "offline.yaml"), "--transform_module", "transforms.taxi"])
  assert str(e.value) == f"logged aggregate column {LOGGED!r}: {why}, and {AGGREGATE} is a count"
  assert not (tmp_path / "f").exists()


def _logged(offline_dir, log_dir, records, served):
  """The records logged by replay.logger with their windowed counts and served fare_z."""
  from replay.logger import ProductionLogger
  with ProductionLogger.from_features_dir(offline_dir, str(log_dir), batch_size=4096,
                                         served_features=[FEATURE]) as logger:
    for r in records:
      logger.log(r["record"], {AGGREGATE: r["count"]}, served={FEATURE: served(r)})
  return str(log_dir)


def test_the_logger_logs_served_values_and_a_reimplementation_shows_at_serve(
    offline, taxi_features, tmp_path):
  exact = _logged(taxi_features["direct"], tmp_path / "exact", offline, lambda r: r["fare_z"])
  code, report = _diff(taxi_features["direct"], exact, tmp_path / "d_exact")
  assert code == 0 and report["records"]["divergent"] == 0
  assert report["stages"]["serve"] == {"match": len(offline), "mismatch": 0}
  assert "served__" + FEATURE in pq.read_schema(
      glob.glob(os.path.join(exact, "feature_log", "*.parquet"))[0]).names
  clipped = sum(1 for r in offline if r["fare_z"] is not None and r["fare_z"] > CLIP)
  assert clipped
  clip = _logged(taxi_features["direct"], tmp_path / "clip", offline,
                 lambda r: r["fare_z"] if r["fare_z"] is None else min(r["fare_z"], CLIP))
  code, report = _diff(taxi_features["direct"], clip, tmp_path / "d_clip")
  assert code == 1
  assert {s: n for s, n in report["first_divergent_stage"].items() if n} == {"serve": clipped}
  assert report["records"]["divergent"] == clipped
  # The logger records what it was given as ingest does: the served feature is the cause at
  # serve, for exactly the records that part there; its form is not compared with a format.
  causes = {(c["stage"], c["field"]): c for c in report["suspected_causes"]}
  served = causes[("serve", "source.side_columns.served")]
  assert served["production"] == {FEATURE: FEATURE} and served["offline"] == {}
  assert served["records"] == clipped
  assert not [c for c in causes if c[1] == "source.format"]
  with open(os.path.join(clip, "run_metadata.json"), encoding="utf-8") as f:
    assert json.load(f)["source"]["side_columns"] == {"served": {FEATURE: FEATURE},
                                                      "aggregates": {AGGREGATE: AGGREGATE}}


@pytest.mark.parametrize("served,message", [
    ({"nope": 1.0}, "served: ['nope'] not among the served features (fare_z)"),
    ({FEATURE: "high"}, "served 'fare_z': a number expected, got 'high'"),
    ({FEATURE: True}, "served 'fare_z': a number expected, got True")])
def test_the_logger_refuses_served_values_it_cannot_compare(offline, taxi_features, tmp_path,
                                                           served, message):
  from replay.logger import ProductionLogger
  r = offline[0]
  with ProductionLogger.from_features_dir(taxi_features["direct"], str(tmp_path),
                                         served_features=[FEATURE]) as logger:
    with pytest.raises(ValueError) as e:
      logger.log(r["record"], {AGGREGATE: r["count"]}, served=served)
    assert str(e.value) == message
  with pytest.raises(common.UsageError, match="served nope: not a one-value transformed"):
    ProductionLogger.from_features_dir(taxi_features["direct"], str(tmp_path / "x"),
                                       served_features=["nope"])
