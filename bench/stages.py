"""Where a DirectRunner job's time goes: wall, CPU and page faults per fused stage.

  python bench/stages.py [--top 8] -m pipelines.features --input_dir D --output_dir O --profile P
  python bench/stages.py [--top 8] SCRIPT.py ARGS...

Runs the job in this process with a wrapper around the FnApiRunner's bundle execution (the
DirectRunner's batch runner runs one fused stage at a time) and prints, per stage, its wall
time, the process's user and system CPU over it, CPU/wall (above 1.0: the stage used worker
threads) and the minor page faults it caused, then the totals. A stage is named by its first
few transforms. Not a benchmark by itself (no baseline): a profiling aid for the benchmarks'
figures, e.g. the job and bench/features.py's bare-TFT script side by side. A module is run
from the sys.path this script gets (the repository root first), so the code measured is the
checkout's, whatever the current directory.
"""
import os
import re
import resource
import runpy
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _label(stage_name):
  names = re.findall(r"ref_AppliedPTransform_([A-Za-z0-9]+(?:-[A-Za-z0-9]+){0,3})", stage_name)
  names = names or re.findall(r"\(([A-Za-z][^()+]{2,60})\)", stage_name)
  seen = []
  for n in names:
    if n not in seen:
      seen.append(n)
  return (" + ".join(seen[:3]) or stage_name)[:110]


def main(argv):
  top = 8
  if argv[:1] == ["--top"]:
    top, argv = int(argv[1]), argv[2:]
  if not argv or argv in (["-h"], ["--help"]):
    print(__doc__)
    return 2
  from apache_beam.runners.portability.fn_api_runner import fn_runner
  execute = fn_runner.FnApiRunner._execute_bundle
  rows = []

  def timed(self, ctx, bundle_context_manager, bundle_input):
    wall, cpu = time.perf_counter(), os.times()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    try:
      return execute(self, ctx, bundle_context_manager, bundle_input)
    finally:
      end = os.times()
      rows.append((time.perf_counter() - wall, end.user - cpu.user, end.system - cpu.system,
                   resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults,
                   bundle_context_manager.stage.name))

  fn_runner.FnApiRunner._execute_bundle = timed
  start, cpu0 = time.perf_counter(), os.times()
  sys.path.insert(0, ROOT)
  code = 0
  try:
    if argv[0] == "-m":
      sys.argv = [argv[1]] + argv[2:]
      runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
      sys.argv = argv
      runpy.run_path(argv[0], run_name="__main__")
  except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
  finally:
    cpu1 = os.times()
    print(f"\nwhole run (imports included): wall {time.perf_counter() - start:.2f} s, "
          f"user {cpu1.user - cpu0.user:.2f} s, sys {cpu1.system - cpu0.system:.2f} s")
    print(f"{'wall s':>7} {'user s':>7} {'sys s':>6} {'cpu/wall':>8} {'minflt':>8}  stage")
    for wall, user, system, faults, name in sorted(rows, key=lambda r: -r[0])[:top]:
      print(f"{wall:7.2f} {user:7.2f} {system:6.2f} {(user + system) / wall:8.2f} "
            f"{faults:8d}  {_label(name)}")
    print(f"{sum(r[0] for r in rows):7.2f} {sum(r[1] for r in rows):7.2f} "
          f"{sum(r[2] for r in rows):6.2f} {'':8} {sum(r[3] for r in rows):8d}  "
          f"all {len(rows)} stages")
  return code


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
