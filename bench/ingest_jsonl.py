"""Benchmark: pipelines.ingest of a JSON Lines serving log vs a direct pyarrow JSON read + the
same encoders without Beam.

  python bench/ingest_jsonl.py [--rows 1000000] [--preset_rows 200000]
                               [--mixed_only | --big_only | --capture_only]

The input is the bench/ingest.py taxi input (data/chicago_taxi/data.csv repeated, a unique
trip_id, shifted weeks) written as one JSON object per line, values typed as JSON (numbers,
strings, null). (1) is pipelines.ingest on DirectRunner writing TFRecord + Parquet with the
TFMD schema; (2) the baseline: pyarrow.json.open_json in 8 MiB blocks, Parquet writer, tfx_bsl's
RecordBatchToExamplesEncoder and TFRecordWriter, in one process. A SageMaker Data Capture copy
of the first --preset_rows records (JSON payloads of 10 instances) is ingested too, against the
plain log of the same records; and the same --preset_rows records as TF Serving request logs
(TFRecord of PredictionLogs, a predict request of 10 serialized tf.Examples each, --preset
tf_serving) against a plain tf.Example TFRecord of the same examples; and the same records with
their JSON types alternating (every other record's fare and every third's trip_seconds as
strings, as real logs mix them), which pyarrow's reader refuses, against the plain log; and
(3m) the Data Capture copy with its payload shapes alternating capture by capture ({"instances":
[...]} or a bare list, every third capture's fares as strings), against the plain log: target
(3m) <= 2.0x.
(1m) is (1) on the whole --rows log with its types mixed that way, against (2) on the typed log
(pyarrow's reader cannot read the mixed one): target (1m)/(2) <= 2.0. --mixed_only runs the
--preset_rows pair alone; --big_only runs (1), (2) and (1m). Each contender runs in its own
process; ratios are printed.
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ingest import SCHEMA, make_input, measure  # noqa: E402  (bench/ingest.py)

DIRECT = r'''
import sys, pyarrow as pa, pyarrow.json as pajson, pyarrow.parquet as pq
from tfx_bsl.coders import example_coder
src, out = sys.argv[1], sys.argv[2]
reader = pajson.open_json(src, read_options=pajson.ReadOptions(block_size=8 << 20))
enc = example_coder.RecordBatchToExamplesEncoder()
pw = None
import tensorflow as tf  # noqa: the TFRecord writer
with tf.io.TFRecordWriter(out + ".tfrecord") as w:
  for batch in reader:
    if pw is None:
      pw = pq.ParquetWriter(out + ".parquet", batch.schema, compression="snappy")
    pw.write_batch(batch)
    cols = []
    for c in batch.columns:
      if pa.types.is_floating(c.type): c = c.cast(pa.float32())
      if pa.types.is_string(c.type): c = c.cast(pa.binary())
      cols.append(pa.ListArray.from_arrays(pa.array(range(len(c) + 1), pa.int32()), c,
                                           mask=c.is_null()))
    for ex in enc.encode(pa.RecordBatch.from_arrays(cols, names=batch.schema.names)):
      w.write(ex)
pw.close()
'''


# The first records of a JSON Lines file as tf.Examples (tfx_bsl's encoder), written plain and
# as TF Serving PredictionLogs of `per` examples (not timed).
TF_SERVING = r'''
import sys, pyarrow as pa, pyarrow.json as pajson, tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2
from tfx_bsl.coders import example_coder
src, plain, logs, per = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
table = pajson.read_json(src)
cols = []
for c in table.columns:
  c = c.combine_chunks()
  if pa.types.is_floating(c.type): c = c.cast(pa.float32())
  if pa.types.is_string(c.type): c = c.cast(pa.binary())
  cols.append(pa.ListArray.from_arrays(pa.array(range(len(c) + 1), pa.int32()), c,
                                       mask=c.is_null()))
examples = example_coder.RecordBatchToExamplesEncoder().encode(
    pa.RecordBatch.from_arrays(cols, names=table.schema.names))
with tf.io.TFRecordWriter(plain) as w, tf.io.TFRecordWriter(logs) as l:
  for ex in examples:
    w.write(ex)
  for lo in range(0, len(examples), per):
    log = prediction_log_pb2.PredictionLog()
    tensor = log.predict_log.request.inputs["examples"]
    tensor.dtype = 7  # DT_STRING
    tensor.string_val.extend(examples[lo:lo + per])
    l.write(log.SerializeToString())
'''


def _typed(text):
  """A CSV cell as the JSON value a serving log holds."""
  if text == "":
    return None
  for cast in (int, float):
    try:
      return cast(text)
    except ValueError:
      pass
  return text


def _capture(n, instances, alternate):
  """One SageMaker Data Capture line of `instances`; with `alternate`, capture n's payload
  shape alternates as endpoints' clients send them: {"instances": [...]} or a bare list, and
  every third capture's fares as JSON strings."""
  if alternate and n % 3 == 0:
    instances = [dict(r, fare=json.dumps(r["fare"])) if r.get("fare") is not None else r
                 for r in instances]
  body = instances if alternate and n % 2 else {"instances": instances}
  return json.dumps({"captureData": {"endpointInput": {
      "observedContentType": "application/json", "mode": "INPUT",
      "data": json.dumps(body), "encoding": "JSON"}},
      "eventMetadata": {"eventId": str(n), "inferenceTime": "2024-05-01T10:00:00Z"},
      "eventVersion": "0"}) + "\n"


