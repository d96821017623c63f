"""A small real model for the predict stage's tests: logistic regression on the taxi module's
transformed features with TFX's taxi label (tip > 20% of the fare: the module's `label`),
trained in seconds with a fixed seed on an offline run's feature log and saved as a SavedModel
in the TFX Trainer shape:
  serving_default  serialized tf.Examples of raw features -> the TFT layer -> the model
  transformed      the transformed features -> {"probability": [n, 1]}
save(..., dtype=tf.float16) saves the same weights computing in float16 (the "other device").
"""
import glob
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FLOATS = ["trip_miles_z", "fare_z", "trip_seconds_z", "area_trips_in_window_z"]
IDS = {"payment_type_id": 1010, "company_id": 1010, "trip_start_hour": 24}
INPUTS = FLOATS + sorted(IDS)


def log_table(run_dir):
  """The kept rows of a features run's log, sorted by key."""
  paths = sorted(glob.glob(os.path.join(run_dir, "feature_log", "*.parquet")))
  t = pa.concat_tables([pq.read_table(p) for p in paths], promote_options="default")
  t = t.filter(t.column("dropped_stage").is_null())
  return t.sort_by("key")


def feature_arrays(table, prefix="value__"):
  """{input: numpy array} of a log table's model inputs."""
  return {n: table.column(prefix + n).to_numpy(zero_copy_only=False) for n in INPUTS}


def train(run_dir, steps=300, seed=7):
  """The weights (numpy) of a logistic regression fitted to a run's transformed features."""
  import tensorflow as tf
  table = log_table(run_dir)
  x = feature_arrays(table)
  y = table.column("value__label").to_numpy().astype(np.float32)
  rng = np.random.default_rng(seed)
  w = {"dense": tf.Variable(rng.normal(0, 0.01, len(FLOATS)).astype(np.float32)),
       "bias": tf.Variable(np.zeros(1, np.float32))}
  for name, size in IDS.items():
    w[name] = tf.Variable(rng.normal(0, 0.01, size).astype(np.float32))
  opt = tf.keras.optimizers.Adam(0.1)
  dense = tf.constant(np.stack([x[n] for n in FLOATS], axis=1).astype(np.float32))
  ids = {n: tf.constant(np.clip(x[n], 0, IDS[n] - 1)) for n in IDS}
  for _ in range(steps):
    with tf.GradientTape() as tape:
      logit = tf.linalg.matvec(dense, w["dense"]) + w["bias"][0]
      for n in IDS:
        logit += tf.gather(w[n], ids[n])
      loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(y, logit))
    grads = tape.gradient(loss, list(w.values()))
    opt.apply_gradients(zip(grads, list(w.values())))
  return {k: v.numpy() for k, v in w.items()}


def save(weights, out_dir, transform_fn_dir, dtype=None):
  """The weights as a SavedModel in the TFX Trainer shape (see the module docstring)."""
  import tensorflow as tf
  import tensorflow_transform as tft
  dtype = dtype or tf.float32
  model = tf.Module()
  model.w = {k: tf.Variable(tf.cast(v, dtype)) for k, v in weights.items()}
  specs = {n: tf.TensorSpec([None], tf.float32 if n in FLOATS else tf.int64, name=n)
           for n in INPUTS}

  def score(features):
    dense = tf.cast(tf.stack([features[n] for n in FLOATS], axis=1), dtype)
    logit = tf.linalg.matvec(dense, model.w["dense"]) + model.w["bias"][0]
    for n, size in IDS.items():
      logit += tf.gather(model.w[n], tf.clip_by_value(features[n], 0, size - 1))
    return tf.cast(tf.sigmoid(logit)[:, None], tf.float32)

  @tf.function(input_signature=[specs])
  def transformed(features):
    return {"probability": score(features)}

  tft_output = tft.TFTransformOutput(transform_fn_dir)
  model.tft_layer = tft_output.transform_features_layer()
  raw_spec = _raw_spec(os.path.dirname(transform_fn_dir.rstrip("/")))

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
  def serving(examples):
    parsed = tf.io.parse_example(examples, raw_spec)
    parsed = {n: tf.SparseTensor(v.indices, tf.cast(v.values, tf.float64), v.dense_shape)
              if v.dtype == tf.float32 else v for n, v in parsed.items()}  # FLOAT is float64
    return {"probability": score(model.tft_layer(parsed))}

  tf.saved_model.save(model, out_dir, signatures={"serving_default": serving,
                                                  "transformed": transformed})
  return out_dir


