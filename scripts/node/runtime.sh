# shellcheck shell=bash
# shellcheck disable=SC2154 # $bin, $dir, $node_name, $node_ip, $pod_subnet: scripts/node.sh's globals, set before it calls this
# containerd, the kubelet and kube-proxy (sourced by scripts/node.sh): their configuration
# files, how each starts (in the node's network namespace: scripts/node/network.sh) and stops.

pid_of() { cat "$dir/$1.pid" 2>/dev/null || true; }

running() { # NAME
  local pid
  pid=$(pid_of "$1")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

stop() { # NAME: SIGTERM, then SIGKILL after 10 s
  local pid
  pid=$(pid_of "$1")
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$dir/$1.pid"
}

stop_kubelet() { stop kubelet; }
stop_containerd() { stop containerd; }

# A node going down as in a power cut: the kubelet and kube-proxy, then every container (the
# static pods' included), then containerd; its directories stay for start_node.
stop_node() {
  stop kubelet
  stop kube-proxy
  stop_all_containers
  stop containerd
}

start_node() {
  start_containerd
  start_kubelet
  start_kube_proxy
}

containerd_config() {
  mkdir -p "$dir/containerd"
  cat >"$dir/containerd/config.toml" <<EOF
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
# Snapshotters that need a kernel feature or a device this machine may lack.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$dir/containerd/containerd.sock"
[ttrpc]
  address = "$dir/containerd/containerd.sock.ttrpc"
[debug]
  address = "$dir/containerd/debug.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/node/pause:test"
  # No process here may lower an oom_score_adj (no CAP_SYS_RESOURCE): runc would fail the
  # sandbox with "failed to update /proc/self/oom_score_adj: Permission denied".
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  # The pods' network namespaces under DIR, not the machine's /run/netns.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni/net.d"
EOF
}

start_containerd() {
  setsid nsenter --net="$(netns_path)" --mount="$(mntns_path)" containerd --config "$dir/containerd/config.toml" \
    >>"$dir/containerd.log" 2>&1 </dev/null &
  echo $! >"$dir/containerd.pid"
  wait_for containerd 60 ctr_ version
}

kubelet_config() {
  local p=$dir/etc/kubernetes/pki
  mkdir -p "$dir/etc/kubernetes/manifests" "$dir/staging" "$dir/kubelet"
  cat >"$dir/etc/kubernetes/kubelet-config.yaml" <<EOF
# As kubeadm writes it (/var/lib/kubelet/config.yaml), with what this machine needs marked.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The node's /etc/kubernetes is DIR/etc/kubernetes (scripts/node/mounts.sh).
staticPodPath: /etc/kubernetes/manifests
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true, cacheTTL: 0s}
  x509: {clientCAFile: $p/ca.crt}
authorization:
  mode: Webhook
  webhook: {cacheAuthorizedTTL: 0s, cacheUnauthorizedTTL: 0s}
cgroupDriver: cgroupfs
# This machine may run two nodes: each kubelet's pods under a cgroup of its own node (a
# kubelet stops every pod it finds in its cgroup root that it does not know).
cgroupRoot: $(cgroup_root)
containerRuntimeEndpoint: unix://$dir/containerd/containerd.sock
# Every address of the node's namespace: the API server reaches it at the node's.
address: 0.0.0.0
port: $(cat "$dir/kubelet.port")
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $(cat "$dir/kubelet-healthz.port")
tlsCertFile: $p/kubelet.crt
tlsPrivateKeyFile: $p/kubelet.key
rotateCertificates: false
clusterDomain: cluster.local
# This machine: pods get no resolver (nothing here may dial outside 127.0.0.0/8).
resolvConf: ""
# This machine: cgroup v1, which a kubelet from 1.35 refuses unless told (the default of
# failCgroupV1 became true in 1.35; false in 1.34).
failCgroupV1: false
# This machine: swap may be on.
failSwapOn: false
# This machine: no process may lower an oom_score_adj (no CAP_SYS_RESOURCE).
oomScoreAdj: 0
# This machine: its disk is shared with the build; evict only when it is really full, and
# never collect the images built here (they cannot be pulled again).
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# The kernel parameters it sets (kernel.panic, vm.overcommit_memory, ...) are global: up saves
# them and down restores them.
protectKernelDefaults: false
fileCheckFrequency: 5s
podLogsDir: $dir/pod-logs
EOF
}

# cgroup_root: this node's, under every hierarchy (cgroup v1, the kubelet wants it made).
cgroup_root() { echo "/metainit-$(basename "$dir")"; }

make_cgroup_root() {
  local h c=/sys/fs/cgroup/cpuset
  for h in /sys/fs/cgroup/*/; do
    if [ -d "$h" ]; then mkdir -p "$h$(cgroup_root)" 2>/dev/null || true; fi
  done
  # A new cpuset has no CPU and no memory node until given its parent's.
  if [ -f "$c/cpuset.cpus" ]; then
    cat "$c/cpuset.cpus" >"$c$(cgroup_root)/cpuset.cpus"
    cat "$c/cpuset.mems" >"$c$(cgroup_root)/cpuset.mems"
  fi
}

start_kubelet() {
  make_cgroup_root
  setsid nsenter --net="$(netns_path)" --mount="$(mntns_path)" "$bin/kubelet" \
    --config "$dir/etc/kubernetes/kubelet-config.yaml" \
    --kubeconfig "$dir/etc/kubernetes/kubelet.conf" --root-dir "$dir/kubelet" \
    --hostname-override "$node_name" --node-ip "$node_ip" \
    >>"$dir/kubelet.log" 2>&1 </dev/null &
  echo $! >"$dir/kubelet.pid"
}

# kube-proxy, iptables mode, in the node's namespace (its rules are that namespace's): a
# pod's kubernetes Service address reaches the API server. A process beside the kubelet, as
# the kubelet is, not kubeadm's DaemonSet: its image would need iptables' binaries. It sets
# no conntrack sysctl (global to the machine) and no route_localnet (no localhost NodePorts).
kube_proxy_config() {
  cat >"$dir/etc/kubernetes/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $dir/etc/kubernetes/kube-proxy.conf}
hostnameOverride: $node_name
mode: iptables
clusterCIDR: $pod_subnet
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false}
nodePortAddresses: [primary]
EOF
}

start_kube_proxy() {
  setsid nsenter --net="$(netns_path)" --mount="$(mntns_path)" "$bin/kube-proxy" \
    --config "$dir/etc/kubernetes/kube-proxy.yaml" \
    >>"$dir/kube-proxy.log" 2>&1 </dev/null &
  echo $! >"$dir/kube-proxy.pid"
}
