"""Every CLI, every bad input a user can hand it: one line on stderr, exit code 2, nothing written.

Each case runs the console script's entry point (replay.cli.main, in this process: one TF import
for the table) on a real bad input made here -- a missing or damaged file, a folder of the wrong
kind, an impossible flag value -- and checks, independently of the code under test: the exit
code is 2; stderr is exactly one line, `error: ...`, naming what is wrong; stdout is empty; the
output folder was not created (or, when the case hands an existing one, is byte-identical), and
no input was changed. (`skewtrace verify` on a dataset whose manifest it cannot read is not
here: finding damage is verify's exit 1, tested below.)
"""
import gzip
import hashlib
import json
import os
import shutil
import sys

import pytest
import yaml

from replay import cli
from tests.conftest import ROOT, TAXI_CSV, TAXI_SCHEMA

PROFILE = os.path.join(ROOT, "profiles", "offline.yaml")


@pytest.fixture(scope="module")
def files(taxi_runs, taxi_features, tmp_path_factory):
  """Good inputs (the session's taxi ingest and features) and bad files made from them (a file
  a.b is the placeholder {a_b})."""
  d = tmp_path_factory.mktemp("bad_input")
  out = {"dataset": taxi_runs["direct"], "log": taxi_features["direct"], "dir": d}
  fifo = tmp_path_factory.mktemp("fifo") / "in.csv"  # apart: hashing d's files would block
  os.mkfifo(fifo)
  out["fifo"] = str(fifo)
  # A regular file this process cannot read: chmod 000 stops any user but root; root is
  # refused a write-only kernel file (apart from d too: _tree could not hash it).
  unreadable = fifo.parent / "unreadable.csv"
  unreadable.write_text("a,b\n1,2\n")
  os.chmod(unreadable, 0)
  try:
    open(unreadable, "rb").close()
    unreadable = "/proc/sys/vm/compact_memory"  # readable anyway: this process is root
  except PermissionError:
    pass
  out["unreadable"] = str(unreadable)
  damaged_shard = tmp_path_factory.mktemp("unreadable_shard") / "dataset"
  shutil.copytree(taxi_runs["direct"], damaged_shard)
  shard = damaged_shard / "parquet" / "part-00001-of-00004.parquet"
  os.remove(shard)
  os.symlink(out["unreadable"], shard)
  out["unreadable_shard"] = str(damaged_shard)
  (d / "empty").mkdir()
  (d / "garbage.csv").write_bytes(b"\xff\xfe\x00garbage\x00" * 50)
  (d / "header_only.csv").write_text("a,b,c\n")
  (d / "bad.pbtxt").write_text("feature { name: 'x' type: NOT_A_TYPE }\n")
  (d / "bad_profile.yaml").write_text("windowing: {size_seconds: -5}\n")
  (d / "not_yaml.yaml").write_text("windowing: [unclosed\n")
  (d / "a_file").write_text("not a folder\n")
  # Request logs whose response miscounts the instances, or cannot be read (docs/formats.md)
  (d / "vertex_miscount.jsonl").write_text(json.dumps(
      {"deployed_model_id": "m", "request_payload": [json.dumps({"a": 1})],
       "response_payload": ["0.1", "0.2"]}) + "\n")
  (d / "capture_not_base64.jsonl").write_text(json.dumps({"captureData": {
      "endpointInput": {"observedContentType": "application/json", "mode": "INPUT",
                        "data": json.dumps({"a": 1}), "encoding": "JSON"},
      "endpointOutput": {"observedContentType": "application/json", "mode": "OUTPUT",
                         "data": "not base64!", "encoding": "BASE64"}},
      "eventMetadata": {"eventId": "e", "inferenceTime": "2024-05-01T00:00:00Z"}}) + "\n")
  damaged_manifest = d / "damaged_manifest"
  shutil.copytree(taxi_runs["direct"], damaged_manifest)
  with open(damaged_manifest / "manifest.json", "r+b") as f:
    f.truncate(100)
  damaged_meta = d / "damaged_meta"
  shutil.copytree(taxi_features["direct"], damaged_meta)
  with open(damaged_meta / "run_metadata.json", "r+b") as f:
    f.truncate(50)
  damaged_bucket = d / "damaged_bucket"
  shutil.copytree(taxi_features["direct"], damaged_bucket)
  bucket = sorted(os.listdir(damaged_bucket / "feature_log"))[0]
  (damaged_bucket / "feature_log" / bucket).write_bytes(b"PAR1 not a parquet file PAR1")
  night = str(d / "nights" / "{date}")
  config = {"offline": night, "production": night, "reports": str(d / "reports"),
            "history": str(d / "history.sqlite"), "thresholds": {"divergent_fraction": 0.01}}
  (d / "unknown_field.yaml").write_text(yaml.safe_dump(dict(config, threshold=0.1)))
  (d / "bad_fraction.yaml").write_text(yaml.safe_dump(
      dict(config, thresholds={"divergent_fraction": 3})))
  (d / "missing_night.yaml").write_text(yaml.safe_dump(config))
  with open(PROFILE) as f:  # a key given twice: refused, never the last one kept
    (d / "dup_profile.yaml").write_text(f.read() + "\nwindowing:\n  size_seconds: 60\n")
  (d / "dup_config.yaml").write_text(yaml.safe_dump(config) + "history: other.sqlite\n")
  with open(PROFILE) as f:  # aggregate windows that do not fit: the module's or the period
    profile = yaml.safe_load(f)
  (d / "unknown_aggregate_window.yaml").write_text(yaml.safe_dump(dict(
      profile, aggregate_windows={"no_such": {"offset_seconds": 60}})))
  (d / "unfit_aggregate_window.yaml").write_text(yaml.safe_dump(dict(
      profile, aggregate_windows={"area_trips_in_window": {"offset_seconds": 3600}})))
  (d / "reports_is_a_file.yaml").write_text(yaml.safe_dump(dict(config,
                                                                reports=str(d / "a_file"))))
  (d / "history_under_a_file.yaml").write_text(yaml.safe_dump(dict(
      config, history=str(d / "a_file" / "history.sqlite"))))
  shutil.copytree(taxi_features["direct"], d / "nights" / "2026-01-02")  # a night that is there
  with open(TAXI_CSV, "rb") as f:
    taxi = f.read()
  (d / "bare_cr.csv").write_bytes(taxi.replace(b"\n", b"\r"))
  (d / "open_quote.csv").write_bytes(b'a,"b,c\n1,2,3\n4,5,6\n')
  (d / "dup_header.csv").write_bytes(b"a,a,b\n1,2,3\n")
  # files in another format under a .csv name: the first error names the format
  (d / "parquet_named.csv").write_bytes(b"PAR1\x15\x04\x15\x10\x15\x14L\x15\x02\x15\x00\n")
  (d / "jsonl_named.csv").write_bytes(b'{"a": 1, "b": "x"}\n{"a": 2, "b": "y"}\n')
  (d / "gzip_named.csv").write_bytes(gzip.compress(taxi[:4096], mtime=0))
  (d / "empty.csv").write_bytes(b"")
  wide = 20_000  # more columns than a header may name (csv_records.MAX_COLUMNS)
  (d / "wide.csv").write_text(",".join(f"c{i}" for i in range(wide)) + "\n" +
                              ",".join("1" for _ in range(wide)) + "\n")
  import datetime
  import pyarrow as pa
  import pyarrow.parquet as pq
  pq.write_table(pa.Table.from_arrays([pa.array([1, 2]), pa.array([3, 4])], names=["a", "a"]),
                 d / "dup_columns.parquet")
  pq.write_table(pa.table({"a": [1, 2], "t": pa.array([datetime.time(1), datetime.time(2)],
                                                       pa.time64("us"))}), d / "time64.parquet")
  (d / "schemas").mkdir()
  pq.write_table(pa.table({"a": [1, 2], "b": ["x", "y"]}), d / "schemas" / "one.parquet")
  pq.write_table(pa.table({"a": [3, 4], "c": [1.5, 2.5]}), d / "schemas" / "two.parquet")
  deep = "[" * 5000 + "]" * 5000
  deep_manifest = d / "deep_manifest"
  shutil.copytree(taxi_runs["direct"], deep_manifest)
  (deep_manifest / "manifest.json").write_text(deep)
  deep_meta = d / "deep_meta"
  shutil.copytree(taxi_features["direct"], deep_meta)
  (deep_meta / "run_metadata.json").write_text('{"format": ' + deep + "}")
  (d / "deep.yaml").write_text("a: " + "[" * 20000 + "]" * 20000 + "\n")
  with open(PROFILE) as f:
    good = yaml.safe_load(f)
  for name, (section, field, value) in {
      "huge_shards": ("sharding", "num_shards", 2 ** 70), "huge_size": ("windowing", "size_seconds",
                                                                     1e30),
      "huge_seed": ("sharding", "hash_seed", 2 ** 64),
      "zero_size": ("windowing", "size_seconds", 0),
      "text_size": ("windowing", "size_seconds", "15m")}.items():
    doc = json.loads(json.dumps(good))
    doc[section][field] = value
    (d / f"{name}.yaml").write_text(yaml.safe_dump(doc))
  (d / "history_dir").mkdir()
  (d / "not_sqlite").write_bytes(b"not a database" * 100)
  (d / "history_is_dir.yaml").write_text(yaml.safe_dump(dict(config,
                                                              history=str(d / "history_dir"))))
  (d / "history_not_sqlite.yaml").write_text(yaml.safe_dump(dict(config,
                                                                  history=str(d / "not_sqlite"))))
  (d / "unknown_threshold.yaml").write_text(yaml.safe_dump(dict(config, thresholds={
      "divergent_fraction": 0.1, "features": {"no_such_feature": 0.1}})))
  modules = d / "modules"
  modules.mkdir()
  with open(os.path.join(ROOT, "transforms", "features", "taxi.py")) as f:
    module = f.read()
  for name, text in {
      "raises_on_import": "raise RuntimeError('boom at import')\n",
      "exits_at_import": "import sys\nsys.exit(0)\n",
      "os_exits_at_import": "import os\nos._exit(0)\n",
      "interrupted_at_import": "raise KeyboardInterrupt\n",
      "syntax_error": "def preprocessing_fn(inputs:\n",
      "no_preprocessing_fn": "EVENT_TIME_COLUMN = 'trip_start_timestamp'\n",
      "aggregates_not_a_list": module.replace(
          'WINDOWED_AGGREGATES = [{"name"', 'WINDOWED_AGGREGATES = ({"name"').replace(
          '"fn": "count"}]', '"fn": "count"}, "x")'),
      "aggregate_without_group_by": module.replace(
          '"group_by": "pickup_community_area",', ""),
      "fn_raises": module.replace(
          "def preprocessing_fn(inputs, bucket_count=_FEATURE_BUCKET_COUNT, vocab_size=",
                                  "def preprocessing_fn(inputs, bucket_count=0):\n"
                                  "  raise ValueError('boom in preprocessing_fn')\n\n\n"
                                  "def _unused(inputs, bucket_count=_FEATURE_BUCKET_COUNT,"
                                  " vocab_size="),
      "fn_not_callable": module + "\npreprocessing_fn = 3\n",
      "float64_output": module.replace('  outputs["label"] =',
                                       '  outputs["fare64"] = tf.cast(fare, tf.float64)\n'
                                       '  outputs["label"] ='),
      "mean_of_text": module.replace('"fn": "count"}]',
                                     '"fn": "count"}, {"name": "m", "group_by": "company", '
                                     '"fn": "mean", "column": "payment_type"}]'),
      "unknown_fn": module.replace('"fn": "count"}]', '"fn": "median", "column": "fare"}]'),
      "aggregate_is_a_column": module.replace('[{"name": "area_trips_in_window"',
                                              '[{"name": "fare"'),
      "no_event_column": module.replace('EVENT_TIME_COLUMN = "trip_start_timestamp"',
                                        'EVENT_TIME_COLUMN = "no_such_column"'),
  }.items():
    (modules / f"bad_{name}.py").write_text(text)
  out["modules"] = str(modules)
  out.update({k.replace(".", "_"): str(d / k) for k in (
      "bare_cr.csv", "open_quote.csv", "dup_header.csv", "empty.csv", "parquet_named.csv",
      "jsonl_named.csv", "gzip_named.csv", "deep_manifest",
      "deep_meta", "deep.yaml", "huge_shards.yaml", "huge_size.yaml", "huge_seed.yaml",
      "zero_size.yaml", "text_size.yaml", "history_is_dir.yaml", "history_not_sqlite.yaml",
      "reports_is_a_file.yaml", "history_under_a_file.yaml", "dup_profile.yaml",
      "dup_config.yaml", "unknown_aggregate_window.yaml", "unfit_aggregate_window.yaml",
      "unknown_threshold.yaml")})
  out.update({k.replace(".", "_"): str(d / k) for k in (
      "empty", "garbage.csv", "header_only.csv", "bad.pbtxt", "bad_profile.yaml",
      "not_yaml.yaml", "a_file", "damaged_manifest", "damaged_meta", "damaged_bucket",
      "vertex_miscount.jsonl", "capture_not_base64.jsonl",
      "unknown_field.yaml", "bad_fraction.yaml", "missing_night.yaml")})
  return out


