#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run installs the tools first):
#   bash scripts/test.sh
# cargo's test summary comes last.
set -euo pipefail

cd "$(dirname "$0")/.."
target_dir=${CARGO_TARGET_DIR:-target}

# Each step says when it starts, in seconds since the suite began (the CI's figures).
step() {
    echo
    echo "==> [${SECONDS}s] $*"
}

# shellcheck source=scripts/lib/tiers.sh
source scripts/lib/tiers.sh
log_init test.sh

# What the suite leaves behind, on any exit: the Go builds if still running, the control
# plane once it is up.
control_plane=
cleanup() {
    beside_stop
    go_builds_stop
    if [[ -n $control_plane ]]; then
        bash scripts/control-plane.sh down "$control_plane"
    fi
}
trap cleanup EXIT
go_builds_start

step "cargo fmt --all -- --check"
cargo fmt --all -- --check

step "shellcheck -x (every shell script: scripts/**/*.sh, tests/**/*.sh, .ci/run)"
# A glob, not a list: a new script is checked without being named here.
shopt -s globstar nullglob
shellcheck -x scripts/**/*.sh tests/**/*.sh .ci/run
shopt -u globstar nullglob

step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "hadolint Dockerfile"
hadolint Dockerfile

step "scripts/check-book.sh (the book in docs/: mdbook build into $target_dir/book, a warning fails)"
bash scripts/check-book.sh

step "scripts/check-links.py (links, anchors and pointers to headings, offline)"
python3 scripts/check-links.py

step "scripts/check-workflows.sh (the forge's release workflow: actionlint, from its Go module, with shellcheck)"
bash scripts/check-workflows.sh

step "scripts/check-address.py (the repository, image and chart address: Cargo.toml's, everywhere)"
python3 scripts/check-address.py

step "scripts/check-commands.py (every shell block of the docs marked: run on the node or here, in a named test, or not run and why)"
python3 scripts/check-commands.py

step "scripts/check-truths.py (what the pages once said against the code, and the test harness on user pages: issue 59)"
python3 scripts/check-truths.py

step "scripts/rights-table.py --check (SECURITY.md's table of rights is what the manifests' roles grant)"
python3 scripts/rights-table.py --check

step "cargo build --workspace"
cargo build --workspace

step "scripts/check-deny.sh (cargo deny check licenses bans sources: deny.toml; no advisory database here)"
bash scripts/check-deny.sh

step "scripts/check-manifests.sh $target_dir/debug/metainit"
bash scripts/check-manifests.sh "$target_dir/debug/metainit"

step "scripts/demo.sh (the main job, end to end with kubectl; fails if a step does not happen)"
bash scripts/demo.sh

step "scripts/image-check.sh (the release binaries, their SBOMs checked by scripts/check-sbom.sh, the images)"
bash scripts/image-check.sh

step "cargo test --workspace (the fast tier: unit tests, the double, the scripts; no Go, no root)"
cargo test --workspace

# The steps that need the Go builds, after the fast tier: meanwhile the builds had its
# waits (cold, the control plane's and helm's took 7 minutes of .ci/run before the suite).
go_built helm
step "scripts/check-chart.sh $target_dir/debug/metainit (the Helm chart; helm from scripts/helm.sh)"
# The same helm for tests/cluster_helm.rs, which installs the chart on the control plane.
METAINIT_HELM=$(bash scripts/helm.sh path)
export METAINIT_HELM
bash scripts/check-chart.sh "$target_dir/debug/metainit"

go_built control-plane
step "tests/clients/check.sh (kubectl and the Python kubernetes package against the double and the real server)"
bash tests/clients/check.sh

step "scripts/control-plane.sh up (etcd, kube-apiserver, kube-scheduler for the real tier)"
# `up`'s reason is on stderr; a failed `up` stops the suite here, not in the first test.
if ! cp_env=$(bash scripts/control-plane.sh up --owner $$); then
    echo "scripts/control-plane.sh up failed (its reason is above)" >&2
    exit 1
fi
eval "$cp_env"
control_plane=$METAINIT_CONTROL_PLANE

# tests/cluster_expired.rs alone first: its fault is a race its compactions must win against
# every watch start, which on two cores shared with other tests it lost once (matrix.sh);
# then tests/cluster_faults.rs (control planes of its own, most of its 86 s waiting out
# faults) beside the rest, which share the suite's control plane.
real="the real control plane, built from k8s.io/kubernetes"
if ! tier_skipped real; then
    run_tier real "$real" cluster_expired
    # tests/cluster_content.rs's rows (answer_rows::) next, all at once: each is a minute or
    # so of watching a scene of its own (two at a time, 195 s; at once on the double, 60 s).
    # A filter that matched nothing would pass: the rows are counted first.
    step "cargo test --test cluster_content -- --ignored --test-threads 8 answer_rows:: (the real tier's answer rows, at once)"
    rows=$(cargo test -q --test cluster_content -- --ignored --list answer_rows:: 2>/dev/null | grep -c ': test$' || true)
    [[ $rows -gt 0 ]] || die "tests/cluster_content.rs has no test under answer_rows:: (scripts/test.sh runs them here, not below)"
    cargo test --test cluster_content -- --ignored --test-threads 8 answer_rows::
    tier_ran+="cluster_content "
    run_beside real cluster_faults
    run_tier real "$real"
    beside_done
else
    run_tier real "$real"
fi
if ! tier_skipped node; then
    go_built node
    # Kueue's build goes on meanwhile: only tests/node_kueue.rs needs it.
    run_tier node "a real node: containerd, runc, the kubelet; as root" \
        developer_node node node_webhook
    go_built kueue
    run_tier node "Kueue on the real node"
else
    run_tier node "a real node: containerd, runc, the kubelet; as root"
fi
# Then: the API server dialled nothing off loopback.
# Quiet when it holds, so that cargo's summary closes the output.
if ! network=$(bash scripts/control-plane.sh check-network 2>&1); then
    echo "$network"
    exit 1
fi
# The older pinned minors: scripts/matrix.sh (CI runs the newest only: .ci/run says why).
