#!/bin/bash
# Would MSG_ZEROCOPY take the kernel's copy out of ferroce's UDP-way sends? One UDP GSO
# stream (super-packets of RoCE-sized segments to port 4791, as ferroce's UDP way
# sends them) between two network namespaces over a veth pair, alternately copied and
# lent with MSG_ZEROCOPY; prints each run's rate, the whole machine's busy CPU seconds
# per GB (`/proc/stat`, both ends) and how many lent sends the kernel copied after all,
# then the medians and their ratio.
#
#   sudo scripts/bench/zerocopy.sh [-n ROUNDS] [-m MTU] [-D SECONDS]
#
# Defaults: 3 rounds, veth MTU 9000, 4 s. The segments are the RoCE packets ferroce sends
# at that veth MTU: 4,112 bytes (RoCE MTU 4096) from 4200 up, else 1,040 (RoCE MTU 1024).
# Needs root (network namespaces) and cc.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=3 MTU=9000 DUR=4
while getopts n:m:D: o; do
  case $o in
    n) ROUNDS=$OPTARG ;; m) MTU=$OPTARG ;; D) DUR=$OPTARG ;;
    *) echo "usage: scripts/bench/zerocopy.sh [-n ROUNDS] [-m MTU] [-D SECONDS]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "scripts/bench/zerocopy.sh needs root (network namespaces); run it with sudo" >&2; exit 2; }
command -v cc >/dev/null || { echo "scripts/bench/zerocopy.sh needs a C compiler: apt-get install gcc" >&2; exit 2; }
. "$root/scripts/bench/lib.sh"   # cpu_busy, median, veth_pair
out=$(mktemp -d)
drop_ns() { ip netns del zca 2>/dev/null || true; ip netns del zcb 2>/dev/null || true; }
trap 'drop_ns; rm -rf "$out"' EXIT
cc -O2 -Wall -o "$out/zerocopy" "$root/scripts/bench/zerocopy.c"
drop_ns
veth_pair zca zcb "$MTU" 10.78.0
hz=$(getconf CLK_TCK)
if [ "$MTU" -ge 4200 ]; then seg=4112; else seg=1040; fi
printf '%-9s %5s %8s %10s %14s\n' mode round Gb/s "CPU s/GB" "lent / copied"
for round in $(seq 1 "$ROUNDS"); do
  for mode in copy zerocopy; do
    ip netns exec zcb "$out/zerocopy" recv 1 >"$out/recv" &
    sleep 0.3
    c0=$(cpu_busy)
    ip netns exec zca "$out/zerocopy" send 10.78.0.2 "$mode" "$DUR" "$seg" >"$out/send"
    c1=$(cpu_busy)
    wait $!
    read -r _ gbps <"$out/recv"
    read -r _ _ _ _ _ lent _ copied <"$out/send"
    s_per_gb=$(awk -v c=$((c1 - c0)) -v hz="$hz" -v g="$gbps" -v d="$DUR" 'BEGIN { printf "%.3f", c / hz / (g * d / 8) }')
    printf '%-9s %5s %8s %10s %14s\n' "$mode" "$round" "$gbps" "$s_per_gb" "$lent / $copied"
    echo "$mode $gbps $s_per_gb" >>"$out/all"
  done
done
med() { awk -v m="$1" -v f="$2" '$1 == m { print $f }' "$out/all" | median; }
cg=$(med copy 2) zg=$(med zerocopy 2) cc_=$(med copy 3) zc_=$(med zerocopy 3)
echo "median: copy $cg Gb/s, $cc_ s/GB; zerocopy $zg Gb/s, $zc_ s/GB"
awk -v a="$zg" -v b="$cg" -v c="$zc_" -v d="$cc_" 'BEGIN { printf "zerocopy / copy: %.2fx the rate, %.2fx the CPU per GB\n", a / b, c / d }'
