#!/usr/bin/env bash
# A real Kubernetes control plane on loopback, for the tests and by hand: etcd,
# kube-apiserver and kube-scheduler, built unmodified from their Go modules
# (tests/control-plane/MINOR/go.mod pins the versions of each Kubernetes minor tested, as
# scripts/pin-kubernetes.sh writes it) and started as envtest starts them.
#
#   bash scripts/control-plane.sh build [--version MINOR]  # once; cached outside the repo
#   bash scripts/control-plane.sh bin [--version MINOR]    # builds if needed; prints where the binaries are
#   bash scripts/control-plane.sh versions           # the pinned minors: MINOR KUBERNETES ETCD
#   eval "$(bash scripts/control-plane.sh up [--version MINOR])"  # starts one; prints its env
#   bash scripts/control-plane.sh env [DIR]          # the env of a running one
#   bash scripts/control-plane.sh stop|start etcd|kube-apiserver|kube-scheduler [DIR]
#   bash scripts/control-plane.sh check-network [DIR] # fails if it dialled off loopback
#   bash scripts/control-plane.sh down [DIR]         # stops it and removes DIR
#
# MINOR is one of the pinned minors (1.34, or a patch of it: 1.34.4); without --version,
# $METAINIT_KUBERNETES, else the newest pinned. A running control plane keeps its minor:
# `start`, `stop`, `env` and `down` read it from DIR.
# `up` prints the variables below as `export` lines (DIR is METAINIT_CONTROL_PLANE):
#   METAINIT_CONTROL_PLANE   the directory holding its state, certificates and logs
#   CONTROL_PLANE_ADMIN      an admin's kubeconfig (O=system:masters)
#   CONTROL_PLANE_METAINIT   the user metainit's kubeconfig, as `kubeadm kubeconfig user
#                            --client-name=metainit` makes it (no rights until
#                            manifests/rbac.yaml is applied)
#   CONTROL_PLANE_SERVER     https://127.0.0.1:PORT
#   CONTROL_PLANE_CA         the CA bundle that verifies the API server's certificate
#   CONTROL_PLANE_KUBERNETES its Kubernetes version (v1.34.4)
#   METAINIT_KUBERNETES      its minor (1.34): the tests' own control planes are of it too
#
# `up --owner PID` stops the control plane when process PID ends (a test binary's).
# `up --apiserver-arg ARG` (repeatable) adds ARG to kube-apiserver's command line, kept for
# its `start` again (`--watch-cache-sizes=pods#0`: pods' watches go to etcd, not the cache).
# What there is: two Nodes (node-a, node-b) made Ready by hand, with no kubelet; the
# ServiceAccount `default` in `default` and `kube-system` (no controller-manager runs, so
# nothing else creates it: tests make it in their own namespaces). Nothing it runs dials
# outside 127.0.0.0/8: webhooks are reached through their endpoints
# (--enable-aggregator-routing), never through a ClusterIP.
set -Eeuo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# go.mod and go.sum are committed: a build never changes them.
export GOFLAGS="-mod=readonly -buildvcs=false"
cache=${METAINIT_CONTROL_PLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/metainit/control-plane}

say() { echo "control-plane: $*" >&2; }
die() { say "$*"; exit 1; }

# shellcheck source=scripts/lib/minor.sh
. "$here/scripts/lib/minor.sh"

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
  key=$( (echo recipe 2; cat "$module/go.mod" "$module/go.sum") | sha256sum | cut -c1-12)
  bin=$cache/kubernetes-$k8s_version-etcd-$etcd_version-$key
}

# shellcheck source=scripts/lib/version-ldflags.sh
. "$here/scripts/lib/version-ldflags.sh"

