"""Chicago taxi features, modelled on TFX's canonical taxi example (taxi_utils.preprocessing_fn).

A feature module declares what pipelines.features needs to know about its data:
  KEY_COLUMNS          the record key columns the module is written for, checked against the
                       dataset's ([] = the ingest content key); None: any key (the module does
                       not depend on it)
  EVENT_TIME_COLUMN    int64 Unix seconds used for event-time windows
  WINDOWED_AGGREGATES  aggregates computed in Beam per (group column, window) before TFT;
                       each becomes an int64 input feature of preprocessing_fn
  preprocessing_fn     the TF Transform function
Users point pipelines.features at their own module with --transform_module pkg.module.
"""
import tensorflow as tf
import tensorflow_transform as tft

__all__ = ["KEY_COLUMNS", "EVENT_TIME_COLUMN", "WINDOWED_AGGREGATES", "preprocessing_fn"]

KEY_COLUMNS = None  # the taxi features read no key: the sample as bundled (content key) or
                   # with a trip_id key column (the fault catalogue, the benchmarks)
EVENT_TIME_COLUMN = "trip_start_timestamp"
# Trips starting in the same pickup community area within the record's event-time window.
WINDOWED_AGGREGATES = [{"name": "area_trips_in_window", "group_by": "pickup_community_area",
                        "fn": "count"}]

_DENSE_FLOAT_FEATURE_KEYS = ["trip_miles", "fare", "trip_seconds"]
_VOCAB_FEATURE_KEYS = ["payment_type", "company"]
_BUCKET_FEATURE_KEYS = ["pickup_latitude", "pickup_longitude", "dropoff_latitude",
                        "dropoff_longitude"]
_CATEGORICAL_FEATURE_KEYS = ["trip_start_hour", "trip_start_day", "trip_start_month",
                             "pickup_census_tract", "dropoff_census_tract",
                             "pickup_community_area", "dropoff_community_area"]
_FEATURE_BUCKET_COUNT = 10
_VOCAB_SIZE = 1000
_OOV_SIZE = 10
_LABEL_KEY = "tips"
_FARE_KEY = "fare"


def _fill_in_missing(x):
  """A dense [batch] tensor from a one-value-or-missing feature (missing -> '' or 0)."""
  if isinstance(x, tf.sparse.SparseTensor):
    default = "" if x.dtype == tf.string else 0
    x = tf.sparse.to_dense(
        tf.SparseTensor(x.indices, x.values, [x.dense_shape[0], 1]), default)
  elif isinstance(x, tf.RaggedTensor):
    x = x.to_tensor(default_value="" if x.dtype == tf.string else 0, shape=[None, 1])
  return tf.squeeze(x, axis=1) if x.shape.rank == 2 else x


def _to_number(x, dtype):
  """A dense numeric [batch] tensor; a numeric column that arrives typed as text (an upstream
  schema change) is parsed rather than failing the whole job, so the skew stays diagnosable."""
  x = _fill_in_missing(x)
  if x.dtype == tf.string:
    return tf.strings.to_number(tf.where(tf.equal(x, ""), "0", x), dtype)
  return tf.cast(x, dtype)


def preprocessing_fn(inputs, bucket_count=_FEATURE_BUCKET_COUNT, vocab_size=_VOCAB_SIZE):
  """TFT's taxi features plus a z-scored windowed aggregate (bucket_count buckets per
  coordinate, the vocab_size most frequent values of each vocabulary)."""
  outputs = {}
  for key in _DENSE_FLOAT_FEATURE_KEYS:
    outputs[key + "_z"] = tft.scale_to_z_score(_to_number(inputs[key], tf.float32))
  for key in _VOCAB_FEATURE_KEYS:
    outputs[key + "_id"] = tft.compute_and_apply_vocabulary(
        _fill_in_missing(inputs[key]), top_k=vocab_size, num_oov_buckets=_OOV_SIZE,
        vocab_filename=key)
  for key in _BUCKET_FEATURE_KEYS:
    outputs[key + "_bucket"] = tft.bucketize(
        _to_number(inputs[key], tf.float32), bucket_count)
  for key in _CATEGORICAL_FEATURE_KEYS:
    outputs[key] = _to_number(inputs[key], tf.int64)
  for aggregate in WINDOWED_AGGREGATES:
    name = aggregate["name"]
    outputs[name + "_z"] = tft.scale_to_z_score(_to_number(inputs[name], tf.float32))
  fare = _to_number(inputs[_FARE_KEY], tf.float32)
  tips = _to_number(inputs[_LABEL_KEY], tf.float32)
  outputs["label"] = tf.where(tf.math.is_nan(fare), tf.zeros_like(fare, dtype=tf.int64),
                              tf.cast(tf.greater(tips, fare * 0.2), tf.int64))
  return outputs
