"""pipelines.features end to end on the taxi sample: outputs, stage fingerprints, determinism."""
import glob
import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import common
from tests.conftest import ROOT, features


def _log(root):
  return pa.concat_tables([pq.read_table(p) for p in sorted(glob.glob(
      os.path.join(root, "feature_log", "*.parquet")))])


def _file_hashes(root):
  import hashlib
  return {os.path.relpath(p, root): hashlib.sha256(open(p, "rb").read()).hexdigest()
          for p in sorted(glob.glob(os.path.join(root, "feature_log", "*")) +
                          glob.glob(os.path.join(root, "transformed", "*")))}


def test_every_record_is_logged_with_every_stage(taxi_features):
  log = _log(taxi_features["direct"])
  assert log.num_rows == 15002
  assert len(set(log.column("key").to_pylist())) == 15002
  for stage in ("raw", "parse", "window", "shard", "serialize", "transform"):
    assert log.column(f"fp_{stage}").null_count == 0, stage
  assert log.column("dropped_stage").null_count == 15002
  starts = log.column("window_start").to_numpy()
  assert ((log.column("event_time").to_numpy() - starts) < 3600).all() and (starts % 3600 == 0).all()


def _dictionary_encoded(path):
  """{column: whether its first row group's chunk is dictionary encoded} of a Parquet file."""
  group = pq.ParquetFile(path).metadata.row_group(0)
  return {group.column(i).path_in_schema: "RLE_DICTIONARY" in group.column(i).encodings
          for i in range(group.num_columns)}


def test_log_columns_unique_per_record_skip_the_parquet_dictionary(taxi_features):
  first = sorted(glob.glob(os.path.join(taxi_features["direct"], "feature_log", "*.parquet")))[0]
  encoded = _dictionary_encoded(first)
  unique = ["key"] + [f"fp_{s}" for s in ("raw", "parse", "window", "shard", "serialize",
                                          "transform", "serve")]
  assert not any(encoded[c] for c in unique), encoded
  assert all(encoded[c] for c in encoded if c not in unique), encoded


def test_raw_and_parse_fingerprints_come_from_ingest(taxi_runs, taxi_features):
  shards = pa.concat_tables([pq.read_table(p) for p in glob.glob(
      os.path.join(taxi_runs["direct"], "parquet", "*.parquet"))])
  want = dict(zip(shards.column("__key__").to_pylist(),
                  shards.column("__raw_fp__").to_numpy().view(np.uint64).tolist()))
  log = _log(taxi_features["direct"])
  got = dict(zip(log.column("key").to_pylist(), log.column("fp_raw").to_pylist()))
  assert got == want


def test_transform_fn_loads_and_transformed_examples_are_written(taxi_features):
  import tensorflow as tf
  import tensorflow_transform as tft
  out = tft.TFTransformOutput(os.path.join(taxi_features["direct"], "transform_fn"))
  vocab = out.vocabulary_by_name("payment_type")
  assert b"Cash" in vocab and b"Credit Card" in vocab
  files = sorted(glob.glob(os.path.join(taxi_features["direct"], "transformed", "*.tfrecord")))
  assert sum(1 for _ in tf.data.TFRecordDataset(files)) == 15002


def test_run_metadata_carries_profile_versions_and_bucket_digests(taxi_features, taxi_runs):
  meta = json.load(open(os.path.join(taxi_features["direct"], "run_metadata.json")))
  assert meta["profile"]["windowing"]["size_seconds"] == 3600
  manifest = json.load(open(os.path.join(taxi_runs["direct"], "manifest.json")))
  assert meta["input"]["key_columns"] == manifest["options"]["key_columns"] == []
  assert meta["input"]["content_digest"] == manifest["content_digest"]
  assert meta["log"]["rows"] == 15002 and len(meta["log"]["buckets"]) == 16
  log = _log(taxi_features["direct"])
  from transforms.spec import fingerprint
  total = fingerprint.combine_digest(np.asarray(log.column("fp_window").to_pylist(),
                                                dtype=np.uint64))
  summed = fingerprint.empty_digest()
  for b in meta["log"]["buckets"]:
    count, s, m = b["digests"]["window"].split(":")
    summed = fingerprint.add_digests(summed, {"count": int(count), "sum": int(s, 16),
                                              "mixsum": int(m, 16)})
  assert summed == total


