# shellcheck shell=bash
# Waiting: one loop that polls until something is true, with a deadline and a message that
# names what did not happen. Sourced; says through logging.sh (sourced here too).
# shellcheck source=scripts/lib/logging.sh
. "$(dirname "${BASH_SOURCE[0]}")/logging.sh"

# wait_for [--every S] [--alive FN] [--late FN] WHAT SECONDS COMMAND...: polls COMMAND (its
# output discarded) every S seconds (0.2 unless said) until it succeeds, for SECONDS at
# most; then says "WHAT did not happen within SECONDSs" and returns 1.
#   --alive FN  `FN WHAT` runs before each try: when it fails, so does wait_for, at once (FN
#               says why: the process being waited for exited, say)
#   --late FN   `FN WHAT SECONDS` says what the deadline means instead (it may show a log)
wait_for() {
  local every=0.2 alive='' late=''
  while [ $# -gt 0 ]; do
    case $1 in
      --every) every=$2 ;;
      --alive) alive=$2 ;;
      --late) late=$2 ;;
      *) break ;;
    esac
    shift 2
  done
  local what=$1 limit=$2
  shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if [ -n "$alive" ] && ! "$alive" "$what"; then
      return 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      if [ -n "$late" ]; then "$late" "$what" "$limit"; else say "$what did not happen within ${limit}s"; fi
      return 1
    fi
    sleep "$every"
  done
}
