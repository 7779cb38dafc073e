#!/bin/bash
# The blind-spoofer measurement of README's "Security model": `ferroce perf write-bw`
# between two namespaces, once with a flood of RC WRITEs at random PSNs (valid ICRCs,
# the client's source address) aimed at the server's live QP, once with the same flood
# at the same rate to another UDP port (same parsing cost, no NAKs possible). One run,
# both figures. Needs root (namespaces, veth); sends nothing outside them.
#   tests/netns/flood.sh [RATE_PPS] [SECONDS]       (defaults 20000 pps, 10 s)
# Builds target/release/ferroce and the psn_flood example if missing.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
T=${CARGO_TARGET_DIR:-$root/target}/release
RATE=${1:-20000} SECS=${2:-10}
[ -x "$T/ferroce" ] || (cd "$root" && cargo build --release --quiet --bin ferroce)
(cd "$root" && cargo build --release --quiet --example psn_flood)
A=ferroce-fa B=ferroce-fb
out=$(mktemp -d)
cleanup() { ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; true; }
trap 'cleanup; rm -rf "$out"' EXIT

cleanup
ip netns add $A && ip netns add $B || { echo "cannot create network namespaces (need root)"; exit 1; }
ip link add veth-a netns $A type veth peer name veth-b netns $B
ip -n $A addr add 10.89.0.1/24 dev veth-a; ip -n $B addr add 10.89.0.2/24 dev veth-b
for ns in $A $B; do ip -n $ns link set lo up; done
ip -n $A link set veth-a up; ip -n $B link set veth-b up
mac_b=$(ip -n $B -o link show veth-b | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)

run() {  # NAME [--other-port]
  local name=$1; shift
  ip netns exec $B "$T/ferroce" perf write-bw -d veth-b -D "$SECS" -s 65536 --report_gbits --stats >"$out/$name.server" 2>&1 &
  local sp=$!
  for _ in $(seq 1 100); do ip netns exec $B ss -ltn | grep -q ':18515\b' && break; sleep 0.05; done
  ip netns exec $A "$T/ferroce" perf write-bw -d veth-a -D "$SECS" -s 65536 --report_gbits --stats 10.89.0.2 >"$out/$name.client" 2>&1 &
  local cp=$!
  local qpn=
  for _ in $(seq 1 100); do
    qpn=$(grep -o 'local address: LID [0-9a-fx]* QPN 0x[0-9a-f]*' "$out/$name.server" | head -1 | awk '{print $NF}')
    [ -n "$qpn" ] && break; sleep 0.05
  done
  ip netns exec $A "$T/examples/psn_flood" veth-a 10.89.0.1 10.89.0.2 "$mac_b" "${qpn:-0x11}" "$RATE" "$SECS" "$@" 2>"$out/$name.flood" &
  local fp=$!
  wait $cp; wait $sp; wait $fp
  local bw=$(awk '/^ #bytes/ { getline; print $4; exit }' "$out/$name.client")
  local c=$(grep -h '^counters:' "$out/$name.server" | head -1)
  local n; n() { echo "$c" | grep -o "$1=[0-9]*" | cut -d= -f2 | grep . || echo 0; }
  echo "$name: ${bw:-?} Gb/s; server QP $qpn: naks_sent=$(n naks_sent) out_of_seq_request=$(n out_of_seq_request) rx_psn_out_of_window=$(n rx_psn_out_of_window) rx_malformed=$(n rx_malformed); $(tail -1 "$out/$name.flood")"
}

echo "flood at $RATE frames/s for $SECS s against perf write-bw, 64 KiB messages:"
run live
run other-port --other-port
