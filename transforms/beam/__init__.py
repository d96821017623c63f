"""Beam plumbing shared by the composites: the Arrow coders (arrow_coder registers the
RecordBatch coder when imported), the ahead DoFn, progress counters, and Beam's reading of
function arguments remembered per function (fn_signatures, installed when this package is
imported: every job and SDK worker that imports one of our stages has it)."""
from transforms.beam import fn_signatures  # noqa: F401  (installs the memo)

__all__ = ["ahead", "arrow_coder", "fn_signatures", "loopback", "progress"]
