"""The `window` stage's rule: event-time windows, late-record drops and windowed aggregates.

Each record gets one window from the profile (spec/profile.py):
  fixed:   start = offset + floor((t - offset) / size) * size, end = start + size
  sliding: end = the first period boundary after t (offset + k * period > t),
           start = end - size (a trailing window: "the last `size` seconds as of `end`")
A record without an event time, or whose window is late (end + allowed lateness <= watermark,
the watermark being the largest event time of the run), is dropped, with its reason
(stages.WINDOW).

A windowed aggregate {"name", "group_by": column or [columns], "fn", "column", "window"} is
computed over the kept records with the same group_by values (null is a value of its own) in
each window containing them (size / period windows for a sliding window), and joined to every
record of the window as a column `name`. Its window is its own when it declares one ("window":
spec/profile.parse_window; a zone makes it a calendar window on that zone's wall-clock time),
else the profile's; a profile's aggregate_windows entry overrides it (profile.aggregate_window;
resolve records the outcome as the aggregate's "window", absent when it is the profile's):
  count           records (int64); with a `column`, its non-null values, as pandas' count
  count_distinct  distinct non-null values of `column` (int64; -0.0 counts as 0.0)
  sum, mean       of `column`'s non-null values (float64; null when the window has none); the
                  exact sum correctly rounded (as math.fsum), so it is the same bytes however
                  the records were partitioned and merged; the mean is that sum / count,
                  correctly rounded
  min, max        of `column`'s non-null values (float64; null when the window has none)
NaN counts as null (pandas' skipna). sum/mean/min/max need a number column (INT or FLOAT,
read as float64). The stage's fingerprint covers the window bounds and the joined aggregate
values (stages.WINDOW.fingerprint_fields).

Computation, one rule offline and in tests: partial_state (a table per batch) -> merge_states
(any grouping, any order) -> result (one row per group and window end) -> join_aggregate.
"""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.spec import event_time, exact_sum, fingerprint
from transforms.spec.profile import aggregate_window, parse_window
from transforms.spec.stages import DROP_REASON, WINDOW, WINDOW_END, WINDOW_FP, WINDOW_START
from transforms.spec.values import is_number

__all__ = ["assign_windows", "event_seconds", "latest_event_time", "partial_state",
           "merge_states", "result", "join_aggregate", "aggregate_values", "window_fingerprints",
           "check_aggregates", "check_columns", "describe", "group_columns", "input_columns",
           "output_type", "window_value_column", "window_end_column", "resolve",
           "AGGREGATE_FNS", "NO_STATE"]

AGGREGATE_FNS = ("count", "sum", "mean", "min", "max", "count_distinct")
_NUMBER_FNS = ("sum", "mean", "min", "max")  # over a number column; a float64 result
_FIELDS = ("name", "group_by", "fn", "column", "window")
# The state of no records (an empty input): joins as 0 (counts) or null.
NO_STATE = pa.table({"e": pa.array([], pa.int64())})


def group_columns(agg):
  """The aggregate's group_by columns, as a list."""
  by = agg["group_by"]
  return [by] if isinstance(by, str) else list(by)


def input_columns(agg):
  """The record columns an aggregate reads: its group_by columns, then its `column`."""
  return group_columns(agg) + ([agg["column"]] if agg.get("column") else [])


def window_value_column(name):
  """The batch column that keeps aggregate `name`'s value as the window stage joined it: the
  `name` column itself is replaced by its serialize round trip (a float32 profile rounds it)
  before TFT; the feature log records this one as aggregate__<name>, the exact value the
  window fingerprint covers."""
  return f"__window_value__{name}"


def window_end_column(name):
  """The batch column assign_windows adds for an aggregate counted in a window of its own: the
  end of the record's first window of it (a calendar window's in wall-clock seconds), the key
  its state and join use in place of WINDOW_END."""
  return f"__window_end__{name}"


