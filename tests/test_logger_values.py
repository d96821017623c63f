"""What the production logger accepts as a cell: typed Python values under the canonical value
model (transforms/spec/typing.py over spec/values.py and spec/schema.py), the same records as
CSV text and as typed values logging alike at every stage, the per-record coding agreeing with
the logger's vectorised one, and the feature module's event-time declaration."""
import datetime
import decimal

import numpy as np
import pyarrow as pa
import pytest

from pipelines import common
from tests.test_logger import AGG, _logger, _meta, _read_log, _small, canonical, json_records
from transforms.spec import fingerprint, schema
from transforms.spec import typing as cells
from transforms.spec.stages import KEY, PARSE, SHARD, SHARD_ID, TRANSFORM, WINDOW, WINDOW_END, \
    WINDOW_START

UTC = datetime.timezone.utc


def _canonical(values, empty_is_null=False):
  return cells.canonical_cells(cells.arrow_cells(values, empty_is_null), len(values)).to_pylist()


def _typed(values, typ):
  typed, bad, not_utf8 = cells.type_cells(cells.arrow_cells(values), len(values), typ)
  return typed.to_pylist(), bad.tolist(), not_utf8.tolist()


# --------------------------------------------------------------------------- spec/typing.py
def test_every_way_of_saying_zero_is_canonical_zero():
  zeros = ["0.0", "0", "-0", 0, 0.0, -0.0, np.float32(0), np.int8(0), np.float64(-0.0),
           decimal.Decimal("0.00")]
  assert set(_canonical(zeros)) == {"0"}
  assert _typed(zeros, schema.FLOAT) == ([0.0] * len(zeros), [], [])
  assert _typed(zeros, schema.INT) == ([0] * len(zeros), [], [])


def test_numbers_take_their_shortest_text_a_float32_its_own_width():
  # An integer keeps its digits at any length (spec/values.py); a float its shortest text.
  assert _canonical([12.45, np.float32(12.45), "12.450", 1e20, 2 ** 70, float(2 ** 70),
                     float("nan")]) == [
      "12.45", "12.45", "12.45", "1e+20", "1180591620717411303424", "1.1805916207174113e+21",
      "nan"]
  # A string column keeps a text's own text, other values' canonical text.
  assert _typed(["1.10", 1.1, True, b"x"], schema.BYTES)[0] == ["1.10", "1.1", "true", "x"]
  assert _typed([True, 1.5, "x", 7], schema.INT) == ([None, None, None, 7], [0, 1, 2], [])


def test_instants_are_unix_seconds_whatever_their_zone():
  instant = 1362683700  # 2013-03-07T19:15:00Z
  plus_one = datetime.timezone(datetime.timedelta(hours=1))
  values = [instant, str(instant), "2013-03-07T19:15:00Z", "2013-03-07T20:15:00+01:00",
            datetime.datetime(2013, 3, 7, 19, 15, tzinfo=UTC),
            datetime.datetime(2013, 3, 7, 20, 15, tzinfo=plus_one),
            datetime.datetime(2013, 3, 7, 19, 15),  # no zone: read as UTC, as Arrow does
            np.datetime64("2013-03-07T19:15:00", "s")]
  assert set(_canonical(values)) == {str(instant)}
  assert _typed(values, schema.INT)[0] == [instant] * len(values)
  assert _canonical([datetime.date(2013, 3, 7)]) == ["1362614400"]
  assert _canonical(["2013-03-07T19:15:00"]) == ["2013-03-07T19:15:00"]  # naive text: text


def test_mixed_kinds_keep_their_rows_and_nulls():
  values = [1, "2.0", None, 3.5, "", b"4", np.int32(5), "x", None]
  assert _canonical(values) == ["1", "2", None, "3.5", "", "4", "5", "x", None]
  assert _canonical(values, empty_is_null=True)[4] is None
  assert _typed(values, schema.FLOAT) == ([1.0, 2.0, None, 3.5, None, 4.0, 5.0, None, None],
                                          [4, 7], [])
  groups = cells.arrow_cells(values)
  assert [cells.cell_text(groups, i) for i in (1, 3, 7)] == ["2.0", "3.5", "x"]


def test_bytes_that_are_not_utf8_stay_bytes_and_leave_the_others_alone():
  values = [b"\xff\xfe", b"1.0", "2.50"]
  assert _canonical(values) == [b"\xff\xfe", b"1", b"2.5"]
  assert _typed(values, schema.FLOAT) == ([None, 1.0, 2.5], [], [0])
  assert _typed(values, schema.BYTES) == ([None, "1.0", "2.50"], [], [0])


@pytest.mark.parametrize("value", [[1], {"a": 1}, object(), {1}])
def test_a_value_that_is_not_a_scalar_is_refused(value):
  with pytest.raises(cells.ScalarTypeError, match=f"got {type(value).__name__}"):
    cells.arrow_cells([1, value])


