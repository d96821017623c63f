"""The public surface of each package imports and names what it exports."""
import importlib

import pytest

MODULES = ["transforms.fingerprint", "transforms.xxh64", "transforms.arrow_coder",
           "transforms.ahead", "transforms.csv_records",
           "transforms.schema", "transforms.tfrecord", "transforms.read_csv",
           "transforms.infer_types", "transforms.type_rows", "transforms.key_rows",
           "transforms.write_shards", "transforms.write_rejected", "pipelines.common",
           "pipelines.dataset", "pipelines.ingest", "pipelines.verify", "pipelines.features",
           "transforms.profile", "transforms.window_records", "transforms.shard_records",
           "transforms.serialize_records", "transforms.transform_records",
           "transforms.feature_log", "transforms.taxi", "transforms.progress",
           "transforms.analyze", "replay.compare", "replay.tolerance", "replay.metadata",
           "replay.drift", "replay.model", "replay.diff", "replay.render", "replay.rerun",
           "replay.logger", "replay.log_rows", "replay.check", "replay.cli"]


@pytest.mark.parametrize("name", MODULES)
def test_module_exports_exist(name):
  module = importlib.import_module(name)
  assert module.__all__
  for symbol in module.__all__:
    assert hasattr(module, symbol), f"{name}.{symbol}"


def test_replay_package_names_its_modules():
  import replay
  for name in replay.__all__:
    importlib.import_module(f"replay.{name}")


def test_renderers_stage_order_is_the_pipelines():
  from replay import render
  from transforms import feature_log
  assert render.STAGES == feature_log.STAGES
