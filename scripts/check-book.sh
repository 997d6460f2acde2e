#!/usr/bin/env bash
# The book (book.toml, docs/src): built by mdbook, the version .ci/run installs, into
# target/book (never checked in), failing on any warning as well as on an error. mdbook
# has no switch that makes a warning fatal: its log is read instead.
#
#   bash scripts/check-book.sh            # then open target/book/index.html
#
# Needs: mdbook (the version .ci/run pins).
set -euo pipefail

cd "$(dirname "$0")/.."
dest=${CARGO_TARGET_DIR:-target}/book
# An absolute CARGO_TARGET_DIR is taken as it is; a relative one from the repository.
[[ $dest == /* ]] || dest=$PWD/$dest

# shellcheck source=scripts/lib/logging.sh
. scripts/lib/logging.sh
log_init check-book --failed

# mdbook: where .ci/run installs it, if it is not on PATH.
find_mdbook() {
    PATH=$PATH:${XDG_CACHE_HOME:-$HOME/.cache}/metainit/tools/bin
    command -v mdbook >/dev/null || die "mdbook not found (see .ci/run)"
    version=$(mdbook --version)
    pinned=$(awk '$1 == "cargo_tool" && $2 == "mdbook" { print $3 }' .ci/run)
    [ "$version" = "mdbook v$pinned" ] || die "$version, but .ci/run pins mdbook $pinned"
}

# build: the whole book; its log kept for the next step.
build() {
    log=$(mktemp)
    trap 'rm -f "$log"' EXIT
    if ! mdbook build --dest-dir "$dest" >"$log" 2>&1; then
        cat "$log" >&2
        die "mdbook build failed"
    fi
}

# no_warnings: a warning (an unclosed HTML tag, a bad include, a missing file) fails.
no_warnings() {
    if grep -E '(^|[[:space:]])(WARN|ERROR)[[:space:]]' "$log" >&2; then
        die "mdbook build warned (above)"
    fi
}

find_mdbook
build
no_warnings
echo "ok    $version: the book built into $dest, no warning"
