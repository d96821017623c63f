"""Evidence in values: the input columns of sampled records, on both sides, from their datasets.

A record that first differs at `raw` or `parse` differs in its input, and the feature log holds
fingerprints of that input, not the input. Each side's run metadata names its input folder
(`input.dir`); where that is an ingest dataset (a manifest beside its Parquet shards), the
sampled records are read from it by key (a filter on the key column, so only the samples'
rows become Python values) and every sample gains
  input          {column: [offline value, production value]} of the record's columns
  input_differs  the columns whose values differ, in schema order
A production logger has no ingest dataset: run with log_inputs, its log holds each record
column's canonical text (input__C, spec/values.py: what the raw stage fingerprints), read from
the log's parts of the differing buckets; the other side's values are then turned into the
same canonical text, so the two compare by the raw stage's own rule (CSV `1.50` and JSON `1.5`
agree). A side with neither (a logger run without log_inputs) or whose dataset cannot be read
shows null, and every sample then gains
  input_unknown  {side: "not logged" | "unreadable"}
with no column in input_differs: an input that is not known is never a difference. Dates and
times are shown as ISO-8601 text; values are never rounded here.

When records first differ at raw or parse, `input_differences` counts, per input column, the
records of the differing buckets whose values differ between the two datasets (joined by key,
each side's dataset read once, vectorised): which column a raw-stage divergence is about. The
same join decides the `source.format` cause (csv vs jsonl, say): the canonical value model reads
every format alike, so a format explains only records whose input differs where two formats'
value models can (empty text against null, floats equal once rounded to float32); the cause
counts those records, and is dropped when there are none. A
dataset that cannot be read leaves its side without evidence and says why in
`evidence_errors`; the verdict, which rests on the logs, stands.
"""
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from pipelines import dataset
from replay.diff import kernels
from replay.diff.compare import SIDES
from transforms.spec import dataset as dataset_spec
from transforms.spec import feature_log, pii, values
from transforms.spec.errors import first_line
from transforms.spec.stages import KEY

__all__ = ["INPUT_STAGES", "attach", "column_differences"]

INPUT_STAGES = ("raw", "parse")  # a record first differing here differs in its input
_PARQUET = "parquet"


def _read(path, columns):
  """(KEY (large_string) and `columns` of an ingest Parquet shard, or None; a one-line problem
  or None)."""
  try:
    with FileSystems.open(path, compression_type="uncompressed") as f:
      table = pq.read_table(f, columns=[KEY] + columns, **feature_log.read_options())
  except (OSError, pa.ArrowException) as e:
    return None, f"{path} is not a readable Parquet file ({first_line(e)})"
  return table.set_column(0, KEY, table.column(KEY).cast(pa.large_string())), None


def _logged(paths, hashed):
  """(a log's input__C text of the rows in `paths` (a logger run with log_inputs), renamed to
  the record columns, its record columns, a problem or None); (None, [], None) without them.
  Columns in `hashed` (PII: logged as HMAC hex) are not read."""
  tables, columns = [], []
  for path in paths:
    try:  # each part opened once: its schema names the input columns, then they are read
      with FileSystems.open(path, compression_type="uncompressed") as f:
        part = pq.ParquetFile(f, **feature_log.read_options())
        columns = [c for c in feature_log.inputs_of(part.schema_arrow.names) if c not in hashed]
        if not columns:
          return None, [], None
        table = part.read(columns=[feature_log.KEY] + [feature_log.input_column(c)
                                                       for c in columns])
    except (OSError, pa.ArrowException) as e:
      return None, columns, f"{path} is not a readable Parquet file ({first_line(e)})"
    keys = table.column(feature_log.KEY).cast(pa.large_string())
    tables.append(table.set_column(0, KEY, keys).rename_columns([KEY] + columns))
  return (pa.concat_tables(tables) if tables else None), columns, None


