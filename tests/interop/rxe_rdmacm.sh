#!/bin/bash
# Interop of ferroce's librdmacm.so.1 with Linux's rdma_cm over rxe: the SAME unmodified
# Debian binaries on both sides, each in both roles. On rxe0 they run plain (rdma-core's
# librdmacm, the kernel's rdma_cm and rxe); in netns "peer" they run on ferroce's
# librdmacm and libibverbs through `ferroce exec`:
#   rping        10 pings (RDMA READ by the server, WRITE back), validated by the client
#                (-V), 64 B and 10000 B; and with -q, each program's QP its own (brought
#                up with rdma_init_qp_attr, the connection made without a QP on the ID)
#   ucmatose     SENDs both ways over one connection, then the disconnect
#   rstream      rsockets: 64 KiB blocking and 1 MiB non-blocking (through rpoll on the
#                ferroce client), data verified
#   udaddy       UD datagrams both ways, the service found with SIDR
#   mckey        multicast: 10 SENDs to a group, the receiver on one side, the sender on
#                the other
#   ib_write_bw -R, ib_read_bw -R, ib_send_lat -R (perftest's rdma_cm mode)
#   refused      a client to a port nobody listens on, both ways: REJECTED, reason 8
# Topology (rxe-vm's setup_peer_ns): netns "peer" on vethP 10.77.0.1 (ferroce), rxe0 on
# vethR 10.77.0.2 in the initial namespace.
#   rxe_rdmacm.sh FERROCE_BINARY     (normally started by tests/interop/guest.sh; the
#                                     library: $FERROCE_LIBDIR, as for rxe_libibverbs.sh)
# Roles: fs = ferroce server (peer), rxe client; rs = rxe server, ferroce client.
# Prints one PASS/FAIL line per case and "rxe-rdmacm: N passed, M failed"; exit 0 iff all
# pass.
# shellcheck source-path=SCRIPTDIR source=rxe-vm/guest/lib.sh disable=SC1091
. "$RXEVM_HOME/guest/lib.sh"
F=${1:?usage: rxe_rdmacm.sh FERROCE_BINARY}
OUT=${OUT:-/tmp/ferroce-interop}
L=$OUT/logs/rxe-rdmacm
rm -rf "$L"; mkdir -p "$L"
if ! { [ -d /sys/class/net/vethR ] && [ -d /sys/class/infiniband/rxe0 ]; }; then
  setup_peer_ns 9000 >/dev/null || { echo "FAIL rxe-rdmacm setup: setup_peer_ns failed"; echo "rxe-rdmacm: 0 passed, 1 failed"; exit 1; }
fi
T=60
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS rxe-rdmacm $1${2:+: $2}"; }
ko() {
  local name=$1 why=$2 f; shift 2
  fail=$((fail + 1)); echo "FAIL rxe-rdmacm $name: $why"
  for f in "$@"; do [ -s "$f" ] && tail -n 8 "$f" | sed "s/^/    ${f##*.}: /"; done
}
echo "ferroce: $("$F" --version 2>&1); library: $(readlink -e "${FERROCE_LIBDIR:-$(dirname "$F")/ferroce-lib}/librdmacm.so.1" || echo none)"
FER() { ip netns exec peer timeout $T "$F" exec -- "$@"; }
RXE() { timeout $T "$@"; }
# stop PID: stops what a FER or RXE started with & runs. PID is that subshell; its child is
# timeout, which stops the program. (kill PID would stop the subshell alone, and the
# program would hold its port until $T ran out.)
stop() { pkill -TERM -P "$1" 2>/dev/null; }

