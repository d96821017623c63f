"""Replay diff: offline vs production feature logs -> each record's first divergent stage.

DirectRunner: python -m replay.diff --offline out/offline --production out/production
  --output_dir out/diff [--abs_tol X] [--rel_tol Y] [--tolerance feature=abs:rel ...]
  [--max_divergent_fraction F] [--fail_on divergent|latent] [--samples N]. Dataflow: add
  --runner DataflowRunner --project P --region R --temp_location gs://B/tmp --setup_file
  ./setup.py (logs and output on gs://).

Shaped like TFDV's skew detector: the run metadata are compared first (suspected causes); the
buckets whose per-stage digests differ are Created, each side's part files keyed by bucket and
joined (CoGroupByKey), each bucket's parts read as Arrow tables and compared vectorised
(replay/diff/compare.py), totalled by a CombineFn and turned into the report
(replay/diff/summary.py, in the shape of replay/report/report_model.py) with deterministic
samples. Buckets equal on every digest are never read, so the cost grows with the divergence,
not with the logs; memory is bounded by one bucket.
Writes OUT/report.json (manifests/report.schema.json) and OUT/report.html, prints a summary.
Exit code 0: divergent fraction <= --max_divergent_fraction; 1: above; 2: usage / input error.
The fraction counts divergent records (what the model receives differs) and one-side-only
ones; with --fail_on latent, latent records (a stage differs, the model inputs agree) too.
"""
import concurrent.futures
import dataclasses
import json
import uuid

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from pipelines import common, dataset
from replay.diff import analyzers as analyzer_diff
from replay.diff import causes, compare, evidence, integrity, predicting, runs, summary
from replay.diff.flags import DiffFlags, DiffOptions  # noqa: F401 -- DiffOptions re-exported
from replay.diff import tolerance as tolerances
from replay.report import render, report_model
from transforms.spec import feature_log
from transforms.spec.dataset import coverage_of
from transforms.model import flags as model_flags
from transforms.spec.run_metadata import LOST_BY_REASON, MODEL
from transforms.spec.errors import first_line

__all__ = ["DiffOptions", "DiffFlags", "DiffPlan", "plan_diff", "build_pipeline", "run_job", "run",
           "METRICS_NAMESPACE"]

METRICS_NAMESPACE = "skewtrace.replay"
REPORT_JSON, REPORT_HTML = "report.json", "report.html"
_ERRORS = "errors"  # the tag of the buckets that could not be read, and its file in the temp dir
_OWN = {REPORT_JSON, REPORT_HTML}
_PAGE_THREADS = 4  # skipped parts read back side by side




@dataclasses.dataclass(frozen=True)
class DiffPlan:
  """Everything the diff needs before any bucket is read (plan_diff)."""
  output_dir: str
  tasks: tuple              # (bucket, {side: [its part paths]}) of the differing buckets
  context: compare.Context
  equal_partial: compare.Partial  # the totals of the buckets equal on every digest
  sides: dict               # side -> report_model.Side
  tolerance: tolerances.Tolerance
  max_divergent_fraction: float
  buckets_total: int
  causes: tuple             # suspected causes, sorted by stage
  scope: str = "all"        # "production": offline records production never saw are not_served
  fail_on: str = "divergent"
  analyzers: dict = dataclasses.field(default_factory=dict)  # replay/diff/analyzers.compare
  vocabularies: dict = dataclasses.field(default_factory=dict)  # side -> {feature: tokens}
  # side -> (run metadata input.dir, its PII columns)
  inputs: dict = dataclasses.field(default_factory=dict)
  num_buckets: int = 1
  # The default checks (off with --no_verify_logs): side -> {bucket: run metadata entry} of the
  # buckets read, whose rows are checked where they are compared; (side, part path) of the
  # buckets skipped as equal, whose pages are read back with their checksums.
  checks: dict = dataclasses.field(default_factory=dict)
  skipped: tuple = ()
  models: dict = dataclasses.field(default_factory=dict)  # side -> its run metadata's model