# Every Parquet shard is read (key and record columns), not only the samples' shards: the
# per-column counts need every record of the differing buckets, which lie in every shard.
# Measured (bench/evidence.py, 1M rows, 8 shards): 0.22 s for the whole read with every bucket
# differing, 0.13 s for a bare read, 0.01 s for one shard. Reading only the samples' shards
# would save at most 0.2 s of an 8 s diff, which does not pay for a second read path.
def _dataset(source, buckets, num_buckets, log_paths=()):
  """(the records of an ingest dataset whose key falls in `buckets`, its record columns, a
  one-line problem or None), each Parquet shard read once (key and record columns only); for a
  folder that is not an ingest dataset, the input text its log's parts `log_paths` hold
  (_logged); source: (the run metadata's input.dir, the log's PII columns)."""
  input_dir, hashed = source
  try:
    manifest = dataset.load_manifest(input_dir) if input_dir else None
  except (OSError, ValueError):
    manifest = None
  if not manifest:
    return _logged(log_paths, hashed)
  columns = [name for name, _ in dataset_spec.record_columns(manifest)]
  wanted = pa.array(sorted(buckets), pa.int64())
  tables = []
  for shard in manifest.get("shards", []):
    if shard.get("format") != _PARQUET:
      continue
    table, problem = _read(FileSystems.join(input_dir, shard["path"]), columns)
    if problem:
      return None, columns, problem
    keys = table.column(KEY).combine_chunks()
    tables.append(table.filter(pc.is_in(pa.array(feature_log.bucket_of(keys, num_buckets)),
                                        value_set=wanted)))
  return (pa.concat_tables(tables) if tables else None), columns, None


def _differ(a, b):
  """bool[n]: where two aligned columns hold other values (null vs value differs; columns of
  other types are compared as text)."""
  if a.type != b.type:
    a, b = a.cast(pa.large_string()), b.cast(pa.large_string())
  both_null = pc.and_(a.is_null(), b.is_null())
  return pc.invert(pc.or_(both_null, pc.fill_null(pc.equal(a, b), False)))


def column_differences(off, off_cols, prod, prod_cols):
  """{"records": records on both sides, "columns": {column: records whose value differs}} of
  two sides' records (joined by key)."""
  off = off.rename_columns([KEY] + [f"o.{c}" for c in off_cols])
  prod = prod.rename_columns([KEY] + [f"p.{c}" for c in prod_cols])
  joined = off.join(prod, KEY, join_type="inner").combine_chunks()
  counts = {}
  for c in off_cols + [c for c in prod_cols if c not in off_cols]:
    if c not in off_cols or c not in prod_cols:
      counts[c] = joined.num_rows
      continue
    n = int(pc.sum(_differ(joined.column(f"o.{c}"), joined.column(f"p.{c}"))).as_py() or 0)
    if n:
      counts[c] = n
  return {"records": joined.num_rows,
          "columns": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))}


def _is_text(t):
  return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or
          pa.types.is_large_binary(t))


def format_explained(off, off_cols, prod, prod_cols):
  """How many records (joined by key) differ in their input only where two source formats'
  value models can make the same value differ: empty text on one side and null on the other (a
  CSV reads an empty cell as null, JSON keeps ""), or floats equal once rounded to float32 (a
  float32 column against decimal text). A record with any other input difference is not
  counted: a format does not explain it."""
  off = off.rename_columns([KEY] + [f"o.{c}" for c in off_cols])
  prod = prod.rename_columns([KEY] + [f"p.{c}" for c in prod_cols])
  joined = off.join(prod, KEY, join_type="inner").combine_chunks()
  n = joined.num_rows
  explained, other = pa.array([False] * n), pa.array([False] * n)
  for c in [c for c in off_cols if c in prod_cols]:
    a, b = joined.column(f"o.{c}"), joined.column(f"p.{c}")
    differs = _differ(a, b)
    by_format = pa.array([False] * n)
    if _is_text(a.type) and _is_text(b.type):
      a_empty, b_empty = (pc.fill_null(pc.equal(pc.binary_length(x), 0), False) for x in (a, b))
      by_format = pc.or_(pc.and_(pc.is_null(a), b_empty), pc.and_(pc.is_null(b), a_empty))
    elif pa.types.is_floating(a.type) and pa.types.is_floating(b.type):
      by_format = pc.fill_null(pc.equal(pc.cast(a, pa.float32(), safe=False),
                                        pc.cast(b, pa.float32(), safe=False)), False)
    explained = pc.or_(explained, pc.and_(differs, by_format))
    other = pc.or_(other, pc.and_(differs, pc.invert(by_format)))
  return int(pc.sum(pc.and_(explained, pc.invert(other))).as_py() or 0)


def _format_cause(report, explained):
  """The source.format cause counts only the records a format can explain (format_explained);
  with none, it is not a cause."""
  causes = []
  for c in report.get("suspected_causes", []):
    if c["field"] == "source.format":
      if not explained:
        continue
      c = dict(c, records=explained)
    causes.append(c)
  report["suspected_causes"] = causes
  decisions = report.get("decisions")
  if decisions and not explained:  # the decisions' causes are the report's causes
    decisions["by_cause"] = [c for c in decisions["by_cause"] if c["field"] != "source.format"]


