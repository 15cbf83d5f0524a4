#!/usr/bin/env bash
# Runs the whole default test suite. Builds the kernel first if sources changed, so it works
# straight after a clone once scripts/install.sh has run.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
# Incremental: only sources newer than their objects (or any changed header) recompile.
"$PYTHON" setup.py -q build_ext --inplace >/dev/null
exec "$PYTHON" -m pytest -q "$@" tests
