#!/bin/bash
# ferroce -> rxe against rxe -> rxe in alternating runs inside the rxe VM: settings of one
# ferroce build (environment variables) against the kernel's own RoCE in the same minutes,
# where the VM's figures swing by up to 2x from one run to the next.
#
#   sudo scripts/bench/rxe_ab.sh [-p] [-n ROUNDS] [-m MTU] [-s SIZE] [-D SECONDS] BINARY [ENV...]
#
# Each ENV is one setting of ferroce's side, as `NAME=VALUE[,NAME=VALUE...]` ("-" for
# none), where `BIN=PATH` runs another ferroce build instead of BINARY (to compare builds);
# with no ENV, ferroce runs as it is. Defaults: 4 rounds, veth MTU 9000, 64 KiB
# WRITEs, 4 s. Each round runs `ib_write_bw` rxe -> rxe on one veth pair (vethA/vethB,
# rxe on both, the setup of tests/interop/rxe-vm's setup_veth_loop), then `ferroce perf
# write-bw` once per setting from a network namespace on a second veth pair (vethC,
# 10.78.0.1) to `ib_write_bw` on rxe at its other end (vethD, 10.78.0.2), and prints each
# rate and the `udp way:` / `link:` line of ferroce's --stats; then each one's runs, median,
# and median over rxe -> rxe's. With -p, every client (the sender) runs on the VM's CPU 0
# and every server on CPU 1 (taskset), so that runs do not differ in where the scheduler
# put them. Needs root and qemu (tests/interop/rxe-vm/run.sh, which
# builds the VM's kernel and initramfs on first use).
set -euo pipefail
if [ -n "${RXEVM_HOME:-}" ]; then
  # In the guest: ROOT BINARY MTU SIZE SECONDS ROUNDS ENV... A failed run is reported
  # as such and the rounds go on.
  set +eu
  . "$RXEVM_HOME/guest/lib.sh"
  ROOT=$1 F=$2 MTU=$3 SIZE=$4 DUR=$5 ROUNDS=$6 PIN=$7; shift 7
  cl=() sv=()
  [ "$PIN" = 1 ] && { cl=(taskset -c 0); sv=(taskset -c 1); }
  . "$ROOT/scripts/bench/lib.sh"   # median
  setup_veth_loop "$MTU" >/dev/null || { echo "setup_veth_loop failed"; exit 1; }
  ip netns add fc
  ip link add vethC type veth peer name vethD
  ip link set vethC netns fc
  ip -n fc link set lo up
  ip -n fc link set vethC mtu "$MTU" address 02:00:0a:4e:00:01 up
  ip -n fc addr add 10.78.0.1/24 dev vethC
  ip link set vethD mtu "$MTU" address 02:00:0a:4e:00:02 up
  ip addr add 10.78.0.2/24 dev vethD
  # setup_veth_loop moved the local table behind its own rules: frames from vethD are for
  # this host, the rest of 10.78.0.0/24 is through vethD.
  ip rule add pref 7 iif vethD table local
  ip rule add pref 12 to 10.78.0.0/24 table main
  rdma link add rxeD type rxe netdev vethD
  wait_gid rxeD 10.78.0.2 || { echo "rxeD has no GID for 10.78.0.2"; exit 1; }
  GD=$(gid_index rxeD 10.78.0.2)
  echo "guest: $(nproc) vCPUs, $(uname -r); $("$F" --version); veth MTU $MTU, $SIZE-byte WRITEs, $DUR s$([ "$PIN" = 1 ] && echo ', clients on CPU 0, servers on CPU 1')"
  flags="-s $SIZE -D $DUR -F --report_gbits"
  rate() { awk '/^ #bytes/ { t = 1; next } t && /^ [0-9]/ { print $4; exit }' "$1"; }
  res=/tmp/rxe_ab.results; : >"$res"
  for r in $(seq 1 "$ROUNDS"); do
    "${sv[@]}" ib_write_bw -d rxeB -x "$GB" $flags >/tmp/rr.server 2>&1 &
    wait_port 18515 2>/dev/null
    "${cl[@]}" ib_write_bw -d rxeA -x "$GA" $flags 10.77.0.2 >/tmp/rr.client 2>&1 || true
    wait || true
    v=$(rate /tmp/rr.client); echo "round $r  rxe->rxe  ${v:-FAILED} Gb/s"
    echo "rxe->rxe ${v:-}" >>"$res"
    for e in "$@"; do
      "${sv[@]}" ib_write_bw -d rxeD -x "$GD" $flags >/tmp/fr.server 2>&1 &
      wait_port 18515 2>/dev/null
      envs=(); [ "$e" = - ] || IFS=, read -r -a envs <<<"$e"
      bin=$F vars=()
      for v in "${envs[@]}"; do
        case "$v" in BIN=*) bin=${v#BIN=} ;; *) vars+=("$v") ;; esac
      done
      "${cl[@]}" env "${vars[@]}" ip netns exec fc "$bin" perf write-bw -d vethC $flags --stats 10.78.0.2 >/tmp/fr.client 2>&1 || true
      wait || true
      v=$(rate /tmp/fr.client)
      echo "round $r  ferroce->rxe [$e]  ${v:-FAILED} Gb/s  | $(grep -hE '^udp way:|^link:' /tmp/fr.client | tr '\n' ' ')"
      echo "[$e] ${v:-}" >>"$res"
    done
  done
  base=$(awk '$1 == "rxe->rxe" && NF == 2 { print $2 }' "$res" | median)
  for label in "rxe->rxe" $(printf '[%s] ' "$@"); do
    runs=$(awk -v l="$label" '$1 == l && NF == 2 { print $2 }' "$res" | tr '\n' ' ')
    med=$(awk -v l="$label" '$1 == l && NF == 2 { print $2 }' "$res" | median)
    ratio=$(awk -v m="${med:-0}" -v b="${base:-0}" 'BEGIN { if (b > 0 && m > 0) printf "%.2fx", m / b; else print "-" }')
    echo "SUMMARY $label  runs: ${runs:-none}  median ${med:-none} Gb/s  ${ratio} of rxe->rxe"
  done
  exit 0
fi

root=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=4 MTU=9000 SIZE=65536 DUR=4 PIN=0
usage="usage: scripts/bench/rxe_ab.sh [-p] [-n ROUNDS] [-m MTU] [-s SIZE] [-D SECONDS] BINARY [ENV...]"
while getopts pn:m:s:D: o; do
  case $o in
    p) PIN=1 ;;
    n) ROUNDS=$OPTARG ;; m) MTU=$OPTARG ;; s) SIZE=$OPTARG ;; D) DUR=$OPTARG ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
