"""The contract in one place: the spec modules import neither Beam nor TensorFlow, the offline
stages and the production logger hold the very same rule objects, nothing outside the spec
restates a column name or format tag, and the two contract checks (reserved column names,
a feature module's KEY_COLUMNS) hold."""
import ast
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT, TAXI_CSV

SPEC_MODULES = ["transforms.spec." + m for m in
                ("errors", "stages", "fingerprint", "key", "shard", "window", "serialize",
                 "profile", "schema", "feature_log", "run_metadata", "dataset", "lock")]
# Beam-free beyond the spec: the codecs, the TFT feed and analyzer fingerprints (TensorFlow only
# inside their functions), the production logger and its rules, the report renderer.
BEAM_FREE = SPEC_MODULES + ["transforms.codec." + m for m in
                            ("arrow_buffers", "csv_records", "tfrecord", "xxh64")] + [
    "transforms.graph.feed", "transforms.graph.analyze", "replay.logger.rows", "replay.logger",
    "replay.report.render", "manifests"]


def _loaded_after(modules):
  code = textwrap.dedent(f"""
      import importlib, json, sys
      for m in {modules!r}:
        importlib.import_module(m)
      print(json.dumps(sorted(sys.modules)))""")
  proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                        timeout=300, check=True)
  return set(eval(proc.stdout))  # noqa: S307  (our own json list)


def test_spec_and_logger_import_neither_beam_nor_tensorflow():
  loaded = _loaded_after(BEAM_FREE)
  assert "transforms.spec.stages" in loaded and "replay.logger" in loaded
  assert not {m for m in loaded if m == "apache_beam" or m.startswith("apache_beam.")}
  assert "tensorflow" not in loaded and "tensorflow_transform" not in loaded


def test_the_import_check_sees_beam():  # the check above can fail
  assert "apache_beam" in _loaded_after(["transforms.stages.shard_records"])


def _holders(obj, modules):
  import importlib
  return [m for m in modules
          if any(v is obj for v in vars(importlib.import_module(m)).values())]


def test_offline_stages_and_logger_hold_the_same_rule_objects():
  from transforms.graph import feed
  from transforms.spec import (feature_log, key, lock, run_metadata, serialize, shard, stages,
                               window)
  offline_and_logger = [
      # rule object: (the offline module(s) that apply it, the logger module that applies it)
      (stages.RAW, ("transforms.stages.type_rows", "replay.logger.record_stages")),
      (stages.PARSE, ("transforms.stages.type_rows", "replay.logger.record_stages")),
      (key.key_batch, ("transforms.stages.key_rows", "replay.logger.keys")),
      (key.content_keys, ("transforms.stages.write_shards", "replay.logger.keys")),
      (window.assign_windows, ("transforms.stages.window_records", "replay.logger.record_stages")),
      (stages.WINDOW, ("transforms.spec.window", "replay.logger.rows")),
      (shard.sample_batch, ("transforms.stages.shard_records", None)),
      (shard.sample_mask, ("transforms.spec.shard", "replay.logger.rows")),
      (shard.shard_ids, ("transforms.spec.shard", "replay.logger.live")),
      (stages.SHARD, ("transforms.spec.shard", "replay.logger.live")),
      (serialize.round_trip, ("transforms.spec.serialize", "replay.logger.live")),
      (stages.SERIALIZE, ("transforms.spec.serialize", "replay.logger.live")),
      (feed.to_tft_batch, ("transforms.stages.transform_records", "transforms.graph.feed")),
      (feature_log, ("transforms.stages.write_feature_log", "replay.logger.parts")),
      (feature_log.HEAD, ("transforms.stages.write_feature_log", None)),
      (run_metadata, ("pipelines.features_job", "replay.logger.metadata")),
      # One writer per folder: the jobs and the logger take the same lock.
      (lock.lock_folder, ("pipelines.dataset", "replay.logger.production_logger")),
  ]
  for obj, modules in offline_and_logger:
    wanted = [m for m in modules if m]
    assert _holders(obj, wanted) == wanted, (obj, modules)
  # The stage modules apply the spec's functions: the window and shard composites hold them.
  assert _holders(window.window_fingerprints, ["transforms.stages.window_records"])
  assert _holders(shard.shard_batch, ["transforms.stages.shard_records"])
  assert _holders(serialize.serialize_batch, ["transforms.stages.serialize_records"])


