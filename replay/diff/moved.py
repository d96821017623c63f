"""Records whose event time moved, and the window neighbours they change (docs/replay.md,
"Suspected causes": moved_event_times).

A matched record first differing at raw or parse whose event time differs between the sides
has moved: it left one window and entered another, so the windowed aggregates of the records
in those windows change too, and those records first differ at window. Per bucket, `windows`
gives the moved records' count, the window intervals (start, end) they left or entered, and
the records first differing at window per offline window interval; the merged totals link
the two (`linked`). Windows are matched by interval (the log holds no group-by columns).
"""
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.spec.feature_log import EVENT_TIME, WINDOW_END, WINDOW_START
from transforms.spec.stages import PARSE, RAW, WINDOW

__all__ = ["windows", "linked", "INPUT_FIRST"]

INPUT_FIRST = (RAW.name, PARSE.name)  # a record first differing here differs in its input


def windows(o, p, first):
  """(moved records, frozenset of the window intervals they left or entered, {offline window
  interval: records first differing at window}) of matched rows o, p; first: each row's first
  divergent stage (object array)."""
  names = (EVENT_TIME, WINDOW_START, WINDOW_END)
  if not all(c in t.schema.names for t in (o, p) for c in names):
    return 0, frozenset(), {}
  col = {(s, c): t.column(c).combine_chunks() for s, t in (("o", o), ("p", p)) for c in names}
  moved = np.isin(first, INPUT_FIRST) & pc.fill_null(pc.not_equal(
      col["o", EVENT_TIME], col["p", EVENT_TIME]), True).to_numpy(zero_copy_only=False)

  def intervals(side, mask):  # the rows' (start, end) pairs, grouped: one Python value each
    rows = pa.table({"s": col[side, WINDOW_START].filter(mask),
                     "e": col[side, WINDOW_END].filter(mask)})
    return rows.group_by(["s", "e"]).aggregate([([], "count_all")])
  left, entered = intervals("o", pa.array(moved)), intervals("p", pa.array(moved))
  touched = frozenset((s, e) for t in (left, entered)
                      for s, e in zip(t.column("s").to_pylist(), t.column("e").to_pylist())
                      if s is not None)
  counts = intervals("o", pa.array(first == WINDOW.name))
  at_window = {(s, e): n for s, e, n in zip(*(counts.column(c).to_pylist() for c in (
      "s", "e", "count_all"))) if s is not None}
  return int(np.count_nonzero(moved)), touched, at_window


def linked(partial):
  """The records first differing at window whose window a record whose event time moved left or
  entered (a merged compare.Partial's moved_windows and window_first)."""
  return sum(n for w, n in partial.window_first.items() if w in partial.moved_windows)
