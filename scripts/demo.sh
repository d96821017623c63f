#!/usr/bin/env bash
# The demo: sets up .venv from nothing if needed, then on DirectRunner ingests the bundled
# Chicago taxi sample, verifies it, and computes its TF Transform features with a fingerprint
# of every record after every stage. Output in out/demo/ (replaced on each run).
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/env.sh"
out=out/demo
python -m pipelines.ingest --input data/chicago_taxi/data.csv --output_dir "$out/ingest" \
  --schema data/chicago_taxi/schema.pbtxt --num_shards 4 --overwrite "$@"
python -m pipelines.verify "$out/ingest"
python -m pipelines.features --input_dir "$out/ingest" --output_dir "$out/features" \
  --transform_module transforms.taxi --profile profiles/offline.yaml --overwrite "$@"
