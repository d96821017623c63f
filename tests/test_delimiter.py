"""--delimiter and --quote_char: a CSV split by ';', tab or '|', or quoting with ', ingests to
the same records as its comma form with double quotes.

The files are written here from the same rows with Python's csv module (quoting a cell that
holds the delimiter); the datasets must agree on their content digest (the parse fingerprints of
every record), rows and typed values. A semicolon file read as comma CSV names the delimiter it
seems to use in its first error.
"""
import csv
import glob
import json
import os

import pyarrow.parquet as pq
import pytest

from pipelines import common
from tests.conftest import ingest

ROWS = [["ride_id", "city", "km", "ts", "note"],
        ["1", "Paris", "3.5", "1700000000", ""],
        ["2", "Lyon; Vieux|Port", "7.25", "1700000100", 'said "hi", left'],
        ["3", "Nice", "", "1700000200", "tab\there"],
        ["4", "Metz", "12", "1700000300", "line\nbreak"]]


def _write(path, delimiter, quote='"', quoting=csv.QUOTE_MINIMAL):
  with open(path, "w", newline="", encoding="utf-8") as f:
    csv.writer(f, delimiter=delimiter, quotechar=quote, quoting=quoting,
               lineterminator="\n").writerows(ROWS)
  return str(path)


def _dataset(root):
  with open(os.path.join(root, "manifest.json")) as f:
    manifest = json.load(f)
  table = pq.read_table(sorted(glob.glob(os.path.join(root, "parquet", "*.parquet")))[0])
  return manifest, table.sort_by("ride_id").select([r for r in ROWS[0]]).to_pylist()


def test_other_delimiters_ingest_to_the_same_records(tmp_path):
  base, rows = _dataset(ingest(tmp_path / "comma", "--key_columns", "ride_id", "--num_shards",
                               "1", inputs=_write(tmp_path / "rides.csv", ",")))
  assert base["rows"]["written"] == len(ROWS) - 1 and "delimiter" not in base["options"]
  for name, delimiter, flag in (("semi", ";", ";"), ("tab", "\t", "tab"), ("pipe", "|", "|"),
                                ("ctrl_a", "\x01", "\x01")):  # Hive's default delimiter
    manifest, got = _dataset(ingest(tmp_path / name, "--key_columns", "ride_id", "--num_shards",
                                    "1", "--delimiter", flag,
                                    inputs=_write(tmp_path / f"rides.{name}.csv", delimiter)))
    assert manifest["content_digest"] == base["content_digest"], name
    assert got == rows, name
    assert manifest["options"]["delimiter"] == delimiter


def test_a_file_split_by_another_delimiter_says_so(tmp_path):
  path = _write(tmp_path / "rides.csv", ";")
  from pipelines import ingest as job
  with pytest.raises(common.UsageError, match=r"is the delimiter ';'\? pass --delimiter ';'"):
    job.run(["--input", path, "--output_dir", str(tmp_path / "out"), "--key_columns", "ride_id"])
  assert not (tmp_path / "out").exists()


def test_another_quote_character_ingests_to_the_same_records(tmp_path):
  base, rows = _dataset(ingest(tmp_path / "double", "--key_columns", "ride_id", "--num_shards",
                               "1", inputs=_write(tmp_path / "rides.csv", ",")))
  assert "quote_char" not in base["options"]
  # every cell quoted with ', so a " is plain text and the ; inside quotes is no delimiter
  path = _write(tmp_path / "rides.single.csv", ";", "'", csv.QUOTE_ALL)
  with open(path, encoding="utf-8") as f:
    text = f.read()
  assert "'said \"hi\", left'" in text and "'Lyon; Vieux|Port'" in text
  manifest, got = _dataset(ingest(tmp_path / "single", "--key_columns", "ride_id",
                                  "--num_shards", "1", "--delimiter", ";", "--quote_char", "'",
                                  inputs=path))
  assert manifest["content_digest"] == base["content_digest"]
  assert got == rows
  assert manifest["options"]["quote_char"] == "'" and manifest["options"]["delimiter"] == ";"


@pytest.mark.parametrize("flags, message", [
    (["--quote_char", "''"], "--quote_char: the quote character must be one ASCII character"),
    (["--quote_char", ","], "--quote_char: the delimiter and the quote character are both ','"),
    (["--delimiter", '"'], "--delimiter: the delimiter and the quote character are both '\"'"),
    (["--delimiter", "é"], "--delimiter: the delimiter must be one ASCII character")])
def test_a_dialect_that_cannot_split_is_a_usage_error(tmp_path, flags, message):
  from pipelines import ingest as job
  with pytest.raises(common.UsageError) as e:
    job.run(["--input", _write(tmp_path / "rides.csv", ","), "--output_dir",
             str(tmp_path / "out")] + flags)
  assert str(e.value).startswith(message)
  assert not (tmp_path / "out").exists()


def test_rows_quoted_with_another_character_are_named_in_the_error(tmp_path):
  path = _write(tmp_path / "rides.csv", ";", "'", csv.QUOTE_ALL)
  from pipelines import ingest as job
  with pytest.raises(common.DataError) as e:
    job.run(["--input", path, "--output_dir", str(tmp_path / "out"), "--delimiter", ";",
             "--key_columns", "'ride_id'"])
  assert "pass --quote_char \"'\"" in str(e.value)
