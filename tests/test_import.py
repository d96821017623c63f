"""The public surface of each package imports and names what it exports, and imports flow one
way: codec -> spec -> graph, model, beam -> stages, features -> pipelines -> replay, with no cycles;
inside replay, each room imports only what its __init__ docstring allows."""
import ast
import importlib
import os
import pkgutil

import pytest

from tests.conftest import ROOT

PACKAGES = ["manifests", "transforms", "transforms.codec", "transforms.spec", "transforms.graph",
            "transforms.model", "transforms.beam", "transforms.stages", "transforms.features", "pipelines", "replay",
            "replay.logger", "replay.report", "replay.diff"]
# The layer of each package: a module may import modules of its own layer or below only.
LAYERS = {"manifests": 0, "transforms.codec": 0, "transforms.spec": 1, "transforms.graph": 2,
          "transforms.model": 2, "transforms.beam": 2, "transforms.stages": 3, "transforms.features": 3,
          "transforms": 3, "pipelines": 4, "replay.logger": 5, "replay.report": 5,
          "replay.diff": 6, "replay": 7}
# replay's rooms: the project packages each may import (its own included), as their __init__
# docstrings say. The logger runs in serving's process: no Beam (pipelines, transforms.beam and
# transforms.stages import it), nothing of the diff or the report.
ROOMS = {
    "replay.logger": ("transforms.spec", "transforms.codec", "transforms.graph", "transforms.model",
                      "replay.logger"),
    "replay.report": ("transforms.spec", "replay.report"),
    "replay.diff": ("transforms", "pipelines", "replay.diff", "replay.report"),
}


def _modules():
  """Every module of the project's packages, by dotted name -> file path."""
  out = {}
  for package in PACKAGES:
    path = os.path.join(ROOT, *package.split("."))
    out[package] = os.path.join(path, "__init__.py")
    for info in pkgutil.iter_modules([path]):
      if not info.ispkg and info.name != "__main__":  # python -m PACKAGE, an entry point
        out[f"{package}.{info.name}"] = os.path.join(path, info.name + ".py")
  return out


MODULES = _modules()


def _layer(module):
  parts = module.split(".")
  for n in range(len(parts), 0, -1):
    if ".".join(parts[:n]) in LAYERS:
      return LAYERS[".".join(parts[:n])]
  raise KeyError(module)


def _project_imports(path):
  """The project modules a file imports (at any depth of its code), as dotted names."""
  tree = ast.parse(open(path, encoding="utf-8").read())
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    else:
      continue
    found.update(n for n in names if n in MODULES)
  return found


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_exports_exist(name):
  module = importlib.import_module(name)
  assert module.__all__
  for symbol in module.__all__:
    assert hasattr(module, symbol) or f"{name}.{symbol}" in MODULES, f"{name}.{symbol}"


def test_packages_name_their_modules():
  """A package's __all__ names each of its modules and sub-packages; anything else it names
  (replay.logger's ProductionLogger) is an attribute it imports, not a missing module."""
  for package in PACKAGES[1:]:
    module = importlib.import_module(package)
    listed = set(module.__all__)
    own = {m.rpartition(".")[2] for m in MODULES if m.rpartition(".")[0] == package}
    assert own <= listed, (package, own - listed)
    assert all(not isinstance(getattr(module, name, None), type(importlib)) and
               hasattr(module, name) for name in listed - own), package


def test_imports_flow_one_way():
  wrong = []
  for name, path in MODULES.items():
    for target in _project_imports(path):
      if _layer(target) > _layer(name):
        wrong.append(f"{name} -> {target}")
  assert not wrong, wrong


def test_import_graph_has_no_cycle():
  graph = {name: _project_imports(path) - {name} for name, path in MODULES.items()}
  state = {}

  def visit(node, trail):
    if state.get(node) == "done":
      return
    assert state.get(node) != "open", " -> ".join(trail + [node])
    state[node] = "open"
    for nxt in sorted(graph[node]):
      if nxt.startswith(node + "."):  # a package importing its own module is no cycle
        continue
      visit(nxt, trail + [node])
    state[node] = "done"

  for node in sorted(graph):
    visit(node, [])


def _room(module):
  return next((room for room in ROOMS if module == room or module.startswith(room + ".")), None)


def _outside_room(name, path):
  room = _room(name)
  return sorted(t for t in _project_imports(path) if room and not any(
      t == allowed or t.startswith(allowed + ".") for allowed in ROOMS[room]))


def test_each_replay_room_imports_only_what_it_may():
  wrong = {name: bad for name, path in MODULES.items() if (bad := _outside_room(name, path))}
  assert not wrong, wrong


def test_the_room_test_fails_on_a_forbidden_import(tmp_path):
  path = tmp_path / "m.py"
  path.write_text("from replay.diff import compare\nfrom transforms.spec import stages\n")
  assert _outside_room("replay.logger.rows", str(path)) == ["replay.diff", "replay.diff.compare"]
  assert _outside_room("replay.report.render", str(path)) == ["replay.diff",
                                                              "replay.diff.compare"]
  assert _outside_room("replay.diff.job", str(path)) == []


def test_the_layer_test_fails_on_an_upward_import(tmp_path):
  path = tmp_path / "m.py"
  path.write_text("from pipelines import common\nimport transforms.spec.stages\n")
  found = _project_imports(str(path))
  assert found == {"pipelines", "pipelines.common", "transforms.spec.stages"}
  assert max(_layer(t) for t in found) > _layer("transforms.spec.stages")


def test_no_module_is_over_400_lines():
  long = {name: n for name, path in MODULES.items()
          if (n := sum(1 for _ in open(path, encoding="utf-8"))) > 420}
  assert not long, long


def test_transforms_package_has_no_side_effects():
  source = open(MODULES["transforms"], encoding="utf-8").read()
  assert not [n for n in ast.parse(source).body if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_each_stage_module_holds_the_composite_it_is_named_for():
  import apache_beam as beam
  for name in sorted(m for m in MODULES if m.startswith("transforms.stages.")):
    module = importlib.import_module(name)
    composite = "".join(w.capitalize() for w in name.rsplit(".", 1)[1].split("_"))
    assert issubclass(getattr(module, composite), beam.PTransform), name
    assert composite in module.__all__, name