build() {
  if [ -x "$bin/kube-apiserver" ] && [ -x "$bin/kube-scheduler" ] && [ -x "$bin/etcd" ]; then
    say "built already: $bin"
    return 0
  fi
  command -v go >/dev/null || die "go is not installed (Go $(awk '$1 == "go" { print $2 }' "$module/go.mod") or later builds the control plane)"
  local start=$SECONDS tmp
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/build.XXXXXX")
  say "downloading modules for Kubernetes $k8s_version and etcd $etcd_version"
  (cd "$module" && go mod download)
  local fetched=$((SECONDS - start))
  say "modules ready in ${fetched}s; building (two cores: several minutes the first time)"
  (
    cd "$module"
    go build -trimpath -o "$tmp/etcd" go.etcd.io/etcd/server/v3
    go build -trimpath -ldflags "$(version_ldflags)" -o "$tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler
  )
  # One build of each minor kept: its other patches' and recipes' go.
  rm -rf "$cache/kubernetes-v$minor".*
  mv "$tmp" "$bin"
  say "built in $((SECONDS - start))s (modules ${fetched}s): $bin"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# certificate NAME SUBJECT: a client certificate signed by the test CA.
certificate() {
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$dir/pki/$1.key" -out "$dir/pki/$1.csr" -subj "$2" 2>/dev/null
  openssl x509 -req -in "$dir/pki/$1.csr" -CA "$dir/pki/ca.crt" -CAkey "$dir/pki/ca.key" \
    -CAcreateserial -days 30 -out "$dir/pki/$1.crt" \
    -extfile <(printf 'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n') 2>/dev/null
  rm -f "$dir/pki/$1.csr"
}

b64() { base64 -w0 <"$1"; }

# kubeconfig NAME USER: a kubeconfig with the certificate's data inside, as kubeadm writes it.
kubeconfig() {
  cat >"$dir/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: control-plane
  cluster:
    server: https://127.0.0.1:$(cat "$dir/apiserver.port")
    certificate-authority-data: $(b64 "$dir/pki/serving-ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(b64 "$dir/pki/$1.crt")
    client-key-data: $(b64 "$dir/pki/$1.key")
contexts:
- name: $2@control-plane
  context: {cluster: control-plane, user: $2}
current-context: $2@control-plane
EOF
  chmod 0600 "$dir/$1.kubeconfig"
}

pid_of() { cat "$dir/$1.pid" 2>/dev/null || true; }

running() { # NAME
  local pid
  pid=$(pid_of "$1")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

start_etcd() {
  local port peer
  port=$(cat "$dir/etcd.port") peer=$(cat "$dir/etcd-peer.port")
  setsid "$bin/etcd" --name default --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "default=http://127.0.0.1:$peer" --listen-metrics-urls '' \
    --unsafe-no-fsync --log-level warn \
    >>"$dir/etcd.log" 2>&1 </dev/null &
  echo $! >"$dir/etcd.pid"
}

start_kube-apiserver() {
  local port extra=()
  port=$(cat "$dir/apiserver.port")
  [ -s "$dir/apiserver.args" ] && mapfile -t extra <"$dir/apiserver.args"
  setsid "$bin/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$(cat "$dir/etcd.port")" \
    --bind-address 127.0.0.1 --secure-port "$port" --advertise-address 127.0.0.1 \
    --cert-dir "$dir/serving" \
    --service-cluster-ip-range 10.96.0.0/16 \
    --authorization-mode Node,RBAC \
    --client-ca-file "$dir/pki/ca.crt" \
    --service-account-issuer "https://127.0.0.1:$port" \
    --service-account-key-file "$dir/pki/sa.pub" \
    --service-account-signing-key-file "$dir/pki/sa.key" \
    --enable-aggregator-routing=true \
    --endpoint-reconciler-type none \
    --allow-privileged=true \
    --audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$dir/audit.log" \
    --audit-log-format json --audit-log-maxsize 200 \
    "${extra[@]}" \
    >>"$dir/kube-apiserver.log" 2>&1 </dev/null &
  echo $! >"$dir/kube-apiserver.pid"
}

start_kube-scheduler() {
  setsid "$bin/kube-scheduler" --kubeconfig "$dir/scheduler.kubeconfig" \
    --leader-elect=false --secure-port 0 \
    >>"$dir/kube-scheduler.log" 2>&1 </dev/null &
  echo $! >"$dir/kube-scheduler.pid"
}

stop() { # NAME: SIGKILL, as a crash would
  local pid
  pid=$(pid_of "$1")
  [ -n "$pid" ] || return 0
  kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  rm -f "$dir/$1.pid"
}

# wait_for WHAT SECONDS COMMAND...: polls COMMAND until it succeeds.
wait_for() {
  local what=$1 limit=$2
  shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if ! running "$what"; then
      say "$what exited; the end of its log:"
      tail -n 30 "$dir/$what.log" >&2 || true
      return 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      say "$what did not come up within ${limit}s; the end of its log:"
      tail -n 30 "$dir/$what.log" >&2 || true
      return 1
    fi
    sleep 0.1
  done
}

readyz() {
  curl -sf --cacert "$dir/pki/serving-ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" \
    "https://127.0.0.1:$(cat "$dir/apiserver.port")/readyz"
}

etcd_health() {
  curl -sf "http://127.0.0.1:$(cat "$dir/etcd.port")/health" | grep -q '"health":"true"'
}

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

up() {
  local owner='' args=() version=''
  while [ $# -gt 0 ]; do
    case $1 in
      --owner) owner=$2; shift 2 ;;
      --apiserver-arg) args+=("$2"); shift 2 ;;
      --version) version=${2:?--version needs a minor, like 1.34}; shift 2 ;;
      -*) say "up: unknown option '$1'"; usage ;;
      *) dir=$1; shift ;;
    esac
  done
  set_minor "$version"
  build
  command -v kubectl >/dev/null || die "kubectl is not installed (it creates the Nodes)"
  dir=${dir:-$(mktemp -d "${TMPDIR:-/tmp}/metainit-control-plane.XXXXXX")}
  mkdir -p "$dir/pki" "$dir/serving"
  dir=$(cd "$dir" && pwd)
  echo "$minor" >"$dir/minor"
  local start=$SECONDS t0
  # Whatever fails on the way, nothing is left running.
  trap 'say "up failed: stopping what started"; down' ERR

  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
    -keyout "$dir/pki/ca.key" -out "$dir/pki/ca.crt" -subj "/CN=metainit-test-ca" 2>/dev/null
  certificate admin "/O=system:masters/CN=kubernetes-admin"
  certificate metainit "/CN=metainit"
  certificate scheduler "/CN=system:kube-scheduler"
  openssl genrsa -out "$dir/pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$dir/pki/sa.key" -pubout -out "$dir/pki/sa.pub" 2>/dev/null
  # Every request's user, verb and URI, no bodies: the tests count metainit's requests.
  cat >"$dir/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