# pair NAME ROLE SERVER_ARGS -- CLIENT_ARGS (each a program and its arguments): the server
# starts, the client runs, both must exit 0. Sets $s and $c (their output files).
pair() {
  local name=$1 role=$2 rc=0 scmd=(); shift 2
  while [ "$1" != -- ]; do scmd+=("$1"); shift; done; shift
  if [ "$role" = fs ]; then
    s=$L/$name.ferroce c=$L/$name.rxe
    FER "${scmd[@]}" >"$s" 2>&1 & local sp=$!
    sleep 2
    RXE "$@" >"$c" 2>&1 || rc=1
  else
    s=$L/$name.rxe c=$L/$name.ferroce
    RXE "${scmd[@]}" >"$s" 2>&1 & local sp=$!
    sleep 2
    FER "$@" >"$c" 2>&1 || rc=1
  fi
  # A client that failed leaves its server waiting for it (perftest's waits for the
  # closing handshake until its timeout): stop the server now, so a retry costs seconds.
  [ $rc = 0 ] || stop $sp
  wait $sp || rc=1
  return $rc
}
addr() { [ "$1" = fs ] && echo 10.77.0.1 || echo 10.77.0.2; }
# Debian's rping (rdma-core 44) races its own teardown: its main thread destroys the event
# channel while its CM thread, done with DISCONNECTED, may not yet be back in
# rdma_get_cm_event; that call then fails (EINVAL on ferroce, EBADF on rdma-core) and rping
# exits 255. Upstream's rping now stops the CM thread first. A pair that failed with
# exactly that, after its DISCONNECTED, runs once more (a NOTE line says so).
rping_pair() { # as pair
  pair "$@" && return 0
  local f race=
  for f in "$s" "$c"; do
    awk '/DISCONNECT EVENT/ { d = 1 } d && /^rdma_get_cm_event: / { r = 1 } END { exit !r }' "$f" && race=1
  done
  [ -n "$race" ] || return 1
  echo "NOTE rxe-rdmacm $1: rping's own teardown race (rdma_get_cm_event after its channel was destroyed): run again"
  pair "$@"
}

