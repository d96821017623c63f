"""The window stage: window bounds, late drops, aggregates; pure functions and the composite."""
import dataclasses

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.spec import fingerprint
from transforms.spec import profile
from transforms.spec import stages, window as rule
from transforms.stages import window_records as wr

BASE = profile.parse_profile({
    "windowing": {"type": "fixed", "size_seconds": 3600, "period_seconds": 3600,
                  "offset_seconds": 0, "allowed_lateness_seconds": None},
    "sharding": {"num_shards": 2, "hash_seed": 0},
    "serialization": {"format": "tfrecord", "float_dtype": "float32"},
    "sampling": {"seed": 0, "fraction": 1.0}})


def batch():
  return pa.record_batch({"__key__": ["a", "b", "c", "d", "e"],
                          "t": pa.array([0, 3599, 3600, None, 7300], pa.int64()),
                          "area": pa.array([1, 1, None, 1, None], pa.int64())})


def test_fixed_windows_and_missing_event_time():
  kept, dropped = rule.assign_windows(batch(), "t", BASE, watermark=7300)
  assert kept.column(stages.WINDOW_START).to_pylist() == [0, 0, 3600, 7200]
  assert kept.column(stages.WINDOW_END).to_pylist() == [3600, 3600, 7200, 10800]
  assert dropped.column("__key__").to_pylist() == ["d"]
  assert dropped.column(stages.DROP_REASON).to_pylist() == ["missing event time"]


def test_offset_and_sliding_trailing_windows():
  p = dataclasses.replace(BASE, window_type="sliding", window_period=1800, window_offset=600)
  kept, _ = rule.assign_windows(batch(), "t", p, watermark=None)
  assert kept.column(stages.WINDOW_END).to_pylist() == [600, 4200, 4200, 7800]
  assert kept.column(stages.WINDOW_START).to_pylist() == [-3000, 600, 600, 4200]


def test_late_records_are_dropped_with_reason():
  p = dataclasses.replace(BASE, allowed_lateness=3600)
  kept, dropped = rule.assign_windows(batch(), "t", p, watermark=7300)
  # windows ending at 3600 are late (3600 + 3600 <= 7300); the one ending at 7200 is not.
  assert kept.column("__key__").to_pylist() == ["c", "e"]
  assert sorted(dropped.column("__key__").to_pylist()) == ["a", "b", "d"]
  assert "late" in dropped.column(stages.DROP_REASON).to_pylist()[0]


COUNT = {"name": "n", "group_by": "area", "fn": "count"}


def counts(kept, p=BASE, ordered=True):
  return rule.result(rule.partial_state(kept, COUNT, p, ordered), COUNT)


def test_counts_treat_null_as_a_group_and_join_back():
  kept, _ = rule.assign_windows(batch(), "t", BASE, watermark=None)
  assert counts(kept).to_pylist() == [{"g0": 0, "g0null": True, "e": 7200, "out": 1},
                                      {"g0": 0, "g0null": True, "e": 10800, "out": 1},
                                      {"g0": 1, "g0null": False, "e": 3600, "out": 2}]
  joined = rule.join_aggregate(kept, COUNT, counts(kept))
  assert joined.column("n").to_pylist() == [2, 2, 1, 1]


def test_sliding_record_counts_in_every_window_containing_it():
  p = dataclasses.replace(BASE, window_type="sliding", window_period=1800)
  one = pa.record_batch({"t": pa.array([100], pa.int64()), "area": pa.array([5], pa.int64())})
  kept, _ = rule.assign_windows(one, "t", p, watermark=None)
  assert [(r["g0"], r["e"], r["out"]) for r in counts(kept, p).to_pylist()] \
      == [(5, 1800, 1), (5, 3600, 1)]


@pytest.mark.parametrize("values, typ, g", [
    ([1, 1, None, 1, 0], pa.int64(), [0, 0, 1]),  # integers and strings group as they are
    (["x", "x", None, "x", ""], pa.string(), ["", "", "x"]),
    # others by their text; a float's -0.0 groups with 0.0, NaN with null
    ([0.0, -0.0, None, float("nan"), 1.5], pa.float64(), ["", "0", "1.5"])])
