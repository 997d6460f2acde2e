#!/usr/bin/env bash
# A real Kubernetes control plane on loopback, for the tests and by hand: etcd,
# kube-apiserver and kube-scheduler, built unmodified from their Go modules
# (tests/control-plane/MINOR/go.mod pins the versions of each Kubernetes minor tested, as
# scripts/pin-kubernetes.sh writes it) and started as envtest starts them.
#
#   bash scripts/control-plane.sh build [--version MINOR]  # once; cached outside the repo
#   bash scripts/control-plane.sh bin [--version MINOR]    # builds if needed; prints where the binaries are
#   bash scripts/control-plane.sh versions           # the pinned minors: MINOR KUBERNETES ETCD
#   eval "$(bash scripts/control-plane.sh up [--version MINOR] [--apiservers N])"  # starts one; prints its env
#   bash scripts/control-plane.sh env [DIR]          # the env of a running one
#   bash scripts/control-plane.sh stop|start etcd|kube-apiserver|kube-apiserver-I|kube-scheduler [DIR]
#   bash scripts/control-plane.sh check-network [DIR] # fails if it dialled off loopback
#   bash scripts/control-plane.sh down [DIR]         # stops it and removes DIR
#
# MINOR is one of the pinned minors (1.34, or a patch of it: 1.34.4); without --version,
# $METAINIT_KUBERNETES, else the newest pinned. A running control plane keeps its minor and
# its number of API servers: `start`, `stop`, `env` and `down` read them from DIR.
# `up` prints the variables below as `export` lines (DIR is METAINIT_CONTROL_PLANE):
#   METAINIT_CONTROL_PLANE   the directory holding its state, certificates and logs
#   CONTROL_PLANE_ADMIN      an admin's kubeconfig (O=system:masters)
#   CONTROL_PLANE_METAINIT   the user metainit's kubeconfig, as `kubeadm kubeconfig user
#                            --client-name=metainit` makes it (no rights until
#                            manifests/rbac.yaml is applied)
#   CONTROL_PLANE_METAINITS  the same user's kubeconfig for each API server, space-separated
#                            (CONTROL_PLANE_METAINIT first, then DIR/metainit-I.kubeconfig)
#   CONTROL_PLANE_SERVER     https://127.0.0.1:PORT (the first API server)
#   CONTROL_PLANE_SERVERS    each API server's, space-separated, the first first
#   CONTROL_PLANE_CA         the CA bundle that verifies the API servers' certificate
#   CONTROL_PLANE_KUBERNETES its Kubernetes version (v1.34.4)
#   METAINIT_KUBERNETES      its minor (1.34): the tests' own control planes are of it too
#
# `up --owner PID` stops the control plane when process PID ends (a test binary's).
# `up --apiserver-arg ARG` (repeatable) adds ARG to kube-apiserver's command line, kept for
# its `start` again (`--watch-cache-sizes=pods#0`: pods' watches go to etcd, not the cache).
# `up --apiservers N` (1 to 5; 1 by default) runs N kube-apiservers on the one etcd, as a
# kubeadm HA control plane of N nodes has them, each on a port of its own with its own log
# and audit log: kube-apiserver (kube-apiserver.log, audit.log), then kube-apiserver-I for I
# from 2 (kube-apiserver-I.log, audit-I.log). They share the certificates, the
# ServiceAccount keys and issuer, and the --apiserver-arg; kube-scheduler and the admin's
# kubeconfig reach the first (scripts/control-plane/processes.sh says what else differs).
# What there is: two Nodes (node-a, node-b) made Ready by hand, with no kubelet; the
# ServiceAccount `default` in `default` and `kube-system` (no controller-manager runs, so
# nothing else creates it: tests make it in their own namespaces). Nothing it runs dials
# outside 127.0.0.0/8: webhooks are reached through their endpoints
# (--enable-aggregator-routing), never through a ClusterIP.
set -Eeuo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cache=${METAINIT_CONTROL_PLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/metainit/control-plane}

# shellcheck source=scripts/lib/logging.sh
. "$here/scripts/lib/logging.sh"
log_init control-plane
# shellcheck source=scripts/lib/go-build.sh
. "$here/scripts/lib/go-build.sh"
# shellcheck source=scripts/lib/wait.sh
. "$here/scripts/lib/wait.sh"
# shellcheck source=scripts/lib/ports.sh
. "$here/scripts/lib/ports.sh"
# shellcheck source=scripts/lib/minor.sh
. "$here/scripts/lib/minor.sh"
# shellcheck source=scripts/lib/version-ldflags.sh
. "$here/scripts/lib/version-ldflags.sh"
# One concern a file: the build, certificates and kubeconfigs, the processes, and up/down.
# shellcheck source=scripts/control-plane/build.sh
. "$here/scripts/control-plane/build.sh"
# shellcheck source=scripts/lib/kubeconfig.sh
. "$here/scripts/lib/kubeconfig.sh"
# shellcheck source=scripts/control-plane/pki.sh
. "$here/scripts/control-plane/pki.sh"
# shellcheck source=scripts/control-plane/processes.sh
. "$here/scripts/control-plane/processes.sh"
# shellcheck source=scripts/control-plane/lifecycle.sh
. "$here/scripts/control-plane/lifecycle.sh"

usage() {
  sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# component WHAT: the name of what `stop`/`start` WHAT means in $dir (kube-apiserver-1 is
# kube-apiserver); fails if there is no such component there.
component() {
  local i
  case $1 in
    etcd | kube-scheduler) echo "$1" ;;
    *) i=$(instance "$1") && echo "kube-apiserver$(suffix "$i")" ;;
  esac
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  build) set_minor "$(only_version "$@")"; build ;;
  bin) set_minor "$(only_version "$@")"; build >&2 && echo "$bin" ;;
  versions) versions ;;
  up) dir=; up "$@" ;;
  env | down | check-network)
    dir=${1:-${METAINIT_CONTROL_PLANE:-}}
    [ -n "$dir" ] || die "which control plane? give its directory or set METAINIT_CONTROL_PLANE"
    minor_of_dir
    case $cmd in env) env_of ;; down) down ;; check-network) check_network ;; esac
    ;;
  stop | start)
    what=${1:-}
    dir=${2:-${METAINIT_CONTROL_PLANE:-}}
    case $what in
      etcd | kube-apiserver | kube-apiserver-[1-5] | kube-scheduler) ;;
      *) die "$cmd what? etcd, kube-apiserver, kube-apiserver-I (I from 1 to its --apiservers) or kube-scheduler" ;;
    esac
    [ -d "$dir" ] || die "which control plane? give its directory or set METAINIT_CONTROL_PLANE"
    minor_of_dir
    name=$(component "$what") || die "$what: $dir has $(apiservers) kube-apiserver(s)"
    "$cmd" "$name"
    ;;
  *) usage ;;
esac
