#!/usr/bin/env bash
# metainit's memory beside the original's (opsani's k8s-metainit, the Python script it
# replaces), each clearing the same labelled pod on the Kubernetes 1.13 double:
#
#   bash scripts/side-by-side.sh ORIGINAL [METAINIT] [RUNS]
#
# ORIGINAL is the original's metainit.py (from github.com/opsani/k8s-metainit; nothing of it
# is in this repository); METAINIT the binary (default: the static musl build the image
# ships, target/x86_64-unknown-linux-musl/release/metainit, which scripts/build-static.sh
# makes); RUNS each (default 3). The original, with no kubeconfig, talks to
# http://localhost:8080, as on a master whose insecure port is open: so the double listens
# there (the port must be free). Each run starts one of them, creates a labelled pod held by
# the initializer podimage.example.com, waits until the pod has no pending initializer, and
# reads the process's VmRSS and VmHWM (/proc/PID/status) a second later. Prints one line a
# run and the medians. The original runs under $ORIGINAL_PYTHON (default python3), which
# needs a `kubernetes` package of its time: its calls are the client's of 2018 (7.0.0 is the
# oldest that Python 3.7 and later can import; `python3 -m venv V && V/bin/pip install
# kubernetes==7.0.0`). Needs kubectl and cargo too.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib/double.sh
. "$here/scripts/lib/double.sh"
log_init side-by-side

original=${1:?usage: side-by-side.sh ORIGINAL [METAINIT] [RUNS]}
metainit=${2:-$here/target/x86_64-unknown-linux-musl/release/metainit}
runs=${3:-3}
python=${ORIGINAL_PYTHON:-python3}
readonly LABEL=k8s.opsani.io/initializer PORT=8080
[[ -r $original ]] || die "no original at $original (its metainit.py)"
[[ -x $metainit ]] || die "no metainit binary at $metainit (bash scripts/build-static.sh amd64 OUT)"

work=$(mktemp -d)
cleanup() {
  double_stop
  rm -rf "$work"
}
trap cleanup EXIT

# cleared NAME: the pod NAME has no pending initializer.
cleared() {
  kubectl --kubeconfig "$work/kc" get --raw \
    "/api/v1/namespaces/default/pods/$1?includeUninitialized=true" |
    python3 -c 'import json, sys; m = json.load(sys.stdin)["metadata"]; sys.exit(bool(m.get("initializers", {}).get("pending")))'
}

# run WHO NAME COMMAND...: COMMAND started, the pod NAME created and cleared; prints
# "WHO VmRSS VmHWM" in KiB.
run() {
  local who=$1 name=$2 pid
  shift 2
  env -u KUBECONFIG -u KUBERNETES_SERVICE_HOST HOME="$work/home" "$@" >"$work/$name.log" 2>&1 &
  pid=$!
  kubectl --kubeconfig "$work/kc" run "$name" --image=pause --restart=Never \
    --labels="$LABEL=true" >/dev/null 2>&1 &
  wait_for --every 0.1 "$who: the pod $name cleared" 60 cleared "$name" \
    || die "$who did not clear $name: $(tail -5 "$work/$name.log")"
  sleep 1
  kill -0 "$pid" 2>/dev/null || die "$who exited: $(tail -5 "$work/$name.log")"
  awk -v who="$who" '/^VmRSS:/ { rss = $2 } /^VmHWM:/ { hwm = $2 } END { print who, rss, hwm }' \
    "/proc/$pid/status"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

# The runs, one line each in KiB ("WHO RSS HWM"), interleaved.
measure() {
  local i
  mkdir -p "$work/home"
  for i in $(seq "$runs"); do
    run original "original-$i" "$python" "$original"
    run metainit "metainit-$i" "$metainit" --kubeconfig "$work/kc" --admin-addr 127.0.0.1:0
  done
}

# The table: each run, then the medians and their ratio.
report() {
  python3 -c '
import statistics, sys
runs = [line.split() for line in sys.stdin if line.strip()]
mib = lambda kib: f"{int(kib) / 1024:.1f} MiB"
print("| run | who | RSS after the first clearing | peak RSS |")
print("| --- | --- | --- | --- |")
for i, (who, rss, hwm) in enumerate(runs, 1):
    print(f"| {(i + 1) // 2} | {who} | {mib(rss)} | {mib(hwm)} |")
med = {w: [statistics.median(int(r[k]) for r in runs if r[0] == w) for k in (1, 2)]
       for w in ("original", "metainit")}
o, m = med["original"], med["metainit"]
print(f"medians: original {mib(o[0])} (peak {mib(o[1])}), metainit {mib(m[0])} "
      f"(peak {mib(m[1])}): {o[0] / m[0]:.1f}x less after the first clearing")'
}

# The 1.13 double on 127.0.0.1:8080 (the port must be free), its kubeconfig at $work/kc.
double_start "$work/kc" legacy --listen "127.0.0.1:$PORT" --initializer podimage.example.com=pods
say "the original: $original ($("$python" -c 'import kubernetes; print("kubernetes", kubernetes.__version__)'), $("$python" --version))"
say "metainit: $metainit ($("$metainit" --version | head -1))"
measure | tee "$work/runs" >&2
report <"$work/runs"