@pytest.mark.slow
def test_identical_bytes_on_every_runner(taxi_features):
  hashes = {name: _file_hashes(root) for name, root in taxi_features.items()}
  assert len(hashes["direct"]) == 32
  assert hashes["multi_processing"] == hashes["direct"]
  assert hashes["portable_embed"] == hashes["direct"]
  metas = {name: json.load(open(os.path.join(root, "run_metadata.json")))
           for name, root in taxi_features.items()}
  for name in ("multi_processing", "portable_embed"):
    assert metas[name]["log"] == metas["direct"]["log"]
    # Exact here: mean/var and quantiles come out bit-identical on every runner for this input
    # (docs/fingerprint.md says when they may not).
    assert metas[name]["analyze"] == metas["direct"]["analyze"]


@pytest.mark.slow
def test_bounded_memory_reads_twice_and_writes_the_same_bytes(taxi_features, taxi_runs,
                                                              tmp_path, capsys):
  """--bounded_memory (TFT's deep copy: the shards read again for the transform) writes the
  default run's feature log, transformed files and analyze stage, and counts each stage's
  records once."""
  from tests.conftest import features
  capsys.readouterr()
  out = features(taxi_runs["direct"], tmp_path / "bounded", "--bounded_memory")
  printed = capsys.readouterr().out
  assert _file_hashes(out) == _file_hashes(taxi_features["direct"])
  assert len(_file_hashes(out)) == 32
  metas = [json.load(open(os.path.join(root, "run_metadata.json")))
           for root in (out, taxi_features["direct"])]
  assert metas[0]["log"] == metas[1]["log"] and metas[0]["analyze"] == metas[1]["analyze"]
  assert "records per stage: window 15002, shard 15002, serialize 15002, transform 15002" \
      in printed


def test_analyze_stage_fingerprints_each_analyzer_output(taxi_features, taxi_runs):
  import pyarrow as pa
  import pyarrow.parquet as pq
  import tensorflow_transform as tft
  from transforms.spec import feature_log, fingerprint
  root = taxi_features["direct"]
  analyze = json.load(open(os.path.join(root, "run_metadata.json")))["analyze"]["analyzers"]
  out = tft.TFTransformOutput(os.path.join(root, "transform_fn"))
  with open(out.vocabulary_file_by_name("payment_type"), "rb") as f:
    vocab = f.read()
  assert feature_log.ASSETS_DIR[0] == tft.TFTransformOutput.TRANSFORM_FN_DIR
  assert analyze["vocabulary/payment_type"]["fingerprint"] == \
      f"{fingerprint.fingerprint_record({'value': vocab}):016x}"
  # One z-score mean is the mean of trip_miles as TFT saw it (after the float32 round trip).
  miles = pa.concat_tables([pq.read_table(p, columns=["trip_miles"]) for p in glob.glob(
      os.path.join(taxi_runs["direct"], "parquet", "*.parquet"))]).column(0)
  miles = miles.drop_null().cast(pa.float32()).cast(pa.float64()).to_numpy()
  means = [a["values"][0] for name, a in analyze.items()
           if name.startswith("scale_to_z_score") and name.endswith("_sub_y")]
  assert len(means) == 4
  assert min(abs(m - miles.mean()) for m in means) < 1e-5 * abs(miles.mean())
  boundaries = [a for name, a in analyze.items() if name.startswith("bucketize")]
  assert len(boundaries) == 4 and all(b["shape"] == [1, 9] for b in boundaries)
  # Each analyzer names the output features it feeds: the mean closest to trip_miles' feeds
  # trip_miles_z, each z-score's mean and its sqrt feed the same one feature, each vocabulary
  # its *_id feature, each bucketize one *_bucket feature (transforms/features/taxi.py).
  closest = min((abs(a["values"][0] - miles.mean()), name) for name, a in analyze.items()
                if name.startswith("scale_to_z_score") and name.endswith("_sub_y"))[1]
  assert analyze[closest]["features"] == ["trip_miles_z"]
  assert analyze[closest.replace("_sub_y", "_sqrt_x")]["features"] == ["trip_miles_z"]
  assert analyze["vocabulary/payment_type"]["features"] == ["payment_type_id"]
  assert analyze["vocabulary/company"]["features"] == ["company_id"]
  fed = sorted(f for name, a in analyze.items() if name.startswith("bucketize")
               for f in a["features"])
  assert fed == sorted(f"{p}_{c}_bucket" for p in ("pickup", "dropoff")
                       for c in ("latitude", "longitude"))


