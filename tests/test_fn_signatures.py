"""transforms/beam/fn_signatures.py: Beam's reading of function arguments, remembered per
function, gives exactly Beam's own answers, and every job has it installed."""
import functools
import subprocess
import sys

import apache_beam as beam
from apache_beam.transforms import core, userstate
from apache_beam.transforms.userstate import BagStateSpec

from tests.conftest import ROOT
from transforms.beam import fn_signatures


class _Stateful(beam.DoFn):
  BAG = BagStateSpec("bag", beam.coders.VarIntCoder())

  def process(self, element, state=beam.DoFn.StateParam(BAG), ts=beam.DoFn.TimestampParam):
    yield element

  def helper(self, a, b=2, *rest, c=3, **kw):
    return a


def _plain(x, y=1):
  return x


class _CallMe:
  def __call__(self, element, side=None):
    return element


def _callables():
  fn = _Stateful()
  return [fn.process, fn.helper, _Stateful.process, _plain, lambda a, b=(1, 2): a, len,
          functools.partial(_plain, 1), _CallMe(), beam.Map(_plain).fn.process, str.upper,
          int]


def test_the_remembered_answers_are_beams_own_every_time():
  for f in _callables():
    want = fn_signatures._BEAMS(f)
    for _ in range(3):  # the first reading and the remembered ones
      got = fn_signatures.args_defaults(f)
      assert got == want, f
      assert isinstance(got[0], list) and isinstance(got[1], list)
  got = fn_signatures.args_defaults(_Stateful().process)
  got[0].append("mutated")  # a caller changing its lists changes no later answer
  assert fn_signatures.args_defaults(_Stateful().process) == fn_signatures._BEAMS(
      _Stateful().process)


def test_a_bound_method_and_its_function_are_remembered_apart():
  fn = _Stateful()
  assert fn_signatures.args_defaults(fn.helper)[0] == ["a", "b"]
  assert fn_signatures.args_defaults(_Stateful.helper)[0] == ["self", "a", "b"]
  assert fn_signatures.args_defaults(fn.helper)[0] == ["a", "b"]


def test_state_specs_are_found_as_before():
  states, timers = userstate.get_dofn_specs(_Stateful())
  assert [s.name for s in states] == ["bag"] and not timers


def test_the_module_every_job_imports_installs_it():
  code = ("import sys; from apache_beam.transforms import core; "
          "from transforms.beam import fn_signatures; "
          "import pipelines.{0}; "
          "sys.exit(0 if core.get_function_args_defaults is fn_signatures.args_defaults else 3)")
  for job in ("common",):
    assert subprocess.run([sys.executable, "-c", code.format(job)], cwd=ROOT).returncode == 0
  assert core.get_function_args_defaults is fn_signatures.args_defaults
