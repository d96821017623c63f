"""Windowed aggregates (transforms/spec/window.py): count, count_distinct, sum, mean, min and
max, over one group column or several, on fixed and sliding windows.

The expected values are computed here with pandas (groupby over the group columns and the window
end, null a group of its own, NaN skipped), independently of the code under test: on the taxi
sample, on generated records (hypothesis), and in the features job's log. Partial states merge
to the same bytes in any grouping and order. The production logger given the same values as an
online store would hold logs the same rows (0 divergent), and a logger given a wrong mean for
some records parts at `window` for exactly those; a mean one float ulp off (another order of
addition) is noise with its reason, a count one off is not.
"""
import glob
import math
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import online_store
from tests.conftest import ROOT, TAXI_CSV, TAXI_SCHEMA, features, ingest, keyed_taxi_csv
from transforms.spec import profile as profiles
from transforms.spec import window
from transforms.stages import window_records

TIME = "trip_start_timestamp"
AGGREGATES = [
    {"name": "area_trips", "group_by": "pickup_community_area", "fn": "count"},
    {"name": "area_tipped", "group_by": "pickup_community_area", "fn": "count",
     "column": "tips"},
    {"name": "area_fare_sum", "group_by": "pickup_community_area", "fn": "sum",
     "column": "fare"},
    {"name": "company_mean_miles", "group_by": "company", "fn": "mean", "column": "trip_miles"},
    {"name": "payment_min_fare", "group_by": "payment_type", "fn": "min", "column": "fare"},
    {"name": "route_max_fare", "group_by": ["pickup_community_area", "dropoff_community_area"],
     "fn": "max", "column": "fare"},
    {"name": "area_companies", "group_by": "pickup_community_area", "fn": "count_distinct",
     "column": "company"},
    {"name": "payment_fares", "group_by": ["payment_type"], "fn": "count_distinct",
     "column": "fare"},
]
FLOAT_FNS = ("sum", "mean", "min", "max")
# Windows of their own (spec/profile.parse_window): fixed with an offset, sliding, the local day
# in Chicago (23 or 25 hours across a DST change) and two local days sliding by one.
OWN_WINDOWS = {
    "area_trips": {"type": "fixed", "size_seconds": 7200, "offset_seconds": 1800},
    "company_mean_miles": {"type": "sliding", "size_seconds": 6 * 3600, "period_seconds": 3600},
    "area_companies": {"type": "fixed", "size_seconds": 86400, "zone": "America/Chicago"},
    "route_max_fare": {"type": "sliding", "size_seconds": 2 * 86400, "period_seconds": 86400,
                       "offset_seconds": 6 * 3600, "zone": "America/Chicago"},
}
# The job's aggregates: the ones above in their own windows, the others in the profile's.
JOB_AGGREGATES = [dict(a, **({"window": OWN_WINDOWS[a["name"]]} if a["name"] in OWN_WINDOWS
                             else {})) for a in AGGREGATES]


def _profile(size, period):
  return profiles.parse_profile({
      "windowing": {"type": "fixed" if size == period else "sliding", "size_seconds": size,
                    "period_seconds": period, "offset_seconds": 0,
                    "allowed_lateness_seconds": None},
      "sharding": {"num_shards": 2, "hash_seed": 0},
      "serialization": {"format": "parquet", "float_dtype": "float64"},
      "sampling": {"seed": 0, "fraction": 1.0}})