def _bad_profile(tmp_path):
  path = tmp_path / "bad.yaml"
  path.write_text(open(os.path.join(ROOT, "profiles", "offline.yaml")).read().replace(
      "num_shards: 4", "num_shards: 0"))
  return str(path)


def _damaged(tmp_path, ingest_dir):
  """A copy of an ingest dataset with one byte of a Parquet shard changed."""
  import shutil
  copy = tmp_path / "damaged"
  shutil.copytree(ingest_dir, copy)
  shard = sorted(glob.glob(str(copy / "parquet" / "*.parquet")))[0]
  data = bytearray(open(shard, "rb").read())
  data[len(data) // 2] ^= 0xFF
  open(shard, "wb").write(bytes(data))
  return str(copy)


@pytest.mark.parametrize("make_args,message", [
    (lambda d, i: ["--input_dir", i, "--profile", _bad_profile(d)],
     "sharding.num_shards must be >= 1"),
    (lambda d, i: ["--input_dir", i, "--profile", os.path.join(ROOT, "profiles",
                                                               "offline.yaml"),
                   "--transform_module", "no_such.module"], "No module named"),
    (lambda d, i: ["--input_dir", str(d), "--profile", os.path.join(ROOT, "profiles",
                                                                    "offline.yaml")],
     "holds no manifest.json"),
    (lambda d, i: ["--input_dir", _damaged(d, i), "--profile",
                   os.path.join(ROOT, "profiles", "offline.yaml")], "does not verify"),
    (lambda d, i: ["--input_dir", i, "--profile", os.path.join(ROOT, "profiles",
                                                               "offline.yaml"),
                   "--num_shards", "4"], r"unknown flag\(s\): --num_shards"),  # ingest's flag
])
def test_bad_input_exits_with_usage_error_and_writes_nothing(tmp_path, taxi_runs, make_args,
                                                             message):
  from pipelines import features as job
  out = tmp_path / "out"
  argv = make_args(tmp_path, taxi_runs["direct"]) + ["--output_dir", str(out)]
  if "--transform_module" not in argv:  # required; the case is about another flag
    argv += ["--transform_module", "transforms.taxi"]
  with pytest.raises(common.UsageError, match=message):
    job.run(argv)
  assert not out.exists()


def test_dataset_lacking_the_modules_columns_is_refused(tmp_path):
  from pipelines import features as job
  from tests.conftest import EDGE, ingest
  small = ingest(tmp_path / "small", "--num_shards", "1",
                 inputs=os.path.join(EDGE, "empty_values.csv"))
  with pytest.raises(common.UsageError, match=r"lacks column\(s\) trip_start_timestamp"):
    job.run(["--input_dir", small, "--output_dir", str(tmp_path / "out"), "--profile",
             os.path.join(ROOT, "profiles", "offline.yaml"), "--transform_module",
             "transforms.taxi"])
  assert not (tmp_path / "out").exists()


def test_log_rows_and_run_metadata_match_their_json_schemas(taxi_features):
  import jsonschema
  root = taxi_features["direct"]
  with open(os.path.join(ROOT, "manifests", "run_metadata.schema.json")) as f:
    meta_schema = json.load(f)
  meta = json.load(open(os.path.join(root, "run_metadata.json")))
  jsonschema.validate(meta, meta_schema)
  del meta["input"]["key_columns"]  # the production logger relies on it being there
  with pytest.raises(jsonschema.ValidationError, match="key_columns"):
    jsonschema.validate(meta, meta_schema)
  with open(os.path.join(ROOT, "manifests", "feature_log.schema.json")) as f:
    row_schema = json.load(f)
  for row in _log(root).slice(0, 200).to_pylist():
    jsonschema.validate(row, row_schema)


def _log_batches(n, seed, multi_value_rows=()):
  """(staged, transformed) as WriteFeatureLog receives them: the records going into TFT (stage
  columns and LOG_HASH), and TFT's output for them in another row order (feature list columns,
  LOG_HASH and the raw fingerprint passed through)."""
  from transforms.spec import feature_log as log_format
  from transforms.stages import write_feature_log as fl
  from transforms.spec.stages import (PARSE_FP as FP, RAW_FP, SERIALIZE_FP, SHARD_FP,
                                      SHARD_ID, WINDOW_END, WINDOW_FP, WINDOW_START)
  rng = np.random.default_rng(seed)
  starts = rng.integers(0, 10**6, n) * 3600
  staged = fl.with_log_hash(pa.record_batch({
      "__key__": pa.array([f"k{seed}-{i}" for i in range(n)], pa.large_string()),
      "trip_start_timestamp": pa.array(starts + rng.integers(0, 3600, n)),
      WINDOW_START: pa.array(starts), WINDOW_END: pa.array(starts + 3600),
      SHARD_ID: pa.array(rng.integers(0, 4, n)),
      RAW_FP: pa.array(rng.integers(0, 2**62, n)), FP: pa.array(rng.integers(0, 2**62, n)),
      **{c: pa.array(rng.integers(0, 2**62, n).astype(np.uint64))
         for c in (WINDOW_FP, SHARD_FP, SERIALIZE_FP)}}))
  lengths = np.ones(n, dtype=np.int32)
  lengths[list(multi_value_rows)] = 2
  offsets = np.zeros(n + 1, dtype=np.int32)
  np.cumsum(lengths, out=offsets[1:])
  transformed = pa.record_batch({
      "f_z": pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)),
                                      pa.array(rng.normal(size=n).astype(np.float32))),
      "g_id": pa.ListArray.from_arrays(pa.array(offsets),
                                       pa.array(rng.integers(0, 9, offsets[-1]))),
      **{c: staged.column(c) for c in log_format.passthrough_columns()}})
  return staged, transformed


