"""The skewtrace console script: subcommands, help that lists every flag with a sentence, and
the jobs' exit codes."""
import argparse
import importlib
import os
import subprocess
import sys

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import common
from replay import cli
from tests.conftest import ROOT


def _help(argv):
  with pytest.raises(common.HelpRequested) as e:
    cli.run(argv)
  return str(e.value)


def _own_flags(module):
  """(flag, help) of every flag the job's own PipelineOptions classes define."""
  parser = argparse.ArgumentParser(add_help=False)
  for v in vars(module).values():
    if isinstance(v, type) and issubclass(v, PipelineOptions) and \
        v.__module__ == module.__name__:
      v._add_argparse_args(parser)  # pylint: disable=protected-access
  return [(a.option_strings[0], a.help) for a in parser._actions]  # pylint: disable=protected-access


def test_top_level_help_lists_every_subcommand_with_a_sentence():
  text = _help(["--help"])
  for name, (_, sentence) in cli.SUBCOMMANDS.items():
    assert f"  {name}" in text and sentence in text
  assert _help([]) == text


@pytest.mark.parametrize("name", sorted(set(cli.SUBCOMMANDS) - {"verify"}))
def test_each_subcommands_help_lists_every_flag_with_a_sentence(name):
  module = importlib.import_module(cli.SUBCOMMANDS[name][0])
  text = _help([name, "--help"])
  flags = _own_flags(module) + [("--output_dir", "Required. Folder to write.")]
  assert len(flags) > 1
  for flag, sentence in flags:
    assert sentence and sentence.strip().endswith((".", ")")), (name, flag)
    assert flag in text, (name, flag)
  assert "Any Beam pipeline flag" in text


def test_verify_help_and_usage():
  assert "usage: python -m pipelines.verify DIR" in _help(["verify", "--help"])
  with pytest.raises(common.UsageError, match="usage"):
    cli.run(["verify"])


def test_unknown_subcommand_and_flags_are_usage_errors():
  with pytest.raises(common.UsageError, match="unknown subcommand 'ingst'"):
    cli.run(["ingst"])
  with pytest.raises(common.UsageError, match="unknown flag"):
    cli.run(["diff", "--ofline", "x"])


def test_the_console_script_exits_with_the_jobs_codes(tmp_path):
  script = os.path.join(os.path.dirname(sys.executable), "skewtrace")
  assert os.path.exists(script), "pip install -e . installs the skewtrace console script"
  env = dict(os.environ, PYTHONPATH=ROOT)
  ok = subprocess.run([script, "--help"], capture_output=True, text=True, env=env, check=False)
  assert ok.returncode == 0 and "subcommands:" in ok.stdout
  bad = subprocess.run([script, "diff", "--offline", str(tmp_path / "none"), "--production",
                        str(tmp_path / "none"), "--output_dir", str(tmp_path / "out")],
                       capture_output=True, text=True, env=env, check=False)
  assert bad.returncode == 2
  assert bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr


def test_job_options_make_one_view_per_class_sharing_the_values(monkeypatch):
  from apache_beam.options.pipeline_options import SetupOptions, StandardOptions, TypeOptions
  options = common.parse_options(["--runner", "DirectRunner", "--output_dir", "out"],
                                 [common.OutputOptions])
  made = []
  original = PipelineOptions.view_as
  monkeypatch.setattr(PipelineOptions, "view_as",
                      lambda self, cls: made.append(cls) or original(self, cls))
  setup = options.view_as(SetupOptions)
  assert options.view_as(SetupOptions) is setup
  setup.save_main_session = True  # a value set through one view shows in every view
  assert options.view_as(SetupOptions).save_main_session
  assert options.get_all_options()["save_main_session"] is True
  assert options.view_as(StandardOptions).runner == "DirectRunner"
  assert options.view_as(common.OutputOptions).output_dir == "out"
  for _ in range(100):  # Beam's type checks ask for this view once per check
    assert options.view_as(TypeOptions).disable_beartype is False
  assert made == [SetupOptions, StandardOptions, common.OutputOptions, TypeOptions]


