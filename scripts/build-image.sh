#!/usr/bin/env bash
# Builds metainit's image for linux/amd64 and linux/arm64, pushes both under one
# multi-architecture tag to your registry, and writes each install form set to the pushed
# image by digest (docs/src/install/image.md):
#
#   bash scripts/build-image.sh [--platforms amd64,arm64] [--out DIR] [--binaries DIR] [--insecure] REPOSITORY[:TAG]
#
#   REPOSITORY   where to push, e.g. registry.example.com/platform/metainit; TAG defaults to
#                the crate's version (Cargo.toml)
#   --platforms  amd64,arm64 (the default), amd64 or arm64
#   --out DIR    where the forms are written (default: target/image)
#   --binaries DIR  also keep each architecture's static binary and its SBOM, as
#                DIR/linux-ARCH/metainit and DIR/linux-ARCH/metainit.cdx.json
#   --insecure   the registry speaks plain HTTP, or its certificate is not trusted here
#                (buildah's --tls-verify=false)
#
# With DIGEST the pushed list's, it writes:
#   DIR/metainit.yaml                  manifests/metainit.yaml, image: REPOSITORY@DIGEST
#   DIR/deployment/kustomization.yaml  manifests/deployment, images: newName and digest
#   DIR/values.yaml                    the chart's image.repository and image.digest
#   DIR/image                          REPOSITORY@DIGEST
#
# No base image is pulled: each architecture's static binary is built here
# (scripts/build-static.sh, cross-compiled with cargo-zigbuild) and copied FROM scratch as the
# Dockerfile's final stage says (scripts/lib/image.sh). Needs buildah (as root, or run under
# `buildah unshare`), python3 and what scripts/build-static.sh needs (cargo, both musl
# targets, cargo-zigbuild with zig, cargo-cyclonedx). Log in first if the registry asks:
# `buildah login REGISTRY`. buildah's storage is a temporary directory (vfs, chroot
# isolation): no daemon, no configuration, nothing left behind.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib/image.sh
source "$here/scripts/lib/image.sh"
# shellcheck source=scripts/lib/revision.sh
source "$here/scripts/lib/revision.sh"
# shellcheck source=scripts/lib/logging.sh
source "$here/scripts/lib/logging.sh"
log_init build-image

platforms=(amd64 arm64)
out=$here/target/image
binaries=
tls_verify=true
reference=

usage() {
  [[ -z ${1:-} ]] || say "$1"
  echo "usage: build-image.sh [--platforms amd64,arm64] [--out DIR] [--binaries DIR] [--insecure] REPOSITORY[:TAG]" >&2
  exit 2
}

