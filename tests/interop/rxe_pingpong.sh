#!/bin/bash
# Interop of ferroce with Linux rxe through rdma-core's unmodified ibv_*_pingpong, in both
# roles. Runs where rdma_rxe is available: inside the rxe VM (tests/interop/run.sh) or on a
# host whose kernel has it. Topology (rxe-vm's setup_peer_ns): ferroce in netns "peer" on
# vethP 10.77.0.1, rxe0 on vethR 10.77.0.2 in the initial namespace; veth MTU 9000 so both
# RoCE MTU 1024 and 4096 can be used (-m); over IPv4, and over IPv6 link-local GIDs.
#   rxe_pingpong.sh FERROCE_BINARY [quick]   (normally started by tests/system.sh)
# Prints one PASS/FAIL line per case and "interop: N passed, M failed"; exit 0 iff all pass.
. "$RXEVM_HOME/guest/lib.sh"
F=${1:?usage: rxe_pingpong.sh FERROCE_BINARY [quick]}
MODE=${2:-full}
OUT=${OUT:-/tmp/ferroce-interop}
mkdir -p "$OUT/logs" "$OUT/pcaps"
G=$(setup_peer_ns 9000) || { echo "setup_peer_ns failed"; exit 1; }
echo "rxe0 GID index $G; ferroce: $("$F" --version)"
pass=0 fail=0
# Environment for ferroce's side (run_case callers set it for one case).
FENV=
# GID indexes: ferroce's (1: vethP's IPv4 address) and rxe's (rxe0's for 10.77.0.2).
FG=1 RG=$G

# run_case NAME TYPE ROLE FLAGS...   ROLE: fs (ferroce server, rxe client) | rs (rxe server, ferroce client)
run_case() {
  local name=$1 t=$2 role=$3; shift 3
  local flags="$*" log="$OUT/logs/$name" ok=1
  if [ "$role" = fs ]; then
    ip netns exec peer env $FENV timeout 120 "$F" "$t-pingpong" -d vethP -g "$FG" $flags --stats --pcap "$OUT/pcaps/$name.pcap" >"$log.ferroce" 2>&1 &
    local sp=$!
    wait_port 18515 peer || ok=0
    timeout 120 "ibv_${t}_pingpong" -d rxe0 -g "$RG" $flags 10.77.0.1 >"$log.rxe" 2>&1 || ok=0
    wait $sp || ok=0
  else
    timeout 120 "ibv_${t}_pingpong" -d rxe0 -g "$RG" $flags >"$log.rxe" 2>&1 &
    local sp=$!
    wait_port 18515 || ok=0
    ip netns exec peer env $FENV timeout 120 "$F" "$t-pingpong" -d vethP -g "$FG" $flags --stats --pcap "$OUT/pcaps/$name.pcap" 10.77.0.2 >"$log.ferroce" 2>&1 || ok=0
    wait $sp || ok=0
  fi
  grep -q "iters in" "$log.rxe" && grep -q "iters in" "$log.ferroce" || ok=0
  # Every packet ferroce saw or sent must decode with a valid ICRC.
  if [ -s "$OUT/pcaps/$name.pcap" ]; then
    "$F" decode "$OUT/pcaps/$name.pcap" >"$log.decode" 2>&1 || ok=0
    grep -q "(0 with a bad ICRC), 0 corrupt" "$log.decode" || ok=0
  fi
  if [ $ok = 1 ]; then
    pass=$((pass + 1)); echo "PASS $name: $(grep 'usec/iter' "$log.ferroce")"
  else
    fail=$((fail + 1)); echo "FAIL $name"; sed 's/^/    rxe: /' "$log.rxe" | tail -5; sed 's/^/    ferroce: /' "$log.ferroce" | tail -5
  fi
}

iters=20
sizes="1 1024 4096 65536"
mtus="1024 4096"
[ "$MODE" = quick ] && { sizes="4096"; mtus="1024"; iters=5; }
for role in fs rs; do
  for mtu in $mtus; do
    for size in $sizes; do
      run_case "rc-$role-m$mtu-s$size" rc $role -n $iters -s $size -m $mtu -c
      run_case "uc-$role-m$mtu-s$size" uc $role -n $iters -s $size -m $mtu -c
    done
  done
  # UD: one message per MTU-sized datagram (the port MTU is 4096 here).
  for size in $sizes; do
    [ "$size" -le 4096 ] || continue
    run_case "ud-$role-s$size" ud $role -n $iters -s $size -c
  done
