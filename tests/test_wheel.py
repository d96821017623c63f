"""The distribution setup.py builds works outside the source tree; the Dataflow image carries it.

Dataflow stages setup.py as an sdist (`python setup.py sdist`, Beam's stager without the `build`
module) that workers install; the Flex Template image installs the copied source with pip. So the
test builds the sdist from a clean copy of the repository (an in-place build reuses build/lib and
egg-info/SOURCES.txt from earlier builds, which would hide a file setup.py no longer ships), the
wheel from that sdist, installs it with --target (not editable), and runs ingest -> verify ->
features -> diff with the installed console script from a folder outside the repository, with
PYTHONPATH naming only the install. The venv also holds an editable install of this repository;
its finder comes after PYTHONPATH on the import path, and a probe asserts that every module of the
wheel resolves to the install.
"""
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile

import pytest
from setuptools._distutils import core as distutils_core

from tests.conftest import ROOT, TAXI_CSV, TAXI_SCHEMA

pytestmark = pytest.mark.slow  # the end-to-end tier (pytest.ini)

DOCKERFILE = os.path.join(ROOT, "manifests", "deploy", "dataflow", "Dockerfile")
# Deploy files beside the schemas: not a package, never shipped.
DEPLOY = os.path.join("manifests", "deploy")
TIMEOUT = 300


@pytest.fixture(scope="module")
def setup_dist():
  """setup.py's Distribution as configured (packages, package data, pins), without building:
  distutils' run_setup stopped after init (setuptools vendors distutils for Python 3.12+)."""
  cwd = os.getcwd()
  os.chdir(ROOT)  # find_packages() searches the current folder, as on Beam's stager
  try:
    return distutils_core.run_setup("setup.py", stop_after="init")
  finally:
    os.chdir(cwd)


def _roots(packages):
  return sorted({p.split(".")[0] for p in packages})


def _run(args, **kwargs):
  proc = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT, check=False,
                        **kwargs)
  command = shlex.join(args)
  command = command if len(command) < 400 else command[:400] + " ..."
  assert proc.returncode == 0, \
      f"{command} -> exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
  return proc


def _ignore(folder, names):
  """Build leftovers and local state: not part of what a clean checkout builds from."""
  top = os.path.abspath(folder) == ROOT
  drop = {n for n in names if n == "__pycache__" or n.endswith(".egg-info")}
  if top:
    drop |= {n for n in names if n in (".git", ".venv", "build", "dist", "out", ".hypothesis",
                                       ".pytest_cache")}
  return drop


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
  """The wheel built from an sdist of a clean copy of the repository, as (path, member names)."""
  tmp = tmp_path_factory.mktemp("wheel")
  src, dist = tmp / "src", tmp / "dist"
  shutil.copytree(ROOT, src, ignore=_ignore)
  # With setuptools < 70.1 (the venv's 65.5) bdist_wheel comes from the `wheel` package, which
  # tensorflow brings in (through astunparse); without it this step fails with the reason.
  _run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(dist)], cwd=src)
  (sdist,) = glob.glob(str(dist / "*.tar.gz"))
  _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
        str(dist), sdist], cwd=tmp)
  (path,) = glob.glob(str(dist / "*.whl"))
  with zipfile.ZipFile(path) as z:
    return path, z.namelist()


def _source_modules():
  """Every .py file of the shipped folders (manifests/deploy excepted), as a wheel member name."""
  out = set()
  for root in ("transforms", "pipelines", "replay", "manifests"):
    for folder, dirs, files in os.walk(os.path.join(ROOT, root)):
      rel = os.path.relpath(folder, ROOT)
      dirs[:] = [d for d in dirs if d != "__pycache__" and os.path.join(rel, d) != DEPLOY]
      out |= {os.path.join(rel, f).replace(os.sep, "/") for f in files if f.endswith(".py")}
  return out


def test_wheel_holds_the_packages_and_schemas_and_nothing_else(wheel, setup_dist):
  _, names = wheel
  roots = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
  assert roots == set(_roots(setup_dist.packages)) == {"transforms", "pipelines", "replay",
                                                       "manifests"}
  schemas = {"manifests/" + os.path.basename(p)
             for p in glob.glob(os.path.join(ROOT, "manifests", "*.schema.json"))}
  assert len(schemas) == 4
  assert schemas <= set(names)
  # A folder without __init__.py imports from the source tree (namespace package) but is not
  # found by find_packages: every module must be in the wheel.
  assert _source_modules() == {n for n in names if n.endswith(".py")}
  assert not [n for n in names if n.startswith((DEPLOY + "/", "tests/", "bench/", "docs/"))]


def _modules(names):
  """Dotted module names of a wheel's .py members."""
  out = []
  for n in names:
    if n.endswith(".py"):
      parts = n[:-len(".py")].split("/")
      out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
  return sorted(out)


# Resolves each module without importing it (package __init__s import nothing) and reads every
# schema through manifests.schema: cheap, no TensorFlow.
PROBE = """
import importlib.util, json, sys
import manifests
modules = json.loads(sys.argv[1])
names = [manifests.DATASET_MANIFEST, manifests.RUN_METADATA, manifests.FEATURE_LOG,
         manifests.REPORT]
print(json.dumps({"origins": {m: importlib.util.find_spec(m).origin for m in modules},
                  "schemas": {n: manifests.schema(n).get("$schema") for n in names}}))
"""


