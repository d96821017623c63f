"""Benchmark: how fast each command answers --help and a misspelt flag (target: under 2 s).

  python bench/cli.py [--repeat 3]

Each case is a fresh process, whole wall time, best of --repeat. The baselines run in the same
invocation: (p) `python -c pass`, the interpreter alone, and (b) `python -c "import
apache_beam"`, the floor of any command that parses Beam's flags. Ratios are printed against
(b). The jobs import TensorFlow only when they run: pipelines/features.py vs features_job.py.
"""
import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = ["pipelines.ingest", "pipelines.features", "replay.diff", "replay.rerun",
           "replay.check"]
TARGET = 2.0


def best(cmd, repeat, ok=(0, 2)):
  times = []
  for _ in range(repeat):
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, timeout=300)
    times.append(time.perf_counter() - t)
    if proc.returncode not in ok:
      raise SystemExit(f"{cmd} exited {proc.returncode}: {proc.stderr[-500:]!r}")
  return min(times)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--repeat", type=int, default=3)
  args = ap.parse_args()
  py = sys.executable
  base_p = best([py, "-c", "pass"], args.repeat)
  base_b = best([py, "-c", "import apache_beam"], args.repeat)
  print(f"(p) python -c pass:            {base_p:5.2f} s")
  print(f"(b) import apache_beam:        {base_b:5.2f} s")
  worst = 0.0
  for module in MODULES:
    t_help = best([py, "-m", module, "--help"], args.repeat)
    t_flag = best([py, "-m", module, "--no_such_flag", "1"], args.repeat)
    worst = max(worst, t_help, t_flag)
    print(f"{module:<20} --help {t_help:5.2f} s ({t_help / base_b:4.2f}x b)   misspelt flag "
          f"{t_flag:5.2f} s ({t_flag / base_b:4.2f}x b)")
  verdict = "met" if worst < TARGET else "not met"
  print(f"slowest: {worst:.2f} s (target < {TARGET:.0f} s: {verdict})")


if __name__ == "__main__":
  main()
