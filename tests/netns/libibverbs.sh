#!/bin/bash
# Unmodified Debian binaries (ibverbs-utils, perftest) on ferroce's libibverbs.so.1 through
# `ferroce exec`, between two network namespaces joined by a veth pair on this host (no
# kernel RDMA module): ibv_devices and ibv_devinfo; ibv_rc_pingpong (sizes, -m 1024 and -m
# 4096 at veth MTU 9000, -e, -c), ibv_uc/ud/srq_pingpong (uc and ud also with -e);
# `ferroce exec --stats` (each end's counters on stderr at close);
# perftest's ib_write_bw, ib_read_bw, ib_send_bw (RC and UD, UD also with -e), ib_atomic_bw,
# ib_write_lat (RC and UC), ib_read_lat, ib_send_lat (also with -e), ib_atomic_lat (fetch-and-add,
# compare-and-swap); the
# pingpong and ib_write_bw as nobody through a copy of ferroce given cap_net_raw+p; port
# events (ibv_asyncwatch, ibv_devinfo) when the link goes down and up. Then what must fail
# cleanly: ibv_devices in a namespace without an interface (an empty list,
# exit 0), ibv_rc_pingpong without CAP_NET_RAW (as nobody: one stderr line naming it),
# and with a path MTU above the port's (one stderr line saying what to ask for).
# Each server runs in fv-b (fv-b0, 10.89.0.2), each client in fv-a (fv-a0, 10.89.0.1).
#   tests/netns/libibverbs.sh [FERROCE_BINARY]   (needs root: namespaces, veth, setpriv,
#                                                 setcap; nobody must reach the library)
# The library is the one `ferroce exec` finds: $FERROCE_LIBDIR, else libibverbs.so next to
# FERROCE_BINARY. Without an argument both are built (cargo build --release) when missing.
# Prints PASS/FAIL lines and "libibverbs: N passed, M failed"; exit 0 iff all pass.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh" "$@"
A=fv-a B=fv-b C=fv-c          # C: a namespace with nothing but lo, down
D=fv-d                        # D: a veth pair of its own, for an interface that goes away
IA=fv-a0 IB=fv-b0 SERVER=10.89.0.2
out=${OUT:-$root/target}/libibverbs; rm -rf "$out"; mkdir -p "$out"
cleanup() { for ns in $A $B $C $D; do ip netns del "$ns" 2>/dev/null; done; true; }
trap cleanup EXIT
cleanup
if ! { ip netns add $A && ip netns add $B && ip netns add $C; }; then echo "cannot create network namespaces (need root)"; exit 1; fi
ip link add $IA netns $A type veth peer name $IB netns $B
ip -n $A addr add 10.89.0.1/24 dev $IA; ip -n $B addr add $SERVER/24 dev $IB
for ns in $A $B; do ip -n "$ns" link set lo up; done
ip -n $A link set $IA up; ip -n $B link set $IB up
pass=0 fail=0
echo "ferroce: $("$F" --version); library: $(readlink -f "${FERROCE_LIBDIR:-$(dirname "$F")}"/libibverbs.so* 2>/dev/null | head -1)"

# The GID table holds the IPv6 link-local address first when there is one, then the IPv4
# address (src/net/gid.rs): wait until the link-local address is settled (no longer
# tentative) so that the index read now is the index the programs see.
for _ in $(seq 1 100); do settled $A $IA && settled $B $IB && break; sleep 0.1; done
# GID index of the interface's IPv4 address, from `ferroce devinfo -v`.
gid_index() {
  ip netns exec "$1" "$F" devinfo -d "$2" -v |
    sed -n "s/.*GID\[ *\([0-9]*\)\]:[[:space:]]*::ffff:${3//./\\.},.*/\1/p" | head -1
}
GA=$(gid_index $A $IA 10.89.0.1) GB=$(gid_index $B $IB $SERVER)
echo "GID index of the IPv4 address: $IA ${GA:-none}, $IB ${GB:-none}"
if [ -z "$GA" ] || [ -z "$GB" ]; then
  echo "FAIL gid-index: ferroce devinfo -v lists no IPv4 GID"; ip netns exec $B "$F" devinfo -v | sed 's/^/    /'
  echo "libibverbs: 0 passed, 1 failed"; exit 1
