# shellcheck shell=bash
# shellcheck disable=SC2154 # $dir, $k8s_version, $minor: scripts/control-plane.sh's globals, set before it calls this
# up, env, check-network and down (sourced by scripts/control-plane.sh), and what up makes
# in the cluster: the two Nodes and the ServiceAccounts `default`.

admin() { kubectl --kubeconfig "$dir/admin.kubeconfig" "$@"; }

node() { # NAME: a Node as a kubelet would register it, made Ready and schedulable by hand
  admin apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $1
  labels: {kubernetes.io/hostname: $1, kubernetes.io/os: linux, kubernetes.io/arch: amd64}
EOF
  # The TaintNodesByCondition admission plugin marks a new Node not-ready; the node
  # lifecycle controller (not running here) would lift it once the Node reports Ready.
  admin patch node "$1" --type merge -p '{"spec":{"taints":null}}' >/dev/null
  local now
  now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  admin patch node "$1" --subresource status --type merge -p "$(cat <<EOF
{"status": {
  "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
  "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
  "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
    "message": "set by scripts/control-plane.sh", "lastHeartbeatTime": "$now", "lastTransitionTime": "$now"}]
}}
EOF
)" >/dev/null
}

# up's options, into the caller's (up's) locals: owner, args, version, count; DIR into $dir.
up_options() {
  while [ $# -gt 0 ]; do
    case $1 in
      --owner) owner=$2; shift 2 ;;
      --apiserver-arg) args+=("$2"); shift 2 ;;
      --apiservers)
        if ! [[ ${2:-} =~ ^[1-5]$ ]]; then
          say "up: --apiservers takes a number from 1 to 5, not '${2:-}'"
          exit 2
        fi
        count=$2; shift 2 ;;
      --version) version=${2:?--version needs a minor, like 1.34}; shift 2 ;;
      -*) say "up: unknown option '$1'"; usage ;;
      *) dir=$1; shift ;;
    esac
  done
}

# make_dir COUNT: DIR (a new one unless given), with its minor and its number of API servers.
make_dir() {
  dir=${dir:-$(mktemp -d "${TMPDIR:-/tmp}/metainit-control-plane.XXXXXX")}
  mkdir -p "$dir/pki" "$dir/serving"
  dir=$(cd "$dir" && pwd)
  echo "$minor" >"$dir/minor"
  echo "$1" >"$dir/apiservers"
}

# Every request's user, verb and URI: the tests count metainit's requests. Bodies only of
# the PATCHes of pods (small JSON patches), for the tests that assert what a patch tests
# before it removes a gate (tests/cluster_gates.rs, tests/cluster_orphaned.rs).
audit_policy() {
  cat >"$dir/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Request
  verbs: [patch]
  resources: [{group: "", resources: [pods]}]
- level: Metadata
EOF
}

ports() { # etcd's two, one for each kube-apiserver
  local i
  free_port >"$dir/etcd.port"
  free_port >"$dir/etcd-peer.port"
  for i in $(seq "$(apiservers)"); do free_port >"$dir/apiserver$(suffix "$i").port"; done
}

since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; } # T0: seconds

# The kube-apiservers: the first, then the others once the first has written the serving
# certificate they share; returns once each answers /readyz. $ready: the seconds from the
# first's start to its /readyz 200, $ready_all to the last one's.
start_apiservers() {
  local i t0
  t0=$(date +%s.%N)
  start_apiserver 1
  wait_up kube-apiserver 120 serving_cert_written
  # The certificate file holds the CA that signed it too.
  cp "$dir/serving/apiserver.crt" "$dir/pki/serving-ca.crt"
  for i in $(seq 2 "$(apiservers)"); do start_apiserver "$i"; done
  wait_up kube-apiserver 120 readyz 1
  ready=$(since "$t0")
  for i in $(seq 2 "$(apiservers)"); do wait_up "kube-apiserver-$i" 120 readyz "$i"; done
  ready_all=$(since "$t0")
}

# What a cluster has that no controller makes here: the Nodes and the ServiceAccounts.
cluster_objects() {
  local ns
  node node-a
  node node-b
  for ns in default kube-system; do
    admin -n "$ns" create serviceaccount default >/dev/null 2>&1 || true
  done
}

watch_owner() { # PID: when that process (a test binary) ends, so does this control plane
  # shellcheck disable=SC2016 # the inner bash expands them, from its arguments
  setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec bash "$2" down "$3"' \
    _ "$1" "$0" "$dir" >/dev/null 2>&1 </dev/null &
}

up() {
  local owner='' args=() version='' count=1 start ready ready_all
  up_options "$@"
  set_minor "$version"
  build
  command -v kubectl >/dev/null || die "kubectl is not installed (it creates the Nodes)"
  make_dir "$count"
  start=$SECONDS
  # Whatever fails on the way, nothing is left running.
  trap 'say "up failed: stopping what started"; down' ERR
  make_pki
  audit_policy
  if [ ${#args[@]} -gt 0 ]; then printf '%s\n' "${args[@]}" >"$dir/apiserver.args"; fi
  ports
  start_etcd
  wait_up etcd 60 etcd_health
  start_apiservers
  write_kubeconfigs
  start_kube-scheduler
  cluster_objects
  [ -z "$owner" ] || watch_owner "$owner"
  trap - ERR
  local more=''
  [ "$count" = 1 ] || more="; all $count kube-apiservers ${ready_all}s after it"
  say "up in $((SECONDS - start))s (kube-apiserver answered /readyz ${ready}s after it started$more): $dir"
  env_of
}

env_of() {
  [ -s "$dir/admin.kubeconfig" ] || die "no control plane in $dir (run: bash scripts/control-plane.sh up)"
  local i servers=() metainits=()
  for i in $(seq "$(apiservers)"); do
    servers+=("https://127.0.0.1:$(apiserver_port "$i")")
    metainits+=("$dir/metainit$(suffix "$i").kubeconfig")
  done
  cat <<EOF
export METAINIT_CONTROL_PLANE=$dir
export CONTROL_PLANE_ADMIN=$dir/admin.kubeconfig
export CONTROL_PLANE_METAINIT=$dir/metainit.kubeconfig
export CONTROL_PLANE_METAINITS="${metainits[*]}"
export CONTROL_PLANE_SERVER=https://127.0.0.1:$(apiserver_port 1)
export CONTROL_PLANE_SERVERS="${servers[*]}"
export CONTROL_PLANE_CA=$dir/pki/serving-ca.crt
export CONTROL_PLANE_KUBERNETES=$k8s_version
export METAINIT_KUBERNETES=$minor
EOF
}

# Whether any component logged a connection to an address outside 127.0.0.0/8 (a webhook
# or an aggregated API dialled through a ClusterIP or a real endpoint): the network rule.
check_network() {
  local found
  found=$(grep -hoE 'dial tcp [^ ]+' "$dir"/etcd.log "$dir"/kube-apiserver*.log "$dir"/kube-scheduler.log 2>/dev/null |
    grep -vE 'dial tcp (127\.[0-9.]+|localhost|\[::1\]):' | sort | uniq -c || true)
  if [ -n "$found" ]; then
    say "dialled outside 127.0.0.0/8 (see $dir/*.log):"
    echo "$found" >&2
    return 1
  fi
  say "nothing dialled outside 127.0.0.0/8"
}

down() {
  [ -d "$dir" ] || return 0
  local i
  stop kube-scheduler
  for i in $(seq "$(apiservers)"); do stop "kube-apiserver$(suffix "$i")"; done
  stop etcd
  rm -rf "$dir"
}