def resolve(aggregates, profile):
  """The aggregates as describe gives them, each with its "window" when it is counted in one
  other than the profile's (profile.aggregate_window); ValueError (spec/profile.ProfileError)
  naming the aggregate, or the profile override naming none of them."""
  names = {a["name"] for a in aggregates}
  unknown = sorted(n for n, _ in profile.aggregate_windows if n not in names)
  if unknown:
    raise ValueError(f"aggregate_windows names {', '.join(unknown)}, which the module does not "
                     f"compute (its WINDOWED_AGGREGATES: {', '.join(sorted(names)) or 'none'})")
  out = []
  for agg in aggregates:
    window = aggregate_window(agg, profile)
    out.append(dict(describe(agg), **({"window": window} if window else {})))
  return out


def output_type(agg):
  """The Arrow type of an aggregate's values: float64 for sum, mean, min, max; else int64."""
  return pa.float64() if agg["fn"] in _NUMBER_FNS else pa.int64()


def describe(agg):
  """The aggregate as the run metadata records it: {name, fn, group_by: [..], column|None} and
  its "window" when it has one (resolve)."""
  return dict({"name": agg["name"], "fn": agg["fn"], "group_by": group_columns(agg),
               "column": agg.get("column")}, **({"window": agg["window"]}
                                                if agg.get("window") else {}))


def check_aggregates(aggregates):
  """ValueError naming the first aggregate that is not a mapping of the fields above: a name
  (unique), group_by (a column or a non-empty list of distinct columns), fn (AGGREGATE_FNS),
  and a column for every fn but count."""
  if not isinstance(aggregates, (list, tuple)):
    raise ValueError(f"WINDOWED_AGGREGATES must be a list, got {type(aggregates).__name__}")
  seen = set()
  for i, agg in enumerate(aggregates):
    if not isinstance(agg, dict):
      raise ValueError(f"aggregate {i} must be a mapping with name, group_by, fn (and column)")
    name = agg.get("name")
    if not isinstance(name, str) or not name:
      raise ValueError(f"aggregate {i} has no name")
    unknown = sorted(set(agg) - set(_FIELDS), key=str)
    if unknown:
      raise ValueError(f"aggregate {name!r}: unknown field(s) {', '.join(map(str, unknown))} "
                       f"(fields: {', '.join(_FIELDS)})")
    if name in seen:
      raise ValueError(f"aggregate {name!r} is declared twice")
    seen.add(name)
    by = agg.get("group_by")
    by = [by] if isinstance(by, str) else by
    if not isinstance(by, (list, tuple)) or not by or \
        not all(isinstance(c, str) and c for c in by) or len(set(by)) != len(by):
      raise ValueError(f"aggregate {name!r} has no group_by (a column or a list of distinct "
                       f"columns), got {agg.get('group_by')!r}")
    if agg.get("fn") not in AGGREGATE_FNS:
      raise ValueError(f"aggregate {name!r}: fn {agg.get('fn')!r} is not one of "
                       f"{', '.join(AGGREGATE_FNS)}")
    column = agg.get("column")
    if (column is not None or agg["fn"] != "count") and \
        (not isinstance(column, str) or not column):
      raise ValueError(f"aggregate {name!r}: fn {agg['fn']} needs a column (the one it "
                       f"aggregates), got {column!r}")
    if agg.get("window") is not None:
      parse_window(agg["window"], f"aggregate {name!r}: window")


def check_columns(aggregates, arrow_types):
  """ValueError naming the first aggregate named like a column of `arrow_types` ({column: Arrow
  type}), reading a column not in it, or whose fn needs a number column and is given another."""
  for agg in aggregates:
    if agg["name"] in arrow_types:
      raise ValueError(f"aggregate {agg['name']!r} has the name of a dataset column (each is "
                       "an input of preprocessing_fn: rename the aggregate)")
    for column in input_columns(agg):
      if column not in arrow_types:
        raise ValueError(f"aggregate {agg['name']!r} reads column {column!r}, which the "
                         "dataset lacks")
    typ = arrow_types.get(agg.get("column"))
    if agg["fn"] in _NUMBER_FNS and not is_number(typ):
      raise ValueError(f"aggregate {agg['name']!r}: fn {agg['fn']} needs a number column; "
                       f"{agg['column']!r} is {typ}")


