"""One transform_fn against serving logs whatever form their event time arrived in (ingest
--event_time COLUMN=FORM[:ZONE], docs/features.md "Event time"): the taxi sample written with its
event time as Parquet TIMESTAMPs of every unit (UTC, a zone, none), ISO-8601 text in three zones,
naive text in a zone, a DATE and a time of day, and epoch milliseconds, each ingested as
production's log. Each dataset is the offline one record for record (content digest: raw and
parse fingerprints, stored values), and each is replayed with the offline run's transform_fn to
no divergence, exit 0; a module taking ISO text is handed its own form from any of them."""
import csv
import datetime
import glob
import json
import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from replay.diff import job as diff
from tests.conftest import ROOT, features, ingest

pytestmark = pytest.mark.slow  # the end-to-end tier (pytest.ini)

EVENT = "trip_start_timestamp"
ROOT_DATA = os.path.join(ROOT, "data", "chicago_taxi")
ZONES = ("Z", "+05:30", "-06:00")


def _offline_table(dataset):
  """The offline dataset's records as the ingest typed them (its Parquet shards, no key or
  fingerprint columns)."""
  tables = [pq.read_table(p) for p in sorted(glob.glob(os.path.join(dataset, "parquet", "*")))]
  table = pa.concat_tables(tables)
  return table.select([n for n in table.schema.names if not n.startswith("__")])


def _iso(seconds, i):
  """ISO-8601 text of Unix seconds in one of three zones, chosen by the row (datetime, not the
  code under test)."""
  zone = ZONES[i % 3]
  hours = 0 if zone == "Z" else int(zone[:3])
  minutes = 0 if zone == "Z" else int(zone[0] + zone[4:])
  when = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).astimezone(
      datetime.timezone(datetime.timedelta(hours=hours, minutes=minutes)))
  return when.strftime("%Y-%m-%dT%H:%M:%S") + zone


def _naive(seconds, zone):
  import zoneinfo
  return datetime.datetime.fromtimestamp(seconds, zoneinfo.ZoneInfo(zone)).strftime(
      "%Y-%m-%d %H:%M:%S")


@pytest.fixture(scope="module")
def logs(taxi_runs, tmp_path_factory):
  """{name: (production dataset, --event_time)}: each form written here from the offline
  records, then ingested (4 shards, types from the offline dataset)."""
  d = tmp_path_factory.mktemp("event_forms")
  offline = taxi_runs["direct"]
  table = _offline_table(offline)
  i = table.schema.get_field_index(EVENT)
  seconds = table.column(i).combine_chunks()
  assert seconds.null_count == 0
  secs = seconds.to_pylist()

  def parquet(name, arr):
    path = str(d / f"{name}.parquet")
    pq.write_table(table.set_column(i, EVENT, arr), path)
    return path

  files = {}
  for unit, per, zone in (("s", 1, "UTC"), ("ms", 1_000, "America/Chicago"), ("us", 10 ** 6, None),
                          ("ns", 10 ** 9, "Asia/Kolkata")):
    files[f"timestamp_{unit}"] = (parquet(f"ts_{unit}", pa.array(
        [s * per for s in secs], pa.timestamp(unit, tz=zone))), f"{EVENT}=timestamp")
  files["iso_three_zones"] = (str(d / "iso.jsonl"), f"{EVENT}=iso8601")
  with open(files["iso_three_zones"][0], "w", encoding="utf-8") as f:
    for n, row in enumerate(table.to_pylist()):
      row[EVENT] = _iso(row[EVENT], n)
      f.write(json.dumps(row) + "\n")
  files["naive_chicago"] = (parquet("naive", pa.array([_naive(s, "America/Chicago")
                                                       for s in secs])),
                            f"{EVENT}=iso8601:America/Chicago")
  # a DATE and the time of day as text, in Chicago: the event time composed by ingest
  import zoneinfo
  local = [datetime.datetime.fromtimestamp(s, zoneinfo.ZoneInfo("America/Chicago")) for s in secs]
  path = str(d / "date_time.parquet")
  pq.write_table(table.remove_column(i).append_column(
      "pickup_date", pa.array([t.date() for t in local], pa.date32())).append_column(
      "pickup_time", pa.array([t.strftime("%H:%M") for t in local])), path)
  files["date_and_time"] = (path, f"{EVENT}=pickup_date+pickup_time:America/Chicago")
  files["epoch_ms_csv"] = (str(d / "ms.csv"), f"{EVENT}=ms")
  with open(files["epoch_ms_csv"][0], "w", newline="", encoding="utf-8") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(table.schema.names)
    for row in table.to_pylist():
      row[EVENT] = row[EVENT] * 1000
      w.writerow(["" if v is None else repr(v) if isinstance(v, float) else v
                  for v in row.values()])
  return {name: (ingest(d / f"ds_{name}", "--num_shards", "4", "--schema_from", offline,
                        "--event_time", flag, inputs=path), flag)
          for name, (path, flag) in files.items()}


