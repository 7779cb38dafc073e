#!/bin/bash
# The UDP GSO data path natively (issue: super-packets), between two namespaces on a veth
# pair, as `scripts/bench.sh` measures it:
#   1. At veth MTU 1500 and 9000 (RoCE path MTU 1024 and 4096), `ferroce rc-ops -s 65536`
#      (every RC operation, data checked byte for byte): both ends say `gso=on` and that
#      they send RC WRITEs as WRITE ONLY packets, and each end's --stats show super-frames
#      sent (WRITE/SEND data one way, READ responses the other) and received and split by
#      the peer, none malformed.
#      The same with FERROCE_GSO=udp at both ends (super-packets through UDP sockets with
#      UDP_SEGMENT, the kernel building their headers): both say `gso=udp-socket`, the
#      same counters, no ICRC error, and the client's single packets left through its
#      UDP sockets too (its namespace's Udp OutDatagrams count them).
#   2. At MTU 9000 with each super-frame layout fixed at both ends (FERROCE_GSO_LAYOUT=
#      linear: the whole frame in the kernel's linear head; frags: headers only, payload
#      in pages): data checked, every super-frame counted as linear (gso_tx_linear ==
#      gso_tx_frames > 0) or none, none malformed, no ICRC error.
#   3. FERROCE_VNET_HDR=0 and FERROCE_GSO=udp at both ends (the receive path of kernels
#      before 6.2): super-frames split by their length both ways, no ICRC error, and the
#      UDP 4791 guard in the server's namespace took them whole (its drops, Udp InErrors,
#      under half the packets split: a guard the kernel cuts them up for drops each);
#      with GRO turned on at the server's veth, the guard there drops every packet (it
#      may not ask for them whole where a NIC's GRO could join short ones).
#   4. The same with FERROCE_GSO=0 at the client: it says why GSO is off, splits no
#      WRITE, sends no super-frame, the server receives none (the counters are the path's,
#      not constants); the server still sends them and the client still splits them.
#      And FERROCE_GSO=linear at the client: no super-frame, every frame it sends in one
#      linear skb (linear_tx_pkts), with and without a virtio-net header on its receiving
#      socket (FERROCE_VNET_HDR=0: a send-only socket sends them, as before 6.2).
#   5. `ferroce devinfo -v` names the mode, gso=on, and gso=off with its reason.
#   6. A peer that loses every super-frame whole (FERROCE_PACKET_RINGS=none), as server
#      and as client, and through both ways of sending them: rc-ops completes, the
#      joining end paused joining toward it (gso_peer_pauses >= 1); the ringless end
#      dropped and counted what came cut short (rx_socket_drops >= 1).
#   7. Payloads folded into the ICRC as they are copied into the frame (`copy fold` on
#      the --stats `icrc:` line): where an end says it folds, its tx_icrc_folded counter
#      rose (WRITE/SEND data from the client, READ responses from the server) and the peer
#      counted no ICRC error; where it says it cannot (a CPU without VPCLMULQDQ), the
#      counter stayed 0; FERROCE_COPY_FOLD=0 at the client turns its folding off (said,
#      counter 0) while the server goes on; and FERROCE_COPY_FOLD=avx2-vpclmulqdq, where
#      the CPU runs it, folds with that kernel (on AVX-512, the narrower one).
#   tests/netns/gso.sh [FERROCE_BINARY]      (needs root: namespaces, veth; Linux >= 6.2)
# Prints PASS/FAIL lines and "gso: N passed, M failed"; exit 0 iff all pass.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
F=${1:-${CARGO_TARGET_DIR:-$root/target}/release/ferroce}
[ -x "$F" ] || (cd "$root" && cargo build --release --quiet -p ferroce-cli --bin ferroce)
# Packet sockets take UDP GSO from Linux 6.2 on; before, ferroce sends frames one by one.
IFS=. read -r kmaj kmin _ < /proc/sys/kernel/osrelease
if [ "$kmaj" -lt 6 ] || { [ "$kmaj" = 6 ] && [ "${kmin%%[!0-9]*}" -lt 2 ]; }; then
  echo "gso: not run: kernel $(uname -r) is older than 6.2"; exit 0