def test_a_restated_rule_is_not_the_same_object():  # the identity check can fail
  import dataclasses
  from transforms.spec import stages
  copy = dataclasses.replace(stages.WINDOW)
  assert copy == stages.WINDOW and not _holders(copy, ["replay.logger.rows"])


# Names and tags defined in the spec; outside it, code (not docstrings) must ask the spec.
_SPEC_LITERALS = {"__key__", "__raw_fp__", "__parse_fp__", "__shard__", "__window_start__",
                  "__window_end__", "__window_fp__", "__shard_id__", "__shard_fp__",
                  "__serialize_fp__", "__drop_reason__", "__log_hash__", "__passthrough__",
                  "skewtrace.features/1", "skewtrace.dataset/1", "run_metadata.json",
                  "manifest.json", "value__", "fp__", "fp_raw", "fp_parse", "fp_window",
                  "fp_shard", "fp_serialize", "fp_transform", "dropped_stage", "feature_log",
                  "transform_fn"}
_SPEC_DIRS = ("transforms/spec", "manifests")


def _code_strings(path):
  """The string constants of a module's code, docstrings left out."""
  tree = ast.parse(open(path, encoding="utf-8").read())
  docstrings = set()
  for node in ast.walk(tree):
    if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and \
        node.body and isinstance(node.body[0], ast.Expr) and \
        isinstance(node.body[0].value, ast.Constant):
      docstrings.add(id(node.body[0].value))
  out = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
        id(node) not in docstrings:
      out.append((node.lineno, node.value))
    elif isinstance(node, ast.JoinedStr):  # f"fp_{s}" restates a prefix too
      out.extend((node.lineno, v.value) for v in node.values
                 if isinstance(v, ast.Constant) and isinstance(v.value, str))
  return out


def test_no_module_outside_the_spec_restates_a_name_or_tag():
  found = []
  for package in ("transforms", "pipelines", "replay"):
    for folder, _, files in os.walk(os.path.join(ROOT, package)):
      if any(folder.startswith(os.path.join(ROOT, d)) for d in _SPEC_DIRS):
        continue
      for name in files:
        if name.endswith(".py"):
          path = os.path.join(folder, name)
          found += [f"{os.path.relpath(path, ROOT)}:{line}: {text!r}"
                    for line, text in _code_strings(path) if text in _SPEC_LITERALS]
  assert not found, "\n".join(found)


def test_the_literal_scan_sees_a_restated_name(tmp_path):
  path = tmp_path / "m.py"
  path.write_text('"""Mentions __key__ in a docstring."""\nKEY = "__key__"\nx = f"fp_{s}"\n')
  assert [t for _, t in _code_strings(str(path)) if t in _SPEC_LITERALS] == ["__key__"]
  assert "fp_" in [t for _, t in _code_strings(str(path))]


# --------------------------------------------------------------------------- contract bugs
def _reserved():
  from transforms.spec.stages import RESERVED
  return sorted(RESERVED)


@pytest.mark.parametrize("name", _reserved())
def test_a_reserved_column_name_is_a_one_line_usage_error(tmp_path, name):
  from pipelines import common, ingest
  path = tmp_path / "in.csv"
  path.write_text(f"a,{name}\n1,2\n")
  with pytest.raises(common.UsageError) as e:
    ingest.run(["--input", str(path), "--output_dir", str(tmp_path / "out")])
  assert name in str(e.value) and "\n" not in str(e.value)
  assert not os.path.exists(tmp_path / "out")


def test_the_reserved_names_cover_every_in_pipeline_column():
  from transforms.codec import csv_records
  from transforms.spec import stages
  columns = {v for k, v in vars(stages).items() if k.isupper() and isinstance(v, str) and
             v.startswith("__") and v.endswith("__")}
  assert columns <= set(stages.RESERVED)
  assert {"__raw_fp__", "__parse_fp__", csv_records.RAW_COLUMN} <= set(stages.RESERVED)


def _module(tmp_path, name, key_columns):
  (tmp_path / f"{name}.py").write_text(textwrap.dedent(f"""
      from transforms.features.taxi import EVENT_TIME_COLUMN, WINDOWED_AGGREGATES, preprocessing_fn
      KEY_COLUMNS = {key_columns!r}
      """))
  return name


