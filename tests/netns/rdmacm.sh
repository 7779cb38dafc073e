#!/bin/bash
# Unmodified rdma_cm programs (Debian's rdmacm-utils and perftest, linked against
# rdma-core's librdmacm and libibverbs) on ferroce's librdmacm.so.1, via `ferroce exec`:
#   two hosts     rping (64 B and 10000 B, validated), ucmatose (1 and 4 connections),
#                 udaddy (UD through SIDR), mckey (multicast: receivers on both hosts),
#                 rdma_server/rdma_client (rdma_create_ep,
#                 synchronous IDs), ib_write_bw -R (1 and 4 QPs), ib_read_bw -R and
#                 ib_send_lat -R (perftest makes and drops a connection, then listens
#                 again on the same port a second later): server in rc-b
#                 (10.94.0.2), client in rc-a
#                 rping -q (the program's own QP, brought up with rdma_init_qp_attr; the
#                 connection made without a QP on the ID, then rdma_establish), on either
#                 side and on both
#   one host      rping on one veth end and on lo, ib_write_bw -R on lo
#   backlog       8 requests to a listener (backlog 2) that reads nothing: 2 wait, the
#                 rest are dropped unanswered and their resends find room once it reads
#   port in use   a second server on a port one listens on fails (EADDRINUSE); the first
#                 serves; a SIGKILLed server's port is free at once
#   relisten      a request that comes between two listens on one port, a second
#                 after the first listener went (perftest -R's race): the second
#                 listener gets it
#   qperf         rc_lat, rc_bw, rc_rdma_read_bw, rc_fetch_add_mr with -cm1: its server
#                 sends its port before it listens
#   hang up       a server that exits, or destroys its event channel, with its connection
#                 open: the client hears DISCONNECTED at once, status 0 (rdmacm_hangup.c)
#   fork          a server and a client, children of fork() of a parent that has the
#                 device open, connect and send (rdma_get_send_comp on rdma_cm's CQ)
#   refused       a port nobody listens on: RDMA_CM_EVENT_REJECTED with IB's reason 8
#                 (invalid service ID), at once; also with two processes on the interface
#   no peer       an address nobody answers ARP for: RDMA_CM_EVENT_ADDR_ERROR (-ETIMEDOUT)
#                 after rping's 2 s address timeout
#   removal       an interface deleted under IDs on its device: RDMA_CM_EVENT_DEVICE_REMOVAL
#                 for those bound to it, none for a wildcard listener or an unbound ID;
#                 the interface made again under its name serves a new listener, and
#                 the wildcard listener takes it in
#   tests/netns/rdmacm.sh [FERROCE_BINARY]   (needs root: namespaces, veth)
# Prints PASS/FAIL lines and "rdmacm: N passed, M failed"; exit 0 iff all pass.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh" "$@"
A=rc-a B=rc-b IF=eth1
out=${OUT:-$root/target}/rdmacm; rm -rf "$out"; mkdir -p "$out"
pass=0 fail=0
for p in rping ucmatose udaddy mckey rdma_server rdma_client ib_write_bw ib_send_lat qperf; do
  command -v $p >/dev/null || { echo "FAIL setup: $p is missing (Debian: rdmacm-utils, perftest, qperf)"; echo "rdmacm: 0 passed, 1 failed"; exit 1; }
done
two_hosts $A $B $IF 10.94.0
echo "ferroce: $("$F" --version)"
X() { local ns=$1; shift; ip netns exec "$ns" timeout 60 "$F" exec -- "$@"; }

# run NAME SERVER_NS CLIENT_NS SERVER_CMD -- CLIENT_CMD: both exit 0; sets $s and $c.
run() {
  local name=$1 sns=$2 cns=$3 rc=0 scmd=() ; shift 3
  while [ "$1" != -- ]; do scmd+=("$1"); shift; done; shift
  s=$out/$name.server c=$out/$name.client
  X "$sns" "${scmd[@]}" >"$s" 2>&1 & local sp=$!
  sleep 1.5
  X "$cns" "$@" >"$c" 2>&1 || rc=1
  wait $sp || rc=1
  return $rc
}

