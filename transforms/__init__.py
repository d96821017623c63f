"""skewtrace building blocks. Importing any of them registers the Beam coder of pa.RecordBatch
(transforms/arrow_coder.py), which the steps declaring RecordBatch outputs rely on."""
from transforms import arrow_coder  # noqa: F401
