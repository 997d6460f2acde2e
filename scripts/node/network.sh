# shellcheck shell=bash
# shellcheck disable=SC2154 # $dir, $here, $node_name: scripts/node.sh's globals, set before it calls this
# The node's network (sourced by scripts/node.sh): a network namespace of its own, made
# here, in which containerd, the kubelet, kube-proxy and every hostNetwork pod run. Inside
# it: loopback, and the bridge cni0 whose address is the node's ($node_ip, the only address
# it reports); pods get theirs from the CNI bridge and host-local plugins on that bridge, in
# namespaces of their own whose one route is the bridge. The namespace has no route beyond
# the bridge's subnet and no link to the machine's: nothing in it can dial anything outside
# it. The machine reaches the API server through scripts/node/forward.py (its 127.0.0.1
# port, forwarded to the same port inside), nothing else.

node_ip=10.244.0.1
pod_subnet=10.244.0.0/24
service_subnet=10.96.0.0/16

netns_name() { echo "metainit-$(basename "$dir")"; }
netns_path() { echo "/run/netns/$(netns_name)"; }

# in_netns CMD...: CMD in the node's network namespace (and only that: the machine's
# mounts, pids and files stay as they are).
in_netns() { nsenter --net="$(netns_path)" "$@"; }

network_up() {
  ip netns add "$(netns_name)"
  in_netns ip link set lo up
  in_netns ip link add cni0 type bridge
  in_netns ip addr add "$node_ip/24" dev cni0
  in_netns ip link set cni0 up
  # Per namespace: a pod's packets to a Service's address are forwarded after kube-proxy's
  # DNAT only if the node's namespace forwards.
  in_netns sysctl -q -w net.ipv4.ip_forward=1
  cni_config
}

# The pods' network: the bridge above, addresses from host-local (its state under DIR, not
# the machine's /var/lib/cni), the node's address their gateway, no masquerade (nothing
# leaves), and loopback in each pod.
cni_config() {
  mkdir -p "$dir/cni/net.d" "$dir/cni/ipam"
  cat >"$dir/cni/net.d/10-bridge.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "node",
  "plugins": [
    {
      "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": "$dir/cni/ipam",
        "ranges": [[{"subnet": "$pod_subnet", "gateway": "$node_ip", "rangeStart": "10.244.0.10"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "loopback"}
  ]
}
EOF
}

network_down() {
  stop forward
  ip netns del "$(netns_name)" 2>/dev/null || true
}

# The machine's 127.0.0.1:PORT to the API server's, inside.
start_forward() {
  setsid python3 "$here/scripts/node/forward.py" "$(netns_path)" "$(cat "$dir/apiserver.port")" \
    >>"$dir/forward.log" 2>&1 </dev/null &
  echo $! >"$dir/forward.pid"
}

# allowed ADDRESS: loopback, the pods' and the node's subnet, or a Service's address (which
# kube-proxy turns into one of those, inside the namespace).
allowed() {
  python3 - "$1" "$pod_subnet" "$service_subnet" <<'EOF'
import ipaddress, sys
host = sys.argv[1].strip("[]")
if host == "localhost":
    sys.exit(0)
try:
    ip = ipaddress.ip_address(host)
except ValueError:
    sys.exit(1)
ip = getattr(ip, "ipv4_mapped", None) or ip
ok = ip.is_loopback or any(ip in ipaddress.ip_network(n) for n in sys.argv[2:])
sys.exit(0 if ok else 1)
EOF
}

# Every address dialled, as the kubelet's, containerd's and every container's logs name
# them, and every TCP connection open in the namespace now: on loopback or inside.
dialled_outside() {
  local addr
  {
    grep -rhoE 'dial tcp [^ ]+' "$dir"/kubelet.log "$dir"/containerd.log "$dir"/kube-proxy.log \
      "$dir/pod-logs" 2>/dev/null | sed -E 's/^dial tcp //; s/:[0-9]+:?$//' || true
    in_netns ss -tnH 2>/dev/null | awk '{ print $5 }' | sed -E 's/:[0-9]+$//' || true
  } | sort -u | while read -r addr; do
    [ -z "$addr" ] || allowed "$addr" || echo "$addr"
  done
}

# The namespace's own shape: its routes reach nothing but the bridge's subnet, and the
# machine's namespace holds no address of the node's subnets.
network_closed() {
  local routes
  routes=$(in_netns ip -4 route show table main)
  if grep -qvE "^${pod_subnet//./\\.} dev cni0 " <<<"$routes"; then
    say "the node's namespace routes more than its bridge: $routes"
    return 1
  fi
  if ip -4 addr show | grep -qE 'inet 10\.(244|96)\.'; then
    say "the machine's own namespace has an address of the node's subnets"
    return 1
  fi
}