_FEATURES_ARGS = ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile"]
# (subcommand, its flags with {placeholders} from `files` and {out}, a word the line must hold)
CASES = [
    ("ingest", ["--input", "{dir}/nowhere.csv", "--output_dir", "{out}"], "nowhere.csv"),
    ("ingest", ["--input", TAXI_CSV, "--output_dir", "{out}", "--num_shards", "-1"],
     "num_shards"),
    ("ingest", ["--input", "{garbage_csv}", "--output_dir", "{out}", "--input_format", "csv"],
     "garbage.csv"),
    ("ingest", ["--input", TAXI_CSV, "--output_dir", "{out}", "--schema", "{bad_pbtxt}"],
     "bad.pbtxt"),
    ("ingest", ["--input", TAXI_CSV, "--output_dir", "{out}", "--schema", "{dir}/no.pbtxt"],
     "no.pbtxt"),
    ("ingest", ["--input", TAXI_CSV, "--output_dir", "{a_file}"], "a_file"),
    ("ingest", ["--input", TAXI_CSV, "--output_dir", "{out}", "--input_format", "xml"],
     "input_format"),
    ("features", ["--input_dir", "{empty}", "--output_dir", "{out}", "--profile", PROFILE],
     "empty"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile",
                  "{dir}/no_profile.yaml"], "no_profile.yaml"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile",
                  "{bad_profile_yaml}"], "windowing"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile",
                  "{not_yaml_yaml}"], "not_yaml.yaml"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile",
                  "{unknown_aggregate_window_yaml}"],
     "aggregate_windows names no_such, which the module does not compute"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile",
                  "{unfit_aggregate_window_yaml}"],
     "aggregate_windows.area_trips_in_window.offset_seconds must be < period_seconds"),
    ("features", ["--input_dir", "{damaged_manifest}", "--output_dir", "{out}", "--profile",
                  PROFILE], "manifest.json"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile", PROFILE,
                  "--log_buckets", "0"], "log_buckets"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile", PROFILE,
                  "--transform_module", "no.such.module"], "no.such.module"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile", PROFILE,
                  "--transform_module", "{dir}/no_such_file.py"], "no_such_file.py"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile", PROFILE,
                  "--transform_module", "{garbage_csv}"], "garbage.csv"),
    ("verify", ["{dir}/nowhere"], "nowhere"),
    ("verify", ["{empty}"], "empty"),
    ("verify", ["{damaged_meta}"], "run_metadata.json"),
    ("diff", ["--offline", "{dir}/nowhere", "--production", "{log}", "--output_dir", "{out}"],
     "nowhere"),
    ("diff", ["--offline", "{log}", "--production", "{dataset}", "--output_dir", "{out}"],
     "production"),
    ("diff", ["--offline", "{log}", "--production", "{damaged_meta}", "--output_dir", "{out}"],
     "run_metadata.json"),
    ("diff", ["--offline", "{log}", "--production", "{damaged_bucket}", "--output_dir",
              "{out}"], "damaged_bucket"),
    ("diff", ["--offline", "{log}", "--production", "{log}", "--output_dir", "{out}",
              "--max_divergent_fraction", "2"], "max_divergent_fraction"),
    ("diff", ["--offline", "{log}", "--production", "{log}", "--output_dir", "{out}",
              "--abs_tol", "-1"], "abs_tol"),
    ("rerun", ["--input", "{dir}/nowhere.csv", "--output_dir", "{out}", "--profile_a", PROFILE,
               "--profile_b", PROFILE, "--schema", TAXI_SCHEMA], "nowhere.csv"),
    ("rerun", ["--input", TAXI_CSV, "--output_dir", "{out}", "--profile_a", PROFILE,
               "--profile_b", "{dir}/no_profile.yaml", "--schema", TAXI_SCHEMA],
     "no_profile.yaml"),
    ("check", ["--config", "{dir}/no_config.yaml"], "no_config.yaml"),
    ("check", ["--config", "{not_yaml_yaml}"], "not_yaml.yaml"),
    ("check", ["--config", "{unknown_field_yaml}"], "threshold"),
    ("check", ["--config", "{bad_fraction_yaml}"], "divergent_fraction"),
    ("check", ["--config", "{missing_night_yaml}", "--date", "2026-01-03"], "2026-01-03"),
    ("check", ["--config", "{missing_night_yaml}", "--date", "yesterday"], "date"),
    ("ingest", ["--input", "{bare_cr_csv}", "--output_dir", "{out}"], "bare_cr.csv"),
    ("ingest", ["--input", "{open_quote_csv}", "--output_dir", "{out}"], "open_quote.csv"),
    ("ingest", ["--input", "{parquet_named_csv}", "--output_dir", "{out}"],
     "looks like a Parquet file"),
    ("ingest", ["--input", "{jsonl_named_csv}", "--output_dir", "{out}"], "looks like JSON Lines"),
    ("ingest", ["--input", "{gzip_named_csv}", "--output_dir", "{out}"], "gzip-compressed"),
    ("ingest", ["--input", "{dup_header_csv}", "--output_dir", "{out}"], "dup_header.csv"),
    ("ingest", ["--input", "{empty_csv}", "--output_dir", "{out}"], "empty.csv"),
    ("ingest", ["--input", TAXI_CSV, "--output_dir", "{out}", "--key_columns", "no_such"],
     "no_such"),
    ("ingest", ["--input", TAXI_CSV, "--output_dir", "{out}", "--max_rejected_fraction", "2"],
     "max_rejected_fraction"),
    ("ingest", ["--input", TAXI_CSV, "--output_dir", "{out}", "--formats", "csv"], "formats"),
    ("ingest", ["--input", "{fifo}", "--output_dir", "{out}"], "not a regular file"),
    # an event-time form no rule reads; a form the input cannot hold; a column typed otherwise
    ("ingest", ["--input", TAXI_CSV, "--output_dir", "{out}", "--event_time",
                "trip_start_timestamp=minutes"], "form 'minutes' is not one of seconds"),
    ("ingest", ["--input", TAXI_CSV, "--output_dir", "{out}", "--event_time",
                "trip_start_timestamp=timestamp"], "form timestamp reads a Parquet TIMESTAMP"),
    ("ingest", ["--input", TAXI_CSV, "--output_dir", "{out}", "--event_time",
                "trip_start_timestamp=iso8601:Mars/Olympus"], "'Mars/Olympus' is not a known"),
    ("ingest", ["--input", TAXI_CSV, "--output_dir", "{out}", "--event_time", "when=seconds"],
     "--event_time column 'when' is not in the input's columns"),
    ("ingest", ["--input", "{unreadable}", "--output_dir", "{out}"],
     "cannot read (Permission denied)"),
    ("verify", ["{unreadable_shard}"], "part-00001-of-00004.parquet: cannot be read"),
    ("ingest", ["--input", "{dir}/wide.csv", "--output_dir", "{out}"],
     "the header names 20,000 columns, more than the 10,000"),
    ("ingest", ["--input", "{dir}/dup_columns.parquet", "--output_dir", "{out}"],
     "a named more than once"),
    ("ingest", ["--input", "{dir}/time64.parquet", "--output_dir", "{out}"],
     "type time64[us] is not a scalar"),
    ("ingest", ["--input", "{dir}/schemas/*.parquet", "--output_dir", "{out}"],
     "columns ['a', 'c'] differ from"),
    ("ingest", ["--input", "/dev/zero", "--output_dir", "{out}"], "not a regular file"),
    ("rerun", ["--input", "{fifo}", "--output_dir", "{out}", "--profile_a", PROFILE,
               "--profile_b", PROFILE, "--schema", TAXI_SCHEMA], "not a regular file"),
    ("features", ["--input_dir", "{deep_manifest}", "--output_dir", "{out}", "--profile",
                  PROFILE], "manifest.json"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile",
                  "{deep_yaml}"], "deep.yaml"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile",
                  "{huge_shards_yaml}"], "num_shards"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile",
                  "{huge_size_yaml}"], "size_seconds"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile",
                  "{huge_seed_yaml}"], "hash_seed"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile",
                  "{zero_size_yaml}"], "size_seconds"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile",
                  "{text_size_yaml}"], "size_seconds"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile", PROFILE,
                  "--transform_fn_dir", "{empty}"], "transform_fn_dir"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{log}", "--profile", PROFILE,
                  "--log_buckets", "8"], "already holds another features run"),
    ("features", ["--input_dir", "{dataset}", "--output_dir", "{dataset}", "--profile",
                  PROFILE], "not empty"),
    ("verify", ["{deep_meta}"], "run_metadata.json"),
    ("verify", ["{log}", "{dataset}"], "usage"),
    ("diff", ["--offline", "{log}", "--production", "{deep_meta}", "--output_dir", "{out}"],
     "run_metadata.json"),
    ("diff", ["--offline", "{log}", "--production", "{log}", "--output_dir", "{out}",
              "--tolerance", "no_such_feature=abs:1"], "no_such_feature"),
    ("diff", ["--offline", "{log}", "--production", "{log}", "--output_dir", "{dataset}"],
     "not empty"),
    ("diff", ["--offline", "{log}", "--output_dir", "{out}"], "production"),
    ("rerun", ["--input", TAXI_CSV, "--output_dir", "{out}", "--profile_a", PROFILE,
               "--profile_b", PROFILE, "--schema", TAXI_SCHEMA, "--offline", "x"], "offline"),
    ("check", ["--config", "{history_is_dir_yaml}", "--date", "2026-01-02"], "history"),
    ("check", ["--config", "{history_not_sqlite_yaml}", "--date", "2026-01-02"], "not_sqlite"),
    ("check", ["--config", "{unknown_threshold_yaml}", "--date", "2026-01-02"],
     "no_such_feature"),
    ("check", ["--config", "{deep_yaml}"], "deep.yaml"),
    ("features", _FEATURES_ARGS + ["{dup_profile_yaml}"], "duplicate key 'windowing'"),
    ("check", ["--config", "{dup_config_yaml}", "--date", "2026-01-02"],
     "duplicate key 'history'"),
    ("check", ["--config", "{reports_is_a_file_yaml}", "--date", "2026-01-02"],
     "is a file, not a folder"),
    ("check", ["--config", "{history_under_a_file_yaml}", "--date", "2026-01-02"],
     "is a file, not a folder"),
] + [("features", ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile", PROFILE,
                   "--transform_module", f"bad_{name}"], word) for name, word in (
                       ("raises_on_import", "boom at import"), ("syntax_error", "bad_syntax_error"),
                       ("exits_at_import", "called sys.exit(0)"),
                       ("os_exits_at_import", "called os._exit(0)"),
                       ("interrupted_at_import", "KeyboardInterrupt"),
                       ("no_preprocessing_fn", "preprocessing_fn"),
                       ("aggregates_not_a_list", "aggregate 1"),
                       ("aggregate_without_group_by", "group_by"),
                       ("fn_raises", "boom in preprocessing_fn"),
                       ("fn_not_callable", "preprocessing_fn is not a function"),
                       ("no_event_column", "no_such_column"),
                       ("float64_output", "float32, int64 or string: cast it"),
                       ("mean_of_text", "fn mean needs a number column"),
                       ("unknown_fn", "'median' is not one of"),
                       ("aggregate_is_a_column", "the name of a dataset column"))]

