"""WindowRecords: event-time windows, late-record drops and windowed aggregates, on RecordBatches.

The `window` stage. Each record gets one window from the profile (transforms/profile.py):
  fixed:   start = offset + floor((t - offset) / size) * size, end = start + size
  sliding: end = the first period boundary after t (offset + k * period > t),
           start = end - size (a trailing window: "the last `size` seconds as of `end`")
A record without an event time, or whose window is late (end + allowed lateness <= watermark,
the watermark being the largest event time of the run), is dropped, with its reason.
Each aggregate {"name", "group_by", "fn": "count"} counts the kept records with the same
group_by value (null is a value of its own) in each window containing them, and joins that
count to every record of the window as an int64 column. The stage's fingerprint covers the
window bounds and the joined aggregate values.
"""
import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms import fingerprint
from transforms.ahead import AheadDoFn
from transforms.arrow_coder import TableCoder

__all__ = ["WindowRecords", "assign_windows", "window_counts", "join_counts", "WINDOW_START",
           "WINDOW_END", "WINDOW_FP", "DROPPED", "DROP_REASON", "SumCounts", "NO_COUNTS"]

WINDOW_START, WINDOW_END, WINDOW_FP = "__window_start__", "__window_end__", "__window_fp__"
DROPPED, DROP_REASON = "dropped", "__drop_reason__"


def assign_windows(batch, event_column, profile, watermark):
  """(kept batch + WINDOW_START/END, dropped batch + DROP_REASON), vectorised."""
  t_arr = batch.column(event_column)
  has_t = t_arr.is_valid().to_numpy(zero_copy_only=False)
  t = t_arr.fill_null(0).cast(pa.int64()).to_numpy()
  period, size, offset = profile.window_period, profile.window_size, profile.window_offset
  if profile.window_type == "fixed":
    start = offset + np.floor_divide(t - offset, size) * size
    end = start + size
  else:
    end = offset + (np.floor_divide(t - offset, period) + 1) * period
    start = end - size
  late = np.zeros(len(t), dtype=bool) if profile.allowed_lateness is None or \
      watermark is None else end + profile.allowed_lateness <= watermark
  keep = has_t & ~late
  if keep.all():  # the common case: no copy of the batch
    kept, dropped = batch, batch.slice(0, 0)
    kept = kept.append_column(WINDOW_START, pa.array(start)) \
        .append_column(WINDOW_END, pa.array(end))
  else:
    kept, dropped = batch.filter(pa.array(keep)), batch.filter(pa.array(~keep))
    kept = kept.append_column(WINDOW_START, pa.array(start[keep])) \
        .append_column(WINDOW_END, pa.array(end[keep]))
  reasons = np.where(has_t[~keep], "late: window end + allowed lateness <= watermark",
                     "missing event time")
  dropped = dropped.append_column(DROP_REASON, pa.array(reasons, pa.string()))
  return kept, dropped


_GROUP = ["g", "gnull", "e"]
# The counts of no records (an empty input): its group column has no type of its own.
NO_COUNTS = pa.schema([("g", pa.null()), ("gnull", pa.bool_()), ("e", pa.int64()),
                       ("n", pa.int64())]).empty_table()


def _group_values(column):
  """(group values, null flags) of a group_by column: integer and string columns as they are,
  any other by its text; nulls are flagged and their value filled (Arrow joins never match
  nulls, so null is a group of its own through the flag)."""
  typ = column.type
  if pa.types.is_integer(typ):
    fill = pa.scalar(0, typ)
  elif pa.types.is_string(typ) or pa.types.is_large_string(typ):
    fill = pa.scalar("", typ)
  else:
    column, fill = column.cast(pa.string()), pa.scalar("", pa.string())
  return column.fill_null(fill), column.is_null()


def _sum_counts(tables, ordered=False):
  """One counts table from partial ones; `ordered`: sorted by group, window end (the final
  table; partial sums are summed again whatever their order). No tables: NO_COUNTS."""
  tables = list(tables)
  if not tables:
    return NO_COUNTS
  table = pa.concat_tables(tables)
  summed = table.group_by(_GROUP).aggregate([("n", "sum")]).rename_columns(
      {"n_sum": "n"}).select(["g", "gnull", "e", "n"])
  if not ordered:
    return summed
  return summed.take(pc.sort_indices(summed, [(c, "ascending") for c in _GROUP]))


def window_counts(batch, group_column, profile, ordered=True):
  """Partial counts of a windowed batch: a table (g: group value (_group_values), gnull: group
  is null, e: window end, n: records), sorted by group and window end unless not `ordered`
  (the pipeline's partial tables, summed again by SumCounts).

  A sliding-window record counts in every window containing it (size / period of them).
  """
  groups, nulls = _group_values(batch.column(group_column))
  end = batch.column(WINDOW_END).to_numpy()
  copies = profile.window_size // profile.window_period
  if copies > 1:
    rows = pa.array(np.repeat(np.arange(len(end)), copies))
    groups, nulls = pc.take(groups, rows), pc.take(nulls, rows)
  table = pa.table({"g": groups, "gnull": nulls,
                    "e": (end[:, None] + np.arange(copies)[None, :] * profile.window_period)
                    .ravel(), "n": np.ones(len(groups), dtype=np.int64)})
  return _sum_counts([table], ordered)


