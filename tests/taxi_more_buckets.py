"""transforms.taxi with 20 instead of 10 buckets per coordinate: a changed preprocessing_fn."""
from transforms import taxi
from transforms.taxi import EVENT_TIME_COLUMN, KEY_COLUMNS, WINDOWED_AGGREGATES  # noqa: F401

__all__ = ["KEY_COLUMNS", "EVENT_TIME_COLUMN", "WINDOWED_AGGREGATES", "preprocessing_fn"]


def preprocessing_fn(inputs):
  saved = taxi._FEATURE_BUCKET_COUNT  # pylint: disable=protected-access
  taxi._FEATURE_BUCKET_COUNT = 20  # pylint: disable=protected-access
  try:
    return taxi.preprocessing_fn(inputs)
  finally:
    taxi._FEATURE_BUCKET_COUNT = saved  # pylint: disable=protected-access
