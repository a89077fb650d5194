# Helpers for the install scripts (scripts/test-all and the ci-install.sh
# scripts source this file; it defines functions only).
#
#   step NAME CMD...      run CMD; on failure say which step failed and exit
#                         with its status ("scripts/test-all: step 'etcd' failed (exit 100)")
#   apt_get ARGS...       apt-get that waits up to 5 minutes for the dpkg lock
#                         (another apt run, unattended-upgrades) instead of exit 100
#   stale STAMP INPUT...  true when STAMP is missing or older than any INPUT:
#                         an install whose inputs did not change is skipped
#   touch_stamp STAMP     record that the install STAMP stands for is done

step() {
  local name="$1" status=0
  shift
  "$@" || status=$?
  if [ "$status" -ne 0 ]; then
    echo "${STEP_PREFIX:-$(basename "$0")}: step '$name' failed (exit $status): $*" >&2
    exit "$status"
  fi
}

apt_get() {
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 "$@"
}

stale() {
  local stamp="$1" input
  shift
  [ -e "$stamp" ] || return 0
  for input in "$@"; do
    [ "$input" -nt "$stamp" ] && return 0
  done
  return 1
}

touch_stamp() {
  mkdir -p "$(dirname "$1")" && touch "$1"
}
