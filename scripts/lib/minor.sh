# shellcheck shell=bash
# Which Kubernetes minor a script builds and starts (sourced by scripts/control-plane.sh and
# scripts/node.sh). Each pinned minor is a directory of Go modules named after it
# (tests/control-plane/1.34/, tests/node/1.34/, written by scripts/pin-kubernetes.sh). The
# minor is `--version MINOR` where a command takes it, else $METAINIT_KUBERNETES (so that a
# test binary's own control planes are of the suite's minor), else the newest pinned one.
# Each script defines set_minor (what a minor means to it) and usage.

# The pinned minors under DIR, oldest first, one per line.
pinned_minors() { # DIR
  local d
  for d in "$1"/*/go.mod; do
    [ -e "$d" ] || continue
    d=${d%/go.mod}
    echo "${d##*/}"
  done | sort -V
}

# pick_minor DIR [MINOR]: MINOR (or $METAINIT_KUBERNETES, or the newest) if pinned under DIR;
# a patch version (1.34.4) is taken as its minor. Fails naming the pinned ones otherwise.
pick_minor() {
  local base=$1 want=${2:-${METAINIT_KUBERNETES:-}} pinned
  pinned=$(pinned_minors "$base")
  [ -n "$pinned" ] || { echo "no Kubernetes minor is pinned under $base" >&2; return 2; }
  if [ -z "$want" ]; then
    tail -n1 <<<"$pinned"
    return 0
  fi
  want=${want#v}
  if [[ $want =~ ^1\.[0-9]+(\.[0-9]+)?$ ]]; then
    want=$(cut -d. -f1-2 <<<"$want")
    if grep -qx "$want" <<<"$pinned"; then
      echo "$want"
      return 0
    fi
  fi
  echo "Kubernetes '$want' is not pinned here; pinned: $(paste -sd' ' <<<"$pinned") (add one with scripts/pin-kubernetes.sh)" >&2
  return 2
}

# only_version ARGS...: the MINOR of `--version MINOR`, the only arguments a `build` takes
# (the calling script's usage otherwise).
only_version() {
  case $# in
    0) ;;
    2) [ "$1" = --version ] || usage; echo "$2" ;;
    *) usage ;;
  esac
}

# minor_of_dir: the calling script's set_minor for the minor its `up` wrote in $dir (the
# newest where an older `up` wrote none): a running one keeps its minor.
minor_of_dir() {
  # shellcheck disable=SC2154 # $dir: the calling script's
  set_minor "$(cat "$dir/minor" 2>/dev/null || true)"
}
