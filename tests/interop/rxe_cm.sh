#!/bin/bash
# Interop of ferroce's connection manager (IB CM MADs on QP1) with Linux's rdma_cm over
# rxe: rdma-core's unmodified ucmatose on rxe0 against `ferroce ucmatose`, in both roles,
# with small and multi-packet messages, and refused connections both ways; rdma-core's
# rping (RDMA READ and WRITE over the connection, rping's client validating with -V)
# against `ferroce rping`, both roles, one-packet and multi-packet buffers; rdma-core's
# udaddy (UD, the service found with SIDR) against `ferroce udaddy`, both roles. Topology
# (rxe-vm's setup_peer_ns): ferroce in netns "peer" on vethP 10.77.0.1, rxe0 on vethR
# 10.77.0.2 in the initial namespace.
#   rxe_cm.sh FERROCE_BINARY        (normally started by tests/interop/guest.sh)
# Prints one PASS/FAIL line per case and "rxe-cm: N passed, M failed"; exit 0 iff all pass.
. "$RXEVM_HOME/guest/lib.sh"
F=${1:?usage: rxe_cm.sh FERROCE_BINARY}
OUT=${OUT:-/tmp/ferroce-interop}
mkdir -p "$OUT/logs" "$OUT/pcaps"
# A fresh topology, whatever ran before.
rdma link del rxe0 2>/dev/null; ip link del vethR 2>/dev/null; ip netns del peer 2>/dev/null
setup_peer_ns 9000 >/dev/null || { echo "setup_peer_ns failed"; exit 1; }
pass=0 fail=0
result() { # result NAME OK DETAIL
  if [ "$2" = 1 ]; then pass=$((pass + 1)); echo "PASS $1${3:+: $3}"; else
    fail=$((fail + 1)); echo "FAIL $1"
    for f in "$OUT/logs/$1".*; do sed "s|^|    $(basename "$f"): |" "$f" | tail -8; done
  fi
}
# ferroce's log must show every step of a connection's life in its capture: the CM
# messages decoded from QP1, none malformed, every ICRC valid.
cm_seen() { # cm_seen NAME MSG...
  local name=$1 m; shift
  "$F" decode "$OUT/pcaps/$name.pcap" >"$OUT/logs/$name.decode" 2>&1 || return 1
  grep -q "(0 with a bad ICRC), 0 corrupt" "$OUT/logs/$name.decode" || return 1
  ! grep -q "| MAD (" "$OUT/logs/$name.decode" || return 1
  for m in "$@"; do grep -q "| CM $m " "$OUT/logs/$name.decode" || return 1; done
}
FER() { ip netns exec peer timeout 60 "$F" ucmatose -d vethP --stats --pcap "$OUT/pcaps/$NAME.pcap" "$@"; }
wait_line() { # wait_line FILE TEXT: up to 10 s
  local n; for n in $(seq 1 100); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1
}

for size_count in "100 10" "8192 50"; do
  set -- $size_count; S=$1 C=$2
  # rxe serves, ferroce connects.
  NAME=rs-S$S; log=$OUT/logs/$NAME; ok=1
  timeout 60 ucmatose -b 10.77.0.2 -S "$S" -C "$C" >"$log.rxe" 2>&1 & sp=$!
  sleep 1
  FER -s 10.77.0.2 -S "$S" -C "$C" >"$log.ferroce" 2>&1 || ok=0
  wait $sp || ok=0
  grep -q "return status 0" "$log.rxe" && grep -q "return status 0" "$log.ferroce" || ok=0
  cm_seen "$NAME" REQ REP RTU DREQ DREP || ok=0
  result "$NAME" $ok "-S $S -C $C"
  # ferroce serves, rxe connects.
  NAME=fs-S$S; log=$OUT/logs/$NAME; ok=1
  FER -S "$S" -C "$C" >"$log.ferroce" 2>&1 & sp=$!
  wait_line "$log.ferroce" "starting server" && sleep 1
  timeout 60 ucmatose -s 10.77.0.1 -b 10.77.0.2 -S "$S" -C "$C" >"$log.rxe" 2>&1 || ok=0
  wait $sp || ok=0
  grep -q "return status 0" "$log.rxe" && grep -q "return status 0" "$log.ferroce" || ok=0
  cm_seen "$NAME" REQ REP RTU DREQ DREP || ok=0
  result "$NAME" $ok "-S $S -C $C"
done

