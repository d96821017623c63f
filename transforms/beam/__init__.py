"""Beam plumbing shared by the composites: the Arrow coders (arrow_coder registers the
RecordBatch coder when imported), the ahead DoFn, progress counters."""
__all__ = ["ahead", "arrow_coder", "loopback", "progress"]
