#!/usr/bin/env bash
# Pins one Kubernetes minor for the real-server tests: writes the two Go modules that
# scripts/control-plane.sh and scripts/node.sh build it from, each a list of `tool`s with
# every version fixed (go.mod and go.sum, committed; builds never change them):
#
#   bash scripts/pin-kubernetes.sh 1.34.4 3.6.5   # KUBERNETES ETCD
#
#   tests/control-plane/1.34/   etcd, kube-apiserver, kube-scheduler
#   tests/node/1.34/            kubelet, kube-controller-manager, kube-proxy, kubeadm
#
# ETCD is the etcd the minor's kubeadm installs (cmd/kubeadm/app/constants/constants.go:
# DefaultEtcdVersion). k8s.io/kubernetes's own go.mod points its staging modules (k8s.io/api,
# k8s.io/client-go, ...) at ./staging, which a module depending on it cannot see: each is
# replaced by its release of the same patch (v0.34.4 for 1.34.4), as the module proxy serves it.
set -Eeuo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)

# shellcheck source=scripts/lib/logging.sh
. "$here/scripts/lib/logging.sh"
log_init pin-kubernetes --status 2

usage() {
  sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

check_args() { # KUBERNETES ETCD
  [[ $1 =~ ^1\.[0-9]+\.[0-9]+$ ]] || die "'$1' is not a Kubernetes version like 1.34.4"
  [[ $2 =~ ^3\.[0-9]+\.[0-9]+$ ]] || die "'$2' is not an etcd version like 3.6.5"
}

# The staging modules k8s.io/kubernetes@VERSION replaces with ./staging, one per line.
staging_modules() { # VERSION
  local mod
  mod=$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$1" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["GoMod"])')
  awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$mod"
}

# module DIR NAME K8S_VERSION STAGING TOOL...: a fresh go.mod in DIR with TOOLs and tidy.
module() {
  local dir=$1 name=$2 version=$3 staging=$4
  shift 4
  local tmp
  tmp=$(mktemp -d)
  (
    cd "$tmp"
    go mod init "$name" >/dev/null 2>&1
    go mod edit -go=1.26.0
    local patch=v0.${version#1.}
    for m in $staging; do go mod edit -replace "$m=$m@$patch"; done
    GOFLAGS=-mod=mod go get -tool "$@" >&2
    GOFLAGS=-mod=mod go mod tidy >&2
  )
  mkdir -p "$dir"
  cp "$tmp/go.mod" "$tmp/go.sum" "$dir/"
  rm -rf "$tmp"
  say "wrote $dir/go.mod ($(grep -c . "$dir/go.mod") lines)"
}

main() {
  [ $# -eq 2 ] || usage
  check_args "$1" "$2"
  command -v go >/dev/null || die "go is not installed"
  local version=$1 etcd=$2 minor staging
  minor=$(echo "$version" | cut -d. -f1-2)
  staging=$(staging_modules "v$version")
  [ -n "$staging" ] || die "k8s.io/kubernetes v$version lists no staging module: is it served?"
  module "$here/tests/control-plane/$minor" metainit.test/control-plane "$version" "$staging" \
    "go.etcd.io/etcd/server/v3@v$etcd" \
    "k8s.io/kubernetes/cmd/kube-apiserver@v$version" "k8s.io/kubernetes/cmd/kube-scheduler@v$version"
  module "$here/tests/node/$minor" metainit.test/node "$version" "$staging" \
    "k8s.io/kubernetes/cmd/kubelet@v$version" "k8s.io/kubernetes/cmd/kube-controller-manager@v$version" \
    "k8s.io/kubernetes/cmd/kube-proxy@v$version" "k8s.io/kubernetes/cmd/kubeadm@v$version"
}

main "$@"
