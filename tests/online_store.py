"""What a serving system's online store would hold for the taxi records of a CSV: each record's
windowed count, computed over the whole file with transforms.window_records as the offline job
does; and the records as a CSV reader gives them, for replay.logger."""
import csv
import json
import os

import pyarrow as pa
import pyarrow.csv as pacsv

from transforms.spec import profile as profiles
from transforms.spec import schema
from transforms.spec import window as window_records

__all__ = ["AGG", "records_and_counts"]

AGG = "area_trips_in_window"


def records_and_counts(csv_path, features_dir):
  """(records: dicts column -> text, aggregates: one {AGG: count} per record), for the schema
  and profile of the pipelines.features output `features_dir`."""
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
  kept, dropped = window_records.assign_windows(typed, "trip_start_timestamp", prof, None)
  assert dropped.num_rows == 0 and kept.num_rows == typed.num_rows  # order kept
  counts = window_records.window_counts(kept, "pickup_community_area", prof)
  store = window_records.join_counts(kept, "pickup_community_area", AGG, counts)
  with open(csv_path, newline="", encoding="utf-8") as f:
    records = list(csv.DictReader(f))
  return records, [{AGG: n} for n in store.column(AGG).to_pylist()]