# Nobody listens on rxe's side: rxe's CM refuses ferroce's REQ (REJ, invalid service ID).
NAME=refused-by-rxe; log=$OUT/logs/$NAME; ok=1
FER -s 10.77.0.2 -p 7999 --timeout 20 >"$log.ferroce" 2>&1 && ok=0
grep -q "connection refused" "$log.ferroce" || ok=0
cm_seen "$NAME" REQ REJ || ok=0
result "$NAME" $ok "$(grep -o 'connection refused[^(]*' "$log.ferroce" | head -1)"

# ferroce listens on 7471 only: its CM refuses rxe's REQ for 7999.
NAME=refused-by-ferroce; log=$OUT/logs/$NAME; ok=1
FER --timeout 8 >"$log.ferroce" 2>&1 & sp=$!
wait_line "$log.ferroce" "starting server" && sleep 1
timeout 60 ucmatose -s 10.77.0.1 -b 10.77.0.2 -p 7999 >"$log.rxe" 2>&1 && ok=0
grep -q "REJECTED" "$log.rxe" || ok=0
wait $sp
cm_seen "$NAME" REQ REJ || ok=0
result "$NAME" $ok "$(grep -o 'RDMA_CM_EVENT_REJECTED[^\n]*' "$log.rxe" | head -1)"

# rping: each ping an RDMA READ by the server and an RDMA WRITE back, checked by the client.
RP() { ip netns exec peer timeout 60 "$F" rping --ib-dev vethP --stats --pcap "$OUT/pcaps/$NAME.pcap" "$@"; }
for S in 64 10000; do
  NAME=rping-rs-S$S; log=$OUT/logs/$NAME; ok=1
  timeout 60 rping -s -a 10.77.0.2 -S "$S" -v >"$log.rxe" 2>&1 & sp=$!
  sleep 1
  RP -c -a 10.77.0.2 -C 10 -S "$S" -v >"$log.ferroce" 2>&1 || ok=0
  wait $sp || ok=0
  [ "$(grep -c '^server ping data: rdma-ping-' "$log.rxe")" = 10 ] || ok=0
  [ "$(grep -c '^ping data: rdma-ping-' "$log.ferroce")" = 10 ] || ok=0
  cm_seen "$NAME" REQ REP RTU DREQ DREP || ok=0
  result "$NAME" $ok "10 pings of $S bytes, read and written back by rxe, checked"
  NAME=rping-fs-S$S; log=$OUT/logs/$NAME; ok=1
  RP -s -a 10.77.0.1 -S "$S" -v >"$log.ferroce" 2>&1 & sp=$!
  sleep 1
  timeout 60 rping -c -a 10.77.0.1 -I 10.77.0.2 -C 10 -S "$S" -v -V >"$log.rxe" 2>&1 || ok=0
  wait $sp || ok=0
  [ "$(grep -c '^ping data: rdma-ping-' "$log.rxe")" = 10 ] || ok=0
  [ "$(grep -c '^server ping data: rdma-ping-' "$log.ferroce")" = 10 ] || ok=0
  ! grep -q "data mismatch" "$log.rxe" || ok=0
  cm_seen "$NAME" REQ REP RTU DREQ DREP || ok=0
  result "$NAME" $ok "10 pings of $S bytes, read and written back by ferroce, validated by rping -V"
done

# udaddy: UD datagrams both ways to a service found with SIDR (rdma_cm's UDP port space).
for role in rs fs; do
  NAME=udaddy-$role; log=$OUT/logs/$NAME; ok=1
  if [ $role = rs ]; then
    timeout 60 udaddy -b 10.77.0.2 -C 20 -S 1000 >"$log.rxe" 2>&1 & sp=$!
    sleep 1
    ip netns exec peer timeout 60 "$F" udaddy -d vethP -s 10.77.0.2 -C 20 -S 1000 --stats \
      --pcap "$OUT/pcaps/$NAME.pcap" >"$log.ferroce" 2>&1 || ok=0
  else
    ip netns exec peer timeout 60 "$F" udaddy -d vethP -C 20 -S 1000 --stats \
      --pcap "$OUT/pcaps/$NAME.pcap" >"$log.ferroce" 2>&1 & sp=$!
    wait_line "$log.ferroce" "starting server" && sleep 1
    timeout 60 udaddy -s 10.77.0.1 -b 10.77.0.2 -C 20 -S 1000 >"$log.rxe" 2>&1 || ok=0
  fi
  wait $sp || ok=0
  grep -q "return status 0" "$log.rxe" && grep -q "return status 0" "$log.ferroce" || ok=0
  grep -q "data transfers complete" "$log.rxe" || ok=0
  cm_seen "$NAME" SIDR_REQ SIDR_REP || ok=0
  result "$NAME" $ok "20 datagrams of 1000 bytes each way"
done

echo "rxe-cm: $pass passed, $fail failed"
[ "$fail" = 0 ]
