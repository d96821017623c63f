"""pipelines.ingest end to end: determinism across runners, round trips, manifest, errors."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import jsonschema
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from pipelines import common, verify
from tests.conftest import EDGE, ROOT, TAXI_CSV, TAXI_SCHEMA, ingest


def shard_hashes(root):
  m = json.load(open(os.path.join(root, "manifest.json")))
  return m["content_digest"], {s["path"]: s["sha256"] for s in m["shards"]}


@pytest.mark.slow
def test_taxi_identical_bytes_on_every_runner(taxi_runs):
  results = {name: shard_hashes(root) for name, root in taxi_runs.items()}
  first = results["direct"]
  assert len(first[1]) == 8  # 4 shards x 2 formats
  for name, got in results.items():
    assert got == first, name


def test_rerun_block_size_and_input_order_do_not_change_bytes(taxi_runs, tmp_path):
  # Split the sample into two files; list them in both orders, with small CSV blocks.
  lines = open(TAXI_CSV, "rb").read().splitlines(keepends=True)
  a, b = tmp_path / "a.csv", tmp_path / "b.csv"
  a.write_bytes(b"".join(lines[:7000]))
  b.write_bytes(lines[0] + b"".join(lines[7000:]))
  forward = ingest(tmp_path / "fwd", "--num_shards", "4", "--schema", TAXI_SCHEMA,
                   inputs=f"{a},{b}")
  backward = ingest(tmp_path / "bwd", "--num_shards", "4", "--schema", TAXI_SCHEMA,
                    "--csv_block_bytes", "20000", inputs=f"{b},{a}")
  assert shard_hashes(forward) == shard_hashes(backward) == shard_hashes(taxi_runs["direct"])
  again = ingest(forward, "--num_shards", "4", "--schema", TAXI_SCHEMA, inputs=f"{a},{b}")
  assert shard_hashes(again) == shard_hashes(forward)


def test_manifest_matches_its_schema_and_counts(taxi_runs):
  m = json.load(open(os.path.join(taxi_runs["direct"], "manifest.json")))
  with open(os.path.join(ROOT, "manifests", "dataset_manifest.schema.json")) as f:
    jsonschema.validate(m, json.load(f))
  assert m["rows"] == {"read": 15002, "written": 15002, "rejected": 0}
  assert m["inputs"][0]["sha256"] == \
      "cdaf0b5931442ef47693f408f25a37af710aca23fccb90a78f00930e89548805"
  assert sum(s["rows"] for s in m["shards"] if s["format"] == "parquet") == 15002
  assert {c["name"]: c["type"] for c in m["schema"]["columns"]}["fare"] == "FLOAT"
  assert set(m["versions"]) >= {"python", "beam", "tft", "tf", "pyarrow", "skewtrace"}


def _expected_taxi():
  """The sample read independently by pyarrow with the schema's types."""
  types = {"INT": pa.int64(), "FLOAT": pa.float64(), "BYTES": pa.string()}
  from transforms.spec import schema
  cols = schema.load_tfmd(open(TAXI_SCHEMA).read())
  return pacsv.read_csv(TAXI_CSV, convert_options=pacsv.ConvertOptions(
      column_types={n: types[t] for n, t in cols.items()}, strings_can_be_null=True))


def _sorted_rows(table, names):
  return sorted(table.select(names).to_pylist(), key=lambda r: json.dumps(r, sort_keys=True))


def test_parquet_round_trip_with_pandas(taxi_runs):
  import pandas as pd
  expected = _expected_taxi()
  frames = [pd.read_parquet(p, dtype_backend="numpy_nullable") for p in sorted(glob.glob(
      os.path.join(taxi_runs["direct"], "parquet", "*.parquet")))]
  assert str(pd.concat(frames)["trip_seconds"].dtype) == "Int64"  # missing stays missing
  got = pa.Table.from_pandas(pd.concat(frames), preserve_index=False)
  assert got.num_rows == 15002 and got.column("__key__").null_count == 0
  assert len(set(got.column("__key__").to_pylist())) == 15002
  names = expected.schema.names
  assert got.schema.field("trip_start_timestamp").type == pa.int64()
  assert pd.concat(frames)["dropoff_latitude"].isna().sum() == \
      expected.column("dropoff_latitude").null_count
  assert _sorted_rows(got, names) == _sorted_rows(expected, names)


