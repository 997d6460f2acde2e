#!/usr/bin/env bash
# The real-server suite against each pinned Kubernetes minor (scripts/control-plane.sh
# versions), and the README's "Tested on" table from what it found:
#
#   bash scripts/matrix.sh                  # every pinned minor, the table printed
#   bash scripts/matrix.sh 1.34 1.37        # those minors
#   bash scripts/matrix.sh --write          # and recorded: tests/matrix/MINOR.tsv, README.md
#   bash scripts/matrix.sh --without-node 1.34
#
# For each minor: its control plane built and started (`up --version MINOR`, exported as
# METAINIT_KUBERNETES, so the tests' own control planes are of it too), then the tests that
# need a real server: tests/cluster*.rs, tests/clients/check.sh (kubectl and the Python client
# against the double and that server), and, as root, tests/node.rs on that minor's kubelet
# (scripts/node.sh), unless --without-node. Every test runs, whatever fails before it; the
# exit is 1 if any failed on any minor, 2 on bad arguments. Each test's result (name and
# ok/FAILED) goes to DIR/MINOR.tsv (a temporary DIR, or tests/matrix with --write), headed by
# the minor, the patch, the etcd, the date and the commit; scripts/matrix-table.py renders
# those files as the table (README.md between its tested-on markers, checked by
# tests/generated.rs: the table is generated, never typed).
set -Eeuo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

# shellcheck source=scripts/lib/logging.sh
. "$here/scripts/lib/logging.sh"
log_init matrix

usage() {
  sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# NAME EXECUTABLE of each test binary that needs a real API server (tests/cluster*.rs),
# built if needed.
cluster_binaries() {
  local f args=()
  for f in tests/cluster*.rs; do
    f=${f#tests/}
    args+=(--test "${f%.rs}")
  done
  cargo test --no-run --message-format=json "${args[@]}" 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])'
}

# results SUITE LOG: the `test NAME ... ok|FAILED|ignored` lines of a test binary's LOG.
results() {
  awk -v suite="$1" '/^test .* \.\.\. (ok|FAILED|ignored)$/ { print suite "\t" $2 "\t" $NF }' "$2"
}

# run_binaries LOGDIR NAME EXECUTABLE...: each in turn, as cargo test runs it (from the
# repository, --no-fail-fast); a binary that printed no result is a failure of its own.
run_binaries() {
  local logs=$1
  shift
  while [ $# -gt 0 ]; do
    local rc=0
    # --include-ignored: the real and node tiers are #[ignore]d in a plain `cargo test`.
    "$2" --include-ignored >"$logs/$1.log" 2>&1 || rc=$?
    results "$1" "$logs/$1.log"
    # A binary that failed without a failed test to show for it (it aborted, or printed
    # nothing) is a failure of its own: its exit decides, not only the lines it printed.
    if [ "$rc" != 0 ] && ! grep -q $'\tFAILED$' <(results "$1" "$logs/$1.log"); then
      printf '%s\t%s exited %s\tFAILED\n' "$1" "$1" "$rc"
    elif ! grep -q . <(results "$1" "$logs/$1.log"); then
      printf '%s\t%s ran no test\tFAILED\n' "$1" "$1"
    fi
    shift 2
  done
}

# clients_results LOG: tests/clients/check.sh's `ok   NAME` and `FAIL NAME` lines.
clients_results() {
  sed -nE 's/^ok   (.*)$/clients\t\1\tok/p; s/^FAIL (.*)$/clients\t\1\tFAILED/p' "$1"
}

# run_cluster MINOR LOGDIR: the control plane up, the cluster tests and the clients check.
# tests/cluster_faults.rs starts control planes of its own and spends most of its two minutes
# waiting out faults: it runs beside the others, which share the suite's. tests/cluster_expired.rs
# runs alone, last: its fault is a race its compactions must win against every watch start
# (a watch that escapes ends the fault), and on two cores shared with the others it lost one
# in a run of 1.36 (2 of the 4 410s it needs); alone it held in every run.
run_cluster() {
  local minor=$1 logs=$2 cp_env beside=() alone=() rest=() name exe
  while read -r name exe; do
    case $name in
      cluster_faults) beside+=("$name" "$exe") ;;
      cluster_expired) alone+=("$name" "$exe") ;;
      *) rest+=("$name" "$exe") ;;
    esac
  done < <(cluster_binaries)
  if ! cp_env=$(bash scripts/control-plane.sh up --version "$minor" --owner $$ 2>"$logs/up.log"); then
    cat "$logs/up.log" >&2
    printf 'control-plane\tup --version %s\tFAILED\n' "$minor"
    return 0
  fi
  (
    eval "$cp_env"
    run_binaries "$logs" "${beside[@]}" >"$logs/beside.tsv" &
    run_binaries "$logs" "${rest[@]}"
    local rc=0
    bash tests/clients/check.sh >"$logs/clients.log" 2>&1 || rc=$?
    clients_results "$logs/clients.log"
    if [ "$rc" != 0 ] && ! grep -q $'\tFAILED$' <(clients_results "$logs/clients.log"); then
      printf 'clients\ttests/clients/check.sh exited %s\tFAILED\n' "$rc"
    elif ! grep -q . <(clients_results "$logs/clients.log"); then
      printf 'clients\ttests/clients/check.sh ran no check\tFAILED\n'
    fi
    wait
    cat "$logs/beside.tsv"
    run_binaries "$logs" "${alone[@]}"
    if bash scripts/control-plane.sh check-network >"$logs/network.log" 2>&1; then
      printf 'control-plane\tnothing dialled off loopback\tok\n'
    else
      printf 'control-plane\tnothing dialled off loopback\tFAILED\n'
    fi
    bash scripts/control-plane.sh down
  )
}