def test_tensorflow_loads_without_its_native_start_up_lines():
  """The features job (pipelines/features_job.py) imports TensorFlow at once: its native
  libraries' start-up lines and the cuInit error of a machine without a GPU stay off stderr
  (transforms/graph/quiet.py), while an error of our own still reaches it."""
  env = dict(os.environ, PYTHONHASHSEED="0")
  proc = subprocess.run([sys.executable, "-c",
                         "from pipelines import features_job\n"
                         "import tensorflow as tf\n"
                         "print(int(tf.constant(1) + 1))\n"
                         "import sys; print('ours', file=sys.stderr)"],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.strip() == "2"
  assert proc.stderr.strip() == "ours"


@pytest.mark.parametrize("flags,message", [
    (["--fail_on", "maybe"], "argument --fail_on: invalid choice: 'maybe'"),
    (["--samples", "x"], "argument --samples: invalid int value: 'x'"),
    (["--samples"], "argument --samples: expected one argument")])
def test_a_bad_flag_value_is_one_line_not_argparse_usage(flags, message, capsys, tmp_path):
  """argparse prints its whole usage (200 lines of Beam flags) before exiting; the jobs raise
  one UsageError naming the flag instead, and print nothing."""
  from replay.diff import job as diff
  with pytest.raises(common.UsageError, match=message):
    diff.run(["--offline", str(tmp_path), "--production", str(tmp_path), "--output_dir",
              str(tmp_path / "out")] + flags)
  captured = capsys.readouterr()
  assert captured.err == "" and captured.out == ""
  assert not (tmp_path / "out").exists()


def test_help_names_the_command_marks_required_flags_and_shows_defaults():
  text = _help(["diff", "--help"])
  assert text.startswith("usage: skewtrace diff ")
  assert "Required. Offline feature-log folder" in text
  assert "(default: 10)" in text  # --samples
  assert "(default: None)" not in text


@pytest.mark.parametrize("flag,hint", [("--offlin", "--offline"), ("--sample=3", "--samples"),
                                       ("--max_divergent_fracton", "--max_divergent_fraction")])
def test_a_misspelt_flag_names_the_flag_it_is_close_to(flag, hint):
  with pytest.raises(common.UsageError) as e:
    cli.run(["diff", flag])
  assert f"unknown flag(s): {flag} (did you mean {hint}?)" in str(e.value)
  assert "\n" not in str(e.value)


def test_help_and_a_flag_error_do_not_import_tensorflow():
  """--help and a misspelt flag answer before the job is imported: TensorFlow, TF Transform
  and tfx_bsl stay unloaded (what makes them answer in under 2 s, bench/cli.py)."""
  code = ("import sys\nfrom pipelines import common, features\n"
          "for argv in (['--help'], ['--input_dri', 'x']):\n"
          "  try:\n    features.run(argv)\n"
          "  except (common.HelpRequested, common.UsageError):\n    pass\n"
          "print(sorted(m for m in ('tensorflow', 'tensorflow_transform', 'tfx_bsl')"
          " if m in sys.modules))")
  proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize("name", sorted(cli.SUBCOMMANDS))
def test_every_commands_help_prints_nothing_on_stderr(name):
  """No TensorFlow or absl start-up line: --help's stderr is empty, its stdout the help."""
  proc = subprocess.run([sys.executable, "-m", cli.SUBCOMMANDS[name][0], "--help"], cwd=ROOT,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stderr == ""
  assert "usage" in proc.stdout


_EXIT_SCRIPT = """
import atexit, sys, threading, time
from pipelines import common
def run(argv):
  atexit.register(lambda: print("exit handler ran", flush=False))
  threading.Thread(target=lambda: (time.sleep(0.3), print("thread joined"))).start()
  print("result printed")
  return int(argv[0])
common.process_main(common.main_wrapper, run)
"""


def test_a_command_ends_with_its_code_after_its_exit_handlers_and_output():
  """A command's process ends through common.exit_now (process_main): threads joined, exit
  handlers run, output flushed (here into a pipe, which buffers), then the code -- and no C++
  teardown after it."""
  for code in (0, 1, 2):
    result = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT, str(code)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == code, result.stderr
    assert result.stdout.splitlines() == ["result printed", "thread joined",
                                          "exit handler ran"], result.stdout


@pytest.mark.slow
def test_verify_exits_0_every_time_it_runs_side_by_side(taxi_features):
  """A finished verify ended, now and then, in SIGABRT at teardown (Arrow's thread pools, 1 run
  in 40 under load): eight run at once on two cores, each must print intact and exit 0."""
  procs = [subprocess.Popen([sys.executable, "-m", "replay.verify_log", taxi_features["direct"]],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for _ in range(8)]
  results = [(p.wait(timeout=600), *p.communicate()) for p in procs]
  for code, out, err in results:
    assert code == 0 and "intact" in out, (code, out, err[-500:])
