#!/usr/bin/env bash
# The Kubernetes fast tier: builds the control plane if it is not cached (scripts/k8s/build.sh:
# 10-20 minutes the first time on 2 cores, seconds after), then runs the cluster manager's tests
# against a real kube-apiserver with kwok (no kubelet). The default run (scripts/test.sh) skips
# these tests when the binaries are absent; here their absence is a failure. Also runs the
# `cloudburst k8s` command against that control plane (tests/test_k8s_cli*.py).
#   scripts/test_k8s.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
scripts/k8s/build.sh
export CLOUDBURST_K8S_REQUIRED=1
exec "$PYTHON" -m pytest -q "$@" tests/test_k8s_fast.py tests/test_k8s_autoscale.py \
    tests/test_k8s_pod_state.py tests/test_k8s_cli.py tests/test_k8s_cli_units.py
