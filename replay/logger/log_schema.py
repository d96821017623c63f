"""LogSchema: the Arrow schema of one production logger's rows, and which of its columns are
written as PII hashes -- the columns the offline job's feature log holds (transforms/spec/
feature_log.py: the head, each aggregate, each transformed feature's fingerprint and value,
served values, logged inputs), typed by the transform_fn's feature spec. docs/logger.md.
"""
import pyarrow as pa

from transforms.spec import feature_log as log
from transforms.spec.decision import DECISION_TYPE, PREDICTION_TYPE
from transforms.spec.stages import PREDICT
from transforms.spec.errors import UsageError

__all__ = ["LogSchema"]


class LogSchema:
  """names: the record columns; aggregate_types: {aggregate: its Arrow type}; feature_spec: the
  transform_fn's transformed_feature_spec(); served: the features whose served values are
  logged; pii: the log columns written as PII hashes ("key", transformed features, record
  columns); inputs: whether each record column's canonical text is logged (input__C); predict:
  whether the rows hold the predict stage (fp_predict, prediction, decision: a logger given a
  model).

  `features` (sorted) and `feature_types` ({feature: Arrow type}: a one-value feature is a
  scalar, as the job's log has it); `clear`: the schema before hashing, `schema`: the log's (a
  hashed column is text); `hashed`: the columns written as hashes. UsageError for a PII or
  served column that the log does not have."""

  def __init__(self, names, aggregate_types, feature_spec, served, pii, inputs, predict=False):
    name_set = frozenset(names)
    unknown = [c for c in pii if c != log.KEY and c not in feature_spec and c not in name_set]
    if unknown:
      raise UsageError(f"pii_columns {', '.join(unknown)}: not a log column (the key, a "
                       "transformed feature or a record column)")
    several = [f for f in served if f not in feature_spec or feature_spec[f].shape]
    if several:
      raise UsageError(f"served {', '.join(several)}: not a one-value transformed feature of "
                       f"the transform_fn ({', '.join(sorted(feature_spec))})")
    self.features, self.feature_types = sorted(feature_spec), {}
    clear = list(log.HEAD) + [(log.aggregate_column(a), aggregate_types[a])
                              for a in sorted(aggregate_types)]
    clear += [(log.input_column(c), pa.string()) for c in names] if inputs else []
    fields = list(clear)
    for f in self.features:
      typ = {"float32": pa.float32(), "int64": pa.int64()}.get(feature_spec[f].dtype.name,
                                                               pa.large_binary())
      typ = typ if list(feature_spec[f].shape) == [] else pa.large_list(typ)
      self.feature_types[f] = typ
      own = [(log.value_column(f), typ)] + ([(log.served_column(f), typ)]
                                            if f in served else [])
      clear += [(log.feature_fp_column(f), pa.uint64())] + own
      fields += [clear[-1 - len(own)]] + [(c, pa.string() if f in pii else t) for c, t in own]
    if predict:  # the predict stage's columns (spec/decision.py), as the job's log has them
      own = [(log.fp_column(PREDICT.name), pa.uint64()), (log.PREDICTION, PREDICTION_TYPE),
             (log.DECISION, DECISION_TYPE)]
      clear, fields = clear + own, fields + own
    self.clear, self.schema = pa.schema(clear), pa.schema(fields)
    self.hashed = [n for c in pii for n in ([log.KEY] if c == log.KEY else (
        [log.value_column(c)] * (c in feature_spec) +
        [log.served_column(c)] * (c in served) +
        [log.input_column(c)] * (inputs and c in name_set)))]