# The neighbours: each file-taking flag handed a missing path, a folder, an empty file and binary
# garbage; each value flag handed a value of the wrong kind or out of range.
_INGEST = ["--input", TAXI_CSV, "--output_dir", "{out}"]
_FEATURES = ["--input_dir", "{dataset}", "--output_dir", "{out}", "--profile", PROFILE]
_DIFF = ["--offline", "{log}", "--production", "{log}", "--output_dir", "{out}"]
_BAD_FILES = ["{dir}/missing", "{empty}", "{empty_csv}", "{garbage_csv}"]
CASES += [("ingest", ["--input", f, "--output_dir", "{out}"], "error") for f in _BAD_FILES]
CASES += [("ingest", _INGEST + ["--schema", f], "schema") for f in _BAD_FILES]
CASES += [("ingest", _INGEST + ["--schema_from", f], "schema_from") for f in
          ["{dir}/missing", "{empty}", "{garbage_csv}"]]
CASES += [("features", _FEATURES[:-1] + [f], "profile") for f in _BAD_FILES]
CASES += [("features", ["--input_dir", f] + _FEATURES[2:], f) for f in
          ["{dir}/missing", "{empty}", "{garbage_csv}", "{log}"]]
CASES += [("features", _FEATURES + ["--transform_fn_dir", f], "transform_fn_dir") for f in
          ["{dir}/missing", "{empty}", "{garbage_csv}", "{dataset}"]]