# Debian's rping (rdma-core 44) races its own teardown: its main thread destroys the event
# channel while its CM thread, done with DISCONNECTED, may not yet be back in
# rdma_get_cm_event; that call then fails (EINVAL here, EBADF with rdma-core) and rping
# exits 255. Upstream's rping now stops the CM thread first. A run that failed with
# exactly that, after its DISCONNECTED, is run once more (a NOTE line says so).
rping_race() { # FILE...: a DISCONNECT EVENT line, and rdma_get_cm_event failing after it
  local f
  for f in "$@"; do
    awk '/DISCONNECT EVENT/ { d = 1 } d && /^rdma_get_cm_event: Invalid argument/ { r = 1 } END { exit !r }' "$f" && return 0
  done
  return 1
}
# rping_run NAME ARGS...: run NAME ARGS, again once after rping's teardown race.
rping_run() {
  run "$@" && return 0
  rping_race "$s" "$c" || return 1
  echo "NOTE $1: rping's own teardown race (rdma_get_cm_event after its channel was destroyed): run again"
  run "$@"
}
rping_case() { # NAME SERVER_NS CLIENT_NS ADDR SIZE
  if rping_run "$1" "$2" "$3" rping -s -a "$4" -S "$5" -v -- rping -c -a "$4" -S "$5" -C 10 -V -v &&
     [ "$(grep -c '^ping data: rdma-ping-' "$c")" = 10 ] &&
     [ "$(grep -c '^server ping data: rdma-ping-' "$s")" = 10 ] &&
     grep -q "server DISCONNECT EVENT" "$s"; then
    ok "$1" "10 pings of $5 bytes: RDMA READ by the server, WRITE back, validated by the client"
  else ko "$1" "exit codes or ping lines" "$s" "$c"; fi
}
rping_case rping-two-hosts $B $A 10.94.0.2 64
rping_case rping-two-hosts-10000 $B $A 10.94.0.2 10000
rping_case rping-one-host-veth $A $A 10.94.0.1 1000
rping_case rping-one-host-lo $A $A 127.0.0.1 1000

