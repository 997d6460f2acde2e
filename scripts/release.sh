#!/usr/bin/env bash
# Makes a release of metainit in one command: the multi-architecture image pushed, the chart
# pushed to an OCI registry, and the release's files written, each set to the pushed image by
# digest (docs/src/install/image.md, "Making a release"):
#
#   bash scripts/release.sh [--image REPOSITORY] [--charts oci://HOST/PATH] [--out DIR]
#                           [--platforms amd64,arm64] [--insecure] VERSION
#
#   VERSION      vX.Y.Z (or X.Y.Z): Cargo.toml's version, which the chart's appVersion must
#                equal; the image is pushed as REPOSITORY:vX.Y.Z, the chart as its own
#                version (Chart.yaml's `version`, bumped with any change to the chart)
#   --image      where the image goes (default: Cargo.toml's [package.metadata.release] image)
#   --charts     where the chart goes (default: Cargo.toml's [package.metadata.release] charts)
#   --out DIR    where the files go (default: target/release/vX.Y.Z); it must not exist
#   --platforms  as scripts/build-image.sh takes it (default amd64,arm64)
#   --insecure   both registries speak plain HTTP (buildah's --tls-verify=false, helm's
#                --plain-http)
#
# The files, in DIR, are the release's assets (what .github/workflows/release.yml attaches):
#   static-pod.yaml                      manifests/metainit.yaml, image REPOSITORY@DIGEST
#   rbac.yaml, rbac-webhooks.yaml, rbac-status.yaml   manifests/rbac*.yaml (the static pod's)
#   metainit.yaml                        the Deployment form, every object in one file
#                                        (`kubectl apply --server-side -f`)
#   kustomization.yaml                   a kustomization over metainit.yaml, for overlays
#   values.yaml                          the chart's image.repository and image.digest
#   metainit-CHART.tgz                   the chart as pushed, its values set to the digest
#   metainit-vX.Y.Z-linux-ARCH.tar.gz    metainit and kubectl-metainit (the Krew archive)
#   metainit-vX.Y.Z-linux-ARCH.cdx.json  each binary's bill of materials (CycloneDX)
#   SHA256SUMS                           `sha256sum -c SHA256SUMS` checks every file
#
# Needs what scripts/build-image.sh needs, and kubectl (its kustomize) and helm (on PATH, else
# scripts/helm.sh builds one). Log in to both registries first if they ask (`buildah login`,
# `helm registry login`). Nothing is written to DIR unless every step succeeded.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib/image.sh
source "$here/scripts/lib/image.sh"

image='' charts='' out='' version=''
insecure=()
platforms=amd64,arm64

# shellcheck source=scripts/lib/logging.sh
source "$here/scripts/lib/logging.sh"
log_init release
usage() {
  [[ -z ${1:-} ]] || say "$1"
  echo "usage: release.sh [--image REPOSITORY] [--charts oci://HOST/PATH] [--out DIR] [--platforms amd64,arm64] [--insecure] VERSION" >&2
  exit 2
}

parse() {
  while (($#)); do
    case $1 in
      --image | --charts | --out | --platforms)
        [[ $# -ge 2 ]] || usage "$1 needs a value"
        printf -v "${1#--}" '%s' "$2"; shift ;;
      --insecure) insecure=(--insecure) ;;
      -h | --help) sed -n '2,31s/^# \{0,1\}//p' "$0"; exit 0 ;;
      -*) usage "unknown option $1" ;;
      *) [[ -z $version ]] || usage "one VERSION, not '$version' and '$1'"; version=${1#v} ;;
    esac
    shift
  done
  [[ -n $version ]] || usage "name the version to release, e.g. v$(crate_version)"
}

# chart_field KEY: a top-level field of charts/metainit/Chart.yaml, its quotes dropped.
chart_field() {
  sed -n "s/^$1: \"\{0,1\}\([^\"]*\)\"\{0,1\}\$/\1/p" "$here/charts/metainit/Chart.yaml"
}

