#!/bin/bash
# `ferroce probe conformance` against a real stack, once per program the cases reach it
# through (ibv_rc_pingpong, ib_write_bw, ib_read_bw, ib_atomic_bw servers, each kept in a
# loop as the probe's help says), over a veth pair with the probe in its own namespace.
#   tests/probe/conformance.sh FERROCE_BINARY ferroce   (native: two namespaces; ferroce's
#       own rc-pingpong and perf servers as the target)
#   tests/probe/conformance.sh FERROCE_BINARY rxe       (where rdma_rxe is: the rxe VM,
#       tests/interop/guest.sh; Debian's programs on rxe0 as the target)
# Each program gives one PASS/FAIL line: PASS when every case it can run passed or is a
# deviation its case file documents for that stack (KNOWN), and none erred. Ends with
# "probe: N passed, M failed"; the verdict tables (Markdown) and pcaps go to $OUT/probe.
set -u
F=${1:?usage: conformance.sh FERROCE_BINARY ferroce|rxe}
STACK=${2:?usage: conformance.sh FERROCE_BINARY ferroce|rxe}
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/ferroce-probe}/probe-$STACK; rm -rf "$out"; mkdir -p "$out"
pass=0 fail=0
# The target program's loop of the moment, killed (with its session) however the script
# ends: a loop left behind would spin on a host whose namespace is gone.
loop=""
stop_loop() {
  [ -n "$loop" ] || return 0
  pkill -s "$loop" 2>/dev/null; wait "$loop" 2>/dev/null; sleep 0.2; pkill -9 -s "$loop" 2>/dev/null
  loop=""
}

if [ "$STACK" = rxe ]; then
  . "$RXEVM_HOME/guest/lib.sh"
  if [ -d /sys/class/net/vethR ] && [ -d /sys/class/infiniband/rxe0 ]; then
    G=$(gid_index rxe0 10.77.0.2)
  else
    G=$(setup_peer_ns 9000) || { echo "setup_peer_ns failed"; exit 1; }
  fi
  PNS=peer PDEV=vethP TIP=10.77.0.2
  TNS=""
  server() {
    case $1 in
      pingpong) echo "timeout 20 ibv_rc_pingpong -d rxe0 -g $G -n 1 -m 1024" ;;
      *) echo "timeout 60 ib_${1/-/_} -d rxe0 -x $G -m 1024" ;;
    esac
  }
else
  PNS=probe-a TNS=probe-b PDEV=probe-va TIP=10.94.0.2
  cleanup() { stop_loop; ip netns del $PNS 2>/dev/null; ip netns del $TNS 2>/dev/null; true; }
  cleanup
  ip netns add $PNS && ip netns add $TNS || { echo "cannot create network namespaces (need root)"; exit 1; }
  ip link add probe-va netns $PNS type veth peer name probe-vb netns $TNS
  ip -n $PNS addr add 10.94.0.1/24 dev probe-va; ip -n $TNS addr add $TIP/24 dev probe-vb
  for ns in $PNS $TNS; do ip -n $ns link set lo up; done
  ip -n $PNS link set probe-va mtu 9000 up; ip -n $TNS link set probe-vb mtu 9000 up
  server() {
    case $1 in
      pingpong) echo "timeout 20 $F rc-pingpong -d probe-vb -n 1 -m 1024" ;;
      *) echo "timeout 60 $F perf $1 -d probe-vb -m 1024" ;;
    esac
  }
fi
trap 'type cleanup >/dev/null 2>&1 && cleanup || stop_loop' EXIT
in_ns() { local ns=$1; shift; if [ -n "$ns" ]; then ip netns exec "$ns" "$@"; else "$@"; fi; }

echo "probe: $STACK target at $TIP; $("$F" --version)"
for via in pingpong write-bw read-bw atomic-bw; do
  # The target program in a loop, in its own session so that it goes with its loop.
  # (Started directly, not through in_ns, so that $! is the session's leader.)
  if [ -n "$TNS" ]; then
    ip netns exec "$TNS" setsid bash -c "while :; do $(server $via) >/dev/null 2>&1; sleep 0.1; done" &
  else
    setsid bash -c "while :; do $(server $via) >/dev/null 2>&1; sleep 0.1; done" &
  fi
  loop=$!
  sleep 0.5
  log=$out/$via.log
  in_ns "$PNS" timeout 900 "$F" probe conformance --via "$via" -d $PDEV --stack "$STACK" \
    --connect-wait 90 --pcap "$out/pcaps-$via" --markdown "$out/$via.md" "$TIP" >"$log" 2>&1
  rc=$?
  # Everything in the loop's session (timeout puts the program in a group of its own).
  stop_loop
  totals=$(grep '^probe: [0-9]* passed' "$log" | tail -1)
  ran=$(echo "$totals" | awk '{print $2 + $4 + $6}')
  if [ "$rc" = 0 ] && [ -n "$totals" ] && [ "${ran:-0}" -gt 0 ]; then
    pass=$((pass + 1)); echo "PASS probe-$STACK-$via: $totals"
  else
    fail=$((fail + 1)); echo "FAIL probe-$STACK-$via: exit $rc, ${totals:-no totals}"
    grep -E '^== .*\[(FAIL|ERROR)\]' -A14 "$log" | head -60 | sed 's/^/    /'
    tail -3 "$log" | sed 's/^/    /'
  fi
  # The verdict table for this program (cases it cannot run are left out).
  grep -v '| SKIP |' "$out/$via.md" 2>/dev/null | sed "s/^/$via /" > "$out/$via.table"
done
cat "$out"/*.table > "$out/table.txt" 2>/dev/null
echo "probe-$STACK: $pass passed, $fail failed"
[ "$fail" = 0 ]
