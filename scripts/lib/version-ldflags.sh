# shellcheck shell=bash
# The version a release build stamps into Kubernetes binaries (k8s.io/kubernetes's
# hack/lib/version.sh: kube::version::ldflags), so /version answers v1.37.2, not
# v0.0.0-master; the build date is the release's time on the module proxy. Sourced by
# scripts/control-plane.sh and scripts/node.sh, which set $module (the Go module pinning
# Kubernetes) and $k8s_version.

version_ldflags() {
  local minor date flags=
  # shellcheck disable=SC2154 # set by the script that sources this file
  minor=$(echo "$k8s_version" | cut -d. -f2)
  # shellcheck disable=SC2154
  date=$(cd "$module" && go mod download -json "k8s.io/kubernetes@$k8s_version" |
    python3 -c 'import json, sys; print(json.load(open(json.load(sys.stdin)["Info"]))["Time"])')
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    flags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.buildDate=$date"
  done
  echo "$flags"
}