def _rows(table, keys):
  """{key: {column: value}} of the records of `table` with those keys."""
  if table is None or not keys:
    return {}
  picked = table.filter(pc.is_in(table.column(KEY), value_set=pa.array(sorted(keys),
                                                                          pa.large_string())))
  found = {}
  for row in picked.to_pylist():
    found[row.pop(KEY)] = row
  return found


def _text(v):
  return v.isoformat() if hasattr(v, "isoformat") else kernels.jsonable(v)


def _without(table, columns, hidden):
  """(table, columns) without the `hidden` columns."""
  kept = [c for c in columns if c not in hidden]
  return (table.select([KEY] + kept) if table is not None else None), kept


def _as_text(table):
  """The record columns of `table` as canonical text (spec/values.py), key kept."""
  return pa.table([table.column(0)] + [values.canonical_text(c) for c in table.columns[1:]],
                  names=table.schema.names)


def attach(report, input_dirs, tasks=(), num_buckets=1):
  """report with, when records first differ at raw or parse, the per-column counts over the
  differing buckets and the input columns of its raw/parse samples (divergent and latent) on
  each side, each side's dataset read once; input_dirs: {side: (the run metadata's input.dir,
  its PII columns)}; tasks: [(bucket, {side: the bucket's log files})] of the differing
  buckets.
  A side whose dataset cannot be read shows none, and `evidence_errors` says why (the diff's
  verdict, which rests on the logs, stands)."""
  firsts = report.get("first_divergent_stage", {})
  if not tasks or not any(firsts.get(s) for s in INPUT_STAGES):
    _format_cause(report, 0)  # no input differs: a format explains nothing
    return report
  # A PII column (HMAC hex in a log) is left out on both sides: an HMAC is not a value.
  hidden = {c for s in SIDES for c in input_dirs.get(s, (None, ()))[1]}
  if pii.KEY in hidden:  # datasets hold clear keys: joining them to hashed ones would not do
    report["evidence_errors"] = ["input evidence not shown: the key is PII (hashed in the log)"]
    return report
  buckets = [b for b, _ in tasks]
  sides = {s: _dataset(input_dirs.get(s, (None, ())), buckets, num_buckets,
                       [p for _, parts in tasks for p in parts.get(s, ())]) for s in SIDES}
  errors = [problem for _, _, problem in sides.values() if problem]
  if errors:
    report["evidence_errors"] = errors
  (off, off_cols), (prod, prod_cols) = (_without(*sides[s][:2], hidden) for s in SIDES)
  # Compared as the raw stage compares them: each cell's canonical text (CSV `1.50` = JSON
  # `1.5`); shown as each side holds them.
  off_text, prod_text = (None if t is None else _as_text(t) for t in (off, prod))
  if off is not None and prod is not None:
    report["input_differences"] = column_differences(off_text, off_cols, prod_text, prod_cols)
    _format_cause(report, format_explained(off, off_cols, prod, prod_cols))
  kinds = ("divergent", "latent")
  keys = {s["key"] for k in kinds for s in report["samples"].get(k, [])
          if s["first_divergent_stage"] in INPUT_STAGES}
  columns = off_cols + [c for c in prod_cols if c not in off_cols]
  if not keys or not columns:
    return report
  a_rows, b_rows = _rows(off, keys), _rows(prod, keys)
  a_text, b_text = _rows(off_text, keys), _rows(prod_text, keys)
  unknown = {s: "unreadable" if sides[s][2] else "not logged" for s, table in
             zip(SIDES, (off, prod)) if table is None}
  for kind in kinds:
    for sample in report["samples"].get(kind, []):
      if sample["first_divergent_stage"] not in INPUT_STAGES:
        continue
      key = sample["key"]
      a, b = a_rows.get(key, {}), b_rows.get(key, {})
      sample["input"] = {c: [_text(a.get(c)), _text(b.get(c))] for c in columns}
      if unknown:  # one side's input is not known: nothing to compare it with
        sample["input_unknown"] = dict(unknown)
        sample["input_differs"] = []
        continue
      at, bt = a_text.get(key, {}), b_text.get(key, {})
      sample["input_differs"] = [c for c in columns if (c in at) != (c in bt) or
                                 at.get(c) != bt.get(c)]
  return report
