# shellcheck shell=bash
# shellcheck disable=SC2154 # $here, $node_name: scripts/node.sh's globals, set before it calls this
# up, env, check-network and down (sourced by scripts/node.sh).

# The kernel parameters the kubelet sets (pkg/kubelet/cm/container_manager_linux.go,
# setupKernelTunables): global to the machine, so saved at up and restored at down.
sysctls=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

admin() { kubectl --kubeconfig "$dir/etc/kubernetes/admin.conf" "$@"; }

apiserver_ready() {
  curl -sf --cacert "$dir/etc/kubernetes/pki/ca.crt" --cert "$dir/etc/kubernetes/pki/admin.crt" \
    --key "$dir/etc/kubernetes/pki/admin.key" "https://127.0.0.1:$(cat "$dir/apiserver.port")/readyz"
}

node_ready() {
  [ "$(admin get node "$node_name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

up() {
  local owner='' with_metainit=1 version=''
  while [ $# -gt 0 ]; do
    case $1 in
      --owner) owner=$2; shift 2 ;;
      --without-metainit) with_metainit=; shift ;;
      --version) version=${2:?--version needs a minor, like 1.34}; shift 2 ;;
      -*) say "up: unknown option '$1'"; usage ;;
      *) dir=$1; shift ;;
    esac
  done
  set_minor "$version"
  build
  for tool in containerd runc ctr buildah kubectl curl openssl; do
    command -v "$tool" >/dev/null || die "$tool is not installed (see .ci/run for the packages)"
  done
  for plugin in bridge host-local loopback; do
    [ -x "/usr/lib/cni/$plugin" ] || die "no /usr/lib/cni/$plugin (apt-get install containernetworking-plugins)"
  done
  for tool in ip nsenter iptables; do
    command -v "$tool" >/dev/null || die "$tool is not installed (iproute2, util-linux, iptables)"
  done
  dir=${dir:-$(mktemp -d "${TMPDIR:-/tmp}/metainit-node.XXXXXX")}
  mkdir -p "$dir/etc/kubernetes" "$dir/etcd"
  dir=$(cd "$dir" && pwd)
  echo "$minor" >"$dir/minor"
  local start=$SECONDS
  trap 'trap - ERR; say "up failed: stopping what started"; diagnose; down' ERR
  for s in "${sysctls[@]}"; do echo "$s=$(sysctl -n "$s")"; done >"$dir/sysctls"
  for port in etcd etcd-peer apiserver kubelet kubelet-healthz; do
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' \
      >"$dir/$port.port"
  done
  network_up
  mounts_up
  kubeadm_install
  start_forward
  certificates
  kubeconfigs
  containerd_config
  kubelet_config
  start_containerd
  images
  control_plane_pods
  [ -z "$with_metainit" ] || metainit_pod
  start_kubelet
  kube_proxy_config
  start_kube_proxy
  wait_for "kube-apiserver's /readyz" 180 apiserver_ready
  date +%s >"$dir/apiserver-ready.at"
  # README's install steps: metainit's rights, once the API server answers.
  admin apply -f "$here/manifests/rbac.yaml" >/dev/null
  kubeadm_config
  wait_for "the Node $node_name Ready" 120 node_ready
  # No node lifecycle controller runs: lift the not-ready taint TaintNodesByCondition set.
  admin taint node "$node_name" node.kubernetes.io/not-ready- >/dev/null 2>&1 || true
  if [ -n "$owner" ]; then
    # shellcheck disable=SC2016 # the inner bash expands them, from its arguments
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec bash "$2" down "$3"' \
      _ "$owner" "$0" "$dir" >/dev/null 2>&1 </dev/null &
  fi
  trap - ERR
  say "up in $((SECONDS - start))s: $dir"
  env_of
}