def _manifest(folder):
  with open(os.path.join(folder, "manifest.json"), encoding="utf-8") as f:
    return json.load(f)


FORMS = ("timestamp_s", "timestamp_ms", "timestamp_us", "timestamp_ns", "iso_three_zones",
         "naive_chicago", "date_and_time", "epoch_ms_csv")


@pytest.mark.parametrize("name", FORMS)
def test_every_event_time_form_ingests_to_the_offline_records(logs, taxi_runs, name):
  offline = _manifest(taxi_runs["direct"])
  dataset, flag = logs[name]
  m = _manifest(dataset)
  rows = _offline_table(taxi_runs["direct"]).num_rows
  assert m["rows"] == {"read": rows, "written": rows, "rejected": 0}
  # the same records: raw and parse fingerprints and stored values (INT Unix seconds)
  assert m["content_digest"] == offline["content_digest"]
  column, form_zone = flag.split("=")
  form, _, zone = form_zone.partition(":")
  parts = form.split("+") if "+" in form else None
  assert m["event_time"] == dict({"column": column, "format": "date+time" if parts else form,
                                  "zone": zone or "UTC"}, **({"parts": parts} if parts else {}))
  assert {c["name"]: c["type"] for c in m["schema"]["columns"]}[EVENT] == "INT"
  # a composed event time's date and time stay in the dataset as context, outside the record
  assert m.get("side_columns", {}).get("context") == ({p: p for p in parts} if parts else None)


@pytest.mark.parametrize("name", FORMS)
def test_every_form_replays_with_the_offline_transform_fn(logs, taxi_features, tmp_path, name):
  """Production's log in each form, through the features job with the offline run's
  transform_fn, diffed against the offline run: every record identical, exit 0."""
  offline = taxi_features["direct"]
  production = features(logs[name][0], tmp_path / "prod", "--transform_fn_dir",
                        os.path.join(offline, "transform_fn"))
  code = diff.run(["--offline", offline, "--production", production,
                   "--output_dir", str(tmp_path / "diff")])
  with open(tmp_path / "diff" / "report.json", encoding="utf-8") as f:
    records = json.load(f)["records"]
  assert code == 0
  assert records["divergent"] == 0 and records["identical"] == records["offline"] == 15002


def test_a_module_taking_iso_text_is_handed_its_form_from_any_dataset(logs, tmp_path):
  """A module whose preprocessing_fn takes ISO-8601 text (EVENT_TIME_FORMAT "iso8601"), its
  offline run over naive Chicago text, replays production's epoch-ms CSV log: the column
  reaches the transform as the module's text, so every record is identical."""
  modules = tmp_path / "modules"
  modules.mkdir()
  (modules / "taxi_iso_text.py").write_text(
      "from transforms.features.taxi import KEY_COLUMNS, WINDOWED_AGGREGATES  # noqa: F401\n"
      "import tensorflow as tf\n"
      "from transforms.features import taxi\n"
      f"EVENT_TIME_COLUMN = {EVENT!r}\n"
      "EVENT_TIME_FORMAT = 'iso8601'\n"
      "EVENT_TIME_ZONE = 'America/Chicago'\n\n"
      "def preprocessing_fn(inputs):\n"
      "  out = taxi.preprocessing_fn(inputs)\n"
      "  # the local hour from the text the module is handed: 'YYYY-MM-DDTHH...'\n"
      f"  text = taxi._fill_in_missing(inputs[{EVENT!r}])\n"
      "  out['local_hour'] = tf.strings.to_number(tf.strings.substr(text, 11, 2), tf.int64)\n"
      "  return out\n")
  import sys
  sys.path.insert(0, str(modules))
  try:
    offline = features(logs["naive_chicago"][0], tmp_path / "off", "--transform_module",
                       "taxi_iso_text")
    production = features(logs["epoch_ms_csv"][0], tmp_path / "prod", "--transform_module",
                          "taxi_iso_text", "--transform_fn_dir",
                          os.path.join(offline, "transform_fn"))
  finally:
    sys.path.remove(str(modules))
  code = diff.run(["--offline", offline, "--production", production,
                   "--output_dir", str(tmp_path / "diff")])
  with open(tmp_path / "diff" / "report.json", encoding="utf-8") as f:
    records = json.load(f)["records"]
  assert code == 0 and records["divergent"] == 0 and records["identical"] == 15002
  # the hour the transform read from production's epoch ms is Chicago's local hour of the
  # instant (zoneinfo here, not the code under test)
  import zoneinfo
  log = pa.concat_tables([pq.read_table(p) for p in sorted(glob.glob(
      os.path.join(production, "feature_log", "*.parquet")))])
  chicago = zoneinfo.ZoneInfo("America/Chicago")
  want = [datetime.datetime.fromtimestamp(t, chicago).hour
          for t in log.column("event_time").to_pylist()]
  assert log.column("value__local_hour").to_pylist() == want and len(set(want)) == 24