def _dropped_batch(n, seed):
  rng = np.random.default_rng(seed)
  return pa.record_batch({
      "__key__": pa.array([f"d{seed}-{i}" for i in range(n)], pa.large_string()),
      "trip_start_timestamp": pa.array(rng.integers(0, 10**9, n)),
      "__drop_reason__": pa.array(["late"] * n),
      "__raw_fp__": pa.array(rng.integers(0, 2**62, n)),
      "__parse_fp__": pa.array(rng.integers(0, 2**62, n))})


def _parts(tmp, staged, transformed, dropped, num_buckets):
  """{bucket: part paths} the log's part writers write for the given bundling."""
  from transforms.stages import write_feature_log as fl
  parts = {}
  writers = [(fl._WriteHeadPartsFn(str(tmp), num_buckets, "trip_start_timestamp", False),
              staged),
             (fl._WriteValuesPartsFn(str(tmp), num_buckets), transformed),
             (fl._WriteHeadPartsFn(str(tmp), num_buckets, "trip_start_timestamp", True),
              dropped)]
  for fn, batches in writers:
    for b in batches:
      for bucket, path in fn.work(b):
        parts.setdefault(bucket, []).append(path)
  return parts


def _write_log(tmp, staged, transformed, dropped, num_buckets=4):
  """Runs the log's part writers over the given bundling, then merges: {file: bytes}, infos."""
  from transforms.stages import write_feature_log as fl
  parts = _parts(tmp, staged, transformed, dropped, num_buckets)
  infos = [fl.merge_bucket(str(tmp), num_buckets, b, paths) for b, paths in sorted(parts.items())]
  files = {os.path.relpath(p, tmp): open(p, "rb").read() for p in sorted(
      glob.glob(os.path.join(str(tmp), "feature_log", "*")) +
      glob.glob(os.path.join(str(tmp), "transformed", "*")))}
  return files, infos