CASES += [("diff", ["--offline", f] + _DIFF[2:], "offline") for f in
          ["{dir}/missing", "{empty}", "{garbage_csv}", "{dataset}", "{damaged_meta}"]]
CASES += [("verify", [f], "error") for f in ["{garbage_csv}", "{a_file}"]]
# A served response that miscounts the instances or cannot be read: the file and line named.
CASES += [("ingest", ["--input", f"{{{name}}}", "--output_dir", "{out}", "--preset", preset,
                      "--served_prediction", "pred"], word) for name, preset, word in [
    ("vertex_miscount_jsonl", "vertex", "holds 2 predictions for 1 request texts"),
    ("capture_not_base64_jsonl", "sagemaker", "endpointOutput: BASE64 data that is not base64")]]
CASES += [("check", ["--config", f], "error") for f in _BAD_FILES]
CASES += [(name, base + [flag, value], flag.lstrip("-")) for name, base, flag, value in [
    ("ingest", _INGEST, "--num_shards", "x"), ("ingest", _INGEST, "--num_shards", "1.5"),
    ("ingest", _INGEST, "--max_rejected_fraction", "-0.1"),
    ("ingest", _INGEST, "--max_rejected_fraction", "x"),
    ("ingest", _INGEST, "--csv_block_bytes", "0"), ("ingest", _INGEST, "--csv_block_bytes", "x"),
    ("ingest", _INGEST, "--parquet_compression", "lzma9"),
    ("ingest", _INGEST, "--formats", "parquet,parquet,xml"),
    ("ingest", _INGEST, "--preset", "azure"), ("ingest", _INGEST, "--coverage", "most"),
    ("ingest", _INGEST, "--sampling_rate", "2"), ("ingest", _INGEST, "--sampling_rate", "x"),
    ("ingest", _INGEST, "--served", "no_such_column=fare_z"),
    ("ingest", _INGEST, "--logged_aggregates", "fare"),
    ("ingest", _INGEST, "--envelope", "no_equals_sign"),
    ("ingest", _INGEST, "--delimiter", ";;"), ("ingest", _INGEST, "--delimiter", '"'),
    ("ingest", _INGEST, "--delimiter", "§"),
    ("features", _FEATURES, "--transform_module", ""),
    ("features", _FEATURES, "--log_buckets", "-3"), ("features", _FEATURES, "--log_buckets", "x"),
    ("features", _FEATURES, "--pii_columns", "key"),
    ("diff", _DIFF, "--abs_tol", "x"), ("diff", _DIFF, "--rel_tol", "-0.5"),
    ("diff", _DIFF, "--max_divergent_fraction", "-0.1"),
    ("diff", _DIFF, "--max_divergent_fraction", "x"), ("diff", _DIFF, "--samples", "-1"),
    ("diff", _DIFF, "--scope", "some"), ("diff", _DIFF, "--tolerance", "fare_z"),
    ("diff", _DIFF, "--tolerance", "fare_z=abs:x"), ("diff", _DIFF, "--no_such_flag", "1"),
    ("ingest", _INGEST, "--served_prediction", "no_such_column"),
    ("features", _FEATURES + ["--transform_module", "transforms.taxi"], "--decision", "maybe"),
    ("features", _FEATURES + ["--transform_module", "transforms.taxi"], "--decision", "argmax"),
    ("features", _FEATURES + ["--transform_module", "transforms.taxi", "--decision", "argmax"],
     "--model_dir", "{dir}/missing"),
    ("features", _FEATURES + ["--transform_module", "transforms.taxi", "--decision", "argmax"],
     "--model_dir", "{empty}"),
    ("features", _FEATURES + ["--transform_module", "transforms.taxi", "--decision", "argmax"],
     "--model_module", "{dir}/missing.py"),
    ("diff", _DIFF + ["--decision", "argmax"], "--model_dir", "{garbage_csv}"),
    ("diff", _DIFF, "--decision", "top_k:0"), ("diff", _DIFF, "--attribution_records", "-1"),
    ("check", ["--config", "{missing_night_yaml}"], "--date", "2026-13-01"),
    ("check", ["--config", "{missing_night_yaml}"], "--date", "2026-02-30"),
]]