fi

# Runs PROGRAM ARGS in namespace NS through ferroce exec, with a time limit; as the user
# RUNAS says (setpriv's flags; empty: root), with the ferroce binary FX.
RUNAS=() FX=$F
in_ns() {
  local ns=$1 t=$2; shift 2
  if [ ${#RUNAS[@]} = 0 ]; then ip netns exec "$ns" timeout "$t" "$FX" exec -- "$@"
  else ip netns exec "$ns" timeout "$t" setpriv "${RUNAS[@]}" "$FX" exec -- "$@"; fi
}

# Waits for TCP port PORT to listen in NS while process PID lives.
wait_port() {
  for _ in $(seq 1 200); do
    ip netns exec "$1" ss -ltn | grep -q ":$2\b" && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}


# perftest's (last) result row: the line under the " #bytes" header.
row() { awk '/^ #bytes/ { t = 1; next } t && /^ [0-9]/ { r = $0 } /^---/ && t { exit } END { print r }' "$1"; }
positive() { awk -v x="$1" 'BEGIN { exit !(x + 0 > 0) }'; }

# pair NAME PORT KIND GIDFLAG TOOL ARGS...
#   TOOL ARGS -d fv-b0 GIDFLAG GB -p PORT as the server in B, the same with fv-a0 and GA
#   and the server's address last as the client in A. Both must exit 0, and then
#   KIND pingpong: both print "N iters in S seconds = U usec/iter";
#   KIND perftest: the client prints a result row with a positive figure (BW average,
#   column 4, or t_typical, column 5, for the latency tests).
pair() {
  local name=$1 port=$2 kind=$3 gflag=$4 tool=$5; shift 5
  local s=$out/$name.server c=$out/$name.client why="" rc
  in_ns $B 60 "$tool" -d $IB "$gflag" "$GB" -p "$port" "$@" >"$s" 2>&1 &
  local sp=$!
  if wait_port $B "$port" $sp; then
    in_ns $A 60 "$tool" -d $IA "$gflag" "$GA" -p "$port" "$@" $SERVER >"$c" 2>&1 || { rc=$?; why="client exit $rc"; }
  else
    why="the server never listened on port $port"; : >"$c"
  fi
  # A server whose client is gone gets 10 s to finish before it is stopped.
  for _ in $(seq 1 100); do kill -0 $sp 2>/dev/null || break; sleep 0.1; done
  pkill -TERM -P $sp 2>/dev/null; kill $sp 2>/dev/null # (see stop in lib.sh)
  wait $sp || { rc=$?; why="${why:-server exit $rc}"; }
  local summary=""
  if [ -z "$why" ]; then
    case $kind in
      pingpong)
        grep -q 'iters in .* usec/iter' "$s" || why="no 'iters in' line from the server"
        grep -q 'iters in .* usec/iter' "$c" || why="${why:-no 'iters in' line from the client}"
        summary=$(grep -h 'usec/iter' "$c")
        ;;
      perftest)
        local col=4 figure
        case $tool in *_lat) col=5 ;; esac
        summary=$(row "$c" | tr -s ' \t' ' ')
        figure=$(row "$c" | awk -v n=$col '{ print ($n == "" ? 0 : $n) }')
        if [ -z "$summary" ]; then why="no result row from the client"
        elif ! positive "$figure"; then why="client figure (column $col) is $figure"; fi
        ;;
    esac
  fi
  if [ -z "$why" ]; then ok "$name" "$summary"; else ko "$name" "$why" "$c" "$s"; fi
}

# --- devices -------------------------------------------------------------------------
in_ns $B 30 ibv_devices >"$out/ibv_devices.out" 2>&1; rc=$?
if [ $rc != 0 ]; then ko ibv_devices "exit $rc" "$out/ibv_devices.out"
elif ! grep -qE "^[[:space:]]+${IB}[[:space:]]+[0-9a-f]{16}\$" "$out/ibv_devices.out"; then ko ibv_devices "no line for $IB with a node GUID" "$out/ibv_devices.out"
else ok ibv_devices "$(grep -E "^[[:space:]]+${IB}[[:space:]]" "$out/ibv_devices.out" | tr -s ' \t' ' ')"; fi

