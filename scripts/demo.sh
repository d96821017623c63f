#!/usr/bin/env bash
# The demo: sets up .venv from nothing if needed, then on DirectRunner runs the whole chain on
# the bundled Chicago taxi sample: ingest + verify, offline features, a production run with one
# injected fault (its windows start half an hour later), and the diff that names the stage.
# Output in out/demo/ (replaced on each run); extra arguments go to every Beam job.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/env.sh"
out=out/demo
mkdir -p "$out"
skewtrace ingest --input data/chicago_taxi/data.csv --output_dir "$out/ingest" \
  --schema data/chicago_taxi/schema.pbtxt --num_shards 4 --overwrite "$@"
skewtrace verify "$out/ingest"
skewtrace features --input_dir "$out/ingest" --output_dir "$out/offline" \
  --transform_module transforms.taxi --profile profiles/offline.yaml --overwrite "$@"
# The injected fault: production's window offset drifted to 1800 s.
sed 's/offset_seconds: 0$/offset_seconds: 1800/' profiles/production.yaml > "$out/production.yaml"
grep -q 'offset_seconds: 1800' "$out/production.yaml"
skewtrace features --input_dir "$out/ingest" --output_dir "$out/production" \
  --transform_module transforms.taxi --profile "$out/production.yaml" --overwrite "$@"
code=0
skewtrace diff --offline "$out/offline" --production "$out/production" \
  --output_dir "$out/diff" --overwrite "$@" || code=$?
echo "diff exit code: $code (1 = divergence found, as injected); open $out/diff/report.html"
[ "$code" -eq 1 ]