# The version is the crate's and the chart's appVersion; the defaults are Cargo.toml's.
check_version() {
  local crate app
  [[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] \
    || usage "'$version' is not a version: vMAJOR.MINOR.PATCH"
  crate=$(crate_version)
  [[ $version == "$crate" ]] \
    || die "v$version is not Cargo.toml's version ($crate): set [package] version to $version first"
  app=$(chart_field appVersion)
  chart_version=$(chart_field version)
  [[ $app == "$version" ]] \
    || die "charts/metainit/Chart.yaml's appVersion is '$app', not $version: set it first"
  [[ -n $image ]] || image=$(crate_field release.image)
  [[ -n $charts ]] || charts=$(crate_field release.charts)
  [[ $charts == oci://* ]] || usage "--charts '$charts' is not an oci:// location"
  [[ -n $out ]] || out=$here/target/release/v$version
  [[ ! -e $out ]] || die "$out already exists: remove it, or pass --out"
}

check_tools() {
  local tool
  for tool in kubectl sha256sum tar gzip; do
    command -v "$tool" >/dev/null || die "$tool not found"
  done
  helm=$(command -v helm || bash "$here/scripts/helm.sh" path) || die "no helm (scripts/helm.sh could not build one)"
}

# The image, pushed by scripts/build-image.sh; sets $pushed to REPOSITORY@DIGEST.
push_image() {
  bash "$here/scripts/build-image.sh" "${insecure[@]}" --platforms "$platforms" \
    --out "$tmp/forms" --binaries "$tmp/bin" "$image:v$version" >/dev/null
  pushed=$(<"$tmp/forms/image")
}

# The manifests: the static pod and its RBAC, the Deployment form in one file, a
# kustomization over it, the chart's values.
write_manifests() {
  local name
  cp "$tmp/forms/metainit.yaml" "$files/static-pod.yaml"
  for name in rbac rbac-webhooks rbac-status; do
    cp "$here/manifests/$name.yaml" "$files/$name.yaml"
  done
  {
    echo "# metainit v$version as a Deployment in kube-system: manifests/deployment, its image"
    echo "# $pushed. kubectl apply --server-side -f metainit.yaml"
    kubectl kustomize "$tmp/forms/deployment"
  } >"$files/metainit.yaml"
  cat >"$files/kustomization.yaml" <<EOF
# metainit v$version's Deployment form as a kustomize base: put this file beside
# metainit.yaml, add your patches, then kubectl apply -k DIR.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- metainit.yaml
images:
- name: ${pushed%@*}
  digest: ${pushed#*@}
EOF
  cp "$tmp/forms/values.yaml" "$files/values.yaml"
}

# The chart, its default image the pushed digest, packaged and pushed.
push_chart() {
  local chart=$tmp/chart/metainit
  mkdir -p "$tmp/chart"
  cp -r "$here/charts/metainit" "$chart"
  sed -i "s|^  repository: .*|  repository: ${pushed%@*}|; s|^  digest: \"\"|  digest: \"${pushed#*@}\"|" "$chart/values.yaml"
  grep -qx "  digest: \"${pushed#*@}\"" "$chart/values.yaml" \
    || die "charts/metainit/values.yaml has no '  digest: \"\"' line to set"
  sed -i "s|^      image: .*|      image: $pushed|" "$chart/Chart.yaml"
  "$helm" package "$chart" -d "$files" >&2
  local plain=()
  ((${#insecure[@]} == 0)) || plain=(--plain-http)
  "$helm" push "${plain[@]}" "$files/metainit-$chart_version.tgz" "$charts" >&2
}

# Each architecture's binaries in the archive Krew installs from (.krew.yaml), and its SBOM.
write_binaries() {
  local arch dir
  for dir in "$tmp"/bin/linux-*; do
    arch=${dir##*/linux-}
    cp "$dir/metainit" "$dir/kubectl-metainit"
    cp "$here/LICENSE" "$dir/LICENSE"
    tar -C "$dir" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
      -cf - LICENSE kubectl-metainit metainit | gzip -n >"$files/metainit-v$version-linux-$arch.tar.gz"
    cp "$dir/metainit.cdx.json" "$files/metainit-v$version-linux-$arch.cdx.json"
  done
}

checksums() {
  (cd "$files" && sha256sum -- * >SHA256SUMS)
}

say_next() {
  cat <<EOF
Released metainit v$version
  image: $pushed
  chart: $charts/metainit, version $chart_version
  files: $out
Attach the files to the release v$version; install from them:
  static pod:  static-pod.yaml into each control-plane node's /etc/kubernetes/manifests/
  Deployment:  kubectl apply --server-side -f metainit.yaml
  Helm:        helm install metainit $charts/metainit --version $chart_version -n kube-system
EOF
}

main() {
  parse "$@"
  check_version
  check_tools
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  files=$tmp/files
  mkdir -p "$files"
  push_image
  write_manifests
  push_chart
  write_binaries
  checksums
  mkdir -p "$(dirname "$out")"
  mv "$files" "$out"
  out=$(cd "$out" && pwd)
  say_next
}

main "$@"
