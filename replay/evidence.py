"""Evidence in values: the input columns of sampled records, on both sides, from their datasets.

A record that first differs at `raw` or `parse` differs in its input, and the feature log holds
fingerprints of that input, not the input. Each side's run metadata names its input folder
(`input.dir`); where that is an ingest dataset (a manifest beside its Parquet shards), the
sampled records are read from it by key (a filter on the key column, so only the samples'
rows become Python values) and every sample gains
  input          {column: [offline value, production value]} of the record's columns
  input_differs  the columns whose values differ, in schema order
A side whose input is not an ingest dataset (a production logger fed by serving) shows null.
Dates and times are shown as ISO-8601 text; values are never rounded here.

When records first differ at raw or parse, `input_differences` counts, per input column, the
records of the differing buckets whose values differ between the two datasets (joined by key,
each side's dataset read once, vectorised): which column a raw-stage divergence is about. A
dataset that cannot be read leaves its side without evidence and says why in
`evidence_errors`; the verdict, which rests on the logs, stands.
"""
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from pipelines import dataset
from replay import kernels
from replay.compare import SIDES
from transforms.spec import dataset as dataset_spec
from transforms.spec import feature_log
from transforms.spec.errors import first_line
from transforms.spec.stages import KEY

__all__ = ["INPUT_STAGES", "attach", "column_differences"]

INPUT_STAGES = ("raw", "parse")  # a record first differing here differs in its input
_PARQUET = "parquet"


def _dataset(input_dir, buckets, num_buckets):
  """(the records of an ingest dataset whose key falls in `buckets`, its record columns, a
  one-line problem or None), each Parquet shard read once (key and record columns only);
  (None, [], None) when the folder is not an ingest dataset."""
  try:
    manifest = dataset.load_manifest(input_dir) if input_dir else None
  except (OSError, ValueError):
    manifest = None
  if not manifest:
    return None, [], None
  columns = [name for name, _ in dataset_spec.record_columns(manifest)]
  wanted = pa.array(sorted(buckets), pa.int64())
  tables = []
  for shard in manifest.get("shards", []):
    if shard.get("format") != _PARQUET:
      continue
    path = FileSystems.join(input_dir, shard["path"])
    try:
      with FileSystems.open(path, compression_type="uncompressed") as f:
        table = pq.read_table(f, columns=[KEY] + columns)
    except (OSError, pa.ArrowException) as e:
      return None, columns, f"{path} is not a readable Parquet file ({first_line(e)})"
    keys = table.column(KEY).cast(pa.large_string()).combine_chunks()
    table = table.set_column(0, KEY, keys)
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


def attach(report, input_dirs, buckets=(), num_buckets=1):
  """report with, when records first differ at raw or parse, the per-column counts over the
  differing `buckets` and the input columns of its raw/parse samples (divergent and latent) on
  each side, each side's dataset read once; input_dirs: {side: the run metadata's input.dir}.
  A side whose dataset cannot be read shows none, and `evidence_errors` says why (the diff's
  verdict, which rests on the logs, stands)."""
  firsts = report.get("first_divergent_stage", {})
  if not buckets or not any(firsts.get(s) for s in INPUT_STAGES):
    return report
  sides = {s: _dataset(input_dirs.get(s), buckets, num_buckets) for s in SIDES}
  errors = [problem for _, _, problem in sides.values() if problem]
  if errors:
    report["evidence_errors"] = errors
  (off, off_cols, _), (prod, prod_cols, _) = sides["offline"], sides["production"]
  if off is not None and prod is not None:
    report["input_differences"] = column_differences(off, off_cols, prod, prod_cols)
  kinds = ("divergent", "latent")
  keys = {s["key"] for k in kinds for s in report["samples"].get(k, [])
          if s["first_divergent_stage"] in INPUT_STAGES}
  columns = off_cols + [c for c in prod_cols if c not in off_cols]
  if not keys or not columns:
    return report
  a_rows, b_rows = _rows(off, keys), _rows(prod, keys)
  for kind in kinds:
    for sample in report["samples"].get(kind, []):
      if sample["first_divergent_stage"] not in INPUT_STAGES:
        continue
      a, b = a_rows.get(sample["key"], {}), b_rows.get(sample["key"], {})
      values = {c: [_text(a.get(c)), _text(b.get(c))] for c in columns}
      sample["input"] = values
      sample["input_differs"] = [c for c in columns if values[c][0] != values[c][1]]
  return report
