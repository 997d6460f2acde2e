#!/usr/bin/env bash
# The dependency policy (deny.toml), checked by cargo-deny: licenses, bans and sources on
# today's tree must pass; then, to show the check has teeth, a copy of the workspace with
# metainit depending on a crate the policy bans (backoff, then openssl-sys: a local stub
# of that name, so nothing is fetched) must fail, and for that ban.
#
#   bash scripts/check-deny.sh
#
# Advisories are not checked: their database is a git repository on GitHub that these
# machines cannot fetch (deny.toml says how to run that check where it can be).
# Needs: cargo-deny (the version .ci/run installs), cargo, tar.
set -euo pipefail

cd "$(dirname "$0")/.."
checks=(licenses bans sources)

# shellcheck source=scripts/lib/logging.sh
. scripts/lib/logging.sh
log_init check-deny --failed

# cargo-deny: where .ci/run installs it, if it is not on PATH.
PATH=$PATH:${XDG_CACHE_HOME:-$HOME/.cache}/metainit/tools/bin
command -v cargo-deny >/dev/null || die "cargo-deny not found (see .ci/run)"

today() {
    cargo deny --locked check --hide-inclusion-graph "${checks[@]}"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# banned CRATE: a copy of the workspace where metainit depends on a stub named CRATE.
banned() {
    local crate=$1 copy=$tmp/$1 out
    mkdir "$copy"
    tar -C . --exclude=./target --exclude=./.git -cf - . | tar -C "$copy" -xf -
    mkdir -p "$copy/stub/$crate/src"
    : >"$copy/stub/$crate/src/lib.rs"
    printf '%s\n' "[package]" "name = \"$crate\"" 'version = "0.4.0"' 'edition = "2021"' \
        'license = "MIT"' 'publish = false' >"$copy/stub/$crate/Cargo.toml"
    sed -i "0,/^\[dependencies\]\$/s||[dependencies]\n$crate = { path = \"stub/$crate\" }|" "$copy/Cargo.toml"
    grep -q "^$crate = " "$copy/Cargo.toml" || die "could not add $crate to the copy's Cargo.toml"
    if out=$(cd "$copy" && cargo deny --offline check --hide-inclusion-graph "${checks[@]}" 2>&1); then
        echo "$out" >&2
        die "cargo deny passed a workspace that depends on $crate (deny.toml bans it)"
    fi
    if ! grep -q "error\[banned\].*'$crate" <<<"$out"; then
        echo "$out" >&2
        die "cargo deny failed with $crate, but not for the ban"
    fi
    echo "check-deny: with $crate added, cargo deny fails as it should:"
    grep -E "^error\[banned\]|\{ crate = \"$crate\"" <<<"$out" | sed 's/^/    /'
}

today
banned backoff
banned openssl-sys
echo "check-deny: OK (deny.toml: ${checks[*]}; advisories not checked: no database here)"