fi
A=gso-a B=gso-b
out=${OUT:-$root/target}/gso; rm -rf "$out"; mkdir -p "$out"
cleanup() { ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; true; }
trap cleanup EXIT
cleanup
ip netns add $A && ip netns add $B || { echo "cannot create network namespaces (need root)"; exit 1; }
ip link add gso-va netns $A type veth peer name gso-vb netns $B
ip -n $A addr add 10.93.0.1/24 dev gso-va; ip -n $B addr add 10.93.0.2/24 dev gso-vb
for ns in $A $B; do ip -n $ns link set lo up; done
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS $1"; }
ko() { fail=$((fail + 1)); echo "FAIL $1"; shift; for f in "$@"; do tail -n 6 "$f" | sed "s/^/    ${f##*/}: /"; done; }
# counter FILE NAME: the value of NAME on FILE's "counters:" line (0 when absent).
counter() { grep -h '^counters:' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1 | grep . || echo 0; }

# Udp OutDatagrams / InErrors of a namespace (/proc/net/snmp).
udp_out() { ip netns exec "$1" awk '$1 == "Udp:" && $2 ~ /^[0-9]+$/ { print $5 }' /proc/net/snmp; }
wait_port() { for _ in $(seq 1 100); do ip netns exec "$1" ss -ltn | grep -q ":$2\b" && return 0; sleep 0.05; done; return 1; }

# run NAME PATH_MTU CLIENT_ENV: rc-ops 64 KiB between the namespaces; PASS if the data
# checked.
run() {
  local name=$1 m=$2; shift 2
  ip netns exec $B env ${SENV:-FERROCE_GSO=1} timeout 120 "$F" rc-ops -d gso-vb -m "$m" -s 65536 -n 20 --stats >"$out/$name.server" 2>&1 &
  local sp=$!
  wait_port $B 18516
  if ip netns exec $A env "$@" timeout 120 "$F" rc-ops -d gso-va -m "$m" -s 65536 -n 20 --stats 10.93.0.2 >"$out/$name.client" 2>&1 && wait $sp; then
    ok "$name: $(grep -h 'verified in' "$out/$name.client" | head -1)"
  else
    wait $sp 2>/dev/null; ko "$name: rc-ops failed" "$out/$name.client" "$out/$name.server"
  fi
}

# fold_check NAME FILE: FILE's end folded payloads into ICRCs exactly as its `icrc:` line
# says (counter above 0 when on, 0 when off), and sent no packet its peer refused.
fold_check() {
  local n=$1 f=$2 line folded
  line=$(grep -h '^icrc:' "$f" | head -1) folded=$(counter "$f" tx_icrc_folded)
  echo "    ${f##*/}: $line; tx_icrc_folded=$folded"
  case "$line" in
    *"copy fold on ("*) if [ "$folded" -gt 0 ]; then ok "$n: ${f##*/} folded $folded payloads into their ICRCs while copying"; else ko "$n: ${f##*/} says it folds, folded none" "$f"; fi ;;
    *"copy fold off ("*) if [ "$folded" = 0 ]; then ok "$n: ${f##*/} folds nothing, as it says (${line##*copy fold })"; else ko "$n: ${f##*/} says off, folded $folded" "$f"; fi ;;
    *) ko "$n: ${f##*/} printed no copy fold state" "$f" ;;
  esac
}

