#!/usr/bin/env bash
# The test command: sets up .venv from nothing if needed, then runs the whole suite, one pytest
# worker per logical CPU (pytest-xdist), each test module whole on one worker (--dist loadfile:
# a module's fixtures are built once). Extra arguments go to pytest (-n 0: one process).
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/env.sh"
exec python -m pytest -q -n logical --dist loadfile tests "$@"
