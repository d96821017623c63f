"""The production logger, in serving's own process: records in, the offline job's feature-log rows
out (docs/logger.md).

  production_logger  ProductionLogger: the public surface (log, log_batch, log_table, flush,
                     close, stats) and how its pieces are wired
  accept             what it accepts: a record's columns, value types, aggregates and served
                     values, checked on the caller's thread (RecordError)
  batches            batching and threading: the open batch, the bounded queue, the one worker
  rows               LogRows, the stage rules of one batch: raw, parse, key, window, sampling,
                     shard, serialize, transform, serve
  record_stages      raw, parse and window, as functions over Arrow columns
  keys               the record key and the content-key ordinals
  live               window, shard, serialize, transform and serve of the records that reach TFT
  log_schema         the rows' Arrow schema and which columns are PII hashes
  parts              the part files: one per bucket per write, and their merge on close
  metadata           run_metadata.json: written after every write, checked on resume
  files              a part's Parquet bytes; a file staged (temp name, fsync) before its rename
  config             a logger's configuration from an offline features run's metadata

May import transforms.spec, transforms.codec and transforms.graph (TensorFlow only inside the
functions that run a graph) and its own modules: never Beam, pipelines, replay.diff or
replay.report (tests/test_import.py holds it). ProductionLogger, RecordError and pii_hash are
named here too: `from replay.logger import ProductionLogger`.
"""
from replay.logger.production_logger import (DROPPED_BY_REASON, RUNNER, ProductionLogger,
                                             RecordError, pii_hash)

__all__ = ["accept", "batches", "config", "files", "keys", "live", "log_schema", "metadata",
           "parts", "production_logger", "record_stages", "rows",
           "ProductionLogger", "RecordError", "pii_hash", "RUNNER", "DROPPED_BY_REASON"]