# rping -q: the program makes its QP itself and brings it up with rdma_init_qp_attr; the
# CM connects without a QP on the ID (CONNECT_RESPONSE, then rdma_establish). Both sides
# with -q, and each side alone.
for q in "-q -q" "-q _" "_ -q"; do
  set -- $q; sq=${1#_} cq=${2#_}; name=rping-q-two-hosts${sq:+-server}${cq:+-client}
  [ -n "$sq" ] && [ -n "$cq" ] && name=rping-q-two-hosts
  if rping_run "$name" $B $A rping -s -a 10.94.0.2 -S 1000 -v $sq -- rping -c -a 10.94.0.2 -S 1000 -C 10 -V -v $cq &&
     [ "$(grep -c '^ping data: rdma-ping-' "$c")" = 10 ] &&
     [ "$(grep -c '^server ping data: rdma-ping-' "$s")" = 10 ]; then
    who="the server and the client"; [ -z "$cq" ] && who="the server"; [ -z "$sq" ] && who="the client"
    ok "$name" "10 pings validated; the program's own QP on $who (rdma_init_qp_attr, rdma_establish)"
  else ko "$name" "exit codes or ping lines" "$s" "$c"; fi
done

for conns in 1 4; do
  if run ucmatose-c$conns $B $A ucmatose -c $conns -- ucmatose -s 10.94.0.2 -c $conns &&
     grep -q "return status 0" "$s" && grep -q "return status 0" "$c" &&
     [ "$(grep -c "connecting" "$c")" -ge 1 ]; then
    ok ucmatose-c$conns "$conns connection(s), sends both ways, disconnected"
  else ko ucmatose-c$conns "exit codes or status lines" "$s" "$c"; fi
done

if run udaddy $B $A udaddy -- udaddy -s 10.94.0.2 &&
   grep -q "data transfers complete" "$s" && grep -q "data transfers complete" "$c"; then
  ok udaddy "UD datagrams both ways, the service found with SIDR"
else ko udaddy "exit codes or status lines" "$s" "$c"; fi

# Multicast: mckey joins group 239.94.0.1 with rdma_join_multicast_ex (the ID's UD QP
# attached, as librdmacm does). Two receivers, one in each host, and a sender in rc-a,
# which sends 10 SENDs to the multicast QP 3 s after its join: the receiver on the other
# host gets them over the wire, the one on the sender's host from the frames the sender
# puts on its interface; each completes its 10 receives.
mk=$out/mckey
X $B mckey -m 239.94.0.1 -b 10.94.0.2 -C 10 >"$mk.recv-b" 2>&1 & r1=$!
X $A mckey -m 239.94.0.1 -b 10.94.0.1 -C 10 >"$mk.recv-a" 2>&1 & r2=$!
sleep 1.5
X $A mckey -m 239.94.0.1 -b 10.94.0.1 -C 10 -s >"$mk.send" 2>&1; rc=$?
wait $r1 || rc=1; wait $r2 || rc=1
if [ $rc = 0 ] && grep -q "joined dgid: ::ffff:239.94.0.1" "$mk.send" &&
   grep -q "data transfers complete" "$mk.send" &&
   grep -q "data transfers complete" "$mk.recv-b" && grep -q "data transfers complete" "$mk.recv-a"; then
  ok mckey "10 multicast SENDs to 239.94.0.1 reach a receiver on the other host and one on the sender's"
else ko mckey "exit codes or transfer lines" "$mk.send" "$mk.recv-b" "$mk.recv-a"; fi

if run rdma-server-client $B $A rdma_server -- rdma_client -s 10.94.0.2 &&
   grep -q "rdma_server: end 0" "$s" && grep -q "rdma_client: end 0" "$c"; then
  ok rdma-server-client "rdma_create_ep, rdma_get_request, synchronous connect and accept"
else ko rdma-server-client "exit codes or end lines" "$s" "$c"; fi

perf_case() { # NAME SERVER_NS CLIENT_NS DEV ADDR PROGRAM ARGS...
  local name=$1 sns=$2 cns=$3 dev=$4 addr=$5 prog=$6; shift 6
  if run "$name" "$sns" "$cns" "$prog" -R -d "$dev" "$@" -- "$prog" -R -d "$dev" "$@" "$addr"; then
    local line; line=$(grep -E '^ *[0-9]+ +[0-9]+ +[0-9.]+' "$c" | tail -1)
    if [ -n "$line" ]; then ok "$name" "$(echo "$line" | tr -s ' \t' ' ')"; return; fi
  fi
  ko "$name" "exit codes or no result line" "$s" "$c"
}
perf_case write-bw-R-two-hosts $B $A $IF 10.94.0.2 ib_write_bw -D 2
perf_case write-bw-R-4qps-two-hosts $B $A $IF 10.94.0.2 ib_write_bw -D 2 -q 4
perf_case read-bw-R-two-hosts $B $A $IF 10.94.0.2 ib_read_bw -D 2
perf_case send-lat-R-two-hosts $B $A $IF 10.94.0.2 ib_send_lat -n 2000
perf_case write-bw-R-one-host-lo $A $A lo 127.0.0.1 ib_write_bw -D 2

# A flood of connect requests to a listener that reads nothing: at most its backlog (2) of
# CONNECT_REQUEST events waits unread; the other requests are dropped unanswered. Once
# the program has read (and rejected) those, the dropped requests' resends (the client's
# CM resends after ~4.3 s) take the free places: 2 more. The client sees 4 rejections.
bl=$out/rdmacm_backlog
if cc -O1 -Wall -o "$bl" "$here/rdmacm_backlog.c" -lrdmacm -libverbs 2>"$out/backlog.cc"; then
  s=$out/backlog.server c=$out/backlog.client
  FERROCE_LOG=info X $B "$bl" server 10.94.0.2 7471 2 3 6 >"$s" 2>&1 & sp=$!
  sleep 1.5
  X $A "$bl" client 10.94.0.2 7471 8 11 >"$c" 2>&1; rc=$?
  wait $sp || rc=1
  dropped=$(grep -c "listen backlog full" "$s")
  if [ $rc = 0 ] && grep -q "^client sent 8$" "$c" && grep -q "^phase1 requests 2$" "$s" &&
     grep -q "^phase2 requests 2$" "$s" && grep -q "^client rejected 4$" "$c" && [ "$dropped" -ge 6 ]; then
    ok listen-backlog "8 requests, backlog 2: 2 unread, $dropped dropped unanswered; after reading, 2 resends taken"
  else ko listen-backlog "exit $rc; counts (want 2, 2, 4)" "$s" "$c"; fi
else ko listen-backlog "cc failed" "$out/backlog.cc"; fi

# perftest -R's race, made certain: a listening ID destroyed, a request to its port a
# second later (perftest sleeps 1 s before it listens again), a new listener 100 ms after
# that. The port stays listened on for a while after its listener went, so the new one
# gets the request (and rejects it: reason 28) instead of it being refused for want of a
# listener (reason 8), which perftest 4.5-0.17 cannot retry.
rl=$out/rdmacm_relisten
if cc -O1 -Wall -o "$rl" "$here/rdmacm_relisten.c" -lrdmacm -libverbs 2>"$out/relisten.cc"; then
  X $A "$rl" 10.94.0.1 7473 1000 >"$out/relisten.log" 2>&1; rc=$?
  if [ $rc = 0 ] && grep -q "^server got the request$" "$out/relisten.log" &&
     grep -q "^client rejected status 28$" "$out/relisten.log"; then
    ok relisten "a request 1 s after its port's listener went reaches the next listener"
  else ko relisten "exit $rc" "$out/relisten.log"; fi
else ko relisten "cc failed" "$out/relisten.cc"; fi

# qperf (Debian's 0.4.11) over rdma_cm, the only way its RDMA tests reach a RoCE device:
# its server tells the client its port before it listens (fixed upstream after 0.4.11),
# and the client's request came while ferroce's listen was still opening devices: refused
# (reason 8) or lost. A wildcard bind now opens them. Each test must print its figure,
# and both ends must exit 0.
X $B qperf >"$out/qperf.server" 2>&1 & qs=$!
for _ in $(seq 1 100); do ip netns exec $B ss -ltn | grep -q ":19765\b" && break; sleep 0.05; done
X $A qperf 10.94.0.2 -cm1 -t 1 rc_lat rc_bw rc_rdma_read_bw rc_fetch_add_mr >"$out/qperf.client" 2>&1; rc=$?
stop $qs
figures=$(grep -cE '^ *(latency|bw|msg_rate) *= ' "$out/qperf.client")
if [ $rc = 0 ] && [ "$figures" = 4 ]; then
  ok qperf-cm "$(grep -E '^ *(latency|bw|msg_rate) *= ' "$out/qperf.client" | tr -s ' ' | paste -sd ',')"
else ko qperf-cm "client exit $rc, $figures of 4 figures" "$out/qperf.client" "$out/qperf.server"; fi

# Connections a program leaves open: the server exits once connected, or destroys its
# event channel after the client's DREQ, never rdma_disconnect or rdma_destroy_id on them
# (qperf 0.4.11's server with -cm1 does the second). As the kernel, closing the program's
# rdma_cm file, ends them: the client hears DISCONNECTED at once, status 0 (before: nothing
# at all after an exit; after a destroyed channel its DREQ went unanswered, -ETIMEDOUT 5 s
# later).
hu=$out/rdmacm_hangup
if cc -O1 -Wall -o "$hu" "$here/rdmacm_hangup.c" -lrdmacm -libverbs 2>"$out/hangup.cc"; then
  for mode in exit channel; do
    X $B "$hu" server 10.94.0.2 7481 $mode >"$out/hangup-$mode.server" 2>&1 & sp=$!
    for _ in $(seq 1 100); do grep -q "^server listening$" "$out/hangup-$mode.server" && break; sleep 0.05; done
    X $A "$hu" client 10.94.0.2 7481 $mode >"$out/hangup-$mode.client" 2>&1; rc=$?
    wait $sp; src=$?
    if [ $rc = 0 ] && [ $src = 0 ] && grep -q "^client RDMA_CM_EVENT_DISCONNECTED status 0$" "$out/hangup-$mode.client"; then
      ok hangup-$mode "$(paste -sd ',' "$out/hangup-$mode.server"); the client heard DISCONNECTED, status 0"
    else ko hangup-$mode "client exit $rc, server exit $src" "$out/hangup-$mode.client" "$out/hangup-$mode.server"; fi
  done
else ko hangup "cc failed" "$out/hangup.cc"; fi

# Two servers on one port of one host: the second's rdma_listen fails with EADDRINUSE, as
# rdma_cm's does, instead of both answering the client's request (each process runs a
# connection manager of its own and sees every request); the first serves the client.
# A server killed with SIGKILL leaves its port free at once for the next.
iu=$out/inuse
X $B rping -s -a 10.94.0.2 -p 7475 -v >"$iu.server1" 2>&1 & s1=$!
sleep 1.5
X $B rping -s -a 10.94.0.2 -p 7475 -v >"$iu.server2" 2>&1; rc2=$?
X $A rping -c -a 10.94.0.2 -p 7475 -C 10 -V -v >"$iu.client" 2>&1; rc=$?
wait $s1 || rc=1
X $B rping -s -a 10.94.0.2 -p 7476 -v >"$iu.killed" 2>&1 & s3=$!
sleep 1.5
pkill -KILL -f "^rping -s -a 10.94.0.2 -p 7476"; wait $s3 2>/dev/null
X $B rping -s -a 10.94.0.2 -p 7476 -v >"$iu.server4" 2>&1 & s4=$!
sleep 1.5
X $A rping -c -a 10.94.0.2 -p 7476 -C 10 -V -v >"$iu.client4" 2>&1 || rc=1
wait $s4 || rc=1
if [ $rc = 0 ] && [ $rc2 != 0 ] && grep -q "rdma_listen: Address already in use" "$iu.server2" &&
   [ "$(grep -c '^ping data: rdma-ping-' "$iu.client")" = 10 ] &&
   [ "$(grep -c '^server ping data: rdma-ping-' "$iu.server1")" = 10 ] &&
   [ "$(grep -c '^ping data: rdma-ping-' "$iu.client4")" = 10 ]; then
  ok port-in-use "a second server on the port: '$(grep -m1 'rdma_listen' "$iu.server2")'; the first served 10 pings; after a SIGKILL the port is free"
else ko port-in-use "exit $rc, second server exit $rc2" "$iu.server2" "$iu.client" "$iu.server1" "$iu.client4"; fi

# Children of fork() whose parent has the device open (Python's multiprocessing runs
# rdma-core's rdma_cm tests so): a server and a client, each a child, connect through
# rdma_cm and send a message; the client waits for its completion on the CQ rdma_cm made
# (rdma_get_send_comp, which checks that the CQ event names the ID).
fc=$out/fork_children
if cc -O1 -Wall -o "$fc" "$here/fork_children.c" -lrdmacm -libverbs 2>"$out/fork.cc"; then
  X $A "$fc" 10.94.0.1 7472 >"$out/fork.log" 2>&1; rc=$?
  if [ $rc = 0 ] && grep -q "^server got: hello from a child of fork$" "$out/fork.log" &&
     grep -q "^client sent$" "$out/fork.log"; then
    ok fork-children "server and client in children of a parent with the device open"
  else ko fork-children "exit $rc" "$out/fork.log"; fi
else ko fork-children "cc failed" "$out/fork.cc"; fi

# A port nobody listens on: the other host's connection manager (it serves 7174) refuses.
X $B rping -s -a 10.94.0.2 -v >"$out/refused.server" 2>&1 & sp=$!
sleep 1.5
t0=$(date +%s%N)
X $A rping -c -a 10.94.0.2 -p 7999 -C 1 >"$out/refused.client" 2>&1; rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
stop $sp
if [ $rc != 0 ] && grep -q "RDMA_CM_EVENT_REJECTED, error 8" "$out/refused.client" && [ $ms -lt 5000 ]; then
  ok refused "RDMA_CM_EVENT_REJECTED, error 8 in $ms ms"
else ko refused "exit $rc after $ms ms" "$out/refused.client"; fi

# The same where two processes share the interface (servers on 7174 and 7477): neither
# listens on 7999 and neither holds it, so each refuses at once (until 2026-11-29 both
# dropped the request, each leaving it to the other, and the client waited out its
# connect timeout); the request for 7477 is left to its server by the other process,
# and served.
rs=$out/refused-shared
X $B rping -s -a 10.94.0.2 -v >"$rs.server1" 2>&1 & s1=$!
X $B rping -s -a 10.94.0.2 -p 7477 -v >"$rs.server2" 2>&1 & s2=$!
sleep 1.5
t0=$(date +%s%N)
X $A rping -c -a 10.94.0.2 -p 7999 -C 1 >"$rs.client" 2>&1; rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
X $A rping -c -a 10.94.0.2 -p 7477 -C 10 -V -v >"$rs.served" 2>&1; rc2=$?
wait $s2 || rc2=1
stop $s1
if [ $rc != 0 ] && grep -q "RDMA_CM_EVENT_REJECTED, error 8" "$rs.client" && [ $ms -lt 5000 ] &&
   [ $rc2 = 0 ] && [ "$(grep -c '^ping data: rdma-ping-' "$rs.served")" = 10 ]; then
  ok refused-shared "two processes on the interface: RDMA_CM_EVENT_REJECTED, error 8 in $ms ms; the other port served 10 pings"
else ko refused-shared "exit $rc after $ms ms, served exit $rc2" "$rs.client" "$rs.served" "$rs.server2"; fi

t0=$(date +%s%N)
X $A rping -c -a 10.94.0.9 -C 1 >"$out/no-peer.client" 2>&1; rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
if [ $rc != 0 ] && grep -q "RDMA_CM_EVENT_ADDR_ERROR, error -110" "$out/no-peer.client" && [ $ms -lt 10000 ]; then
  ok no-peer "RDMA_CM_EVENT_ADDR_ERROR, error -110 in $ms ms"
else ko no-peer "exit $rc after $ms ms" "$out/no-peer.client"; fi

# An interface deleted under rdma_cm IDs, then made again (rdmacm_removal.c says what
# must happen), on a veth pair of its own in a namespace of its own.
D=rc-d rm=$out/rdmacm_removal
mkveth() {
  ip link add rm-d0 netns $D type veth peer name rm-d1 netns $D
  ip -n $D addr add 10.95.0.1/24 dev rm-d0
  ip -n $D link set rm-d0 up; ip -n $D link set rm-d1 up
}
# wait_line FILE LINE: until FILE has LINE (at most 20 s).
wait_line() { for _ in $(seq 1 200); do grep -qx "$2" "$1" && return 0; sleep 0.1; done; return 1; }
if cc -O1 -Wall -o "$rm" "$here/rdmacm_removal.c" -lrdmacm -libverbs 2>"$out/removal.cc"; then
  ip netns del $D 2>/dev/null; ip netns add $D; ip -n $D link set lo up; mkveth
  X $D "$rm" 10.95.0.1 7480 >"$out/removal.log" 2>&1 & rp=$!
  wait_line "$out/removal.log" ready && ip -n $D link del rm-d0
  wait_line "$out/removal.log" destroyed && mkveth
  wait $rp; rc=$?
  ip netns del $D
  if [ $rc = 0 ] && grep -qx "L removed" "$out/removal.log" && grep -qx "B removed" "$out/removal.log" &&
     grep -qx "client rejected" "$out/removal.log" && grep -q "^wildcard got the request" "$out/removal.log"; then
    ok removal "DEVICE_REMOVAL on the listener and the bound ID, none on the others; on the interface made again a new listener got a request, and the wildcard one $(grep -o 'after .*' "$out/removal.log")"
  else ko removal "exit $rc" "$out/removal.log"; fi
else ko removal "cc failed" "$out/removal.cc"; fi

echo "rdmacm: $pass passed, $fail failed"
[ "$fail" = 0 ]
