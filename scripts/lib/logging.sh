# shellcheck shell=bash
# What a script says, on stderr, each line prefixed with the script's name, as
# k8s.io/kubernetes's hack/lib/logging.sh does for its scripts: every script that says
# anything sources this file (the other files here that say something need it too). Sourced;
# it only defines functions.
#
#   log_init NAME [--failed] [--status N]   once, before anything is said:
#       NAME     the prefix ("control-plane" makes "control-plane: building ...")
#       --failed die's lines say "NAME: FAILED: ..." (the check-* scripts)
#       --status die's exit status (1 unless said)
#   say MESSAGE...      "NAME: MESSAGE"
#   warn MESSAGE...     "NAME: warning: MESSAGE"
#   die MESSAGE...      "NAME: MESSAGE" (or "NAME: FAILED: MESSAGE"), then exit
#   heading MESSAGE...  on stdout, a blank line and "== MESSAGE", bold on a terminal (the demos)

log_init() {
  log_name=$1
  log_failed=
  log_status=1
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --failed) log_failed=1 ;;
      --status) log_status=$2; shift ;;
      *) echo "log_init: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
  done
}

say() { echo "${log_name:-${0##*/}}: $*" >&2; }

warn() { say "warning: $*"; }

die() {
  echo "${log_name:-${0##*/}}: ${log_failed:+FAILED: }$*" >&2
  exit "${log_status:-1}"
}

heading() {
  if [ -t 1 ]; then
    printf '\n\033[1m== %s\033[0m\n' "$*"
  else
    printf '\n== %s\n' "$*"
  fi
}