parse() {
  while (($#)); do
    case $1 in
      --platforms) [[ $# -ge 2 ]] || usage "--platforms needs a value"; IFS=, read -ra platforms <<<"$2"; shift ;;
      --platforms=*) IFS=, read -ra platforms <<<"${1#*=}" ;;
      --out) [[ $# -ge 2 ]] || usage "--out needs a directory"; out=$2; shift ;;
      --out=*) out=${1#*=} ;;
      --binaries) [[ $# -ge 2 ]] || usage "--binaries needs a directory"; binaries=$2; shift ;;
      --insecure) tls_verify=false ;;
      -h | --help) sed -n '2,29s/^# \{0,1\}//p' "$0"; exit 0 ;;
      -*) usage "unknown option $1" ;;
      *) [[ -z $reference ]] || usage "one REPOSITORY, not '$reference' and '$1'"; reference=$1 ;;
    esac
    shift
  done
  [[ -n $reference ]] || usage "name the repository to push to, e.g. registry.example.com/metainit"
  local p
  ((${#platforms[@]})) || usage "--platforms names none (amd64,arm64)"
  for p in "${platforms[@]}"; do
    [[ $p == amd64 || $p == arm64 ]] || usage "unsupported platform '$p' (amd64 or arm64)"
  done
}

# Splits REPOSITORY[:TAG] (a tag is a ':' after the last '/'), checking what a registry accepts.
split_reference() {
  [[ $reference != *@* ]] || usage "'$reference' has a digest: give REPOSITORY[:TAG], the digest is the push's"
  repository=$reference tag=
  if [[ ${reference##*/} == *:* ]]; then
    repository=${reference%:*} tag=${reference##*:}
  fi
  local component='[a-z0-9]+([._-]+[a-z0-9]+)*'
  [[ $repository =~ ^([A-Za-z0-9.-]+(:[0-9]+)?/)?$component(/$component)*$ ]] \
    || usage "'$repository' is not a repository name: lowercase letters, digits, '.', '_', '-' and '/' after the registry's host[:port]"
  [[ -z $tag || $tag =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] \
    || usage "'$tag' is not a tag: up to 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'"
  version=$(crate_version)
  [[ -n $tag ]] || tag=$version
}

check_tools() {
  PATH=$PATH:${XDG_CACHE_HOME:-$HOME/.cache}/metainit/tools/bin
  local tool
  for tool in buildah cargo cargo-zigbuild cargo-cyclonedx python3; do
    command -v "$tool" >/dev/null || die "$tool not found (docs/src/install/image.md says what to install)"
  done
}

# One image per platform, in the temporary storage, tagged localhost/metainit-build:ARCH.
build_images() {
  local arch revision source
  revision=$(revision)
  source=$(crate_field repository)
  for arch in "${platforms[@]}"; do
    say "building linux/$arch (metainit $version, revision ${revision:0:12})"
    METAINIT_REVISION=$revision bash "$here/scripts/build-static.sh" "$arch" "$tmp/bin/$arch/metainit" >&2
    image_build "$arch" "$tmp/bin/$arch/metainit" "localhost/metainit-build:$arch" \
      "$tmp/context-$arch" "$version" "$revision" "$source"
    if [[ -n $binaries ]]; then
      install -D -m 0755 -t "$binaries/linux-$arch" "$tmp/bin/$arch/metainit"
      install -m 0644 -t "$binaries/linux-$arch" "$tmp/bin/$arch/metainit.cdx.json"
    fi
  done
}

# The list of both, pushed with its images; prints REPOSITORY@DIGEST.
push_list() {
  local arch
  "${B[@]}" manifest create localhost/metainit-build:list >/dev/null
  for arch in "${platforms[@]}"; do
    "${B[@]}" manifest add localhost/metainit-build:list "localhost/metainit-build:$arch" >/dev/null
  done
  say "pushing $repository:$tag (${platforms[*]})"
  "${B[@]}" manifest push --quiet --all --tls-verify="$tls_verify" --digestfile "$tmp/digest" \
    localhost/metainit-build:list "docker://$repository:$tag" >&2
  [[ $(<"$tmp/digest") =~ ^sha256:[0-9a-f]{64}$ ]] \
    || die "buildah wrote no digest for the push: '$(<"$tmp/digest")'"
  echo "$repository@$(<"$tmp/digest")"
}

# Each form, set to IMAGE (REPOSITORY@DIGEST).
write_forms() {
  local image=$1 base
  mkdir -p "$out/deployment"
  sed "s|^\(    image: \).*|\1$image|" "$here/manifests/metainit.yaml" >"$out/metainit.yaml"
  grep -qx "    image: $image" "$out/metainit.yaml" \
    || die "manifests/metainit.yaml has no '    image:' line to set"
  base=$(python3 -c 'import os, sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' \
    "$here/manifests/deployment" "$out/deployment")
  cat >"$out/deployment/kustomization.yaml" <<EOF
# manifests/deployment with the image scripts/build-image.sh pushed.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- $base
images:
- name: ghcr.io/metainit/metainit
  newName: ${image%@*}
  digest: ${image#*@}
EOF
  printf 'image:\n  repository: %s\n  digest: %s\n' "${image%@*}" "${image#*@}" >"$out/values.yaml"
  echo "$image" >"$out/image"
}

say_next() {
  cat <<EOF
Pushed $1
Each form, set to it (in $out):
  static pod:  cp $out/metainit.yaml into each control-plane node's /etc/kubernetes/manifests/
  Deployment:  kubectl apply -k $out/deployment
  Helm:        helm install metainit charts/metainit -n kube-system -f $out/values.yaml
EOF
}

cleanup() {
  if [[ -n ${tmp:-} ]]; then
    "${B[@]}" rmi --all --force >/dev/null 2>&1 || true
    if grep -q " $tmp/" /proc/mounts; then
      say "left $tmp in place: something is still mounted under it"
    else
      rm -rf --one-file-system "$tmp"
    fi
  fi
}

main() {
  parse "$@"
  split_reference
  check_tools
  tmp=$(mktemp -d)
  B=(buildah --root "$tmp/storage" --runroot "$tmp/run" --storage-driver vfs)
  trap cleanup EXIT
  build_images
  local image
  image=$(push_list)
  out=$(mkdir -p "$out" && cd "$out" && pwd)
  write_forms "$image"
  say_next "$image"
}

main "$@"
