#!/usr/bin/env bash
# A real control-plane node on loopback, for the tests and by hand, laid out as kubeadm lays
# one out: containerd and runc (Debian's), a kubelet (built from tests/node/MINOR/go.mod, the
# same Kubernetes as tests/control-plane/MINOR/go.mod) whose manifests directory holds etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler and metainit as static pods, every
# image built here (never pulled) and imported into containerd's k8s.io namespace.
#
#   bash scripts/node.sh build [--version MINOR]    # once; cached outside the repo
#   eval "$(bash scripts/node.sh up [--version MINOR] [--owner PID] [--without-metainit])"
#   bash scripts/node.sh env [DIR]                  # the env of a running one
#   bash scripts/node.sh metainit [DIR]             # metainit's manifest written, as up does
#   bash scripts/node.sh stop|start kubelet|containerd [DIR]
#   bash scripts/node.sh stop|start node [DIR]      # a restart: kubelet, containers, containerd
#   bash scripts/node.sh check-network [DIR]        # fails if anything dialled outside the node
#   bash scripts/node.sh down [DIR]                 # stops it, removes DIR, restores sysctls
#
# MINOR: a pinned Kubernetes minor, as scripts/control-plane.sh takes it (--version, else
# $METAINIT_KUBERNETES, else the newest); the commands on a DIR read its minor from it.
# `up` prints, as `export` lines: METAINIT_NODE (the directory), NODE_ADMIN (an admin's
# kubeconfig), NODE_SERVER, NODE_NAME, NODE_MANIFESTS (the kubelet's staticPodPath,
# /etc/kubernetes/manifests on the node), NODE_METAINIT_MANIFEST (what was written there for
# metainit: manifests/metainit.yaml with only its image changed), NODE_NETNS and NODE_MNTNS
# (the node's network and mount namespaces: `nsenter --net=$NODE_NETNS --mount=$NODE_MNTNS
# CMD` runs CMD on the node, where its hostNetwork pods listen and /etc/kubernetes is the
# node's), NODE_IP.
#
# What runs, and why so:
# - containerd 1.6 from Debian (kubelet 1.37 warns that it lacks the RuntimeConfig call; 1.38
#   will refuse it: then containerd 2 from its Go module). Its own root, state, socket and
#   config under DIR; `restrict_oom_score_adj` (no process here may lower an oom_score_adj).
# - The node has a network of its own, in a network namespace made here (never the
#   machine's): containerd, the kubelet, kube-proxy and the hostNetwork pods run in it; its
#   address 10.244.0.1 is on the bridge cni0, where the CNI bridge and host-local plugins put
#   the other pods (10.244.0.0/24); no route leaves it. kube-proxy (iptables) makes the
#   kubernetes Service reach the API server; the API server reaches webhooks and the kubelet
#   at their addresses. The machine reaches the API server at 127.0.0.1 through
#   scripts/node/forward.py. `check-network` proves nothing dialled outside loopback and
#   that namespace (scripts/node/network.sh).
# - The node has its own mount namespace too, made here: in it /etc/kubernetes is DIR's, as
#   kubeadm lays it out (scripts/node/mounts.sh); the machine's /etc is never written.
# - kube-controller-manager runs the deployment, replicaset, job, garbagecollector (a deleted
#   Deployment's ReplicaSets and pods go with it), namespace, endpoint, endpointslice,
#   serviceaccount, serviceaccount-token and root-ca-cert-publisher (kube-root-ca.crt, which
#   every pod's token volume needs) controllers only. Not the node lifecycle controller: the not-ready
#   taint that TaintNodesByCondition puts on a new Node is lifted by `up` once the kubelet
#   reports the Node Ready, and nothing evicts pods when the kubelet stops for a restart.
# - The kubelet as kubeadm configures it (client certificate for system:node:NAME in
#   system:nodes, NodeRestriction, authentication by client certificate and authorization by
#   Webhook), plus what this machine needs, each commented in its configuration file.
set -Eeuo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# The installer's module (tests/node/installer); each minor's kubelet has its own.
installer_module=$here/tests/node
node_name=node-1
cache=${METAINIT_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/metainit/node}

# shellcheck source=scripts/lib/logging.sh
. "$here/scripts/lib/logging.sh"
log_init node
# shellcheck source=scripts/lib/go-build.sh
. "$here/scripts/lib/go-build.sh"
# shellcheck source=scripts/lib/wait.sh
. "$here/scripts/lib/wait.sh"
# shellcheck source=scripts/lib/minor.sh
. "$here/scripts/lib/minor.sh"

# set_minor [MINOR]: $minor, its kubelet's $module, $k8s_version and the $bin of its build.
set_minor() {
  minor=$(pick_minor "$here/tests/node" "${1:-}") || exit 2
  module=$here/tests/node/$minor
  k8s_version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "$module/go.mod")
  [ -n "$k8s_version" ] || die "cannot read the Kubernetes version in $module/go.mod"
  local key
  key=$(go_build_key 3 "$module/go.mod" "$module/go.sum" "$installer_module/go.mod" \
    "$installer_module/go.sum" "$installer_module/installer/main.go")
  bin=$cache/kubernetes-$k8s_version-$key
}

# One concern a file: the build and the images, certificates and kubeconfigs, the static
# pods, the network and mount namespaces, containerd, the kubelet and kube-proxy, what kubeadm
# leaves, and up/down.
# shellcheck source=scripts/lib/image.sh
. "$here/scripts/lib/image.sh"
# shellcheck source=scripts/lib/revision.sh
. "$here/scripts/lib/revision.sh"
# shellcheck source=scripts/lib/version-ldflags.sh
. "$here/scripts/lib/version-ldflags.sh"
# shellcheck source=scripts/node/build.sh
. "$here/scripts/node/build.sh"
# shellcheck source=scripts/lib/kubeconfig.sh
. "$here/scripts/lib/kubeconfig.sh"
# shellcheck source=scripts/node/pki.sh
. "$here/scripts/node/pki.sh"
# shellcheck source=scripts/node/pods.sh
. "$here/scripts/node/pods.sh"
# shellcheck source=scripts/node/network.sh
. "$here/scripts/node/network.sh"
# shellcheck source=scripts/node/mounts.sh
. "$here/scripts/node/mounts.sh"
# shellcheck source=scripts/node/runtime.sh
. "$here/scripts/node/runtime.sh"
# shellcheck source=scripts/node/kubeadm.sh
. "$here/scripts/node/kubeadm.sh"
# shellcheck source=scripts/node/lifecycle.sh
. "$here/scripts/node/lifecycle.sh"

usage() {
  sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  build) set_minor "$(only_version "$@")"; build ;;
  up) dir=; up "$@" ;;
  env | down | check-network | metainit)
    dir=${1:-${METAINIT_NODE:-}}
    [ -n "$dir" ] || die "which node? give its directory or set METAINIT_NODE"
    minor_of_dir
    case $cmd in
      env) env_of ;; down) down ;; check-network) check_network ;; metainit) metainit_pod ;;
    esac
    ;;
  stop | start)
    what=${1:-}
    dir=${2:-${METAINIT_NODE:-}}
    case $what in kubelet | containerd | node) ;; *) die "$cmd what? kubelet, containerd or node" ;; esac
    [ -d "$dir" ] || die "which node? give its directory or set METAINIT_NODE"
    minor_of_dir
    if [ "$cmd" = stop ]; then "stop_$what"; else "start_$what"; fi
    ;;
  *) usage ;;
esac