@pytest.fixture(scope="module")
def keyed_dataset(tmp_path_factory):
  """The taxi sample with a trip_id key column, ingested keyed by it."""
  import csv
  from tests.conftest import TAXI_SCHEMA, ingest
  folder = tmp_path_factory.mktemp("keyed")
  with open(TAXI_CSV, newline="") as f:
    rows = list(csv.reader(f))[:400]
  with open(folder / "in.csv", "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerows([rows[0] + ["trip_id"]] + [r + [str(i)] for i, r in enumerate(rows[1:])])
  return ingest(folder / "ingest", "--key_columns", "trip_id", "--schema", TAXI_SCHEMA,
                "--num_shards", "1", inputs=str(folder / "in.csv"))


@pytest.mark.parametrize("name,declared,message", [
    ("content", [], "declares KEY_COLUMNS the content key but the dataset is keyed by trip_id"),
    ("area", ["pickup_community_area"], "declares KEY_COLUMNS pickup_community_area but the "
                                        "dataset is keyed by trip_id"),
    ("text", "trip_id", "KEY_COLUMNS must be a list")])
def test_features_refuses_a_module_written_for_another_key(keyed_dataset, tmp_path, monkeypatch,
                                                           name, declared, message):
  from pipelines import common, features
  monkeypatch.syspath_prepend(str(tmp_path))
  module = _module(tmp_path, f"keyed_{name}", declared)
  with pytest.raises(common.UsageError) as e:
    features.run(["--input_dir", keyed_dataset, "--output_dir", str(tmp_path / "out"),
                  "--transform_module", module, "--profile",
                  os.path.join(ROOT, "profiles", "offline.yaml")])
  assert message in str(e.value) and module in str(e.value) and "\n" not in str(e.value)
  assert not os.path.exists(tmp_path / "out")


def test_features_accepts_a_module_declaring_the_datasets_key(keyed_dataset, tmp_path,
                                                               monkeypatch):
  from pipelines import features
  monkeypatch.syspath_prepend(str(tmp_path))
  module = _module(tmp_path, "keyed_by_trip_id", ["trip_id"])
  plan_module = features.load_profile_and_module(
      os.path.join(ROOT, "profiles", "offline.yaml"), module)[1]
  features._check_key_columns(plan_module, module, ["trip_id"])  # no error


@pytest.mark.parametrize("aggregates,message", [
    ('[{"name": "n", "group_by": "g", "fn": "median"}]',
     "aggregate 'n': fn 'median' is not one of count, sum, mean, min, max, count_distinct"),
    ('[{"name": "n", "group_by": "g", "fn": "sum"}]',
     "aggregate 'n': fn sum needs a column (the one it aggregates), got None"),
    ('[{"name": "n", "group_by": "g", "fn": "count", "colum": "x"}]',
     "aggregate 'n': unknown field(s) colum (fields: name, group_by, fn, column, window)"),
    ('[{"name": "n", "group_by": ["g", "g"], "fn": "count"}]',
     "aggregate 'n' has no group_by (a column or a list of distinct columns), got ['g', 'g']"),
    ('[{"name": "n", "group_by": "g", "fn": "count"}, {"name": "n", "group_by": "h", '
     '"fn": "count"}]', "aggregate 'n' is declared twice"),
    ('[{"name": "n", "fn": "count"}]', "aggregate 'n' has no group_by"),
    ('{"name": "n"}', "WINDOWED_AGGREGATES must be a list, got dict"),
    ('["n"]', "aggregate 0 must be a mapping with name, group_by, fn (and column)")])
def test_a_bad_windowed_aggregate_is_a_one_line_usage_error(tmp_path, monkeypatch, aggregates,
                                                            message):
  from pipelines import common, features
  (tmp_path / "bad_aggregates.py").write_text(
      "from transforms.features.taxi import EVENT_TIME_COLUMN, preprocessing_fn\n"
      f"WINDOWED_AGGREGATES = {aggregates}\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.delitem(sys.modules, "bad_aggregates", raising=False)
  with pytest.raises(common.UsageError) as e:
    features.load_profile_and_module(os.path.join(ROOT, "profiles", "offline.yaml"),
                                     "bad_aggregates")
  assert str(e.value).startswith(f"--transform_module bad_aggregates: {message}")