in_ns $B 30 ibv_devinfo -v >"$out/ibv_devinfo.out" 2>&1; rc=$?
why=""
[ $rc = 0 ] || why="exit $rc"
grep -qE "^hca_id:[[:space:]]+$IB\$" "$out/ibv_devinfo.out" || why="${why:-no hca_id: $IB}"
grep -qE "state:[[:space:]]+PORT_ACTIVE" "$out/ibv_devinfo.out" || why="${why:-no state: PORT_ACTIVE}"
grep -qE "link_layer:[[:space:]]+Ethernet" "$out/ibv_devinfo.out" || why="${why:-no link_layer: Ethernet}"
grep -qE "GID\[ *$GB\]:[[:space:]]+::ffff:${SERVER//./\\.}\b" "$out/ibv_devinfo.out" || why="${why:-no GID[$GB] ::ffff:$SERVER (the index ferroce devinfo gives)}"
if [ -z "$why" ]; then ok ibv_devinfo "hca_id $IB, PORT_ACTIVE, Ethernet, GID[$GB] ::ffff:$SERVER"
else ko ibv_devinfo "$why" "$out/ibv_devinfo.out"; fi

# --- rdma-core's pingpongs (veth MTU 1500: RoCE MTU 1024) ------------------------------
pair rc-s1 18521 pingpong -g ibv_rc_pingpong -s 1 -n 200
pair rc-s4096 18522 pingpong -g ibv_rc_pingpong -s 4096 -n 200
pair rc-s65536 18523 pingpong -g ibv_rc_pingpong -s 65536 -n 50
pair rc-m1024 18524 pingpong -g ibv_rc_pingpong -m 1024 -s 4096 -n 100
pair rc-events 18525 pingpong -g ibv_rc_pingpong -e -s 4096 -n 200
pair rc-chk 18526 pingpong -g ibv_rc_pingpong -c -s 4096 -n 200
pair rc-events-chk-s65536 18527 pingpong -g ibv_rc_pingpong -e -c -s 65536 -n 50
pair uc-s4096-chk 18528 pingpong -g ibv_uc_pingpong -c -s 4096 -n 200
pair ud-s1024-chk 18529 pingpong -g ibv_ud_pingpong -c -s 1024 -n 200
pair uc-events-chk 18534 pingpong -g ibv_uc_pingpong -e -c -s 4096 -n 200
pair ud-events-chk 18535 pingpong -g ibv_ud_pingpong -e -c -s 1024 -n 200
pair srq-chk 18530 pingpong -g ibv_srq_pingpong -c -s 4096 -n 50

# --- perftest (both sides the same flags) ---------------------------------------------
pair write_bw-s4096 18601 perftest -x ib_write_bw -F -s 4096 -n 200
pair write_bw-s65536 18602 perftest -x ib_write_bw -F -s 65536 -n 100
pair read_bw-s4096 18603 perftest -x ib_read_bw -F -s 4096 -n 200
pair send_bw-s4096 18604 perftest -x ib_send_bw -F -s 4096 -n 200
pair send_bw-s65536 18605 perftest -x ib_send_bw -F -s 65536 -n 100
pair send_bw-ud-s1024 18606 perftest -x ib_send_bw -F -c UD -s 1024 -n 200
pair send_bw-ud-events 18618 perftest -x ib_send_bw -F -c UD -e -s 1024 -n 200
pair atomic_bw 18607 perftest -x ib_atomic_bw -F -n 200
pair write_lat-s2 18608 perftest -x ib_write_lat -F -s 2 -n 200
pair write_lat-s4096 18609 perftest -x ib_write_lat -F -s 4096 -n 200
pair read_lat-s64 18610 perftest -x ib_read_lat -F -s 64 -n 200
pair send_lat-s64 18611 perftest -x ib_send_lat -F -s 64 -n 200
# With events each end arms its CQ, then polls it once: an event must come only for a
# completion added after the arm (rxe's rule). An arm that fired over completions not
# yet polled (hardware's rule, tried for UCX's sleep mode) left a stale event, the next
# poll found nothing, and both ends failed (exit 17, flushed receives) on every run.
pair send_lat-events 18619 perftest -x ib_send_lat -F -e -s 2 -n 2000
pair write_lat-uc-s64 18617 perftest -x ib_write_lat -F -c UC -s 64 -n 200
pair send_lat-ud-s512 18612 perftest -x ib_send_lat -F -c UD -s 512 -n 200
pair atomic_lat-fadd 18615 perftest -x ib_atomic_lat -F -n 200
pair atomic_lat-cmp_swap 18616 perftest -x ib_atomic_lat -F -A CMP_AND_SWAP -n 200

