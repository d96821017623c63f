"""The public surface of each package imports and names what it exports."""
import importlib

import pytest

MODULES = ["transforms.fingerprint", "transforms.xxh64", "transforms.csv_records",
           "transforms.schema", "transforms.tfrecord", "transforms.read_csv",
           "transforms.infer_types", "transforms.type_rows", "transforms.key_rows",
           "transforms.write_shards", "transforms.write_rejected", "pipelines.common",
           "pipelines.dataset", "pipelines.ingest", "pipelines.verify", "pipelines.features",
           "transforms.profile", "transforms.window_records", "transforms.shard_records",
           "transforms.serialize_records", "transforms.transform_records",
           "transforms.feature_log", "transforms.taxi"]


@pytest.mark.parametrize("name", MODULES)
def test_module_exports_exist(name):
  module = importlib.import_module(name)
  assert module.__all__
  for symbol in module.__all__:
    assert hasattr(module, symbol), f"{name}.{symbol}"
