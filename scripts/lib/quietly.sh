# shellcheck shell=bash
# Quiet commands. Sourced.

# quietly COMMAND...: runs COMMAND with its output kept back, and shows that output only if it
# fails (then exits 1: "FAILED: COMMAND" and the output, on stderr).
quietly() {
  local log
  log=$(mktemp)
  if ! "$@" >"$log" 2>&1; then
    echo "FAILED: $*" >&2
    cat "$log" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
}