def test_counts_group_by_value_with_null_its_own_group(values, typ, g):
  b = pa.record_batch({"t": pa.array([0, 10, 20, 30, 7300], pa.int64()),
                       "area": pa.array(values, typ)})
  kept, _ = rule.assign_windows(b, "t", BASE, watermark=None)
  assert counts(kept).column("g0").to_pylist() == g
  joined = rule.join_aggregate(kept, COUNT, counts(kept))
  expected = {int: [3, 3, 1, 3, 1], str: [3, 3, 1, 3, 1], float: [2, 2, 2, 2, 1]}
  assert joined.column("n").to_pylist() == expected[type(values[0])]


def test_counts_of_no_records_join_as_zero():
  fn = wr.MergeStates(COUNT)
  nothing = fn.extract_output(fn.create_accumulator())
  assert nothing.num_rows == 0
  kept, _ = rule.assign_windows(batch(), "t", BASE, watermark=None)
  assert rule.join_aggregate(kept, COUNT, nothing).column("n").to_pylist() == [0, 0, 0, 0]


def test_counts_tables_travel_as_arrow_never_pickled(monkeypatch):
  import pickle
  from transforms.beam.arrow_coder import TableCoder
  kept, _ = rule.assign_windows(batch(), "t", BASE, watermark=None)
  state = rule.partial_state(kept, COUNT, BASE)

  def refuse(*args, **kwargs):
    raise AssertionError("a counts table was pickled")

  monkeypatch.setattr(pickle, "dumps", refuse)
  coder = wr.MergeStates(COUNT).get_accumulator_coder()
  assert all(t.equals(state) for t in coder.decode(coder.encode([state, state])))
  assert TableCoder().decode(TableCoder().encode(state)).equals(state)
  assert TableCoder().get_impl().estimate_size(state) == state.get_total_buffer_size()
  assert isinstance(beam.coders.registry.get_coder(pa.Table), TableCoder)


def test_merge_states_merges_partials_in_any_order():
  kept, _ = rule.assign_windows(batch(), "t", BASE, watermark=None)
  parts = [rule.partial_state(kept.slice(i, 1), COUNT, BASE) for i in range(kept.num_rows)]
  fn = wr.MergeStates(COUNT)
  forward = fn.extract_output(fn.merge_accumulators(
      [fn.add_input(fn.create_accumulator(), t) for t in parts]))
  acc = fn.create_accumulator()
  for t in reversed(parts):
    acc = fn.add_input(acc, t)
  assert forward.equals(fn.extract_output(acc))
  assert forward.equals(counts(kept))
  # the pipeline's partial tables come unordered; the sum is ordered all the same
  acc = fn.create_accumulator()
  for i in reversed(range(0, kept.num_rows, 2)):
    acc = fn.add_input(acc, rule.partial_state(kept.slice(i, 2), COUNT, BASE, ordered=False))
  assert forward.equals(fn.extract_output(acc))


def test_composite_counts_across_batches_and_fingerprints_the_stage():
  aggregates = [{"name": "n", "group_by": "area", "fn": "count"}]
  whole = batch()
  with test_pipeline.TestPipeline() as p:
    out = (p | beam.Create([whole.slice(0, 2), whole.slice(2)])
           | wr.WindowRecords("t", aggregates, BASE))
    rows = out["kept"] | beam.FlatMap(lambda b: [
        (r["__key__"], r["n"], r[stages.WINDOW_FP]) for r in b.to_pylist()])
    expected_fp = {k: fingerprint.fingerprint_record(
        {stages.WINDOW_START: s, stages.WINDOW_END: s + 3600, "n": n})
        for k, s, n in [("a", 0, 2), ("b", 0, 2), ("c", 3600, 1), ("e", 7200, 1)]}
    assert_that(rows, equal_to([("a", 2, expected_fp["a"]), ("b", 2, expected_fp["b"]),
                                ("c", 1, expected_fp["c"]), ("e", 1, expected_fp["e"])]))
    dropped = out[wr.DROPPED] | "DroppedKeys" >> beam.FlatMap(
        lambda b: b.column("__key__").to_pylist())
    assert_that(dropped, equal_to(["d"]), label="CheckDropped")


