#!/bin/bash
# Interop of ferroce's libibverbs.so.1 with Linux rxe: the SAME unmodified Debian binaries
# (ibverbs-utils' ibv_*_pingpong, perftest's ib_*_bw / ib_*_lat) on both sides, each in
# both roles. On rxe0 they run plain (the system libibverbs and its rxe provider); in netns
# "peer" they run on ferroce's library through `ferroce exec`. Runs where rdma_rxe is
# available: inside the rxe VM (tests/interop/guest.sh) or on a host whose kernel has it.
# Topology (rxe-vm's setup_peer_ns): ferroce in netns "peer" on vethP 10.77.0.1, rxe0 on
# vethR 10.77.0.2 in the initial namespace, veth MTU 9000 (port MTU 4096 on both sides, so
# that -m 1024 and -m 4096 both work).
#   rxe_libibverbs.sh FERROCE_BINARY [quick|full]   (normally started by tests/system.sh)
# The library is the one `ferroce exec` finds: $FERROCE_LIBDIR, else libibverbs.so next to
# FERROCE_BINARY through its ferroce-lib/ symlink, which must exist already when / is
# read-only (in the VM). A library that cannot be used is a FAIL for every case.
# Roles: fs = ferroce server (peer), rxe client; rs = rxe server, ferroce client (peer).
# Prints one PASS/FAIL line per case and "rxe-libibverbs: N passed, M failed"; exit 0 iff
# all pass.
# shellcheck source-path=SCRIPTDIR source=rxe-vm/guest/lib.sh disable=SC1091
. "$RXEVM_HOME/guest/lib.sh"
F=${1:?usage: rxe_libibverbs.sh FERROCE_BINARY [quick|full]}
MODE=${2:-full}
OUT=${OUT:-/tmp/ferroce-interop}
L=$OUT/logs/rxe-libibverbs
rm -rf "$L"; mkdir -p "$L"
if [ -d /sys/class/net/vethR ] && [ -d /sys/class/infiniband/rxe0 ]; then
  G=$(gid_index rxe0 10.77.0.2)   # set up already (by rxe_pingpong.sh in the same boot)
  # Port MTU 4096 on both sides (a no-op when it is 9000 already).
  ip link set vethR mtu 9000; ip -n peer link set vethP mtu 9000
else
  G=$(setup_peer_ns 9000) || { echo "FAIL rxe-libibverbs setup: setup_peer_ns failed"; echo "rxe-libibverbs: 0 passed, 1 failed"; exit 1; }
fi
T=60         # time limit of each program
pass=0 fail=0
broken=""    # set when nothing can run: every case is then a FAIL saying why

ok() { pass=$((pass + 1)); echo "PASS rxe-libibverbs $1${2:+: $2}"; }
ko() {  # NAME WHY FILE...: the FAIL line, then the tail of each file
  local name=$1 why=$2 f; shift 2
  fail=$((fail + 1)); echo "FAIL rxe-libibverbs $name: $why"
  for f in "$@"; do [ -s "$f" ] && tail -n 8 "$f" | sed "s/^/    ${f##*.}: /"; done
}

# --- what each side runs -------------------------------------------------------------
lib=$(readlink -e "${FERROCE_LIBDIR:-$(dirname "$F")/ferroce-lib}/libibverbs.so.1")
echo "rxe0 GID index $G; ferroce: $("$F" --version 2>&1); library: ${lib:-none found}; $(ib_write_bw --version 2>&1 | head -1)"
# The programs run on ferroce's library only if `ferroce exec` works: its ibv_devices in
# peer lists vethP and not rxe0 (the system libibverbs would list rxe0 and no vethP).
ip netns exec peer timeout 60 "$F" exec -- ibv_devices >"$L/devices.ferroce" 2>&1; rc=$?
if [ $rc != 0 ]; then broken="ferroce exec -- ibv_devices exit $rc"
elif ! grep -qE '^[[:space:]]+vethP[[:space:]]' "$L/devices.ferroce"; then broken="ferroce exec -- ibv_devices lists no vethP"
elif grep -qE '^[[:space:]]+rxe0[[:space:]]' "$L/devices.ferroce"; then broken="ferroce exec -- ibv_devices lists rxe0: the system libibverbs, not ferroce's"
fi
timeout 60 ibv_devices >"$L/devices.rxe" 2>&1; rc=$?
if [ $rc != 0 ]; then broken=${broken:-plain ibv_devices exit $rc}
elif ! grep -qE '^[[:space:]]+rxe0[[:space:]]' "$L/devices.rxe"; then broken=${broken:-plain ibv_devices lists no rxe0}
fi
if [ -z "$broken" ]; then ok devices "ferroce: $(grep -E '^[[:space:]]+vethP' "$L/devices.ferroce" | tr -s ' \t' ' '); rxe: $(grep -E '^[[:space:]]+rxe0' "$L/devices.rxe" | tr -s ' \t' ' ')"
else ko devices "$broken" "$L/devices.ferroce" "$L/devices.rxe"; fi