# A path MTU above the port's active MTU (here 1024): ibv_modify_qp refuses it with
# EINVAL, as a RoCE NIC does, and the library says on one stderr line what to ask for.
# (The server modifies its QP first, on the client's address; the client then finds the
# connection closed.)
e=$out/mtu-above-active
in_ns $B 20 ibv_rc_pingpong -d $IB -g "$GB" -m 4096 -p 18541 >"$e.server" 2>&1 &
sp=$!
if wait_port $B 18541 $sp; then
  in_ns $A 20 ibv_rc_pingpong -d $IA -g "$GA" -m 4096 -p 18541 $SERVER >"$e.client" 2>&1; rc=$?
else rc=none; : >"$e.client"; fi
wait $sp; src=$?
want="ferroce: path MTU 4096 is above $IB's active MTU 1024 (interface MTU 1500): ask for 1024 or less"
n=$(grep -c "^$want" "$e.server")
if [ "$src" != 0 ] && [ "$src" != 124 ] && [ "$rc" != 0 ] && [ "$rc" != none ] && [ "$n" = 1 ] && grep -q 'Failed to modify QP to RTR' "$e.server"; then
  ok mtu-above-active "server exit $src: $(grep -h "^ferroce: path MTU" "$e.server")"
else ko mtu-above-active "server exit $src, client exit $rc (124: timed out), $n lines '$want...' (expected 1)" "$e.server" "$e.client"; fi

# `ferroce exec --stats` (FERROCE_STATS=1 for the library): each end prints its device's
# report (as `--stats` elsewhere) when the program closes the device, tagged with the
# device, its pid and "closed"; 100 round trips are at least 100 packets each way.
e=$out/exec-stats
ip netns exec $B timeout 30 "$F" exec --stats -- ibv_rc_pingpong -d $IB -g "$GB" -p 18543 -n 100 >"$e.server" 2>&1 &
sp=$!
if wait_port $B 18543 $sp; then
  ip netns exec $A timeout 30 "$F" exec --stats -- ibv_rc_pingpong -d $IA -g "$GA" -p 18543 -n 100 $SERVER >"$e.client" 2>&1; rc=$?
else rc=none; : >"$e.client"; fi
wait $sp; src=$?
# counter FILE DEVICE NAME: NAME's value in DEVICE's report at close (empty: none).
counter() { sed -n "s/^ferroce: $2 (pid [0-9]*, closed): counters: \(.* \)\?$3=\([0-9]*\).*/\2/p" "$1" | head -1; }
sa=$(counter "$e.client" $IA sent_pkts) ra=$(counter "$e.client" $IA rcvd_pkts)
sb=$(counter "$e.server" $IB sent_pkts) rb=$(counter "$e.server" $IB rcvd_pkts)
if [ "$rc" = 0 ] && [ "$src" = 0 ] && [ "${sa:-0}" -ge 100 ] && [ "${ra:-0}" -ge 100 ] && [ "${sb:-0}" -ge 100 ] && [ "${rb:-0}" -ge 100 ] &&
   grep -q "^ferroce: $IA (pid [0-9]*, closed): link: " "$e.client"; then
  ok exec-stats "client sent_pkts=$sa rcvd_pkts=$ra, server sent_pkts=$sb rcvd_pkts=$rb"