def expected(df, agg, time, size, period, offset=0, zone=None):
  """Each record's value of `agg` by pandas: the record is repeated into every window holding
  it (trailing windows ending at the first period boundary after t, then every period while the
  window still holds t), grouped by the group columns and window end (dropna=False: null is a
  group), aggregated, and joined back on the record's own window end. With a zone, t is the
  zone's wall-clock time (pandas' tz_convert)."""
  by = window.group_columns(agg)
  t = df[time].to_numpy()
  if zone:
    local = pd.to_datetime(df[time], unit="s", utc=True).dt.tz_convert(zone).dt.tz_localize(None)
    t = (local - pd.Timestamp(0)).dt.total_seconds().astype(np.int64).to_numpy()
  end = offset + (np.floor_divide(t - offset, period) + 1) * period
  copies = size // period
  read = list(dict.fromkeys(by + ([agg["column"]] if agg.get("column") else [])))
  rows = df.loc[df.index.repeat(copies), read].copy()
  rows["__end__"] = (end[:, None] + np.arange(copies)[None, :] * period).ravel()
  groups = rows.groupby(by + ["__end__"], dropna=False)
  fn, column = agg["fn"], agg.get("column")
  if fn == "count":
    out = groups.size() if column is None else groups[column].count()
  elif fn == "count_distinct":
    out = groups[column].nunique()
  elif fn == "sum":
    out = groups[column].sum(min_count=1)
  else:
    out = getattr(groups[column], fn)()
  own = df[by].copy()
  own["__end__"] = end
  joined = own.merge(out.rename("__out__").reset_index(), on=by + ["__end__"], how="left")
  values = joined["__out__"]
  return values.fillna(0).astype(np.int64).to_numpy() if fn.startswith("count") else \
      values.astype(np.float64).to_numpy()


def computed(batch, agg, time, prof):
  kept, dropped = window.assign_windows(batch, time, prof, None)
  assert dropped.num_rows == 0
  values = window.aggregate_values(kept, agg, prof)
  assert values.type == (pa.float64() if agg["fn"] in FLOAT_FNS else pa.int64())
  return values.to_numpy(zero_copy_only=False)


def assert_same(agg, got, want):
  if agg["fn"] in ("sum", "mean"):  # pandas sums in another order: the last bits may differ
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9, err_msg=agg["name"])
  else:
    np.testing.assert_array_equal(got, want, err_msg=agg["name"])


@pytest.fixture(scope="module")
def taxi_batch():
  table = pa.Table.from_pandas(pd.read_csv(TAXI_CSV), preserve_index=False)
  return table.combine_chunks().to_batches()[0], pd.read_csv(TAXI_CSV)


@pytest.mark.parametrize("size, period", [(3600, 3600), (3600, 1200)])
@pytest.mark.parametrize("agg", AGGREGATES, ids=[a["name"] for a in AGGREGATES])
def test_each_fn_equals_pandas_on_the_taxi_sample(taxi_batch, agg, size, period):
  batch, df = taxi_batch
  got = computed(batch, agg, TIME, _profile(size, period))
  want = expected(df, agg, TIME, size, period)
  assert len(got) == len(df) and (not agg["fn"].startswith("count") or want.max() > 1)
  assert_same(agg, got, want)


def _window_of(agg):
  """(size, period, offset, zone) of an own window (OWN_WINDOWS), as the test reads it."""
  w = OWN_WINDOWS[agg["name"]]
  return (w["size_seconds"], w.get("period_seconds", w["size_seconds"]),
          w.get("offset_seconds", 0), w.get("zone"))


@pytest.mark.parametrize("agg", AGGREGATES, ids=[a["name"] for a in AGGREGATES])
@pytest.mark.parametrize("own", sorted(OWN_WINDOWS))
def test_each_fn_in_a_window_of_its_own_equals_pandas(taxi_batch, agg, own):
  """Every fn counted in each kind of window of its own (the record's window stays the
  profile's hour): fixed with an offset, sliding, the Chicago local day, two local days."""
  batch, df = taxi_batch
  prof = _profile(3600, 3600)
  agg = dict(agg, window=OWN_WINDOWS[own])
  resolved = window.resolve([agg], prof)
  kept, dropped = window.assign_windows(batch, TIME, prof, None, aggregates=resolved)
  assert dropped.num_rows == 0
  got = window.aggregate_values(kept, resolved[0], prof).to_numpy(zero_copy_only=False)
  size, period, offset, zone = _window_of({"name": own})
  assert_same(agg, got, expected(df, agg, TIME, size, period, offset, zone))


