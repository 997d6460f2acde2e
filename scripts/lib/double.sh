# shellcheck shell=bash
# The kube-apiserver double (tests/kube-double) for the scripts that need a server and no Go:
# built, started on loopback in the background, waited for, and stopped at the script's
# exit. Sourced by scripts/demo.sh, scripts/image-check.sh, scripts/hot-text.sh and
# scripts/side-by-side.sh; says through logging.sh and waits through wait.sh (sourced here).
# shellcheck source=scripts/lib/wait.sh
. "$(dirname "${BASH_SOURCE[0]}")/wait.sh"

double_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# The doubles started, for double_stop.
double_pids=()

# double_start KUBECONFIG GENERATION [FLAG...]: kube-double built (quietly) and started as
# GENERATION (legacy: Kubernetes 1.13, modern: 1.33) with FLAGs, on an ephemeral port of
# 127.0.0.1 unless a FLAG is --listen; returns once it has written KUBECONFIG (it does once it
# listens), its log at KUBECONFIG.log; dies with that log if it did not start in 10 s.
double_start() {
  local kubeconfig=$1 generation=$2 listen=(--listen 127.0.0.1:0)
  shift 2
  [[ " $* " != *" --listen "* ]] || listen=()
  cargo build --quiet -p kube-double --manifest-path "$double_root/Cargo.toml" \
    || die "cargo build -p kube-double failed"
  rm -f "$kubeconfig"
  "${CARGO_TARGET_DIR:-$double_root/target}/debug/kube-double" --generation "$generation" \
    "${listen[@]}" --kubeconfig-out "$kubeconfig" "$@" >"$kubeconfig.log" 2>&1 &
  double_pids+=($!)
  wait_for "the $generation double" 10 test -s "$kubeconfig" \
    || die "the $generation double did not start: $(cat "$kubeconfig.log")"
}

# double_stop: every double started is stopped and waited for (a script's EXIT trap).
double_stop() {
  local pid
  for pid in "${double_pids[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  double_pids=()
}
