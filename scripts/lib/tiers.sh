# shellcheck shell=bash
# The test tiers scripts/test.sh runs (docs/src/developers/tests.md): the fast one is a plain
# `cargo test --workspace`; the real and node tiers' tests are #[ignore]d there with "the TIER
# tier" in the reason, and run here by that name. METAINIT_SKIP=real,node skips a tier, saying
# so: nothing is left out quietly. And the node tier's Go builds, in the background.
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

# The node tier's Go builds: scripts/node.sh build, then scripts/kueue.sh build (seconds when
# cached, about 20 minutes of two cores when not), in the background at the lowest priority
# from the suite's start, so that they take the cores the steps before leave idle (the waits of
# the faults and of the real server's tests). Each writes its exit status to a file of
# $node_builds (NAME.rc) and its output beside it (NAME.log).
node_builds=
node_builds_pid=

node_builds_start() {
  tier_skipped node && return
  node_builds=$(mktemp -d)
  set -m # a process group of its own, so that node_builds_stop stops the go builds under it
  (
    nice -n 19 bash scripts/node.sh build >"$node_builds/node.log" 2>&1
    echo $? >"$node_builds/node.rc"
    nice -n 19 bash scripts/kueue.sh build >"$node_builds/kueue.log" 2>&1
    echo $? >"$node_builds/kueue.rc"
  ) &
  node_builds_pid=$!
  set +m
}

# node_built NAME: waits until the build NAME (node or kueue) has ended, and fails showing
# its output unless it succeeded.
node_built() {
  local rc
  step "scripts/$1.sh build (in the background since the suite's start)"
  wait_for --every 2 "scripts/$1.sh build" 3600 test -e "$node_builds/$1.rc" || return
  rc=$(<"$node_builds/$1.rc")
  cat "$node_builds/$1.log"
  [[ $rc == 0 ]] || die "scripts/$1.sh build exited $rc (its output is above)"
}

# node_builds_stop: whatever is still running, stopped; the outputs removed.
node_builds_stop() {
  if [[ -n $node_builds_pid ]]; then
    kill -- "-$node_builds_pid" 2>/dev/null || true
  fi
  if [[ -n $node_builds ]]; then
    rm -rf "$node_builds"
  fi
}
