#!/bin/bash
# DCQCN end to end through a real ECN-marking Linux queue.
#
#   s1 (sender) ──┐                                          ┌─ mv1 (receiver 1)
#                 ├── router: htb RATE + red ... ecn on r3 ──┤  d: veth de + macvlans
#   s2 (sender) ──┘                                          └─ mv2 (receiver 2)
#
# Two `ferroce perf write-bw -D` flows from two sender namespaces into one receiver namespace
# (each receiver process on its own macvlan of the receiver's veth) share the router's
# egress queue: an htb class at RATE whose leaf is RED with ECN marking. The run is done
# twice, DCQCN on and off; each prints its figures (cli/examples/dcqcn_report.rs) and draws a
# PNG of each flow's goodput and DCQCN rate and the queue's marks and drops over time.
#   tests/dcqcn/run.sh [FERROCE_BINARY [REPORT_BINARY]]   (root; sch_htb, sch_red, macvlan)
# Env: DURATION (s, default 24), RATE (Mb/s, default 10), OUT (output directory).
# Prints PASS/FAIL lines and "dcqcn: N passed, M failed"; exit 0 iff all pass.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tgt=${CARGO_TARGET_DIR:-$root/target}
F=${1:-$tgt/release/ferroce}
R=${2:-$tgt/release/examples/dcqcn_report}
[ -x "$F" ] && [ -x "$R" ] || (cd "$root" && cargo build --release --quiet -p ferroce-cli --bin ferroce --example dcqcn_report)
DURATION=${DURATION:-24} RATE=${RATE:-10}
out=${OUT:-$root/target}/dcqcn; rm -rf "$out"; mkdir -p "$out"
NS="dq-s1 dq-s2 dq-r dq-d"
cleanup() { for n in $NS; do ip netns del "$n" 2>/dev/null; done; true; }
trap cleanup EXIT
pass=0 fail=0
verdict() { if [ "$1" = 0 ]; then pass=$((pass + 1)); echo "PASS $2"; else fail=$((fail + 1)); echo "FAIL $2"; fi; }

for m in sch_htb sch_red macvlan; do modprobe "$m" 2>/dev/null; done

topology() {
  cleanup
  for n in $NS; do ip netns add "$n" || { echo "cannot create network namespaces (need root)"; exit 1; }; ip -n "$n" link set lo up; done
  ip link add s1e netns dq-s1 type veth peer name r1 netns dq-r
  ip link add s2e netns dq-s2 type veth peer name r2 netns dq-r
  ip link add de netns dq-d type veth peer name r3 netns dq-r
  ip -n dq-s1 addr add 10.20.1.2/24 dev s1e; ip -n dq-s2 addr add 10.20.2.2/24 dev s2e
  ip -n dq-r addr add 10.20.1.1/24 dev r1; ip -n dq-r addr add 10.20.2.1/24 dev r2
  ip -n dq-r addr add 10.20.3.1/24 dev r3
  ip -n dq-d link set de up
  # Each receiver's macvlan answers ARP for its own address only and its address's
  # traffic (perftest's TCP too) leaves through it: otherwise the router may learn the
  # other macvlan's MAC for it and deliver its RoCE packets to the wrong process.
  ip netns exec dq-d sysctl -qw net.ipv4.conf.all.arp_ignore=1
  ip netns exec dq-d sysctl -qw net.ipv4.conf.all.arp_announce=2
  for i in 1 2; do
    ip -n dq-d link add "mv$i" link de type macvlan mode bridge
    ip -n dq-d addr add "10.20.3.$((i + 1))/24" dev "mv$i"; ip -n dq-d link set "mv$i" up
    ip -n dq-d route add 10.20.3.0/24 dev "mv$i" src "10.20.3.$((i + 1))" table $((100 + i))
    ip -n dq-d route add default via 10.20.3.1 dev "mv$i" table $((100 + i))
    ip -n dq-d rule add from "10.20.3.$((i + 1))" table $((100 + i))
  done
  ip -n dq-d route add default via 10.20.3.1 dev mv1
  for l in s1e:dq-s1 s2e:dq-s2 r1:dq-r r2:dq-r r3:dq-r; do ip -n "${l#*:}" link set "${l%:*}" up; done
  ip -n dq-s1 route add default via 10.20.1.1; ip -n dq-s2 route add default via 10.20.2.1
  ip netns exec dq-r sysctl -qw net.ipv4.ip_forward=1
  # A veth delivers a frame to the backlog of the CPU that sent it: a sender (or the
  # router's qdisc) moving between CPUs reorders its packets, and RoCE takes reordering
  # for loss. Steering every veth's receive side to one CPU (RPS) keeps each flow in
  # order, as a real link does.
  for l in s1e:dq-s1 s2e:dq-s2 r1:dq-r r2:dq-r r3:dq-r de:dq-d; do
    ip netns exec "${l#*:}" sh -c "echo 1 >/sys/class/net/${l%:*}/queues/rx-0/rps_cpus" ||
      echo "    (cannot set RPS on ${l%:*}: packets may be reordered)"
  done
  # The bottleneck: RoCE (UDP 4791) goes through an htb class at RATE whose queue is RED,
  # marking ECN-capable packets CE (and dropping the others) with a probability rising to
  # 5% as the average queue grows from 10 to 60 KB (8 to 48 ms at 10 Mb/s; a short
  # average, close to the instantaneous queue switches mark on), as a switch's RoCE class;
  # only over 1 MB does it tail-drop. perftest's TCP exchange has a class of its own. The
  # 256 KB burst and cburst let htb catch up when its timer fires late (TCG); the rate
  # holds over any window longer than a fifth of a second.
  tc -n dq-r qdisc add dev r3 root handle 1: htb default 2
  tc -n dq-r class add dev r3 parent 1: classid 1:1 htb rate "${RATE}mbit" ceil "${RATE}mbit" burst 256k cburst 256k
  # (A quantum of its own: htb's default, rate / r2q, is over its limit at 100 Mb/s.)
  tc -n dq-r class add dev r3 parent 1: classid 1:2 htb rate 100mbit quantum 60000
  tc -n dq-r qdisc add dev r3 parent 1:1 handle 10: red limit 1000000 min 10000 max 60000 \
    avpkt 1100 burst 10 probability 0.05 bandwidth "${RATE}mbit" ecn
  tc -n dq-r filter add dev r3 parent 1: protocol ip prio 1 u32 \
    match ip protocol 17 0xff match ip dport 4791 0xffff flowid 1:1
}

