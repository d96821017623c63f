"""replay.diff end to end on real taxi feature logs: identical logs, then production copies whose
Parquet logs and run metadata are rewritten consistently (digests recomputed), usage errors.

Expected counts come from what each test changed, never from the diff itself.
"""
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
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import xxhash

from apache_beam.metrics.metric import MetricsFilter

from pipelines import common
from pipelines.common import UsageError
from replay.diff import job as diff
from tests.conftest import ROOT
from transforms.spec import feature_log, fingerprint

TOTAL = 15002
DIGEST_STAGES = ("raw", "parse", "window", "shard", "serialize", "transform")
WINDOW_BUCKET, DROP_BUCKET, NOISE_BUCKET = 2, 4, 6
CORRUPT_BUCKET, DELETE_BUCKET = 9, 11
NOISE = 1e-6


def _schema():
  with open(os.path.join(ROOT, "manifests", "report.schema.json")) as f:
    return json.load(f)


def _copy(src, dst):
  os.makedirs(dst)
  shutil.copy(os.path.join(src, "run_metadata.json"), dst)
  shutil.copytree(os.path.join(src, "feature_log"), os.path.join(dst, "feature_log"))
  return str(dst)


def _meta(root):
  with open(os.path.join(root, "run_metadata.json")) as f:
    return json.load(f)


def _save_meta(root, meta):
  with open(os.path.join(root, "run_metadata.json"), "w") as f:
    json.dump(meta, f)


def _rewrite(root, bucket, edit, parts=1):
  """Applies edit(table) -> table to one bucket's log and rewrites the bucket's metadata entry
  (rows, dropped, every stage digest) from the new rows; parts > 1 writes it as that many
  part files (rows reversed), as the production logger may."""
  meta = _meta(root)
  entry = next(b for b in meta["log"]["buckets"] if b["bucket"] == bucket)
  path = os.path.join(root, entry["path"])
  table = edit(pq.read_table(path))
  os.remove(path)
  if parts == 1:
    pq.write_table(table, path)
  else:
    rev = table.take(pa.array(np.arange(table.num_rows)[::-1]))
    cuts = np.linspace(0, rev.num_rows, parts + 1).astype(int)
    for i in range(parts):
      pq.write_table(rev.slice(cuts[i], cuts[i + 1] - cuts[i]),
                     path.replace(".parquet", f"-part-{i:06d}.parquet"))
    # listed as a logger lists its parts
    listed = entry["path"]
    entry["parts"] = [listed.replace(".parquet", f"-part-{i:06d}.parquet") for i in range(parts)]
    entry["path"] = listed.replace(".parquet", "*.parquet")  # the bucket's glob, as a logger
  entry["rows"] = table.num_rows
  entry["dropped"] = table.num_rows - table.column("dropped_stage").null_count
  # every digest the writers record (the stages' and the key's), from the new rows
  entry["digests"] = {s: fingerprint.digest_hex(d)
                      for s, d in feature_log.stage_digests(table).items()}
  meta["log"]["rows"] = sum(b["rows"] for b in meta["log"]["buckets"])
  _save_meta(root, meta)


def _set(table, name, values):
  return table.set_column(table.schema.get_field_index(name), name, values)


def _change_window(changed):
  def edit(t):
    fp = t.column("fp_window").to_numpy().copy()
    fp[:5] += np.uint64(1)
    changed["window"] = t.column("key").to_pylist()[:5]
    return _set(t, "fp_window", pa.array(fp))
  return edit


def _drop(changed):
  """Removes the first 3 records; marks the next 2 dropped at the window stage."""
  def edit(t):
    keys = t.column("key").to_pylist()
    changed["absent"], changed["dropped"] = keys[:3], keys[3:5]
    t = t.slice(3)
    n = t.num_rows
    late = np.zeros(n, bool)
    late[:2] = True
    mask = pa.array(late)
    for name in t.schema.names:
      if name.startswith(("fp__", "value__")) or name in ("fp_window", "fp_shard", "fp_serialize",
                                                          "fp_transform", "window_start",
                                                          "window_end", "shard_id"):
        col = t.column(name).combine_chunks()
        t = _set(t, name, pc.if_else(mask, pa.scalar(None, col.type), col))
    t = _set(t, "dropped_stage", pa.array(["window"] * 2 + [None] * (n - 2), pa.string()))
    return _set(t, "drop_reason", pa.array(["late"] * 2 + [None] * (n - 2), pa.string()))
  return edit


