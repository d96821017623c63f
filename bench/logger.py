"""Benchmark: replay.logger.ProductionLogger vs the bare transform, on the same records.

  python bench/logger.py [--records 200000] [--batch_size 1024] [--text] [--features_dir D]

The records are the taxi sample repeated (each copy's event times shifted by one week), with
their windowed counts as tests/online_store.py computes them; by default as typed values (each
CSV row rendered as a JSON line and parsed back: numbers, strings, null), with --text as a CSV
reader gives them. The offline side is --features_dir, or pipelines.features run once on the
taxi sample into a temp folder (not timed). In one process, one after the other:
  (0) the bare transform, the baseline: tft.TFTransformOutput(transform_fn).
      transform_features_layer() called on the records' input tensors -- built beforehand, not
      timed: the typed columns and counts, fed as the logger and the job feed TFT
      (transforms/graph/feed.py) -- in calls of as many records as the logger's transform
      calls take (the smaller of --batch_size and --transform_batch_size: the same batches),
      every output read back as numpy; records/s;
  (0t) the same transform_fn finalized as tft_beam applies it (transforms.graph.feed.
      transform_function: SavedModelLoader.finalize) on the same tensors: what the logger calls;
  (0f) (0t) through the feed the logger calls (transforms.graph.feed.transform_values: Arrow
      columns to tensors by TFXIO's TensorAdapter, the call, outputs back to Arrow arrays) on
      --batch_size records at a time: what the transform costs inside the logger;
  (1) the logger: log() once per record from this thread, then close() (which writes the last
      batch and merges the parts); records/s over the whole, each log() call's latency
      (p50, p99, max) and close()'s time. The transform runs on the logger's worker thread;
  (1i) the same with log_inputs=True (each record column's canonical text logged too), against
      (1): what logging the input for the diff's evidence costs;
  (1t) log_table(), the columnar entry: the same records as Arrow tables of --batch_size
      records (pyarrow's from_pylist of them, built beforehand, not timed) and their counts,
      then close(); records/s and each call's latency, against (0) and (1).
  (1r) the stage rules alone: LogRows.rows() (the logger's worker step, no files) on the same
      tables, accepted beforehand; best of 3 passes: the bound on (1t) before anything is
      written.
  (2) overload: --threads threads (8) each call log_table() with tables of --call_rows
      records (1,000), 25 calls each, as fast as they can, against a logger whose queue holds
      one batch: the worker cannot keep up. (2b) when_full="block", the baseline (the caller
      waits for the worker); (2d) when_full="drop" (a batch the full queue refuses is lost and
      counted). Each call's latency (p50, p99, max) and the records lost.
Both warm up first (a throwaway logger logs one batch; the layer is called once). Prints the
ratios against the targets: (1)/(0) records/s >= 0.75, p99 log() < 100 us; (1)/(0f); and p99
of a (2d) call <= 1 ms. --overload_only runs (2) alone.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
TAXI_CSV = os.path.join(ROOT, "data", "chicago_taxi", "data.csv")
TAXI_SCHEMA = os.path.join(ROOT, "data", "chicago_taxi", "schema.pbtxt")
WEEK = 7 * 24 * 3600


def _offline(features_dir, work):
  if features_dir:
    return features_dir
  from pipelines import features, ingest
  assert ingest.run(["--input", TAXI_CSV, "--output_dir", os.path.join(work, "ingest"),
                     "--schema", TAXI_SCHEMA, "--num_shards", "4"]) == 0
  out = os.path.join(work, "features")
  assert features.run(["--input_dir", os.path.join(work, "ingest"), "--output_dir", out,
                       "--profile", os.path.join(ROOT, "profiles", "offline.yaml"),
                       "--transform_module", "transforms.taxi"]) == 0
  return out


def _json_value(text, typ):
  """A CSV cell as a JSON value: null when empty, a number for INT / FLOAT columns."""
  if text == "":
    return None
  return {"INT": int, "FLOAT": float}.get(typ, str)(text)


def _records(offline, n, text):
  """n records (taxi sample copies, event time shifted a week a copy) and their counts."""
  from tests import online_store
  with open(os.path.join(offline, "run_metadata.json"), encoding="utf-8") as f:
    meta = json.load(f)
  types = {c["name"]: c["type"] for c in meta["schema"]["columns"]}
  base, counts = online_store.records_and_counts(TAXI_CSV, offline)
  event = "trip_start_timestamp"
  records, aggs = [], []
  for i in range(n):
    copy, row = divmod(i, len(base))
    record = dict(base[row])
    if record[event]:
      record[event] = str(int(record[event]) + copy * WEEK)
    if not text:  # a JSON line, parsed
      record = json.loads(json.dumps({k: _json_value(v, types[k]) for k, v in record.items()}))
    records.append(record)
    aggs.append(counts[row])
  return records, aggs


def _bare_transform(offline, records, aggs, batch_size, transform_batch_size):
  """(records/s of the transform_fn's layer alone on prebuilt input tensors, of the finalized
  transform on them, of transform_values -- the feed and the finalized transform -- on
  batch_size records at a time)."""
  import pyarrow as pa
  import tensorflow as tf
  import tensorflow_transform as tft
  from transforms.graph.feed import to_tft_batch, transform_function, transform_values
  from transforms.spec import typing as cells
  with open(os.path.join(offline, "run_metadata.json"), encoding="utf-8") as f:
    meta = json.load(f)
  columns = [(c["name"], c["type"]) for c in meta["schema"]["columns"]]
  aggregates = [a["name"] for a in meta["schema"]["aggregates"]]
  names = [n for n, _ in columns] + aggregates
  n = len(records)
  arrays = [cells.type_cells(cells.arrow_cells([r.get(c) for r in records], True), n, t)[0]
            for c, t in columns]
  arrays += [pa.array([a[name] for a in aggs], pa.int64()) for name in aggregates]
  batch = to_tft_batch(pa.record_batch(arrays, names=names), names)
  calls, call_size = [], min(batch_size, transform_batch_size)  # the logger's TFT calls
  for lo in range(0, n, call_size):
    chunk, inputs = batch.slice(lo, call_size), {}
    for name in names:
      arr = chunk.column(name)
      rows = np.flatnonzero(arr.is_valid().to_numpy(zero_copy_only=False))
      flat = arr.flatten()
      if pa.types.is_integer(flat.type) or pa.types.is_floating(flat.type):
        dtype = tf.int64 if pa.types.is_integer(flat.type) else tf.float64
        values = flat.to_numpy(zero_copy_only=False).astype(dtype.as_numpy_dtype)
      else:
        dtype, values = tf.string, np.array(flat.to_pylist(), dtype=object)
      inputs[name] = tf.SparseTensor(np.stack([rows, np.zeros_like(rows)], axis=1),
                                     tf.constant(values, dtype=dtype), [len(arr), 1])
    calls.append(inputs)
  layer = tft.TFTransformOutput(os.path.join(offline, "transform_fn")).transform_features_layer()

  def run(call, inputs):
    out = call(inputs)
    for t in out.values():
      (t.values if isinstance(t, tf.SparseTensor) else t).numpy()

  def rate(call):
    run(call, calls[0])  # warm-up
    start = time.perf_counter()
    for inputs in calls:
      run(call, inputs)
    return n / (time.perf_counter() - start)

  bare = rate(layer.call)
  transform, spec = transform_function(os.path.join(offline, "transform_fn"), names)
  features = sorted(spec)
  finalized = rate(transform)
  # (0f): the finalized transform through the feed the logger calls, on the logger's batches.
  source = pa.record_batch(arrays, names=names)
  transform_values(transform, source.slice(0, batch_size), names, features,
                   transform_batch_size)
  start = time.perf_counter()
  for lo in range(0, n, batch_size):
    transform_values(transform, source.slice(lo, batch_size), names, features,
                     transform_batch_size)
  return bare, finalized, n / (time.perf_counter() - start)


def _logger(offline, log_dir, records, aggs, options):
  """(records/s, per-call latencies in ns, close() seconds, stats)."""
  from replay.logger import ProductionLogger
  logger = ProductionLogger.from_features_dir(offline, log_dir, **options)
  latencies = np.empty(len(records), dtype=np.int64)
  clock = time.perf_counter_ns
  start = time.perf_counter()
  for i, (record, agg) in enumerate(zip(records, aggs)):
    t = clock()
    logger.log(record, agg)
    latencies[i] = clock() - t
  closing = time.perf_counter()
  logger.close()
  end = time.perf_counter()
  return len(records) / (end - start), latencies, end - closing, logger.stats()


def _tables(records, aggs, size):
  """The records as (Arrow table, {aggregate: Arrow array}) of `size` records each."""
  import pyarrow as pa
  return [(pa.Table.from_pylist(records[lo:lo + size]),
           {name: pa.array([a[name] for a in aggs[lo:lo + size]]) for name in aggs[0]})
          for lo in range(0, len(records), size)]


def _logger_table(offline, log_dir, records, aggs, options):
  """(records/s, per-call latencies in ns, close() seconds) of log_table() given the same
  records as Arrow tables of batch_size records (built beforehand, not timed)."""
  from replay.logger import ProductionLogger
  tables = _tables(records, aggs, options["batch_size"])
  logger = ProductionLogger.from_features_dir(offline, log_dir, **options)
  latencies = np.empty(len(tables), dtype=np.int64)
  clock = time.perf_counter_ns
  start = time.perf_counter()
  for i, (table, columns) in enumerate(tables):
    t = clock()
    logger.log_table(table, columns)
    latencies[i] = clock() - t
  closing = time.perf_counter()
  logger.close()
  end = time.perf_counter()
  return len(records) / (end - start), latencies, end - closing


def _rules_alone(offline, log_dir, records, aggs, options):
  """records/s of the stage rules alone (LogRows.rows on accepted tables of batch_size
  records, no part files), best of 3 passes."""
  from replay.logger import ProductionLogger
  logger = ProductionLogger.from_features_dir(offline, log_dir, **options)
  rules = logger._rules  # noqa: SLF001 -- the worker's step, timed on its own
  items = [rules.accept_table(table, columns, None, None)
           for table, columns in _tables(records, aggs, options["batch_size"])]
  rules.rows(items[0])
  fastest = float("inf")
  for _ in range(3):
    start = time.perf_counter()
    for item in items:
      rules.rows(item)
    fastest = min(fastest, time.perf_counter() - start)
  logger.close()
  return len(records) / fastest


def _overload(offline, log_dir, records, aggs, threads, call_rows, when_full):
  """(per-call latencies in ns of `threads` threads each calling log_table() 25 times with
  tables of call_rows records, stats()) of a logger whose queue holds one batch."""
  import threading
  from replay.logger import ProductionLogger
  tables = _tables(records[:25 * call_rows], aggs[:25 * call_rows], call_rows)
  logger = ProductionLogger.from_features_dir(offline, log_dir, batch_size=call_rows,
                                              max_pending_batches=1, when_full=when_full)
  latencies, clock, start = [[] for _ in range(threads)], time.perf_counter_ns, \
      threading.Barrier(threads)
  def caller(mine):
    start.wait()
    for table, columns in tables:
      t = clock()
      logger.log_table(table, columns)
      mine.append(clock() - t)
  workers = [threading.Thread(target=caller, args=(lat,)) for lat in latencies]
  for w in workers:
    w.start()
  for w in workers:
    w.join()
  logger.close()
  return np.array([x for lat in latencies for x in lat], dtype=np.int64), logger.stats()


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--records", type=int, default=200_000)
  ap.add_argument("--batch_size", type=int, default=1024)
  ap.add_argument("--transform_batch_size", type=int, default=2048)
  ap.add_argument("--text", action="store_true", help="records as CSV text, not typed values")
  ap.add_argument("--features_dir", default="", help="an offline pipelines.features output "
                  "of the taxi sample (default: run it once into a temp folder)")
  ap.add_argument("--threads", type=int, default=8)
  ap.add_argument("--call_rows", type=int, default=1000)
  ap.add_argument("--overload_only", action="store_true", help="run the overload case (2) alone")
  args = ap.parse_args(argv)
  if args.overload_only:
    return _main_overload(args)
  work = tempfile.mkdtemp(prefix="bench_logger_")
  try:
    offline = _offline(args.features_dir, work)
    records, aggs = _records(offline, args.records, args.text)
    options = {"batch_size": args.batch_size,
               "transform_batch_size": args.transform_batch_size}
    _logger(offline, os.path.join(work, "warm"), records[:args.batch_size],
            aggs[:args.batch_size], options)
    bare, finalized, fed = _bare_transform(offline, records, aggs, args.batch_size,
                                args.transform_batch_size)
    rate, latencies, closing, stats = _logger(offline, os.path.join(work, "log"), records,
                                              aggs, options)
    parts = len(os.listdir(os.path.join(work, "log", "feature_log")))
    with_inputs, _, _, _ = _logger(offline, os.path.join(work, "log_inputs"), records, aggs,
                                   dict(options, log_inputs=True))
    columnar, table_latencies, table_close = _logger_table(
        offline, os.path.join(work, "log_table"), records, aggs, options)
    alone = _rules_alone(offline, os.path.join(work, "rules"), records, aggs, options)
  finally:
    shutil.rmtree(work, ignore_errors=True)
  p50, p99 = np.percentile(latencies, [50, 99]) / 1000
  print(f"records: {args.records:,} ({'CSV text' if args.text else 'typed values'}), "
        f"batch_size {args.batch_size}, transform_batch_size {args.transform_batch_size}, "
        f"load average {os.getloadavg()[0]:.2f}")
  print(f"(0) bare transform:     {bare:10,.0f} records/s")
  print(f"(0t) finalized:         {finalized:10,.0f} records/s (transform_function, as tft_beam "
        "applies a transform_fn)")
  print(f"(0f) transform + feed:  {fed:10,.0f} records/s (transform_values, batches of "
        f"{args.batch_size})")
  print(f"(1) ProductionLogger:   {rate:10,.0f} records/s (close() {closing:.2f} s, "
        f"{stats['flushes']} batches, {parts} part files after close)")
  print(f"    log() latency:      p50 {p50:.1f} us, p99 {p99:.1f} us, "
        f"max {latencies.max() / 1000:.0f} us")
  print(f"(1)/(0) records/s:      {rate / bare:.2f}  (target >= 0.75: "
        f"{'met' if rate / bare >= 0.75 else 'not met'})")
  print(f"(1i) with log_inputs:   {with_inputs:10,.0f} records/s, (1i)/(1) "
        f"{with_inputs / rate:.2f}")
  t50, t99 = np.percentile(table_latencies, [50, 99]) / 1000
  print(f"(1t) log_table():       {columnar:10,.0f} records/s (close() {table_close:.2f} s), "
        f"a call of {args.batch_size} records p50 {t50:.0f} us, p99 {t99:.0f} us")
  print(f"(1t)/(0) records/s:     {columnar / bare:.2f}  (target >= 0.75: "
        f"{'met' if columnar / bare >= 0.75 else 'not met'}); (1t)/(1) {columnar / rate:.2f}")
  print(f"(1r) stage rules alone: {alone:10,.0f} records/s (LogRows.rows, no files); "
        f"(1r)/(0) {alone / bare:.2f}")
  print(f"(0t)/(0) records/s:     {finalized / bare:.2f}")
  print(f"(1)/(0f) records/s:     {rate / fed:.2f}")
  print(f"p99 log() / 100 us:     {p99 / 100:.2f}  (target < 1: "
        f"{'met' if p99 < 100 else 'not met'})")
  return 0


def _main_overload(args):
  work = tempfile.mkdtemp(prefix="bench_logger_")
  try:
    offline = _offline(args.features_dir, work)
    records, aggs = _records(offline, 25 * args.call_rows, args.text)
    _logger(offline, os.path.join(work, "warm"), records[:args.batch_size],
            aggs[:args.batch_size], {"batch_size": args.batch_size})
    runs = {when: _overload(offline, os.path.join(work, "overload_" + when), records, aggs,
                            args.threads, args.call_rows, when) for when in ("block", "drop")}
  finally:
    shutil.rmtree(work, ignore_errors=True)
  print(f"overload: {args.threads} threads x 25 log_table() calls of {args.call_rows:,} "
        f"records, one batch may wait; load average {os.getloadavg()[0]:.2f}")
  p99 = {}
  for label, when in (("(2b)", "block"), ("(2d)", "drop")):
    lat, stats = runs[when]
    p50, p99[when] = np.percentile(lat, [50, 99]) / 1e6
    print(f"{label} when_full={when}: a call p50 {p50:.3f} ms, p99 {p99[when]:.3f} ms, max "
          f"{lat.max() / 1e6:.1f} ms; logged {stats['logged']:,}, lost {stats['lost']:,}")
  print(f"(2d)/(2b) p99:          {p99['drop'] / p99['block']:.4f}")
  print(f"p99 (2d) call / 1 ms:   {p99['drop']:.2f}  (target <= 1: "
        f"{'met' if p99['drop'] <= 1 else 'not met'})")
  return 0


if __name__ == "__main__":
  sys.exit(main())
