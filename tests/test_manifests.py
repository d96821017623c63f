"""Deploy manifests' contract: every manifest parses, and every skewtrace / pipeline argument
list inside it goes through the job's real option parser (an unknown or misspelt flag fails)."""
import importlib
import json
import os
import re
import shlex

import pytest
import yaml
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import common
from replay import check
from replay import cli
from tests.conftest import ROOT

DEPLOY = os.path.join(ROOT, "manifests", "deploy")


def _yaml_docs(name):
  with open(os.path.join(DEPLOY, name)) as f:
    return [d for d in yaml.safe_load_all(f) if d is not None]


def _job_classes(module):
  return [v for v in vars(module).values() if isinstance(v, type)
          and issubclass(v, PipelineOptions) and v.__module__ == module.__name__]


def _module_of(command):
  """(job module, its flags) of a container command line."""
  if command[0] == "skewtrace":
    return importlib.import_module(cli.SUBCOMMANDS[command[1]][0]), command[2:]
  assert command[:2] == ["python", "-m"], command
  return importlib.import_module(command[2]), command[3:]


def check_command(command):
  """Parses a job command line with the job's own flags and Beam's; UsageError if unknown."""
  module, flags = _module_of(command)
  classes = _job_classes(module)
  assert classes, f"{module.__name__} defines no PipelineOptions"
  common.parse_options(flags, classes + [common.OutputOptions])
  if "--transform_module" in flags:
    importlib.import_module(flags[flags.index("--transform_module") + 1])
  return module


def _containers(doc):
  spec = doc["spec"]
  if doc["kind"] == "CronJob":
    spec = spec["jobTemplate"]["spec"]
  return spec["template"]["spec"]["containers"]


def _commands():
  out = []
  for name in ("nightly-cronjob.yaml", "flink-deployment.yaml"):
    for doc in _yaml_docs(name):
      if doc["kind"] in ("CronJob", "Job"):
        out += [(name, c["command"] + c["args"]) for c in _containers(doc)]
  return out


def test_every_manifest_parses():
  kinds = {name: [d["kind"] for d in _yaml_docs(name)]
           for name in ("nightly-cronjob.yaml", "flink-deployment.yaml")}
  assert kinds == {"nightly-cronjob.yaml": ["ConfigMap", "CronJob"],
                   "flink-deployment.yaml": ["FlinkDeployment", "Job"]}
  with open(os.path.join(DEPLOY, "dataflow", "features-metadata.json")) as f:
    assert json.load(f)["parameters"]


@pytest.mark.parametrize("name,command", _commands())
def test_container_commands_use_only_real_flags(name, command):
  check_command(command)


def test_flink_deployment_runs_the_sdk_harness_as_a_sidecar_on_the_external_port():
  flink, job = _yaml_docs("flink-deployment.yaml")
  sidecar = flink["spec"]["taskManager"]["podTemplate"]["spec"]["containers"][0]
  assert sidecar["args"] == ["--worker_pool"]
  port = sidecar["ports"][0]["containerPort"]
  args = _containers(job)[0]["args"]
  assert "--environment_type=EXTERNAL" in args
  assert f"--environment_config=localhost:{port}" in args
  assert "--runner=FlinkRunner" in args


def test_nightly_config_in_the_cronjob_validates():
  config_map = _yaml_docs("nightly-cronjob.yaml")[0]
  config = check.load_config(config_map["data"]["nightly.yaml"])
  assert config["thresholds"]["divergent_fraction"] == 0.001
  from replay.diff import job as diff  # beam_args go to the diff
  common.parse_options(config["beam_args"], [diff.DiffOptions, common.OutputOptions])


def test_dataflow_template_parameters_are_flags_of_the_features_job():
  from pipelines import features
  with open(os.path.join(DEPLOY, "dataflow", "features-metadata.json")) as f:
    params = json.load(f)["parameters"]
  flags = [f"--{p['name']}=16" if p["name"] != "overwrite" else "--overwrite" for p in params]
  common.parse_options(flags, _job_classes(features) + [common.OutputOptions])
  with open(os.path.join(DEPLOY, "dataflow", "launch.sh")) as f:
    launch = f.read()
  given = re.findall(r"--parameters (\w+)=(\S+)", launch)
  assert {"input_dir", "output_dir", "profile"} <= {k for k, _ in given}
  common.parse_options([f"--{k}={shlex.split(v)[0]}" for k, v in given],
                       _job_classes(features) + [common.OutputOptions])
  with open(os.path.join(DEPLOY, "dataflow", "Dockerfile")) as f:
    assert "FLEX_TEMPLATE_PYTHON_PY_FILE=/template/pipelines/features.py" in f.read()


def test_a_misspelt_flag_fails_the_contract():
  name, command = _commands()[-1]
  bad = [a.replace("--environment_type", "--enviroment_type") for a in command]
  with pytest.raises(common.UsageError, match="enviroment_type"):
    check_command(bad)
  with pytest.raises(common.UsageError, match="num_shards"):
    check_command(["python", "-m", "pipelines.features", "--num_shards", "4"])


def _dag_constants():
  """FEATURES_OPTIONS and CHECK_ARGS of the Airflow DAG (read with ast: Airflow is not a
  dependency of skewtrace)."""
  import ast
  with open(os.path.join(DEPLOY, "airflow", "skewtrace_nightly.py")) as f:
    tree = ast.parse(f.read())
  out = {}
  for node in tree.body:
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
      out[node.targets[0].id] = ast.literal_eval(node.value)
  return out


def test_airflow_dag_arguments_are_real_flags():
  consts = _dag_constants()
  flags = [f"--{k}" if v is True else f"--{k}={v}" for k, v in consts["FEATURES_OPTIONS"].items()]
  check_command(["python", "-m", "pipelines.features"] + flags + ["--runner=DataflowRunner"])
  check_command(["skewtrace"] + consts["CHECK_ARGS"])