def test_feature_log_bytes_do_not_depend_on_bundling(tmp_path):
  # The same records split into parts differently (and in another order, TFT's output in yet
  # another) must give the same files: the merge lines the transformed rows up with their stage
  # columns and sorts, and a feature is a scalar column iff all of a bucket's rows hold one
  # value, whichever part they came in.
  staged, transformed = _log_batches(300, 1)
  dropped = _dropped_batch(40, 2)
  one, info_one = _write_log(tmp_path / "one", [staged], [transformed], [dropped])
  shuffled = transformed.take(pa.array(np.random.default_rng(3).permutation(300)))
  split, info_split = _write_log(
      tmp_path / "split", [staged.slice(200), staged.slice(0, 70), staged.slice(70, 130)],
      [shuffled.slice(0, 150), shuffled.slice(150)], [dropped.slice(25), dropped.slice(0, 25)])
  assert len(one) == 8 and one == split and info_one == info_split
  log = pa.concat_tables([pq.read_table(tmp_path / "one" / p) for p in sorted(one)
                          if p.endswith(".parquet")])
  assert log.num_rows == 340 and log.column("dropped_stage").null_count == 300
  assert pa.types.is_floating(log.schema.field("value__f_z").type)  # one value: a scalar
  assert pa.types.is_integer(log.schema.field("value__g_id").type)
  for b in pq.ParquetFile(tmp_path / "one" / sorted(one)[0]).iter_batches():
    keys = b.column("key").to_pylist()
    assert keys == sorted(keys)
  # each record's transformed values sit beside its own stage columns
  from transforms.spec import fingerprint
  i = 7
  row = [r for r in log.to_pylist() if r["key"] == f"k1-{i}"][0]
  assert row["value__f_z"] == transformed.column("f_z")[i].as_py()[0]
  assert row["value__g_id"] == transformed.column("g_id")[i].as_py()[0]
  assert row["fp_raw"] == staged.column("__raw_fp__")[i].as_py()
  assert row["window_start"] == staged.column("__window_start__")[i].as_py()
  assert row["fp__f_z"] == fingerprint.fingerprint_record({"f_z": row["value__f_z"]})
  assert row["fp_transform"] == fingerprint.fingerprint_record(
      {"f_z": row["value__f_z"], "g_id": row["value__g_id"]})



