"""Benchmark: the predict stage and the diff's decisions, each against its named baseline.

  python bench/predict.py [--rows 1000000] [--moved 0.0333] [--stage_only | --diff_only]
                          [--work_dir DIR]

(A) the predict stage (transforms/model/predict.predict_columns: the model call, the decision
    rule, the prediction and decision columns and their fingerprint) over --rows records of the
    taxi model's seven inputs, against (s) the bare signature call on the same 65,536-row
    batches (tf.constant of each column, the call, .numpy()). The model has the shape of TFX's
    taxi DNN (an 8-wide embedding per id input, hidden layers 100-70-50-25, one sigmoid score;
    fixed seeded weights), saved as a SavedModel with one signature over the transformed
    features. Best of 3, in one process. Target: (A)/(s) <= 1.2.
(D) replay.diff given the model (--model_dir) on logs that hold the predict stage (the features
    job run with the model; production's log as its logger would write it): the model is
    loaded for the attribution of every flip; against (n) the same diff without a model (it
    still compares the logged predictions and counts the flips). The offline side is the
    bench/ingest.py input (taxi sample repeated, unique trip_id key) run through
    pipelines.features (not timed); production is a copy in which a deterministic 1/30 of the
    records (XXH64(key) mod 30 == 0) have fare_z moved by +4 (tests/logfaults.feature_shift)
    and their predictions computed again: about 1% of the decisions flip (threshold at the
    model's median unsure score). Target: (D)/(n) <= 1.5.
(H) (D) with the same DNN as a numpy --model_module hook (its weights exported from the
    SavedModel): the attribution's own cost, without TensorFlow's import.
(P) replay.diff given the model on logs without the predict stage (it predicts both sides),
    against (m) the same diff without a model.
Job time alone (run() to return, the model's load included, imports before it excluded), best
of 3 with the runs interleaved. --work_dir keeps the model, the dataset and the offline runs.
"""
import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import ingest as ingest_bench  # noqa: E402
sys.path.insert(0, ROOT)
# bench/replay.py (JOB_TIME, _job_seconds: a diff's job seconds) by its path: its name is the
# replay package's
_spec = importlib.util.spec_from_file_location("replay_bench", os.path.join(ROOT, "bench",
                                                                            "replay.py"))
replay_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(replay_bench)
from tests import logfaults, taxi_model  # noqa: E402
from transforms.spec.feature_log import DECISION, PREDICTION  # noqa: E402

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


HOOK = r'''"""The bench's DNN as a --model_module hook: the SavedModel's weights in numpy."""
import numpy as np

_W = np.load(__file__[:-3] + ".npz")
FLOATS = {floats!r}
IDS = {ids!r}
LAYERS = {layers}


def predict(features):
  parts = [np.stack([features[n].astype(np.float32) for n in FLOATS], axis=1)]
  parts += [_W["embed_" + n][np.clip(features[n], 0, size - 1)] for n, size in sorted(IDS.items())]
  x = np.concatenate(parts, axis=1)
  for i in range(LAYERS):
    x = x @ _W[f"w{{i}}"] + _W[f"b{{i}}"]
    x = np.maximum(x, 0) if i < LAYERS - 1 else 1 / (1 + np.exp(-x))
  return x
'''


def save_hook(model_dir, path):
  """The SavedModel's DNN as a numpy module hook at `path` (.py, its weights in .npz beside)."""
  import tensorflow as tf
  model = tf.saved_model.load(model_dir)
  weights = {"embed_" + n: v.numpy() for n, v in model.embed.items()}
  for i, (w, b) in enumerate(model.layers):
    weights[f"w{i}"], weights[f"b{i}"] = w.numpy(), b.numpy()
  np.savez(path[:-3] + ".npz", **weights)
  with open(path, "w") as f:
    f.write(HOOK.format(floats=list(taxi_model.FLOATS), ids=dict(taxi_model.IDS),
                        layers=len(model.layers)))
  return path


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


def _shift_and_predict(shift, spec):
  """An edit moving a feature (`shift`, a logfaults edit) and then computing the predict stage's
  columns again on the edited serve values, as production's features run or logger would."""
  from replay.diff import predicting
  from transforms.model import predict

  def edit(table):
    table, changed = shift(table)
    table = table.drop_columns([predict.FP_PREDICT, PREDICTION, DECISION])
    return predicting.with_predictions(table, spec), changed

  return edit