class SumCounts(beam.CombineFn):
  """Partial counts tables -> their sum (a CombineFn, so it scales as a combiner lifts). The
  tables travel as Arrow IPC (transforms/arrow_coder.TableCoder), never pickled."""

  def create_accumulator(self):
    return []

  def add_input(self, acc, table):
    acc.append(table)
    return [_sum_counts(acc)] if len(acc) >= 32 else acc

  def merge_accumulators(self, accumulators):
    return [_sum_counts([t for acc in accumulators for t in acc])]

  def extract_output(self, acc):
    return _sum_counts(acc, ordered=True)

  def get_accumulator_coder(self):
    return beam.coders.ListCoder(TableCoder())


def join_counts(batch, group_column, name, counts):
  """batch + int64 column `name`: the count of its (group, window end), by a vectorised join
  with a counts table (window_counts / SumCounts)."""
  if not counts.num_rows:
    return batch.append_column(name, pa.array(np.zeros(batch.num_rows, np.int64)))
  groups, nulls = _group_values(batch.column(group_column))
  table = pa.table({"__row__": np.arange(batch.num_rows), "g": groups, "gnull": nulls,
                    "e": batch.column(WINDOW_END)})
  # counts RIGHT OUTER JOIN rows == rows LEFT OUTER JOIN counts; Acero builds its hash table
  # on the right input, so it is the batch's rows (not the whole counts table, every batch).
  joined = counts.rename_columns({"n": "__n__"}).join(table, _GROUP, join_type="right outer")
  joined = joined.take(pc.sort_indices(joined, [("__row__", "ascending")]))
  return batch.append_column(name, joined.column("__n__").combine_chunks().fill_null(0))


class _AssignFn(beam.DoFn):

  def __init__(self, event_column, profile):
    self._event_column = event_column
    self._profile = profile

  def process(self, batch, watermark=None):
    kept, dropped = assign_windows(batch, self._event_column, self._profile, watermark)
    if dropped.num_rows:
      yield beam.pvalue.TaggedOutput(DROPPED, dropped)
    if kept.num_rows:
      yield kept


class _JoinFn(AheadDoFn):
  """Joins the counts one batch ahead (Acero joins and the fingerprint kernel release the GIL),
  overlapping the stages after it (TFT's analysis) on the previous batch."""

  def __init__(self, aggregates):
    self._aggregates = aggregates

  def work(self, batch, **counts):
    for agg in self._aggregates:
      batch = join_counts(batch, agg["group_by"], agg["name"], counts[agg["name"]])
    names = [WINDOW_START, WINDOW_END] + [agg["name"] for agg in self._aggregates]
    yield batch.append_column(WINDOW_FP, pa.array(fingerprint.fingerprint_batch(batch, names)))


def _kept_only(batch, event_column, profile, watermark=None):
  kept, _ = assign_windows(batch, event_column, profile, watermark)
  return kept


class WindowRecords(beam.PTransform):
  """RecordBatches -> windowed batches with aggregates and __window_fp__; DROPPED tagged.

  Input: a PCollection of batches, or a pair (batches, count_batches) where count_batches
  hold the same records' event-time and group-by columns (a column-projected second read of
  the input). With the pair, the watermark and the aggregates come from count_batches, so
  the full batches stream through assign -> join (and on, fused with the stages after) without
  being materialised to wait for the counts side input.
  """

  def __init__(self, event_column, aggregates, profile):
    super().__init__()
    self._event_column = event_column
    self._aggregates = list(aggregates)
    self._profile = profile

  def expand(self, pcolls):
    batches, count_batches = pcolls if isinstance(pcolls, tuple) else (pcolls, None)
    for agg in self._aggregates:
      if agg.get("fn") != "count":
        raise ValueError(f"aggregate {agg.get('name')!r}: only fn 'count' is supported")
    timing = batches if count_batches is None else count_batches
    if self._profile.allowed_lateness is None:  # no record can be late: no watermark needed
      watermark = None
    else:
      watermark = beam.pvalue.AsSingleton(
          timing
          | "EventTimeMax" >> beam.Map(
              lambda b, c=self._event_column: pc.max(b.column(c)).as_py())
          | "Watermark" >> beam.CombineGlobally(
              lambda vs: max((v for v in vs if v is not None), default=None)))
    assigned = batches | "Assign" >> beam.ParDo(
        _AssignFn(self._event_column, self._profile), watermark).with_output_types(
            pa.RecordBatch).with_outputs(DROPPED, main="kept")
    if count_batches is None:
      counted = assigned.kept
    else:
      counted = count_batches | "AssignForCounts" >> beam.Map(
          _kept_only, self._event_column, self._profile, watermark).with_output_types(
              pa.RecordBatch)
    counts = {}
    for i, agg in enumerate(self._aggregates):
      counts[agg["name"]] = beam.pvalue.AsSingleton(
          counted
          | f"PartialCounts{i}" >> beam.Map(window_counts, agg["group_by"], self._profile,
                                            ordered=False).with_output_types(pa.Table)
          | f"SumCounts{i}" >> beam.CombineGlobally(SumCounts()).with_output_types(pa.Table))
    joined = assigned.kept | "JoinAggregates" >> beam.ParDo(
        _JoinFn(self._aggregates), **counts).with_output_types(pa.RecordBatch)
    return {"kept": joined, DROPPED: assigned[DROPPED]}