else ko exec-stats "client exit $rc, server exit $src, counters client $sa/$ra server $sb/$rb" "$e.client" "$e.server"; fi

# The two ends started on GIDs of different IP versions (the server on GID 0, its IPv6
# link-local address; the client on IPv4): no packet could pass between them, so the
# server's modify to RTR is refused, and the library says on one stderr line why.
e=$out/gid-family-mismatch
in_ns $B 20 ibv_rc_pingpong -d $IB -g 0 -p 18542 >"$e.server" 2>&1 &
sp=$!
if wait_port $B 18542 $sp; then
  in_ns $A 20 ibv_rc_pingpong -d $IA -g "$GA" -p 18542 $SERVER >"$e.client" 2>&1; rc=$?
else rc=none; : >"$e.client"; fi
wait $sp; src=$?
want="ferroce: the remote GID ::ffff:10.89.0.1 is IPv4 but $IB's GID index 0 is IPv6 (fe80::"
n=$(grep -cF "$want" "$e.server")
if [ "$src" != 0 ] && [ "$src" != 124 ] && [ "$rc" != 0 ] && [ "$rc" != none ] && [ "$n" = 1 ] && grep -q 'Failed to modify QP to RTR' "$e.server"; then
  ok gid-family-mismatch "server exit $src: $(grep -h "^ferroce: the remote GID" "$e.server")"
else ko gid-family-mismatch "server exit $src, client exit $rc (124: timed out), $n lines '$want...' (expected 1)" "$e.server" "$e.client"; fi

# --- veth MTU 9000: RoCE MTU 4096 ----------------------------------------------------
ip -n $A link set $IA mtu 9000; ip -n $B link set $IB mtu 9000
pair rc-m4096-s65536-chk 18531 pingpong -g ibv_rc_pingpong -m 4096 -c -s 65536 -n 50
pair ud-s4096-chk 18532 pingpong -g ibv_ud_pingpong -c -s 4096 -n 100
pair write_bw-m4096-s65536 18613 perftest -x ib_write_bw -F -m 4096 -s 65536 -n 100

# --- not root: a ferroce given CAP_NET_RAW once (setcap) passes it on -------------------
# A copy of ferroce (and of the library beside it) with cap_net_raw+p; both sides run as
# nobody. Its ferroce-lib/ symlink is made first, as root: nobody cannot write there.
capdir=$out/setcap; mkdir -p "$capdir"; chmod 755 "$out" "$capdir"
cp "$F" "$capdir/ferroce"
[ -f "$(dirname "$F")/libibverbs.so" ] && cp "$(dirname "$F")/libibverbs.so" "$capdir/"
if ! "$capdir/ferroce" exec -- true >"$capdir/prepare.out" 2>&1; then ko nonroot-setcap "ferroce exec as root failed" "$capdir/prepare.out"
elif ! setcap cap_net_raw+p "$capdir/ferroce" 2>"$capdir/prepare.out"; then ko nonroot-setcap "setcap failed (Debian package libcap2-bin)" "$capdir/prepare.out"
else
  RUNAS=(--reuid=65534 --regid=65534 --clear-groups) FX=$capdir/ferroce
  pair nonroot-setcap-rc-s4096 18533 pingpong -g ibv_rc_pingpong -c -s 4096 -n 100
  pair nonroot-setcap-write_bw 18614 perftest -x ib_write_bw -F -s 65536 -n 100
  RUNAS=() FX=$F
fi

