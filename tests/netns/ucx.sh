#!/bin/bash
# UCX (Debian's ucx-utils, as they are) on ferroce's libibverbs through `ferroce exec`,
# between two network namespaces joined by a veth pair. UCX takes an RDMA device only when
# /dev/infiniband/<dev_name> is a character device it may open; `ferroce exec` gives the
# program a mount namespace with one per ferroce device (cli/src/cli/exec.rs).
#   ucx_info -d            lists ferroce's device with UCX's rc_verbs transport
#   ucx_perftest           put latency, put bandwidth (zero-copy RDMA WRITE), active-message
#                          latency and atomic add latency over rc_verbs, each to its "Final" line
#                          active-message latency and bandwidth over ud_verbs, on the IPv4 GID
#                          UCX picks and on the link-local one (UCX drops UD packets whose
#                          destination address is not its own, and finds where it lies in the
#                          GRH area by the completion's sl: ibverbs/src/cq.rs)
#                          UCP tag matching (what MPI uses) with UCP's own wire-up over UD,
#                          and 64 KiB messages with UCX_TLS=rc: UCP splits them over every
#                          RoCE device it is offered, so lo's must not be one (see below)
#   ucx_info -d            no lo:1 unless UCX_NET_DEVICES names it, then lo:1
#   io_demo                UCP client and server connected through rdma_cm (ferroce's
#                          librdmacm.so.1, UCX's rdmacm connection manager), reads and
#                          writes over rc_verbs with their data checked
#   afterwards             no ferroce node left in the host's /dev/infiniband
# ucx_perftest's server takes the client's device name, so both ends' interfaces are
# named eth1: each server in ux-b (10.88.0.2), each client in ux-a (10.88.0.1).
#   tests/netns/ucx.sh [FERROCE_BINARY]   (needs root: namespaces, veth, mounts)
# Prints PASS/FAIL lines and "ucx: N passed, M failed"; exit 0 iff all pass.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh" "$@"
A=ux-a B=ux-b IF=eth1 SERVER=10.88.0.2
out=${OUT:-$root/target}/ucx; rm -rf "$out"; mkdir -p "$out"
pass=0 fail=0
if ! command -v ucx_perftest >/dev/null; then
  echo "FAIL ucx-utils: ucx_perftest is not installed (Debian package ucx-utils)"; echo "ucx: 0 passed, 1 failed"; exit 1
fi
two_hosts $A $B $IF 10.88.0
echo "ferroce: $("$F" --version); $(ucx_info -v | head -1)"

e=$out/ucx_info
ip netns exec $A timeout 60 "$F" exec -- ucx_info -d >"$e" 2>&1; rc=$?
if [ $rc = 0 ] && grep -A1 'Transport: rc_verbs' "$e" | grep -q "Device: $IF:1"; then
  ok ucx_info-rc_verbs "$(grep -c 'Transport:' "$e") transports, rc_verbs on $IF:1"
else ko ucx_info-rc_verbs "exit $rc, no rc_verbs transport on $IF:1" "$e"; fi
# UCX takes any two RoCE devices as reachable: lo's device of one host would get a lane to
# the other's 127.0.0.1, that is to itself. `ferroce exec` offers it only when asked for.
if [ $rc = 0 ] && ! grep -q 'Device: lo:1' "$e"; then ok ucx_info-no-lo "lo's RoCE device not offered to UCX"
else ko ucx_info-no-lo "exit $rc, lo:1 offered without UCX_NET_DEVICES" "$e"; fi
e=$out/ucx_info-lo
ip netns exec $A env UCX_NET_DEVICES=lo:1 timeout 60 "$F" exec -- ucx_info -d >"$e" 2>&1; rc=$?
if [ $rc = 0 ] && grep -A1 'Transport: rc_verbs' "$e" | grep -q 'Device: lo:1'; then ok ucx_info-lo-asked "UCX_NET_DEVICES=lo:1: rc_verbs on lo:1"
else ko ucx_info-lo-asked "exit $rc, no rc_verbs on lo:1 with UCX_NET_DEVICES=lo:1" "$e"; fi

