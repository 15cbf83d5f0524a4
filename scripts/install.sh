#!/usr/bin/env bash
# Installs everything this platform needs on a fresh Debian 12 machine and builds it.
#   scripts/install.sh            system packages, pinned Python deps, build (editable install)
#   scripts/install.sh --no-apt   skip system packages (they are already there)
#   scripts/install.sh --k8s      also the packages the real-Kubernetes test tier needs
#                                 (containerd, runc, CNI plugins, buildah, ...) and a Go
#                                 toolchain >= 1.25 (scripts/k8s/go.sh); scripts/test_slow.sh
#                                 runs this itself
# Safe to run again: every step is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

SYSTEM_PACKAGES=(
  build-essential pkg-config
  libzmq3-dev cppzmq-dev            # ZeroMQ for the C++ kernel
  libsodium-dev                     # secured client links (the kernel links libsodium)
  libssl-dev                        # OpenSSL: the Redis load generator's TLS client
  libprotobuf-dev protobuf-compiler  # wire schema; C++ code must match Debian's libprotobuf
  librocksdb-dev                     # the disk tier: one RocksDB per disk worker thread
  redis-server redis-tools           # the peer the KVS benchmark runs against
)

# The real-Kubernetes test tier: a kubelet with containerd and runc, a bridge CNI, and the
# image built without a daemon (debootstrap + buildah, umoci for the pause image).
K8S_PACKAGES=(
  containerd runc containernetworking-plugins iptables conntrack socat
  gcc umoci debootstrap buildah curl unzip
)

APT=1
K8S=0
for arg in "$@"; do
  case "$arg" in
    --no-apt) APT=0 ;;
    --k8s) K8S=1 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
((K8S)) && SYSTEM_PACKAGES+=("${K8S_PACKAGES[@]}")

if ((APT)); then
  missing=()
  for pkg in "${SYSTEM_PACKAGES[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    echo "==> installing system packages: ${missing[*]}"
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
  else
    echo "==> system packages present"
  fi
fi

PYTHON="${PYTHON:-python3}"
echo "==> installing pinned Python dependencies"
"$PYTHON" -m pip install -q -r requirements.txt
# pyzmq's wheel bundles its own libsodium, which makes CURVE (every socket is authenticated
# and encrypted by default) about 20x slower than Debian's; build pyzmq against Debian's
# libzmq instead (benchmarks/README.md, "What authentication costs").
want_zmq="$(pkg-config --modversion libzmq)"
have_zmq="$("$PYTHON" -c 'import zmq; print(zmq.zmq_version())' 2>/dev/null || true)"
if [[ "$have_zmq" != "$want_zmq" ]]; then
  echo "==> building pyzmq against Debian's libzmq $want_zmq (was: ${have_zmq:-none})"
  "$PYTHON" -m pip install -q --force-reinstall --no-deps --no-binary pyzmq \
    "$(grep -E '^pyzmq==' requirements.txt | cut -d' ' -f1)"
fi
echo "==> building the Anna kernel and installing the platform (editable)"
"$PYTHON" -m pip install -q --no-build-isolation -e .
if ((K8S)); then
  echo "==> Go toolchain for the Kubernetes tiers: $(scripts/k8s/go.sh)"
fi
echo "==> installed"
