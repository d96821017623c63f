"""The `window` stage's rule: event-time windows, late-record drops and windowed aggregates.

Each record gets one window from the profile (spec/profile.py):
  fixed:   start = offset + floor((t - offset) / size) * size, end = start + size
  sliding: end = the first period boundary after t (offset + k * period > t),
           start = end - size (a trailing window: "the last `size` seconds as of `end`")
A record without an event time, or whose window is late (end + allowed lateness <= watermark,
the watermark being the largest event time of the run), is dropped, with its reason
(stages.WINDOW). Each aggregate {"name", "group_by", "fn": "count"} counts the kept records with
the same group_by value (null is a value of its own) in each window containing them, and joins
that count to every record of the window as an int64 column. The stage's fingerprint covers the
window bounds and the joined aggregate values (stages.WINDOW.fingerprint_fields).
"""
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.spec import event_time, fingerprint
from transforms.spec.stages import DROP_REASON, WINDOW, WINDOW_END, WINDOW_FP, WINDOW_START

__all__ = ["assign_windows", "event_seconds", "latest_event_time", "window_counts", "sum_counts",
           "join_counts", "window_fingerprints", "check_aggregates", "AGGREGATE_FNS", "NO_COUNTS"]

AGGREGATE_FNS = ("count",)  # the windowed aggregate functions there are


def check_aggregates(aggregates):
  """ValueError naming the first aggregate that is not {"name": str, "group_by": str, "fn": one
  of AGGREGATE_FNS}."""
  if not isinstance(aggregates, (list, tuple)):
    raise ValueError(f"WINDOWED_AGGREGATES must be a list, got {type(aggregates).__name__}")
  for i, agg in enumerate(aggregates):
    if not isinstance(agg, dict):
      raise ValueError(f"aggregate {i} must be a mapping with name, group_by and fn")
    for field in ("name", "group_by"):
      if not isinstance(agg.get(field), str) or not agg[field]:
        raise ValueError(f"aggregate {agg.get('name', i)!r} has no {field}")
    if agg.get("fn") not in AGGREGATE_FNS:
      raise ValueError(f"aggregate {agg['name']!r}: fn {agg.get('fn')!r} is not one of "
                       f"{', '.join(AGGREGATE_FNS)}")


def assign_windows(batch, event_column, profile, watermark, event_format=event_time.DEFAULT_FORMAT,
                   event_zone=event_time.DEFAULT_ZONE):
  """(kept batch + WINDOW_START/END, dropped batch + DROP_REASON), vectorised. The event time
  is read in its declared format and normalised to Unix seconds (spec/event_time.py); the
  watermark is in Unix seconds."""
  t, has_t, bad_t = event_time.to_seconds(batch.column(event_column), event_format, event_zone)
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
  reasons = np.where(has_t[~keep], WINDOW.reason("late"),
                     np.where(bad_t[~keep], WINDOW.reason("bad_event_time"),
                              WINDOW.reason("no_event_time")))
  dropped = dropped.append_column(DROP_REASON, pa.array(reasons, pa.string()))
  return kept, dropped


def event_seconds(column, event_format=event_time.DEFAULT_FORMAT,
                  event_zone=event_time.DEFAULT_ZONE):
  """The event time as the feature log's event_time column holds it: int64 Unix seconds, read
  in the declared format (spec/event_time.to_seconds, the rule assign_windows windows by); null
  where the record has no event time or one that is not an instant of the format."""
  seconds, has, _ = event_time.to_seconds(column, event_format, event_zone)
  return pa.array(seconds, pa.int64(), mask=None if has.all() else ~has)


def latest_event_time(batch, event_column, event_format=event_time.DEFAULT_FORMAT,
                      event_zone=event_time.DEFAULT_ZONE):
  """The largest event time of a batch in Unix seconds (its part of the watermark); None when
  no record has one."""
  seconds, has, _ = event_time.to_seconds(batch.column(event_column), event_format, event_zone)
  return int(seconds[has].max()) if has.any() else None


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


def sum_counts(tables, ordered=False):
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
  return sum_counts([table], ordered)


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


def window_fingerprints(batch, aggregates):
  """batch + WINDOW_FP: the WINDOW fingerprint over its bounds and aggregate columns."""
  names = WINDOW.fingerprint_fields(aggregates=aggregates)
  return batch.append_column(WINDOW_FP, pa.array(fingerprint.fingerprint_batch(batch, names)))
