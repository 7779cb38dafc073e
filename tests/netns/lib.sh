# shellcheck shell=bash
# Shared by the scripts in tests/netns that run ferroce's libibverbs.so.1 (sourced, not run).
# Sets `root` (the repository) and F: the ferroce binary given as the script's first
# argument, else target/release/ferroce, built with the library beside it when either is
# missing; and the PASS/FAIL helpers ok and ko, settled and two_hosts (below).
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
  for f in "$@"; do [ -e "$f" ] && tail -n 24 "$f" | sed "s/^/    ${f##*/}: /"; done
}
# stop PID: ends a background job started through a shell function (`X ... &`,
# `in_ns ... &`). $! is then a subshell with the program under it (ip netns exec, which
# becomes timeout, then the program): TERM to the subshell alone would leave the program
# running until its timeout. timeout passes the TERM on.
stop() { pkill -TERM -P "$1" 2>/dev/null; kill "$1" 2>/dev/null; wait "$1" 2>/dev/null; }
# Whether interface DEV in namespace NS has its IPv6 link-local address, no longer
# tentative: the GID table (and so GID indexes) is settled.
settled() { ip -n "$1" -6 addr show dev "$2" scope link | grep -q inet6 && ! ip -n "$1" -6 addr show dev "$2" | grep -q tentative; }

# two_hosts A B IF NET: namespaces A and B (deleted again on exit), joined by a veth pair
# whose ends are both named IF (programs that take the peer's device name need that),
# NET.1/24 in A and NET.2/24 in B, up with their addresses settled. Exits 1 without root.
two_hosts() {
  local a=$1 b=$2 dev=$3 net=$4
  # shellcheck disable=SC2064 # the names are fixed now
  trap "ip netns del $a 2>/dev/null; ip netns del $b 2>/dev/null; true" EXIT
  ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null
  if ! { ip netns add "$a" && ip netns add "$b"; }; then echo "cannot create network namespaces (need root)"; exit 1; fi
  ip link add "$a-0" netns "$a" type veth peer name "$b-0" netns "$b"
  ip -n "$a" link set "$a-0" name "$dev"; ip -n "$b" link set "$b-0" name "$dev"
  ip -n "$a" addr add "$net.1/24" dev "$dev"; ip -n "$b" addr add "$net.2/24" dev "$dev"
  for ns in "$a" "$b"; do ip -n "$ns" link set lo up; ip -n "$ns" link set "$dev" up; done
  # Programs take a port once it is active with its addresses settled (the IPv6
  # link-local one no longer tentative), as they would find a NIC's some time after
  # link-up.
  for _ in $(seq 1 100); do settled "$a" "$dev" && settled "$b" "$dev" && break; sleep 0.1; done
}
