"""pipelines.dataset.refuse_foreign_entries: what a job may write over without --overwrite."""
import pytest

from pipelines import common, dataset


def test_an_output_folder_with_foreign_entries_needs_overwrite(tmp_path):
  out = tmp_path / "out"
  dataset.refuse_foreign_entries(str(out), False)  # absent: fine
  out.mkdir()
  (out / ".tmp-1234").mkdir()
  (out / "report.json.tmp").write_text("x")
  (out / "report.json").write_text("{}")
  dataset.refuse_foreign_entries(str(out), False, own=("report.json",))
  with pytest.raises(common.UsageError, match=r"not empty \(report.json\); pass --overwrite"):
    dataset.refuse_foreign_entries(str(out), False)
  dataset.refuse_foreign_entries(str(out), True)
