"""The ingest dataset's format: its folder layout, shard and file names, the manifest's name and
format tag, and the dead-letter record (manifests/dataset_manifest.schema.json)."""

__all__ = ["MANIFEST", "MANIFEST_FORMAT", "SCHEMA_FILE", "FORMATS", "REJECTED_PATH",
           "shard_name", "rejected_row"]

MANIFEST, SCHEMA_FILE = "manifest.json", "schema.pbtxt"
MANIFEST_FORMAT = "skewtrace.dataset/1"
# Shard formats -> the extension of their files (a shard format is also its folder).
FORMATS = {"tfrecord": "tfrecord", "parquet": "parquet"}
REJECTED_PATH = "rejected/part-00000-of-00001.jsonl"


def shard_name(fmt, shard, num_shards):
  """A shard's file, relative to the dataset folder."""
  return f"{fmt}/part-{shard:05d}-of-{num_shards:05d}.{FORMATS[fmt]}"


def rejected_row(path, line, raw, reason):
  """The dead-letter record: where the row was, its raw text and why it was rejected."""
  row = {"file": path, "line": int(line), "raw": raw.decode("utf-8", "backslashreplace"),
         "reason": reason}
  try:
    raw.decode("utf-8")
  except UnicodeDecodeError:
    row["raw_is_lossy"] = True  # undecodable bytes appear as \xNN escapes
  return row