def _part_paths(task, side):
  """(bucket, path) for each of the bucket's part files on one side."""
  bucket, parts = task
  for path in parts[side]:
    yield bucket, path


def _read_parts(paths):
  """One side's rows of a bucket, its parts read in path order, or None when it has none.
  DataError names the file when a part's body is corrupt (only its footer was checked)."""
  tables = []
  for path in sorted(paths):
    try:
      with FileSystems.open(path, compression_type="uncompressed") as f:
        tables.append(pq.read_table(f, **feature_log.read_options()))
    except (OSError, pa.ArrowException) as e:
      raise common.DataError(f"{path} is not a readable Parquet file ({first_line(e)})") from None
  if not tables:
    return None
  return tables[0] if len(tables) == 1 else \
      pa.concat_tables(tables, promote_options="permissive").combine_chunks()


class _CompareBucketFn(beam.DoFn):
  """(bucket, {offline: [part paths], production: [...]}) -> the bucket's Partial; a bucket
  that cannot be read -> its one-line reason on the _ERRORS output (a value, not an exception:
  the job reports it as an input error, exit 2, whatever the runner does with exceptions)."""

  def __init__(self, context, checks=None, num_buckets=1):
    self._context, self._checks, self._num_buckets = context, checks or {}, num_buckets
    self._buckets = Metrics.counter(METRICS_NAMESPACE, "buckets_compared")
    self._rows = {s: Metrics.counter(METRICS_NAMESPACE, f"rows_read_{s}") for s in compare.SIDES}
    self._records = {k: Metrics.counter(METRICS_NAMESPACE, k) for k in compare.COUNTERS}
    self._pool = None

  def setup(self):
    # The row checks run beside the comparison (their kernels release the GIL), on threads
    # whose first task loads the check's compiled kernels while the first bucket is read.
    if self._checks:
      self._pool = concurrent.futures.ThreadPoolExecutor(1)
      self._pool.submit(integrity.warm_up)

  def teardown(self):
    if self._pool is not None:
      self._pool.shutdown(wait=True)
      self._pool = None

  def process(self, element):
    bucket, grouped = element
    try:
      tables = {s: _read_parts(grouped[s]) for s in compare.SIDES}
    except common.DataError as e:
      yield beam.pvalue.TaggedOutput(_ERRORS, str(e))
      return
    if self._pool is None:
      self.setup()
    checking = []  # the rows against their fingerprints, beside the comparison
    for side, entries in sorted(self._checks.items()):
      table = tables[side]
      if table is not None and bucket in entries:
        paths = sorted(grouped[side])
        where = integrity.where_of(paths, paths[0].rsplit("/", 1)[0], bucket)
        checking.append((side, self._pool.submit(integrity.bucket_problems, where,
                                                 entries[bucket], table, self._num_buckets)))
    part = compare.compare_bucket(tables["offline"], tables["production"], self._context)
    for side, problems in checking:  # sorted by side: the first problem is the same every run
      if problems.result():
        yield beam.pvalue.TaggedOutput(_ERRORS, f"--{side}: {problems.result()[0]}")
        return
    self._buckets.inc()
    for s, t in tables.items():
      self._rows[s].inc(t.num_rows if t is not None else 0)
    for k, counter in self._records.items():
      counter.inc(part.records[k])
    yield part


class _PartialCombineFn(beam.CombineFn):
  """Totals of bucket Partials (compare.merge is associative and commutative)."""

  def __init__(self, samples):
    self._samples = samples

  def create_accumulator(self):
    return compare.empty(self._samples)

  def add_input(self, accumulator, part):
    return compare.merge(accumulator, part)

  def merge_accumulators(self, accumulators):
    out = self.create_accumulator()
    for a in accumulators:
      out = compare.merge(out, a)
    return out

  def extract_output(self, accumulator):
    return accumulator


def _write_report(partial, plan, path):
  _write_json(_build(plan, compare.merge(plan.equal_partial, partial)), path)


