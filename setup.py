"""skewtrace: find where offline (training) and production (serving) features part ways.

This file is also what Beam stages with --setup_file on Dataflow, so it lists the
runtime dependencies with exact pins: the same versions on the launcher and on workers
keep fingerprints and shard bytes identical.
"""
import setuptools

REQUIRED = [
    "apache-beam[gcp]==2.77.0",
    "tensorflow==2.21.0",
    "tensorflow-transform==1.21.0",
    "tfx-bsl==1.21.0",
    "tensorflow-metadata==1.21.0",
    "tensorflow-serving-api==2.19.1",  # ingest --preset tf_serving: the PredictionLog protos
    "pyarrow==25.0.1",
    "numpy==2.4.6",
    "xxhash==4.1.0",
    "google-crc32c==1.9.0",
    "numba==0.68.1",
    "jsonschema==4.26.0",
    "PyYAML==6.0.3",
    # replay.api hands tables over as DataFrames; the logger takes one (notebook users)
    "pandas==3.0.6",  # datacompy (bench) requires pandas < 3.1
]

TEST = [
    "pytest==9.2.0",
    "pytest-xdist==3.8.0",  # scripts/test.sh: the suite on every core
    "hypothesis==6.170.15",
    "psutil==7.2.2",
]

# Benchmarks only (bench/replay.py compares against datacompy).
BENCH = [
    "datacompy==1.1.0",
]

setuptools.setup(
    name="skewtrace",
    version="0.1.0",
    description="Stage-by-stage fingerprints and diffs of offline vs production ML features.",
    # manifests ships its JSON Schemas (package data, read through importlib.resources); its
    # deploy/ folder (no __init__.py) and tests/, bench/ stay out. The Dataflow image copies each
    # of these top-level folders (tests/test_wheel.py checks manifests/deploy/dataflow/Dockerfile).
    packages=setuptools.find_packages(include=["transforms", "transforms.*", "pipelines",
                                               "pipelines.*", "replay", "replay.*", "manifests"]),
    package_data={"manifests": ["*.schema.json"]},
    python_requires=">=3.11,<3.12",
    install_requires=REQUIRED,
    extras_require={"test": TEST, "bench": TEST + BENCH},
    entry_points={"console_scripts": ["skewtrace=replay.cli:console"]},
)