# What went wrong, from the logs: the kubelet's errors, containerd's, each container's end.
diagnose() {
  say "the kubelet's last errors:"
  grep -E '^E[0-9]{4}' "$dir/kubelet.log" 2>/dev/null | tail -n 15 >&2 || true
  say "kube-proxy's last errors:"
  grep -E '^E[0-9]{4}' "$dir/kube-proxy.log" 2>/dev/null | tail -n 5 >&2 || true
  say "containerd's last errors:"
  grep -E 'level=(error|fatal)' "$dir/containerd.log" 2>/dev/null | tail -n 10 >&2 || true
  local f
  for f in "$dir"/pod-logs/*/*/*.log; do
    [ -f "$f" ] || continue
    say "${f#"$dir"/pod-logs/}:"
    tail -n 5 "$f" >&2
  done
}

env_of() {
  [ -s "$dir/etc/kubernetes/admin.conf" ] || die "no node in $dir (run: bash scripts/node.sh up)"
  cat <<EOF
export METAINIT_NODE=$dir
export NODE_ADMIN=$dir/etc/kubernetes/admin.conf
export NODE_SERVER=https://127.0.0.1:$(cat "$dir/apiserver.port")
export NODE_NAME=$node_name
export NODE_MANIFESTS=$dir/etc/kubernetes/manifests
export NODE_METAINIT_MANIFEST=$dir/metainit.yaml
export NODE_PKI=$dir/etc/kubernetes/pki
export NODE_KUBERNETES=$k8s_version
export NODE_NETNS=$(netns_path)
export NODE_MNTNS=$(mntns_path)
export NODE_IP=$node_ip
EOF
}

# Whether anything dialled outside loopback and the node's own namespace (the kubelet's,
# kube-proxy's, containerd's and every container's logs, and the connections open now),
# and whether that namespace is still closed (scripts/node/network.sh).
check_network() {
  local found
  found=$(dialled_outside)
  if [ -n "$found" ]; then
    say "dialled outside loopback and the node's network (see $dir/*.log):"
    echo "$found" >&2
    return 1
  fi
  network_closed || return 1
  say "nothing dialled outside loopback and the node's network ($pod_subnet, $service_subnet)"
}

# Every container and sandbox gone, containerd stopped, nothing mounted under DIR.
stop_all_containers() {
  running containerd || return 0
  local t netns
  netns=$(pod_netns)
  for t in $(ctr_ tasks ls -q 2>/dev/null); do
    ctr_ tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
  done
  for _ in $(seq 50); do
    [ -z "$(ctr_ tasks ls -q 2>/dev/null)" ] && break
    sleep 0.2
  done
  # Their network namespaces, which containerd 1.6 keeps in the machine's /run/netns and
  # removes only when the kubelet stops a sandbox: those of this node's sandboxes, by name.
  for t in $netns; do ip netns del "$t" 2>/dev/null || true; done
}

# pod_netns: the names of this node's pods' network namespaces (/run/netns/cni-...), as its
# own containerd's sandboxes name them.
pod_netns() {
  local c
  for c in $(ctr_ containers ls -q 2>/dev/null); do
    ctr_ containers info "$c" 2>/dev/null | grep -oE '"/(var/)?run/netns/cni-[0-9a-f-]+"' || true
  done | tr -d '"' | sed 's|.*/||' | sort -u
}

down() {
  [ -d "$dir" ] || return 0
  stop kubelet
  stop kube-proxy
  stop_all_containers
  stop containerd
  network_down
  pkill -KILL -f "containerd-shim.*$dir/" 2>/dev/null || true
  local m
  grep -oE " $dir/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m" || true; done
  # This node's cgroups (its pods', under its own root), leaf first, in every hierarchy.
  find /sys/fs/cgroup/*/"$(cgroup_root)" -depth -type d -exec rmdir {} + 2>/dev/null || true
  if [ -s "$dir/sysctls" ]; then
    while IFS= read -r kv; do sysctl -q -w "$kv" >/dev/null || true; done <"$dir/sysctls"
  fi
  if [ -n "${METAINIT_NODE_KEEP:-}" ]; then
    say "left $dir in place (METAINIT_NODE_KEEP)"
  elif grep -q " $dir/" /proc/mounts; then
    say "left $dir in place: something is still mounted under it"
  else
    rm -rf --one-file-system "$dir"
  fi
}