def test_installed_wheel_runs_the_chain_outside_the_source_tree(wheel, tmp_path):
  path, names = wheel
  site = tmp_path / "site"
  _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), path])
  script = site / "bin" / "skewtrace"
  assert script.is_file()
  work = tmp_path / "work"  # cwd of every run: outside the repository, nothing importable
  work.mkdir()
  env = dict(os.environ, PYTHONPATH=str(site), PYTHONHASHSEED="0", TF_CPP_MIN_LOG_LEVEL="2",
             PYTHONNOUSERSITE="1")

  def skewtrace(*args):
    return _run([str(script), *map(str, args)], cwd=work, env=env)

  ingest, offline, diff = work / "ingest", work / "offline", work / "diff"
  skewtrace("ingest", "--input", TAXI_CSV, "--output_dir", ingest, "--schema", TAXI_SCHEMA,
            "--num_shards", "2")
  assert (ingest / "manifest.json").is_file()
  skewtrace("verify", ingest)  # validates the manifest against the shipped JSON Schema
  skewtrace("features", "--input_dir", ingest, "--output_dir", offline, "--transform_module",
            "transforms.taxi", "--profile", os.path.join(ROOT, "profiles", "offline.yaml"))
  metadata = json.loads((offline / "run_metadata.json").read_text(encoding="utf-8"))
  assert metadata["transform_module"] == "transforms.taxi"
  skewtrace("diff", "--offline", offline, "--production", offline, "--output_dir", diff)
  assert (diff / "report.json").is_file()

  # Same environment, same kind of working folder: where each module of the wheel comes from.
  modules = _modules(names)
  probe = json.loads(_run([sys.executable, "-c", PROBE, json.dumps(modules)], cwd=work,
                          env=env).stdout)
  assert sorted(probe["origins"]) == modules
  outside = {m: o for m, o in probe["origins"].items()
             if not (o or "").startswith(str(site) + os.sep)}
  assert not outside, f"resolved elsewhere than the install {site}: {outside}"
  assert all(probe["schemas"].values()), probe["schemas"]


def _instructions(path):
  """(keyword, argument text) of each Dockerfile instruction, continuation lines joined."""
  text = re.sub(r"\\\n", " ", open(path, encoding="utf-8").read())
  out = []
  for line in text.splitlines():
    line = line.strip()
    if line and not line.startswith("#"):
      keyword, _, rest = line.partition(" ")
      out.append((keyword.upper(), rest.strip()))
  return out


def _copies(rest, workdir):
  """(source, destination relative to workdir) of a COPY from the build context; [] for --from."""
  words = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
  if any(w.startswith("--from") for w in words):
    return []
  words = [w for w in words if not w.startswith("--")]
  dest = os.path.normpath(os.path.relpath(words[-1], workdir) if os.path.isabs(words[-1])
                          else words[-1])
  return [(os.path.normpath(w), dest) for w in words[:-1]]


def test_dataflow_image_copies_every_package_before_installing_it(setup_dist):
  steps = _instructions(DOCKERFILE)
  last_from = max(i for i, (k, _) in enumerate(steps) if k == "FROM")
  stage = steps[last_from:]
  install = next(i for i, (k, rest) in enumerate(stage) if k == "RUN" and "pip install" in rest)
  # `pip install .` in the WORKDIR the sources were copied into: the image holds the package
  # with its package data, as a wheel would.
  assert re.search(r"pip install [^&;|]*\s\.(\s|$)", stage[install][1]), stage[install]
  workdir, copied = "/", set()
  for keyword, rest in stage[:install]:
    if keyword == "WORKDIR":
      workdir = os.path.join(workdir, rest)
    elif keyword in ("COPY", "ADD"):
      copied.update(_copies(rest, workdir))
  # A folder lands under its own name (`COPY transforms transforms`), a file in the workdir.
  wanted = {(p, p) for p in _roots(setup_dist.packages)} | {("setup.py", ".")}
  missing = {(src, dest) for src, dest in wanted
             if (src, dest) not in copied and (".", ".") not in copied
             and not (dest == "." and (src, src) in copied)}
  assert not missing, f"not copied into {workdir} before pip install: {sorted(missing)}"

  env = dict(re.match(r"(\S+?)=(\S+)", rest).groups() for k, rest in stage if k == "ENV")
  py_file = os.path.relpath(env["FLEX_TEMPLATE_PYTHON_PY_FILE"], workdir)
  assert py_file == os.path.join("pipelines", "features.py")
  assert os.path.isfile(os.path.join(ROOT, py_file))
  # The worker image's Beam is the launcher's: the pin in setup.py.
  (beam,) = [r for r in setup_dist.install_requires if r.startswith("apache-beam")]
  args = dict(re.match(r"(\w+)=(\S+)", rest).groups() for k, rest in steps if k == "ARG")
  assert beam.endswith("==" + args["BEAM_VERSION"])
  assert ("ENTRYPOINT", '["/opt/apache/beam/boot"]') in stage