def test_an_event_time_that_is_no_instant_is_rejected_with_its_reason(tmp_path):
  path = tmp_path / "log.csv"
  path.write_text("id,when,x\n1,2024-03-01T10:00:00Z,1\n2,yesterday,2\n3,,3\n"
                  "4,2024-03-01T10:00:00.5+01:00,4\n5,9999-01-01T00:00:00Z,5\n")
  out = ingest(tmp_path / "ds", "--key_columns", "id", "--event_time", "when=iso8601",
               "--max_rejected_fraction", "1", inputs=str(path))
  m = _manifest(out)
  assert m["rows"] == {"read": 5, "written": 3, "rejected": 2}
  with open(os.path.join(out, m["rejected"]["path"]), encoding="utf-8") as f:
    reasons = sorted(json.loads(line)["reason"] for line in f)
  assert reasons == [
      "column 'when': '9999-01-01T00:00:00Z' is not an instant of event-time form 'iso8601' "
      "within the years 1971-2200",
      "column 'when': 'yesterday' is not an instant of event-time form 'iso8601' within the "
      "years 1971-2200"]
  table = pa.concat_tables([pq.read_table(p) for p in glob.glob(os.path.join(out, "parquet",
                                                                              "*"))])
  got = dict(zip(table.column("id").to_pylist(), table.column("when").to_pylist()))
  instant = int(datetime.datetime(2024, 3, 1, 10, tzinfo=datetime.timezone.utc).timestamp())
  assert got == {1: instant, 3: None, 4: instant - 3600}  # 09:00:00.5Z floored


def test_a_date_and_a_time_compose_the_event_time_in_their_zone(tmp_path):
  path = tmp_path / "log.csv"
  path.write_text("id,day,at,x\n1,2024-03-10,01:30,1\n2,2024-03-10,03:30,2\n3,2024-03-10,,3\n"
                  "4,,,4\n5,2024-03-10,7,5\n6,2024-13-01,10:00,6\n")
  out = ingest(tmp_path / "ds", "--key_columns", "id", "--event_time",
               "when=day+at:America/New_York", "--max_rejected_fraction", "1",
               inputs=str(path))
  m = _manifest(out)
  assert m["rows"] == {"read": 6, "written": 4, "rejected": 2}
  with open(os.path.join(out, m["rejected"]["path"]), encoding="utf-8") as f:
    reasons = sorted(json.loads(line)["reason"] for line in f)
  assert reasons == [
      f"column 'when': {text!r} is not an instant of event-time form 'date+time' within the "
      f"years 1971-2200" for text in ("2024-03-10T", "2024-13-01T10:00")]
  table = pa.concat_tables([pq.read_table(p) for p in glob.glob(os.path.join(out, "parquet",
                                                                              "*"))])
  got = dict(zip(table.column("id").to_pylist(), table.column("when").to_pylist()))
  import zoneinfo
  ny = zoneinfo.ZoneInfo("America/New_York")  # 2024-03-10 is the spring DST change there

  def at(h, mi):
    return int(datetime.datetime(2024, 3, 10, h, mi, tzinfo=ny).timestamp())
  assert got == {1: at(1, 30), 2: at(3, 30), 4: None, 5: at(7, 0)}
  assert at(3, 30) - at(1, 30) == 3600  # an hour apart on the clock's two-hour gap
  assert [c["name"] for c in m["schema"]["columns"]] == ["id", "day", "at", "x", "when"]
  assert m["side_columns"]["context"] == {"at": "at", "day": "day"}