# The bottleneck's counters every 100 ms, read through rtnetlink by one process
# (tests/dcqcn/sample_queue.py; forking tc and awk per sample gave 8-10 samples per window
# under TCG):   time_s,marked,early,pdrop,other,dropped,backlog_bytes,sent_bytes
sample_queue() {
  exec ip netns exec dq-r python3 "$here/sample_queue.py" r3 10 0.1
}

# run MODE(on|off): two flows for DURATION seconds through the bottleneck.
run() {
  local mode=$1 cc=() pids=()
  local dir=$out/$mode; mkdir -p "$dir"
  # DCQCN sized for this link. Each sender's port runs at the bottleneck's speed (the
  # classic 2:1 incast of equal-speed links), so line_rate = RATE. The ConnectX defaults
  # are for 10-100 Gb/s links with microsecond round trips; through this emulated router
  # the marking queue's feedback takes tens of milliseconds, so the periods are scaled up:
  # at most one cut per 40 ms (about a round trip through the queue), a CNP per QP per
  # ms, α updated per ms, a rate increase of 1 Mb/s every 100 ms (10 Mb/s per second: the
  # link's rate each second). The byte counter is off (so is hyper increase, which needs
  # it): it makes the faster flow increase more often, and the flows then settled at 3.5
  # and 5.5 Mb/s; with the timer alone they share. With a rate increase every 20 ms
  # (50 Mb/s per second) the flows outran their own feedback, which comes back through
  # the queue they build: their rates swung between 1 and 10 Mb/s every 2-3 s, the queue
  # stood at 217-302 KB (mean of its samples; 46-62 KB now) and in about one run in five went
  # over its 1 MB limit, so packets were dropped and resent.
  [ "$mode" = on ] && cc=(--dcqcn --dcqcn-param "line_rate=$RATE,rpg_ai_rate=1,rpg_hai_rate=2,rpg_time_reset=100000,rpg_byte_reset=0,dce_tcp_rtt=1000,rate_reduce_monitor_period=40000,min_time_between_cnps=1000,rpg_min_rate=1")
  topology
  # -u 18: a 1.07 s ACK timeout, above the worst queueing delay (1 MB at 10 Mb/s: 0.8 s).
  local common=(perf write-bw -s 65536 -D "$DURATION" -f 1 -u 18 --report_gbits --stats --rate-interval 100 "${cc[@]}")
  for i in 1 2; do
    ip netns exec dq-d timeout $((DURATION + 60)) "$F" "${common[@]}" -d "mv$i" -p $((18514 + i)) \
      --rate-log "$dir/recv$i.csv" >"$dir/recv$i.out" 2>&1 &
    pids+=($!)
  done
  for i in 1 2; do
    for _ in $(seq 1 100); do ip netns exec dq-d ss -ltn | grep -q ":$((18514 + i))\b" && break; sleep 0.05; done
  done
  sample_queue >"$dir/queue.csv" &
  local sampler=$!
  for i in 1 2; do
    ip netns exec "dq-s$i" timeout $((DURATION + 60)) "$F" "${common[@]}" -d "s${i}e" -p $((18514 + i)) \
      --rate-log "$dir/send$i.csv" "10.20.3.$((i + 1))" >"$dir/send$i.out" 2>&1 &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
  verdict $rc "dcqcn $mode: both flows ran ${DURATION} s through the ${RATE} Mb/s bottleneck"
  [ $rc = 0 ] || tail -n 4 "$dir"/*.out | sed 's/^/    /'
  tc -n dq-r -s qdisc show dev r3 | sed 's/^/    tc /'
  grep -h '^counters:\|^dcqcn:' "$dir"/send*.out | sed 's/^/    sender /'
  # Measure after the first third (convergence) and before the last second.
  local w0=$((DURATION / 3)) w1=$((DURATION - 1))
  "$R" --bottleneck-mbps "$RATE" --window "$w0:$w1" --check "$mode" \
    --flow "flow1:$dir/send1.csv:$dir/recv1.csv" --flow "flow2:$dir/send2.csv:$dir/recv2.csv" \
    --queue "$dir/queue.csv" --png "$out/dcqcn-$mode.png" \
    --title "DCQCN $mode: 2 ferroce write-bw flows, ${RATE} Mb/s htb + RED ECN bottleneck" \
    >"$dir/report.txt" 2>&1
  sed 's/^/    /' "$dir/report.txt" | grep -v '^    PASS\|^    FAIL'
  while read -r verdict_ rest; do
    case $verdict_ in PASS) pass=$((pass + 1)); echo "PASS $rest" ;; FAIL) fail=$((fail + 1)); echo "FAIL $rest" ;; esac
  done <"$dir/report.txt"
  grep -q '^PASS\|^FAIL' "$dir/report.txt" || { fail=$((fail + 1)); echo "FAIL dcqcn $mode: no report"; }
}

run on
run off
echo "dcqcn: $pass passed, $fail failed"
[ $fail = 0 ]
