#!/bin/bash
# Guest side of scripts/bench.sh: inside the rxe VM, on one veth pair vethA/vethB, measures
#   rxe <-> rxe           perftest on rxeA/rxeB (both in the initial namespace, policy routing)
#   ferroce <-> rxe       ferroce on vethA (moved into netns "fa") against perftest on rxeB
#   ferroce <-> ferroce   ferroce on vethA (netns fa) and on vethB (rxe removed)
#   TCP                   iperf3 between the same two ends
# with ib_write_bw / `ferroce perf write-bw` at 64 KiB and 4 KiB (-D seconds) and
# ib_write_lat / `ferroce perf write-lat` at 2 bytes. Prints "RESULT mtu test pair value unit".
#   guest.sh FERROCE_BINARY "MTUS" DURATION REPEAT   (REPEAT runs of each; one RESULT each)
. "$RXEVM_HOME/guest/lib.sh"
F=$1 MTUS=${2:-1500} D=${3:-8} R=${4:-1}
[ -x "$F" ] || F=/run/hostroot$F
[ -x "$F" ] || { echo "guest: cannot see $F"; exit 1; }
OUT=${OUT:-/tmp/bench}; mkdir -p "$OUT/logs"
echo "guest: $(nproc) vCPUs, $(awk '/MemTotal/{print int($2/1024)" MiB"}' /proc/meminfo), $(uname -r); $("$F" --version); $(ib_write_bw --version 2>&1 | head -1)"

# The result row of a perftest table (ferroce prints the same tables).
row() { awk '/^ #bytes/ { t = 1; next } t && /^ [0-9]/ { r = $0 } /^---/ && t { exit } END { print r }' "$1"; }
result() {  # MTU TEST PAIR LOG KIND(bw|lat)
  local r v; r=$(row "$4")
  if [ "$5" = bw ]; then v=$(echo "$r" | awk '{ print $4 }'); u=Gb/s
  else v=$(echo "$r" | awk '{ print $5 }'); u=us; fi
  echo "RESULT $1 $2 $3 ${v:-FAILED} $u"
}
# bench MTU PAIR SERVER_NS SERVER_TOOL CLIENT_NS CLIENT_TOOL SERVER_ADDR
#   *_NS: a network namespace or "-" for the initial one;
#   *_TOOL: "rxe DEV GID" runs perftest, "ferroce DEV" runs ferroce perf.
bench() {
  local mtu=$1 pair=$2 sn=$3 st=$4 cn=$5 ct=$6 addr=$7 t
  for t in "write_bw 65536 bw" "write_bw 4096 bw" "write_lat 2 lat"; do
    set -- $t
    local tool=$1 size=$2 kind=$3 flags attempt rep log
    if [ "$kind" = bw ]; then flags="-s $size -D $D -F --report_gbits"; else flags="-s $size -n 2000 -F"; fi
    for rep in $(seq 1 "$R"); do
    log=$OUT/logs/$mtu-$pair-$tool-$size-$rep
    # perftest calibrates its clock against /proc/cpuinfo; under TCG that sometimes fails
    # and it reports zeros: such a run goes once more.
    for attempt in 1 2; do
      in_ns "$sn" timeout 120 $(cmd "$st") >"$log.server" 2>&1 &
      local pid=$!
      wait_port 18515 "${sn#-}" 2>/dev/null
      in_ns "$cn" timeout 120 $(cmd "$ct") "$addr" >"$log.client" 2>&1
      wait $pid
      grep -q "Correlation coefficient" "$log.client" "$log.server" || break
    done
    result "$mtu" "$tool-$size" "$pair" "$log.client" "$kind"
    done
  done
}
in_ns() { local ns=$1; shift; if [ "$ns" = - ]; then "$@"; else ip netns exec "$ns" "$@"; fi; }
cmd() {  # TOOL -> command line (uses $tool and $flags)
  set -- $1
  if [ "$1" = rxe ]; then echo "ib_$tool -d $2 -x $3 $flags"
  else echo "$F perf ${tool//_/-} -d $2 $flags"; fi
}

for MTU in $MTUS; do
  echo "===== veth MTU $MTU ====="
  setup_veth_loop "$MTU" >/dev/null || { echo "setup_veth_loop failed"; exit 1; }
  bench "$MTU" rxe-rxe - "rxe rxeB $GB" - "rxe rxeA $GA" 10.77.0.2
  # ferroce's ends go into namespaces of their own (rdma_rxe keeps UDP port 4791 in the
  # initial one for as long as the module is loaded); the veth pair stays the same.
  rdma link del rxeA
  ip netns add fa; ip link set vethA netns fa
  ip -n fa link set lo up; ip -n fa addr add 10.77.0.1/24 dev vethA; ip -n fa link set vethA up
  for n in $(seq 1 50); do [ "$(cat /sys/class/net/vethB/operstate)" = up ] && break; sleep 0.1; done
  bench "$MTU" ferroce-rxe - "rxe rxeB $GB" fa "ferroce vethA" 10.77.0.2
  rdma link del rxeB
  ip netns add fb; ip link set vethB netns fb
  ip -n fb link set lo up; ip -n fb addr add 10.77.0.2/24 dev vethB; ip -n fb link set vethB up
  bench "$MTU" ferroce-ferroce fb "ferroce vethB" fa "ferroce vethA" 10.77.0.2
  for rep in $(seq 1 "$R"); do
    ip netns exec fb iperf3 -s -1 -B 10.77.0.2 >"$OUT/logs/$MTU-iperf3-$rep.server" 2>&1 &
    wait_port 5201 fb
    ip netns exec fa iperf3 -c 10.77.0.2 -t "$D" -J >"$OUT/logs/$MTU-iperf3-$rep.json" 2>&1
    wait
    echo "RESULT $MTU tcp tcp-iperf3 $(awk -F: '/"bits_per_second"/ { v = $2 } END { gsub(/[ ,]/, "", v); printf "%.3f", v / 1e9 }' "$OUT/logs/$MTU-iperf3-$rep.json") Gb/s"
  done
  # Back to a clean initial namespace for the next MTU.
  ip netns del fa; ip netns del fb
  for p in 5 6 10 11; do ip rule del pref $p 2>/dev/null; done
  ip rule add pref 0 table local 2>/dev/null; ip rule del pref 100 table local 2>/dev/null
  ip route flush table 10 2>/dev/null; ip route flush table 11 2>/dev/null
done