# run_node MINOR LOGDIR: tests/node.rs on that minor's kubelet.
run_node() {
  local minor=$1 logs=$2
  if ! bash scripts/node.sh build --version "$minor" >"$logs/node-build.log" 2>&1; then
    printf 'node\tscripts/node.sh build --version %s\tFAILED\n' "$minor"
    return 0
  fi
  local exe
  exe=$(cargo test --no-run --message-format=json --test node 2>/dev/null |
    python3 -c 'import json, sys; print(*[m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable") and m["profile"]["test"]])')
  run_binaries "$logs" node "$exe"
}

# header MINOR: the record's first line.
header() {
  local line commit
  line=$(bash scripts/control-plane.sh versions | awk -v m="$1" '$1 == m')
  commit=$(git rev-parse --short=12 HEAD)
  # Its own outputs aside, a tree that differs from the commit says so.
  if [ -n "$(git status --porcelain -- . ':!tests/matrix' ':!README.md')" ]; then
    commit+=+dirty
  fi
  read -r _ k8s etcd <<<"$line"
  printf '# minor %s kubernetes %s etcd %s date %s commit %s node %s\n' \
    "$1" "$k8s" "$etcd" "$(date -u +%F)" "$commit" "$2"
}

# one MINOR OUT NODE: the whole suite on MINOR, recorded in OUT/MINOR.tsv.
one() {
  local minor=$1 out=$2 node=$3 logs start=$SECONDS
  logs=$(mktemp -d "${TMPDIR:-/tmp}/metainit-matrix-$minor.XXXXXX")
  say "$minor: building its control plane"
  bash scripts/control-plane.sh build --version "$minor" >"$logs/build.log" 2>&1 || {
    cat "$logs/build.log" >&2
    say "$minor: the control plane did not build"
  }
  export METAINIT_KUBERNETES=$minor
  {
    header "$minor" "$node"
    say "$minor: the cluster tests and the clients check (logs: $logs)"
    run_cluster "$minor" "$logs"
    if [ "$node" = yes ]; then
      say "$minor: the node tests"
      run_node "$minor" "$logs"
    fi
  } >"$out/$minor.tsv"
  unset METAINIT_KUBERNETES
  local failed passed
  passed=$(grep -c $'\tok$' "$out/$minor.tsv" || true)
  failed=$(grep -c $'\tFAILED$' "$out/$minor.tsv" || true)
  say "$minor: $passed passed, $failed failed in $((SECONDS - start))s (logs: $logs)"
  grep $'\tFAILED$' "$out/$minor.tsv" | sed 's/^/matrix:   FAILED /' >&2 || true
}

main() {
  local write='' node=yes minors=()
  while [ $# -gt 0 ]; do
    case $1 in
      --write) write=1 ;;
      --without-node) node=no ;;
      1.*) minors+=("$1") ;;
      *) say "unknown argument '$1'"; usage ;;
    esac
    shift
  done
  local pinned
  pinned=$(bash scripts/control-plane.sh versions | awk '{ print $1 }')
  [ ${#minors[@]} -gt 0 ] || mapfile -t minors <<<"$pinned"
  for m in "${minors[@]}"; do
    grep -qx "$m" <<<"$pinned" || { say "'$m' is not pinned; pinned: $(paste -sd' ' <<<"$pinned")"; exit 2; }
  done
  if [ "$node" = yes ] && [ "$(id -u)" != 0 ]; then
    say "not root: the node tests are left out (as with --without-node)"
    node=no
  fi
  METAINIT_HELM=$(bash scripts/helm.sh path)
  export METAINIT_HELM
  # Built before any clock starts (and its errors shown, if any).
  cargo test --no-run --workspace >/dev/null 2>&1 || cargo test --no-run --workspace
  local out
  if [ -n "$write" ]; then out=tests/matrix; else out=$(mktemp -d "${TMPDIR:-/tmp}/metainit-matrix.XXXXXX"); fi
  mkdir -p "$out"
  for m in "${minors[@]}"; do one "$m" "$out" "$node"; done
  if [ -n "$write" ]; then
    python3 scripts/matrix-table.py --write README.md tests/matrix/*.tsv
  else
    python3 scripts/matrix-table.py "$out"/*.tsv
  fi
  for m in "${minors[@]}"; do
    if grep -q $'\tFAILED$' "$out/$m.tsv"; then
      say "failed on some minor (above)"
      exit 1
    fi
  done
}

main "$@"