# ferroce's GID table holds vethP's IPv6 link-local address first once it is settled (no
# longer tentative), then the IPv4 address: wait for it, so that the index read now is the
# one the programs see, and take the index from `ferroce devinfo -v`.
settled() { ip -n peer -6 addr show dev vethP scope link | grep -q inet6 && ! ip -n peer -6 addr show dev vethP | grep -q tentative; }
for _ in $(seq 1 100); do settled && break; sleep 0.1; done
GF=""
if [ -z "$broken" ]; then
  ip netns exec peer "$F" devinfo -d vethP -v >"$L/devinfo.ferroce" 2>&1
  GF=$(sed -n 's/.*GID\[ *\([0-9]*\)\]:[[:space:]]*::ffff:10\.77\.0\.1,.*/\1/p' "$L/devinfo.ferroce" | head -1)
  [ -n "$GF" ] || { broken="ferroce devinfo -v lists no GID ::ffff:10.77.0.1 on vethP"; ko gid-index "$broken" "$L/devinfo.ferroce"; }
fi
[ -n "$G" ] || { broken=${broken:-rxe0 has no RoCE v2 GID for 10.77.0.2}; ko gid-index-rxe0 "$broken"; }
echo "rxe0 GID index ${G:-none} (::ffff:10.77.0.2), vethP GID index ${GF:-none} (::ffff:10.77.0.1)"

# Waits for TCP port PORT to listen (in NETNS, "" for this one) while process PID lives.
wait_listen() {
  local port=$1 ns=$2 pid=$3
  for _ in $(seq 1 300); do
    ${ns:+ip netns exec "$ns"} ss -ltn | grep -q ":$port\b" && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
exitwhy() {  # WHO RC: why a program failed, in words
  case $2 in
    124) echo "$1 timed out (${T} s)" ;;
    143) echo "$1 killed: still running 30 s after its peer finished" ;;
    *) echo "$1 exit $2" ;;
  esac
}
# perftest's (last) result row: the line under the " #bytes" header; field N of it.
row() { awk '/^ #bytes/ { t = 1; next } t && /^ [0-9]/ { r = $0 } /^---/ && t { exit } END { print r }' "$1"; }
field() { row "$1" | awk -v n="$2" '{ print ($n == "" ? 0 : $n) }'; }
positive() { awk -v x="$1" 'BEGIN { exit !(x + 0 > 0) }'; }

