"""The stages, in pipeline order, and each stage's rule as data: the column its per-record
fingerprint rides in, the fields that fingerprint covers, and the reasons it drops a record.

The offline composites (transforms/stages/), the production logger (replay/logger/rows.py) and the
diff read these objects; none restates a field list, a column name or a reason. docs/features.md
describes each stage.

Fingerprint fields name columns of the record as the stage leaves it. Three groups depend on
the run and are given by name:
  COLUMNS     the dataset's columns (the ingest schema, in its order)
  AGGREGATES  the feature module's windowed aggregates
  VALUES      COLUMNS then AGGREGATES: what the record carries into serialization and TFT
  FEATURES    the transformed features
  PREDICTION  the model's prediction and decision (spec/decision.py)
"""
import dataclasses

from transforms.codec import csv_records

__all__ = ["Stage", "RAW", "PARSE", "WINDOW", "SHARD", "SERIALIZE", "ANALYZE", "TRANSFORM", "SERVE",
           "PREDICT", "RULES", "STAGES", "FP_STAGES", "OPTIONAL_STAGES", "RECORD_STAGES", "COLUMNS",
           "AGGREGATES", "VALUES", "FEATURES", "PREDICTION", "KEY", "RAW_FP", "PARSE_FP", "INGEST_SHARD", "WINDOW_START", "WINDOW_END",
           "WINDOW_FP", "SHARD_ID", "SHARD_FP", "SERIALIZE_FP", "DROP_REASON", "LOG_HASH",
           "PASSTHROUGH", "RESERVED", "value_columns"]

# The run-dependent field groups (see the module docstring).
COLUMNS, AGGREGATES, VALUES, FEATURES = "<columns>", "<aggregates>", "<values>", "<features>"
PREDICTION = "<prediction>"

# Columns a record carries between stages (in-pipeline names; the feature log names its own).
KEY = "__key__"                 # the record key (spec/key.py)
RAW_FP = "__raw_fp__"           # raw stage fingerprint
PARSE_FP = "__parse_fp__"       # parse stage fingerprint
INGEST_SHARD = "__shard__"      # the ingest shard of a record (spec/key.py)
WINDOW_START, WINDOW_END, WINDOW_FP = "__window_start__", "__window_end__", "__window_fp__"
SHARD_ID, SHARD_FP = "__shard_id__", "__shard_fp__"
SERIALIZE_FP = "__serialize_fp__"
DROP_REASON = "__drop_reason__"  # a dropped record's reason
LOG_HASH = "__log_hash__"        # the record's feature-log bucket hash (spec/feature_log.py)
PASSTHROUGH = "__passthrough__"  # the columns TFT carries through (graph/feed.py)


@dataclasses.dataclass(frozen=True)
class Stage:
  """One stage's rule as data.

  name: as in logs and reports; column: the in-pipeline column holding its per-record
  fingerprint (None: analyze is per run, transform is fingerprinted in the log); fields: what
  that fingerprint covers (column names and the groups above); reasons: {code: message
  template} of the records it drops; per_run: fingerprinted once per run, not per record.
  """
  name: str
  column: str | None
  fields: tuple = ()
  reasons: tuple = ()  # ((code, template), ...): a frozen mapping
  per_run: bool = False
  optional: bool = False

  def fingerprint_fields(self, columns=(), aggregates=(), features=()):
    """The concrete field list of this stage's fingerprint for a run."""
    groups = {COLUMNS: list(columns), AGGREGATES: list(aggregates),
              VALUES: value_columns(columns, aggregates), FEATURES: list(features)}
    out = []
    for field in self.fields:
      out.extend(groups.get(field, [field]))
    return out

  def reason(self, code, **values):
    """The drop reason `code` with its placeholders filled."""
    return dict(self.reasons)[code].format(**values)


def value_columns(columns, aggregates):
  """VALUES: the dataset's columns, then the windowed aggregates."""
  return list(columns) + list(aggregates)


# The raw fingerprint covers the canonical text of each cell (spec/values.py; null when empty),
# before typing: the same records from CSV, JSON Lines, Parquet or tf.Example agree.
RAW = Stage("raw", RAW_FP, (COLUMNS,))
# A record that does not parse is dropped at `parse` (ingest rejects it to its dead letters;
# the CSV reader rejects a record it cannot split with its own reason, codec/csv_records.py).
PARSE = Stage("parse", PARSE_FP, (COLUMNS,), reasons=(
    ("absent", "column {name!r} is absent"),
    ("not_utf8", "column {name!r} is not UTF-8"),
    ("not_type", "column {name!r}: {text!r} is not {type}"),
    ("not_type_pii", "column {name!r} is not {type}"),  # a log holding PII keeps no cell text
    ("key_missing", "key column {name!r} is missing"),
))
WINDOW = Stage("window", WINDOW_FP, (WINDOW_START, WINDOW_END, AGGREGATES), reasons=(
    ("late", "late: window end + allowed lateness <= watermark"),
    ("no_event_time", "missing event time"),
    ("bad_event_time", "event time is not an instant of the declared EVENT_TIME_FORMAT"),
))
SHARD = Stage("shard", SHARD_FP, (SHARD_ID, KEY))
SERIALIZE = Stage("serialize", SERIALIZE_FP, (VALUES,))
ANALYZE = Stage("analyze", None, per_run=True)
TRANSFORM = Stage("transform", None, (FEATURES,))
# What the model received: per transformed feature, the value serving logged it fed the model
# (a served side column, spec/dataset.py) where there is one, else the transform's value; the
# same coding as `transform`, so a run that logs no served value has fp_serve == fp_transform.
SERVE = Stage("serve", None, (FEATURES,))
# What the model decided: its prediction on what it received (serve's values, or the served
# response where serving logged one) and the declared rule's decision (spec/decision.py). Only
# a run given a model (--model_dir, --model_module) has it.
PREDICT = Stage("predict", None, (PREDICTION,), optional=True)

RULES = (RAW, PARSE, WINDOW, SHARD, SERIALIZE, ANALYZE, TRANSFORM, SERVE, PREDICT)
STAGES = tuple(s.name for s in RULES)
# The stages with a per-record fingerprint column fp_<stage> in every log (analyze is per run).
FP_STAGES = tuple(s.name for s in RULES if not s.per_run and not s.optional)
# The stages whose fp_<stage> column (and digest) a log has only when its run had their input.
OPTIONAL_STAGES = tuple(s.name for s in RULES if s.optional)
# The stages fingerprinted before TFT: a record whose fingerprint differs at one of them parts
# there, whatever the tolerances.
RECORD_STAGES = tuple(s.name for s in RULES if s.column is not None)

# Column names a dataset may not use: every in-pipeline column and the CSV reader's provenance.
RESERVED = frozenset({KEY, RAW_FP, PARSE_FP, INGEST_SHARD, WINDOW_START, WINDOW_END, WINDOW_FP,
                      SHARD_ID, SHARD_FP, SERIALIZE_FP, DROP_REASON, LOG_HASH, PASSTHROUGH,
                      csv_records.FILE_COLUMN, csv_records.LINE_COLUMN, csv_records.RAW_COLUMN})
