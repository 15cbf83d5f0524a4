#!/usr/bin/env bash
# Runs the whole default test suite. Builds the kernel first if sources changed, so it works
# straight after a clone once scripts/install.sh has run.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
# Incremental: only sources newer than their objects (or any changed header) recompile.
"$PYTHON" setup.py -q build_ext --inplace >/dev/null
# The Kubernetes fast tier (marked k8s_tier) is one of the slow tiers: scripts/test_k8s.sh.
exec "$PYTHON" -m pytest -q -m "not slow and not k8s_tier" "$@" tests