def test_a_local_day_window_spans_23_or_25_hours_across_dst(taxi_batch):
  """The Chicago local day holds the records of its wall-clock day: on 2014-03-09 (23 hours)
  and 2014-11-02 (25 hours) as on any other (counted here with zoneinfo)."""
  import datetime
  import zoneinfo
  batch, df = taxi_batch
  prof = _profile(3600, 3600)
  agg = window.resolve([{"name": "day_trips", "group_by": "payment_type", "fn": "count",
                         "window": OWN_WINDOWS["area_companies"]}], prof)[0]
  kept, _ = window.assign_windows(batch, TIME, prof, None, aggregates=[agg])
  got = window.aggregate_values(kept, agg, prof).to_pylist()
  chicago = zoneinfo.ZoneInfo("America/Chicago")
  days = [datetime.datetime.fromtimestamp(t, chicago).date() for t in df[TIME]]
  want = pd.Series(1, index=pd.MultiIndex.from_arrays([df["payment_type"].fillna("<null>"), days]))
  counts = want.groupby(level=[0, 1]).sum()
  for i, (p, d) in enumerate(zip(df["payment_type"].fillna("<null>"), days)):
    assert got[i] == counts[(p, d)]
  for day in (datetime.date(2014, 3, 9), datetime.date(2014, 11, 2)):
    hours = (datetime.datetime.combine(day + datetime.timedelta(1), datetime.time(),
                                       chicago).timestamp() -
             datetime.datetime.combine(day, datetime.time(), chicago).timestamp()) / 3600
    assert hours in (23, 25)


def test_a_profile_override_changes_one_aggregate_window_and_names_it():
  prof = profiles.parse_profile(dict(yaml.safe_load(open(os.path.join(
      ROOT, "profiles", "offline.yaml"), encoding="utf-8")),
      aggregate_windows={"area_trips": {"offset_seconds": 2700}}))
  resolved = {a["name"]: a.get("window") for a in window.resolve(JOB_AGGREGATES, prof)}
  assert resolved["area_trips"] == {"type": "fixed", "size_seconds": 7200,
                                    "period_seconds": 7200, "offset_seconds": 2700, "zone": None}
  assert resolved["area_fare_sum"] is None  # the profile's own window
  assert resolved["company_mean_miles"]["period_seconds"] == 3600
  with pytest.raises(ValueError, match=r"aggregate_windows names nope, which the module does "
                                       r"not compute"):
    window.resolve(JOB_AGGREGATES, profiles.parse_profile(dict(yaml.safe_load(open(
        os.path.join(ROOT, "profiles", "offline.yaml"), encoding="utf-8")),
        aggregate_windows={"nope": {"offset_seconds": 1}})))
  with pytest.raises(ValueError, match=r"aggregate_windows.area_trips.offset_seconds must be "
                                       r"< period_seconds"):
    window.resolve(JOB_AGGREGATES, profiles.parse_profile(dict(yaml.safe_load(open(
        os.path.join(ROOT, "profiles", "offline.yaml"), encoding="utf-8")),
        aggregate_windows={"area_trips": {"offset_seconds": 7200}})))


_GROUPS = st.one_of(st.none(), st.integers(0, 3))
_TEXT = st.one_of(st.none(), st.sampled_from(["a", "b", ""]))
# (no values so large that pandas' arrival-order sum would cancel them: the exact sum is
# tested against math.fsum below)
_FLOATS = st.one_of(st.none(), st.sampled_from([0.0, -0.0, 1.5, -2.25, float("nan"), 5e-324,
                                                float("inf"), -float("inf")]),
                    st.floats(-1e6, 1e6, allow_nan=False))
