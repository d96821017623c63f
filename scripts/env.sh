#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment in .venv from nothing.
# Sourced by scripts/demo.sh and scripts/test.sh; safe to run again: it reinstalls
# only when setup.py changed since the last install.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
stamp="$venv/.skewtrace-installed"
want="$(sha256sum "$root/setup.py" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ]; then
  python3.11 -m venv "$venv" 2>/dev/null || python3 -m venv "$venv"
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  "$venv/bin/python" -m pip install --quiet --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
  "$venv/bin/python" -m pip install --quiet -e "$root[test]" 2>&1 | grep -v '^WARNING: Location' || true
  "$venv/bin/python" -c "import apache_beam, tensorflow_transform, tfx_bsl, xxhash, pytest, hypothesis" \
    || { echo "environment install failed" >&2; exit 1; }
  echo "$want" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
export PYTHONHASHSEED=0
export TF_CPP_MIN_LOG_LEVEL=2
cd "$root"