for role in rs fs; do
  a=$(addr $role)
  for size in 64 10000; do
    name=rping-$role-S$size
    if rping_pair $name $role rping -s -a "$a" -S $size -v -- rping -c -a "$a" -S $size -C 10 -V -v &&
       [ "$(grep -c '^ping data: rdma-ping-' "$c")" = 10 ] &&
       [ "$(grep -c '^server ping data: rdma-ping-' "$s")" = 10 ]; then
      ok $name "10 pings of $size B read, written back, validated"
    else ko $name "exit codes or ping lines" "$s" "$c"; fi
  done
  # -q: the program's own QP, brought up with rdma_init_qp_attr (both sides).
  name=rping-q-$role
  if rping_pair $name $role rping -s -a "$a" -S 1000 -v -q -- rping -c -a "$a" -S 1000 -C 10 -V -v -q &&
     [ "$(grep -c '^ping data: rdma-ping-' "$c")" = 10 ] &&
     [ "$(grep -c '^server ping data: rdma-ping-' "$s")" = 10 ]; then
    ok $name "10 pings of 1000 B validated, each side's QP its own (rdma_init_qp_attr, rdma_establish)"
  else ko $name "exit codes or ping lines" "$s" "$c"; fi
  name=ucmatose-$role
  if pair $name $role ucmatose -- ucmatose -s "$a" &&
     grep -q "return status 0" "$s" && grep -q "return status 0" "$c"; then
    ok $name "SENDs both ways, disconnected"
  else ko $name "exit codes or status lines" "$s" "$c"; fi
  # rsockets: rdma-core's own on rxe against ferroce's, checked data both ways (-T v),
  # blocking 64 KiB transfers and 1 MiB ones (larger than rdma-core's 128 KiB rings: many
  # credit updates and published buffers each way), through rpoll (-T a) where the
  # client is ferroce's and non-blocking (-T n) where it is rdma-core's: rdma-core's rpoll
  # reports POLLHUP as soon as the peer's disconnect arrives, data still unread or not, and
  # rstream -T a then stops short when its server closes right after its last send (one
  # CI run, 2026-12-03: the rdma-core client printed no result; ferroce's rpoll waits
  # until what arrived is read).
  async=a; [ "$role" = fs ] && async=n
  for t in "65536 100 b" "1048576 10 $async"; do
    set -- $t
    name=rstream-$role-S$1-T$3
    if pair $name $role rstream -b "$a" -S $1 -C $2 -T $3 -T v -- rstream -s "$a" -S $1 -C $2 -T $3 -T v &&
       line=$(grep -E '^custom ' "$c") && ! grep -qi 'error\|fail' "$s" "$c"; then
      ok $name "$(echo "$line" | tr -s ' ')"
    else ko $name "exit codes or no result line" "$s" "$c"; fi
  done
  name=udaddy-$role
  if pair $name $role udaddy -- udaddy -s "$a" &&
     grep -q "data transfers complete" "$s" && grep -q "data transfers complete" "$c"; then
    ok $name "UD datagrams both ways, the service found with SIDR"
  else ko $name "exit codes or status lines" "$s" "$c"; fi
  # mckey: the "server" receives, the "client" sends 10 SENDs to group 239.77.0.1 (each
  # joined with rdma_join_multicast_ex; the sender sends 3 s after its join).
  name=mckey-$role
  other=$( [ "$role" = fs ] && echo 10.77.0.2 || echo 10.77.0.1 )
  if pair $name $role mckey -m 239.77.0.1 -b "$a" -C 10 -- mckey -m 239.77.0.1 -b "$other" -C 10 -s &&
     grep -q "data transfers complete" "$s" && grep -q "data transfers complete" "$c"; then
    ok $name "10 multicast SENDs to 239.77.0.1, all received"
  else ko $name "exit codes or transfer lines" "$s" "$c"; fi
  port=18600
  for t in "ib_write_bw -n 100" "ib_read_bw -n 100" "ib_send_lat -n 1000"; do
    set -- $t; prog=$1; shift
    name=${prog#ib_}-R-$role note=""
    if [ $role = fs ]; then sd=vethP cd=rxe0; else sd=rxe0 cd=vethP; fi
    # perftest calibrates its cycle counter; under TCG that sometimes fails ("Correlation
    # coefficient r^2 ... < 0.9", no report): such a case runs again, up to six times, and
    # its PASS line says so. The bandwidth runs are counted (-n), as in rxe_libibverbs.sh:
    # timed ones (-D 2) stop posting at the alarm and calibrate while what is outstanding
    # still streams, and ib_read_bw -R failed so in 3 of 6 runs in one boot, then 6 of 6
    # with the ferroce client in another, and three in a row in both roles in one CI run
    # (2026-11-28).
    # So does a client rejected with no listener (error 8) when the server, started 2 s
    # before, was not listening yet (one CI run under TCG: the ferroce server's log
    # empty); a server that never listens still fails all six.
    for attempt in 1 2 3 4 5 6; do
      port=$((port + 1)); line=""
      if pair $name $role $prog -R -d $sd -p $port "$@" -- $prog -R -d $cd -p $port "$@" "$a"; then
        line=$(grep -E '^ *[0-9]+ +[0-9]+ +[0-9.]+' "$c" | tail -1)
      fi
      [ -n "$line" ] && break
      if grep -q "Correlation coefficient" "$s" "$c"; then
        note=" (run $((attempt + 1)): perftest's clock calibration failed before)"
      elif grep -q "RDMA_CM_EVENT_REJECTED; error: 8" "$c"; then
        note=" (run $((attempt + 1)): a client was rejected before, no listener yet)"
      else
        break
      fi
    done
    if [ -n "$line" ]; then ok $name "$(echo "$line" | tr -s ' \t' ' ')$note"
    else ko $name "exit codes or no result line" "$s" "$c"; fi
  done
done

# Refused: nothing listens on 7999; each side's rdma_cm answers for its host (where an
# rping server listens on its own port).
# refused NAME ROLE: ROLE's side serves rping, the other connects to port 7999.
refused() {
  local name=$1 role=$2 rc a; a=$(addr "$role")
  local s=$L/$name.server c=$L/$name.client serve=FER ask=RXE
  [ "$role" = rs ] && { serve=RXE ask=FER; }
  $serve rping -s -a "$a" >"$s" 2>&1 & local sp=$!
  sleep 2
  $ask rping -c -a "$a" -p 7999 -C 1 >"$c" 2>&1; rc=$?
  stop $sp; wait $sp 2>/dev/null
  if [ $rc != 0 ] && grep -q "RDMA_CM_EVENT_REJECTED, error 8" "$c"; then
    ok "$name" "the client got REJECTED, error 8"
  else ko "$name" "exit $rc" "$c"; fi
}
refused refused-by-rxe rs
refused refused-by-ferroce fs

echo "rxe-rdmacm: $pass passed, $fail failed"
[ "$fail" = 0 ]