_INTS = st.one_of(st.none(), st.integers(-5, 5))
_FLOAT_GROUPS = st.one_of(st.none(), st.sampled_from([0.0, -0.0, 2.5, float("nan")]))


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_fn_equals_pandas_and_merges_alike_on_generated_records(data):
  n = data.draw(st.integers(1, 30), label="records")
  draw = lambda s, label: data.draw(st.lists(s, min_size=n, max_size=n), label=label)  # noqa
  batch = pa.record_batch({"t": pa.array(draw(st.integers(0, 4 * 3600), "t"), pa.int64()),
                           "g": pa.array(draw(_GROUPS, "g"), pa.int64()),
                           "h": pa.array(draw(_TEXT, "h"), pa.string()),
                           "x": pa.array(draw(_FLOATS, "x"), pa.float64()),
                           "f": pa.array(draw(_FLOAT_GROUPS, "f"), pa.float64()),
                           "i": pa.array(draw(_INTS, "i"), pa.int64())})
  size, period = data.draw(st.sampled_from([(3600, 3600), (3600, 1800), (3600, 900)]))
  prof = _profile(size, period)
  df = batch.to_pandas()
  for fn in window.AGGREGATE_FNS:
    for by in (["g"], ["g", "h"], ["f"]):
      for column in ("x", "i") + (("h",) if fn in ("count", "count_distinct") else ()):
        agg = {"name": "a", "group_by": by, "fn": fn, "column": column}
        assert_same(agg, computed(batch, agg, "t", prof), expected(df, agg, "t", size, period))
  # partial states merged in another grouping and order give the same bytes
  kept, _ = window.assign_windows(batch, "t", prof, None)
  order = data.draw(st.permutations(range(n)), label="order")
  cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=4), label="cuts"))
  shuffled = kept.take(pa.array(order))
  parts = [shuffled.slice(a, b - a) for a, b in zip([0] + cuts, cuts + [n])]
  for fn in window.AGGREGATE_FNS:
    agg = {"name": "a", "group_by": ["g", "h"], "fn": fn, "column": "x"}
    merge = window_records.MergeStates(agg)
    accs = [merge.add_input(merge.create_accumulator(),
                            window.partial_state(p, agg, prof, ordered=False)) for p in parts]
    whole = window.result(window.partial_state(kept, agg, prof), agg)
    assert _ipc(merge.extract_output(merge.merge_accumulators(accs))) == _ipc(whole), fn


def _ipc(table):
  sink = pa.BufferOutputStream()
  with pa.ipc.new_stream(sink, table.schema) as writer:
    writer.write_table(table)
  return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("fn", window.AGGREGATE_FNS)
def test_many_partials_merge_to_the_same_bytes_as_one(fn):
  """Over 32 partial states (the combiner compacts its accumulator at 32), int and string group
  columns, reversed and interleaved orders: byte-identical results (Arrow IPC, so -0.0 and 0.0
  or NaN payloads would differ)."""
  rng = np.random.default_rng(11)
  n = 400
  batch = pa.record_batch({
      "t": pa.array(rng.integers(0, 4 * 3600, n)), "g": pa.array(rng.integers(0, 3, n)),
      "h": pa.array(rng.choice(["a", "b", None], n).tolist(), pa.string()),
      "x": pa.array(np.where(rng.random(n) < 0.1, -0.0, rng.normal(0, 1e6, n)))})
  prof = _profile(3600, 1800)
  kept, _ = window.assign_windows(batch, "t", prof, None)
  agg = {"name": "a", "group_by": ["g", "h"], "fn": fn, "column": "x"}
  merge = window_records.MergeStates(agg)
  whole = _ipc(window.result(window.partial_state(kept, agg, prof), agg))
  for order in (np.arange(n), np.arange(n)[::-1], rng.permutation(n)):
    acc = merge.create_accumulator()
    for i in order:  # one record a partial: 400 partials
      acc = merge.add_input(acc, window.partial_state(kept.slice(int(i), 1), agg, prof,
                                                      ordered=False))
    assert _ipc(merge.extract_output(acc)) == whole