def _noise(changed):
  """fare_z of the first 10 records with a non-zero value scaled by (1 + NOISE), with fp__fare_z
  and fp_transform recomputed over the values, as the feature log computes them."""
  def edit(t):
    v = t.column("value__fare_z").to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(v != 0)[:10]
    new = v.astype(np.float64)
    new[rows] *= 1 + NOISE
    new = new.astype(np.float32)
    t = _set(t, "value__fare_z", pa.array(new, pa.float32()))
    names = sorted(n[len("value__"):] for n in t.schema.names if n.startswith("value__"))
    values = pa.table({n: t.column("value__" + n) for n in names})
    t = _set(t, "fp__fare_z", pa.array(fingerprint.fingerprint_batch(values, ["fare_z"])))
    before = t.column("fp_transform").to_numpy()
    after = fingerprint.fingerprint_batch(values)
    changed["noise"] = int(np.count_nonzero(before != after))
    changed["noise_max"] = float(np.max(np.abs(new[rows].astype(np.float64) -
                                               v[rows].astype(np.float64))))
    t = _set(t, "fp_serve", pa.array(after))  # no served values: serve is the transform
    return _set(t, "fp_transform", pa.array(after))
  return edit


@pytest.fixture(scope="module")
def logs(taxi_features, tmp_path_factory):
  """The offline taxi log, and a production copy with three buckets changed."""
  d = tmp_path_factory.mktemp("diff")
  offline = taxi_features["direct"]
  prod = _copy(offline, d / "production")
  changed = {}
  _rewrite(prod, WINDOW_BUCKET, _change_window(changed), parts=2)
  _rewrite(prod, DROP_BUCKET, _drop(changed))
  _rewrite(prod, NOISE_BUCKET, _noise(changed))
  assert changed["noise"] == 10
  return {"dir": d, "offline": offline, "production": prod, "changed": changed}


def _diff(offline, production, out, *flags):
  code = diff.run(["--offline", offline, "--production", production, "--output_dir", str(out)]
                  + list(flags))
  with open(os.path.join(str(out), "report.json")) as f:
    report = json.load(f)
  jsonschema.validate(report, _schema(), cls=jsonschema.Draft202012Validator)
  return code, report


@pytest.fixture(scope="module")
def tolerant(logs):
  return _diff(logs["offline"], logs["production"], logs["dir"] / "tolerant", "--rel_tol", "1e-5",
               "--max_divergent_fraction", "0.001")


def _hash_order(keys):
  return sorted(keys, key=lambda k: xxhash.xxh64_intdigest(k.encode("utf-8"), seed=0))


# --------------------------------------------------------------------------- end to end
def test_identical_logs_skip_every_bucket(taxi_features, tmp_path, capsys):
  offline = taxi_features["direct"]
  code, r = _diff(offline, offline, tmp_path / "same")
  assert code == 0 and r["exit_code"] == 0
  assert r["records"]["identical"] == r["records"]["matched_keys"] == TOTAL
  assert r["records"]["divergent"] == 0 and r["divergent_fraction"] == 0.0
  assert r["buckets"] == {"total": 16, "compared": 0, "skipped_equal": 16}
  assert r["suspected_causes"] == [] and r["drift"] == {}
  assert all(f["match"] == TOTAL for f in r["features"].values())
  assert os.path.exists(tmp_path / "same" / "report.html")
  assert f"report: {tmp_path / 'same' / 'report.html'} (data: report.json beside it)" in \
      capsys.readouterr().out


