#!/usr/bin/env bash
# The real-cluster test tier: a real kubelet + containerd + runc on this machine, with the
# control plane of tests/k8s_controlplane.py (no kwok) and pod networking (bridge CNI on cb-br0 with
# pods in 10.244.0.0/24, kube-proxy in iptables mode for Services in 10.96.0.0/24, CoreDNS for
# cluster.local on the bridge address 10.244.0.1), runs the project's image as real pods.
#
#   scripts/k8s/test_real.sh [--e2e]            the default: the platform end to end
#   scripts/k8s/test_real.sh --quick [--deployment]   the quick checks
#
# --e2e (scripts/k8s/real_e2e.py): Secrets from `cloudburst keys`, `kubectl apply -k
#   scripts/k8s/e2e` (k8s/ with a test overlay), every Deployment Available, a pod's mounted
#   ServiceAccount token used against the `kubernetes` Service, a DAG and a causal DAG from
#   this machine through the scheduler Service, Anna puts/gets through the routing Service,
#   then the anna-memory pod's process is killed: routing drops it, a new pod joins, and what
#   survives is checked; then no single point of failure (real_ha.py): under load from a pod,
#   a routing pod killed; with --ha all also a scheduler pod killed, every tier upgraded, and
#   a disk pod restarted keeping its keys (not all passing yet). Prints each step's time and
#   a summary.
# --quick: a pod `anna demo` (restartPolicy Never) must reach Succeeded and its log (through
#   the apiserver) contain "demo done"; with --deployment a 1-replica Deployment's pod is
#   deleted and must be replaced by a new Running pod. ~45 s.
#
# Needs root, the binaries of `scripts/k8s/build.sh --with-kubelet` (kubelet, kube-proxy,
# CoreDNS), the image archive of scripts/k8s/image.sh ($CLOUDBURST_IMAGE_TAR, default
# ~/.cache/cloudburst-image/cloudburst-image.oci.tar; rebuild it after changing code that runs
# in pods), Debian packages containerd runc containernetworking-plugins iptables conntrack,
# and gcc + umoci for the pause image (built once, cached). Everything it starts or changes
# is undone on exit, failure or Ctrl-C (see scripts/k8s/real_cluster.py). Not part of the
# default test suite.
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '2,29p' "$0"; exit 0 ;; esac
cd "$(dirname "$0")/../.."
START=$SECONDS
say() { echo "[$(date +%H:%M:%S) +$(( SECONDS - START ))s] $*"; }
die() { echo "test_real.sh: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "needs root (containerd, kubelet)"
for t in containerd runc ctr kubectl gcc umoci iptables ip; do
  command -v "$t" >/dev/null || die "$t missing: apt-get install -y containerd runc containernetworking-plugins iptables conntrack socat gcc umoci"
done
for p in loopback bridge host-local portmap; do
  [[ -x /usr/lib/cni/$p ]] || die "CNI plugin $p missing: apt-get install -y containernetworking-plugins"
done
IMAGE_TAR="${CLOUDBURST_IMAGE_TAR:-$HOME/.cache/cloudburst-image/cloudburst-image.oci.tar}"
[[ -f "$IMAGE_TAR" ]] || die "no image archive $IMAGE_TAR: run scripts/k8s/image.sh"

# The pause image: Kubernetes' own pause.c (from the Go module cache), static, as an OCI image.
PAUSE_CACHE="$HOME/.cache/cloudburst-k8s/pause-3.10"
PAUSE_TAR="$PAUSE_CACHE/pause.oci.tar"
if [[ ! -f "$PAUSE_TAR" ]]; then
  say "building the pause image"
  SRC=$(ls -d "${GOMODCACHE:-$HOME/go/pkg/mod}"/k8s.io/kubernetes@v1.36.3/build/pause/linux/pause.c 2>/dev/null | head -1)
  [[ -n "$SRC" ]] || die "pause.c not found in the Go module cache (run scripts/k8s/build.sh)"
  rm -rf "$PAUSE_CACHE" && mkdir -p "$PAUSE_CACHE"
  gcc -O2 -static -DVERSION=3.10 -o "$PAUSE_CACHE/pause" "$SRC"
  ( cd "$PAUSE_CACHE"
    umoci init --layout layout
    umoci new --image layout:3.10
    umoci unpack --rootless --image layout:3.10 bundle >/dev/null
    install -m 0755 pause bundle/rootfs/pause
    umoci repack --image layout:3.10 bundle
    umoci config --image layout:3.10 --config.entrypoint /pause --config.user 65535:65535
    tar -C layout -cf pause.oci.tar . )
fi

say "running scripts/k8s/real_cluster.py"
PY_PID=""
cleanup() { [[ -n "$PY_PID" ]] && kill -TERM "$PY_PID" 2>/dev/null && wait "$PY_PID" 2>/dev/null; true; }
trap cleanup EXIT
trap 'exit 130' INT TERM
[[ $# -eq 0 ]] && set -- --e2e
python3 scripts/k8s/real_cluster.py --image-tar "$IMAGE_TAR" --pause-tar "$PAUSE_TAR" "$@" &
PY_PID=$!
set +e; wait "$PY_PID"; rc=$?; set -e
PY_PID=""
say "exit status $rc"
exit $rc
