"""A feature log's integrity (a pipelines.features output or a production logger's folder): every
row re-read and re-fingerprinted against what its run metadata records. Applied by
`skewtrace verify DIR` (replay/verify_log.py) and by `python -m replay.diff ... --verify_logs`
(both sides, before the diff).

The diff itself reads only the buckets whose digests differ and checks the others by their
footers (replay/diff/runs.listed_parts, docs/replay.md). This reads every page of every listed
part (Parquet page CRCs verified, feature_log.read_options) and checks, per bucket: its rows
and dropped rows against the metadata; every stage digest recomputed from the rows
(feature_log.stage_digests); and, for each kept record, fp_transform, fp__F and fp_serve
recomputed from the values the log holds, by the same rule the writers use
(fingerprint.fingerprint_fields, feature_log.model_inputs). A value byte that changed while its
page still decodes (a log written without checksums) shows as a fingerprint that no longer
matches. Returns the problems, one line each naming the file; none: the log is intact.
"""
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from replay.diff import runs
from transforms.spec import feature_log, fingerprint, run_files
from transforms.spec.errors import first_line
from transforms.spec.stages import SERVE, TRANSFORM

__all__ = ["verify", "bucket_problems", "page_problem", "where_of", "warm_up"]


def _read(paths):
  tables = []
  for path in paths:
    with FileSystems.open(path, compression_type="uncompressed") as f:
      tables.append(pq.read_table(f, **feature_log.read_options()))
  return pa.concat_tables(tables, promote_options="permissive") if tables else None


def _mismatch(kept, column, computed):
  """How many kept rows' `column` differs from the `computed` fingerprints."""
  stored = kept.column(column).combine_chunks().cast(pa.uint64())
  return int(pc.sum(pc.fill_null(pc.not_equal(stored, pa.array(computed, pa.uint64())),
                                 True)).as_py() or 0)


def where_of(paths, directory, bucket):
  """How a bucket is named in a problem: its file, or its part count and folder."""
  return paths[0] if len(paths) == 1 else \
      f"bucket {bucket} ({len(paths)} parts under {directory})"


def page_problem(path):
  """Why a part's pages cannot be read back whole (a page checksum that fails, a page that does
  not decode), or None: every page read with its CRC-32 verified (feature_log.read_options)."""
  try:
    _read([path])
  except (OSError, pa.ArrowException) as e:
    return f"{path}: not a readable Parquet file ({first_line(e)})"
  return None


def bucket_problems(where, entry, table, num_buckets):
  """The problems of one bucket's rows (`table`, read from `where`) against its run metadata
  entry: rows, drops, every stage digest and the key digest recomputed, each row's bucket, and
  each kept record's transform, feature and serve fingerprints recomputed from its values."""
  return _bucket_problems(where, entry, table, num_buckets)


def warm_up():
  """Loads the compiled kernels bucket_problems calls (numba's on-disk cache, about 0.5 s in a
  new process): a job calls it on a thread of its own before the first bucket arrives."""
  fingerprint.fingerprint_fields(pa.table({"x": pa.array([1.0])}))
  feature_log.log_hash(pa.array(["k"]))


def _bucket_problems(where, entry, table, num_buckets):
  problems = []
  if table.num_rows != entry["rows"]:
    problems.append(f"{where}: {table.num_rows} rows, run_metadata.json says {entry['rows']}")
  dropped = table.num_rows - table.column(feature_log.DROPPED_STAGE).null_count
  if dropped != entry["dropped"]:
    problems.append(f"{where}: {dropped} dropped rows, run_metadata.json says "
                    f"{entry['dropped']}")
  hashes = feature_log.log_hash(table.column(feature_log.KEY).combine_chunks())  # once: digest
  for stage, digest in feature_log.stage_digests(table, hashes).items():        # and buckets
    if stage == feature_log.KEY_DIGEST:
      if stage in entry["digests"] and fingerprint.digest_hex(digest) != entry["digests"][stage]:
        problems.append(f"{where}: the keys of its rows do not add up to the key digest "
                        "run_metadata.json records")
    elif fingerprint.digest_hex(digest) != entry["digests"][stage]:
      problems.append(f"{where}: the {stage} fingerprints of its rows do not add up to the "
                      "digest run_metadata.json records")
  if table.num_rows:  # each row's key belongs to the bucket it is in
    n = int((feature_log.buckets_of(hashes, num_buckets) != int(entry["bucket"])).sum())
    if n:
      problems.append(f"{where}: {n} rows whose key belongs to another of the "
                      f"{num_buckets} buckets")
  kept = table.filter(pc.is_null(table.column(feature_log.DROPPED_STAGE)))
  names = feature_log.features_of(kept.schema.names)
  if not names or not kept.num_rows:
    return problems
  values = pa.table({n: kept.column(feature_log.value_column(n)) for n in names})
  record_fp, feature_fps = fingerprint.fingerprint_fields(values)
  checks = [(feature_log.fp_column(TRANSFORM.name), record_fp)]
  checks += [(feature_log.feature_fp_column(n), feature_fps[n]) for n in names]
  served = {f: kept.column(feature_log.served_column(f)).combine_chunks()
            for f in feature_log.served_of(kept.schema.names)}
  serve_fp = fingerprint.fingerprint_fields(feature_log.model_inputs(values, served))[0] \
      if served else record_fp
  checks.append((feature_log.fp_column(SERVE.name), serve_fp))
  for column, computed in checks:
    if column in kept.schema.names and (n := _mismatch(kept, column, computed)):
      problems.append(f"{where}: {n} rows whose {column} is not the fingerprint of the "
                      "values the log holds")
  return problems


def verify(directory):
  """The problems of the feature log in `directory` (empty: intact). Raises UsageError when it
  is not a feature-log folder at all."""
  meta = runs.load(directory, "log")
  listed = runs.listed_parts(meta, directory, "log")
  problems = []
  for entry in sorted(meta["log"]["buckets"], key=lambda b: int(b["bucket"])):
    paths = listed[int(entry["bucket"])]
    where = where_of(paths, directory, entry["bucket"])
    try:
      table = _read(paths)
    except (OSError, pa.ArrowException) as e:
      problems.append(f"{where}: not a readable Parquet file ({first_line(e)})")
      continue
    if table is None:
      if entry["rows"]:
        problems.append(f"{where}: no file, run_metadata.json says {entry['rows']} rows")
      continue
    try:
      problems += _bucket_problems(where, entry, table, int(meta["log"]["num_buckets"]))
    except (KeyError, pa.ArrowException) as e:
      problems.append(f"{where}: not a feature-log file ({e})")
  # A features run's transform_fn/ and transformed/ against the sizes and sha256 it recorded
  # (a logger's log, or a run from before the list, records none).
  if run_files.FILES in meta:
    problems += run_files.problems(directory, meta[run_files.FILES])
  return problems
