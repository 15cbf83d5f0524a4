#!/usr/bin/env bash
# Builds the Kubernetes control plane the k8s test tiers run against, from the Go module proxy,
# into a cache outside the checkout:
#
#   ${CLOUDBURST_K8S_CACHE:-~/.cache/cloudburst-k8s}/k8s-<K8S>-etcd-<ETCD>-kwok-<KWOK>/
#       bin/{kube-apiserver,kube-controller-manager,kube-scheduler,etcd,kwok}
#       bin/{kubelet,kube-proxy,coredns}  with --with-kubelet (the real-cluster tier)
#       coredns-<COREDNS>/coredns        CoreDNS, keyed by its own version (bin/coredns links it)
#       stages/kwok.yaml      kwok's node and pod stages (from its module)
#       BUILT                 written last: the build finished
#
#   scripts/k8s/build.sh             build what is missing (~0.01 s when cached)
#   scripts/k8s/build.sh --print-dir print the cache directory and exit
#   scripts/k8s/build.sh --with-kubelet  also build the kubelet, kube-proxy and CoreDNS
#                                        (the real-cluster tier, scripts/k8s/test_real.sh)
#
# No release binaries are downloaded (kubernetes.io downloads are not reachable in CI
# sandboxes); everything is `go build` from the module proxy. A cold build takes 10-20 minutes on
# 2 cores and ~2 GB of RAM; it runs under `nice -n 19`. Needs Go >= 1.25 (GO=... to choose).
set -euo pipefail

K8S_VERSION="v1.36.3"     # k8s.io/kubernetes; staging modules are v0.36.3
ETCD_VERSION="v3.6.10"    # go.etcd.io/etcd/server/v3 (Debian's 3.4 breaks kwok)
KWOK_VERSION="v0.8.0"     # sigs.k8s.io/kwok
COREDNS_VERSION="v1.14.7" # github.com/coredns/coredns (cluster DNS of the real-cluster tier)
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
CACHE_ROOT="${CLOUDBURST_K8S_CACHE:-$HOME/.cache/cloudburst-k8s}"
DIR="$CACHE_ROOT/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION"
BIN="$DIR/bin"

WITH_KUBELET=0
for arg in "$@"; do
  case "$arg" in
    --print-dir) echo "$DIR"; exit 0 ;;
    --with-kubelet) WITH_KUBELET=1 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done

export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
NICE=(nice -n 19)
log() { echo "==> [$(date +%H:%M:%S)] $*"; }
mkdir -p "$BIN" "$DIR/src"

components=(kube-apiserver kube-controller-manager kube-scheduler)
((WITH_KUBELET)) && components+=(kubelet kube-proxy)
need=()
for c in "${components[@]}"; do [[ -x "$BIN/$c" ]] || need+=("$c"); done