F=$(realpath "$1"); shift
[ -x "$F" ] || { echo "scripts/bench/rxe_ab.sh: $F is not an executable ferroce binary" >&2; exit 2; }
for e in "$@"; do
  IFS=, read -r -a vars <<<"$e"
  for v in "${vars[@]}"; do
    case "$v" in BIN=/*) [ -x "${v#BIN=}" ] || { echo "scripts/bench/rxe_ab.sh: ${v#BIN=} is not an executable ferroce binary" >&2; exit 2; } ;;
      BIN=*) echo "scripts/bench/rxe_ab.sh: give BIN= an absolute path: '$v'" >&2; exit 2 ;; esac
  done
done
[ "$(id -u)" = 0 ] || { echo "scripts/bench/rxe_ab.sh needs root (the VM's network); run it with sudo" >&2; exit 2; }
for e in "$@"; do
  case "$e" in *' '*) echo "scripts/bench/rxe_ab.sh: separate a setting's variables with ',' not spaces: '$e'" >&2; exit 2 ;; esac
done
[ $# -ge 1 ] || set -- -
out=$(mktemp -d /tmp/rxe_ab.XXXXXX)
trap 'rm -rf "$out"' EXIT
"$root/tests/interop/rxe-vm/run.sh" --timeout $((600 + ROUNDS * ($# + 1) * (DUR + 30))) \
  "$root/scripts/bench/rxe_ab.sh" "$out" "$root" "$F" "$MTU" "$SIZE" "$DUR" "$ROUNDS" "$PIN" "$@" >"$out/run.log" 2>&1 || {
  echo "scripts/bench/rxe_ab.sh: the VM run failed; its console:" >&2; tail -n 20 "$out/console.log" >&2; exit 1; }
grep -E '^(guest:|round |SUMMARY )' "$out/console.log"
