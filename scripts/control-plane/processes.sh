# shellcheck shell=bash
# shellcheck disable=SC2154 # $bin, $dir: scripts/control-plane.sh's globals, set before it calls this
# The processes (sourced by scripts/control-plane.sh): how etcd, each kube-apiserver and
# kube-scheduler start (each in a session of its own, its pid in DIR/NAME.pid, its output in
# DIR/NAME.log), stop, and are waited for.
#
# kube-apiserver I (1 to the N of `up --apiservers N`, kept in DIR/apiservers): the first
# has the names it always had (kube-apiserver.pid, kube-apiserver.log, audit.log,
# apiserver.port), instance I the same with -I (kube-apiserver-I.log, audit-I.log, ...).

apiservers() { cat "$dir/apiservers" 2>/dev/null || echo 1; } # N (1 where an older up kept none)

suffix() { [ "$1" = 1 ] || echo "-$1"; } # I: what instance I's names have after their stem

apiserver_port() { cat "$dir/apiserver$(suffix "$1").port"; } # I

# instance NAME: I of kube-apiserver (1) or kube-apiserver-I, if I is one of DIR's.
instance() {
  local i=1
  case $1 in
    kube-apiserver) ;;
    kube-apiserver-[1-9]) i=${1#kube-apiserver-} ;;
    *) return 1 ;;
  esac
  [ "$i" -le "$(apiservers)" ] && echo "$i"
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

# start_apiserver I: kube-apiserver I on its own --secure-port, with its own log and
# --audit-log-path (the one policy); the same etcd, client CA, ServiceAccount keys and
# --apiserver-arg extras (DIR/apiserver.args) as the others, as kubeadm's HA control plane
# runs them. What else several on one etcd and one machine need:
# - One serving certificate: the first writes it into --cert-dir as it starts (or reads it
#   there again); the others serve that file (--tls-cert-file, --tls-private-key-file),
#   never writing one of their own, so that the one CA bundle verifies every server. Its
#   SANs hold 127.0.0.1 (the bind address), and a certificate has no port.
# - One --service-account-issuer, the first's URL: a token one signs, every one accepts.
# - --endpoint-reconciler-type none for all, as for the one: the lease reconciler (the
#   default, which needs no --apiserver-count) would write each one's --advertise-address
#   into the kubernetes Endpoints, which refuse 127.0.0.0/8; nothing here reaches the API
#   through that Service (its targetPort is the first's port: it is made once, not
#   reconciled). --advertise-address and --bind-address are 127.0.0.1 for all.
# - Not told apart: their identity Lease (kube-system/apiserver-HASH, the hash of the
#   hostname and "kube-apiserver"), which all renew in turn, an occasional "Failed to update
#   lease" conflict in their logs. Nothing here reads it: the mixed-version proxy that would
#   needs --peer-ca-file, and no controller-manager runs. Distinct identities would take a
#   hostname each (a UTS namespace each: root).
start_apiserver() {
  local sfx port extra=() tls=(--cert-dir "$dir/serving")
  sfx=$(suffix "$1")
  port=$(apiserver_port "$1")
  [ -s "$dir/apiserver.args" ] && mapfile -t extra <"$dir/apiserver.args"
  if [ "$1" != 1 ]; then
    tls=(--tls-cert-file "$dir/serving/apiserver.crt" --tls-private-key-file "$dir/serving/apiserver.key")
  fi
  setsid "$bin/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$(cat "$dir/etcd.port")" \
    --bind-address 127.0.0.1 --secure-port "$port" --advertise-address 127.0.0.1 \
    "${tls[@]}" \
    --service-cluster-ip-range 10.96.0.0/16 \
    --authorization-mode Node,RBAC \
    --client-ca-file "$dir/pki/ca.crt" \
    --service-account-issuer "https://127.0.0.1:$(apiserver_port 1)" \
    --service-account-key-file "$dir/pki/sa.pub" \
    --service-account-signing-key-file "$dir/pki/sa.key" \
    --enable-aggregator-routing=true \
    --endpoint-reconciler-type none \
    --allow-privileged=true \
    --audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$dir/audit$sfx.log" \
    --audit-log-format json --audit-log-maxsize 200 \
    "${extra[@]}" \
    >>"$dir/kube-apiserver$sfx.log" 2>&1 </dev/null &
  echo $! >"$dir/kube-apiserver$sfx.pid"
}

start_kube-scheduler() {
  setsid "$bin/kube-scheduler" --kubeconfig "$dir/scheduler.kubeconfig" \
    --leader-elect=false --secure-port 0 \
    >>"$dir/kube-scheduler.log" 2>&1 </dev/null &
  echo $! >"$dir/kube-scheduler.pid"
}

# start NAME: starts it again on its ports and data; returns once it answers (etcd's
# /health, a kube-apiserver's /readyz).
start() {
  local i
  running "$1" && die "$1 is running already"
  case $1 in
    etcd) start_etcd; wait_up etcd 60 etcd_health ;;
    kube-scheduler) start_kube-scheduler ;;
    *)
      i=$(instance "$1")
      start_apiserver "$i"
      wait_up "$1" 120 readyz "$i"
      ;;
  esac
}

stop() { # NAME: SIGKILL, as a crash would
  local pid
  pid=$(pid_of "$1")
  [ -n "$pid" ] || return 0
  kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  rm -f "$dir/$1.pid"
}

# log_tail NAME: the end of its log, on stderr.
log_tail() { tail -n 30 "$dir/$1.log" >&2 || true; }
# still_running NAME: whether NAME runs; if not, says so with the end of its log.
still_running() { running "$1" || { say "$1 exited; the end of its log:"; log_tail "$1"; return 1; }; }
# not_up NAME SECONDS: NAME's deadline passed; the end of its log.
not_up() { say "$1 did not come up within ${2}s; the end of its log:"; log_tail "$1"; }

# wait_up NAME SECONDS COMMAND...: polls COMMAND until it succeeds (scripts/lib/wait.sh),
# while process NAME runs; else the end of NAME's log.
wait_up() { wait_for --every 0.1 --alive still_running --late not_up "$@"; }

readyz() { # [I]: whether kube-apiserver I (the first by default) answers /readyz with 200
  curl -sf --cacert "$dir/pki/serving-ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" \
    "https://127.0.0.1:$(apiserver_port "${1:-1}")/readyz"
}

etcd_health() {
  curl -sf "http://127.0.0.1:$(cat "$dir/etcd.port")/health" | grep -q '"health":"true"'
}
