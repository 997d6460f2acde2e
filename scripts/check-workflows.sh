#!/usr/bin/env bash
# Checks the forge's workflows (.github/workflows/*.yml) with actionlint, built unmodified from
# its Go module (tests/actionlint/go.mod pins the version), with shellcheck on their `run:`
# scripts. The binary is kept in ~/.cache/metainit/actionlint (or $METAINIT_ACTIONLINT_CACHE).
#
#   bash scripts/check-workflows.sh
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
module=$here/tests/actionlint
cache=${METAINIT_ACTIONLINT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/metainit/actionlint}

# shellcheck source=scripts/lib/logging.sh
. "$here/scripts/lib/logging.sh"
log_init check-workflows
# shellcheck source=scripts/lib/go-build.sh
. "$here/scripts/lib/go-build.sh"

# The binary of the pinned version, built once (scripts/lib/go-build.sh's recipe; one file,
# named by its version alone).
actionlint_binary() {
  local version
  version=$(awk '$1 == "github.com/rhysd/actionlint" { print $2; exit }' "$module/go.mod")
  [[ -n $version ]] || die "cannot read actionlint's version in $module/go.mod"
  bin=$cache/actionlint-$version
  [[ -x $bin ]] && return
  say "building actionlint $version"
  mkdir -p "$cache"
  (cd "$module" && go_build -o "$bin.tmp" github.com/rhysd/actionlint/cmd/actionlint) ||
    die "go build of actionlint failed"
  mv "$bin.tmp" "$bin"
}

main() {
  command -v shellcheck >/dev/null || die "shellcheck not found (apt-get install shellcheck)"
  actionlint_binary
  cd "$here"
  local workflows=(.github/workflows/*.yml)
  "$bin" -shellcheck "$(command -v shellcheck)" "${workflows[@]}"
  say "${#workflows[@]} workflow(s) clean: ${workflows[*]}"
}

main "$@"
