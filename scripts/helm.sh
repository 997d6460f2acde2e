#!/usr/bin/env bash
# helm, for the chart's checks and tests: built unmodified from its Go module
# (tests/helm/go.mod pins the version), as scripts/control-plane.sh builds the control plane.
#
#   bash scripts/helm.sh build   # once; cached outside the repo, prints nothing else
#   bash scripts/helm.sh path    # builds it if need be, then prints the binary's path
#
# The cache is ~/.cache/metainit/helm (or $METAINIT_HELM_CACHE). A helm of your own is
# never used: the checks run the version go.mod names.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
module=$here/tests/helm
# go.mod and go.sum are committed: a build never changes them.
export GOFLAGS="-mod=readonly -buildvcs=false"

say() { echo "helm.sh: $*" >&2; }
die() { say "$*"; exit 1; }

version=$(awk '$1 == "helm.sh/helm/v4" && $2 ~ /^v/ { print $2; exit }' "$module/go.mod")
[ -n "$version" ] || die "cannot read helm's version in $module/go.mod"
# The recipe's number changes when the way of building does.
key=$( (echo recipe 1; cat "$module/go.mod" "$module/go.sum") | sha256sum | cut -c1-12)
cache=${METAINIT_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/metainit/helm}
bin=$cache/helm-$version-$key/helm

build() {
  if [ -x "$bin" ]; then
    return 0
  fi
  command -v go >/dev/null || die "go is not installed (Go $(awk '$1 == "go" { print $2 }' "$module/go.mod") or later builds helm)"
  local start=$SECONDS tmp
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/build.XXXXXX")
  say "building helm $version (a minute or two the first time)"
  # The version a release build stamps (helm's Makefile), so `helm version` says v4.x.y.
  (
    cd "$module"
    CGO_ENABLED=0 go build -trimpath \
      -ldflags "-w -s -X helm.sh/helm/v4/internal/version.version=$version -X helm.sh/helm/v4/internal/version.metadata=" \
      -o "$tmp/helm" helm.sh/helm/v4/cmd/helm
  )
  # One build kept: those of other versions or recipes go.
  rm -rf "$cache"/helm-*
  mv "$tmp" "$(dirname "$bin")"
  say "built in $((SECONDS - start))s: $bin"
}

case ${1:-} in
  build) build ;;
  path) build && echo "$bin" ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
