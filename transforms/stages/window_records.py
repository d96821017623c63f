"""WindowRecords: the `window` stage on RecordBatches -- event-time windows, late-record drops and
windowed aggregates, by the rule of spec/window.py (the windows, the drops and their reasons,
the aggregates' states, values and join, the stage's fingerprint). The event time is read in
the feature module's declared EVENT_TIME_FORMAT / EVENT_TIME_ZONE (spec/event_time.py) and
windowed, and the watermark taken, in Unix seconds.
"""
import apache_beam as beam
import pyarrow as pa

from transforms.beam.ahead import AheadDoFn
from transforms.beam.arrow_coder import TableCoder
from transforms.spec import event_time
from transforms.spec.window import (assign_windows, check_aggregates, join_aggregate,
                                    latest_event_time, merge_states, output_type, partial_state,
                                    result, window_fingerprints, window_value_column)

__all__ = ["WindowRecords", "MergeStates", "DROPPED"]

DROPPED = "dropped"  # the tag of the dropped records' output


class MergeStates(beam.CombineFn):
  """One aggregate's partial state tables -> its values per group and window end
  (spec/window.py: merge_states, result), a CombineFn, so it scales as a combiner lifts. The
  tables travel as Arrow IPC (transforms/beam/arrow_coder.TableCoder), never pickled."""

  def __init__(self, aggregate):
    self._agg = aggregate

  def create_accumulator(self):
    return []

  def add_input(self, acc, table):
    acc.append(table)
    return [merge_states(acc, self._agg)] if len(acc) >= 32 else acc

  def merge_accumulators(self, accumulators):
    return [merge_states([t for acc in accumulators for t in acc], self._agg)]

  def extract_output(self, acc):
    return result(merge_states(acc, self._agg), self._agg)

  def get_accumulator_coder(self):
    return beam.coders.ListCoder(TableCoder())


class _AssignFn(beam.DoFn):

  def __init__(self, event, profile, aggregates):
    self._event = event  # (column, format, zone)
    self._profile = profile
    self._aggregates = aggregates

  def process(self, batch, watermark=None):
    kept, dropped = _assign(batch, self._event, self._profile, watermark, self._aggregates)
    if dropped.num_rows:
      yield beam.pvalue.TaggedOutput(DROPPED, dropped)
    if kept.num_rows:
      yield kept


class _JoinFn(AheadDoFn):
  """Joins the aggregates one batch ahead (Acero joins and the fingerprint kernel release the GIL),
  overlapping the stages after it (TFT's analysis) on the previous batch. A logged aggregate
  ({name: side column}) is the record's own logged value, as serving's online store gave it."""

  def __init__(self, aggregates, logged):
    self._aggregates = aggregates
    self._logged = logged

  def work(self, batch, **values):
    for agg in self._aggregates:
      name = agg["name"]
      if name in self._logged:
        batch = batch.append_column(name, batch.column(self._logged[name]).cast(
            output_type(agg)))
      else:
        batch = join_aggregate(batch, agg, values[name])
      batch = batch.append_column(window_value_column(name), batch.column(name))  # for the log
    yield window_fingerprints(batch, [agg["name"] for agg in self._aggregates])


def _assign(batch, event, profile, watermark, aggregates):
  column, form, zone = event
  return assign_windows(batch, column, profile, watermark, event_format=form, event_zone=zone,
                        aggregates=aggregates)


def _kept_only(batch, event, profile, aggregates, watermark=None):
  kept, _ = _assign(batch, event, profile, watermark, aggregates)
  return kept


class WindowRecords(beam.PTransform):
  """RecordBatches -> windowed batches with aggregates and __window_fp__; DROPPED tagged.

  Input: a PCollection of batches, or a pair (batches, count_batches) where count_batches
  hold the same records' event-time and aggregate input columns (a column-projected second read of
  the input). With the pair, the watermark and the aggregates come from count_batches, so
  the full batches stream through assign -> join (and on, fused with the stages after) without
  being materialised to wait for the aggregates side inputs. A triple (batches, count_batches,
  time_batches) takes the watermark from time_batches (a third read holding the event-time
  column): count_batches then feed the counts alone and stream through assign -> count after
  the watermark, where a runner would otherwise hold every one of them (about 16 bytes a
  record for the taxi module) from the watermark's pass until the counts' pass.

  aggregates: as spec/window.resolve gives them (each with its own "window", if any).
  event_format / event_zone: the feature module's declaration (spec/event_time.declaration).
  logged: {aggregate: side column} of the aggregates serving logged (spec/dataset.py side
  columns): taken as production computed them, not counted here, so a wrong online aggregate
  shows at `window`.
  """

  def __init__(self, event_column, aggregates, profile, event_format=event_time.DEFAULT_FORMAT,
               event_zone=event_time.DEFAULT_ZONE, logged=None):
    super().__init__()
    self._event = (event_column, event_format, event_zone)
    self._aggregates = list(aggregates)
    self._profile = profile
    self._logged = dict(logged or {})

  def expand(self, pcolls):
    batches, count_batches, time_batches = (tuple(pcolls) + (None, None))[:3] if isinstance(
        pcolls, tuple) else (pcolls, None, None)
    check_aggregates(self._aggregates)
    timing = time_batches or count_batches or batches
    if self._profile.allowed_lateness is None:  # no record can be late: no watermark needed
      watermark = None
    else:
      watermark = beam.pvalue.AsSingleton(
          timing
          | "EventTimeMax" >> beam.Map(lambda b, e=self._event: latest_event_time(b, *e))
          | "Watermark" >> beam.CombineGlobally(
              lambda vs: max((v for v in vs if v is not None), default=None)))
    assigned = batches | "Assign" >> beam.ParDo(
        _AssignFn(self._event, self._profile, self._aggregates), watermark).with_output_types(
            pa.RecordBatch).with_outputs(DROPPED, main="kept")
    if count_batches is None:
      counted = assigned.kept
    else:
      counted = count_batches | "AssignForCounts" >> beam.Map(
          _kept_only, self._event, self._profile, self._aggregates, watermark).with_output_types(
              pa.RecordBatch)
    values = {}
    for i, agg in enumerate(self._aggregates):
      if agg["name"] in self._logged:
        continue
      values[agg["name"]] = beam.pvalue.AsSingleton(
          counted
          | f"PartialState{i}" >> beam.Map(partial_state, agg, self._profile,
                                            ordered=False).with_output_types(pa.Table)
          | f"MergeStates{i}" >> beam.CombineGlobally(MergeStates(agg)).with_output_types(
              pa.Table))
    joined = assigned.kept | "JoinAggregates" >> beam.ParDo(
        _JoinFn(self._aggregates, self._logged), **values).with_output_types(pa.RecordBatch)
    return {"kept": joined, DROPPED: assigned[DROPPED]}