@pytest.mark.parametrize("lateness", [None, 3600])
def test_counts_from_a_projected_second_input_equal_counts_from_the_batches(lateness):
  # pipelines.features feeds the counts (and the watermark) from column-projected reads, so
  # the full batches are not held back for the join; the output must not change.
  p_ = dataclasses.replace(BASE, allowed_lateness=lateness)
  aggregates = [{"name": "n", "group_by": "area", "fn": "count"}]
  whole = batch()
  parts = [whole.slice(0, 2), whole.slice(2)]

  def rows(b):
    return [(r["__key__"], r["n"], r[stages.WINDOW_FP]) for r in b.to_pylist()]

  for name in ("single", "pair", "triple"):
    with test_pipeline.TestPipeline() as p:
      batches = p | "Batches" >> beam.Create(parts)
      if name in ("pair", "triple"):
        projected = p | "Projected" >> beam.Create([b.select(["t", "area"]) for b in parts[::-1]])
        times = p | "Times" >> beam.Create([whole.select(["t"])])  # the watermark's own read
        inputs = (batches, projected) + ((times,) if name == "triple" else ())
        out = inputs | wr.WindowRecords("t", aggregates, p_)
      else:
        out = batches | wr.WindowRecords("t", aggregates, p_)
      kept = out["kept"] | beam.FlatMap(rows)
      dropped = out[wr.DROPPED] | "DroppedKeys" >> beam.FlatMap(
          lambda b: b.column("__key__").to_pylist())
      expected_kept = [("a", 2), ("b", 2), ("c", 1), ("e", 1)] if lateness is None \
          else [("c", 1), ("e", 1)]
      expected_fp = [(k, n, fingerprint.fingerprint_record(
          {stages.WINDOW_START: s, stages.WINDOW_END: s + 3600, "n": n}))
          for k, n, s in [("a", 2, 0), ("b", 2, 0), ("c", 1, 3600), ("e", 1, 7200)]
          if (k, n) in expected_kept]
      assert_that(kept, equal_to(expected_fp))
      assert_that(dropped, equal_to(["d"] if lateness is None else ["a", "b", "d"]),
                  label="CheckDropped")


def test_declared_event_time_formats_window_and_take_the_watermark_in_unix_seconds():
  # The same instants as epoch seconds, epoch milliseconds and ISO-8601 text (Z, an offset,
  # naive read as UTC): the same windows, counts, fingerprints and late drops. The watermark is
  # the largest instant in seconds: taken over the raw milliseconds it would make every record
  # late, over the text it would not be a time at all.
  import datetime
  base = 472222 * 3600  # a window boundary in November 2023
  seconds = [base + 10, base + 3599, base + 3600, None, base + 7300]
  utc = datetime.timezone.utc

  def iso(i, t):
    if t is None:
      return None
    when = datetime.datetime.fromtimestamp(t, utc)
    return [when.strftime("%Y-%m-%dT%H:%M:%S.750Z"),
            when.astimezone(datetime.timezone(datetime.timedelta(hours=5, minutes=30)))
            .isoformat(), when.replace(tzinfo=None).isoformat(), None,
            when.isoformat()][i]

  records = pa.record_batch({
      "__key__": ["a", "b", "c", "d", "e"], "area": pa.array([1, 1, None, 1, None], pa.int64()),
      "t": pa.array(seconds, pa.int64()),
      "t_ms": pa.array([None if t is None else t * 1000 + 999 for t in seconds], pa.int64()),
      "t_iso": pa.array([iso(i, t) for i, t in enumerate(seconds)], pa.string())})
  lateness = dataclasses.replace(BASE, allowed_lateness=3600)
  aggregates = [{"name": "n", "group_by": "area", "fn": "count"}]
  expected = [(k, n, fingerprint.fingerprint_record(
      {stages.WINDOW_START: base + s, stages.WINDOW_END: base + s + 3600, "n": n}))
      for k, n, s in [("c", 1, 3600), ("e", 1, 7200)]]
  with test_pipeline.TestPipeline() as p:
    batches = p | beam.Create([records.slice(0, 2), records.slice(2)])
    for label, column, form in [("Seconds", "t", "seconds"), ("Ms", "t_ms", "ms"),
                                ("Iso", "t_iso", "iso8601")]:
      out = batches | label >> wr.WindowRecords(column, aggregates, lateness, event_format=form)
      kept = out["kept"] | f"Rows{label}" >> beam.FlatMap(lambda b: [
          (r["__key__"], r["n"], r[stages.WINDOW_FP]) for r in b.to_pylist()])
      dropped = out[wr.DROPPED] | f"Dropped{label}" >> beam.FlatMap(
          lambda b: b.column("__key__").to_pylist())
      assert_that(kept, equal_to(expected), label=f"CheckKept{label}")
      assert_that(dropped, equal_to(["a", "b", "d"]), label=f"CheckDropped{label}")