def _logs(d, rows, moved, model_dir):
  """(offline, production, changed, decision): the offline features run and production with
  fare_z moved in `moved` of the records; both again with the model's predict stage (suffix
  _p). With --work_dir, what is there already is reused."""
  from transforms.model import load
  py = sys.executable
  offline, production = os.path.join(d, "offline"), os.path.join(d, "production")
  features = [py, "-m", "pipelines.features", "--profile",
              os.path.join(ROOT, "profiles", "offline.yaml"), "--transform_module",
              "transforms.taxi"]
  if not os.path.exists(offline):
    data = ingest_bench.prepared_dataset(d, rows, "--key_columns", "trip_id")
    ingest_bench.measure(features + ["--input_dir", data, "--output_dir", offline])
  decision = f"threshold:{taxi_model.threshold_near_median(offline, model_dir)!r}"
  if not os.path.exists(offline + "_p"):
    ingest_bench.measure(features + ["--input_dir", os.path.join(d, "ingest"), "--output_dir",
                                     offline + "_p", "--model_dir", model_dir,
                                     "--decision", decision])
  for side in (production, production + "_p"):
    shutil.rmtree(side, ignore_errors=True)
  shift = logfaults.feature_shift(round(1 / moved), "fare_z", 4.0)
  changed = logfaults.edit_log(offline, production, shift)
  logfaults.edit_log(offline + "_p", production + "_p", _shift_and_predict(
      shift, load.ModelSpec(model_dir=model_dir, decision=decision)))
  return offline, production, changed, decision


def _diff(d, rows, moved, model_dir):
  offline, production, changed, decision = _logs(d, rows, moved, model_dir)
  model = ["--model_dir", model_dir, "--decision", decision]
  hook = save_hook(model_dir, os.path.join(d, "dnn_hook.py"))
  contenders = {  # name -> (offline, production, flags)
      "D": (offline + "_p", production + "_p", model), "n": (offline + "_p", production + "_p", []),
      "H": (offline + "_p", production + "_p", ["--model_module", hook, "--decision", decision]),
      "P": (offline, production, model), "m": (offline, production, [])}
  times = {name: [] for name in contenders}
  for k in range(3):
    for name, (o, p, flags) in contenders.items():
      out = os.path.join(d, f"{name}{k}")
      times[name].append(replay_bench._job_seconds(
          [sys.executable, "-c", replay_bench.JOB_TIME, "--offline", o, "--production", p,
           "--output_dir", out] + flags))
  best = {name: min(t) for name, t in times.items()}
  with open(os.path.join(d, "D0", "report.json")) as f:
    decisions = json.load(f)["decisions"]
  print(f"records: {rows} vs {rows}; fare_z moved in {changed} ({changed / rows:.1%}); "
        f"{decisions['flips']} decisions flip ({decisions['flips'] / rows:.2%}), {decisions['attribution']['attributed']} "
        f"attributed ({decisions['attribution']['by_feature']})")
  print(f"(D) replay.diff with the model, logs holding predictions (attribution): "
        f"{best['D']:7.2f} s")
  print(f"(n) replay.diff without a model, the same logs:                        "
        f"{best['n']:7.2f} s")
  print(f"(H) the same as (D), the model a numpy --model_module hook (no TensorFlow): "
        f"{best['H']:7.2f} s")
  print(f"(P) replay.diff with the model, logs without predictions (predicts both): "
        f"{best['P']:7.2f} s")
  print(f"(m) replay.diff without a model, the same logs:                          "
        f"{best['m']:7.2f} s")
  print(f"(D)/(n) = {best['D'] / best['n']:5.2f}   (target <= 1.5: "
        f"{'met' if best['D'] / best['n'] <= 1.5 else 'not met'});  "
        f"(H)/(n) = {best['H'] / best['n']:5.2f};  "
        f"(P)/(m) = {best['P'] / best['m']:5.2f}")


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--rows", type=int, default=1_000_000)
  ap.add_argument("--moved", type=float, default=1 / 30,
                  help="fraction of production's records whose fare_z moves (1/30: ~1%% flip)")
  ap.add_argument("--stage_only", action="store_true", help="(A) and (s) only")
  ap.add_argument("--diff_only", action="store_true", help="(D), (n), (P) and (m) only")
  ap.add_argument("--work_dir", help="keep the model, dataset and logs here, reused when there")
  args = ap.parse_args()
  with tempfile.TemporaryDirectory() as tmp:
    d = args.work_dir or tmp
    model_dir = os.path.join(d, "model")
    if not os.path.exists(model_dir):
      save_dnn(model_dir)
    if not args.diff_only:
      _stage(model_dir, args.rows)
    if not args.stage_only:
      _diff(d, args.rows, args.moved, model_dir)


if __name__ == "__main__":
  main()
