#!/bin/bash
# Connections through ferroce's connection manager (IB CM MADs on QP1, as rdma_cm makes
# them) with `ferroce ucmatose`, rdma-core's ucmatose exchange: the server sends COUNT
# messages of SIZE bytes, the client answers with as many, the server disconnects.
#   two hosts     server in cm-b (10.89.0.2), client in cm-a, both sizes; every CM message
#                 of the connection's life in the client's capture, none malformed
#   one host      server and client on one veth end, and on lo (every process with a
#                 connection manager sees QP1's frames; each takes what is its own)
#   rping         rdma-core's rping exchange (`ferroce rping`): RDMA READ and WRITE of each
#                 ping over the connection, checked by the client; two hosts, and lo
#   udaddy        rdma-core's udaddy exchange (`ferroce udaddy`): UD datagrams both ways to
#                 a service found with SIDR; two hosts, and lo
#   refused       a port nobody listens on, answered with a REJ at once: on another host
#                 (its ferroce listens elsewhere), on the same interface, on lo, and on a
#                 host where two ferroce servers share the interface
#   shared        of those two servers, each one's requests reach it (the other leaves
#                 them); a third on a port taken is refused it
#   tests/netns/cm.sh [FERROCE_BINARY]   (needs root: namespaces, veth)
# Prints PASS/FAIL lines and "cm: N passed, M failed"; exit 0 iff all pass.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh" "$@"
A=cm-a B=cm-b IF=eth1
out=${OUT:-$root/target}/cm; rm -rf "$out"; mkdir -p "$out"
pass=0 fail=0
two_hosts $A $B $IF 10.89.0
echo "ferroce: $("$F" --version)"

wait_line() { # wait_line FILE TEXT: up to 10 s
  local n; for n in $(seq 1 100); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1
}
every_cm_step() { # every_cm_step DECODED: a connection's whole life is in it
  local m; for m in REQ REP RTU DREQ DREP; do grep -q "| CM $m " "$1" || return 1; done
}
# pair NAME SERVER_NS SERVER_DEV CLIENT_NS CLIENT_DEV SERVER_ADDR FLAGS...
pair() {
  local name=$1 sns=$2 sdev=$3 cns=$4 cdev=$5 addr=$6 rc=0; shift 6
  local s=$out/$name.server c=$out/$name.client
  ip netns exec "$sns" timeout 60 "$F" ucmatose -d "$sdev" "$@" >"$s" 2>&1 & local sp=$!
  wait_line "$s" "starting server"; sleep 0.5
  ip netns exec "$cns" timeout 60 "$F" ucmatose -d "$cdev" -s "$addr" "$@" --stats \
    --pcap "$out/$name.pcap" >"$c" 2>&1 || rc=1
  wait $sp || rc=1
  if [ $rc = 0 ] && grep -q "return status 0" "$s" && grep -q "return status 0" "$c" &&
     "$F" decode "$out/$name.pcap" >"$out/$name.decode" 2>&1 &&
     grep -q "(0 with a bad ICRC), 0 corrupt" "$out/$name.decode" &&
     ! grep -q "| MAD (" "$out/$name.decode" && every_cm_step "$out/$name.decode"; then
    ok "$name" "$* ($(grep -c '| CM ' "$out/$name.decode") CM messages in the client's capture)"
  else
    ko "$name" "exit codes, status lines or the capture's CM messages" "$s" "$c" "$out/$name.decode"
  fi
}
pair two-hosts $B $IF $A $IF 10.89.0.2 -S 100 -C 10
pair two-hosts-64k $B $IF $A $IF 10.89.0.2 -S 65536 -C 20
pair one-host-veth $A $IF $A $IF 10.89.0.1 -S 4096 -C 10
pair one-host-lo $A lo $A lo 127.0.0.1 -S 4096 -C 10

# rping: the server RDMA READs each ping and WRITEs it back; the client checks it.
rping_pair() { # rping_pair NAME SERVER_NS SERVER_DEV SERVER_ADDR CLIENT_NS CLIENT_DEV SIZE
  local name=$1 sns=$2 sdev=$3 addr=$4 cns=$5 cdev=$6 size=$7 rc=0
  local s=$out/$name.server c=$out/$name.client
  ip netns exec "$sns" timeout 60 "$F" rping -s -a "$addr" --ib-dev "$sdev" -S "$size" -v >"$s" 2>&1 & local sp=$!
  sleep 1
  ip netns exec "$cns" timeout 60 "$F" rping -c -a "$addr" --ib-dev "$cdev" -C 20 -S "$size" -v >"$c" 2>&1 || rc=1
  wait $sp || rc=1
  if [ $rc = 0 ] && [ "$(grep -c '^ping data: rdma-ping-' "$c")" = 20 ] &&
     [ "$(grep -c '^server ping data: rdma-ping-' "$s")" = 20 ]; then
    ok "$name" "20 pings of $size bytes read, written back and checked"
  else ko "$name" "exit codes or ping lines" "$s" "$c"; fi
}
rping_pair rping-two-hosts $B $IF 10.89.0.2 $A $IF 100000
rping_pair rping-one-host-lo $A lo 127.0.0.1 $A lo 64