def _write_json(value, path):
  with FileSystems.create(path) as f:
    f.write(json.dumps(value).encode("utf-8"))


def build_pipeline(plan, options, report_path, errors_path):
  """The un-run diff Pipeline over plan.tasks: (bucket, {side: [its part paths]}); writes
  the report to report_path and the sorted list of unreadable buckets' reasons to errors_path."""
  p = beam.Pipeline(options=options)
  tasks = p | "DifferingBuckets" >> beam.Create(plan.tasks)
  # The bucket's part paths, not their rows, go through the CoGroupByKey: the logs are already
  # partitioned by bucket, so each bucket is read where it is compared and no row is shuffled
  # (shuffling the Arrow tables instead cost 15 of 20 s at 1M rows on DirectRunner).
  sides = {s: tasks | f"{s.capitalize()}Parts" >> beam.FlatMap(_part_paths, s)
           for s in compare.SIDES}
  compared = (sides
              | "JoinBuckets" >> beam.CoGroupByKey()
              | "CompareBuckets" >> beam.ParDo(_CompareBucketFn(
                  plan.context, plan.checks, plan.num_buckets)).with_outputs(
                  _ERRORS, main="partials"))
  _ = (compared[_ERRORS]
       | "CollectErrors" >> beam.combiners.ToList()
       | "WriteErrors" >> beam.Map(lambda errors: _write_json(sorted(errors), errors_path)))
  _ = (compared.partials
       | "Totals" >> beam.CombineGlobally(_PartialCombineFn(plan.context.samples))
       | "WriteReport" >> beam.Map(_write_report, plan, report_path))
  return p


# --------------------------------------------------------------------------- planning
def _footer(path, side):
  try:
    with FileSystems.open(path, compression_type="uncompressed") as f:
      return pq.read_metadata(f)  # the footer only (the file is seekable)
  except (OSError, pa.ArrowException) as e:
    raise common.UsageError(f"--{side}: {path} is not a readable Parquet file ({e})") from None


def _check_parts(meta, entries, listed, directory, bucket, side):
  """The bucket's part paths on one side and their schema, each part's footer read (no page)
  and its rows checked against run_metadata.json; entries: {bucket: its metadata entry}."""
  entry = entries.get(bucket)
  if entry is None:
    return [], None
  paths = listed[bucket]
  if not paths and entry["rows"]:
    raise common.UsageError(
        f"--{side}: bucket {bucket} has {entry['rows']} rows in run_metadata.json but no "
        f"file {runs.bucket_pattern(directory, bucket, meta['log']['num_buckets'])}")
  footers = [_footer(p, side) for p in paths]
  rows = sum(f.num_rows for f in footers)
  if rows != entry["rows"]:
    raise common.UsageError(f"--{side}: bucket {bucket} holds {rows} rows, run_metadata.json "
                            f"says {entry['rows']} (log and metadata out of step)")
  schema = footers[0].schema.to_arrow_schema() if footers else None
  if schema is not None and feature_log.KEY not in schema.names:
    raise common.UsageError(f"--{side}: {paths[0]} is not a feature-log file (no key column)")
  return paths, schema


def _feature_kinds(schemas):
  kinds = {}
  for schema in schemas:
    for field in schema:
      if feature_log.is_value_column(field.name):
        kinds.setdefault(feature_log.feature_of(field.name), compare.feature_kind(field.type))
  return tuple(sorted(kinds.items()))


