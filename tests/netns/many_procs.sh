#!/bin/bash
# Many ferroce processes on one interface (issue: many RDMA processes per host).
#   1. Server and client on the same interface, on one veth end (mp-a0, 10.92.0.1, its
#      peer mp-b0 in another namespace) and on lo (127.0.0.1): `ferroce perf write-bw`,
#      `ferroce rc-pingpong -c`, `ferroce ud-pingpong -c`, and the Debian ib_write_bw,
#      ib_send_lat, ibv_rc_pingpong -c and ibv_ud_pingpong -c on ferroce's libibverbs
#      (`ferroce exec`); on lo also over IPv6 (::1) with 4096-byte packets, none dropped
#      or sent again. The namespace's kernel must send no ICMP port unreachable
#      meanwhile.
#   2. Eight `ferroce mesh` ranks on mp-a0, RC QPs all-to-all, writing and checking data;
#      rank 7 is SIGKILLed mid-run. The other seven must finish with every byte checked,
#      the QPs to rank 7 ending in RetryExcErr. A bystander started after the kill
#      (`ferroce mesh --idle`) gets QP numbers outside rank 7's blocks and receives not one
#      frame (its --stats counters) while the survivors still retransmit to rank 7; its
#      socket is not even shown the others' outgoing frames, while the ranks' sockets are
#      (--stats "same-host frames"). Once the survivors have exited, only the bystander's
#      packet socket, UDP guard and registry socket remain; once it has exited too,
#      nothing of ferroce remains (sockets, files).
#   tests/netns/many_procs.sh [FERROCE_BINARY]      (needs root: namespaces, veth)
# Prints PASS/FAIL lines and "many-procs: N passed, M failed"; exit 0 iff all pass.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh" "$@"
A=mp-a B=mp-b IA=mp-a0 IB=mp-b0 ADDR=10.92.0.1
out=${OUT:-$root/target}/many_procs; rm -rf "$out"; mkdir -p "$out"
cleanup() { ip netns pids $A 2>/dev/null | xargs -r kill -9 2>/dev/null; for ns in $A $B; do ip netns del "$ns" 2>/dev/null; done; true; }
trap cleanup EXIT
cleanup
if ! { ip netns add $A && ip netns add $B; }; then echo "cannot create network namespaces (need root)"; exit 1; fi
ip link add $IA netns $A type veth peer name $IB netns $B
ip -n $A addr add $ADDR/24 dev $IA; ip -n $B addr add 10.92.0.2/24 dev $IB
for ns in $A $B; do ip -n "$ns" link set lo up; done
ip -n $A link set $IA up; ip -n $B link set $IB up
pass=0 fail=0
for _ in $(seq 1 100); do settled $A $IA && break; sleep 0.1; done
# GID index of ADDR on IF, from `ferroce devinfo -v`.
gid_index() {
  ip netns exec $A "$F" devinfo -d "$1" -v |
    sed -n "s/.*GID\[ *\([0-9]*\)\]:[[:space:]]*::ffff:${2//./\\.},.*/\1/p" | head -1
}
# shellcheck disable=SC2016 # awk's own $ fields
icmp_unreach() { ip netns exec $A awk '/^Icmp:/ { if (h) print $(f); else for (i = 1; i <= NF; i++) if ($i == "OutDestUnreachs") { f = i; h = 1 } }' /proc/net/snmp; }
# Files whose name says ferroce in the places a program would leave them.
ferroce_files() { find /dev/shm /tmp /run /var/tmp -maxdepth 1 -name '*ferroce*' 2>/dev/null | sort; }
files0=$(ferroce_files)
wait_port() {
  for _ in $(seq 1 200); do
    ip netns exec $A ss -ltn | grep -q ":$1\b" && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# same_if NAME PORT CHECK CMD...: CMD -p PORT as the server and CMD -p PORT ADDR as the
# client, both in namespace A on the interface CMD names; both must exit 0 and the
# client's output must match the extended regex CHECK.
same_if() {
  local name=$1 port=$2 check=$3; shift 3
  local s=$out/$name.server c=$out/$name.client why="" rc
  ip netns exec $A timeout 60 "$@" -p "$port" >"$s" 2>&1 &
  local sp=$!
  if wait_port "$port" $sp; then
    ip netns exec $A timeout 60 "$@" -p "$port" "$TARGET" >"$c" 2>&1 || { rc=$?; why="client exit $rc"; }
  else
    why="the server never listened on port $port"; : >"$c"
  fi
  for _ in $(seq 1 100); do kill -0 $sp 2>/dev/null || break; sleep 0.1; done
  kill $sp 2>/dev/null
  wait $sp || { rc=$?; why="${why:-server exit $rc}"; }
  [ -n "$why" ] || grep -qE "$check" "$c" || why="client output lacks /$check/"
  if [ -z "$why" ]; then ok "$name" "$(grep -hE "$check" "$c" | head -1 | tr -s ' \t' ' ')"; else ko "$name" "$why" "$c" "$s"; fi
}

# --- 1. server and client on one interface ------------------------------------------
icmp0=$(icmp_unreach)
port=18600
for IF in $IA lo; do
  if [ "$IF" = lo ]; then TARGET=127.0.0.1; else TARGET=$ADDR; fi
  G=$(gid_index "$IF" "$TARGET")
  if [ -z "$G" ]; then ko "gid-$IF" "ferroce devinfo -v lists no GID for $TARGET on $IF"; continue; fi
  bw='^ 65536 +[0-9]+ +[0-9.]+ +[0-9.]*[1-9]'
  same_if "perf-write-bw-$IF" $((port += 1)) "$bw" "$F" perf write-bw -d "$IF" -s 65536 -n 300
  same_if "rc-pingpong-$IF" $((port += 1)) 'iters in .* usec/iter' "$F" rc-pingpong -d "$IF" -c -n 200
  same_if "ib_write_bw-$IF" $((port += 1)) "$bw" "$F" exec -- ib_write_bw -d "$IF" -x "$G" -F -s 65536 -n 300
  same_if "ib_send_lat-$IF" $((port += 1)) '^ 2 +[0-9]+ +[0-9.]+' "$F" exec -- ib_send_lat -d "$IF" -x "$G" -F -n 500
  same_if "ibv_rc_pingpong-$IF" $((port += 1)) 'iters in .* usec/iter' "$F" exec -- ibv_rc_pingpong -d "$IF" -g "$G" -c -n 200
  same_if "ud-pingpong-$IF" $((port += 1)) 'iters in .* usec/iter' "$F" ud-pingpong -d "$IF" -c -s 1024 -n 200
  same_if "ibv_ud_pingpong-$IF" $((port += 1)) 'iters in .* usec/iter' "$F" exec -- ibv_ud_pingpong -d "$IF" -g "$G" -c -s 1024 -n 200
done
# Over IPv6 on lo (::1): a WRITE's packets of a full 4096 MTU are 20 bytes longer than
# over IPv4 and must still be taken for single packets, not dropped as malformed
# super-frames: every packet arrives on its first try.
G6=$(ip netns exec $A "$F" devinfo -d lo -v | sed -n 's/.*GID\[ *\([0-9]*\)\]:[[:space:]]*::1,.*/\1/p' | head -1)
TARGET=127.0.0.1
if [ -z "$G6" ]; then ko gid-lo-ipv6 "ferroce devinfo -v lists no GID ::1 on lo"
else
  bw='^ 65536 +[0-9]+ +[0-9.]+ +[0-9.]*[1-9]'
  name=perf-write-bw-lo-ipv6
  same_if $name $((port += 1)) "$bw" "$F" perf write-bw -d lo -x "$G6" -s 65536 -n 300 --stats
  why=""
  grep -q '^counters:.* rdma_recvs=4800\b' "$out/$name.server" || why="the server did not count 4800 packets written"
  if grep -qE 'gso_rx_malformed=|retransmitted_pkts=' "$out/$name.server" "$out/$name.client"; then
    why="${why:+$why; }packets dropped and sent again: $(grep -ohE '(gso_rx_malformed|retransmitted_pkts)=[0-9]+' "$out/$name.server" "$out/$name.client" | tr '\n' ' ')"
  fi
  if [ -z "$why" ]; then ok $name-counters "4800 packets, none dropped or sent again"; else ko $name-counters "$why" "$out/$name.server" "$out/$name.client"; fi
  same_if "ib_write_bw-lo-ipv6" $((port += 1)) "$bw" "$F" exec -- ib_write_bw -d lo -x "$G6" -F -s 65536 -n 300
fi
icmp1=$(icmp_unreach)
if [ "${icmp0:-x}" = "${icmp1:-y}" ]; then ok no-icmp-unreachable "OutDestUnreachs stayed at $icmp1"
else ko no-icmp-unreachable "the kernel sent $((icmp1 - icmp0)) ICMP destination unreachable"; fi

# --- 2. eight ranks all-to-all, one killed ----------------------------------------------
mesh=$out/mesh; mkdir -p "$mesh"
declare -a pid
for r in 0 1 2 3 4 5 6 7; do
  ip netns exec $A timeout 90 "$F" mesh -d $IA --rank $r --ranks 8 --dir "$mesh" -n 40 \
    --interval-ms 50 --qp-timeout 16 --stats >"$mesh/rank$r.out" 2>&1 &
  pid[r]=$!
done
# Kill rank 7 once the ranks have met and exchanged for a while.
for _ in $(seq 1 300); do [ -e "$mesh/ready-7" ] && break; sleep 0.05; done
sleep 0.8
victim=$(pgrep -f -- "--rank 7 --ranks 8 --dir $mesh" | xargs -r ps -o pid=,comm= -p | awk '$2 == "ferroce" { print $1 }')
[ -n "$victim" ] && kill -9 "$victim" 2>/dev/null
echo "killed rank 7 (pid ${victim:-none})"
ip netns exec $A timeout 60 "$F" mesh -d $IA --ranks 8 --idle 8 --stats >"$mesh/idle.out" 2>&1 &
idle=$!
wait "${pid[7]}" 2>/dev/null
for r in 0 1 2 3 4 5 6; do
  wait "${pid[$r]}"; rc=$?
  f=$mesh/rank$r.out why=""
  [ $rc = 3 ] || why="exit $rc, not 3 (peers lost)"
  n_ok=$(grep -cE "^mesh: rank $r peer [0-6]: ok, 40 sent, 40 received and checked" "$f")
  [ -n "$why" ] || [ "$n_ok" = 6 ] || why="$n_ok of 6 live peers complete and checked"
  [ -n "$why" ] || grep -qE "^mesh: rank $r peer 7: lost \(RetryExcErr\)" "$f" || why="peer 7 not lost with RetryExcErr"
  [ -n "$why" ] || grep -q "^same-host frames: in (outgoing" "$f" || why="its socket did not take in this host's frames ($(grep -h '^same-host' "$f"))"
  if [ -z "$why" ]; then ok "mesh-rank$r" "$(grep -h "peer 7" "$f")"; else ko "mesh-rank$r" "$why" "$f"; fi
done
retries=$(cat "$mesh"/rank[0-6].out | grep -o 'completer_retry_err=[0-9]*' | awk -F= '{ s += $2 } END { print s + 0 }')
# The bystander, still running: only its sockets remain in the namespace.
sleep 0.5
if kill -0 $idle 2>/dev/null; then
  packet=$(ip netns exec $A awk 'NR > 1' /proc/net/packet | wc -l)
  members=$(ip netns exec $A grep -c '@ferroce-qpn\.m\.' /proc/net/unix)
  guards=$(ip netns exec $A ss -Hua 'sport = :4791' | wc -l)
  if [ "$packet" = 1 ] && [ "$members" = 1 ] && [ "$guards" -le 1 ]; then
    ok leftovers-after-kill "packet sockets $packet, registry members $members, UDP 4791 guards $guards (the bystander's)"
  else
    ko leftovers-after-kill "packet sockets $packet, registry members $members, UDP 4791 guards $guards; only the bystander's should remain"
  fi
else
  ko leftovers-after-kill "the bystander exited early" "$mesh/idle.out"
fi
wait $idle; rc=$?
# QP number blocks (QPN >> 8) of the hex numbers on stdin.
blocks() { local q; while read -r q; do [ "$q" = 0x0 ] || printf '%#x\n' $((q >> 8)); done | sort -u; }
dead_blocks=$(sed -n 's/^qpns //p' "$mesh/rank-7" 2>/dev/null | tr ' ' '\n' | blocks)
idle_blocks=$(sed -n 's/^mesh: idle qpn //p' "$mesh/idle.out" | blocks)
rcvd=$(grep -o '\brcvd_pkts=[0-9]*' "$mesh/idle.out" | cut -d= -f2)
why=""
[ $rc = 0 ] || why="bystander exit $rc"
[ -n "$why" ] || [ -n "$idle_blocks" ] || why="the bystander printed no QP numbers"
[ -n "$why" ] || [ -n "$dead_blocks" ] || why="rank 7 published no QP numbers"
[ -n "$why" ] || [ -z "$(comm -12 <(echo "$dead_blocks") <(echo "$idle_blocks"))" ] || why="the bystander got a block of the dead rank"
[ -n "$why" ] || [ -z "$rcvd" ] || why="the bystander received $rcvd packets"
# With no QP talking to this host, the kernel does not even show it the ranks' frames.
[ -n "$why" ] || grep -q "^same-host frames: ignored" "$mesh/idle.out" || why="the bystander's socket was shown this host's outgoing frames ($(grep -h '^same-host' "$mesh/idle.out"))"
[ -n "$why" ] || [ "$retries" -gt 0 ] || why="the survivors never retransmitted to the dead rank (nothing to keep out)"
if [ -z "$why" ]; then
  ok bystander "blocks ${idle_blocks//$'\n'/ } (dead rank: ${dead_blocks//$'\n'/ }), rcvd_pkts 0 while survivors retried $retries times"
else
  ko bystander "$why" "$mesh/idle.out"
fi
# Everything gone once the last process has exited.
sleep 0.2
packet=$(ip netns exec $A awk 'NR > 1' /proc/net/packet | wc -l)
members=$(ip netns exec $A grep -c 'ferroce-qpn' /proc/net/unix)
guards=$(ip netns exec $A ss -Hua 'sport = :4791' | wc -l)
files=$(comm -13 <(echo "$files0") <(ferroce_files) | grep -c .)
if [ "$packet$members$guards$files" = 0000 ]; then
  ok nothing-left "no packet socket, registry socket, UDP 4791 guard or ferroce file"
else
  ko nothing-left "packet sockets $packet, registry sockets $members, guards $guards, files $files"
fi

echo "many-procs: $pass passed, $fail failed"
[ "$fail" = 0 ]