if ((${#need[@]})); then
  log "kubernetes $K8S_VERSION: building ${need[*]} (cold caches: 8-16 minutes)"
  src="$DIR/src/kubernetes"
  mkdir -p "$src"
  # the cmd packages the wrapper module builds; rewritten every time so that a cache tidied
  # before kube-proxy was added builds it too (-mod=mod adds what it needs to go.mod)
  cat > "$src/tools.go" <<'EOF'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
EOF
  if [[ ! -f "$src/.tidy-done" ]]; then
    log "fetching k8s.io/kubernetes@$K8S_VERSION's go.mod for its staging modules"
    gomod="$(cd "$src" && "$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
             | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
    [[ -f "$gomod" ]] || { echo "could not download k8s.io/kubernetes@$K8S_VERSION" >&2; exit 1; }
    staging_version="v0.${K8S_VERSION#v1.}"
    {
      echo "module cloudburst.local/k8sbuild"
      echo
      echo "go $("$GO" env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')"
      echo
      echo "require k8s.io/kubernetes $K8S_VERSION"
      echo
      # Every k8s.io/<name> => ./staging/... becomes the published module at v0.<minor>.<patch>.
      grep -E '^\s*k8s\.io/[^ ]+ => \./staging/' "$gomod" | awk '{print $1}' \
        | grep -v sample-cli-plugin \
        | while read -r m; do echo "replace $m => $m $staging_version"; done
    } > "$src/go.mod"
    log "go mod tidy (downloads ~1 GB of modules on a cold cache)"
    (cd "$src" && "${NICE[@]}" "$GO" mod tidy && touch .tidy-done)
  fi
  ldflags=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1"
    ldflags+=" -X $pkg.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"
    ldflags+=" -X $pkg.gitTreeState=clean"
  done
  pkgs=()
  for c in "${need[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  log "go build ${need[*]}"
  t0=$SECONDS
  (cd "$src" && "${NICE[@]}" "$GO" build -trimpath -ldflags "-s -w $ldflags" -o "$BIN/" "${pkgs[@]}")
  log "kubernetes built in $((SECONDS - t0)) s"
else
  log "kubernetes $K8S_VERSION: cached"
fi

if [[ ! -x "$BIN/etcd" ]]; then
  log "etcd $ETCD_VERSION: building (cold: ~2.5 minutes)"
  src="$DIR/src/etcd"
  mkdir -p "$src"
  cat > "$src/main.go" <<'EOF'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
  [[ -f "$src/go.mod" ]] || (cd "$src" && "$GO" mod init cloudburst.local/etcdbuild 2>/dev/null)
  if [[ ! -f "$src/.tidy-done" ]]; then
    (cd "$src" && "$GO" get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" \
      && "${NICE[@]}" "$GO" mod tidy && touch .tidy-done)
  fi
  t0=$SECONDS
  (cd "$src" && "${NICE[@]}" "$GO" build -trimpath -ldflags "-s -w" -o "$BIN/etcd" .)
  log "etcd built in $((SECONDS - t0)) s"
else
  log "etcd $ETCD_VERSION: cached"
fi

if [[ ! -x "$BIN/kwok" || ! -f "$DIR/stages/kwok.yaml" ]]; then
  log "kwok $KWOK_VERSION: building"
  t0=$SECONDS
  GOBIN="$BIN" "${NICE[@]}" "$GO" install -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  mod="$("$GO" env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION"
  mkdir -p "$DIR/stages"
  {
    for f in "$mod"/kustomize/stage/node/fast/*.yaml "$mod"/kustomize/stage/node/heartbeat/*.yaml \
             "$mod"/kustomize/stage/pod/fast/*.yaml; do
      case "$f" in */kustomization.yaml) continue ;; esac
      echo "---"; cat "$f"
    done
  } > "$DIR/stages/kwok.yaml.tmp"
  mv "$DIR/stages/kwok.yaml.tmp" "$DIR/stages/kwok.yaml"
  log "kwok built in $((SECONDS - t0)) s"
else
  log "kwok $KWOK_VERSION: cached"
fi

if ((WITH_KUBELET)); then
  cdir="$DIR/coredns-$COREDNS_VERSION"
  if [[ ! -x "$cdir/coredns" ]]; then
    log "coredns $COREDNS_VERSION: building (cold: a few minutes)"
    t0=$SECONDS
    mkdir -p "$cdir"
    GOBIN="$cdir" "${NICE[@]}" "$GO" install -trimpath -ldflags "-s -w" \
      "github.com/coredns/coredns@$COREDNS_VERSION"
    log "coredns built in $((SECONDS - t0)) s"
  else
    log "coredns $COREDNS_VERSION: cached"
  fi
  ln -sfn "../coredns-$COREDNS_VERSION/coredns" "$BIN/coredns"
  components+=(coredns)
fi

for c in "${components[@]}" etcd kwok; do
  [[ -x "$BIN/$c" ]] || { echo "missing after build: $BIN/$c" >&2; exit 1; }
done
echo "$K8S_VERSION $ETCD_VERSION $KWOK_VERSION" > "$DIR/BUILT"
log "ready: $BIN"
