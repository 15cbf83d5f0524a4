#!/usr/bin/env bash
# The slow test tiers, on a real Kubernetes built on this machine (CI runs this after
# scripts/test.sh):
#   0. the tests marked `slow` (about 10 s or more each: stalls, churn, autoscaling, kills), which
#      the default suite (scripts/test.sh) leaves out;
#   1. what they need: system packages and a Go toolchain (scripts/install.sh --k8s);
#   2. the Kubernetes binaries, built from the Go module proxy into ~/.cache/cloudburst-k8s
#      (scripts/k8s/build.sh --with-kubelet; 15-25 minutes cold on 2 cores, seconds cached);
#   3. the fast tier against a real kube-apiserver (scripts/test_k8s.sh);
#   4. the platform's image from the Dockerfile (scripts/k8s/image.sh; ~10 minutes cold,
#      minutes when only the code changed);
#   5. the platform deployed as real pods, end to end (scripts/k8s/test_real.sh --e2e).
# Needs root (containerd, the kubelet, buildah). Each step prints its duration.
#   scripts/test_slow.sh
set -euo pipefail
cd "$(dirname "$0")/.."
START=$SECONDS
step() { echo "==> [test_slow +$(( SECONDS - START ))s] $*"; }
[[ $(id -u) -eq 0 ]] || { echo "test_slow.sh: needs root (containerd, kubelet, buildah)" >&2; exit 1; }

step "tests marked slow"
"${PYTHON:-python3}" -m pytest -q -m slow tests
step "installing what the Kubernetes tiers need"
scripts/install.sh --k8s
GO="$(scripts/k8s/go.sh)"
export GO
step "Kubernetes binaries (Go: $GO)"
scripts/k8s/build.sh --with-kubelet
step "fast tier"
scripts/test_k8s.sh
step "image"
scripts/k8s/image.sh
step "real cluster, end to end"
scripts/k8s/test_real.sh --e2e
step "slow tiers passed"
