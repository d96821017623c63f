"""Airflow DAG: each night, offline features for the day on Dataflow, then `skewtrace check`.

Uses the apache-beam provider (apache-airflow-providers-apache-beam): BeamRunPythonPipelineOperator
runs `python -m pipelines.features` with the options below; the check runs where the history
file lives. Exit 1 of the check (a threshold broken) fails its task, which is what alerts.
Deploy: copy into the DAGs folder of an Airflow with the provider and skewtrace installed.
"""
import datetime

from airflow import DAG
from airflow.operators.bash import BashOperator
from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator
from airflow.providers.google.cloud.operators.dataflow import DataflowConfiguration

FEATURES_OPTIONS = {
    "input_dir": "gs://example-bucket/skewtrace/ingest/{{ ds }}",
    "output_dir": "gs://example-bucket/skewtrace/offline/{{ ds }}",
    "profile": "gs://example-bucket/skewtrace/profiles/offline.yaml",
    "transform_module": "transforms.taxi",
    "temp_location": "gs://example-bucket/tmp",
    "setup_file": "/opt/skewtrace/setup.py",
    "overwrite": True,
}

CHECK_ARGS = ["check", "--config", "/etc/skewtrace/nightly.yaml", "--date", "{{ ds }}"]

with DAG(dag_id="skewtrace_nightly", schedule="30 2 * * *",
         start_date=datetime.datetime(2026, 12, 1), catchup=False,
         default_args={"retries": 0}) as dag:
  features = BeamRunPythonPipelineOperator(
      task_id="offline_features",
      py_file="pipelines.features",
      py_options=["-m"],
      runner="DataflowRunner",
      pipeline_options=FEATURES_OPTIONS,
      dataflow_config=DataflowConfiguration(job_name="skewtrace-features-{{ ds_nodash }}",
                                            project_id="example-project",
                                            location="us-central1"),
  )
  check = BashOperator(task_id="skew_check", bash_command="skewtrace " + " ".join(CHECK_ARGS))
  features >> check
