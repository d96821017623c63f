"""ProductionLogger.log_table, the columnar log(): the taxi sample handed over as Arrow columns
-- CSV text, or the types pyarrow infers -- logs exactly the offline job's rows; batches of
columns and single records interleave; what it refuses is one line."""
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from replay.logger.rows import RecordError
from tests import online_store
from tests.conftest import TAXI_CSV
from tests.test_logger import _assert_logs_as_offline, _logger

AGG = online_store.AGG
CHUNK = 4000


def _table(typed):
  """The taxi CSV as Arrow columns: every column as text (empty cells null), or typed as
  pyarrow's CSV reader infers the types."""
  names = pacsv.read_csv(TAXI_CSV).column_names
  convert = pacsv.ConvertOptions(strings_can_be_null=True, **(
      {} if typed else {"column_types": {n: pa.string() for n in names}}))
  return pacsv.read_csv(TAXI_CSV, convert_options=convert)


@pytest.mark.parametrize("typed", [False, True], ids=["text", "typed"])
def test_columns_log_exactly_the_offline_rows(offline, taxi, tmp_path, typed):
  table = _table(typed)
  types = {f.type for f in table.schema}
  assert (types == {pa.string()}) != typed and (pa.float64() in types) == typed
  counts = [a[AGG] for a in taxi[1]]
  with _logger(offline, tmp_path, batch_size=1024) as logger:
    for start in range(0, table.num_rows, CHUNK):
      chunk = table.slice(start, CHUNK)
      logger.log_table(chunk.to_batches()[0] if start == 0 else chunk,
                       {AGG: pa.array(counts[start:start + CHUNK])})
    assert logger.stats()["accepted"] == table.num_rows
  _assert_logs_as_offline(offline, str(tmp_path))


def test_columns_and_records_interleave(offline, taxi, tmp_path):
  """Records handed over by log() and log_table() in turn (the open batch of log() records is
  written before each table) log the offline job's rows: none lost, none logged twice."""
  records, aggs = taxi
  table = _table(False)
  with _logger(offline, tmp_path, batch_size=700) as logger:
    for start in range(0, len(records), 2 * CHUNK):
      for i in range(start, min(start + CHUNK, len(records))):
        logger.log(records[i], aggs[i])
      rest = table.slice(start + CHUNK, CHUNK)
      if rest.num_rows:
        logger.log_table(rest, {AGG: [a[AGG] for a in aggs[start + CHUNK:start + 2 * CHUNK]]})
  _assert_logs_as_offline(offline, str(tmp_path))


@pytest.mark.parametrize("edit, message", [
    (lambda t, a: ([t], a),
     "a pyarrow Table or RecordBatch (or a pandas DataFrame) expected, got list"),
    (lambda t, a: (t.append_column("fare_typo", t.column("fare")), a),
     "unknown column(s) 'fare_typo': not in the record schema of the offline run"),
    (lambda t, a: (t.set_column(1, "fare", pa.array([[1.0]] * t.num_rows)), a),
     "column 'fare': type list<item: double> is not a scalar"),
    (lambda t, a: (t, {}), f"aggregates: '{AGG}' missing (declared: '{AGG}')"),
    (lambda t, a: (t, {AGG: a[AGG][:-1]}), f"aggregate '{AGG}': 9 values for 10 records"),
    (lambda t, a: (t, {AGG: [None] + a[AGG][1:]}),
     f"aggregate '{AGG}': integers expected, got int64 with nulls"),
    (lambda t, a: (t, {AGG: [0.5] * t.num_rows}),
     f"aggregate '{AGG}': integers expected, got double"),
    (lambda t, a: (t, {AGG: [[1]] * t.num_rows}), f"aggregate '{AGG}': integers expected"),
    (lambda t, a: (t, {AGG: pa.array([2 ** 64 - 1] * t.num_rows, pa.uint64())}),
     f"aggregate '{AGG}': Integer value 18446744073709551615 not in range"),
    (lambda t, a: (t.set_column(1, "fare", pa.array([1] * t.num_rows, pa.duration("s"))), a),
     "column 'fare': type duration[s] is not a scalar")])
def test_what_log_table_refuses_is_one_line(offline, taxi, tmp_path, edit, message):
  table = _table(False).slice(0, 10)
  table, aggregates = edit(table, {AGG: [a[AGG] for a in taxi[1][:10]]})
  with _logger(offline, tmp_path) as logger:
    with pytest.raises(RecordError) as e:
      logger.log_table(table, aggregates)
    assert logger.stats()["accepted"] == 0
  assert str(e.value).startswith(message) and "\n" not in str(e.value)
  assert isinstance(e.value, ValueError)


def test_a_float_aggregate_takes_numbers_and_nulls():
  from replay.logger.accept import AcceptRecords
  rules = AcceptRecords()
  rules._name_set, rules._aggregates, rules._served = frozenset(["x"]), ["m"], []
  rules._aggregate_set, rules._aggregate_types = frozenset(["m"]), {"m": pa.float64()}
  rules._event, rules._event_format, rules._event_sources = "x", "seconds", {}
  columns = rules.accept_table(pa.table({"x": [1, 2, 3]}), {"m": [1, None, 2.5]})
  assert columns.aggregates[0].to_pylist() == [1.0, None, 2.5]
  with pytest.raises(RecordError, match="numbers or nulls expected, got string"):
    rules.accept_table(pa.table({"x": [1]}), {"m": ["1"]})
  assert np.isnan(rules.accept({"x": 1}, {"m": float("nan")})[1][0])
