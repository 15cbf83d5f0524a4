#!/usr/bin/env bash
# Builds the platform's image from the repository's Dockerfile without a Docker daemon:
#   1. a Debian bookworm base made with `debootstrap --variant=minbase` (cached);
#   2. that base committed into a private buildah store as docker.io/library/debian:bookworm;
#   3. `buildah bud --layers` on the Dockerfile, nothing pulled (the layer cache makes a
#      rebuild redo only the steps whose inputs changed);
#   4. an OCI archive for `ctr -n k8s.io image import` (or `docker load` via skopeo).
#
#   scripts/k8s/image.sh [--tag NAME] [--out FILE]
#     --tag  image name (default localhost/cloudburst:dev, what k8s/ runs)
#     --out  the OCI archive (default $CACHE/cloudburst-image.oci.tar)
#   Then: ctr -n k8s.io image import --all-platforms FILE
#
# Cache: $CLOUDBURST_IMAGE_CACHE (default ~/.cache/cloudburst-image). Needs root and the
# Debian packages debootstrap and buildah. Heavy steps run under `nice -n 19`.
# Behind a TLS-intercepting proxy, the machine's CA bundle is mounted for pip's steps only
# (the Dockerfile's PIP_CERT build argument); it is not left in the image.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO="$PWD"

TAG="localhost/cloudburst:dev"
CACHE="${CLOUDBURST_IMAGE_CACHE:-$HOME/.cache/cloudburst-image}"
OUT=""
while (($#)); do
  case "$1" in
    --tag) TAG="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "image.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
OUT="${OUT:-$CACHE/cloudburst-image.oci.tar}"
SUITE=bookworm
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
BASE_TAG="docker.io/library/debian:$SUITE"

die() { echo "image.sh: $*" >&2; exit 1; }
step() { echo "==> [$(( SECONDS - START ))s] $*"; }
START=$SECONDS

[[ $(id -u) -eq 0 ]] || die "debootstrap and buildah need root here; run as root"
for tool in debootstrap buildah; do
  command -v "$tool" >/dev/null || die "$tool is missing: apt-get install -y debootstrap buildah"
done
mkdir -p "$CACHE"
BUILDAH=(buildah --root "$CACHE/buildah/root" --runroot "$CACHE/buildah/run" --storage-driver vfs)

# 1. the Debian base; $BASE.done marks a finished debootstrap (and holds the image id)
BASE="$CACHE/base-$SUITE-minbase"
if [[ -f "$BASE.done" ]]; then
  step "Debian $SUITE base cached ($BASE)"
else
  step "debootstrap --variant=minbase $SUITE (about 30 s to 2 min)"
  rm -rf "$BASE.tmp"
  nice -n 19 debootstrap --variant=minbase "$SUITE" "$BASE.tmp" "$MIRROR" \
      > "$CACHE/debootstrap.log" 2>&1 \
    || { tail -20 "$CACHE/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE/debootstrap.log)"; }
  rm -rf "$BASE" && mv "$BASE.tmp" "$BASE" && : > "$BASE.done"
fi

# 2. the base as a local image (no registry is ever contacted: the build uses --pull=never)
base_id="$(cat "$BASE.done")"
if [[ -n "$base_id" ]] && "${BUILDAH[@]}" inspect --type image "$BASE_TAG" >/dev/null 2>&1; then
  step "base image $BASE_TAG present in the buildah store"
else
  step "committing the base as $BASE_TAG"
  ctr="$("${BUILDAH[@]}" from scratch)" || die "buildah from scratch failed"
  trap '"${BUILDAH[@]}" rm "$ctr" >/dev/null 2>&1 || true' EXIT
  nice -n 19 "${BUILDAH[@]}" copy --quiet "$ctr" "$BASE/" / >/dev/null \
    || die "copying the base into the buildah container failed"
  "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --cmd bash "$ctr"
  "${BUILDAH[@]}" commit --quiet "$ctr" "$BASE_TAG" > "$BASE.done" || die "buildah commit failed"
  "${BUILDAH[@]}" rm "$ctr" >/dev/null; trap - EXIT
fi

# 3. the Dockerfile, unchanged; buildah's layer cache skips steps whose inputs are unchanged
step "buildah bud $REPO/Dockerfile -> $TAG (cold: ~5 min on 2 cores; every step cached: ~2 min, vfs copies layers)"
CA_ARGS=()
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
  CA_ARGS=(-v /etc/ssl/certs/ca-certificates.crt:/run/host-ca.crt:ro
           --build-arg PIP_CERT=/run/host-ca.crt)
fi
nice -n 19 "${BUILDAH[@]}" bud --pull=never --isolation=chroot --layers "${CA_ARGS[@]}" \
    -t "$TAG" -f Dockerfile . > "$CACHE/build.log" 2>&1 \
  || { tail -30 "$CACHE/build.log" >&2; die "the image build failed (log: $CACHE/build.log)"; }
grep -E '^STEP|Using cache' "$CACHE/build.log" | sed 's/^/    /' | cut -c1-110

# 4. an OCI archive (a tar of an OCI layout), ready for ctr import
step "writing the OCI archive $OUT"
rm -f "$OUT.tmp"
nice -n 19 "${BUILDAH[@]}" push --quiet "$TAG" "oci-archive:$OUT.tmp:$TAG" \
  || die "buildah push to an OCI archive failed"
mv "$OUT.tmp" "$OUT"
# the images of earlier builds, untagged by this one, are not kept (1.2 GB each with vfs: a
# day of builds filled the disk); the layers the next build reuses are kept
nice -n 19 "${BUILDAH[@]}" rmi --prune > /dev/null 2>&1 \
  || echo "image.sh: could not prune earlier images in $CACHE/buildah (its disk use grows)" >&2
step "done: $TAG, $(du -h "$OUT" | cut -f1) in $OUT
    import it: ctr -n k8s.io image import --all-platforms $OUT"
