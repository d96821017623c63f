"""Nothing is lost: on any CSV corpus, read = written + rejected, and the run never crashes."""
import json
import os

from hypothesis import HealthCheck, given, settings, strategies as st

from pipelines import common, ingest as job

CELL = st.one_of(st.just(b""), st.binary(max_size=5),
                 st.text(alphabet='a1.,"\n\r-', max_size=5).map(lambda t: t.encode()))
ROW = st.lists(CELL, min_size=1, max_size=4).map(lambda cells: b",".join(cells))
FILE = st.lists(ROW, max_size=12).map(lambda rows: b"a,b,c\n" + b"\n".join(rows))
CORPUS = st.lists(st.one_of(FILE, st.just(b"")), min_size=1, max_size=3)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(CORPUS)
def test_read_equals_written_plus_rejected(tmp_path_factory, files):
  d = tmp_path_factory.mktemp("corpus")
  for i, data in enumerate(files):
    (d / f"f{i}.csv").write_bytes(data)
  out = d / "out"
  try:
    job.run(["--input", str(d / "*.csv"), "--output_dir", str(out), "--num_shards", "2",
             "--max_rejected_fraction", "1"])
  except common.UsageError as e:  # only: every file empty -> no header
    assert "no header" in str(e) and not any(files)
    return
  m = json.load(open(os.path.join(out, "manifest.json")))
  rows = m["rows"]
  assert rows["read"] == rows["written"] + rows["rejected"]
  rejected_lines = open(os.path.join(out, m["rejected"]["path"]), encoding="utf-8").readlines()
  assert len(rejected_lines) == rows["rejected"]
  assert sum(s["rows"] for s in m["shards"] if s["format"] == "parquet") == rows["written"]