def test_changed_buckets_give_exact_counts(logs, tolerant):
  code, r = tolerant
  c = logs["changed"]
  noise = c["noise"]
  rec = r["records"]
  assert code == 0  # (0 divergent + 5 one side) / 15002 < 0.001
  assert rec["offline"] == TOTAL and rec["production"] == TOTAL - 3
  assert rec["matched_keys"] == TOTAL - 5
  assert rec["offline_only"] == 5 and rec["production_only"] == 0
  # The 5 window fingerprints changed, their transformed values did not: latent.
  assert rec["divergent"] == 0 and rec["latent"] == 5 and rec["noise"] == noise
  assert rec["identical"] == TOTAL - 5 - 5 - noise
  assert r["divergent_fraction"] == pytest.approx(5 / TOTAL)
  assert {s: n for s, n in r["first_divergent_stage"].items() if n} == {"window": 5}
  assert {s: n for s, n in r["reaches_model"].items() if n} == {}
  assert r["stages"]["window"]["mismatch"] == 5 and r["stages"]["shard"]["mismatch"] == 0
  assert r["stages"]["transform"]["mismatch"] == noise
  assert r["one_side_only"] == {"offline": {"absent": 3, "window": 2}, "production": {}}
  assert r["buckets"] == {"total": 16, "compared": 3, "skipped_equal": 13}
  fare = r["features"]["fare_z"]
  assert fare["within_tolerance"] == noise and fare["mismatch"] == 0
  assert fare["max_abs_delta"] == pytest.approx(c["noise_max"])
  assert [s["key"] for s in r["samples"]["latent"]] == _hash_order(c["window"])
  assert {s["first_divergent_stage"] for s in r["samples"]["latent"]} == {"window"}
  assert r["samples"]["divergent"] == []
  assert [(s["key"], s["reason"]) for s in r["samples"]["offline_only"]] == \
      [(k, "absent" if k in c["absent"] else "window")
       for k in _hash_order(c["absent"] + c["dropped"])]
  assert set(r["drift"]) == set(r["features"])


def test_noise_is_noise_at_the_defaults_and_divergent_at_transform_when_exact(logs):
  noise = logs["changed"]["noise"]
  # 1e-6 relative on fare_z (float32) is within sqrt(N) * 2**-24 (N = the larger log's rows).
  rows = max(_meta(logs[s])["log"]["rows"] for s in ("offline", "production"))
  assert NOISE <= np.sqrt(rows) * 2.0 ** -24
  code, r = _diff(logs["offline"], logs["production"], logs["dir"] / "defaults")
  assert code == 1  # the 5 one-side-only records
  assert r["records"]["noise"] == noise == r["noise"]["records"]
  assert r["records"]["divergent"] == 0 and r["records"]["latent"] == 5
  assert r["tolerance"]["default"]["noise"]["records"] == rows
  assert r["analyzers"] == {"state": "equal", "records": rows, "analyzers": []}
  assert r["noise"]["why"] and "float noise" in r["noise"]["why"][0]
  code, r = _diff(logs["offline"], logs["production"], logs["dir"] / "strict",
                  "--abs_tol", "0", "--rel_tol", "0")
  assert code == 1
  assert {s: n for s, n in r["first_divergent_stage"].items() if n} == \
      {"window": 5, "transform": noise}
  assert r["records"]["divergent"] == noise and r["records"]["noise"] == 0
  assert r["records"]["latent"] == 5
  assert r["features"]["fare_z"]["mismatch"] == noise
  assert r["divergent_fraction"] == pytest.approx((noise + 5) / TOTAL)


def test_per_feature_tolerance_covers_its_feature_only(logs):
  noise = logs["changed"]["noise"]
  _, r = _diff(logs["offline"], logs["production"], logs["dir"] / "per_feature", "--abs_tol",
               "0", "--tolerance", "fare_z=0:1e-5", "--tolerance", "trip_miles_z=0:1")
  assert r["records"]["noise"] == noise and r["records"]["divergent"] == 0
  assert r["tolerance"]["features"] == {"fare_z": {"abs": 0.0, "rel": 1e-5},
                                        "trip_miles_z": {"abs": 0.0, "rel": 1.0}}
  _, r = _diff(logs["offline"], logs["production"], logs["dir"] / "other_feature",
               "--abs_tol", "0", "--tolerance", "trip_miles_z=0:1")
  assert r["records"]["noise"] == 0 and r["records"]["divergent"] == noise


def _skipped_bucket_broken(logs, name, damage):
  """The diff of the offline log against a copy of itself (every bucket equal, none read)
  with damage(path of bucket CORRUPT_BUCKET's file, copy folder) applied."""
  prod = _copy(logs["offline"], logs["dir"] / name)
  entry = next(b for b in _meta(prod)["log"]["buckets"] if b["bucket"] == CORRUPT_BUCKET)
  path = os.path.join(prod, entry["path"])
  damage(path, prod)
  return prod, path


def _truncate(path, _):
  with open(path, "r+b") as f:
    f.truncate(os.path.getsize(path) - 10)


def _overwrite(path, _):
  with open(path, "wb") as f:
    f.write(b"not parquet at all")


def _foreign(path, root):
  shutil.copy(path, path.replace(".parquet", "-part-000000.parquet"))