done

# Over IPv6 (both ends' link-local GIDs) at RoCE MTU 4096: SENDs of a full MTU, RC and
# UD, both ways (WRITEs over IPv6, whose packets are longer still, are in
# rxe_perftest.sh).
rg6=$(gid_ll_index rxe0)
fg6=$(ferroce_gid_ll_index "$F" peer vethP)
if [ -z "$rg6" ] || [ -z "$fg6" ]; then
  fail=$((fail + 1)); echo "FAIL ipv6-gids: rxe0 ${rg6:-none}, vethP ${fg6:-none}"
else
  for role in fs rs; do
    FG=$fg6 RG=$rg6 run_case "rc-ipv6-$role-m4096-s65536" rc $role -n $iters -s 65536 -m 4096 -c
    FG=$fg6 RG=$rg6 run_case "ud-ipv6-$role-s4096" ud $role -n $iters -s 4096 -c
  done
fi

# Super-packets through UDP sockets (FERROCE_GSO=udp: UDP_SEGMENT, the way that works on
# Linux 6.1, where packet sockets cannot send UDP GSO): the kernel builds their headers,
# rxe's UDP socket gets them cut up, and each segment's ICRC must hold for the
# identification and source port the kernel gave it (rxe drops a bad one: the ping-pong
# would stall).
udp_mtus="1024 4096"; [ "$MODE" = quick ] && udp_mtus=1024
for role in fs rs; do
  for mtu in $udp_mtus; do
    name=rc-udpgso-$role-m$mtu
    FENV=FERROCE_GSO=udp run_case "$name" rc $role -n $iters -s 65536 -m $mtu -c
    sent=$(grep -h '^counters:' "$OUT/logs/$name.ferroce" | tr ' ' '\n' | sed -n 's/^gso_tx_pkts=//p' | head -1)
    if grep -q 'gso=udp-socket' "$OUT/logs/$name.ferroce" && [ "${sent:-0}" -gt 0 ]; then
      pass=$((pass + 1)); echo "PASS $name-super-packets: $sent packets left in UDP super-packets"
    else
      fail=$((fail + 1)); echo "FAIL $name-super-packets: none sent (gso_tx_pkts=${sent:-0})"; grep -h '^link:' "$OUT/logs/$name.ferroce" | sed 's/^/    /'
    fi
  done
done

# FERROCE_GSO=linear: nothing joined, every frame in one linear skb, through a send-only
# packet socket with a virtio-net header (Linux 6.1's receiving socket has none). rxe
# must take each one (a bad frame stalls the ping-pong), and nothing may leave joined.
for role in fs rs; do
  name=rc-linear-$role-m4096
  FENV=FERROCE_GSO=linear run_case "$name" rc $role -n $iters -s 65536 -m 4096 -c
  lin=$(grep -h '^counters:' "$OUT/logs/$name.ferroce" | tr ' ' '\n' | sed -n 's/^linear_tx_pkts=//p' | head -1)
  sup=$(grep -h '^counters:' "$OUT/logs/$name.ferroce" | tr ' ' '\n' | sed -n 's/^gso_tx_pkts=//p' | head -1)
  if grep -q 'gso=off (FERROCE_GSO=linear: each frame in one linear skb)' "$OUT/logs/$name.ferroce" && [ "${lin:-0}" -gt 0 ] && [ "${sup:-0}" = 0 ]; then
    pass=$((pass + 1)); echo "PASS $name-linear: $lin packets each in one linear skb, none joined"
  else
    fail=$((fail + 1)); echo "FAIL $name-linear: linear_tx_pkts=${lin:-none} gso_tx_pkts=${sup:-none}"; grep -h '^link:' "$OUT/logs/$name.ferroce" | sed 's/^/    /'
  fi
done

# The same super-packets between two ferroces, on a veth of their own in two namespaces:
# the veth hands each one over whole, and a packet socket before Linux 6.2 gives no
# virtio-net header to say so, so the receiver must find the segment size itself
# (ferroce_wire::gso::infer_segment_size). Both ends send and receive 64 KiB messages;
# -c checks every byte, and each end must have split super-frames and found none malformed.
ip link add vgA type veth peer name vgB
for i in 1 2; do
  ip netns add g$i; ip -n g$i link set lo up
