#!/usr/bin/env bash
# Build the skewtrace features Flex Template and launch one run on Dataflow.
# Needs gcloud, a project with Dataflow enabled, and an Artifact Registry repository.
set -euo pipefail
PROJECT="${PROJECT:?set PROJECT}" REGION="${REGION:-us-central1}" BUCKET="${BUCKET:?set BUCKET}"
IMAGE="$REGION-docker.pkg.dev/$PROJECT/skewtrace/features:0.1.0"
# The build context is the repository root (the Dockerfile copies setup.py and the packages);
# gcloud uploads it without what .gitignore lists (.venv/, build/, ...).
cd "$(dirname "$0")/../../.."
# --config and --tag are mutually exclusive, and --config takes a file: the Dockerfile is not at
# the root, so a one-step build config names it.
config="$(mktemp)"
trap 'rm -f "$config"' EXIT
cat > "$config" <<YAML
steps:
- name: gcr.io/cloud-builders/docker
  args: [build, -f, manifests/deploy/dataflow/Dockerfile, -t, "$IMAGE", .]
images: ["$IMAGE"]
YAML
gcloud builds submit --project "$PROJECT" --config "$config" .
gcloud dataflow flex-template build "gs://$BUCKET/templates/skewtrace-features.json" \
  --project "$PROJECT" --image "$IMAGE" --sdk-language PYTHON \
  --metadata-file manifests/deploy/dataflow/features-metadata.json
# The same image runs the workers (sdk_container_image): launcher and workers share every pin.
gcloud dataflow flex-template run "skewtrace-features-$(date -u +%Y%m%d)" \
  --project "$PROJECT" \
  --template-file-gcs-location "gs://$BUCKET/templates/skewtrace-features.json" \
  --region "$REGION" \
  --parameters input_dir="gs://$BUCKET/skewtrace/ingest/latest" \
  --parameters output_dir="gs://$BUCKET/skewtrace/offline/latest" \
  --parameters profile="gs://$BUCKET/skewtrace/profiles/offline.yaml" \
  --parameters transform_module=transforms.taxi \
  --parameters sdk_container_image="$IMAGE"