@pytest.mark.parametrize("damage,message", [
    (lambda path, _: os.remove(path), "is listed in run_metadata.json but missing"),
    (_overwrite, "is not a readable Parquet file"),
    (_truncate, "is not a readable Parquet file"),
    (_foreign, "is not listed in run_metadata.json"),
])
def test_a_damaged_bucket_is_an_input_error_even_where_digests_agree(logs, damage, message):
  """Buckets equal on every digest are not read, but each listed file must exist, whole (a
  readable footer) and alone: a deleted, overwritten, truncated or foreign file is exit 2
  naming it, never "no divergence"."""
  name = getattr(damage, "__name__", "deleted").strip("_<>")
  prod, path = _skipped_bucket_broken(logs, f"skipped_{name}", damage)
  with pytest.raises(UsageError, match=message) as e:
    diff.run(["--offline", logs["offline"], "--production", prod,
              "--output_dir", str(logs["dir"] / f"skipped_{name}_out")])
  assert os.path.basename(path).replace(".parquet", "") in str(e.value)
  assert not (logs["dir"] / f"skipped_{name}_out").exists()


@pytest.mark.parametrize("edit,message", [
    (lambda m: m["log"]["buckets"].pop(3), "log.rows is 15002 but its buckets hold"),
    (lambda m: m["log"]["buckets"].append(dict(m["log"]["buckets"][3])), "listed twice"),
    (lambda m: m["log"].update(rows=m["log"]["rows"] + 1), "log.rows is 15003"),
    (lambda m: m["log"]["buckets"][0].update(dropped=10 ** 6), "dropped of"),
])
def test_run_metadata_whose_buckets_disagree_with_log_rows_is_an_input_error(logs, edit,
                                                                             message):
  prod = _copy(logs["offline"], logs["dir"] / ("meta_" + "".join(
      c if c.isalnum() else "_" for c in message)))
  meta = _meta(prod)
  edit(meta)
  _save_meta(prod, meta)
  with pytest.raises(UsageError, match=message):
    diff.run(["--offline", logs["offline"], "--production", prod,
              "--output_dir", str(logs["dir"] / "meta_out")])


def test_a_byte_flipped_inside_a_page_that_still_decodes_fails_its_checksum(logs):
  """The job writes a CRC per page (feature_log.parquet_options). One bit of a float value
  flipped in an uncompressed PLAIN page decodes as another value; the diff reading the bucket finds
  the checksum wrong and stops: exit 2 naming the file, no report."""
  prod = _copy(logs["offline"], logs["dir"] / "flipped")
  meta = _meta(prod)
  entry = next(b for b in meta["log"]["buckets"] if b["bucket"] == CORRUPT_BUCKET)
  path = os.path.join(prod, entry["path"])
  table = pq.read_table(path)
  options = dict(feature_log.parquet_options(table.schema.names), use_dictionary=False)
  pq.write_table(table, path, compression="NONE", **options)  # PLAIN floats, as they are
  # The bucket is read when a digest differs: here its transform digest is edited.
  digest = entry["digests"]["transform"]
  entry["digests"]["transform"] = digest[:-1] + ("0" if digest[-1] != "0" else "1")
  _save_meta(prod, meta)
  group = pq.read_metadata(path).row_group(0)
  chunk = next(group.column(i) for i in range(group.num_columns)
               if group.column(i).path_in_schema == "value__fare_z")
  last = chunk.data_page_offset + chunk.total_compressed_size - 1  # a value byte of the page
  with open(path, "r+b") as f:
    f.seek(last)
    byte = f.read(1)
    f.seek(last)
    f.write(bytes([byte[0] ^ 0x01]))
  flipped = pq.read_table(path).column("value__fare_z")  # still decodes, without the check
  assert not flipped.equals(table.column("value__fare_z"))
  with pytest.raises(common.DataError, match="not a readable Parquet file") as e:
    diff.run(["--offline", logs["offline"], "--production", prod,
              "--output_dir", str(logs["dir"] / "flipped_out")])
  assert os.path.basename(path) in str(e.value)
  assert not (logs["dir"] / "flipped_out" / "report.json").exists()


@pytest.mark.slow
def test_reports_are_identical_bytes_on_multi_processing(logs, tolerant):
  out = logs["dir"] / "multi"
  code, r = _diff(logs["offline"], logs["production"], out, "--rel_tol", "1e-5",
                  "--max_divergent_fraction", "0.001", "--direct_running_mode=multi_processing",
                  "--direct_num_workers=2")
  assert (code, r) == tolerant
  with open(logs["dir"] / "tolerant" / "report.json", "rb") as a, \
      open(out / "report.json", "rb") as b:
    assert a.read() == b.read()