# --- port state and events: the link goes down and comes back --------------------------
# Debian's ibv_asyncwatch on fv-a0 hears IBV_EVENT_PORT_ERR (10) when the veth's peer goes
# down (fv-a0 loses its carrier) and then IBV_EVENT_PORT_ACTIVE (9) when it comes back, both
# for port 1; ibv_devinfo shows the port PORT_DOWN in between and PORT_ACTIVE after.
port_state() { in_ns $A 10 ibv_devinfo -d $IA | awk '$1 == "state:" { print $2; exit }'; }
wait_state() { for _ in $(seq 1 50); do [ "$(port_state)" = "$1" ] && return 0; sleep 0.1; done; return 1; }
e=$out/port-events
in_ns $A 30 stdbuf -oL ibv_asyncwatch -d $IA >"$e.watch" 2>&1 &
wp=$!
for _ in $(seq 1 100); do grep -q 'async event FD' "$e.watch" && break; sleep 0.05; done
before=$(port_state)
ip -n $B link set $IB down
wait_state PORT_DOWN; down=$(port_state)
ip -n $B link set $IB up
wait_state PORT_ACTIVE; after=$(port_state)
for _ in $(seq 1 50); do grep -q '(9), port 1' "$e.watch" && break; sleep 0.1; done
stop $wp
events=$(grep -o 'event_type .*' "$e.watch" | tr '\n' ';')
order=$(grep -oE '\((9|10)\), port 1' "$e.watch" | tr -d '\n')
if [ "$before/$down/$after" = PORT_ACTIVE/PORT_DOWN/PORT_ACTIVE ] && [ "$order" = "(10), port 1(9), port 1" ]; then
  ok port-events "states $before/$down/$after, events $events"
else
  ko port-events "states $before/$down/$after (expected PORT_ACTIVE/PORT_DOWN/PORT_ACTIVE), events '$events' (expected PORT_ERR then PORT_ACTIVE, port 1)" "$e.watch"
fi
# The link is back: traffic flows again (once the link-local addresses, removed and added
# again, are settled: the GID indexes are those read at the start).
for _ in $(seq 1 100); do settled $A $IA && settled $B $IB && break; sleep 0.1; done
pair rc-after-port-events 18541 pingpong -g ibv_rc_pingpong -c -s 4096 -n 100

# --- its own interface goes down, comes back and goes away: the process stays idle ------
# A packet socket whose interface goes down or is deleted is left an error (ENETDOWN),
# and polls ready until the error is read: a driver that never read it spun on a CPU from
# then on, the link back or not. ibv_asyncwatch (the device open, nothing to do) on
# fv-d0, a veth with its peer in the same namespace: the CPU time it takes in 2 s idle,
# with its interface down (it hears PORT_ERR), up again, and deleted (it hears
# DEVICE_FATAL, once, after a PORT_ERR, as from rxe when its netdev is unregistered). A
# spinning driver takes about 200 ticks (USER_HZ 100); an idle process about none. The
# limit is 40.
ip netns add $D && ip link add fv-d0 netns $D type veth peer name fv-d1 netns $D
ip -n $D link set lo up; ip -n $D addr add 10.90.0.1/24 dev fv-d0
ip -n $D link set fv-d0 up; ip -n $D link set fv-d1 up
e=$out/link-gone
in_ns $D 40 stdbuf -oL ibv_asyncwatch -d fv-d0 >"$e.watch" 2>&1 &
wp=$!
for _ in $(seq 1 100); do grep -q 'async event FD' "$e.watch" && break; sleep 0.05; done
wpid=$(pgrep -n -x ibv_asyncwatch)
ticks() { awk '{ print $14 + $15 }' "/proc/$wpid/stat" 2>/dev/null; }
cpu2s() { local t0 t1; t0=$(ticks); sleep 2; t1=$(ticks); echo $(( ${t1:-99999} - ${t0:-0} )); }
idle=$(cpu2s)
ip -n $D link set fv-d0 down; sleep 0.3; down=$(cpu2s)
ip -n $D link set fv-d0 up; sleep 0.3; up=$(cpu2s)
ip -n $D link del fv-d0; sleep 0.3; gone=$(cpu2s)
alive=no; [ -n "$wpid" ] && kill -0 "$wpid" 2>/dev/null && alive=yes
stop $wp
order=$(grep -oE 'IBV_EVENT_[A-Z_]+' "$e.watch" | tr '\n' ' ')
figures="ticks in 2 s: idle $idle, down $down, up again $up, deleted $gone; still running: $alive; events: $order"
if [ -n "$wpid" ] && [ $alive = yes ] && [ "$idle" -lt 40 ] && [ "$down" -lt 40 ] && [ "$up" -lt 40 ] &&
   [ "$gone" -lt 40 ] &&
   [ "$order" = "IBV_EVENT_PORT_ERR IBV_EVENT_PORT_ACTIVE IBV_EVENT_PORT_ERR IBV_EVENT_DEVICE_FATAL " ]; then
  ok link-gone-idle "$figures"