def test_integers_beyond_two_to_the_53_count_and_round():
  big = 2 ** 60 + 1
  batch = pa.record_batch({"t": pa.array([1, 2, 3]), "g": pa.array([0, 0, 0]),
                           "i": pa.array([big, None, big + 2], pa.int64())})
  prof = _profile(3600, 3600)
  kept, _ = window.assign_windows(batch, "t", prof, None)
  value = lambda fn: window.aggregate_values(  # noqa: E731
      kept, {"name": "a", "group_by": "g", "fn": fn, "column": "i"}, prof).to_pylist()
  assert value("count") == [2, 2, 2] and value("count_distinct") == [2, 2, 2]
  assert value("max") == [float(big + 2)] * 3 and value("sum") == [float(big) * 2] * 3


def test_a_window_without_values_is_null_for_the_values_and_zero_for_the_counts():
  batch = pa.record_batch({"t": pa.array([10, 20, 4000], pa.int64()),
                           "g": pa.array([1, 1, 1], pa.int64()),
                           "x": pa.array([None, float("nan"), 2.0], pa.float64())})
  prof = _profile(3600, 3600)
  kept, _ = window.assign_windows(batch, "t", prof, None)
  for fn, want in (("sum", [None, None, 2.0]), ("max", [None, None, 2.0]),
                   ("count", [0, 0, 1]), ("count_distinct", [0, 0, 1])):
    agg = {"name": "a", "group_by": "g", "fn": fn, "column": "x"}
    assert window.aggregate_values(kept, agg, prof).to_pylist() == want, fn


def test_the_float_sum_is_exact_in_any_order():
  # 0.1 + 0.2 + 0.3 differs from 0.3 + 0.2 + 0.1 in float64; the rule's sum is the correctly
  # rounded exact sum (math.fsum's), whatever the order
  values = [0.1, 0.2, 0.3, 1e16, -1e16, 3.0]
  prof, agg = _profile(3600, 3600), {"name": "s", "group_by": "g", "fn": "sum", "column": "x"}
  orders = ([0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0], [3, 0, 4, 1, 5, 2])
  assert len({sum(values[i] for i in order) for order in orders}) > 1  # order matters
  sums = set()
  for order in orders:
    batch = pa.record_batch({"t": pa.array([1] * 6, pa.int64()), "g": pa.array([0] * 6),
                             "x": pa.array([values[i] for i in order], pa.float64())})
    kept, _ = window.assign_windows(batch, "t", prof, None)
    sums |= set(window.aggregate_values(kept, agg, prof).to_pylist())
  assert sums == {math.fsum(values)} and math.fsum(values) != sum(sorted(values))


@pytest.mark.parametrize("aggregates, types, message", [
    ([{"name": "m", "group_by": "g", "fn": "mean", "column": "s"}],
     {"g": pa.int64(), "s": pa.string()}, "aggregate 'm': fn mean needs a number column; 's' is "
                                          "string"),
    ([{"name": "g", "group_by": "g", "fn": "count"}], {"g": pa.int64()},
     "aggregate 'g' has the name of a dataset column"),
    ([{"name": "m", "group_by": ["g", "k"], "fn": "count"}], {"g": pa.int64()},
     "aggregate 'm' reads column 'k', which the dataset lacks")])
def test_columns_an_aggregate_cannot_use_are_named(aggregates, types, message):
  with pytest.raises(ValueError) as e:
    window.check_columns(aggregates, types)
  assert str(e.value).startswith(message)


