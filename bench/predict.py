"""Benchmark: the predict stage and the diff's decisions, each against its named baseline.

  python bench/predict.py [--rows 1000000] [--flipped 0.01] [--stage_only]

(A) the predict stage (transforms/model/predict.predict_columns: the model call, the decision
    rule, the prediction and decision columns and their fingerprint) over --rows records of the
    taxi model's seven inputs, against (s) the bare signature call on the same 65,536-row
    batches (tf.constant of each column, the call, .numpy()). The model has the shape of TFX's
    taxi DNN (an 8-wide embedding per id input, hidden layers 100-70-50-25, one sigmoid score;
    fixed seeded weights), saved as a SavedModel with one signature over the transformed
    features. Best of 3, in one process. Target: (A)/(s) <= 1.2.
(D) replay.diff given the model (--model_dir: it predicts both sides, which log no prediction,
    and attributes every flip), against (n) the same diff without a model. The offline side is
    the bench/ingest.py input (taxi sample repeated, unique trip_id key) run through
    pipelines.features (not timed); production is a copy in which a deterministic 1% of the
    records (XXH64(key) mod 100 == 0) have fare_z moved by +4 (tests/logfaults.feature_shift);
    the model is (A)'s, the threshold at its median unsure score, so some of them flip. Job time
    alone (run() to return,
    the model's load included, imports before it excluded), best of 3 interleaved.
    Target: (D)/(n) <= 1.5.
"""
import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import ingest as ingest_bench  # noqa: E402
import replay as replay_bench  # noqa: E402  (JOB_TIME, _job_seconds: a diff's job seconds)
sys.path.insert(0, ROOT)
from tests import logfaults, taxi_model  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

HIDDEN = (100, 70, 50, 25)  # TFX's taxi example DNN
EMBED = 8


def save_dnn(out_dir, seed=3):
  """A SavedModel of TFX's taxi DNN shape over the transformed features (seeded weights)."""
  import tensorflow as tf
  rng = np.random.default_rng(seed)
  model = tf.Module()
  model.embed = {n: tf.Variable(rng.normal(0, 0.5, (size, EMBED)).astype(np.float32))
                 for n, size in sorted(taxi_model.IDS.items())}
  sizes = (len(taxi_model.FLOATS) + EMBED * len(taxi_model.IDS),) + HIDDEN + (1,)
  model.layers = [(tf.Variable(rng.normal(0, (2 / a) ** 0.5, (a, b)).astype(np.float32)),
                   tf.Variable(np.zeros(b, np.float32))) for a, b in zip(sizes, sizes[1:])]
  specs = {n: tf.TensorSpec([None], tf.float32 if n in taxi_model.FLOATS else tf.int64, name=n)
           for n in taxi_model.INPUTS}

  @tf.function(input_signature=[specs])
  def transformed(features):
    parts = [tf.stack([features[n] for n in taxi_model.FLOATS], axis=1)]
    parts += [tf.gather(model.embed[n], tf.clip_by_value(features[n], 0, size - 1))
              for n, size in sorted(taxi_model.IDS.items())]
    x = tf.concat(parts, axis=1)
    for i, (w, b) in enumerate(model.layers):
      x = tf.matmul(x, w) + b
      x = tf.nn.relu(x) if i < len(model.layers) - 1 else tf.sigmoid(x)
    return {"probability": x}

  tf.saved_model.save(model, out_dir, signatures={"transformed": transformed})
  return out_dir


def _inputs(rows, seed=5):
  rng = np.random.default_rng(seed)
  cols = {n: rng.normal(0, 1, rows).astype(np.float32) for n in taxi_model.FLOATS}
  cols.update({n: rng.integers(0, size, rows) for n, size in taxi_model.IDS.items()})
  return pa.table(cols)


def _stage(model_dir, rows):
  import tensorflow as tf
  from transforms.model import load, predict
  table = _inputs(rows)
  spec = load.ModelSpec(model_dir=model_dir, decision="threshold:0.5")
  model = load.load(spec, {n: table.schema.field(n).type for n in table.schema.names})
  fn = tf.saved_model.load(model_dir).signatures["transformed"]

  def bare():
    out = []
    for lo in range(0, rows, load.BATCH_ROWS):
      part = table.slice(lo, load.BATCH_ROWS)
      out.append(fn(**{n: tf.constant(part.column(n).to_numpy())
                       for n in taxi_model.INPUTS})["probability"].numpy())
    return np.concatenate(out)

  def stage():
    return predict.predict_columns(model, table)

  times = {"s": [], "A": []}
  for _ in range(3):
    for name, f in (("s", bare), ("A", stage)):
      start = time.perf_counter()
      f()
      times[name].append(time.perf_counter() - start)
  s, a = min(times["s"]), min(times["A"])
  print(f"(A) predict stage, {rows} records:        {a:7.2f} s")
  print(f"(s) bare signature call, same batches:    {s:7.2f} s")
  print(f"(A)/(s) = {a / s:5.2f}   (target <= 1.2: {'met' if a / s <= 1.2 else 'not met'})")


def _diff(d, rows, flipped, model_dir):
  import json
  py = sys.executable
  data = ingest_bench.prepared_dataset(d, rows, "--key_columns", "trip_id")
  offline, production = os.path.join(d, "offline"), os.path.join(d, "production")
  ingest_bench.measure([py, "-m", "pipelines.features", "--input_dir", data, "--output_dir",
                        offline, "--profile", os.path.join(ROOT, "profiles", "offline.yaml"),
                        "--transform_module", "transforms.taxi"])
  changed = logfaults.edit_log(offline, production,
                               logfaults.feature_shift(round(1 / flipped), "fare_z", 4.0))
  threshold = taxi_model.threshold_near_median(offline, model_dir)
  job = [py, "-c", replay_bench.JOB_TIME, "--offline", offline, "--production", production]
  model = ["--model_dir", model_dir, "--decision", f"threshold:{threshold!r}"]
  runs = [(replay_bench._job_seconds(job + ["--output_dir", os.path.join(d, f"n{k}")]),
           replay_bench._job_seconds(job + ["--output_dir", os.path.join(d, f"m{k}")] + model)) for k in range(3)]
  n, m = (min(column) for column in zip(*runs))
  with open(os.path.join(d, "m0", "report.json")) as f:
    decisions = json.load(f)["decisions"]
  print(f"records: {rows} vs {rows}; fare_z moved in {changed} ({changed / rows:.1%}); "
        f"{decisions['flips']} decisions flip, {decisions['attribution']['attributed']} "
        f"attributed ({decisions['attribution']['by_feature']})")
  print(f"(D) replay.diff with the model (predict both sides, attribution): {m:7.2f} s")
  print(f"(n) replay.diff without a model:                                  {n:7.2f} s")
  print(f"(D)/(n) = {m / n:5.2f}   (target <= 1.5: {'met' if m / n <= 1.5 else 'not met'})")


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--rows", type=int, default=1_000_000)
  ap.add_argument("--flipped", type=float, default=0.01)
  ap.add_argument("--stage_only", action="store_true", help="(A) and (s) only")
  args = ap.parse_args()
  with tempfile.TemporaryDirectory() as d:
    model_dir = save_dnn(os.path.join(d, "model"))
    _stage(model_dir, args.rows)
    if not args.stage_only:
      _diff(d, args.rows, args.flipped, model_dir)


if __name__ == "__main__":
  main()