done
ip link set vgA netns g1; ip link set vgB netns g2
ip -n g1 addr add 10.78.0.1/24 dev vgA; ip -n g2 addr add 10.78.0.2/24 dev vgB
ip -n g1 link set vgA mtu 9000 up; ip -n g2 link set vgB mtu 9000 up
for mtu in $udp_mtus; do
  name=rc-udpgso-ferroce-m$mtu log="$OUT/logs/rc-udpgso-ferroce-m$mtu"
  ip netns exec g2 env FERROCE_GSO=udp timeout 120 "$F" rc-pingpong -d vgB -n $iters -s 65536 -m $mtu -c --stats >"$log.server" 2>&1 &
  sp=$!
  wait_port 18515 g2
  ip netns exec g1 env FERROCE_GSO=udp timeout 120 "$F" rc-pingpong -d vgA -n $iters -s 65536 -m $mtu -c --stats 10.78.0.2 >"$log.client" 2>&1
  wait $sp
  ok=1 got=""
  for end in server client; do
    c=$(grep -h '^counters:' "$log.$end" | tr ' ' '\n')
    rx=$(echo "$c" | sed -n 's/^gso_rx_pkts=//p' | head -1)
    bad=$(echo "$c" | sed -n 's/^gso_rx_malformed=//p' | head -1)
    grep -q "iters in" "$log.$end" && [ "${rx:-0}" -gt 0 ] && [ "${bad:-0}" = 0 ] || ok=0
    got="$got $end: gso_rx_pkts=${rx:-0} gso_rx_malformed=${bad:-0};"
  done
  if [ $ok = 1 ]; then
    pass=$((pass + 1)); echo "PASS $name: super-packets split on receipt,$got"
  else
    fail=$((fail + 1)); echo "FAIL $name:$got"; tail -5 "$log.server" "$log.client" | sed 's/^/    /'
  fi
done
ip netns del g1; ip netns del g2

# RC under 1% loss in both directions. Towards rxe: drop at vethR's ingress (rxe reads from
# the UDP stack, after tc). Towards ferroce: its raw socket sees frames before tc ingress,
# so the loss is netem on vethR's egress, which reports success to rxe (a true wire loss).
# Only data packets (IP length bit 10 set: the 1068-byte packets of -m 1024) are dropped,
# never ACKs: ibv_rc_pingpong exits as soon as its own work is done, so a lost final ACK
# would leave its peer retransmitting to a QP that no longer exists, whatever the RC stack
# (rxe to rxe hangs the same way). ACK loss is covered by tests/netns and the transport sim.
DATA='match ip protocol 17 0xff match ip dport 4791 0xffff match u16 0x0400 0x0400 at 2'
tc qdisc add dev vethR ingress
tc filter add dev vethR ingress protocol ip u32 $DATA action gact ok random netrand drop 100
tc qdisc add dev vethR root handle 1: prio
tc qdisc add dev vethR parent 1:3 handle 30: netem loss 1%
tc filter add dev vethR parent 1: protocol ip prio 1 u32 $DATA flowid 1:3
before=$(rdma statistic show link rxe0/1)
loss_iters=200; [ "$MODE" = quick ] && loss_iters=50
for role in fs rs; do
  run_case "rc-loss-$role" rc $role -n $loss_iters -s 4096 -m 1024 -c
done
echo "tc ingress (to rxe): $(tc -s filter show dev vethR ingress | grep -oE 'Sent [0-9]+ bytes [0-9]+ pkt.*dropped [0-9]+' | head -1)"
echo "tc netem (to ferroce): $(tc -s qdisc show dev vethR | grep -A1 netem | grep -oE 'dropped [0-9]+' | head -1)"
echo "rxe0 before: $before"
echo "rxe0 after:  $(rdma statistic show link rxe0/1)"
grep -h '^counters:' "$OUT"/logs/rc-loss-*.ferroce
# The loss must have been real: ferroce and rxe both recovered lost packets.
if grep -h '^counters:' "$OUT"/logs/rc-loss-*.ferroce | grep -qE 'duplicate_request=|out_of_seq_request=|rcvd_seq_err=|completer_retry_err='; then
  pass=$((pass + 1)); echo "PASS loss-recovery-seen-by-ferroce"
else
  fail=$((fail + 1)); echo "FAIL loss-recovery-seen-by-ferroce: no retransmission counted"
fi
tc qdisc del dev vethR root; tc qdisc del dev vethR ingress

echo "interop: $pass passed, $fail failed"
[ $fail = 0 ]