port=18700
# attempt NAME KIND ROLE TOOL ARGS...: one run; sets why (empty: passed) and summary.
attempt() {
  local name=$1 kind=$2 role=$3 tool=$4; shift 4
  local gflag=-g b=$L/$name sp rc server client
  [ "$kind" = perftest ] && gflag=-x
  port=$((port + 1)); why="" summary=""
  rm -f "$b".*
  if [ "$role" = fs ]; then
    server=$b.ferroce client=$b.rxe
    ip netns exec peer timeout $T "$F" exec -- "$tool" -d vethP $gflag "$GF" -p $port "$@" >"$server" 2>&1 &
    sp=$!
    if wait_listen $port peer $sp; then
      timeout $T "$tool" -d rxe0 $gflag "$G" -p $port "$@" 10.77.0.1 >"$client" 2>&1 || { rc=$?; why=$(exitwhy "rxe client" $rc); }
    else
      why="the ferroce server never listened on port $port"
    fi
  else
    server=$b.rxe client=$b.ferroce
    timeout $T "$tool" -d rxe0 $gflag "$G" -p $port "$@" >"$server" 2>&1 &
    sp=$!
    if wait_listen $port "" $sp; then
      ip netns exec peer timeout $T "$F" exec -- "$tool" -d vethP $gflag "$GF" -p $port "$@" 10.77.0.2 >"$client" 2>&1 || { rc=$?; why=$(exitwhy "ferroce client" $rc); }
    else
      why="the rxe server never listened on port $port"
    fi
  fi
  # A server whose client is done gets 30 s to finish before it is stopped. When both
  # fail, both are named (a server can fail first and its client then for lack of it).
  for _ in $(seq 1 300); do kill -0 $sp 2>/dev/null || break; sleep 0.1; done
  kill $sp 2>/dev/null
  wait $sp || { rc=$?; why="${why:+$why; }$(exitwhy "${server##*.} server" $rc)"; }
  [ -z "$why" ] || return 1
  case $kind in
    pingpong)
      # Both print "N bytes in S seconds = R Mbit/sec" and "N iters in S seconds = U usec/iter".
      grep -q 'iters in .* usec/iter' "$server" || why="no 'iters in' line from the ${server##*.} server"
      grep -q 'iters in .* usec/iter' "$client" || why=${why:-no \'iters in\' line from the ${client##*.} client}
      summary="ferroce: $(grep -h 'usec/iter' "$b.ferroce"); rxe: $(grep -h 'usec/iter' "$b.rxe")"
      ;;
    perftest)
      # The client's row has a positive figure: BW average (column 4) or t_typical (column
      # 5); the server prints a row too, but a READ or atomic latency server measures
      # nothing.
      local col=4 figure
      case $tool in *_lat) col=5 ;; esac
      figure=$(field "$client" $col)
      if [ -z "$(row "$client")" ]; then why="no result row from the ${client##*.} client"
      elif ! positive "$figure"; then why="${client##*.} client figure (column $col) is $figure"
      elif [ "$tool" != ib_read_lat ] && [ "$tool" != ib_atomic_lat ] && [ -z "$(row "$server")" ]; then why="no result row from the ${server##*.} server"
      fi
      summary="${client##*.} client: $(row "$client" | tr -s ' \t' ' ' | sed 's/^ //')"
      case $tool in ib_send_bw) summary="$summary (${server##*.} server received $(field "$server" 2))" ;; esac
      ;;
  esac
  [ -z "$why" ]
}

# run_case NAME KIND ROLE TOOL ARGS...
#   KIND pingpong (-g GID index) | perftest (-x GID index); ROLE fs | rs (see the top).
#   The server runs TOOL -d DEV -g|-x INDEX -p PORT ARGS, the client the same and the
#   server's address. Both must exit 0 and print their results.
# perftest calibrates its cycle counter against /proc/cpuinfo; under TCG the calibration
# sometimes fails ("Correlation coefficient r^2 ... < 0.9") and perftest then reports 0 for
# every figure (with -F). Such a case runs once more; the PASS line says so.
run_case() {
  local name=$1-$3 kind=$2 tool=$4 attempt note="" t0=$SECONDS
  if [ -n "$broken" ]; then ko "$name" "not run: $broken"; return; fi
  if ! command -v "$tool" >/dev/null; then ko "$name" "$tool not found (Debian packages ibverbs-utils, perftest)"; return; fi
  for attempt in 1 2; do
    if attempt "$name" "${@:2}"; then ok "$name" "$summary$note ($((SECONDS - t0)) s)"; return; fi
    if [ "$kind" != perftest ] || ! cat "$L/$name".* | grep -q "Correlation coefficient"; then break; fi
    [ $attempt = 1 ] && note=" (second run: perftest's clock calibration failed in the first)"
  done
  ko "$name" "$why ($((SECONDS - t0)) s)" "$L/$name.rxe" "$L/$name.ferroce"
}