def test_log_order_of_identical_records_never_follows_tft_output_order(tmp_path):
  # Five records appear twice (same key, same fingerprint at every stage before TFT); their
  # copies come back from TFT with other values, as a preprocessing_fn that is not a function
  # of the record would give: the log orders them by fp_transform, not by TFT's output order.
  staged, transformed = _log_batches(20, 5)
  again = transformed.slice(0, 5)
  again = again.set_column(again.schema.get_field_index("f_z"), "f_z", pa.ListArray.from_arrays(
      pa.array(np.arange(6, dtype=np.int32)), pa.array(np.arange(5, dtype=np.float32) + 0.5)))
  staged = pa.Table.from_batches([staged, staged.slice(0, 5)]).combine_chunks().to_batches()[0]
  both = pa.Table.from_batches([transformed, again]).combine_chunks().to_batches()[0]
  one, _ = _write_log(tmp_path / "one", [staged], [both], [], num_buckets=1)
  flipped = both.take(pa.array(np.arange(both.num_rows)[::-1]))
  other, _ = _write_log(tmp_path / "other", [staged], [flipped], [], num_buckets=1)
  assert one == other
  log = pq.read_table(tmp_path / "one" / sorted(one)[0])
  keys = log.column("key").to_pylist()
  assert log.num_rows == 25 and keys == sorted(keys)

def test_merge_refuses_transformed_rows_that_do_not_match_the_records(tmp_path):
  from transforms.stages import write_feature_log as fl
  staged, transformed = _log_batches(50, 4)
  parts = _parts(tmp_path, [staged], [transformed.slice(1)], [], 1)  # one row never came back
  with pytest.raises(ValueError, match="50 records went into TFT but 49"):
    fl.merge_bucket(str(tmp_path), 1, 0, parts[0])
  other = transformed.set_column(  # as many rows, but one is another record's
      transformed.schema.get_field_index("__raw_fp__"), "__raw_fp__",
      pa.array([1] + transformed.column("__raw_fp__").to_pylist()[1:]))
  parts = _parts(tmp_path / "b", [staged], [other], [], 1)
  with pytest.raises(ValueError, match="do not match"):
    fl.merge_bucket(str(tmp_path / "b"), 1, 0, parts[0])
  parts = _parts(tmp_path / "c", [], [transformed], [], 1)  # values of no record at all
  with pytest.raises(ValueError, match="0 records went into TFT but 50"):
    fl.merge_bucket(str(tmp_path / "c"), 1, 0, parts[0])



def test_stage_fingerprint_columns_read_unsigned_keep_their_nulls():
  from transforms.stages import write_feature_log as fl
  got = fl._as_uint64(pa.chunked_array([[5, None], [-1]], pa.int64()))
  assert got.type == pa.uint64() and got.to_pylist() == [5, None, 2**64 - 1]


def test_feature_log_keeps_lists_when_some_part_has_several_values(tmp_path):
  from transforms.stages import write_feature_log as fl
  staged, kept = _log_batches(200, 3, multi_value_rows=[150])
  fn = fl._WriteValuesPartsFn(str(tmp_path), 1)
  parts = [fl._read_part(path) for b in (kept.slice(0, 100), kept.slice(100))
           for _, path in fn.work(b)]
  # the first part is one-valued (stored flat), the second is not: the bucket keeps lists
  assert pa.types.is_integer(parts[0].schema.field("value__g_id").type)
  column = fl._feature_column(parts, "value__g_id")
  assert column.type == kept.column("g_id").type
  assert column.to_pylist() == kept.column("g_id").to_pylist()
  assert fl._feature_column(parts, "value__f_z").to_pylist() == \
      kept.column("f_z").flatten().to_pylist()
  from transforms.spec import fingerprint
  heads = [fl._read_part(path) for _, path in fl._WriteHeadPartsFn(
      str(tmp_path), 1, "trip_start_timestamp", False).work(staged)]
  log, names = fl._merged_log(heads, parts, [], 0)  # g_id is mixed: its fingerprints are over lists
  assert names == ["f_z", "g_id"]
  rows = log.to_pylist()
  assert all(r["fp__g_id"] == fingerprint.fingerprint_record({"g_id": r["value__g_id"]}) and
             r["fp_transform"] == fingerprint.fingerprint_record(
                 {"f_z": r["value__f_z"], "g_id": r["value__g_id"]}) for r in rows)
  assert all(r["fp__f_z"] == fingerprint.fingerprint_record({"f_z": r["value__f_z"]})
             for r in rows)
  # transformed/ holds one-value features only, as before, whichever part has the lists
  with pytest.raises(ValueError, match="several values per record"):
    fl.merge_bucket(str(tmp_path), 1, 0, _parts(tmp_path, [staged], [kept], [], 1)[0])