for mtu in 1500 9000; do
  ip -n $A link set gso-va mtu $mtu up; ip -n $B link set gso-vb mtu $mtu up
  n=mtu$mtu
  # The largest RoCE path MTU the veth carries.
  run "$n" "$([ $mtu = 1500 ] && echo 1024 || echo 4096)" FERROCE_GSO=1
  c=$out/$n.client s=$out/$n.server
  if grep -q '^link: .* gso=on$' "$c" && grep -q '^link: .* gso=on$' "$s" &&
    grep -qE '^gso layout: (linear|fragments) \((measured|not measured yet)' "$c" &&
    grep -q '^guard: takes super-frames whole (virtio-net headers' "$s"; then
    ok "$n: both ends gso=on, the layout measured, the guard taking super-frames whole"
  else ko "$n: gso not on" "$c" "$s"; fi
  # Joining links send RC WRITEs as WRITE ONLY packets, equal in length across messages.
  if grep -q '^writes: split' "$c" && grep -q '^writes: split' "$s"; then ok "$n: both ends split WRITEs"; else ko "$n: WRITEs not split" "$c" "$s"; fi
  ctx=$(counter "$c" gso_tx_pkts) srx=$(counter "$s" gso_rx_pkts) stx=$(counter "$s" gso_tx_pkts) crx=$(counter "$c" gso_rx_pkts)
  bad=$(( $(counter "$c" gso_rx_malformed) + $(counter "$s" gso_rx_malformed) + $(counter "$c" rx_icrc_err) + $(counter "$s" rx_icrc_err) ))
  echo "    client sent $ctx packets in $(counter "$c" gso_tx_frames) super-frames; server split $srx from $(counter "$s" gso_rx_frames)"
  echo "    server sent $stx packets in $(counter "$s" gso_tx_frames) super-frames; client split $crx from $(counter "$c" gso_rx_frames)"
  if [ "$ctx" -gt 0 ] && [ "$srx" -gt 0 ] && [ "$stx" -gt 0 ] && [ "$crx" -gt 0 ] && [ "$bad" = 0 ]; then
    ok "$n: super-frames both ways, split by the peer, none malformed, no ICRC error"
  else
    ko "$n: super-frame counters (bad=$bad)" "$c" "$s"
  fi
  fold_check "$n" "$c"; fold_check "$n" "$s"
  # The UDP-socket way at both ends: the kernel builds the headers, so every segment's
  # ICRC must have been computed for its identification and the socket's source port.
  n=udp$mtu
  o0=$(udp_out $A)
  SENV=FERROCE_GSO=udp run "$n" "$([ $mtu = 1500 ] && echo 1024 || echo 4096)" FERROCE_GSO=udp
  o1=$(udp_out $A)
  c=$out/$n.client s=$out/$n.server
  ctx=$(counter "$c" gso_tx_pkts) srx=$(counter "$s" gso_rx_pkts) stx=$(counter "$s" gso_tx_pkts) crx=$(counter "$c" gso_rx_pkts)
  bad=$(( $(counter "$c" gso_rx_malformed) + $(counter "$s" gso_rx_malformed) + $(counter "$c" rx_icrc_err) + $(counter "$s" rx_icrc_err) ))
  echo "    client sent $ctx packets in $(counter "$c" gso_tx_frames) UDP super-packets; server split $srx from $(counter "$s" gso_rx_frames)"
  echo "    server sent $stx packets in $(counter "$s" gso_tx_frames) UDP super-packets; client split $crx from $(counter "$c" gso_rx_frames)"
  if grep -q '^link: .* gso=udp-socket (FERROCE_GSO=udp)$' "$c" && grep -q '^link: .* gso=udp-socket (FERROCE_GSO=udp)$' "$s" &&
    [ "$ctx" -gt 0 ] && [ "$srx" -gt 0 ] && [ "$stx" -gt 0 ] && [ "$crx" -gt 0 ] && [ "$bad" = 0 ]; then
    ok "$n: FERROCE_GSO=udp: super-packets through UDP sockets both ways, split by the peer, no ICRC error"
  else
    ko "$n: FERROCE_GSO=udp (bad=$bad)" "$c" "$s"
  fi
  # Every frame through the UDP sockets, single packets too (one 5-tuple per QP): the
  # client namespace's Udp OutDatagrams grew by at least its single packets plus its
  # super-packets (only the packet socket's frames would not count).
  singles=$(( $(counter "$c" sent_pkts) - ctx )) supers=$(counter "$c" gso_tx_frames)
  echo "    client: $singles single packets, $supers super-packets; Udp OutDatagrams +$((o1 - o0))"
  if [ "$singles" -gt 0 ] && [ $((o1 - o0)) -ge $((singles + supers)) ]; then
    ok "$n: single packets through the UDP sockets too ($singles singles + $supers super-packets, $((o1 - o0)) UDP datagrams)"
  else
    ko "$n: single packets not through the UDP sockets ($singles singles + $supers super-packets, $((o1 - o0)) UDP datagrams)" "$c"
  fi
done

