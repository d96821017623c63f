"""What a serving system's online store would hold for the taxi records of a CSV: each record's
windowed aggregates, computed over the whole file with the window stage's rule
(transforms/spec/window.py) as the offline job does; and the records as a CSV reader gives them,
for replay.logger."""
import csv
import json
import os

import pyarrow as pa
import pyarrow.csv as pacsv

from transforms.spec import profile as profiles
from transforms.spec import schema
from transforms.spec import window as window_records

__all__ = ["AGG", "records_and_counts", "records_and_aggregates"]

AGG = "area_trips_in_window"


def records_and_aggregates(csv_path, features_dir):
  """(records: dicts column -> text, aggregates: one {name: value} per record, holding every
  windowed aggregate the pipelines.features output `features_dir` recorded), for its schema,
  event-time column and profile."""
  with open(os.path.join(features_dir, "run_metadata.json"), encoding="utf-8") as f:
    meta = json.load(f)
  columns = [(c["name"], c["type"]) for c in meta["schema"]["columns"]]
  names = [n for n, _ in columns]
  text = pacsv.read_csv(csv_path, convert_options=pacsv.ConvertOptions(
      column_types={n: pa.binary() for n in names}, null_values=[""], strings_can_be_null=True,
      quoted_strings_can_be_null=True))
  typed = pa.table([schema.type_column(text.column(n).combine_chunks(), t)[0]
                    for n, t in columns], names=names).combine_chunks().to_batches()[0]
  prof = profiles.parse_profile(meta["profile"])
  kept, dropped = window_records.assign_windows(typed, meta["event_time"]["column"], prof, None,
                                                aggregates=meta["schema"]["aggregates"])
  assert dropped.num_rows == 0 and kept.num_rows == typed.num_rows  # order kept
  values = {a["name"]: window_records.aggregate_values(kept, a, prof).to_pylist()
            for a in meta["schema"]["aggregates"]}
  with open(csv_path, newline="", encoding="utf-8") as f:
    records = list(csv.DictReader(f))
  return records, [{name: v[i] for name, v in values.items()} for i in range(len(records))]


def records_and_counts(csv_path, features_dir):
  """records_and_aggregates of a run of the taxi module (its one aggregate, AGG)."""
  records, aggregates = records_and_aggregates(csv_path, features_dir)
  assert all(a.keys() == {AGG} for a in aggregates)
  return records, aggregates
