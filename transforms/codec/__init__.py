"""Compiled kernels and codecs, no Beam and no TensorFlow: one concept per module."""
__all__ = ["arrow_buffers", "crc32c", "csv_records", "example_decode", "example_encode",
           "example_parse", "kinds", "tfrecord", "words", "xxh64"]