def plan_diff(opts):
  """The DiffPlan of DiffFlags `opts`: metadata checked, causes named, differing buckets listed
  with their checked part files, equal buckets totalled."""
  tol, frac = DiffOptions.check(opts), opts.max_divergent_fraction
  dirs = {"offline": opts.offline, "production": opts.production}
  metas = {s: runs.load(d, s) for s, d in dirs.items()}
  for side in compare.SIDES if opts.verify_logs else ():
    problems = integrity.verify(dirs[side])
    if problems:
      raise common.DataError(f"--{side}: {problems[0]}" + (
          f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""))
  runs.check_compatible(metas["offline"], metas["production"])
  differing, equal = runs.plan_buckets(metas["offline"], metas["production"])
  listed = {s: runs.listed_parts(metas[s], dirs[s], s) for s in compare.SIDES}
  entries = {s: {int(b["bucket"]): b for b in metas[s]["log"]["buckets"]} for s in compare.SIDES}
  check = lambda side, bucket: _check_parts(metas[side], entries[side], listed[side],
                                            dirs[side], bucket, side)
  tasks, schemas = [], []
  for bucket in differing:
    parts = {}
    for side in compare.SIDES:
      parts[side], schema = check(side, bucket)
      schemas += [schema] if schema is not None else []
    tasks.append((bucket, parts))
  # Buckets equal on every digest are not read, but each of their parts must be there, whole
  # (a readable footer) and of the listed rows: a deleted, truncated or foreign file is an
  # input error, never "no divergence".
  skipped = []
  for entry in equal:
    for side in compare.SIDES:
      paths, schema = check(side, int(entry["bucket"]))
      skipped += [(side, p) for p in paths]
      if not schemas and schema is not None:
        schemas.append(schema)  # nothing differs: the features from one footer
  ao, ap = metas["offline"]["analyze"], metas["production"]["analyze"]
  analyze_match = ao.get("fingerprint") == ap.get("fingerprint")
  stage = "analyze" if not analyze_match and ao.get("definition") == ap.get("definition") \
      else "transform"
  # The analyzers compared under float noise over the records analysed; the noise default of
  # the value tolerance holds for the features fed by none that differs beyond it
  # (replay/diff/tolerance.py).
  analysed = max(int(m["log"]["rows"]) for m in metas.values())
  compared = analyzer_diff.compare(ao, ap, analysed)
  if tol.is_noise:
    exact = analyzer_diff.exact_features(compared, ao, ap)
    tol = tol.exact() if exact is None else tol.with_noise(analysed).with_exact(exact)
  scope = opts.scope if opts.scope != "auto" else \
      ("production" if coverage_of(metas["production"])["kind"] == "partial" else "all")
  kinds = _feature_kinds(schemas)
  model = predicting.model_for_plan(model_flags.spec_of(opts), schemas)
  context = compare.Context(tolerance=tol, transform_stage=stage,
                            analyze_match=analyze_match, samples=opts.samples,
                            partial_production=scope == "production",
                            model=model, attribution_records=opts.attribution_records)
  tolerances.check_features(tol, dict(kinds), model is not None or all(
      metas[s].get(MODEL) for s in compare.SIDES))
  equal_partial = compare.empty(opts.samples)
  for entry in equal:
    equal_partial = compare.merge(equal_partial, compare.equal_bucket(entry, kinds, context))
  sides = {s: report_model.Side(dir=dirs[s], runner=str(metas[s]["runner"]),
                                rows=int(metas[s]["log"]["rows"]),
                                lost=dict(metas[s]["log"].get(LOST_BY_REASON, {})))
           for s in compare.SIDES}
  return DiffPlan(output_dir=opts.output_dir, tasks=tuple(tasks), context=context,
                  equal_partial=equal_partial, sides=sides, tolerance=tol,
                  max_divergent_fraction=frac, buckets_total=len(differing) + len(equal),
                  causes=tuple(causes.suspected_causes(metas["offline"],
                                                         metas["production"])), scope=scope,
                  fail_on=opts.fail_on, analyzers=compared, vocabularies={
                      s: runs.vocabularies(metas[s], dirs[s]) for s in compare.SIDES},
                  inputs={s: (metas[s]["input"].get("dir"), tuple(
                      metas[s].get("pii", {}).get("columns", ()))) for s in compare.SIDES},
                  num_buckets=int(metas["offline"]["log"]["num_buckets"]),
                  checks={} if opts.no_verify_logs else {
                      s: {b: e for b, e in entries[s].items() if b in set(differing)}
                      for s in compare.SIDES},
                  skipped=() if opts.no_verify_logs else tuple(skipped),
                  models={s: metas[s].get(MODEL) or (model and predicting.DIFF_MODEL)
                          for s in compare.SIDES})


