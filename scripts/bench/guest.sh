#!/bin/bash
# Guest side of scripts/bench.sh: inside the rxe VM, on one veth pair vethA/vethB, measures
#   rxe <-> rxe           perftest on rxeA/rxeB (both in the initial namespace, policy routing)
#   ferroce <-> rxe       ferroce on vethA (moved into netns "fa") against perftest on rxeB,
#                         packet by packet (FERROCE_GSO=1) and with FERROCE_GSO=udp
#                         (UDP_SEGMENT super-packets, the default on the guest's Linux 6.1)
#   ferroce <-> ferroce   ferroce on vethA (netns fa) and on vethB (rxe removed), the same
#                         two ways at both ends
#   TCP                   iperf3 between the same two ends
# with ib_write_bw / `ferroce perf write-bw` at 64 KiB and 4 KiB (-D seconds) and
# ib_write_lat / `ferroce perf write-lat` at 2 bytes. Prints "RESULT mtu test pair value unit".
#   guest.sh FERROCE_BINARY "MTUS" DURATION REPEAT BENCH_LIB
#   (REPEAT runs of each, one RESULT line each; BENCH_LIB = scripts/bench/lib.sh, as run.sh
#   copies this script away from its directory)
. "$RXEVM_HOME/guest/lib.sh"
F=$1 MTUS=${2:-1500} D=${3:-8} R=${4:-1} LIB=$5
[ -x "$F" ] || F=/run/hostroot$F
[ -f "$LIB" ] || LIB=/run/hostroot$LIB
[ -x "$F" ] && [ -f "$LIB" ] || { echo "guest: cannot see $F or $LIB"; exit 1; }
. "$LIB"
OUT=${OUT:-/tmp/bench}; mkdir -p "$OUT/logs"
echo "guest: $(nproc) vCPUs, $(awk '/MemTotal/{print int($2/1024)" MiB"}' /proc/meminfo), $(uname -r); $("$F" --version); $(ib_write_bw --version 2>&1 | head -1)"

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
  # Packet by packet (FERROCE_GSO=1: Linux 6.1's packet sockets send no UDP GSO).
  export FERROCE_GSO=1
  bench "$MTU" ferroce-rxe - "rxe rxeB $GB" fa "ferroce vethA" 10.77.0.2
  # With super-packets through UDP sockets (the default before Linux 6.2; said here all
  # the same); rxe's UDP socket gets them cut up.
  export FERROCE_GSO=udp
  bench "$MTU" ferroce-rxe-udp - "rxe rxeB $GB" fa "ferroce vethA" 10.77.0.2
  unset FERROCE_GSO
  rdma link del rxeB
  ip netns add fb; ip link set vethB netns fb
  ip -n fb link set lo up; ip -n fb addr add 10.77.0.2/24 dev vethB; ip -n fb link set vethB up
  export FERROCE_GSO=1
  bench "$MTU" ferroce-ferroce fb "ferroce vethB" fa "ferroce vethA" 10.77.0.2
  # Super-packets both ways through UDP sockets; each receiver splits them by their
  # length, as Linux 6.1 gives its packet socket no virtio-net header to say so.
  export FERROCE_GSO=udp
  bench "$MTU" ferroce-ferroce-udp fb "ferroce vethB" fa "ferroce vethA" 10.77.0.2
  unset FERROCE_GSO
  iperf "$MTU" fb fa 10.77.0.2
  # Back to a clean initial namespace for the next MTU.
  ip netns del fa; ip netns del fb
  for p in 5 6 10 11; do ip rule del pref $p 2>/dev/null; done
  ip rule add pref 0 table local 2>/dev/null; ip rule del pref 100 table local 2>/dev/null
  ip route flush table 10 2>/dev/null; ip route flush table 11 2>/dev/null
done
