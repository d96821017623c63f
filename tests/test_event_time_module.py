"""Event time as feature modules declare it (EVENT_TIME_FORMAT / EVENT_TIME_ZONE,
transforms/spec/event_time.py) through pipelines.features: checked before the job runs, windowed
and logged in Unix seconds. Spec-level where no pipeline is needed; two small end-to-end runs."""
import datetime
import glob
import hashlib
import json
import os
import sys

import numpy as np
import pyarrow as pa
import pytest

from pipelines import common
from pipelines import features as job
from tests.conftest import ROOT, features, ingest
from transforms.spec import event_time, profile, stages, window

UTC = datetime.timezone.utc
BASE = 472222 * 3600  # 2023-11-14T22:00:00Z, a window boundary
SIX_HOURS = profile.parse_profile({
    "windowing": {"type": "fixed", "size_seconds": 6 * 3600, "period_seconds": 6 * 3600,
                  "offset_seconds": 0, "allowed_lateness_seconds": None},
    "sharding": {"num_shards": 2, "hash_seed": 0},
    "serialization": {"format": "tfrecord", "float_dtype": "float32"},
    "sampling": {"seed": 0, "fraction": 1.0}})


def _fingerprints(batch, column, form, zone="UTC", aggregates=()):
  """{key: window fingerprint} by the window stage's rule (spec/window.py), no watermark."""
  kept, dropped = window.assign_windows(batch, column, SIX_HOURS, None, event_format=form,
                                        event_zone=zone)
  assert dropped.num_rows == 0
  for agg in aggregates:
    kept = kept.append_column(agg["name"], window.aggregate_values(kept, agg, SIX_HOURS))
  kept = window.window_fingerprints(kept, [a["name"] for a in aggregates])
  return dict(zip(kept.column("__key__").to_pylist(),
                  kept.column(stages.WINDOW_FP).to_pylist()))


def test_iso_text_and_epoch_seconds_give_identical_window_fingerprints():
  rng = np.random.default_rng(7)
  seconds = BASE + rng.integers(0, 3 * 86400, 500)
  offsets = rng.integers(-12, 13, 500)

  def text(t, h, i):
    when = datetime.datetime.fromtimestamp(int(t), UTC)
    if i % 3 == 0:
      return when.strftime("%Y-%m-%dT%H:%M:%SZ")
    if i % 3 == 1:  # the same instant written in another zone
      return when.astimezone(datetime.timezone(datetime.timedelta(hours=int(h)))).isoformat()
    return when.replace(tzinfo=None).isoformat() + ".999"  # naive: EVENT_TIME_ZONE, UTC

  batch = pa.record_batch({
      "__key__": [f"k{i}" for i in range(500)], "g": pa.array(rng.integers(0, 5, 500)),
      "t": pa.array(seconds), "t_iso": [text(t, h, i) for i, (t, h) in enumerate(
          zip(seconds, offsets))]})
  aggregates = [{"name": "n", "group_by": "g", "fn": "count"}]
  want = _fingerprints(batch, "t", "seconds", aggregates=aggregates)
  assert _fingerprints(batch, "t_iso", "iso8601", aggregates=aggregates) == want
  assert len(set(want.values())) > 10
  # the log's event time and the watermark are the same Unix seconds
  assert window.event_seconds(batch.column("t_iso"), "iso8601").to_pylist() == seconds.tolist()
  assert window.latest_event_time(batch, "t_iso", "iso8601") == int(seconds.max())


