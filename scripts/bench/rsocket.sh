#!/bin/bash
# rsockets on ferroce against kernel TCP, natively, in one run (scripts/bench.sh rsocket):
# two namespaces on a veth pair of MTU $MTU (default 1500), the same unmodified programs
# both ways:
#   rstream -T b -S SIZE   over ferroce's rsockets, and with -T s over kernel TCP sockets
#                          (SIZE 4 KiB, 64 KiB, 1 MiB: streaming, Gb/s as rstream prints it)
#   iperf3 -t 3            under rdma-core's librspreload.so on ferroce, and plain
# Each figure is the median of $REPEAT runs (default 3). Prints a table with the ratios
# rsockets / TCP (1.00x = as fast as the kernel).
#   F=target/release/ferroce scripts/bench/rsocket.sh     (root; rstream, iperf3 installed)
set -uo pipefail
F=${F:?the ferroce binary} MTU=${MTU:-1500} REPEAT=${REPEAT:-3}
preload=$(dpkg -L librdmacm1 2>/dev/null | grep '/librspreload\.so$' | head -1)
a=rb-a b=rb-b
cleanup() { ip netns del $a 2>/dev/null; ip netns del $b 2>/dev/null; true; }
cleanup; trap cleanup EXIT
ip netns add $a; ip netns add $b
ip link add v$a netns $a mtu "$MTU" type veth peer name v$b netns $b mtu "$MTU"
ip -n $a addr add 10.78.0.1/24 dev v$a; ip -n $b addr add 10.78.0.2/24 dev v$b
for ns in $a $b; do ip -n $ns link set lo up; ip -n $ns link set v$ns up; done
sleep 2
X() { local ns=$1; shift; ip netns exec "$ns" timeout 60 "$F" exec -- "$@"; }
# shellcheck source=scripts/bench/lib.sh
. "$(dirname "$0")/lib.sh"   # median

# rstream_gbps SIZE COUNT [-T s]: one run's Gb/s as the client prints it.
rstream_gbps() {
  local size=$1 count=$2; shift 2
  X $b rstream -b 10.78.0.2 -S "$size" -C "$count" -T b "$@" >/dev/null 2>&1 & local sp=$!
  sleep 0.7
  X $a rstream -s 10.78.0.2 -S "$size" -C "$count" -T b "$@" 2>/dev/null | awk '/^custom/ { print $(NF-1) }'
  wait $sp
}
# iperf_gbps [preload]: one 3 s iperf3 run's receiver Gb/s.
iperf_gbps() {
  local env=()
  [ "${1:-}" = preload ] && env=(env LD_PRELOAD="$preload")
  X $b "${env[@]}" iperf3 -s -1 -B 10.78.0.2 >/dev/null 2>&1 & local sp=$!
  sleep 0.7
  X $a "${env[@]}" iperf3 -c 10.78.0.2 -t 3 -f g 2>/dev/null | awk '/receiver/ { print $(NF-2) }'
  wait $sp
}

echo "| test | rsockets on ferroce, Gb/s | kernel TCP, Gb/s | rsockets / TCP |"
echo "|------|---------------------------|------------------|----------------|"
row() { # NAME RS_VALUES TCP_VALUES
  local rs tcp; rs=$(echo "$2" | median); tcp=$(echo "$3" | median)
  awk -v n="$1" -v r="$rs" -v t="$tcp" 'BEGIN { printf "| %s | %s | %s | %s |\n", n, r, t, (r > 0 && t > 0) ? sprintf("%.2fx", r / t) : "-" }'
}
for t in "4096 20000 4 KiB" "65536 4000 64 KiB" "1048576 400 1 MiB"; do
  set -- $t
  rs="" tcp=""
  for _ in $(seq 1 "$REPEAT"); do
    rs="$rs$(rstream_gbps "$1" "$2")"$'\n'
    tcp="$tcp$(rstream_gbps "$1" "$2" -T s)"$'\n'
  done
  row "rstream -T b -S $3 $4" "$rs" "$tcp"
done
rs="" tcp=""
for _ in $(seq 1 "$REPEAT"); do
  rs="$rs$(iperf_gbps preload)"$'\n'
  tcp="$tcp$(iperf_gbps)"$'\n'
done
row "iperf3 (librspreload.so)" "$rs" "$tcp"