# --------------------------------------------------------------------------- the logger
def _variant(record, i, types):
  """Record i with its values as one of several Python types serving code may hold."""
  out = {}
  for name, text in record.items():
    typ = types[name]
    if text in ("", None):
      out[name] = None if i % 2 else ""
    elif typ == schema.INT and name == "trip_start_timestamp" and i % 3 == 0:
      out[name] = datetime.datetime.fromtimestamp(int(text), UTC)
    elif typ == schema.INT:
      out[name] = [int(text), np.int64(text), text][i % 3]
    elif typ == schema.FLOAT:
      out[name] = [float(text), np.float64(text), decimal.Decimal(text), text][i % 4]
    else:
      out[name] = [text, text.encode("utf-8"), np.str_(text)][i % 3]
  return out


def test_typed_values_log_the_fingerprints_of_their_text_at_every_stage(offline, taxi,
                                                                         tmp_path):
  records, aggs = _small(taxi, 600)
  types = {c["name"]: c["type"] for c in _meta(offline)["schema"]["columns"]}
  typed = [_variant(r, i, types) for i, r in enumerate(records)]
  with _logger(offline, tmp_path / "text") as logger:
    logger.log_batch(records, aggs)
  with _logger(offline, tmp_path / "typed") as logger:
    for record, agg in zip(typed, aggs):
      logger.log(record, agg)
  text, got = (_read_log(str(tmp_path / d)).sort_by("key") for d in ("text", "typed"))
  assert text.num_rows == 600 and text.equals(got)


def test_the_per_record_coding_gives_the_logged_fingerprints(offline, taxi, tmp_path):
  """The logger fingerprints with the vectorised coding, as the job; fingerprint_record (the
  per-record coding) of the same values gives the same fingerprints."""
  records, aggs = _small(taxi, 200)
  with _logger(offline, tmp_path) as logger:
    logger.log_batch(json_records(records, offline), aggs)
  meta = _meta(str(tmp_path))
  columns = [(c["name"], c["type"]) for c in meta["schema"]["columns"]]
  names = [n for n, _ in columns]
  rows = {r["fp_raw"]: r for r in _read_log(str(tmp_path)).to_pylist()}
  fp = fingerprint.fingerprint_record
  for record, agg in zip(records, aggs):
    row = rows[fp({n: canonical(record[n] or None) for n in names})]
    typed = {n: schema.type_column(pa.array([record[n] or None], pa.string()), t)[0][0].as_py()
             for n, t in columns}
    assert row["fp_parse"] == fp(typed, PARSE.fingerprint_fields(columns=names))
    assert row["fp_window"] == fp({WINDOW_START: row["window_start"],
                                   WINDOW_END: row["window_end"], **agg},
                                  WINDOW.fingerprint_fields(aggregates=[AGG]))
    assert row["fp_shard"] == fp({SHARD_ID: row["shard_id"], KEY: row["key"]},
                                 SHARD.fingerprint_fields())
    features = {c[len("value__"):]: v for c, v in row.items() if c.startswith("value__")}
    assert row["fp_transform"] == fp(features, TRANSFORM.fingerprint_fields(
        features=sorted(features)))
    assert all(row[f"fp__{f}"] == fp({f: v}) for f, v in features.items())


def test_event_time_is_read_in_the_declared_format(offline, taxi, tmp_path):
  """An event time in milliseconds, declared so, gives the windows and event_time (Unix
  seconds) of the same records in seconds; the watermark is Unix seconds or a zoned datetime."""
  records, aggs = _small(taxi, 300)
  ms = [dict(r, trip_start_timestamp=str(int(r["trip_start_timestamp"]) * 1000 + 999))
        for r in records]
  latest = max(int(r["trip_start_timestamp"]) for r in records)
  mark = datetime.datetime.fromtimestamp(latest, UTC)
  with _logger(offline, tmp_path / "s") as logger:
    logger.log_batch(records, aggs, watermark=latest)
  with _logger(offline, tmp_path / "ms", event_time_format="ms") as logger:
    logger.log_batch(ms, aggs, watermark=mark)
  head = ["event_time", "window_start", "window_end", "dropped_stage"]
  seconds, millis = (sorted(map(tuple, _read_log(str(tmp_path / d)).select(head).to_pylist()))
                     for d in ("s", "ms"))
  assert seconds == millis and len(seconds) == 300