else ko link-gone-idle "$figures (limit 40 each; events expected: PORT_ERR PORT_ACTIVE PORT_ERR DEVICE_FATAL)" "$e.watch"; fi

# --- what must fail cleanly -------------------------------------------------------------
# No usable interface (only lo, down): the header and no device, exit 0.
in_ns $C 30 ibv_devices >"$out/ibv_devices-empty.out" 2>&1; rc=$?
lines=$(wc -l <"$out/ibv_devices-empty.out")
if [ $rc = 0 ] && [ "$lines" = 2 ] && grep -q 'node GUID' "$out/ibv_devices-empty.out"; then ok ibv_devices-empty "header only, exit 0"
else ko ibv_devices-empty "exit $rc, $lines lines (expected the 2 header lines)" "$out/ibv_devices-empty.out"; fi

# No CAP_NET_RAW: as nobody, with it out of the bounding set too (so that even a ferroce
# given file capabilities cannot pass it on). The program fails, and its stderr has one
# line that names CAP_NET_RAW or setcap.
e=$out/no-cap-net-raw
ip netns exec $B timeout 20 setpriv --reuid=65534 --regid=65534 --clear-groups --bounding-set=-net_raw \
  "$F" exec -- ibv_rc_pingpong -d $IB -g "$GB" -p 18540 >"$e.stdout" 2>"$e.stderr"; rc=$?
n=$(grep -ciE 'CAP_NET_RAW|setcap' "$e.stderr")
if [ $rc != 0 ] && [ $rc != 124 ] && [ "$n" = 1 ]; then ok no-cap-net-raw "exit $rc: $(grep -iE 'CAP_NET_RAW|setcap' "$e.stderr")"
else ko no-cap-net-raw "exit $rc (124: timed out), $n stderr lines name CAP_NET_RAW/setcap (expected 1)" "$e.stderr" "$e.stdout"; fi

# A remote GID no neighbour answers for: B's GID 0 (the link-local address its MAC gives)
# once B's kernel makes its own link-local address instead (addr_gen_mode 3, random, as
# stable-privacy does). The client's modify to RTR fails, and the library says on one
# stderr line which peer did not answer and why GID 0 may not be there. (Last: B's
# addresses change.)
e=$out/gid0-unreachable
ip netns exec $B sysctl -qw net.ipv6.conf.$IB.addr_gen_mode=3
ip -n $B link set $IB down; ip -n $B link set $IB up
for _ in $(seq 1 100); do settled $B $IB && break; sleep 0.1; done
gid0=$(ip netns exec $B "$F" devinfo -d $IB -v | sed -n 's/.*GID\[ *0\]:[[:space:]]*\([0-9a-f:]*\),.*/\1/p')
in_ns $B 30 ibv_rc_pingpong -d $IB -g 0 -p 18543 >"$e.server" 2>&1 &
sp=$!
if wait_port $B 18543 $sp; then
  in_ns $A 20 ibv_rc_pingpong -d $IA -g 0 -p 18543 $SERVER >"$e.client" 2>&1; rc=$?
else rc=none; : >"$e.client"; fi
stop $sp
want="ferroce: peer $gid0 is unreachable from $IA (no ARP/ND answer)"
n=$(grep -cF "$want" "$e.client")
if [ -n "$gid0" ] && [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$rc" != none ] && [ "$n" = 1 ] &&
  grep -q "GID 0 is its MAC's link-local address" "$e.client" && grep -q 'Failed to modify QP to RTR' "$e.client"; then
  ok gid0-unreachable "client exit $rc: $(grep -h "^ferroce: peer" "$e.client" | cut -c1-100)..."
else ko gid0-unreachable "client exit $rc (124: timed out), $n lines '$want' (expected 1)" "$e.client" "$e.server"; fi

echo "libibverbs: $pass passed, $fail failed"
[ $fail = 0 ]
