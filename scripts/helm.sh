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

# shellcheck source=scripts/lib/logging.sh
. "$here/scripts/lib/logging.sh"
# shellcheck source=scripts/lib/go-build.sh
. "$here/scripts/lib/go-build.sh"
log_init helm.sh

version=$(awk '$1 == "helm.sh/helm/v4" && $2 ~ /^v/ { print $2; exit }' "$module/go.mod")
[ -n "$version" ] || die "cannot read helm's version in $module/go.mod"
# The recipe's number changes when the way of building does.
key=$(go_build_key 1 "$module/go.mod" "$module/go.sum")
cache=${METAINIT_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/metainit/helm}
bin=$cache/helm-$version-$key/helm

# helm_step TMP: helm into TMP, with the version a release build stamps (helm's Makefile),
# so `helm version` says v4.x.y.
helm_step() {
  say "building helm $version (a minute or two the first time)" &&
    go_build -ldflags "-w -s -X helm.sh/helm/v4/internal/version.version=$version -X helm.sh/helm/v4/internal/version.metadata=" \
      -o "$1/helm" helm.sh/helm/v4/cmd/helm
}

# One build kept: those of other versions or recipes go.
build() {
  go_build_cached --quiet --module "$module" --out "$(dirname "$bin")" --binaries helm \
    --prune 'helm-*' --what helm -- helm_step
}

case ${1:-} in
  build) build ;;
  path) build && echo "$bin" ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