def test_naive_iso_in_another_zone_moves_exactly_the_windows_that_change():
  # Etc/GMT-1 is UTC+1 (POSIX signs): a naive time read there is one hour earlier in UTC.
  rng = np.random.default_rng(11)
  naive = [datetime.datetime(2024, 3, 10) + datetime.timedelta(minutes=int(m))
           for m in rng.integers(0, 3 * 24 * 60, 400)]
  batch = pa.record_batch({"__key__": [f"k{i}" for i in range(400)],
                           "t": [d.isoformat() for d in naive]})
  size = SIX_HOURS.window_size
  plus_one = datetime.timezone(datetime.timedelta(hours=1))
  moved = {f"k{i}" for i, d in enumerate(naive)
           if int(d.replace(tzinfo=UTC).timestamp()) // size !=
           int(d.replace(tzinfo=plus_one).timestamp()) // size}
  utc = _fingerprints(batch, "t", "iso8601", "UTC")
  gmt1 = _fingerprints(batch, "t", "iso8601", "Etc/GMT-1")
  assert {k for k in utc if utc[k] != gmt1[k]} == moved
  assert 0 < len(moved) < 400


@pytest.mark.parametrize("typ, form, refused", [
    (pa.timestamp("us", "UTC"), "seconds", False), (pa.date32(), "timestamp", False),
    (pa.timestamp("s"), "iso8601", True), (pa.date32(), "ms", True),
    (pa.timestamp("ns"), "ns", True), (pa.int64(), "iso8601", True),
    (pa.float64(), "iso8601", True), (pa.int64(), "ms", False), (pa.string(), "ms", False),
    (pa.large_binary(), "iso8601", False), (pa.null(), "iso8601", False),
    (pa.decimal128(12, 2), "iso8601", True), (pa.decimal128(12, 2), "seconds", False),
    (pa.bool_(), "seconds", True)])
def test_which_source_types_can_carry_each_event_time_form(typ, form, refused):
  """A timestamp or date is its Unix seconds in the canonical value model (docs/fingerprint.md):
  it can say "seconds" and "timestamp", not ISO-8601 text nor a count of ms/us/ns; a number
  cannot say ISO-8601 text; text and null can say anything (the window stage judges them)."""
  problem = event_time.source_problem(typ, form)
  assert (problem is not None) == refused
  if refused:
    assert str(typ) in problem or "number" in problem or "boolean" in problem
    assert f"EVENT_TIME_FORMAT {form!r}" in problem


def test_a_python_type_has_one_arrow_class_whatever_its_value():
  """The logger decides an event-time value by its Python type (replay/logger/accept.py caches
  it): an int beyond int64 is still a number, a zoned or naive datetime an instant."""
  import decimal
  from transforms.spec import typing as cells
  want = {int: pa.float64(), float: pa.float64(), decimal.Decimal: pa.float64(),
          np.int32: pa.float64(), np.float32: pa.float64(), bool: pa.bool_(),
          datetime.datetime: pa.timestamp("s"), datetime.date: pa.timestamp("s"),
          np.datetime64: pa.timestamp("s"), str: pa.string(), bytes: pa.string(),
          type(None): pa.string()}
  assert {t: cells.arrow_class(t) for t in want} == want
  for value in (2 ** 64, 1_700_000_000, decimal.Decimal("NaN")):  # refused for ISO-8601 text
    assert event_time.source_problem(cells.arrow_class(type(value)), "iso8601")
  assert event_time.source_problem(cells.arrow_class(str), "iso8601") is None


def test_feature_log_event_time_is_unix_seconds():
  from transforms.stages import write_feature_log as fl
  batch = pa.record_batch({
      "__key__": pa.array(["a", "b", "c"], pa.large_string()),
      "t": pa.array([BASE * 1000 + 999, None, (BASE + 61) * 1000], pa.int64()),
      "__drop_reason__": pa.array(["late"] * 3), "__raw_fp__": pa.array([1, 2, 3]),
      "__parse_fp__": pa.array([4, 5, 6])})
  cols = fl._head(batch, ("t", "ms", "UTC"), dropped=True)
  assert cols["event_time"].type == pa.int64()
  assert cols["event_time"].to_pylist() == [BASE, None, BASE + 61]


def test_run_metadata_schema_names_the_event_time_formats_there_are():
  with open(os.path.join(ROOT, "manifests", "run_metadata.schema.json"), encoding="utf-8") as f:
    schema = json.load(f)
  assert tuple(schema["properties"]["event_time"]["properties"]["format"]["enum"]) == \
      event_time.FORMATS


# End to end: rides whose event time the CSV holds twice, as epoch milliseconds and as ISO-8601
# text (Z, offsets, naive UTC), with fractions of a second.
ROWS = 240
MODULE = '''
import tensorflow as tf
import tensorflow_transform as tft
EVENT_TIME_COLUMN = {column!r}
{declaration}
WINDOWED_AGGREGATES = [{{"name": "station_rides", "group_by": "station", "fn": "count"}}]


def _dense(x, default):
  return tf.squeeze(tf.sparse.to_dense(
      tf.SparseTensor(x.indices, x.values, [x.dense_shape[0], 1]), default), axis=1)


def preprocessing_fn(inputs):
  amount = tf.cast(_dense(inputs["amount"], 0.0), tf.float32)
  return {{"amount_z": tft.scale_to_z_score(amount),
           "station_rides": _dense(inputs["station_rides"], 0)}}
'''


def _csv(path):
  rng = np.random.default_rng(3)
  lines = ["ride,ts_ms,ts_iso,station,amount"]
  for i in range(ROWS):
    ms = (BASE + int(rng.integers(0, 2 * 86400))) * 1000 + int(rng.integers(0, 1000))
    when = datetime.datetime.fromtimestamp(ms / 1000, UTC)
    text = [when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            when.astimezone(datetime.timezone(datetime.timedelta(hours=-7)))
            .isoformat(timespec="milliseconds"),
            when.replace(tzinfo=None).isoformat(timespec="milliseconds")][i % 3]
    lines.append(f"r{i},{ms},{text},{int(rng.integers(0, 4))},{rng.uniform(1, 50):.2f}")
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  return str(path)


def _module(directory, name, column, **declared):
  declaration = "\n".join(f"{k} = {v!r}" for k, v in declared.items())
  (directory / f"{name}.py").write_text(MODULE.format(column=column, declaration=declaration),
                                        encoding="utf-8")
  return name


@pytest.fixture(scope="module")
def rides(tmp_path_factory):
  """(the rides dataset, a folder of feature modules on sys.path)."""
  tmp = tmp_path_factory.mktemp("rides")
  data = ingest(tmp / "ingest", "--num_shards", "2", inputs=_csv(tmp / "rides.csv"))
  modules = tmp / "modules"
  modules.mkdir()
  _module(modules, "rides_ms_as_seconds", "ts_ms")  # no EVENT_TIME_FORMAT: seconds
  _module(modules, "rides_ms", "ts_ms", EVENT_TIME_FORMAT="ms")
  _module(modules, "rides_iso", "ts_iso", EVENT_TIME_FORMAT="iso8601")
  _module(modules, "rides_iso_on_int", "ts_ms", EVENT_TIME_FORMAT="iso8601")
  _module(modules, "rides_bad_format", "ts_ms", EVENT_TIME_FORMAT="millis")
  _module(modules, "rides_bad_zone", "ts_iso", EVENT_TIME_FORMAT="iso8601",
          EVENT_TIME_ZONE="Mars/Olympus")
  sys.path.insert(0, str(modules))
  yield data
  sys.path.remove(str(modules))


def _argv(data, out, module, *extra):
  return ["--input_dir", data, "--output_dir", str(out), "--transform_module", module,
          "--profile", os.path.join(ROOT, "profiles", "offline.yaml")] + list(extra)


def test_ms_epoch_declared_as_seconds_exits_2_in_one_line_and_leaves_the_output_alone(
    rides, tmp_path, monkeypatch, capsys):
  out = tmp_path / "out"
  out.mkdir()
  (out / "keep.txt").write_text("x")
  for target, extra in ((out, ["--overwrite"]), (tmp_path / "new", [])):
    monkeypatch.setattr(sys, "argv", ["features"] + _argv(rides, target,
                                                          "rides_ms_as_seconds", *extra))
    with pytest.raises(SystemExit) as e:
      common.main_wrapper(job.run)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert err[0].startswith("error: --transform_module rides_ms_as_seconds: event time column "
                             "'ts_ms': ")
    assert "outside the years 1971-2200; it reads as a plausible time in 'ms'" in err[0]
  assert os.listdir(out) == ["keep.txt"] and (out / "keep.txt").read_text() == "x"
  assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("module, message", [
    ("rides_iso_on_int", r"event time column has type int64, but EVENT_TIME_FORMAT 'iso8601' "
                         r"needs text$"),
    ("rides_bad_format", r"EVENT_TIME_FORMAT 'millis' is not one of seconds, ms"),
    ("rides_bad_zone", r"EVENT_TIME_ZONE 'Mars/Olympus' is not a known time zone$"),
])
def test_event_time_declarations_that_do_not_fit_are_usage_errors(rides, tmp_path, module,
                                                                  message):
  with pytest.raises(common.UsageError, match=f"^--transform_module {module}: {message}"):
    job.run(_argv(rides, tmp_path / "out", module))
  assert not (tmp_path / "out").exists()


def test_event_column_reads_from_tfrecord_shards_when_there_is_no_parquet(rides):
  from pipelines import dataset
  manifest = dataset.load_manifest(rides)
  parquet = pa.concat_arrays(list(job.read_dataset_column(rides, manifest, "ts_ms", pa.int64())))
  only_tfrecord = dict(manifest, shards=[s for s in manifest["shards"]
                                         if s["format"] == "tfrecord"])
  assert len(only_tfrecord["shards"]) == 2
  tfrecord = pa.concat_arrays(list(job.read_dataset_column(rides, only_tfrecord, "ts_ms",
                                                         pa.int64())))
  assert sorted(tfrecord.to_pylist()) == sorted(parquet.to_pylist()) and len(parquet) == ROWS


def _hashes(root):
  return {os.path.relpath(p, root): hashlib.sha256(open(p, "rb").read()).hexdigest()
          for p in sorted(glob.glob(os.path.join(root, "feature_log", "*")) +
                          glob.glob(os.path.join(root, "transformed", "*")))}


def test_iso_text_and_ms_epoch_give_the_same_feature_log(rides, tmp_path):
  # One dataset, its event time read from either column: the same instants, so the same
  # windows, counts and records everywhere -- the log (event_time in Unix seconds) is the same
  # bytes. The run metadata records each declaration.
  iso = features(rides, tmp_path / "iso", "--transform_module", "rides_iso")
  ms = features(rides, tmp_path / "ms", "--transform_module", "rides_ms")
  assert _hashes(iso) == _hashes(ms) and len(_hashes(iso)) == 32
  import pyarrow.parquet as pq
  log = pa.concat_tables([pq.read_table(p) for p in glob.glob(os.path.join(iso, "feature_log",
                                                                           "*.parquet"))])
  times = log.column("event_time").to_numpy()
  assert log.num_rows == ROWS and BASE <= times.min() and times.max() < BASE + 2 * 86400
  assert (log.column("window_start").to_numpy() == times // 3600 * 3600).all()
  metas = [json.load(open(os.path.join(d, "run_metadata.json"), encoding="utf-8"))
           for d in (iso, ms)]
  assert [m["event_time"] for m in metas] == [
      {"column": "ts_iso", "format": "iso8601", "zone": "UTC"},
      {"column": "ts_ms", "format": "ms", "zone": "UTC"}]