@pytest.mark.parametrize("form, zone", [("seconds", "UTC"), ("timestamp", "UTC"), ("ms", "UTC"),
                                        ("us", "UTC"), ("ns", "UTC"),
                                        ("iso8601", "America/Chicago"), ("iso8601", "UTC")])
def test_the_module_is_handed_its_own_form_and_reads_back_the_same_instant(form, zone):
  """module_form: Unix seconds (nulls kept) in the form a module declares; the window stage
  reading that form (to_seconds) gets the same seconds back."""
  from transforms.spec import event_time
  seconds = pa.array([1352113200, None, 1400269500, 86400 * 365 * 2], pa.int64())
  handed = event_time.module_form(seconds, form, zone)
  want = {"ms": 10 ** 3, "us": 10 ** 6, "ns": 10 ** 9}
  if form in want:
    assert handed.to_pylist() == [None if s is None else s * want[form]
                                  for s in seconds.to_pylist()]
  if form == "iso8601":  # the wall-clock text in the zone, with its offset
    import zoneinfo
    when = datetime.datetime.fromtimestamp(1352113200, zoneinfo.ZoneInfo(zone))
    assert handed[0].as_py() == when.strftime("%Y-%m-%dT%H:%M:%S%z")
  read = "seconds" if form == "timestamp" else form
  back, has, bad = event_time.to_seconds(handed, read, zone)
  assert has.tolist() == [True, False, True, True] and not bad.any()
  assert [int(b) if h else None for b, h in zip(back, has)] == seconds.to_pylist()


def _taxi_with_ts(tmp_path):
  """The taxi CSV with a copy of its event time as column ts."""
  with open(os.path.join(ROOT_DATA, "data.csv"), newline="", encoding="utf-8") as f:
    rows = list(csv.reader(f))
  i = rows[0].index(EVENT)
  path = tmp_path / "taxi_ts.csv"
  with open(path, "w", newline="", encoding="utf-8") as f:
    w = csv.writer(f, lineterminator="\n")
    for n, row in enumerate(rows):
      w.writerow(row + ["ts" if n == 0 else row[i]])
  return str(path)


@pytest.mark.parametrize("flag, extra, message", [
    ("ts=seconds", ["--key_columns", "ts"], None),  # a key may be the event time itself
    ("trip_start_timestamp=trip_start_month+ts", [],
     "'trip_start_timestamp' is a column of the input"),
    ("when=ts+trip_start_hour", ["--key_columns", "ts"], "--event_time column 'ts' cannot be a key"),
    ("when=ts+trip_start_hour+x", [], "wants COLUMN=FORM[:ZONE] or COLUMN=DATE+TIME"),
    ("company=iso8601", ["--schema", "SCHEMA"], "the types given make it BYTES"),
])
def test_event_time_flags_the_input_cannot_take_are_one_line_usage_errors(tmp_path, flag, extra,
                                                                           message):
  from pipelines import common
  from pipelines import ingest as ingest_job
  from tests.conftest import TAXI_SCHEMA
  argv = ["--input", _taxi_with_ts(tmp_path), "--output_dir", str(tmp_path / "out"),
          "--event_time", flag] + [TAXI_SCHEMA if a == "SCHEMA" else a for a in extra]
  if message is None:
    assert ingest_job.run(argv + ["--max_rejected_fraction", "1"]) == 0
    return
  with pytest.raises(common.UsageError, match=re.escape(message)):
    ingest_job.run(argv)
  assert not os.path.exists(tmp_path / "out" / "manifest.json")


def test_a_module_whose_event_column_is_not_the_recorded_one_is_refused(tmp_path):
  from pipelines import common
  data = ingest(tmp_path / "ds", "--event_time", "ts=seconds", inputs=_taxi_with_ts(tmp_path))
  with pytest.raises(common.UsageError, match=r"the dataset's event time is column 'ts' \(ingest "
                                              r"--event_time\), transforms.taxi's "
                                              r"EVENT_TIME_COLUMN is 'trip_start_timestamp'"):
    features(data, tmp_path / "f")
  assert not os.path.exists(tmp_path / "f" / "run_metadata.json")