def write_jsonl(csv_path, out, capture_out=None, capture_rows=0, per_request=10):
  """The CSV as JSON Lines (trip_id stays a string, as the schema-less column is BYTES); with
  capture_out, its first capture_rows records also as SageMaker Data Capture lines, and as
  Data Capture lines whose payload shapes alternate (capture_out + ".alternating")."""
  pending = []
  with open(csv_path, newline="") as f, open(out, "w") as w:
    cap = open(capture_out, "w") if capture_out else None
    alt = open(capture_out + ".alternating", "w") if capture_out else None
    reader = csv.reader(f)
    header = next(reader)
    for n, row in enumerate(reader):
      record = {h: (v if h == "trip_id" else _typed(v)) for h, v in zip(header, row)}
      w.write(json.dumps(record) + "\n")
      if cap and n < capture_rows:
        pending.append(record)
        if len(pending) == per_request or n == capture_rows - 1:
          cap.write(_capture(n, pending, False))
          alt.write(_capture(n // per_request, pending, True))
          pending = []
    if cap:
      cap.close()
      alt.close()


def write_mixed(src, dst):
  """src's records with every other fare and every third trip_seconds written as JSON strings
  (12.5 here, "12.5" there): the canonical value model reads them alike."""
  with open(src) as f, open(dst, "w") as w:
    for i, line in enumerate(f):
      rec = json.loads(line)
      for col, every in (("fare", 2), ("trip_seconds", 3)):
        if i % every == 0 and rec.get(col) is not None:
          rec[col] = json.dumps(rec[col])
      w.write(json.dumps(rec) + "\n")


def _big(ingest, big, d, rows):
  """(1), (2) and (1m) on the --rows log, printed; returns (1)'s and (2)'s seconds and RSS."""
  t_ingest, m_ingest = measure(ingest + ["--input", big, "--output_dir",
                                         os.path.join(d, "ingest")])
  t_direct, m_direct = measure([sys.executable, "-c", DIRECT, big, os.path.join(d, "direct")])
  mixed = os.path.join(d, "big_mixed.jsonl")
  write_mixed(big, mixed)
  t_mixed, m_mixed = measure(ingest + ["--input", mixed, "--output_dir",
                                       os.path.join(d, "ingest_mixed")])
  os.remove(mixed)
  print(f"rows: {rows} ({os.path.getsize(big) / 2**20:.0f} MiB of JSON Lines)")
  print(f"(1) pipelines.ingest jsonl, DirectRunner, tfrecord+parquet: {t_ingest:7.1f} s  "
        f"peak RSS {m_ingest:6.0f} MiB")
  print(f"(1m) the same, JSON types mixed:                             {t_mixed:7.1f} s  "
        f"peak RSS {m_mixed:6.0f} MiB")
  print(f"(2) direct pyarrow.json + tfx_bsl + TFRecordWriter:          {t_direct:7.1f} s  "
        f"peak RSS {m_direct:6.0f} MiB")
  print(f"ratio (1)/(2) = {t_ingest / t_direct:.2f}   (target <= 2.0)")
  print(f"ratio (1m)/(2) = {t_mixed / t_direct:.2f}   (target <= 2.0)")
  return t_ingest, m_ingest, t_direct, m_direct


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--rows", type=int, default=1_000_000)
  ap.add_argument("--preset_rows", type=int, default=200_000)
  ap.add_argument("--mixed_only", action="store_true",
                  help="only the mixed-type log against the plain one (--preset_rows records)")
  ap.add_argument("--big_only", action="store_true", help="only (1), (2) and (1m)")
  ap.add_argument("--capture_only", action="store_true",
                  help="only (5), (3) and (3m): the --preset_rows logs against the plain one")
  args = ap.parse_args()
  py = sys.executable
  with tempfile.TemporaryDirectory() as d:
    big_csv, big = os.path.join(d, "big.csv"), os.path.join(d, "big.jsonl")
    small, capture = os.path.join(d, "small.jsonl"), os.path.join(d, "capture.jsonl")
    make_input(big_csv, args.rows)
    write_jsonl(big_csv, big, capture, args.preset_rows)
    os.remove(big_csv)
    with open(big) as f, open(small, "w") as w:
      for _, line in zip(range(args.preset_rows), f):
        w.write(line)
    ingest = [py, "-m", "pipelines.ingest", "--schema", SCHEMA, "--num_shards", "0",
              "--overwrite"]
    if args.big_only:
      _big(ingest, big, d, args.rows)
      return
    mixed = os.path.join(d, "mixed.jsonl")
    write_mixed(small, mixed)
    t_mixed, _ = measure(ingest + ["--input", mixed, "--output_dir", os.path.join(d, "mixed")])
    t_plain, _ = measure(ingest + ["--input", small, "--output_dir", os.path.join(d, "plain")])
    mixed_line = (f"(5) pipelines.ingest, {args.preset_rows} records with JSON types alternating: "
                  f"{t_mixed:.1f} s vs {t_plain:.1f} s typed alike; ratio {t_mixed / t_plain:.2f}"
                  " (target <= 2.0)")
    if args.mixed_only:
      print(mixed_line)
      return
    t_cap, _ = measure(ingest + ["--input", capture, "--preset", "sagemaker", "--output_dir",
                                 os.path.join(d, "capture")])
    t_alt, _ = measure(ingest + ["--input", capture + ".alternating", "--input_format", "jsonl",
                                 "--preset", "sagemaker", "--output_dir",
                                 os.path.join(d, "capture_alternating")])
    capture_lines = (
        f"(3) pipelines.ingest, {args.preset_rows} records as SageMaker Data Capture: "
        f"{t_cap:.1f} s vs {t_plain:.1f} s as plain JSON Lines; ratio {t_cap / t_plain:.2f}\n"
        f"(3m) the same captures, payload shapes alternating: {t_alt:.1f} s vs {t_plain:.1f} s "
        f"as plain JSON Lines; ratio {t_alt / t_plain:.2f} (target <= 2.0)")
    if args.capture_only:
      print(mixed_line)
      print(capture_lines)
      return
    t_ingest, m_ingest, t_direct, m_direct = _big(ingest, big, d, args.rows)
    plain_tf, logs_tf = os.path.join(d, "plain.tfrecord"), os.path.join(d, "logs.tfrecord")
    subprocess.run([py, "-c", TF_SERVING, small, plain_tf, logs_tf, "10"], check=True,
                   stderr=subprocess.DEVNULL)
    t_examples, _ = measure(ingest + ["--input", plain_tf, "--output_dir",
                                      os.path.join(d, "examples")])
    t_logs, _ = measure(ingest + ["--input", logs_tf, "--preset", "tf_serving", "--output_dir",
                                  os.path.join(d, "logs")])
    print(capture_lines)
    print(f"(4) pipelines.ingest, {args.preset_rows} records as TF Serving PredictionLogs: "
          f"{t_logs:.1f} s vs {t_examples:.1f} s as a plain tf.Example TFRecord; ratio "
          f"{t_logs / t_examples:.2f}")
    print(mixed_line)


if __name__ == "__main__":
  main()
