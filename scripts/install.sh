#!/usr/bin/env bash
# Installs everything this platform needs on a fresh Debian 12 machine and builds it.
#   scripts/install.sh            system packages, pinned Python deps, build (editable install)
#   scripts/install.sh --no-apt   skip system packages (they are already there)
# Safe to run again: every step is idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

SYSTEM_PACKAGES=(
  build-essential pkg-config
  libzmq3-dev cppzmq-dev            # ZeroMQ for the C++ kernel
  libprotobuf-dev protobuf-compiler  # wire schema; C++ code must match Debian's libprotobuf
  librocksdb-dev                     # the disk tier: one RocksDB per disk worker thread
  redis-server redis-tools           # the peer the KVS benchmark runs against
)

if [[ "${1:-}" != "--no-apt" ]]; then
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
echo "==> installed"
