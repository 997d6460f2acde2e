# shellcheck shell=bash
# The test tiers scripts/test.sh runs (docs/src/developers/tests.md): the fast one is a plain
# `cargo test --workspace`; the real and node tiers' tests are #[ignore]d there with "the TIER
# tier" in the reason, and run here by that name. METAINIT_SKIP=real,node skips a tier, saying
# so: nothing is left out quietly. And the suite's Go builds, in the background.
# Sourced by scripts/test.sh, which defines `step`.
# shellcheck source=scripts/lib/wait.sh
. "$(dirname "${BASH_SOURCE[0]}")/wait.sh"

# tier_skipped TIER: METAINIT_SKIP names it.
tier_skipped() {
  [[ ,${METAINIT_SKIP:-}, == *,$1,* ]]
}

# The test binaries run so far, each between spaces.
tier_ran=" "

# run_tier TIER WHAT [BINARY...]: `cargo test --test B... -- --ignored` for the test binaries
# that hold a test of TIER (only the BINARYs named, if any) and have not run yet; or the step
# line saying it is skipped.
run_tier() {
  local tier=$1 what=$2 file binary binaries=()
  shift 2
  if tier_skipped "$tier"; then
    step "SKIPPED: the $tier tier ($what), as METAINIT_SKIP=$METAINIT_SKIP asks"
    return
  fi
  while read -r file; do
    binary=$(basename "$file" .rs)
    if (($#)) && [[ " $* " != *" $binary "* ]]; then continue; fi
    if [[ $tier_ran == *" $binary "* ]]; then continue; fi
    binaries+=(--test "$binary")
    tier_ran+="$binary "
  done < <(grep -l "ignore = \"the $tier tier" tests/*.rs)
  ((${#binaries[@]})) || die "no test binary of the $tier tier${*:+ among $*}"
  step "cargo test ${binaries[*]} -- --ignored (the $tier tier: $what)"
  cargo test "${binaries[@]}" -- --ignored
}

# run_beside TIER BINARY: `cargo test --test BINARY -- --ignored` in the background (cargo
# holds its lock only while it builds), its output kept for beside_done; the step line says so.
beside_pid=
beside_log=
run_beside() {
  tier_skipped "$1" && return
  tier_ran+="$2 "
  beside_log=$(mktemp)
  step "cargo test --test $2 -- --ignored (the $1 tier, in the background beside the next step)"
  set -m # a process group of its own, so that beside_stop stops the test binary too
  cargo test --test "$2" -- --ignored >"$beside_log" 2>&1 &
  beside_pid=$!
  set +m
}

# beside_stop: run_beside's tests stopped, if still running (the suite's exit).
beside_stop() {
  [[ -z $beside_pid ]] || kill -- "-$beside_pid" 2>/dev/null || true
}

# beside_done: waits for run_beside's tests, shows their output, and fails unless they passed.
beside_done() {
  [[ -n $beside_pid ]] || return 0
  local rc=0
  step "the tests run beside: their output"
  wait "$beside_pid" || rc=$?
  cat "$beside_log"
  rm -f "$beside_log"
  beside_pid=
  [[ $rc == 0 ]] || die "the tests run beside exited $rc (their output is above)"
}

# The suite's Go builds, one after another in the background at the lowest priority from the
# suite's start, so that they take the cores the steps before leave idle (the waits of the
# faults and of the double's tests): the control plane (scripts/control-plane.sh build, its
# newest minor or $METAINIT_KUBERNETES) and helm (scripts/helm.sh build), which the chart's
# checks, the clients' check and the real tier need; then, unless the node tier is skipped, the
# node's (scripts/node.sh build) and Kueue's (scripts/kueue.sh build). Seconds each when cached;
# with an empty Go build cache on 2 shared cores 317 s, 102 s, 805 s and 274 s (2026-12-02). Each
# writes its exit status to a file of $go_builds (NAME.rc) and its output beside it (NAME.log).
go_builds=
go_builds_pid=

go_builds_start() {
  local names=(control-plane helm)
  tier_skipped node || names+=(node kueue)
  go_builds=$(mktemp -d)
  set -m # a process group of its own, so that go_builds_stop stops the go builds under it
  (
    for name in "${names[@]}"; do
      nice -n 19 bash "scripts/$name.sh" build >"$go_builds/$name.log" 2>&1
      echo $? >"$go_builds/$name.rc"
    done
  ) &
  go_builds_pid=$!
  set +m
}

# go_built NAME: waits until the build NAME (control-plane, helm, node or kueue) has ended,
# and fails showing its output unless it succeeded.
go_built() {
  local rc
  step "scripts/$1.sh build (in the background since the suite's start)"
  wait_for --every 2 "scripts/$1.sh build" 3600 test -e "$go_builds/$1.rc" || return
  rc=$(<"$go_builds/$1.rc")
  cat "$go_builds/$1.log"
  [[ $rc == 0 ]] || die "scripts/$1.sh build exited $rc (its output is above)"
}

# go_builds_stop: whatever is still running, stopped; the outputs removed.
go_builds_stop() {
  if [[ -n $go_builds_pid ]]; then
    kill -- "-$go_builds_pid" 2>/dev/null || true
  fi
  if [[ -n $go_builds ]]; then
    rm -rf "$go_builds"
  fi
}
