"""The `analyze` stage: fingerprints of every TFT analyzer output in a transform_fn.

Per run, not per record. A transform_fn (tft.TFTransformOutput's directory) holds the analyzer
outputs two ways, and both are read back from what was written -- the same code serves the
offline pipeline and the production logger:
  - numeric analyzers (mean/var of scale_to_z_score, quantile boundaries of bucketize, vocabulary
    sizes, ...) are tensors captured by the saved transform function. Each is named after the
    op that consumes it inside the function (e.g. `scale_to_z_score_sub_y` is the mean
    subtracted by scale_to_z_score, `bucketize_apply_buckets` the bucket boundaries), with
    TensorFlow's unique-id suffixes removed and duplicates numbered in order.
  - vocabularies are asset files: `vocabulary/<file name>`, fingerprinted over the file bytes.
Each output's fingerprint is transforms.spec.fingerprint of {"dtype", "shape", "value"} (numeric) or
{"value": file bytes} (vocabulary); `fingerprint` covers all of them (by name), and
`definition` only their names, dtypes and shapes -- what the preprocessing_fn declares, not
what the data gave. A diff tells "analyzed on other data" (values differ, definition equal)
from "a changed preprocessing_fn" (definition differs).

A run that transforms with a given transform_fn (pipelines.features --transform_fn_dir) records
these same fingerprints, read the same way from its copy of that transform_fn, and also the
folder's content_digest: which artifacts, byte for byte, it replayed.
"""
import hashlib
import re

import numpy as np

from transforms.spec import fingerprint

__all__ = ["analyzer_outputs", "analyze_fingerprints", "content_digest", "DIGEST_FORMAT"]

_UID = re.compile(r"_\d+$")
_SMALL = 64  # outputs with at most this many values are kept in the run metadata
DIGEST_FORMAT = "sha256:"  # content_digest's tag (a format change gets a new tag)
_DIGEST_SALT = b"skewtrace.transform_fn/1"


def _capture_names(concrete):
  """Names of the captured inputs of a loaded signature, from its inner function's arguments."""
  graph_def = concrete.graph.as_graph_def()
  calls = [n for n in graph_def.node if n.op in ("StatefulPartitionedCall", "PartitionedCall")]
  if len(calls) != 1:
    raise ValueError(f"unexpected transform_fn graph: {len(calls)} function calls")
  fname = calls[0].attr["f"].func.name
  fdef = next(f for f in graph_def.library.function if f.signature.name == fname)
  n = len(concrete.captured_inputs)
  return [a.name for a in fdef.signature.input_arg][len(fdef.signature.input_arg) - n:]


def analyzer_outputs(transform_fn_dir):
  """[(name, value)] of the transform_fn's analyzer outputs, sorted by name.

  value: a numpy array (numeric analyzers) or bytes (a vocabulary file).
  """
  import tensorflow as tf
  import tensorflow_transform as tft
  # The saved function inside TFT's output folder, where tft.TFTransformOutput puts it. Paths
  # through tf.io.gfile, so a transform_fn on gs:// reads as a local one.
  model_dir = _join(transform_fn_dir, tft.TFTransformOutput.TRANSFORM_FN_DIR)
  loaded = tf.saved_model.load(model_dir)
  concrete = loaded.signatures["serving_default"]
  out, seen = [], {}
  for name, tensor in zip(_capture_names(concrete), concrete.captured_inputs):
    if tensor.dtype == tf.resource:  # lookup tables: their vocabulary file is fingerprinted
      continue
    base = _UID.sub("", name)
    seen[base] = seen.get(base, 0) + 1
    label = base if seen[base] == 1 else f"{base}#{seen[base]}"
    out.append((label, np.asarray(tensor.numpy())))
  assets = _join(model_dir, "assets")
  if tf.io.gfile.isdir(assets):
    for fname in sorted(tf.io.gfile.listdir(assets)):
      with tf.io.gfile.GFile(_join(assets, fname), "rb") as f:
        out.append((f"vocabulary/{fname}", f.read()))
  return sorted(out, key=lambda kv: kv[0].encode("utf-8"))


def _join(*parts):
  return "/".join([parts[0].rstrip("/")] + [p.strip("/") for p in parts[1:]])


def content_digest(transform_fn_dir):
  """DIGEST_FORMAT + hex SHA-256 of a transform_fn folder's content: every file under it, in
  order of its relative path (UTF-8 bytes), as length-prefixed path, 8-byte little-endian
  size and the file's own SHA-256. Equal for a folder and a byte-exact copy of it."""
  import tensorflow as tf
  root = transform_fn_dir.rstrip("/")
  files = []
  for folder, _, names in tf.io.gfile.walk(root):
    rel = folder[len(root):].strip("/")
    files += [(f"{rel}/{n}" if rel else n) for n in names]
  h = hashlib.sha256(_DIGEST_SALT)
  for rel in sorted(files, key=lambda r: r.encode("utf-8")):
    name, inner, size = rel.encode("utf-8"), hashlib.sha256(), 0
    with tf.io.gfile.GFile(_join(root, rel), "rb") as f:
      while chunk := f.read(8 << 20):
        inner.update(chunk)
        size += len(chunk)
    h.update(len(name).to_bytes(8, "little") + name + size.to_bytes(8, "little") + inner.digest())
  return DIGEST_FORMAT + h.hexdigest()


def _record(value):
  if isinstance(value, bytes):
    return {"value": value}
  flat = value.ravel()
  if flat.dtype.kind == "f":
    values = [float(v) for v in flat.astype(np.float64)]
  elif flat.dtype.kind in "iu":
    values = [int(v) for v in flat]
  else:
    values = [v if isinstance(v, bytes) else str(v).encode("utf-8") for v in flat]
  return {"dtype": str(value.dtype), "shape": list(value.shape), "value": values}


def analyze_fingerprints(transform_fn_dir):
  """The analyze stage of a transform_fn, as the run metadata carries it:
  {"fingerprint": hex, "definition": hex, "analyzers": {name: {"fingerprint": hex, ...}}}."""
  analyzers, whole, definition = {}, {}, {}
  for name, value in analyzer_outputs(transform_fn_dir):
    record = _record(value)
    fp = fingerprint.fingerprint_record(record)
    entry = {"fingerprint": f"{fp:016x}"}
    if isinstance(value, bytes):
      entry["lines"] = value.count(b"\n") + (0 if value.endswith(b"\n") or not value else 1)
      definition[name] = "vocabulary"
    else:
      entry.update(dtype=record["dtype"], shape=record["shape"])
      if len(record["value"]) <= _SMALL and record["dtype"] != "object":
        entry["values"] = record["value"]
      definition[name] = f"{record['dtype']}{record['shape']}"
    analyzers[name] = entry
    whole[name] = entry["fingerprint"]
  return {"fingerprint": f"{fingerprint.fingerprint_record(whole):016x}",
          "definition": f"{fingerprint.fingerprint_record(definition):016x}",
          "analyzers": analyzers}
