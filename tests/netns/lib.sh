# shellcheck shell=bash
# Shared by the scripts in tests/netns that run ferroce's libibverbs.so.1 (sourced, not run).
# Sets `root` (the repository) and F: the ferroce binary given as the script's first
# argument, else target/release/ferroce, built with the library beside it when either is
# missing; and the PASS/FAIL helpers ok and ko, and settled (below).
#   . "$(dirname "$0")/lib.sh" "$@"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ $# = 0 ]; then
  F=${CARGO_TARGET_DIR:-$root/target}/release/ferroce
  if [ ! -x "$F" ] || [ ! -f "$(dirname "$F")/libibverbs.so" ]; then
    (cd "$root" && cargo build --release --quiet -p ferroce-cli --bin ferroce -p ferroce-ibverbs --lib)
  fi
else
  F=$1
fi

# PASS and FAIL lines, counted in $pass and $fail (the caller sets both to 0).
#   ok NAME [WHAT]          the PASS line
#   ko NAME WHY [FILE...]   the FAIL line, then the tail of each file that exists
ok() { pass=$((pass + 1)); echo "PASS $1${2:+: $2}"; }
ko() {
  local name=$1 why=$2 f; shift 2
  fail=$((fail + 1)); echo "FAIL $name: $why"
  for f in "$@"; do [ -e "$f" ] && tail -n 8 "$f" | sed "s/^/    ${f##*/}: /"; done
}
# Whether interface DEV in namespace NS has its IPv6 link-local address, no longer
# tentative: the GID table (and so GID indexes) is settled.
settled() { ip -n "$1" -6 addr show dev "$2" scope link | grep -q inet6 && ! ip -n "$1" -6 addr show dev "$2" | grep -q tentative; }