def test_tfrecord_round_trip_with_tensorflow(taxi_runs):
  import tensorflow as tf
  expected = _expected_taxi()
  files = sorted(glob.glob(os.path.join(taxi_runs["direct"], "tfrecord", "*.tfrecord")))
  rows = []
  for record in tf.data.TFRecordDataset(files).as_numpy_iterator():
    ex = tf.train.Example.FromString(record)
    row = {}
    for name in expected.schema.names:
      feature = ex.features.feature.get(name)
      kind = feature.WhichOneof("kind") if feature is not None else None
      row[name] = None if kind is None else list(getattr(feature, kind).value)[0]
    rows.append(row)
  assert len(rows) == 15002
  want = expected.to_pylist()
  for r in want:  # tf.Example keeps float32 and bytes
    for k, v in r.items():
      if isinstance(v, float):
        r[k] = float(np.float32(v))
      elif isinstance(v, str):
        r[k] = v.encode("utf-8")
  key = lambda r: json.dumps({k: repr(v) for k, v in r.items()}, sort_keys=True)
  assert sorted(rows, key=key) == sorted(want, key=key)
  assert isinstance(rows[0]["trip_start_timestamp"], int)


def test_verify_accepts_intact_and_names_each_damage(taxi_runs, tmp_path):
  root = str(tmp_path / "copy")
  shutil.copytree(taxi_runs["direct"], root)
  assert verify.verify(root) == []
  flipped = os.path.join(root, "parquet", "part-00001-of-00004.parquet")
  data = bytearray(open(flipped, "rb").read())
  data[len(data) // 2] ^= 0x01
  open(flipped, "wb").write(bytes(data))
  truncated = os.path.join(root, "tfrecord", "part-00000-of-00004.tfrecord")
  os.truncate(truncated, 100)
  os.remove(os.path.join(root, "tfrecord", "part-00003-of-00004.tfrecord"))
  open(os.path.join(root, "parquet", "stray.parquet"), "wb").write(b"x")
  problems = verify.verify(root)
  assert problems == [
      "parquet/stray.parquet: extra file not in the manifest",
      "parquet/part-00001-of-00004.parquet: content changed (sha256 differs)",
      "tfrecord/part-00000-of-00004.tfrecord: truncated (100 bytes, manifest says "
      f"{json.load(open(os.path.join(root, 'manifest.json')))['shards'][4]['bytes']})",
      "tfrecord/part-00003-of-00004.tfrecord: missing",
  ]


def test_verify_of_an_interrupted_run_names_its_leftover(taxi_runs, tmp_path):
  """A run killed inside its publish leaves data folders and its temp folder, no manifest:
  not a dataset, and verify names the leftover."""
  root = tmp_path / "killed"
  shutil.copytree(taxi_runs["direct"], root)
  os.remove(root / "manifest.json")
  os.makedirs(root / ".tmp-0123abcd")
  with pytest.raises(common.UsageError, match=r"holds no manifest.json.*\.tmp-0123abcd is the "
                     "leftover of an interrupted run"):
    verify.verify(str(root))
  os.rmdir(root / ".tmp-0123abcd")  # no leftover: nothing named
  with pytest.raises(common.UsageError, match=r"not a skewtrace dataset$"):
    verify.verify(str(root))


def _reseal(root, path):
  """The manifest's bytes and sha256 of `path` recomputed: a consistent forgery."""
  import hashlib
  manifest_path = os.path.join(root, "manifest.json")
  manifest = json.load(open(manifest_path))
  data = open(os.path.join(root, path), "rb").read()
  for e in manifest["shards"]:
    if e["path"] == path:
      e.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
  json.dump(manifest, open(manifest_path, "w"))


def test_verify_recomputes_keys_and_checks_the_rejected_count(taxi_runs, tmp_path):
  """Verify covers every column: a shard rewritten with two keys swapped (values and digests
  intact, the manifest resealed) is found by its keys recomputed from the values; and
  rows.read / rows.rejected edited together (the arithmetic still adds up) are checked against
  the rejected file."""
  root = str(tmp_path / "copy")
  shutil.copytree(taxi_runs["direct"], root)
  rel = "parquet/part-00002-of-00004.parquet"
  table = pq.read_table(os.path.join(root, rel))
  keys = table.column("__key__").to_pylist()
  keys[0], keys[1] = keys[1], keys[0]
  table = table.set_column(0, "__key__", pa.array(keys, table.schema.field(0).type))
  pq.write_table(table, os.path.join(root, rel))
  _reseal(root, rel)
  assert verify.verify(root) == [f"{rel}: 2 rows whose __key__ is not the key of their values"]
  shutil.rmtree(root)
  shutil.copytree(taxi_runs["direct"], root)
  manifest = json.load(open(os.path.join(root, "manifest.json")))
  manifest["rows"]["read"] += 3
  manifest["rows"]["rejected"] += 3
  json.dump(manifest, open(os.path.join(root, "manifest.json"), "w"))
  problems = verify.verify(root)
  assert len(problems) == 1 and "rows.rejected is" in problems[0]


def test_rejected_rows_are_written_with_provenance_and_counted(tmp_path):
  csv = tmp_path / "in.csv"
  good = "".join(f"{i},{i}.5,n{i}\n" for i in range(300))
  csv.write_bytes(b"id,x,s\n" + good.encode() + b"1,2\nabc,1.0,z\n7,\xff,q\n")
  out = ingest(tmp_path / "out", "--num_shards", "2", "--key_columns", "id",
               "--max_rejected_fraction", "0.05", inputs=str(csv))
  m = json.load(open(os.path.join(out, "manifest.json")))
  # "abc" makes the inferred id column BYTES, so only two rows are rejected.
  assert m["rows"] == {"read": 303, "written": 301, "rejected": 2}
  rows = [json.loads(l) for l in open(os.path.join(out, m["rejected"]["path"]))]
  assert [(r["line"], r["raw"]) for r in rows] == [(302, "1,2"), (304, "7,\\xff,q")]
  assert rows[1]["raw_is_lossy"] and rows[1]["reason"].startswith("invalid UTF-8")
  assert rows[0]["reason"] == "expected 3 fields, found 2"
  assert {c["name"]: c["type"] for c in m["schema"]["columns"]} == \
      {"id": "BYTES", "x": "FLOAT", "s": "BYTES"}
  assert verify.verify(out) == []


def test_schema_type_misfits_are_rejected(tmp_path):
  csv = tmp_path / "in.csv"
  csv.write_text("id,n\n1,5\n2,x\n3,99999999999999999999\n4,\n")
  schema = tmp_path / "s.pbtxt"
  schema.write_text('feature { name: "id" type: INT }\nfeature { name: "n" type: INT }\n')
  out = ingest(tmp_path / "out", "--schema", str(schema), "--key_columns", "id",
               "--max_rejected_fraction", "1", inputs=str(csv))
  m = json.load(open(os.path.join(out, "manifest.json")))
  assert m["rows"] == {"read": 4, "written": 2, "rejected": 2}
  rows = [json.loads(l) for l in open(os.path.join(out, m["rejected"]["path"]))]
  assert [r["reason"] for r in rows] == ["column 'n': 'x' is not INT",
                                         "column 'n': '99999999999999999999' is not INT"]
  assert [(r["line"], r["raw"]) for r in rows] == [(3, "2,x"), (4, "3,99999999999999999999")]


def test_duplicate_keys_are_reported_not_merged(tmp_path):
  csv = tmp_path / "in.csv"
  csv.write_text("id,v\n1,a\n2,b\n1,c\n3,d\n3,d\n")
  out = ingest(tmp_path / "out", "--key_columns", "id", "--num_shards", "2", inputs=str(csv))
  m = json.load(open(os.path.join(out, "manifest.json")))
  assert m["rows"]["written"] == 5
  assert m["duplicates"] == {"keys": 2, "rows": 4, "conflicting_keys": 1,
                             "conflicting_samples": ["1"]}


def test_content_keys_number_exact_duplicates(tmp_path):
  csv = tmp_path / "in.csv"
  csv.write_text("a,b\n1,x\n1,x\n2,y\n")
  out = ingest(tmp_path / "out", "--num_shards", "1", "--formats", "parquet", inputs=str(csv))
  keys = pa.parquet.read_table(glob.glob(os.path.join(out, "parquet", "*"))[0]) \
      .column("__key__").to_pylist()
  assert sorted(k.split(":")[1] for k in keys) == ["0", "0", "1"]
  assert len({k.split(":")[0] for k in keys}) == 2


def test_too_many_rejected_fails_without_manifest(tmp_path):
  csv = tmp_path / "in.csv"
  csv.write_text("a,b\n1,2\n3\n4,5\n")
  from pipelines import ingest as job
  with pytest.raises(common.DataError, match=r"1 of 3 rows rejected"):
    job.run(["--input", str(csv), "--output_dir", str(tmp_path / "out")])
  assert not os.path.exists(tmp_path / "out" / "manifest.json")
  assert len(open(tmp_path / "out" / "rejected" / "part-00000-of-00001.jsonl").readlines()) == 1


def _cli(*args):
  return subprocess.run([sys.executable, "-m", "pipelines.ingest", *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("make_args,message", [
    (lambda d: ["--input", str(d / "nothing*.csv")], "no input matched"),
    (lambda d: ["--input", str(d / "empty.csv")], "no header"),
    (lambda d: ["--input", str(d / "dup.csv")], "duplicate header name"),
    (lambda d: ["--input", str(d / "blankname.csv")], "empty header name"),
    (lambda d: ["--input", os.path.join(EDGE, "empty_values.csv"), "--schema", TAXI_SCHEMA],
     "names column(s) the input lacks"),
    (lambda d: ["--input", TAXI_CSV, "--nmu_shards", "3"], "unknown flag(s): --nmu_shards"),
    (lambda d: ["--input", TAXI_CSV, "--key_columns", "nope"], "not in the input's columns"),
    (lambda d: ["--input", TAXI_CSV, "--formats", "csv"], "--formats"),
])
def test_usage_errors_exit_2_and_write_nothing(tmp_path, make_args, message):
  (tmp_path / "empty.csv").write_bytes(b"")
  (tmp_path / "dup.csv").write_text("a,b,a\n1,2,3\n")
  (tmp_path / "blankname.csv").write_text("a,,c\n1,2,3\n")
  out = tmp_path / "out"
  from pipelines import ingest as job
  with pytest.raises(common.UsageError, match=re.escape(message)):
    job.run(make_args(tmp_path) + ["--output_dir", str(out)])
  assert not out.exists()


def test_cli_exit_code_2_and_message_for_a_different_dataset(taxi_runs, tmp_path):
  out = str(tmp_path / "o")
  shutil.copytree(taxi_runs["direct"], out)
  before = shard_hashes(out)
  result = _cli("--input", TAXI_CSV, "--output_dir", out, "--num_shards", "2")
  assert result.returncode == 2, result.stderr
  assert "already holds a different dataset" in result.stderr
  assert "Traceback" not in result.stderr
  assert shard_hashes(out) == before
  result = _cli("--input", TAXI_CSV, "--output_dir", out, "--num_shards", "2", "--overwrite")
  assert result.returncode == 0, result.stderr
  assert "rows: read 15002, written 15002, rejected 0" in result.stdout
  assert verify.verify(out) == []


def test_shards_carry_raw_and_parse_stage_fingerprints(taxi_runs):
  import csv
  from transforms.spec import fingerprint
  table = pa.concat_tables([pa.parquet.read_table(p) for p in sorted(glob.glob(
      os.path.join(taxi_runs["direct"], "parquet", "*.parquet")))])
  with open(TAXI_CSV, newline="", encoding="utf-8") as f:
    rows = list(csv.DictReader(f))
  from tests import canonical_ref
  # raw: each cell's canonical text (an empty cell is null; docs/fingerprint.md), computed by
  # the independent reference, by the per-record coding.
  want_raw = sorted(fingerprint.fingerprint_record(
      {k: (canonical_ref.canonical_text(v) if v != "" else None) for k, v in r.items()})
      for r in rows)
  got_raw = sorted(table.column("__raw_fp__").to_numpy().view(np.uint64).tolist())
  assert got_raw == want_raw
  # parse: the typed values; the content key is its hex.
  data = table.drop(["__key__", "__raw_fp__", "__parse_fp__"])
  parse = fingerprint.fingerprint_batch(data)
  assert parse.tolist() == table.column("__parse_fp__").to_numpy().view(np.uint64).tolist()
  assert [k.split(":")[0] for k in table.column("__key__").to_pylist()] == \
      [f"{int(p):016x}" for p in parse]