def _tree(path):
  """{relative path: sha256} of every file under path ({} when it does not exist)."""
  out = {}
  for root, _, names in os.walk(path):
    for name in names:
      p = os.path.join(root, name)
      with open(p, "rb") as f:
        out[os.path.relpath(p, path)] = hashlib.sha256(f.read()).hexdigest()
  return out


@pytest.mark.parametrize("name,flags,word", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(name, flags, word, files, tmp_path,
                                                         capsys, monkeypatch):
  out = tmp_path / "out"
  values = dict(files, out=str(out))
  argv = [f.format(**values) for f in flags]
  if name in ("features", "rerun") and "--transform_module" not in argv:  # required
    argv += ["--transform_module", "transforms.taxi"]
  inputs = {p: _tree(p) for p in (files["dataset"], files["log"], str(files["dir"]))}
  monkeypatch.syspath_prepend(files["modules"])
  monkeypatch.setattr(sys, "argv", ["skewtrace", name] + argv)
  with pytest.raises(SystemExit) as e:
    cli.main()
  captured = capsys.readouterr()
  lines = captured.err.splitlines()
  assert e.value.code == 2, captured.err[-2000:]
  assert len(lines) == 1 and lines[0].startswith("error: "), captured.err[-2000:]
  assert word.format(**values) in lines[0] or word in lines[0], lines[0]
  assert captured.out == ""
  assert not out.exists() or _tree(out) == {}, sorted(_tree(out))
  assert {p: _tree(p) for p in inputs} == inputs  # nothing handed in was changed


@pytest.mark.parametrize("folder", ["damaged_manifest", "deep_manifest"])
def test_verify_names_an_unreadable_manifest_as_damage(folder, files, capsys, monkeypatch):
  """verify's finding, exit 1: the manifest named as unreadable, and why, on one line."""
  monkeypatch.setattr(sys, "argv", ["skewtrace", "verify", files[folder]])
  with pytest.raises(SystemExit) as e:
    cli.main()
  out = capsys.readouterr().out.splitlines()
  assert e.value.code == 1
  assert [line for line in out if line.startswith("DAMAGED manifest.json: unreadable (")], out


@pytest.fixture
def read_only(tmp_path):
  """A folder holding `exists/` that this process cannot write: a read-only tmpfs where it can
  mount one (root), else a folder without write permission (any other user)."""
  import subprocess
  root = tmp_path / "ro"
  (root / "exists").mkdir(parents=True)
  mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(root)],
                           capture_output=True).returncode == 0
  if mounted:
    (root / "exists").mkdir()
    subprocess.run(["mount", "-o", "remount,ro", str(root)], check=True)
  else:
    os.chmod(root / "exists", 0o555)
    os.chmod(root, 0o555)
  try:
    yield root
  finally:
    if mounted:
      subprocess.run(["umount", "-l", str(root)], check=True)
    else:
      os.chmod(root, 0o755)
      os.chmod(root / "exists", 0o755)


