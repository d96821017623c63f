"""LiveStages: the production logger's stages of the records that reach TF Transform -- window
(bounds and aggregates fingerprinted), shard, serialize (the round trip through the profile's
tf.Example), transform (the transform_fn's TFT graph, transforms/graph/feed.py) and serve (what
the model got: the served value where serving logged one) and, given a model, predict -- the
rules pipelines.features applies, each read from transforms/spec. docs/logger.md.
"""
import numpy as np
import pyarrow as pa

from transforms.graph.feed import transform_values
from transforms.model.predict import predict_columns
from transforms.spec import fingerprint
from transforms.spec import feature_log as log
from transforms.spec.serialize import round_trip
from transforms.spec.shard import shard_ids
from transforms.spec.stages import (KEY, PARSE, RAW, SERIALIZE, SERVE, SHARD, SHARD_ID, TRANSFORM,
                                    WINDOW, WINDOW_END, WINDOW_START, value_columns)

__all__ = ["LiveStages"]


class LiveStages:
  """names: the record columns; aggregates: the windowed aggregates' names; profile: the run
  profile; transform: the finalized transform_fn (transforms.graph.feed.transform_function);
  log_schema: the logger's LogSchema; transform_batch_size: records per TFT call; served: the
  features whose served values are logged (sorted); model: the loaded model of the predict stage
  (transforms/model/load.Predictor), or None."""

  def __init__(self, names, aggregates, profile, transform, log_schema, transform_batch_size,
               served, model=None):
    self._names, self._aggregates = list(names), list(aggregates)
    self._value_columns = value_columns(self._names, self._aggregates)
    self._profile, self._transform, self._log = profile, transform, log_schema
    self._transform_batch_size, self._served = transform_batch_size, list(served)
    self._model = model

  def columns(self, aggregates, served, typed, keys, live, start, end, out):
    """The window, shard, serialize, transform and serve columns of the `out` rows (null but
    for the `live` ones, which reach TFT); aggregates, served: the batch's arrays (one per
    aggregate, per served feature); typed: the typed batch; keys: its record keys; start, end:
    its window bounds (record_stages.windows)."""
    position = np.full(typed.num_rows, -1, dtype=np.int64)
    position[live] = np.arange(len(live))
    source = position[out]
    absent = source < 0
    take = pa.array(np.where(absent, 0, source), mask=absent)
    fields = {f.name: f.type for f in self._log.clear}
    if not len(live):  # all but the head columns rows() fills itself
      return {name: pa.nulls(len(out), typ) for name, typ in fields.items() if name not in (
          log.KEY, log.EVENT_TIME, log.DROPPED_STAGE, log.DROP_REASON,
          log.fp_column(RAW.name), log.fp_column(PARSE.name))}
    rows = pa.array(live)
    aggregates = {name: aggregates[j].take(rows) for j, name in enumerate(self._aggregates)}
    values = pa.Table.from_batches([typed]).take(rows)
    for name, column in aggregates.items():
      values = values.append_column(name, column)
    decoded = round_trip(values, self._profile)
    decoded = pa.RecordBatch.from_arrays([c.combine_chunks() for c in decoded.columns],
                                         names=decoded.schema.names)
    bounds = pa.table({WINDOW_START: start[live], WINDOW_END: end[live], **aggregates})
    live_keys = keys.take(rows)
    shards = shard_ids(live_keys, self._profile)
    outputs = transform_values(self._transform, decoded, self._value_columns, self._log.features,
                               self._transform_batch_size, self._log.feature_types)
    features = pa.table({f: outputs[f] for f in self._log.features})
    fp_transform, fp_features = fingerprint.fingerprint_fields(
        features, TRANSFORM.fingerprint_fields(features=self._log.features))
    live_cols = {
        log.WINDOW_START: pa.array(start[live]), log.WINDOW_END: pa.array(end[live]),
        log.SHARD_ID: pa.array(shards),
        log.fp_column(WINDOW.name): fingerprint.fingerprint_batch(
            bounds, WINDOW.fingerprint_fields(aggregates=self._aggregates)),
        log.fp_column(SHARD.name): fingerprint.fingerprint_batch(
            pa.record_batch([pa.array(shards), live_keys], names=[SHARD_ID, KEY]),
            SHARD.fingerprint_fields()),
        log.fp_column(SERIALIZE.name): fingerprint.fingerprint_batch(
            decoded, SERIALIZE.fingerprint_fields(columns=self._names,
                                                  aggregates=self._aggregates)),
        log.fp_column(TRANSFORM.name): fp_transform,
        log.fp_column(SERVE.name): fp_transform,
        **{log.aggregate_column(name): column for name, column in aggregates.items()}}
    if self._served:  # what the model got: the served value where serving logged one
      served = {f: served[j].take(rows) for j, f in enumerate(self._served)}
      live_cols[log.fp_column(SERVE.name)] = fingerprint.fingerprint_fields(
          log.model_inputs(features, served), SERVE.fingerprint_fields(
              features=self._log.features))[0]
      live_cols.update((log.served_column(f), a) for f, a in served.items())
    if self._model is not None:  # the predict stage, on what the model got
      live_cols.update(predict_columns(self._model, log.model_inputs(features, served)
                                       if self._served else features))
    for f in self._log.features:
      live_cols[log.feature_fp_column(f)] = fp_features[f]
      live_cols[log.value_column(f)] = features.column(f).combine_chunks()
    return {name: (pa.array(col) if isinstance(col, np.ndarray) else col).take(take)
            for name, col in live_cols.items()}
