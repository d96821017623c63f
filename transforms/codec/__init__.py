"""Compiled kernels and codecs, no Beam and no TensorFlow: one concept per module (but
prediction_log.py, which imports TF Serving's protos, and so TensorFlow, on first use).

The kernels inline helpers and constants from sibling modules (words.py, crc32c.py, kinds.py,
example_parse.py, example_encode.py), and numba's on-disk cache (`cache=True`) checks only a
kernel's own file: after editing such a helper alone, delete transforms/codec/__pycache__/*.nbi
so that the kernels using it are compiled again.
"""
__all__ = ["arrow_buffers", "crc32c", "csv_records", "example_decode", "example_encode",
           "example_parse", "example_records", "json_values", "jsonl_records", "kinds",
           "parquet_records", "prediction_log", "request_logs", "sources", "tfrecord", "words",
           "xxh64"]
