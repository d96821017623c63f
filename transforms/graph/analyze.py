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

Each analyzer entry also names the output features it feeds ("features"): the outputs whose
value depends, through data edges of the transform function, on the analyzer's captured tensor
(a vocabulary: on the lookup table its file initialises, matched by the table's exported keys
and the file's lines). The diff ties an analyzer that moved to the features it moves.

A run that transforms with a given transform_fn (pipelines.features --transform_fn_dir) records
these same fingerprints, read the same way from its copy of that transform_fn, and also the
folder's content_digest: which artifacts, byte for byte, it replayed.
"""
import hashlib
import re

import numpy as np

from transforms.graph import quiet
from transforms.spec import fingerprint

__all__ = ["analyzer_outputs", "analyze_fingerprints", "content_digest", "DIGEST_FORMAT",
           "feeds", "VOCABULARY"]

_UID = re.compile(r"_\d+$")
_SMALL = 64  # outputs with at most this many values are kept in the run metadata
DIGEST_FORMAT = "sha256:"  # content_digest's tag (a format change gets a new tag)
VOCABULARY = "vocabulary/"  # the name prefix of a vocabulary file's analyzer
_DIGEST_SALT = b"skewtrace.transform_fn/1"


def _inner_function(concrete):
  """The FunctionDef the loaded signature calls (its one (Stateful)PartitionedCall)."""
  graph_def = concrete.graph.as_graph_def()
  calls = [n for n in graph_def.node if n.op in ("StatefulPartitionedCall", "PartitionedCall")]
  if len(calls) != 1:
    raise ValueError(f"unexpected transform_fn graph: {len(calls)} function calls")
  fname = calls[0].attr["f"].func.name
  return next(f for f in graph_def.library.function if f.signature.name == fname)


def _capture_names(concrete, fdef=None):
  """Names of the captured inputs of a loaded signature, from its inner function's arguments."""
  fdef = fdef or _inner_function(concrete)
  n = len(concrete.captured_inputs)
  return [a.name for a in fdef.signature.input_arg][len(fdef.signature.input_arg) - n:]


def _load(transform_fn_dir):
  tf = quiet.import_tensorflow()
  import tensorflow_transform as tft
  # The saved function inside TFT's output folder, where tft.TFTransformOutput puts it. Paths
  # through tf.io.gfile, so a transform_fn on gs:// reads as a local one.
  model_dir = _join(transform_fn_dir, tft.TFTransformOutput.TRANSFORM_FN_DIR)
  return model_dir, tf.saved_model.load(model_dir).signatures["serving_default"]


def _labels(names):
  """Capture argument names -> analyzer labels: TensorFlow's unique-id suffix removed,
  duplicates numbered in order (name, name#2, ...)."""
  out, seen = [], {}
  for name in names:
    base = _UID.sub("", name)
    seen[base] = seen.get(base, 0) + 1
    out.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
  return out


def analyzer_outputs(transform_fn_dir):
  """[(name, value)] of the transform_fn's analyzer outputs, sorted by name.

  value: a numpy array (numeric analyzers) or bytes (a vocabulary file).
  """
  tf = quiet.import_tensorflow()
  model_dir, concrete = _load(transform_fn_dir)
  labels = _labels(_capture_names(concrete))
  out = [(label, np.asarray(tensor.numpy()))
         for label, tensor in zip(labels, concrete.captured_inputs)
         if tensor.dtype != tf.resource]  # lookup tables: their vocabulary file is fingerprinted
  for fname, data in _assets(model_dir):
    out.append((f"{VOCABULARY}{fname}", data))
  return sorted(out, key=lambda kv: kv[0].encode("utf-8"))


def _assets(model_dir):
  tf = quiet.import_tensorflow()
  assets = _join(model_dir, "assets")
  if not tf.io.gfile.isdir(assets):
    return []
  out = []
  for fname in sorted(tf.io.gfile.listdir(assets)):
    with tf.io.gfile.GFile(_join(assets, fname), "rb") as f:
      out.append((fname, f.read()))
  return out


def _data_inputs(fdef, ref, inputs, seen):
  """Adds to `seen` every node and argument `ref` depends on through data edges."""
  stack, nodes = [ref], {n.name: n for n in fdef.node_def}
  while stack:
    name = stack.pop().split(":")[0]
    if name in seen:
      continue
    seen.add(name)
    if name not in inputs:
      stack += [i for i in nodes[name].input if not i.startswith("^")]


def _table_file(tensor, assets):
  """The asset file a vocabulary lookup table was initialised from: the one whose lines are the
  table's keys in the order of its values; None when no file matches (or not a string table)."""
  tf = quiet.import_tensorflow()
  try:
    keys, values = tf.raw_ops.LookupTableExportV2(table_handle=tensor, Tkeys=tf.string,
                                                   Tvalues=tf.int64)
  except (tf.errors.OpError, TypeError, ValueError):
    return None
  order = np.argsort(values.numpy(), kind="stable")
  tokens = [keys.numpy()[i] for i in order]
  for fname, data in assets:
    if data.splitlines() == tokens:
      return f"{VOCABULARY}{fname}"
  return None


def feeds(transform_fn_dir):
  """{analyzer name: [the output features it feeds, sorted]} of a transform_fn: an output
  feeds on an analyzer when its value depends on the analyzer's captured tensor through data
  edges of the transform function (a vocabulary: through the lookup table its file
  initialises). Outputs are named as TFT's output signature names them."""
  tf = quiet.import_tensorflow()
  model_dir, concrete = _load(transform_fn_dir)
  fdef = _inner_function(concrete)
  names = _capture_names(concrete, fdef)
  labels = dict(zip(names, _labels(names)))
  tables, assets = {}, _assets(model_dir)
  for name, tensor in zip(names, concrete.captured_inputs):
    if tensor.dtype == tf.resource:
      tables[name] = _table_file(tensor, assets)
  inputs = {a.name for a in fdef.signature.input_arg}
  out = {}
  # The signature's outputs are its structured outputs flattened in key order; each is the
  # Identity of one output of the call, which is one of the inner function's return values.
  for feature, tensor in zip(sorted(concrete.structured_outputs), concrete.outputs):
    src = tensor.op.inputs[0] if tensor.op.inputs else tensor
    while src.op.type == "Identity" and src.op.inputs:
      src = src.op.inputs[0]
    seen = set()
    _data_inputs(fdef, fdef.ret[fdef.signature.output_arg[src.value_index].name], inputs, seen)
    for name in seen & set(names):
      label = tables.get(name) if name in tables else labels[name]
      if label:
        out.setdefault(label, set()).add(feature)
  return {k: sorted(v) for k, v in sorted(out.items())}


def _join(*parts):
  return "/".join([parts[0].rstrip("/")] + [p.strip("/") for p in parts[1:]])


def content_digest(transform_fn_dir):
  """DIGEST_FORMAT + hex SHA-256 of a transform_fn folder's content: every file under it, in
  order of its relative path (UTF-8 bytes), as length-prefixed path, 8-byte little-endian
  size and the file's own SHA-256. Equal for a folder and a byte-exact copy of it."""
  tf = quiet.import_tensorflow()
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
  fed = feeds(transform_fn_dir)
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
    whole[name] = entry["fingerprint"]
    if name in fed:  # not in the fingerprints: which features an analyzer feeds is evidence
      entry["features"] = fed[name]
    analyzers[name] = entry
  return {"fingerprint": f"{fingerprint.fingerprint_record(whole):016x}",
          "definition": f"{fingerprint.fingerprint_record(definition):016x}",
          "analyzers": analyzers}