# The mtu loop leaves the veth at MTU 9000.
for lay in linear frags; do
  n=layout-$lay
  SENV="FERROCE_GSO=1 FERROCE_GSO_LAYOUT=$lay" run "$n" 4096 FERROCE_GSO=1 FERROCE_GSO_LAYOUT=$lay
  c=$out/$n.client s=$out/$n.server
  cf=$(counter "$c" gso_tx_frames) cl=$(counter "$c" gso_tx_linear) sf=$(counter "$s" gso_tx_frames) sl=$(counter "$s" gso_tx_linear)
  bad=$(( $(counter "$c" gso_rx_malformed) + $(counter "$s" gso_rx_malformed) + $(counter "$c" rx_icrc_err) + $(counter "$s" rx_icrc_err) ))
  echo "    client sent $cf super-frames, $cl linear; server sent $sf, $sl linear"
  if [ $lay = linear ]; then want_c=$cf want_s=$sf; else want_c=0 want_s=0; fi
  [ $lay = linear ] && said=linear || said=fragments
  if [ "$cf" -gt 0 ] && [ "$sf" -gt 0 ] && [ "$cl" = "$want_c" ] && [ "$sl" = "$want_s" ] && [ "$bad" = 0 ] &&
    grep -q "^gso layout: $said (FERROCE_GSO_LAYOUT)$" "$c" && grep -q "^gso layout: $said (FERROCE_GSO_LAYOUT)$" "$s" &&
    [ "$(counter "$s" gso_rx_pkts)" -gt 0 ] && [ "$(counter "$c" gso_rx_pkts)" -gt 0 ]; then
    ok "$n: FERROCE_GSO_LAYOUT=$lay: super-frames both ways in that layout, split by the peer, no ICRC error"
  else
    ko "$n: FERROCE_GSO_LAYOUT=$lay (bad=$bad)" "$c" "$s"
  fi
done

# The receive path of kernels before 6.2 (no virtio-net header: super-frames split by
# their length), with the UDP-socket way at both ends. The veth joins nothing itself (GRO
# off, its default), so each end's UDP 4791 guard takes a super-frame whole and drops it
# as one datagram, instead of having the kernel cut it up for it: the guard's drops (the
# namespace's Udp InErrors) stay well below the packets the server split.
udp_in_errors() { ip netns exec "$1" awk '$1 == "Udp:" && $2 ~ /^[0-9]+$/ { print $4 }' /proc/net/snmp; }
n=udp-novnet
e0=$(udp_in_errors $B)
SENV="FERROCE_GSO=udp FERROCE_VNET_HDR=0" run "$n" 4096 FERROCE_GSO=udp FERROCE_VNET_HDR=0
e1=$(udp_in_errors $B)
c=$out/$n.client s=$out/$n.server
srx=$(counter "$s" gso_rx_pkts) crx=$(counter "$c" gso_rx_pkts)
bad=$(( $(counter "$c" gso_rx_malformed) + $(counter "$s" gso_rx_malformed) + $(counter "$c" rx_icrc_err) + $(counter "$s" rx_icrc_err) ))
echo "    server split $srx packets from $(counter "$s" gso_rx_frames) super-frames; its guard dropped $((e1 - e0)) datagrams"
if [ "$srx" -gt 0 ] && [ "$crx" -gt 0 ] && [ "$bad" = 0 ] && [ $((2 * (e1 - e0))) -lt "$srx" ] &&
  grep -q '^guard: takes super-frames whole (GRO is off' "$s"; then
  ok "$n: FERROCE_VNET_HDR=0: super-frames split by length both ways; the guard took them whole ($((e1 - e0)) drops for $srx packets)"
else
  ko "$n: FERROCE_VNET_HDR=0 (bad=$bad, guard drops $((e1 - e0)) for $srx packets)" "$c" "$s"
fi

# With GRO on at the server's end (set through SIOCETHTOOL: ETHTOOL_SGRO), a guard there
# may not ask for super-frames whole (a NIC's GRO would then join short RoCE packets), so
# the kernel cuts them up for it: a drop per packet.
gro() {  # NETNS IFNAME on|off
  ip netns exec "$1" python3 -c 'import ctypes, fcntl, socket, struct, sys
v = ctypes.create_string_buffer(struct.pack("II", 0x2c, sys.argv[2] == "on"), 8)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
fcntl.ioctl(s.fileno(), 0x8946, struct.pack("16sP", sys.argv[1].encode(), ctypes.addressof(v)))' "$2" "$3"
}
n=udp-novnet-gro
if gro $B gso-vb on; then
  e0=$(udp_in_errors $B)
  SENV="FERROCE_GSO=udp FERROCE_VNET_HDR=0" run "$n" 4096 FERROCE_GSO=udp FERROCE_VNET_HDR=0
  e1=$(udp_in_errors $B)
  gro $B gso-vb off
  s=$out/$n.server srx=$(counter "$out/$n.server" gso_rx_pkts)
  echo "    server split $srx packets; its guard dropped $((e1 - e0)) datagrams"
  if [ "$srx" -gt 0 ] && [ $((e1 - e0)) -ge "$srx" ] && grep -q '^guard: has the kernel cut super-frames' "$s"; then
    ok "$n: with GRO on at the server's veth its guard had super-frames cut ($((e1 - e0)) drops for $srx packets)"
  else
    ko "$n: GRO on (guard drops $((e1 - e0)) for $srx packets)" "$out/$n.client" "$s"
  fi