EOF
  if [ ${#args[@]} -gt 0 ]; then printf '%s\n' "${args[@]}" >"$dir/apiserver.args"; fi
  free_port >"$dir/etcd.port"
  free_port >"$dir/etcd-peer.port"
  free_port >"$dir/apiserver.port"

  start_etcd
  wait_for etcd 60 etcd_health
  t0=$(date +%s.%N)
  start_kube-apiserver
  # The API server writes its own serving certificate (and the CA that signed it) into
  # --cert-dir as it starts.
  wait_for kube-apiserver 120 test -s "$dir/serving/apiserver.crt"
  cp "$dir/serving/apiserver.crt" "$dir/pki/serving-ca.crt"
  wait_for kube-apiserver 120 readyz
  local ready
  ready=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  kubeconfig admin kubernetes-admin
  kubeconfig metainit metainit
  kubeconfig scheduler system:kube-scheduler
  start_kube-scheduler
  node node-a
  node node-b
  for ns in default kube-system; do
    admin -n "$ns" create serviceaccount default >/dev/null 2>&1 || true
  done
  if [ -n "$owner" ]; then
    # The owner is a test binary: when it ends, so does this control plane.
    # shellcheck disable=SC2016 # the inner bash expands them, from its arguments
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec bash "$2" down "$3"' \
      _ "$owner" "$0" "$dir" >/dev/null 2>&1 </dev/null &
  fi
  trap - ERR
  say "up in $((SECONDS - start))s (kube-apiserver answered /readyz ${ready}s after it started): $dir"
  env_of
}

env_of() {
  [ -s "$dir/admin.kubeconfig" ] || die "no control plane in $dir (run: bash scripts/control-plane.sh up)"
  cat <<EOF
export METAINIT_CONTROL_PLANE=$dir
export CONTROL_PLANE_ADMIN=$dir/admin.kubeconfig
export CONTROL_PLANE_METAINIT=$dir/metainit.kubeconfig
export CONTROL_PLANE_SERVER=https://127.0.0.1:$(cat "$dir/apiserver.port")
export CONTROL_PLANE_CA=$dir/pki/serving-ca.crt
export CONTROL_PLANE_KUBERNETES=$k8s_version
export METAINIT_KUBERNETES=$minor
EOF
}

# Whether any component logged a connection to an address outside 127.0.0.0/8 (a webhook
# or an aggregated API dialled through a ClusterIP or a real endpoint): the network rule.
check_network() {
  local found
  found=$(grep -hoE 'dial tcp [^ ]+' "$dir"/etcd.log "$dir"/kube-apiserver.log "$dir"/kube-scheduler.log 2>/dev/null |
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
  stop kube-scheduler
  stop kube-apiserver
  stop etcd
  rm -rf "$dir"
}

usage() {
  sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

versions() {
  local m
  for m in $(pinned_minors "$here/tests/control-plane"); do
    set_minor "$m"
    echo "$minor $k8s_version $etcd_version"
  done
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
    case $what in etcd | kube-apiserver | kube-scheduler) ;; *) die "$cmd what? etcd, kube-apiserver or kube-scheduler" ;; esac
    [ -d "$dir" ] || die "which control plane? give its directory or set METAINIT_CONTROL_PLANE"
    minor_of_dir
    if [ "$cmd" = stop ]; then
      stop "$what"
    else
      running "$what" && die "$what is running already"
      "start_$what"
      case $what in
        etcd) wait_for etcd 60 etcd_health ;;
        kube-apiserver) wait_for kube-apiserver 120 readyz ;;
      esac
    fi
    ;;
  *) usage ;;
esac
