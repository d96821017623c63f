"""transforms.taxi, the name run metadata written before the feature modules moved to
transforms/features/ record (and that users pass as --transform_module): the taxi feature
module, transforms.features.taxi, under its first name."""
from transforms.features.taxi import (EVENT_TIME_COLUMN, KEY_COLUMNS,  # noqa: F401
                                      WINDOWED_AGGREGATES, preprocessing_fn)

__all__ = ["preprocessing_fn", "EVENT_TIME_COLUMN", "KEY_COLUMNS", "WINDOWED_AGGREGATES"]
