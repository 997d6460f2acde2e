# shellcheck shell=bash
# shellcheck disable=SC2154 # $cache, $here: scripts/control-plane.sh's globals, set before it calls this
# The pinned minors and the build (sourced by scripts/control-plane.sh): etcd, kube-apiserver
# and kube-scheduler built unmodified from tests/control-plane/MINOR/go.mod into $cache, one
# build per minor, keyed by the versions and go.sum.

version_of() { # MODULE: its version in go.mod's require block
  awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$module/go.mod"
}

# set_minor [MINOR]: $minor, its $module, versions and the $bin directory of its build.
set_minor() {
  minor=$(pick_minor "$here/tests/control-plane" "${1:-}") || exit 2
  module=$here/tests/control-plane/$minor
  k8s_version=$(version_of k8s.io/kubernetes)
  etcd_version=$(version_of go.etcd.io/etcd/server/v3)
  if [ -z "$k8s_version" ] || [ -z "$etcd_version" ]; then
    die "cannot read the versions in $module/go.mod"
  fi
  # The recipe's number changes when the way of building does.
  local key
  key=$(go_build_key 2 "$module/go.mod" "$module/go.sum")
  bin=$cache/kubernetes-$k8s_version-etcd-$etcd_version-$key
}

# control_plane_step TMP: etcd, kube-apiserver and kube-scheduler into TMP, linked to glibc
# (cgo: the node's images carry what ldd names), Kubernetes' stamped with its version.
control_plane_step() {
  local start=$SECONDS fetched
  say "downloading modules for Kubernetes $k8s_version and etcd $etcd_version" &&
    go mod download &&
    fetched=$((SECONDS - start)) &&
    say "modules ready in ${fetched}s; building (two cores: several minutes the first time)" &&
    go_build --cgo -o "$1/etcd" go.etcd.io/etcd/server/v3 &&
    go_build --cgo -ldflags "$(version_ldflags)" -o "$1/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler
}

# One build of each minor kept: its other patches' and recipes' go.
build() {
  go_build_cached --module "$module" --out "$bin" --binaries "kube-apiserver kube-scheduler etcd" \
    --prune "kubernetes-v$minor.*" --what "the control plane" -- control_plane_step
}

versions() { # the pinned minors: MINOR KUBERNETES ETCD
  local m
  for m in $(pinned_minors "$here/tests/control-plane"); do
    set_minor "$m"
    echo "$minor $k8s_version $etcd_version"
  done
}