def assign_windows(batch, event_column, profile, watermark, event_format=event_time.DEFAULT_FORMAT,
                   event_zone=event_time.DEFAULT_ZONE, aggregates=()):
  """(kept batch + WINDOW_START/END, dropped batch + DROP_REASON), vectorised. The event time
  is read in its declared format and normalised to Unix seconds (spec/event_time.py); the
  watermark is in Unix seconds. Each of `aggregates` (resolve) counted in a window of its own
  adds its window_end_column to the kept batch."""
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
  for agg in aggregates:
    if agg.get("window"):
      kept = kept.append_column(window_end_column(agg["name"]), pa.array(
          _first_end(t if keep.all() else t[keep], agg["window"])))
  reasons = np.where(has_t[~keep], WINDOW.reason("late"),
                     np.where(bad_t[~keep], WINDOW.reason("bad_event_time"),
                              WINDOW.reason("no_event_time")))
  dropped = dropped.append_column(DROP_REASON, pa.array(reasons, pa.string()))
  return kept, dropped


def _first_end(t, window):
  """The end of the first window (WINDOW_FIELDS) holding each Unix second of `t`: the fixed
  window's end, or a sliding window's first period boundary after t; on a zone's wall-clock
  seconds (pyarrow's zone database) when the window has one."""
  if window["zone"]:
    ts = pa.array(t, pa.timestamp("s", tz="UTC")).cast(pa.timestamp("s", tz=window["zone"]))
    t = pc.local_timestamp(ts).cast(pa.int64()).to_numpy()
  period, offset = window["period_seconds"], window["offset_seconds"]
  return offset + (np.floor_divide(t - offset, period) + 1) * period