def test_an_output_that_cannot_be_written_is_one_line_before_anything_runs(
    files, read_only, tmp_path, capsys, monkeypatch):
  config = yaml.safe_load(open(files["missing_night_yaml"]))
  for what in ("reports", "history"):
    (tmp_path / f"{what}.yaml").write_text(yaml.safe_dump(dict(
        config, **{what: str(read_only / "exists" / ("h.sqlite" if what == "history" else
                                                     "reports"))})))
  for name, argv, word in [
      ("ingest", ["--input", TAXI_CSV, "--output_dir", str(read_only / "new")],
       "cannot create the folder"),
      ("ingest", ["--input", TAXI_CSV, "--output_dir", str(read_only / "exists")],
       "cannot write there"),
      ("diff", ["--offline", files["log"], "--production", files["log"], "--output_dir",
                str(read_only / "exists")], "cannot write there"),
      ("check", ["--config", str(tmp_path / "reports.yaml"), "--date", "2026-01-02"],
       "reports"),
      ("check", ["--config", str(tmp_path / "history.yaml"), "--date", "2026-01-02"],
       "history")]:
    monkeypatch.setattr(sys, "argv", ["skewtrace", name] + argv)
    with pytest.raises(SystemExit) as e:
      cli.main()
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert e.value.code == 2 and len(lines) == 1 and word in lines[0], captured.err[-2000:]
    assert lines[0].startswith("error: ") and "cannot" in lines[0], lines[0]
  assert sorted(os.listdir(read_only)) == ["exists"] and not os.listdir(read_only / "exists")
  assert not os.path.exists(os.path.join(files["dir"], "reports", "2026-01-02"))