# udaddy: datagrams both ways to a UD service found with SIDR.
udaddy_pair() { # udaddy_pair NAME SERVER_NS SERVER_DEV CLIENT_NS CLIENT_DEV SERVER_ADDR
  local name=$1 sns=$2 sdev=$3 cns=$4 cdev=$5 addr=$6 rc=0
  local s=$out/$name.server c=$out/$name.client
  ip netns exec "$sns" timeout 60 "$F" udaddy -d "$sdev" -C 20 -S 1000 >"$s" 2>&1 & local sp=$!
  wait_line "$s" "starting server"; sleep 0.5
  ip netns exec "$cns" timeout 60 "$F" udaddy -d "$cdev" -s "$addr" -C 20 -S 1000 \
    --pcap "$out/$name.pcap" >"$c" 2>&1 || rc=1
  wait $sp || rc=1
  if [ $rc = 0 ] && grep -q "data transfers complete" "$s" && grep -q "data transfers complete" "$c" &&
     "$F" decode "$out/$name.pcap" >"$out/$name.decode" 2>&1 &&
     grep -q "| CM SIDR_REQ " "$out/$name.decode" && grep -q "| CM SIDR_REP .*status=0 " "$out/$name.decode"; then
    ok "$name" "20 datagrams of 1000 bytes each way, the service found with SIDR"
  else ko "$name" "exit codes, status lines or the capture's SIDR" "$s" "$c" "$out/$name.decode"; fi
}
udaddy_pair udaddy-two-hosts $B $IF $A $IF 10.89.0.2
udaddy_pair udaddy-one-host-lo $A lo $A lo 127.0.0.1

# refused NAME NS DEV ADDR: a client to port 7999, where nothing listens, must fail at once
# saying so.
refused() {
  local name=$1 ns=$2 dev=$3 addr=$4 c=$out/$1.client t0 ms
  t0=$(date +%s%N)
  ip netns exec "$ns" timeout 60 "$F" ucmatose -d "$dev" -s "$addr" -p 7999 --timeout 20 >"$c" 2>&1
  local rc=$? ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  if [ $rc = 1 ] && grep -q "connection refused: nothing listens on that port" "$c" && [ $ms -lt 10000 ]; then
    ok "$name" "refused in $ms ms"
  else ko "$name" "exit $rc after $ms ms, no refusal" "$c"; fi
}
# The other host runs a ferroce server on 7471: its connection manager answers for 7999.
ip netns exec $B timeout 30 "$F" ucmatose -d $IF --timeout 15 >"$out/refused.server" 2>&1 & sp=$!
wait_line "$out/refused.server" "starting server"; sleep 0.5
refused refused-two-hosts $A $IF 10.89.0.2
kill $sp 2>/dev/null; wait $sp 2>/dev/null
refused refused-one-host-veth $A $IF 10.89.0.1
refused refused-one-host-lo $A lo 127.0.0.1

# Two ferroce servers share cm-b's interface (ports 7471 and 7480). A request for 7999,
# which neither holds, is refused at once (until 2026-11-29 each process left it to the
# other and the client waited out its timeout); one for 7480 is left to its server by
# the other process, and served; a third server on 7471 is refused the port, saying so.
sh=$out/shared
ip netns exec $B timeout 40 "$F" ucmatose -d $IF --timeout 30 >"$sh.server1" 2>&1 & s1=$!
ip netns exec $B timeout 40 "$F" ucmatose -d $IF -p 7480 --timeout 30 >"$sh.server2" 2>&1 & s2=$!
wait_line "$sh.server1" "starting server"; wait_line "$sh.server2" "starting server"; sleep 0.5
refused refused-shared $A $IF 10.89.0.2
ip netns exec $B timeout 20 "$F" ucmatose -d $IF --timeout 5 >"$sh.server3" 2>&1; rc3=$?
ip netns exec $A timeout 30 "$F" ucmatose -d $IF -s 10.89.0.2 -p 7480 -C 10 >"$sh.client" 2>&1; rc=$?
wait $s2 || rc=1
stop $s1
if [ $rc = 0 ] && grep -q "return status 0" "$sh.server2" && grep -q "return status 0" "$sh.client"; then
  ok shared-served "the request for the other server's port was left to it and served"
else ko shared-served "exit $rc" "$sh.client" "$sh.server2" "$sh.server1"; fi
if [ $rc3 = 1 ] && grep -q "port in use: another listener on this interface has it" "$sh.server3"; then
  ok port-in-use "$(grep -m1 'port in use' "$sh.server3")"
else ko port-in-use "exit $rc3" "$sh.server3"; fi

# A client's own REQ, to its own address, on an interface another process uses without a
# connection manager (an rc-pingpong server waiting for its TCP peer): nobody else can
# answer, so the client's own CM refuses it (until 2026-11-29 it left its own REQ to the
# other process, as soon as there was one, and waited out its timeout).
ip netns exec $A timeout 40 "$F" rc-pingpong -d $IF -p 18790 >"$out/self-shared.other" 2>&1 & op=$!
sleep 0.5
refused refused-self-shared $A $IF 10.89.0.1
stop $op

echo "cm: $pass passed, $fail failed"
[ "$fail" = 0 ]
