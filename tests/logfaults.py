"""Faults injected into a copy of a feature log (tests and bench/replay.py): each edit rewrites
the bucket files and recomputes the run metadata's bucket digests, as a real run would have."""
import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from transforms.spec import feature_log
from transforms.spec import fingerprint

__all__ = ["edit_log", "float_noise", "window_shift", "feature_shift"]


def edit_log(src, dst, edit):
  """Copies features output `src` to `dst`, replacing each bucket's table by edit(table);
  returns the number of rows edit reports changed (edit returns (table, changed))."""
  shutil.copytree(src, dst)
  meta_path = os.path.join(dst, "run_metadata.json")
  with open(meta_path) as f:
    meta = json.load(f)
  changed = 0
  for b in meta["log"]["buckets"]:
    path = os.path.join(dst, b["path"])
    table, n = edit(pq.read_table(path))
    changed += n
    pq.write_table(table, path)
    b["digests"] = {s: fingerprint.digest_hex(d)
                    for s, d in feature_log.stage_digests(table).items()}
  with open(meta_path, "w") as f:
    json.dump(meta, f, indent=2, sort_keys=True)
  return changed


def _set(table, name, values):
  return table.set_column(table.schema.get_field_index(name), name, values)


def _where(table, name, hit, change):
  """Column `name` with change(values) applied where `hit`; nulls stay null."""
  col = table.column(name).combine_chunks()
  values = col.fill_null(0).to_numpy(zero_copy_only=False).copy()
  values[hit] = change(values[hit])
  return _set(table, name, pa.array(values, col.type,
                                    mask=col.is_null().to_numpy(zero_copy_only=False)))


def float_noise(rel):
  """An edit scaling every float transformed value by (1 + rel), fingerprints recomputed."""

  def edit(table):
    names = sorted(n[len("value__"):] for n in table.schema.names if n.startswith("value__"))
    for n in names:
      col = table.column("value__" + n).combine_chunks()
      if pa.types.is_floating(col.type):
        table = _set(table, "value__" + n, pa.array(
            col.fill_null(0).to_numpy(zero_copy_only=False) * (1 + rel), col.type,
            mask=col.is_null().to_numpy(zero_copy_only=False)))
    values = pa.table({n: table.column("value__" + n) for n in names})
    dropped = table.column("fp_transform").is_null().to_numpy(zero_copy_only=False)
    for n in names:  # records a stage dropped keep their null fingerprints
      table = _set(table, "fp__" + n, pa.array(fingerprint.fingerprint_batch(values, [n]),
                                               mask=dropped))
    after = fingerprint.fingerprint_batch(values)
    before = table.column("fp_transform").fill_null(0).to_numpy(zero_copy_only=False)
    changed = int(np.count_nonzero((before != after) & ~dropped))
    table = _set(table, "fp_serve", pa.array(after, mask=dropped))  # no served values
    return _set(table, "fp_transform", pa.array(after, mask=dropped)), changed

  return edit


def window_shift(modulus, seconds=1800):
  """An edit moving the window of the kept records whose XXH64(key) % modulus == 0 by
  `seconds`, with a changed window fingerprint: what a window fault leaves in a log."""

  def edit(table):
    keys = pa.table({"key": table.column("key")})
    hit = (fingerprint.fingerprint_batch(keys) % np.uint64(modulus) == 0) & \
        table.column("dropped_stage").is_null().to_numpy(zero_copy_only=False)
    table = _where(table, "window_start", hit, lambda v: v + seconds)
    table = _where(table, "window_end", hit, lambda v: v + seconds)
    table = _where(table, "fp_window", hit, lambda v: v ^ np.uint64(1))
    return table, int(hit.sum())

  return edit


def feature_shift(modulus, feature, delta):
  """An edit adding `delta` to float feature `feature` of the kept records whose XXH64(key) %
  modulus == 0, with its fingerprints (fp__F, fp_transform, fp_serve) recomputed: what a skewed
  feature leaves in a log (no served values)."""

  def edit(table):
    keys = pa.table({"key": table.column("key")})
    dropped = table.column("fp_transform").is_null().to_numpy(zero_copy_only=False)
    hit = (fingerprint.fingerprint_batch(keys) % np.uint64(modulus) == 0) & ~dropped
    col = table.column("value__" + feature).combine_chunks()
    table = _where(table, "value__" + feature, hit,
                   lambda v: (v + delta).astype(col.to_numpy(zero_copy_only=False).dtype))
    names = sorted(n[len("value__"):] for n in table.schema.names if n.startswith("value__"))
    values = pa.table({n: table.column("value__" + n) for n in names})
    table = _set(table, "fp__" + feature, pa.array(
        fingerprint.fingerprint_batch(values, [feature]), mask=dropped))
    after = pa.array(fingerprint.fingerprint_batch(values), mask=dropped)
    return _set(_set(table, "fp_transform", after), "fp_serve", after), int(hit.sum())

  return edit
