# shellcheck shell=bash
# The keyed Go build: binaries built unmodified from a committed Go module (tests/*/go.mod
# pins each version) into a directory of a cache outside the repo (~/.cache/metainit/...),
# named by the versions and a key, the hash of the recipe's number and the files that pin
# the build (go.mod, go.sum): a new pin or a new recipe builds anew, anything else finds its
# build in seconds. scripts/control-plane.sh, scripts/node.sh, scripts/helm.sh and
# scripts/kueue.sh build through go_build_cached, scripts/check-workflows.sh (actionlint,
# one file named by its version) through go_build. Sourced; says through logging.sh (sourced
# here too).
# shellcheck source=scripts/lib/logging.sh
. "$(dirname "${BASH_SOURCE[0]}")/logging.sh"

# go.mod and go.sum are committed: nothing here changes them, and the modules carry no VCS
# stamp. Exported for every go command of the script that sources this (go mod download, go
# list), not only for the builds.
export GOFLAGS="-mod=readonly -buildvcs=false"

# go_build [--cgo] ARGS...: `go build -trimpath ARGS` in the current directory, static
# (CGO_ENABLED=0, as Kubernetes releases its binaries) unless --cgo (the environment's
# default: the control plane's binaries, linked to glibc, as its images expect).
go_build() {
  if [ "${1:-}" = --cgo ]; then
    shift
    go build -trimpath "$@"
  else
    CGO_ENABLED=0 go build -trimpath "$@"
  fi
}

# go_build_key RECIPE FILE...: the 12 hex digits that name a build: "recipe RECIPE" (the
# number a script bumps when its way of building changes) and the FILEs, hashed.
go_build_key() {
  local recipe=$1
  shift
  (echo "recipe $recipe" && cat "$@") | sha256sum | cut -c1-12
}

# go_build_cached OPTIONS -- STEP [ARG...]: makes OUT hold BINARIES, built by STEP unless
# they are there already (then it says "built already: OUT", unless --quiet).
#   --module DIR     the Go module STEP runs in (its go.mod's go line names the Go needed)
#   --out DIR        the build's directory: CACHE/NAME-VERSIONS-KEY (go_build_key)
#   --binaries "A B" what OUT holds, each executable, once built
#   --prune GLOB     the builds OUT replaces, a pattern of names beside it, removed once STEP
#                    has built ("helm-*": one build kept)
#   --what TEXT      what is built, for the message when go is missing
#   --quiet          nothing said when OUT is built already
# `STEP TMP ARG...` runs in a subshell in DIR and builds BINARIES into TMP, a new directory
# beside OUT; only once all of them are there does TMP become OUT, and a failed build leaves
# nothing behind. STEP chains its commands (&&): a caller's `|| die` turns errexit off in
# here. Its locals are gb_*: STEP sees the caller's variables, not these.
go_build_cached() {
  local gb_module='' gb_out='' gb_binaries='' gb_prune='' gb_what='' gb_quiet=''
  while [ $# -gt 0 ]; do
    case $1 in
      --module) gb_module=$2; shift 2 ;;
      --out) gb_out=$2; shift 2 ;;
      --binaries) gb_binaries=$2; shift 2 ;;
      --prune) gb_prune=$2; shift 2 ;;
      --what) gb_what=$2; shift 2 ;;
      --quiet) gb_quiet=1; shift ;;
      --) shift; break ;;
      *) die "go_build_cached: unknown option '$1'" ;;
    esac
  done
  if [ -z "$gb_module" ] || [ -z "$gb_out" ] || [ -z "$gb_binaries" ] || [ $# -eq 0 ]; then
    die "go_build_cached: --module, --out, --binaries and a STEP are needed"
  fi
  local gb_name gb_built=1
  for gb_name in $gb_binaries; do
    [ -x "$gb_out/$gb_name" ] || gb_built=
  done
  if [ -n "$gb_built" ]; then
    [ -n "$gb_quiet" ] || say "built already: $gb_out"
    return 0
  fi
  command -v go >/dev/null ||
    die "go is not installed (Go $(awk '$1 == "go" { print $2 }' "$gb_module/go.mod") or later builds ${gb_what:-$gb_binaries})"
  local gb_dir=${gb_out%/*} gb_start=$SECONDS gb_tmp
  mkdir -p "$gb_dir" || return
  gb_tmp=$(mktemp -d "$gb_dir/build.XXXXXX") || return
  if ! (cd "$gb_module" && "$1" "$gb_tmp" "${@:2}"); then
    rm -rf "$gb_tmp"
    return 1
  fi
  for gb_name in $gb_binaries; do
    if ! [ -x "$gb_tmp/$gb_name" ]; then
      say "the build made no $gb_name"
      rm -rf "$gb_tmp"
      return 1
    fi
  done
  if [ -n "$gb_prune" ]; then
    # shellcheck disable=SC2086 # a pattern, expanded here
    rm -rf "${gb_dir:?}"/$gb_prune
  fi
  mv "$gb_tmp" "$gb_out" || return
  say "built in $((SECONDS - gb_start))s: $gb_out"
}