def _raw_spec(run_dir):
  """The raw features' parse spec (one VarLen feature per dataset column and aggregate), from a
  features run's metadata: what a serving tf.Example carries."""
  import json
  import tensorflow as tf
  with open(os.path.join(run_dir, "run_metadata.json"), encoding="utf-8") as f:
    meta = json.load(f)
  types = {"INT": tf.int64, "FLOAT": tf.float32, "BYTES": tf.string}
  spec = {c["name"]: tf.io.VarLenFeature(types[c["type"]]) for c in meta["schema"]["columns"]}
  spec.update((a["name"], tf.io.VarLenFeature(tf.int64)) for a in meta["schema"]["aggregates"])
  return spec


def predict(model_dir, arrays):
  """float32[n]: the probability the SavedModel's `transformed` signature gives, called with
  plain TensorFlow on {input: numpy array}."""
  import tensorflow as tf
  fn = tf.saved_model.load(model_dir).signatures["transformed"]
  return fn(**{n: tf.constant(arrays[n]) for n in INPUTS})["probability"].numpy()[:, 0]


_LOADED = {}


def _probability(model_dir, arrays):
  """predict() with the SavedModel loaded once per process."""
  import tensorflow as tf
  if model_dir not in _LOADED:
    _LOADED[model_dir] = tf.saved_model.load(model_dir).signatures["transformed"]
  fn = _LOADED[model_dir]
  return fn(**{n: tf.constant(arrays[n]) for n in INPUTS})["probability"].numpy()[:, 0]


def model_inputs(table):
  """{input: numpy array} of what the model received per row of a log table: the served value
  (served__F) where serving logged one, else the transformed value."""
  out = {}
  for n in INPUTS:
    values = table.column("value__" + n).to_numpy(zero_copy_only=False)
    if "served__" + n in table.schema.names:
      served = table.column("served__" + n)
      valid = served.is_valid().to_numpy(zero_copy_only=False)
      values = np.where(valid, served.cast(table.column("value__" + n).type).fill_null(0)
                        .to_numpy(zero_copy_only=False), values)
    out[n] = values
  return out


def matched(off_dir, prod_dir):
  """(offline rows, production rows) of the keys both logs kept, once on each side (a key
  duplicated on either side is left out, as the diff leaves it), aligned by key."""
  import pyarrow.compute as pc
  sides = []
  for run in (off_dir, prod_dir):
    t = log_table(run)
    counts = pc.value_counts(t.column("key"))
    dup = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
    sides.append(t.filter(pc.invert(pc.is_in(t.column("key"), value_set=dup))))
  o, p = sides
  o = o.filter(pc.is_in(o.column("key"), value_set=p.column("key")))
  p = p.filter(pc.is_in(p.column("key"), value_set=o.column("key")))
  return o.sort_by("key"), p.sort_by("key")


def expected_decisions(off_dir, prod_dir, model_dir, threshold, prod_model_dir=None):
  """What the diff must report, computed here with plain TensorFlow on both logs' model inputs:
  {flips, max_abs_delta, by_feature: {input: flips its swap alone restores}, jointly_caused}
  for the threshold rule (score >= threshold decides 1)."""
  o, p = matched(off_dir, prod_dir)
  xo, xp = model_inputs(o), model_inputs(p)
  po = _probability(model_dir, xo)
  pp = _probability(prod_model_dir or model_dir, xp)
  do, dp = po >= threshold, pp >= threshold
  flipped = np.flatnonzero(do != dp)
  differs = {n: ~((xo[n] == xp[n]) | (np.isnan(xo[n]) & np.isnan(xp[n]))
                  if xo[n].dtype.kind == "f" else xo[n] == xp[n]) for n in INPUTS}
  restored = {r: [] for r in flipped if any(differs[n][r] for n in INPUTS)}
  rows = np.array(sorted(restored), np.int64)  # flips whose inputs differ (else: another model)
  for n in INPUTS:
    at = rows[differs[n][rows]] if len(rows) else rows
    if not len(at):
      continue
    x = {m: xp[m][at] for m in INPUTS}
    x[n] = xo[n][at]
    back = (_probability(prod_model_dir or model_dir, x) >= threshold) == do[at]
    for r in at[back]:
      restored[int(r)].append(n)
  by_feature = {}
  for names in restored.values():
    for n in names:
      by_feature[n] = by_feature.get(n, 0) + 1
  joint = sum(1 for names in restored.values() if not names)
  delta = np.abs(po.astype(np.float64) - pp.astype(np.float64))
  return {"flips": int(len(flipped)), "compared": int(len(po)),
          "max_abs_delta": float(delta.max(initial=0.0)), "by_feature": by_feature,
          "jointly_caused": joint, "probabilities": (po, pp)}


def threshold_near_median(run_dir, model_dir):
  """A decision threshold (3 decimals) at the median score of the records the model is unsure
  of (0.05 < p < 0.95), so that skew and noise can move records across it."""
  p = _probability(model_dir, model_inputs(log_table(run_dir)))
  unsure = p[(p > 0.05) & (p < 0.95)]
  return float(np.round(np.median(unsure), 3))