# --------------------------------------------------------------------------- the job and logger
MODULE = '''"""Taxi features over every kind of windowed aggregate (tests/test_aggregates.py)."""
import tensorflow as tf
import tensorflow_transform as tft

EVENT_TIME_COLUMN = "trip_start_timestamp"
KEY_COLUMNS = ["trip_id"]
WINDOWED_AGGREGATES = {aggregates!r}


def _dense(x, default):
  x = tf.sparse.to_dense(tf.SparseTensor(x.indices, x.values, [x.dense_shape[0], 1]), default)
  return tf.squeeze(x, axis=1)


def preprocessing_fn(inputs):
  fare = tf.cast(_dense(inputs["fare"], tf.constant(0, tf.float64)), tf.float32)
  out = {{"fare_z": tft.scale_to_z_score(fare)}}
  for agg in WINDOWED_AGGREGATES:
    x = inputs[agg["name"]]
    out[agg["name"] + "_x"] = tf.cast(_dense(x, tf.constant(-1, x.dtype)), tf.float32)
  return out
'''


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """The taxi sample keyed by trip_id, run through the features job with every aggregate, and
  the same records through the production logger with the values an online store holds; a
  second logger gets a wrong company_mean_miles for every 7th record that has one."""
  d = tmp_path_factory.mktemp("aggregates")
  path = keyed_taxi_csv(d / "taxi.csv", lambda i: f"T{i:06d}")
  module = d / "every_aggregate.py"
  module.write_text(MODULE.format(aggregates=JOB_AGGREGATES))
  data = ingest(d / "ingest", "--num_shards", "2", "--schema", TAXI_SCHEMA, "--key_columns",
                "trip_id", inputs=str(path))
  offline = features(data, d / "offline", "--transform_module", str(module))
  from replay.logger import ProductionLogger
  records, aggregates = online_store.records_and_aggregates(str(path), offline)
  out = {"csv": str(path), "offline": offline, "production": str(d / "production"),
         "wrong": str(d / "wrong"), "module": str(module)}
  with ProductionLogger.from_features_dir(offline, out["production"]) as logger:
    logger.log_batch(records, aggregates)
  wrong = [dict(a) for a in aggregates]
  changed = set()
  for i, a in enumerate(wrong):
    if i % 7 == 0 and a["company_mean_miles"] is not None:
      a["company_mean_miles"] += 0.25
      changed.add(records[i]["trip_id"])
  out["changed"] = changed
  with ProductionLogger.from_features_dir(offline, out["wrong"]) as logger:
    logger.log_batch(records, wrong)
  # An online store that adds in another order: company_mean_miles one float64 ulp up for
  # every 5th record that has one; a third of those also count one trip more (area_trips).
  ulp, out["noisy"], out["counted"] = [dict(a) for a in aggregates], set(), set()
  for i, a in enumerate(ulp):
    if i % 5 == 0 and a["company_mean_miles"] is not None:
      a["company_mean_miles"] = float(np.nextafter(a["company_mean_miles"], np.inf))
      if i % 3 == 0:
        a["area_trips"] += 1
      (out["counted"] if i % 3 == 0 else out["noisy"]).add(records[i]["trip_id"])
  out["ulp"] = str(d / "ulp")
  with ProductionLogger.from_features_dir(offline, out["ulp"]) as logger:
    logger.log_batch(records, ulp)
  # Production shifts one aggregate's window (its profile's aggregate_windows), transformed
  # with the offline transform_fn.
  shifted = yaml.safe_load(open(os.path.join(ROOT, "profiles", "offline.yaml"), encoding="utf-8"))
  shifted["aggregate_windows"] = {"area_trips": {"offset_seconds": 2700}}
  (d / "shifted.yaml").write_text(yaml.safe_dump(shifted))
  out["shifted"] = features(data, d / "shifted", "--transform_module", str(module),
                            "--transform_fn_dir", os.path.join(offline, "transform_fn"),
                            profile=str(d / "shifted.yaml"))
  return out


def _log(root):
  table = pa.concat_tables([pq.read_table(p) for p in sorted(glob.glob(
      os.path.join(root, "feature_log", "*.parquet")))])
  return table.take(pa.compute.sort_indices(table, [("key", "ascending")]))


