#!/usr/bin/env bash
# Rewrites link/hot-text.ld, the linker script that puts the code metainit runs at the
# start of its text (BENCHMARKS.md § Code layout), from this tree:
#   bash scripts/hot-text.sh
# It builds the glibc release binary (the one the benchmark measures) and the static musl
# one (the one the image ships) with their symbols, runs each under callgrind from exec to
# idle against the API server double, then through the benchmark's burst and memory
# scenarios, and gives the runs to scripts/hot-text.py. Run it again, and commit the
# script it writes, when the benchmark's idle peak RSS grows after a change.
# Needs: valgrind, nm, and what scripts/build-static.sh needs (cargo-zigbuild, ziglang).
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/double.sh
. scripts/lib/double.sh
log_init hot-text
for tool in valgrind nm cargo-zigbuild python3; do
    command -v "$tool" >/dev/null || die "$tool not found"
done

work=$(mktemp -d)
cleanup() {
    double_stop
    rm -rf "$work"
}
trap cleanup EXIT

# Symbols kept; a target directory of its own, so the usual builds are not redone.
export CARGO_PROFILE_RELEASE_STRIP=false
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}/hot-text
echo "--- building the glibc and the static musl release binaries, with symbols"
cargo build --quiet --release -p metainit
cp "$CARGO_TARGET_DIR/release/metainit" "$work/glibc"
bash scripts/build-static.sh amd64 "$work/musl" >/dev/null 2>&1 \
    || die "scripts/build-static.sh amd64 failed: run it alone to see why"

echo "--- start-up to idle, under callgrind"
kc=$work/double.kubeconfig
double_start "$kc" modern
for build in glibc musl; do
    valgrind --tool=callgrind --demangle=no --callgrind-out-file="$work/$build.idle" \
        "$work/$build" --kubeconfig "$kc" --admin-addr 127.0.0.1:0 >"$work/$build.log" 2>&1 &
    pid=$!
    # Idle once the first LIST is done and the watch is open (callgrind is slow: 60 s).
    for _ in $(seq 1 600); do
        grep -q "listed; watching" "$work/$build.log" && break
        sleep 0.1
    done
    grep -q "listed; watching" "$work/$build.log" \
        || die "$build: metainit did not reach idle under callgrind: $(tail -5 "$work/$build.log")"
    kill -TERM "$pid"
    wait "$pid" || true
done

echo "--- the benchmark's burst and memory scenarios (their quick counts), under callgrind"
# The quick run's counts: the same code runs as in the full run's, and the full run's split
# burst of 10,000 takes callgrind past the bench's 60 s wait (3,040 cleared by then, 2026-12-02).
for build in glibc musl; do
    mkdir -p "$work/$build.bench"
    METAINIT_BENCH_QUICK=1 METAINIT_BENCH_BIN=$work/$build METAINIT_BENCH_ONLY=burst,memory METAINIT_BENCH_REPS=1 \
        METAINIT_BENCH_WRAPPER="valgrind --tool=callgrind --demangle=no --callgrind-out-file=$work/$build.bench/%p.out" \
        cargo bench --quiet --bench bench >"$work/$build.bench.log" 2>&1 \
        || die "$build: the benchmark failed: $(tail -5 "$work/$build.bench.log")"
done

python3 scripts/hot-text.py \
    "$work/glibc" "$work/glibc.idle" "$work/glibc.bench"/*.out -- \
    "$work/musl" "$work/musl.idle" "$work/musl.bench"/*.out >"$work/hot-text.ld"
mv "$work/hot-text.ld" link/hot-text.ld
echo "link/hot-text.ld rewritten: rebuild, then run the benchmark's memory scenario"