def test_a_module_still_importing_is_named_on_stderr(files, tmp_path, capsys, monkeypatch):
  """A feature module whose top level runs long (a loop) shows where the job stopped."""
  from pipelines import feature_module
  (tmp_path / "slow_module.py").write_text("import time\ntime.sleep(1.5)\nX = 1\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.setattr(feature_module, "SLOW_IMPORT_SECONDS", 0.3)
  assert feature_module._imported("slow_module").X == 1
  err = capsys.readouterr().err
  assert err == ("still importing --transform_module slow_module after 0.3 s (its top-level "
                 "code is running)\n"), err


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_leaves_nothing(files, tmp_path, capsys, monkeypatch):
  """Ingest, features and the diff writing to a disk that fills up: one line naming the folder,
  exit 2, and nothing left there (no temp folder, no lock, no half report). The disk is a 2 MiB
  tmpfs where this process may mount one, else the file system's create is made to refuse."""
  import errno
  import subprocess
  disk = tmp_path / "disk"
  disk.mkdir()
  mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)],
                           capture_output=True).returncode == 0
  if not mounted:
    from apache_beam.io.filesystems import FileSystems
    real = FileSystems.create
    def create(path, *args, **kwargs):
      if str(path).startswith(str(disk)):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
      return real(path, *args, **kwargs)
    monkeypatch.setattr(FileSystems, "create", staticmethod(create))
  fill = disk / "fill"  # the diff's report is small: the disk is filled first for it
  try:
    for name, argv, fill_first in [
        ("ingest", ["--input", TAXI_CSV, "--output_dir", str(disk / "ingest")], False),
        ("features", ["--input_dir", files["dataset"], "--output_dir", str(disk / "features"),
                      "--profile", PROFILE, "--transform_module", "transforms.taxi"], False),
        ("diff", ["--offline", files["log"], "--production", files["log"], "--output_dir",
                  str(disk / "diff"), "--abs_tol", "0.5"], True)]:
      if mounted and fill_first:  # 12 KiB left: the lock file, not the report
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        with open(fill, "wb") as f:
          f.write(b"\0" * (free - 12 * 1024))
      monkeypatch.setattr(sys, "argv", ["skewtrace", name] + argv)
      with pytest.raises(SystemExit) as e:
        cli.main()
      err = capsys.readouterr().err
      assert e.value.code == 2 and err.count("\n") == 1, err[-3000:]
      out = argv[argv.index("--output_dir") + 1]
      assert err.startswith(f"error: no space left on the device holding {out}"), err
      assert sorted(os.listdir(disk)) == (["fill"] if mounted and fill_first else []), \
          os.listdir(disk)
  finally:
    if mounted:
      subprocess.run(["umount", "-l", str(disk)], check=True)


