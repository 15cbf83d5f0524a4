#!/usr/bin/env bash
# Prints the path of a Go toolchain >= 1.25 (what the Kubernetes v1.36 build needs), fetching
# one if this machine has none:
#   1. $GO, else `go` on PATH, else /usr/local/go/bin/go, if it is new enough;
#   2. else the toolchain cached in ${CLOUDBURST_GO_CACHE:-~/.cache/cloudburst-go}/go<VERSION>;
#   3. else that toolchain downloaded from the Go module proxy ($GOPROXY's first entry,
#      default proxy.golang.org), as the `go` command itself does for GOTOOLCHAIN: the module
#      golang.org/toolchain@v0.0.1-go<VERSION>.linux-amd64, whose zip is a whole Go tree.
#      Debian 12's golang-go (1.19) is too old to switch toolchains itself.
#
#   scripts/k8s/go.sh            print the path of the `go` binary (progress on stderr)
#   GO_VERSION=1.26.8 scripts/k8s/go.sh
set -euo pipefail
VERSION="${GO_VERSION:-1.26.8}"
MIN_MINOR=25
CACHE="${CLOUDBURST_GO_CACHE:-$HOME/.cache/cloudburst-go}"

new_enough() {  # $1: a go binary
  local v
  v=$("$1" env GOVERSION 2>/dev/null) || return 1        # go1.26.8
  [[ $v =~ ^go1\.([0-9]+) ]] || return 1
  (( BASH_REMATCH[1] >= MIN_MINOR ))
}

for candidate in "${GO:-}" "$(command -v go || true)" /usr/local/go/bin/go; do
  if [[ -n "$candidate" && -x "$candidate" ]] && GOTOOLCHAIN=local new_enough "$candidate"; then
    echo "$candidate"; exit 0
  fi
done

DEST="$CACHE/go$VERSION"
if [[ ! -x "$DEST/bin/go" ]]; then
  case "$(uname -m)" in
    x86_64) ARCH=amd64 ;;
    aarch64) ARCH=arm64 ;;
    *) echo "go.sh: no Go toolchain for $(uname -m)" >&2; exit 1 ;;
  esac
  PROXY="${GOPROXY:-https://proxy.golang.org}"; PROXY="${PROXY%%,*}"; PROXY="${PROXY%%|*}"
  [[ "$PROXY" == "direct" || "$PROXY" == "off" ]] && PROXY="https://proxy.golang.org"
  URL="$PROXY/golang.org/toolchain/@v/v0.0.1-go$VERSION.linux-$ARCH.zip"
  echo "go.sh: fetching Go $VERSION from $URL" >&2
  TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
  curl -fsSL --retry 3 --max-time 600 -o "$TMP/go.zip" "$URL" \
    || { echo "go.sh: downloading $URL failed" >&2; exit 1; }
  unzip -q "$TMP/go.zip" -d "$TMP/x"
  # The zip holds golang.org/toolchain@v0.0.1-go<VERSION>.linux-<ARCH>/, a full Go tree.
  SRC="$TMP/x/golang.org/toolchain@v0.0.1-go$VERSION.linux-$ARCH"
  chmod +x "$SRC"/bin/* "$SRC"/pkg/tool/*/* 2>/dev/null || true
  [[ -x "$SRC/bin/go" ]] || { echo "go.sh: $URL holds no bin/go" >&2; exit 1; }
  chmod -R u+w "$SRC"
  mkdir -p "$CACHE" && rm -rf "$DEST" && mv "$SRC" "$DEST"
fi
GOTOOLCHAIN=local new_enough "$DEST/bin/go" || { echo "go.sh: $DEST/bin/go is not Go >= 1.$MIN_MINOR" >&2; exit 1; }
echo "$DEST/bin/go"