else
  ko "$n: cannot turn GRO on at gso-vb"
fi

run gso-off-client 4096 FERROCE_GSO=0
c=$out/gso-off-client.client s=$out/gso-off-client.server
if grep -q '^link: .* gso=off (FERROCE_GSO=0)$' "$c" && ! grep -q '^writes: split' "$c" && [ "$(counter "$c" gso_tx_frames)" = 0 ] &&
  [ "$(counter "$s" gso_rx_frames)" = 0 ] && [ "$(counter "$c" gso_rx_frames)" -gt 0 ]; then
  ok "FERROCE_GSO=0: the client says so and sends no super-frame; it still splits the server's"
else
  ko "FERROCE_GSO=0 at the client" "$c" "$s"
fi
# FERROCE_GSO=linear at the client: nothing joined, every frame it sends in one linear skb
# (through its receiving socket, which has a virtio-net header here, and with
# FERROCE_VNET_HDR=0, as before 6.2, or without the receive ring, through a send-only
# socket that has one): data checked, the client says so, counts its frames in
# linear_tx_pkts, sends no super-frame and splits no WRITE; the server receives none
# joined and counts no ICRC error.
for v in 1 0 ringless; do
  n=linear-vnet$v
  if [ $v = ringless ]; then
    n=linear-ringless how=FERROCE_PACKET_RINGS=none
  else
    how=FERROCE_VNET_HDR=$v
  fi
  run "$n" 4096 FERROCE_GSO=linear $how
  c=$out/$n.client s=$out/$n.server
  lin=$(counter "$c" linear_tx_pkts) sent=$(counter "$c" sent_pkts)
  echo "    client sent $lin of $sent packets one per linear skb, $(counter "$c" gso_tx_frames) super-frames; server split $(counter "$s" gso_rx_frames)"
  if grep -q '^link: .* gso=off (FERROCE_GSO=linear: each frame in one linear skb)$' "$c" && ! grep -q '^writes: split' "$c" &&
    [ "$lin" -gt 0 ] && [ "$lin" -le "$sent" ] && [ "$(counter "$c" gso_tx_frames)" = 0 ] && [ "$(counter "$s" gso_rx_frames)" = 0 ] &&
    [ "$(counter "$s" rx_icrc_err)" = 0 ] && [ "$(counter "$s" linear_tx_pkts)" = 0 ]; then
    ok "$n: FERROCE_GSO=linear ($how): $lin frames each in one linear skb, none joined"
  else
    ko "$n: FERROCE_GSO=linear ($how)" "$c" "$s"
  fi
done
# Folding turned off at the client only: it says so and folds nothing; the server's READ
# responses are folded as before (where its CPU can), and no end counts an ICRC error.
run fold-off-client 4096 FERROCE_COPY_FOLD=0
c=$out/fold-off-client.client s=$out/fold-off-client.server
if grep -q '^icrc: .*copy fold off (FERROCE_COPY_FOLD=0)$' "$c" && [ "$(counter "$c" tx_icrc_folded)" = 0 ] &&
  [ "$(( $(counter "$c" rx_icrc_err) + $(counter "$s" rx_icrc_err) ))" = 0 ]; then
  ok "FERROCE_COPY_FOLD=0: the client says so and folds nothing"
else
  ko "FERROCE_COPY_FOLD=0 at the client" "$c" "$s"