@pytest.mark.slow
def test_the_job_logs_every_aggregate_as_pandas_computes_it(runs):
  df = pd.read_csv(runs["csv"])
  with open(os.path.join(ROOT, "profiles", "offline.yaml"), encoding="utf-8") as f:
    windowing = yaml.safe_load(f)["windowing"]
  assert windowing["type"] == "fixed" and windowing["offset_seconds"] == 0
  size = windowing["size_seconds"]
  log = _log(runs["offline"])
  assert log.column("key").to_pylist() == sorted(df["trip_id"])
  df = df.set_index("trip_id").loc[log.column("key").to_pylist()].reset_index()
  for agg in JOB_AGGREGATES:  # the window stage's exact value (before the float32 trip)
    got = log.column(f"aggregate__{agg['name']}")
    assert got.type == (pa.float64() if agg["fn"] in FLOAT_FNS else pa.int64())
    window_ = _window_of(agg) if agg.get("window") else (size, size, 0, None)
    assert_same(agg, got.to_numpy(zero_copy_only=False), expected(df, agg, TIME, *window_))


@pytest.mark.slow
def test_the_run_records_each_aggregate_and_the_module_source_digest(runs):
  import hashlib
  import json
  with open(os.path.join(runs["offline"], "run_metadata.json"), encoding="utf-8") as f:
    meta = json.load(f)
  with open(runs["module"], "rb") as f:
    assert meta["transform_module_digest"] == "sha256:" + hashlib.sha256(f.read()).hexdigest()
  windows = {n: dict(zip(("size_seconds", "period_seconds", "offset_seconds", "zone"),
                         _window_of({"name": n})), type=w["type"])
             for n, w in OWN_WINDOWS.items()}
  assert meta["schema"]["aggregates"] == [
      dict({"name": a["name"], "fn": a["fn"], "column": a.get("column"),
            "group_by": [a["group_by"]] if isinstance(a["group_by"], str) else a["group_by"]},
           **({"window": windows[a["name"]]} if a["name"] in windows else {}))
      for a in AGGREGATES]


@pytest.mark.slow
def test_the_logger_given_the_online_values_logs_what_the_job_logs(runs):
  from replay import api
  off, pro = _log(runs["offline"]), _log(runs["production"])
  for agg in AGGREGATES:
    column = f"aggregate__{agg['name']}"
    assert off.column(column).equals(pro.column(column)), agg["name"]
  for stage in ("raw", "parse", "window", "shard", "serialize", "transform"):
    assert off.column(f"fp_{stage}").equals(pro.column(f"fp_{stage}")), stage
  report = api.diff(runs["offline"], runs["production"],
                    os.path.join(os.path.dirname(runs["production"]), "diff_same"))
  assert report.exit_code == 0
  assert report.to_dict()["records"]["divergent"] == 0


@pytest.mark.slow
def test_one_aggregate_window_shifted_parts_at_window_for_the_records_it_changes(runs):
  """Production counts area_trips in its 2-hour window offset by 45 min, not 30: the records
  whose area_trips changes (pandas, both offsets) part at window, every other is identical, and
  the cause names the aggregate's window."""
  from replay import api
  df = pd.read_csv(runs["csv"])
  size, period, offset, zone = _window_of({"name": "area_trips"})
  agg = dict(AGGREGATES[0])
  before = expected(df, agg, TIME, size, period, offset, zone)
  after = expected(df, agg, TIME, size, period, 2700, zone)
  changed = int((before != after).sum())
  assert 0 < changed < len(df)
  out = os.path.dirname(runs["shifted"])
  report = api.diff(runs["offline"], runs["shifted"], os.path.join(out, "diff_shift")).to_dict()
  assert report["first_divergent_stage"]["window"] == changed
  assert sum(report["first_divergent_stage"].values()) == changed
  assert report["records"]["identical"] == len(df) - changed
  causes = [(c["stage"], c["field"], c["offline"], c["production"], c["records"])
            for c in report["suspected_causes"]]
  assert ("window", "aggregates.area_trips.window.offset_seconds", 1800, 2700,
          changed) in causes
  assert not [c for c in causes if c[1].startswith("aggregates.") and "area_trips" not in c[1]]


