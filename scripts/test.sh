#!/usr/bin/env bash
# Runs the whole default test suite. Builds the kernel first if sources changed, so it works
# straight after a clone once scripts/install.sh has run.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
"$PYTHON" -m pip install -q --no-build-isolation -e . >/dev/null
exec "$PYTHON" -m pytest -q "$@" tests