def _ends(batch, agg, profile):
  """(first window end of each record, windows per record, period) of an aggregate."""
  w = agg.get("window")
  if w:
    return (batch.column(window_end_column(agg["name"])).to_numpy(),
            w["size_seconds"] // w["period_seconds"], w["period_seconds"])
  return (batch.column(WINDOW_END).to_numpy(), profile.window_size // profile.window_period,
          profile.window_period)


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


# --------------------------------------------------------------------------- aggregates
def _keys(agg):
  """The state's key columns: per group column g<i> (value) and g<i>null, then e (window end)."""
  return [k for i in range(len(group_columns(agg))) for k in (f"g{i}", f"g{i}null")] + ["e"]


def _group_values(column):
  """(group values, null flags) of a group_by column: integer and string columns as they are,
  any other by its text (a float's -0.0 as 0.0, NaN as null); nulls are flagged and their value
  filled (Arrow joins never match nulls, so null is a group of its own through the flag)."""
  typ = column.type
  if pa.types.is_integer(typ):
    fill = pa.scalar(0, typ)
  elif pa.types.is_string(typ) or pa.types.is_large_string(typ):
    fill = pa.scalar("", typ)
  else:
    if pa.types.is_floating(typ):  # -0.0 groups with 0.0, NaN with null (as for values)
      column = pc.add(column, pa.scalar(0.0, typ))
      column = pc.if_else(pc.is_nan(column), pa.scalar(None, typ), column)
    column, fill = column.cast(pa.string()), pa.scalar("", pa.string())
  return column.fill_null(fill), column.is_null()


def _values(column, fn):
  """(values, valid: bool numpy) of an aggregate's column: float64 for the number fns and
  count; for count_distinct integers and text as they are, floats as float64 with -0.0 as 0.0,
  any other type by its text. NaN is not valid (as null)."""
  typ = column.type
  number = is_number(typ)
  if fn == "count_distinct" and not pa.types.is_floating(typ):
    values = column if (pa.types.is_integer(typ) or pa.types.is_string(typ) or
                        pa.types.is_large_string(typ)) else column.cast(pa.string())
    return values, column.is_valid().to_numpy(zero_copy_only=False)
  if not number or (fn == "count" and not pa.types.is_floating(typ)):  # its non-null cells
    return column, column.is_valid().to_numpy(zero_copy_only=False)
  # float64 (an integer beyond 2^53 rounded, as documented); -0.0 + 0.0 is 0.0
  values = pc.add(column.cast(pa.float64(), safe=False), 0.0)
  valid = pc.and_(values.is_valid(), pc.invert(pc.is_nan(values))).fill_null(False)
  return values, valid.to_numpy(zero_copy_only=False)


def partial_state(batch, agg, profile, ordered=True):
  """The aggregate's state over a windowed batch: a table of its keys (_keys) and n (count) or
  v (the values of the other fns), merged (merge_states) and sorted unless not `ordered` (the
  pipeline's partial tables, merged again by the combiner)."""
  fn, n = agg["fn"], batch.num_rows
  first, copies, period = _ends(batch, agg, profile)  # copies: the windows holding a record
  if agg.get("column"):
    values, valid = _values(batch.column(agg["column"]), fn)
  else:
    values, valid = None, np.ones(n, dtype=bool)
  rows = np.repeat(np.arange(n), copies)[np.repeat(valid, copies)]
  ends = (first[:, None] + np.arange(copies)[None, :] * period).ravel()[
      np.repeat(valid, copies)]
  take = pa.array(rows, pa.int64())
  cols = {}
  for i, column in enumerate(group_columns(agg)):
    groups, nulls = _group_values(batch.column(column))
    cols[f"g{i}"], cols[f"g{i}null"] = pc.take(groups, take), pc.take(nulls, take)
  cols["e"] = pa.array(ends, pa.int64())
  if fn == "count":
    cols["n"] = pa.array(np.ones(len(rows), dtype=np.int64))
  elif fn in ("sum", "mean"):
    cols.update(exact_sum.parts(pc.take(values, take).to_numpy(zero_copy_only=False)))
  else:
    cols["v"] = pc.take(values, take)
  return merge_states([pa.table(cols)], agg, ordered)


def merge_states(tables, agg, ordered=False):
  """One state from partial ones, whatever their grouping and order: counts summed, minima
  and maxima taken, distinct values kept once, sum/mean parts summed per exponent.
  `ordered`: sorted by key (and value or exponent). No rows at all: NO_STATE."""
  tables = [t for t in tables if t.num_rows]
  if not tables:
    return NO_STATE
  table, keys, fn = pa.concat_tables(tables), _keys(agg), agg["fn"]
  if fn == "count":
    table = table.group_by(keys).aggregate([("n", "sum")]).rename_columns(
        {"n_sum": "n"}).select(keys + ["n"])
  elif fn in ("min", "max"):
    table = table.group_by(keys).aggregate([("v", fn)]).rename_columns(
        {f"v_{fn}": "v"}).select(keys + ["v"])
  elif fn == "count_distinct":
    table = table.group_by(keys + ["v"]).aggregate([]).select(keys + ["v"])
  else:  # sum, mean
    table = table.group_by(keys + ["x"]).aggregate([(c, "sum") for c in ("hi", "lo", "n")]) \
        .rename_columns({"hi_sum": "hi", "lo_sum": "lo", "n_sum": "n"}) \
        .select(keys + ["x", "hi", "lo", "n"])
  if not ordered:
    return table
  order = keys + (["v"] if fn == "count_distinct" else ["x"] if fn in ("sum", "mean") else [])
  return table.take(pc.sort_indices(table, [(c, "ascending") for c in order]))


def result(state, agg):
  """(keys..., out): the aggregate's value per group and window end, sorted by key, from a
  merged state (merge_states)."""
  if not state.num_rows:
    return NO_STATE
  keys, fn = _keys(agg), agg["fn"]
  if fn in ("count", "min", "max"):
    state = merge_states([state], agg, ordered=True)
    return state.rename_columns([{"n": "out", "v": "out"}.get(n, n) for n in state.column_names])
  if fn == "count_distinct":
    counted = state.group_by(keys).aggregate([("v", "count")])
    counted = counted.take(pc.sort_indices(counted, [(c, "ascending") for c in keys]))
    return counted.rename_columns({"v_count": "out"}).select(keys + ["out"])
  # sum, mean: the exponent rows of each group (sorted by key), one exact sum per group
  state = merge_states([state], agg, ordered=True)
  change = np.zeros(state.num_rows, dtype=bool)
  change[0] = True
  for key in keys:
    column = state.column(key).combine_chunks()
    change[1:] |= pc.not_equal(column.slice(1), column.slice(0, len(column) - 1)).to_numpy(
        zero_copy_only=False)
  bounds = np.append(np.flatnonzero(change), state.num_rows)
  x, hi, lo, n = (state.column(c).to_numpy() for c in ("x", "hi", "lo", "n"))
  total = [exact_sum.value(x[a:b], hi[a:b], lo[a:b], int(n[a:b].sum()), fn == "mean")
           for a, b in zip(bounds[:-1], bounds[1:])]
  return state.select(keys).take(pa.array(bounds[:-1])).append_column(
      "out", pa.array(total, pa.float64()))


def join_aggregate(batch, agg, values):
  """batch + column agg["name"] (output_type): each record's value for its group and window
  end, by a vectorised join with a result table (result); a group and window with no state is
  0 for the counts, null for the others."""
  name, typ = agg["name"], output_type(agg)
  if not values.num_rows:
    fill = np.zeros(batch.num_rows, np.int64) if typ == pa.int64() else None
    return batch.append_column(name, pa.array(fill, typ) if fill is not None
                               else pa.nulls(batch.num_rows, typ))
  keys, cols = _keys(agg), {"__row__": np.arange(batch.num_rows)}
  for i, column in enumerate(group_columns(agg)):
    cols[f"g{i}"], cols[f"g{i}null"] = _group_values(batch.column(column))
  cols["e"] = batch.column(window_end_column(name) if agg.get("window") else WINDOW_END)
  # values RIGHT OUTER JOIN rows == rows LEFT OUTER JOIN values; Acero builds its hash table
  # on the right input, so it is the batch's rows (not the whole values table, every batch).
  joined = values.rename_columns([{"out": "__out__"}.get(n, n) for n in values.column_names]) \
      .join(pa.table(cols), keys, join_type="right outer")
  position = np.empty(batch.num_rows, dtype=np.int64)  # joined row of each batch row
  position[joined.column("__row__").to_numpy()] = np.arange(batch.num_rows)
  out = joined.column("__out__").combine_chunks().take(pa.array(position)).cast(typ)
  return batch.append_column(name, out.fill_null(0) if typ == pa.int64() else out)


def aggregate_values(batch, agg, profile):
  """The aggregate's value for every record of a windowed batch, computed over that batch
  alone (what an online store holding exactly these records gives)."""
  values = result(partial_state(batch, agg, profile), agg)
  return join_aggregate(batch, agg, values).column(agg["name"])


def window_fingerprints(batch, aggregates):
  """batch + WINDOW_FP: the WINDOW fingerprint over its bounds and aggregate columns."""
  names = WINDOW.fingerprint_fields(aggregates=aggregates)
  return batch.append_column(WINDOW_FP, pa.array(fingerprint.fingerprint_batch(batch, names)))