def test_an_event_time_value_that_cannot_say_the_declared_form_is_refused(offline, taxi,
                                                                          tmp_path):
  """A datetime is its Unix seconds in the canonical value model: logged for an event time
  declared in seconds, it gives the windows of the integer; for one declared in ms, every
  record would be dropped at window, so log() and log_table() refuse it, one line, nothing
  accepted."""
  from replay.logger.accept import RecordError
  records, aggs = _small(taxi, 200)
  event = "trip_start_timestamp"
  as_dt = [dict(r, **{event: datetime.datetime.fromtimestamp(int(r[event]), UTC)})
           if r[event] else r for r in records]
  assert sum(isinstance(r[event], datetime.datetime) for r in as_dt) > 150
  with _logger(offline, tmp_path / "int") as logger:
    logger.log_batch(records, aggs)
  with _logger(offline, tmp_path / "datetime") as logger:
    logger.log_batch(as_dt, aggs)
  head = ["key", "event_time", "window_start", "window_end", "fp_window", "dropped_stage"]
  logged = [_read_log(str(tmp_path / d)).select(head).sort_by("key").to_pylist()
            for d in ("int", "datetime")]
  assert logged[0] == logged[1] and len(logged[0]) == 200
  message = (rf"column '{event}', the event time: a {{}} value is its Unix seconds in the "
             r"canonical value model, not a count of ms \(EVENT_TIME_FORMAT 'ms'\); log it as "
             r"the offline data holds it$")
  with _logger(offline, tmp_path / "ms", event_time_format="ms") as logger:
    dated = next(i for i, r in enumerate(as_dt) if r[event] is not None)
    with pytest.raises(RecordError, match=message.format("datetime")):
      logger.log(as_dt[dated], aggs[dated])
    with pytest.raises(RecordError, match=message.format(r"timestamp\[us, tz=UTC\]")):
      logger.log_table(pa.Table.from_pylist(as_dt), {AGG: [a[AGG] for a in aggs]})
    logger.log(records[dated], aggs[dated])  # the same value as a count: accepted
    assert logger.stats()["accepted"] == 1


def test_a_declaration_that_does_not_suit_the_column_is_a_usage_error(offline, tmp_path):
  with pytest.raises(common.UsageError, match="event time: .*'iso8601' needs text"):
    _logger(offline, tmp_path / "a", event_time_format="iso8601")
  with pytest.raises(common.UsageError, match="EVENT_TIME_ZONE 'Mars/Olympus'"):
    _logger(offline, tmp_path / "b", event_time_zone="Mars/Olympus")


def test_from_features_dir_reads_the_declaration_the_run_recorded(offline, tmp_path,
                                                                  monkeypatch):
  """The run's event_time section first; without it (metadata of an earlier job), the module's
  EVENT_TIME_* names."""
  import json
  import shutil
  copy = str(tmp_path / "features")
  shutil.copytree(offline, copy)
  meta = _meta(copy)
  assert meta["event_time"] == {"column": "trip_start_timestamp", "format": "seconds",
                                "zone": "UTC"}
  meta["event_time"]["format"] = "iso8601"
  with open(f"{copy}/run_metadata.json", "w", encoding="utf-8") as f:
    json.dump(meta, f)
  with pytest.raises(common.UsageError, match="'iso8601' needs text"):
    _logger(copy, tmp_path / "a")
  del meta["event_time"]
  with open(f"{copy}/run_metadata.json", "w", encoding="utf-8") as f:
    json.dump(meta, f)
  # Its module is imported only when the caller allows it, never because the file names it.
  with pytest.raises(common.UsageError, match="records no event_time declaration.*"
                                              "import_module=True"):
    _logger(copy, tmp_path / "b")
  from transforms import taxi as module
  monkeypatch.setattr(module, "EVENT_TIME_FORMAT", "iso8601", raising=False)
  with pytest.raises(common.UsageError, match="'iso8601' needs text"):
    _logger(copy, tmp_path / "c", import_module=True)


def test_from_features_dir_never_runs_a_module_the_metadata_names(offline, tmp_path,
                                                                  monkeypatch):
  """A received run_metadata.json naming a module whose import has effects (here: it writes a
  file, then raises): not imported unless allowed; allowed, its failure is one usage line."""
  import json
  import shutil
  import sys
  copy = str(tmp_path / "features")
  shutil.copytree(offline, copy)
  meta = _meta(copy)
  del meta["event_time"]
  meta["transform_module"] = "hostile_module"
  with open(f"{copy}/run_metadata.json", "w", encoding="utf-8") as f:
    json.dump(meta, f)
  marker = tmp_path / "ran"
  (tmp_path / "hostile_module.py").write_text(
      f"open({str(marker)!r}, 'w').close()\nraise RuntimeError('boom\\nsecond line')\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.delitem(sys.modules, "hostile_module", raising=False)
  with pytest.raises(common.UsageError, match="records no event_time declaration"):
    _logger(copy, tmp_path / "a")
  assert not marker.exists()
  with pytest.raises(common.UsageError) as e:
    _logger(copy, tmp_path / "b", import_module=True)
  assert str(e.value) == "transform module hostile_module: RuntimeError: boom"
  assert marker.exists()


def test_a_column_missing_from_a_record_is_null(offline, taxi, tmp_path):
  """As ingest reads a JSON record without the key and csv.DictReader a short row."""
  records, aggs = _small(taxi, 50)
  with _logger(offline, tmp_path / "none") as logger:
    logger.log_batch([dict(r, tips=None) for r in records], aggs)
  with _logger(offline, tmp_path / "lacking") as logger:
    logger.log_batch([{k: v for k, v in r.items() if k != "tips"} for r in records], aggs)
  none, lacking = (_read_log(str(tmp_path / d)).sort_by("key") for d in ("none", "lacking"))
  assert none.num_rows == 50 and none.equals(lacking)
