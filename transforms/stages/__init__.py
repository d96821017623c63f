"""The composite PTransforms, one per module, named by the module (read_csv.py -> ReadCsv), each
reading its rule from transforms.spec."""
__all__ = ["infer_types", "key_rows", "read_csv", "read_records", "serialize_records", "shard_records",
           "transform_records", "type_rows", "window_records", "write_feature_log",
           "write_rejected", "write_shards"]