def test_parquet_values_no_type_holds_are_rejected_or_kept_exactly(tmp_path):
  """A binary column holding bytes that are not UTF-8: that row rejected with its reason, the
  others written; uint64 values near 2**64: their column keeps every digit (BYTES), never one
  rounded float for two values."""
  import glob
  import pyarrow as pa
  import pyarrow.parquet as pq
  from pipelines import ingest as ingest_job
  src = tmp_path / "in.parquet"
  pq.write_table(pa.table({"a": [1, 2, 3], "b": pa.array([b"ok", b"\xff\xfe", b"fine"]),
                           "u": pa.array([2 ** 64 - 1, 2 ** 64 - 2, 5], pa.uint64())}), src)
  out = tmp_path / "out"
  assert ingest_job.run(["--input", str(src), "--output_dir", str(out),
                         "--max_rejected_fraction", "0.5"]) == 0
  rejected = [json.loads(x) for x in open(glob.glob(str(out / "rejected" / "*.jsonl"))[0])]
  assert [(r["line"], r["reason"]) for r in rejected] == [(2, "column 'b' is not UTF-8")]
  table = pq.read_table(glob.glob(str(out / "parquet" / "*.parquet")))
  assert table.schema.field("u").type == pa.string()
  assert sorted(table.column("u").to_pylist()) == ["18446744073709551615", "5"]
  assert sorted(table.column("b").to_pylist()) == ["fine", "ok"]