@pytest.mark.slow
def test_a_wrong_online_mean_parts_at_window_for_exactly_those_records(runs):
  from replay import api
  report = api.diff(runs["offline"], runs["wrong"],
                    os.path.join(os.path.dirname(runs["wrong"]), "diff_wrong")).to_dict()
  assert len(runs["changed"]) > 100
  assert report["first_divergent_stage"]["window"] == len(runs["changed"])
  assert sum(report["first_divergent_stage"].values()) == len(runs["changed"])
  sample = report["samples"]["divergent"][0]
  assert sample["key"] in runs["changed"]
  off, wrong = sample["aggregates"]["company_mean_miles"]
  assert wrong == pytest.approx(off + 0.25, abs=1e-5)


@pytest.mark.slow
def test_a_mean_one_ulp_off_is_window_noise_and_a_count_one_off_is_not(runs):
  """The window fingerprint differs for every changed record; where only the mean moved (by
  float noise) the record is noise with its reason and values, where a count moved too it is
  divergent at window. Compared exactly, the same records are latent at window: never hidden."""
  from replay import api
  out = os.path.dirname(runs["ulp"])
  report = api.diff(runs["offline"], runs["ulp"], os.path.join(out, "diff_ulp")).to_dict()
  noisy, counted = len(runs["noisy"]), len(runs["counted"])
  assert noisy > 1000 and counted > 500
  assert report["records"]["noise"] == noisy
  assert report["stages"]["window"]["mismatch"] == noisy + counted
  assert report["first_divergent_stage"]["window"] == counted
  assert report["records"]["divergent"] == counted
  assert report["records"]["latent"] == 0
  assert {s["key"] for s in report["samples"]["divergent"]} <= runs["counted"]
  entry = report["noise"]["aggregates"]["company_mean_miles"]
  assert entry["records"] == noisy and list(report["noise"]["aggregates"]) == [
      "company_mean_miles"]
  assert report["noise"]["window_records"] == noisy
  off, pro = entry["largest"]
  assert pro == float(np.nextafter(off, np.inf)) and entry["max_abs_delta"] == pro - off
  assert any("company_mean_miles in %d record(s)" % noisy in w for w in report["noise"]["why"])
  exact = api.diff(runs["offline"], runs["ulp"], os.path.join(out, "diff_ulp_exact"),
                   abs_tol=0, rel_tol=0).to_dict()
  assert exact["records"]["noise"] == 0 and "aggregates" not in exact["noise"]
  assert exact["first_divergent_stage"]["window"] == noisy + counted
  assert exact["records"]["latent"] == noisy and exact["records"]["divergent"] == counted


@pytest.mark.slow
def test_online_aggregates_logged_beside_the_records_diff_clean_with_a_schema(runs, tmp_path):
  """A serving log (JSON Lines) holding each record with its online store's mean and count,
  ingested with the offline schema (which does not type the side columns) and transformed with
  the offline transform_fn: every aggregate as the job computed it, 0 divergent."""
  import json
  from replay import api
  records, aggregates = online_store.records_and_aggregates(runs["csv"], runs["offline"])
  path = tmp_path / "serving.jsonl"
  with open(path, "w", encoding="utf-8") as f:
    for r, a in zip(records, aggregates):
      cells = {k: None if v == "" else v for k, v in r.items()}  # JSON's null, CSV's ""
      f.write(json.dumps(dict(cells, online_mean=a["company_mean_miles"],
                              online_trips=a["area_trips"])) + "\n")
  data = ingest(tmp_path / "d", "--num_shards", "2", "--schema", TAXI_SCHEMA, "--key_columns",
                "trip_id", "--logged_aggregates",
                "online_mean=company_mean_miles,online_trips=area_trips", inputs=str(path))
  prod = features(data, tmp_path / "f", "--transform_module", runs["module"],
                  "--transform_fn_dir", os.path.join(runs["offline"], "transform_fn"))
  for agg in ("company_mean_miles", "area_trips"):
    column = f"aggregate__{agg}"
    assert _log(prod).column(column).equals(_log(runs["offline"]).column(column)), agg
  report = api.diff(runs["offline"], prod, str(tmp_path / "diff")).to_dict()
  assert report["records"]["divergent"] == 0 and report["records"]["latent"] == 0
  assert report["records"]["matched_keys"] == len(records)