def test_serialize_runs_ahead_but_keeps_order_windows_and_timestamps():
  from apache_beam.transforms.window import IntervalWindow
  from transforms.stages import serialize_records as sr
  from tests.test_window_records import BASE
  fn = sr._SerializeFn(["x"], BASE)
  fn.setup()
  fn.start_bundle()
  batches = [pa.record_batch({"x": pa.array(np.arange(i, i + 5) / 3.0)}) for i in range(4)]
  out = []
  for i, b in enumerate(batches):
    out += list(fn.process(b, timestamp=i, window=IntervalWindow(i, i + 1)))
  assert len(out) == 3  # one batch is still in flight
  out += list(fn.finish_bundle())
  fn.teardown()
  assert [v.timestamp.micros for v in out] == [i * 10**6 for i in range(4)]
  assert [v.windows[0].start.micros for v in out] == [i * 10**6 for i in range(4)]
  for b, v in zip(batches, out):
    assert v.value.column("x").to_pylist() == [float(np.float32(x)) for x in
                                               b.column("x").to_pylist()]


def test_tft_batches_carry_the_passthrough_columns_back():
  from transforms.graph import feed as tr
  from transforms.spec.stages import PASSTHROUGH
  b = pa.record_batch({"__key__": pa.array(["a", "b"], pa.large_string()),
                       "x": pa.array([1.5, None]), "t": pa.array([7, 8]),
                       "w": pa.array([1, 2], pa.uint64())})
  tft = tr.to_tft_batch(b, ["x", "t"], {"__t__": "t", "w": "w"})
  assert tft.schema.names == ["x", "t", PASSTHROUGH]  # only what is asked for rides along
  # features as one-value lists with 32-bit offsets (fewer bytes materialised for TFT)
  assert tft.schema.field("x").type == pa.list_(pa.float64())
  assert tft.column(0).to_pylist() == [[1.5], None] and tft.column(1).to_pylist() == [[7], [8]]
  assert tr.passthrough_keys({"__t__": "t"}) == {PASSTHROUGH}
  assert tr.to_tft_batch(b, ["x"]).schema.names == ["x"] and tr.passthrough_keys() == set()
  back = tr.from_tft((tft.select(["x", PASSTHROUGH]), {}))
  assert back.column("__t__").to_pylist() == [7, 8]
  assert back.column("w").type == pa.uint64() and back.column("w").to_pylist() == [1, 2]
  assert back.column("x").to_pylist() == [[1.5], None]


@pytest.mark.slow
def test_the_same_command_again_replaces_its_own_output(taxi_runs, taxi_features, tmp_path):
  """A run killed after publishing (or rerun nightly) leaves its complete output: the same
  command again replaces it, as ingest and diff do theirs; another run's output, or a killed
  publish's leftovers beside a foreign file, still need --overwrite."""
  out = tmp_path / "out"
  shutil.copytree(taxi_features["direct"], out)
  assert features(taxi_runs["direct"], out) == str(out)
  assert _file_hashes(str(out)) == _file_hashes(taxi_features["direct"])
  # Another option (8 log buckets): another run's output, refused, nothing touched.
  before = _file_hashes(str(out))
  argv = ["--input_dir", taxi_runs["direct"], "--output_dir", str(out), "--profile",
          os.path.join(ROOT, "profiles", "offline.yaml"), "--transform_module",
          "transforms.taxi", "--log_buckets", "8"]
  from pipelines import features as features_job
  with pytest.raises(common.UsageError, match="already holds another features run"):
    features_job.run(argv)
  assert _file_hashes(str(out)) == before
