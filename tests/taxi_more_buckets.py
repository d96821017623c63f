"""transforms.taxi with 20 instead of 10 buckets per coordinate: a changed preprocessing_fn."""
from transforms import taxi
from transforms.taxi import EVENT_TIME_COLUMN, KEY_COLUMNS, WINDOWED_AGGREGATES  # noqa: F401

__all__ = ["KEY_COLUMNS", "EVENT_TIME_COLUMN", "WINDOWED_AGGREGATES", "preprocessing_fn"]


def preprocessing_fn(inputs):
  return taxi.preprocessing_fn(inputs, bucket_count=20)
