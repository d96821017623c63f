"""transforms.taxi keeping the 20 most frequent values of each vocabulary instead of 1,000: a
changed preprocessing_fn whose vocabulary analyzer moves company_id for the rarer companies
only (the taxi sample has 62 companies, 7 payment types)."""
from transforms import taxi
from transforms.taxi import EVENT_TIME_COLUMN, KEY_COLUMNS, WINDOWED_AGGREGATES  # noqa: F401

__all__ = ["KEY_COLUMNS", "EVENT_TIME_COLUMN", "WINDOWED_AGGREGATES", "preprocessing_fn"]


def preprocessing_fn(inputs):
  return taxi.preprocessing_fn(inputs, vocab_size=20)