def test_beam_counters(logs, tmp_path):
  argv = ["--offline", logs["offline"], "--production", logs["production"],
          "--output_dir", str(tmp_path)]
  options, _, _ = common.job_options(argv, diff.DiffOptions, False)
  plan = diff.plan_diff(common.flags_of(diff.DiffFlags, options, diff.DiffOptions))
  assert [b for b, _ in plan.tasks] == [WINDOW_BUCKET, DROP_BUCKET, NOISE_BUCKET]
  assert len(plan.tasks[0][1]["production"]) == 2  # the bucket written as two parts
  result = diff.build_pipeline(plan, options, str(tmp_path / "r.json"),
                               str(tmp_path / "errors.json")).run()
  result.wait_until_finish()
  found = result.metrics().query(MetricsFilter().with_namespace(diff.METRICS_NAMESPACE))
  counters = {c.key.metric.name: c.committed for c in found["counters"]}
  assert counters["buckets_compared"] == 3
  assert counters["divergent"] == 0 and counters["latent"] == 5
  assert counters["noise"] == logs["changed"]["noise"]
  assert counters["offline_only"] == 5
  read = sum(b["rows"] for b in _meta(logs["offline"])["log"]["buckets"]
             if b["bucket"] in (WINDOW_BUCKET, DROP_BUCKET, NOISE_BUCKET))
  assert counters["rows_read_offline"] == read
  assert counters["rows_read_production"] == read - 3


def test_a_corrupt_file_in_a_differing_bucket_is_a_usage_error(logs):
  prod = _copy(logs["production"], logs["dir"] / "corrupt")
  meta = _meta(prod)
  entry = next(b for b in meta["log"]["buckets"] if b["bucket"] == DROP_BUCKET)
  with open(os.path.join(prod, entry["path"]), "wb") as f:
    f.write(b"PAR1 garbage")
  with pytest.raises(UsageError, match="not a readable Parquet file"):
    diff.run(["--offline", logs["offline"], "--production", prod,
              "--output_dir", str(logs["dir"] / "corrupt_out")])