# --- the cases -----------------------------------------------------------------------
# RDMA READ and atomics: each perftest side announces as its "outstanding reads" its own
# device's max_qp_rd_atom (rxe 128, ferroce 16) unless -o says otherwise, and a side that
# moves its QP to RTS sets max_rd_atomic (initiator depth) to the OTHER side's figure: the
# client always, the server too in latency tests. ferroce asked for 128 answers EINVAL
# ("Failed to modify QP to RTS"), as rxe and mlx5 do above their device's maximum. So the
# cases where ferroce goes to RTS against rxe's 128 say -o 16 (and are named -o16): the rs
# READ and atomic cases, and ib_read_lat and ib_atomic_lat in both roles. The fs bandwidth cases keep
# perftest's defaults.
iters=20 n=100
[ "$MODE" = quick ] && { iters=5 n=50; }
for role in fs rs; do
  o=() on=""
  [ $role = rs ] && { o=(-o 16); on=-o16; }
  if [ "$MODE" = quick ]; then
    run_case rc-m1024-s4096-chk pingpong $role ibv_rc_pingpong -m 1024 -s 4096 -c -n $iters
    run_case rc-m4096-s65536-chk pingpong $role ibv_rc_pingpong -m 4096 -s 65536 -c -n $iters
    run_case uc-m1024-s4096-chk pingpong $role ibv_uc_pingpong -m 1024 -s 4096 -c -n $iters
    run_case ud-s1024-chk pingpong $role ibv_ud_pingpong -s 1024 -c -n $iters
    run_case srq-s4096-chk pingpong $role ibv_srq_pingpong -s 4096 -c -n $iters
    run_case write_bw-s65536 perftest $role ib_write_bw -F -s 65536 -n $n
    run_case read_bw-s4096$on perftest $role ib_read_bw -F "${o[@]}" -s 4096 -n $n
    run_case send_bw-ud-s1024 perftest $role ib_send_bw -F -c UD -s 1024 -n $n
    run_case atomic_bw$on perftest $role ib_atomic_bw -F "${o[@]}" -n $n
    run_case send_lat-s64 perftest $role ib_send_lat -F -s 64 -n $n
    continue
  fi
  # rdma-core's pingpongs, RoCE MTU 1024 and 4096 as in rxe_pingpong.sh, payload checked.
  for mtu in 1024 4096; do
    for size in 1 4096 65536; do
      run_case rc-m$mtu-s$size-chk pingpong $role ibv_rc_pingpong -m $mtu -s $size -c -n $iters
    done
    run_case uc-m$mtu-s4096-chk pingpong $role ibv_uc_pingpong -m $mtu -s 4096 -c -n $iters
    run_case uc-m$mtu-s65536-chk pingpong $role ibv_uc_pingpong -m $mtu -s 65536 -c -n $iters
  done
  run_case rc-events-m1024-s4096-chk pingpong $role ibv_rc_pingpong -e -m 1024 -s 4096 -c -n $iters
  # UD: one message per datagram, at most the port MTU (4096).
  run_case ud-s1-chk pingpong $role ibv_ud_pingpong -s 1 -c -n $iters
  run_case ud-s1024-chk pingpong $role ibv_ud_pingpong -s 1024 -c -n $iters
  run_case ud-s4096-chk pingpong $role ibv_ud_pingpong -s 4096 -c -n $iters
  run_case srq-s4096-chk pingpong $role ibv_srq_pingpong -s 4096 -c -n $iters
  run_case srq-m4096-s65536-chk pingpong $role ibv_srq_pingpong -m 4096 -s 65536 -c -n $iters
  # perftest: both sides the same flags, RoCE MTU 4096 (the port's) unless -m says otherwise.
  run_case write_bw-s4096 perftest $role ib_write_bw -F -s 4096 -n $n
  run_case write_bw-s65536 perftest $role ib_write_bw -F -s 65536 -n $n
  run_case write_bw-m1024-s65536 perftest $role ib_write_bw -F -m 1024 -s 65536 -n $n
  run_case read_bw-s4096$on perftest $role ib_read_bw -F "${o[@]}" -s 4096 -n $n
  run_case read_bw-s65536$on perftest $role ib_read_bw -F "${o[@]}" -s 65536 -n $n
  run_case send_bw-s4096 perftest $role ib_send_bw -F -s 4096 -n $n
  run_case send_bw-s65536 perftest $role ib_send_bw -F -s 65536 -n $n
  run_case send_bw-ud-s1024 perftest $role ib_send_bw -F -c UD -s 1024 -n $n
  run_case send_bw-ud-s4096 perftest $role ib_send_bw -F -c UD -s 4096 -n $n
  run_case atomic_bw$on perftest $role ib_atomic_bw -F "${o[@]}" -n $n
  run_case atomic_bw-cas$on perftest $role ib_atomic_bw -F "${o[@]}" -A CMP_AND_SWAP -n $n
  run_case write_lat-s2 perftest $role ib_write_lat -F -s 2 -n $n
  run_case write_lat-s4096 perftest $role ib_write_lat -F -s 4096 -n $n
  run_case read_lat-s64-o16 perftest $role ib_read_lat -F -o 16 -s 64 -n $n
  run_case read_lat-s4096-o16 perftest $role ib_read_lat -F -o 16 -s 4096 -n $n
  run_case atomic_lat-o16 perftest $role ib_atomic_lat -F -o 16 -n $n
  run_case atomic_lat-cas-o16 perftest $role ib_atomic_lat -F -o 16 -A CMP_AND_SWAP -n $n
  run_case send_lat-s64 perftest $role ib_send_lat -F -s 64 -n $n
  run_case send_lat-s4096 perftest $role ib_send_lat -F -s 4096 -n $n
  run_case send_lat-ud-s512 perftest $role ib_send_lat -F -c UD -s 512 -n $n
done

echo "rxe-libibverbs: $pass passed, $fail failed"
[ $fail = 0 ]