fi
fold_check fold-off-client "$s"
# The 256-bit kernel named at the client (FERROCE_COPY_FOLD=NAME; the widest is the
# default), where this CPU runs it: it says so, folds with it, and the server checks every
# ICRC it made.
k=avx2-vpclmulqdq miss=""
for f in pclmulqdq sse4_1 avx2 vpclmulqdq; do grep -qw "$f" /proc/cpuinfo || miss="$miss $f"; done
if [ -n "$miss" ]; then
  echo "SKIP fold-$k: this CPU lacks$miss"
else
  run "fold-$k" 4096 FERROCE_COPY_FOLD=$k FERROCE_ICRC=simd
  c=$out/fold-$k.client s=$out/fold-$k.server
  folded=$(counter "$c" tx_icrc_folded)
  if grep -q "^icrc: simd .*copy fold on ($k, FERROCE_COPY_FOLD=$k)\$" "$c" && [ "$folded" -gt 0 ] &&
    [ "$(( $(counter "$c" rx_icrc_err) + $(counter "$s" rx_icrc_err) ))" = 0 ]; then
    ok "FERROCE_COPY_FOLD=$k: the client folded $folded payloads with it, no ICRC error"
  else
    ko "FERROCE_COPY_FOLD=$k at the client" "$c" "$s"
  fi
fi
# `ferroce devinfo -v` says the same as --stats: the mode in use, and why when off.
dv=$out/devinfo.on dvoff=$out/devinfo.off
ip netns exec $A "$F" devinfo -v -d gso-va >"$dv" 2>&1
ip netns exec $A env FERROCE_GSO=0 "$F" devinfo -v -d gso-va >"$dvoff" 2>&1
if grep -qE '^[[:space:]]+ferroce_link:[[:space:]]+rx=ring .* gso=on$' "$dv" &&
  grep -qE '^[[:space:]]+ferroce_link:[[:space:]]+.* gso=off \(FERROCE_GSO=0\)$' "$dvoff" &&
  grep -qE '^[[:space:]]+ferroce_icrc:[[:space:]]+(simd|table) \(' "$dv"; then
  ok "devinfo -v: gso=on, and gso=off (FERROCE_GSO=0) with it set; the ICRC engine"
else
  ko "devinfo -v does not say the link's modes" "$dv" "$dvoff"
fi

# A peer that cannot split super-frames loses each one whole: FERROCE_PACKET_RINGS=none
# reads frames of at most an MTU (and joins nothing itself). The joining end hears only
# silence (ACK timeouts, a READ asked for again) and must send to that peer packet by
# packet for a while (gso_peer_pauses), so every operation still completes; before, each
# resend was joined and lost again until retry-exceeded. Both ways of sending
# super-packets, the ringless peer as server (WRITE/SEND data lost) and as client (READ
# responses lost).
ringless() {  # NAME WHO(server|client) JOINER_ENV
  local n=$1 who=$2 joiner=$3 j p
  if [ "$who" = server ]; then
    SENV="FERROCE_GSO=1 FERROCE_PACKET_RINGS=none" run "$n" 4096 $joiner; j=$out/$n.client p=$out/$n.server
  else
    SENV="$joiner" run "$n" 4096 FERROCE_GSO=1 FERROCE_PACKET_RINGS=none; j=$out/$n.server p=$out/$n.client
  fi
  local pauses frames lost
  pauses=$(counter "$j" gso_peer_pauses) frames=$(counter "$j" gso_tx_frames)
  # Each super-frame that reached the ringless end is dropped there and counted, not
  # handed on cut short (where it failed to parse as a malformed packet).
  lost=$(counter "$p" rx_socket_drops)
  echo "    the joining end sent $frames super-frames and paused joining $pauses times; the ringless end counted $lost cut short"
  if grep -q 'verified in' "$out/$n.client" && [ "$pauses" -ge 1 ] && [ "$frames" -gt 0 ] &&
    [ "$(counter "$p" gso_rx_frames)" = 0 ] && [ "$lost" -ge 1 ]; then
    ok "$n: a ringless $who lost every super-frame, counted them ($lost), got single packets after each silence ($pauses pauses)"
  else
    ko "$n: ringless $who ($pauses pauses, $frames super-frames)" "$out/$n.client" "$out/$n.server"
  fi
}
ringless ringless-server server FERROCE_GSO=1
ringless ringless-client client FERROCE_GSO=1
ringless ringless-server-udp server FERROCE_GSO=udp
echo "gso: $pass passed, $fail failed"
[ $fail = 0 ]
