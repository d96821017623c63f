#!/usr/bin/env bash
# The test command: sets up .venv from nothing if needed, then runs the whole suite.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/env.sh"
exec python -m pytest -q tests "$@"