# NAME ARGS...: ucx_perftest's server in B, its client in A with ARGS; PASS on the
# client's "Final:" line (iterations, latency, bandwidth, rate) and both exits 0.
# UCXENV (VAR=VALUE words) goes to both ends; the client takes the device unless NODEV=1.
UCXENV=
run() {
  local name=$1 port=$((13337 + pass + fail)); shift
  local e=$out/$name dev=(-d $IF:1)
  [ "${NODEV:-}" = 1 ] && dev=()
  # shellcheck disable=SC2086 # UCXENV is a list of words
  ip netns exec $B timeout 60 "$F" exec -- env $UCXENV ucx_perftest -p $port >"$e.server" 2>&1 &
  local sp=$!
  for _ in $(seq 1 100); do ip netns exec $B ss -ltn | grep -q ":$port\b" && break; sleep 0.05; done
  # shellcheck disable=SC2086
  ip netns exec $A timeout 60 "$F" exec -- env $UCXENV ucx_perftest -p $port $SERVER "${dev[@]}" "$@" >"$e.client" 2>&1; local rc=$?
  wait $sp; local src=$?
  local final; final=$(grep '^Final:' "$e.client" | tr -s ' ')
  if [ $rc = 0 ] && [ $src = 0 ] && [ -n "$final" ]; then ok "$name" "$final"
  else ko "$name" "client exit $rc, server exit $src (124: timed out), final '${final}'" "$e.client" "$e.server"; fi
}
run put_lat-rc -x rc_verbs -t put_lat -s 8 -n 10000
run put_bw-rc-zcopy-64k -x rc_verbs -t put_bw -D zcopy -s 65536 -n 2000
run am_lat-rc -x rc_verbs -t am_lat -s 8 -n 10000
run add_lat-rc -x rc_verbs -t add_lat -n 10000
run am_lat-ud -x ud_verbs -t am_lat -s 8 -n 10000
run am_bw-ud-bcopy -x ud_verbs -t am_bw -D bcopy -s 512 -n 10000
UCXENV=UCX_IB_GID_INDEX=0 run am_lat-ud-gid0 -x ud_verbs -t am_lat -s 8 -n 10000
UCXENV=UCX_TLS=ud_verbs,self NODEV=1 run tag_lat-ucp-ud -t tag_lat -s 8 -n 10000
UCXENV=UCX_TLS=rc,self NODEV=1 run tag_bw-ucp-rc-64k -t tag_bw -s 65536 -n 2000
# 1 MiB goes by rendezvous: the receiver READs it, 1,024 responses at MTU 1024, more than one
# transmit batch of the sender's, which polls meanwhile (tests/poll_mode.rs has the stall).
UCXENV=UCX_TLS=rc,self NODEV=1 run tag_bw-ucp-rc-1m -t tag_bw -s 1048576 -n 200

# UCP's client-server wire-up through rdma_cm (ferroce's librdmacm.so.1): Debian's io_demo,
# whose server listens on a socket address (ucp_listener). UCX_SOCKADDR_TLS_PRIORITY=rdmacm
# leaves UCX no other connection manager (not its TCP one), UCX_TLS=rc_verbs no other way to
# move the data: 2000 reads and writes of 1 KiB-64 KiB, each checked (-q). Both ends log
# their rdma_cm events (CONNECT_RESPONSE and rdma_establish on the client, UCX's way).
e=$out/io_demo-rdmacm
ucm=(env UCX_SOCKADDR_TLS_PRIORITY=rdmacm UCX_TLS=rc_verbs FERROCE_LOG=ibverbs::rdmacm=debug)
ip netns exec $B timeout 90 "$F" exec -- "${ucm[@]}" io_demo -p 13400 -q -i 2000 -d 1024:65536 >"$e.server" 2>&1 &
sp=$!
sleep 2 # an rdma_cm listener: no TCP port to wait for
ip netns exec $A timeout 60 "$F" exec -- "${ucm[@]}" io_demo -p 13400 -q -i 2000 -d 1024:65536 \
  -o read,write -t 30 $SERVER >"$e.client" 2>&1; rc=$?
kill $sp 2>/dev/null; wait $sp 2>/dev/null
# The client's reports each count the operations done since the last one.
ops=$(sed -n 's/.*\[DEMO\] total min:[0-9]* max:[0-9]* total:\([0-9]*\) .*/\1/p' "$e.client" | awk '{ s += $1 } END { print s + 0 }')
if [ $rc = 0 ] && grep -q "Client exit with status 'OK'" "$e.client" && [ "$ops" = 2000 ] &&
   grep -q "rdma_cm event event=5" "$e.client" && grep -q "rdma_cm event event=4" "$e.server"; then
  ok io_demo-rdmacm "UCP connected by rdma_cm, 2000 reads and writes over rc_verbs, data checked"
else ko io_demo-rdmacm "client exit $rc, $ops of 2000 operations" "$e.client" "$e.server"; fi

# The nodes were in the programs' own mount namespaces: none is left on the host.
left=$(ls /dev/infiniband 2>/dev/null | grep -c '^ferroce-')
if [ "$left" = 0 ]; then ok nothing-left "no ferroce node in the host's /dev/infiniband"
else ko nothing-left "$left ferroce nodes in the host's /dev/infiniband"; fi

echo "ucx: $pass passed, $fail failed"
[ $fail = 0 ]