def _build(plan, partial):
  report = summary.build_report(partial, plan.sides["offline"], plan.sides["production"],
                              plan.tolerance, plan.max_divergent_fraction, list(plan.causes),
                              plan.buckets_total, plan.scope, plan.fail_on, plan.analyzers,
                              plan.vocabularies, plan.models)
  return evidence.attach(report.to_dict(), plan.inputs, plan.tasks, plan.num_buckets)


def _check_skipped(skipped):
  """DataError naming the first part of a bucket skipped as equal whose pages do not read back
  whole (their checksums verified; parts read side by side: Parquet's reader releases the GIL)."""
  if not skipped:
    return
  with concurrent.futures.ThreadPoolExecutor(_PAGE_THREADS) as pool:
    problems = list(pool.map(lambda sp: integrity.page_problem(sp[1]), skipped))
  for (side, _), problem in zip(skipped, problems):
    if problem:
      raise common.DataError(f"--{side}: {problem}")


def _read_json(path):
  with FileSystems.open(path, compression_type="uncompressed") as f:
    return json.loads(f.read().decode("utf-8"))


def run_job(opts, options):
  """Runs the diff for DiffFlags `opts` with the Beam `options`; returns the exit code (0 / 1).
  Raises UsageError for bad flags/input."""
  plan = plan_diff(opts)
  with dataset.one_writer(plan.output_dir, "skewtrace diff"):
    return _run_planned(plan, opts, options)


def _run_planned(plan, opts, options):
  """run_job's work, under the output folder's lock: only then are a dead run's temps removed."""
  output_dir = plan.output_dir
  dataset.refuse_foreign_entries(output_dir, opts.overwrite, own=_OWN)
  dataset.remove_stale_temps(output_dir)
  _check_skipped(plan.skipped)
  if plan.tasks:
    temp_dir = FileSystems.join(output_dir, dataset.TEMP_PREFIX + uuid.uuid4().hex)
    try:
      FileSystems.mkdirs(temp_dir)
      path, errors_path = (FileSystems.join(temp_dir, name) for name in (REPORT_JSON, _ERRORS))
      build_pipeline(plan, options, path, errors_path).run().wait_until_finish()
      errors = _read_json(errors_path)
      if errors:
        raise common.DataError(errors[0])
      report = _read_json(path)
    finally:
      dataset.remove_tree(temp_dir)
  else:  # every bucket equal: nothing to read, no pipeline to run
    report = _build(plan, plan.equal_partial)
  if not FileSystems.exists(output_dir):
    FileSystems.mkdirs(output_dir)
  # One unit: report.json is the commit point, removed first and written last, so a folder
  # never holds one run's report.json beside another run's report.html.
  dataset.remove_tree(FileSystems.join(output_dir, REPORT_JSON))
  dataset.write_atomically(FileSystems.join(output_dir, REPORT_HTML),
                           render.render_html(report).encode("utf-8"))
  dataset.write_atomically(FileSystems.join(output_dir, REPORT_JSON),
                           (json.dumps(report, indent=2) + "\n").encode("utf-8"))
  print(render.render_text(report))
  print(f"report: {FileSystems.join(output_dir, REPORT_HTML)} (data: {REPORT_JSON} beside it)")
  return report["exit_code"]


def run(argv=None, save_main_session=True):
  """Runs the diff from its command line; returns the exit code (0 / 1). Raises UsageError for
  bad flags/input."""
  options, _, _ = common.job_options(argv, DiffOptions, save_main_session)
  return run_job(common.flags_of(DiffFlags, options, DiffOptions), options)


if __name__ == "__main__":
  common.process_main(common.main_wrapper, run)