def test_a_file_corrupt_past_its_footer_is_one_line_exit_2(logs):
  """The footer (checked before the job) is intact; the compressed page of a column in the
  middle of the file is not (bytes flipped past its page header), as a torn write leaves it."""
  prod = _copy(logs["production"], logs["dir"] / "corrupt_body")
  entry = next(b for b in _meta(prod)["log"]["buckets"] if b["bucket"] == DROP_BUCKET)
  path = os.path.join(prod, entry["path"])
  group = pq.read_metadata(path).row_group(0)
  chunk = next(group.column(i) for i in range(group.num_columns)
               if group.column(i).path_in_schema == "fp_window")
  start = (chunk.dictionary_page_offset or chunk.data_page_offset) + 20
  with open(path, "r+b") as f:
    f.seek(start)
    flipped = bytes(b ^ 0xFF for b in f.read(64))
    f.seek(start)
    f.write(flipped)
  with pytest.raises(OSError):
    pq.read_table(path)
  assert pq.read_metadata(path).num_rows == entry["rows"]
  out = logs["dir"] / "corrupt_body_out"
  env = dict(os.environ, PYTHONHASHSEED="0")
  proc = subprocess.run([sys.executable, "-m", "replay.diff", "--offline", logs["offline"],
                         "--production", prod, "--output_dir", str(out)], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert "Traceback" not in proc.stderr
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("error: ") and os.path.basename(path) in last
  assert not os.path.exists(out / "report.json")


def test_a_missing_file_of_a_differing_bucket_is_a_usage_error(logs):
  prod = _copy(logs["production"], logs["dir"] / "missing")
  meta = _meta(prod)
  entry = next(b for b in meta["log"]["buckets"] if b["bucket"] == NOISE_BUCKET)
  os.remove(os.path.join(prod, entry["path"]))
  with pytest.raises(UsageError, match=f"bucket-{NOISE_BUCKET:05d}-.* is listed in "
                                      "run_metadata.json but missing"):
    diff.run(["--offline", logs["offline"], "--production", prod,
              "--output_dir", str(logs["dir"] / "missing_out")])


def test_log_and_metadata_out_of_step_is_a_usage_error(logs):
  prod = _copy(logs["production"], logs["dir"] / "step")
  meta = _meta(prod)
  entry = next(b for b in meta["log"]["buckets"] if b["bucket"] == DROP_BUCKET)
  entry["rows"] += 1
  meta["log"]["rows"] += 1  # self-consistent metadata; the file holds one row fewer
  _save_meta(prod, meta)
  with pytest.raises(UsageError, match="out of step"):
    diff.run(["--offline", logs["offline"], "--production", prod,
              "--output_dir", str(logs["dir"] / "step_out")])


# --------------------------------------------------------------------------- usage errors
def _meta_only(src, dst, edit=None, text=None):
  os.makedirs(dst)
  if text is not None:
    (dst / "run_metadata.json").write_text(text)
  elif edit is not None:
    meta = _meta(src)
    edit(meta)
    _save_meta(str(dst), meta)
  return str(dst)


def _set_key(path, value):
  def edit(meta):
    d = meta
    for p in path[:-1]:
      d = d[p]
    d[path[-1]] = value
  return edit


@pytest.mark.parametrize("case,match", [
    ("missing_dir", "no such folder"), ("no_metadata", "no run_metadata.json"),
    ("corrupt_metadata", "not valid JSON"), ("format", "format"),
    ("num_buckets", "num_buckets"), ("seed", "seed"), ("negative", "--abs_tol"),
    ("feature_tol", "--tolerance"), ("unknown_feature", "the logs lack"),
    ("categorical_tol", "categorical feature"), ("flag", "unknown flag"),
    ("fraction", "max_divergent"), ("no_output", "--output_dir")])
def test_usage_errors(taxi_features, tmp_path, case, match):
  offline = taxi_features["direct"]
  prod, extra = offline, []
  if case == "missing_dir":
    prod = str(tmp_path / "nope")
  elif case == "no_metadata":
    prod = str(tmp_path)
  elif case == "corrupt_metadata":
    prod = _meta_only(offline, tmp_path / "p", text="{not json")
  elif case == "format":
    prod = _meta_only(offline, tmp_path / "p", _set_key(["format"], "skewtrace.features/2"))
  elif case == "num_buckets":
    prod = _meta_only(offline, tmp_path / "p", _set_key(["log", "num_buckets"], 8))
  elif case == "seed":
    prod = _meta_only(offline, tmp_path / "p", _set_key(["log", "seed"], 1))
  else:
    extra = {"negative": ["--abs_tol", "-0.1"], "feature_tol": ["--tolerance", "fare_z=-1:0"],
             "unknown_feature": ["--tolerance", "fare=0:1"],
             "categorical_tol": ["--tolerance", "company_id=1:0"],
             "flag": ["--rel_tolerance", "1"], "fraction": ["--max_divergent_fraction", "1.5"],
             "no_output": []}[case]
  out = [] if case == "no_output" else ["--output_dir", str(tmp_path / "out")]
  with pytest.raises(UsageError, match=match):
    diff.run(["--offline", offline, "--production", prod] + out + extra)
  assert not os.path.exists(tmp_path / "out" / "report.json")


def test_output_dir_with_other_files_needs_overwrite(taxi_features, tmp_path):
  out = tmp_path / "out"
  out.mkdir()
  (out / "notes.txt").write_text("mine")
  argv = ["--offline", taxi_features["direct"], "--production", taxi_features["direct"],
          "--output_dir", str(out)]
  with pytest.raises(UsageError, match="overwrite"):
    diff.run(argv)
  assert diff.run(argv + ["--overwrite"]) == 0
  assert diff.run(argv + ["--overwrite"]) == 0  # rerun into its own report: replaced
  assert (out / "notes.txt").read_text() == "mine"


def test_a_report_is_published_as_one_unit(logs, tmp_path, monkeypatch):
  """report.json is the commit point: a --overwrite diff that stops between its two writes
  leaves no report.json beside another run's report.html (it left "no divergence" in the page
  beside 15,002 divergent in the data)."""
  from pipelines import dataset
  from replay.report import render
  out = tmp_path / "out"
  assert _diff(logs["offline"], logs["offline"], out)[0] == 0  # a first report: no divergence
  old_html = (out / "report.html").read_text()
  write, written = dataset.write_atomically, []

  def killed_at_the_second_file(path, data):
    if written:
      raise KeyboardInterrupt  # the process stopped between the two files
    written.append(path)
    return write(path, data)
  monkeypatch.setattr(dataset, "write_atomically", killed_at_the_second_file)
  with pytest.raises(KeyboardInterrupt):
    diff.run(["--offline", logs["offline"], "--production", logs["production"], "--output_dir",
              str(out), "--overwrite"])
  if (out / "report.json").exists():  # a report.json is always its page's
    with open(out / "report.json") as f:
      assert render.render_html(json.load(f)) == (out / "report.html").read_text()
  monkeypatch.setattr(dataset, "write_atomically", write)
  code, report = _diff(logs["offline"], logs["production"], out, "--overwrite")
  assert code == 1 == report["exit_code"]  # the pair published: the page is this report's
  assert (out / "report.html").read_text() == render.render_html(report) != old_html


def test_command_line_usage_error_is_one_line_and_exit_2(tmp_path):
  env = dict(os.environ, PYTHONHASHSEED="0")
  proc = subprocess.run([sys.executable, "-m", "replay.diff", "--offline", str(tmp_path / "a"),
                         "--production", str(tmp_path / "b"), "--output_dir",
                         str(tmp_path / "o")], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=120)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines()[-1].startswith("error: --offline")
  assert "Traceback" not in proc.stderr
  assert not glob.glob(str(tmp_path / "o" / "*"))


@pytest.mark.parametrize("changed,stage", [("fingerprint", "analyze"),
                                           ("definition", "transform")])
def test_plan_names_analyze_only_when_the_analyzers_differ_but_their_definition_does_not(
    taxi_features, tmp_path, changed, stage):
  production = tmp_path / "production"
  shutil.copytree(taxi_features["direct"], production)
  meta_path = production / "run_metadata.json"
  meta = json.loads(meta_path.read_text())
  meta["analyze"]["fingerprint"] = "0" * 16
  if changed == "definition":
    meta["analyze"]["definition"] = "0" * 16
  meta_path.write_text(json.dumps(meta))
  options, _, _ = common.job_options(["--offline", taxi_features["direct"], "--production",
                                      str(production), "--output_dir", str(tmp_path / "o")],
                                     diff.DiffOptions, False)
  context = diff.plan_diff(common.flags_of(diff.DiffFlags, options, diff.DiffOptions)).context
  assert context.transform_stage == stage and not context.analyze_match


@pytest.mark.slow
def test_multi_processing_against_in_memory_features_is_not_divergent(taxi_features, tmp_path):
  """The same features job on another DirectRunner mode: whatever float order it took, at the
  defaults nothing is divergent or latent and the run passes; any record whose transform moved
  is noise, counted from the logs here."""
  off = pa.concat_tables([pq.read_table(p) for p in sorted(glob.glob(os.path.join(
      taxi_features["direct"], "feature_log", "*.parquet")))]).sort_by("key")
  prod = pa.concat_tables([pq.read_table(p) for p in sorted(glob.glob(os.path.join(
      taxi_features["multi_processing"], "feature_log", "*.parquet")))]).sort_by("key")
  moved = int(np.count_nonzero(off.column("fp_transform").to_numpy() !=
                               prod.column("fp_transform").to_numpy()))
  code, r = _diff(taxi_features["direct"], taxi_features["multi_processing"], tmp_path / "mp")
  assert code == 0
  assert r["records"]["divergent"] == 0 == r["records"]["latent"]
  assert r["records"]["noise"] == moved and r["records"]["identical"] == TOTAL - moved


def test_verify_logs_re_fingerprints_every_row_even_in_skipped_buckets(logs, capsys):
  """A value changed in a bucket whose digests still agree (the file rewritten without page
  checksums, its fingerprints left as they were): the diff skips the bucket; --verify_logs, and
  `skewtrace verify` on the folder, find the row whose fingerprints no longer fit its values."""
  from replay import verify_log
  prod = _copy(logs["offline"], logs["dir"] / "revalued")
  entry = next(b for b in _meta(prod)["log"]["buckets"] if b["bucket"] == CORRUPT_BUCKET)
  path = os.path.join(prod, entry["path"])
  table = pq.read_table(path)
  fare = table.column("value__fare_z").to_numpy(zero_copy_only=False).copy()
  fare[3] += 0.25
  pq.write_table(_set(table, "value__fare_z", pa.array(fare, pa.float32())), path)
  code, r = _diff(logs["offline"], prod, logs["dir"] / "revalued_out")
  assert code == 0 and r["buckets"]["compared"] == 0  # what the digests cannot see
  with pytest.raises(common.DataError, match=os.path.basename(path) +
                     r": 1 rows whose fp_transform is not the fingerprint"):
    diff.run(["--offline", logs["offline"], "--production", prod, "--output_dir",
              str(logs["dir"] / "revalued_verified"), "--verify_logs"])
  assert verify_log.run([prod]) == 1  # skewtrace verify
  out = capsys.readouterr().out
  assert f"DAMAGED {path}: 1 rows whose fp__fare_z" in out
  assert verify_log.run([logs["offline"]]) == 0


def test_verify_finds_a_forged_key_and_a_bucket_count_that_does_not_fit(logs):
  """A key rewritten on disk (its fingerprints left as they were) and run metadata whose
  num_buckets no longer fits the files: neither verifies intact. The key digest and each row's
  bucket are recomputed from the keys the log holds."""
  from replay import verify_log
  prod = _copy(logs["offline"], logs["dir"] / "forged_key")
  entry = next(b for b in _meta(prod)["log"]["buckets"] if b["bucket"] == CORRUPT_BUCKET)
  path = os.path.join(prod, entry["path"])
  table = pq.read_table(path)
  keys = table.column("key").to_pylist()
  keys[0] = keys[0] + "x"
  pq.write_table(_set(table, "key", pa.array(keys, table.schema.field("key").type)), path)
  problems = verify_log.verify(prod)
  assert f"{path}: the keys of its rows do not add up to the key digest" in " ".join(problems)
  # A bucket count edited in the run metadata: every row sits in another bucket than its key's.
  again = str(logs["dir"] / "bucket_count")  # the whole run: its other files verify too
  shutil.copytree(logs["offline"], again)
  meta = _meta(again)
  meta["log"]["num_buckets"] = 99991
  with open(os.path.join(again, "run_metadata.json"), "w") as f:
    json.dump(meta, f)
  problems = verify_log.verify(again)
  assert problems and all("belongs to another of the 99991 buckets" in p for p in problems), \
      problems[:3]
  with open(os.path.join(again, "run_metadata.json"), "w") as f:
    json.dump(dict(meta, log=dict(meta["log"], num_buckets=10 ** 12)), f)
  with pytest.raises(common.UsageError, match="num_buckets"):
    verify_log.verify(again)


def test_the_diff_checks_the_rows_it_reads_and_the_pages_it_skips_by_default(logs, tmp_path):
  """By default a bucket the diff reads has its rows checked against their own fingerprints
  (a value rewritten with its fingerprints left is exit 2 naming the file, never an answer), and
  a bucket it skips as equal has its pages read back with their checksums (a flipped byte is
  exit 2). --no_verify_logs turns both off: the answers the damage gave before."""
  read = _copy(logs["production"], tmp_path / "revalued_read")
  entry = next(b for b in _meta(read)["log"]["buckets"] if b["bucket"] == NOISE_BUCKET)
  path = os.path.join(read, entry["path"])
  table = pq.read_table(path)
  kept = np.flatnonzero(pc.is_null(table.column("dropped_stage")).to_numpy(
      zero_copy_only=False))
  fare = table.column("value__fare_z").to_numpy(zero_copy_only=False).copy()
  fare[kept[0]] += 0.5
  pq.write_table(_set(table, "value__fare_z", pa.array(fare, pa.float32())), path)
  with pytest.raises(common.DataError, match=re.escape(path) + r": 1 rows whose fp_transform"):
    _diff(logs["offline"], read, tmp_path / "read_out")
  assert not os.path.exists(tmp_path / "read_out" / "report.json")
  code, r = _diff(logs["offline"], read, tmp_path / "read_unchecked", "--no_verify_logs")
  assert code == 1 and r["buckets"]["compared"] == 3
  skipped = _copy(logs["offline"], tmp_path / "flipped")
  entry = next(b for b in _meta(skipped)["log"]["buckets"] if b["bucket"] == CORRUPT_BUCKET)
  path = os.path.join(skipped, entry["path"])
  data = bytearray(open(path, "rb").read())
  data[len(data) // 3] ^= 0x10
  open(path, "wb").write(bytes(data))
  with pytest.raises(common.DataError, match=re.escape(path)):
    _diff(logs["offline"], skipped, tmp_path / "flipped_out")
  code, r = _diff(logs["offline"], skipped, tmp_path / "flipped_unchecked", "--no_verify_logs")
  assert code == 0 and r["buckets"]["compared"] == 0
