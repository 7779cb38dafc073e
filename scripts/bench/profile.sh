#!/bin/bash
# Where a ferroce↔ferroce RDMA WRITE stream spends its CPU, beside kernel TCP on the same
# path: a CPU profile of the whole machine, sorted into kinds of work and divided by the
# bytes and packets moved.
#
#   sudo scripts/bench/profile.sh [MTU] [SIZE]      (defaults: veth MTU 1500, 64 KiB WRITEs)
#
# Two network namespaces over one veth (both ends on this host, as in `scripts/bench.sh
# host`). `ferroce perf write-bw -D 8` runs while `perf record -a -e cpu-clock` samples 4 s
# of its steady state; then iperf3 the same way. Samples are sorted by symbol into kernel
# copies, the kernel's scheduling, the rest of the kernel, and user space's ICRC, payload
# copies, header parsing and the rest (ferroce's own code; for TCP, iperf3's); idle is
# left out. Each kind is
# printed as CPU seconds per GB moved and, for ferroce, nanoseconds per RoCE packet (both
# ends together). The throughput each divides by is the tool's own average (perftest's
# "BW average", iperf3's receiver line), so perf's own cost lowers both alike.
# Needs root, iperf3 and perf (Debian `iperf3`, `linux-perf`; installed when missing).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
MTU=${1:-1500} SIZE=${2:-65536}
[ "$(id -u)" = 0 ] || { echo "scripts/bench/profile.sh needs root (network namespaces, perf -a); run it with sudo" >&2; exit 2; }
need=""
command -v iperf3 >/dev/null || need="$need iperf3"
command -v perf >/dev/null || need="$need linux-perf"
if [ -n "$need" ]; then
  echo "[profile] installing:$need"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
fi
(cd "$root" && cargo build --release --quiet -p ferroce-cli --bin ferroce)
F=${CARGO_TARGET_DIR:-$root/target}/release/ferroce
. "$root/scripts/bench/lib.sh"   # row (a perftest table's result row), veth_pair
out=$root/target/bench/profile-$MTU-$SIZE; rm -rf "$out"; mkdir -p "$out"

cleanup() { ip netns del qa 2>/dev/null || true; ip netns del qb 2>/dev/null || true; }
trap cleanup EXIT
cleanup
veth_pair qa qb "$MTU" 10.81.0
sleep 1

# record NAME: 4 s of the whole machine, from 3 s into the run.
record() { sleep 3; perf record -a -g -e cpu-clock -F 1999 -o "$out/$1.data" -- sleep 4 >/dev/null 2>&1; }

ip netns exec qb "$F" perf write-bw -d vqb -p 18990 >"$out/server.txt" 2>&1 &
sleep 1
ip netns exec qa "$F" perf write-bw -d vqa -s "$SIZE" -D 8 --report_gbits -p 18990 10.81.0.2 \
  >"$out/client.txt" 2>&1 &
client=$!
record ferroce
wait "$client"
sleep 1
ip netns exec qb iperf3 -s -1 -p 5399 >/dev/null 2>&1 &
sleep 1
ip netns exec qa iperf3 -c 10.81.0.2 -p 5399 -t 8 -f g >"$out/tcp.txt" 2>&1 &
client=$!
record tcp
wait "$client"

f_gbps=$(row "$out/client.txt" | awk '{ print $4 }')
roce_mtu=$(sed -n 's/^ Mtu *: *\([0-9]*\).*/\1/p' "$out/client.txt")
t_gbps=$(awk '/receiver/ { for (i = 1; i <= NF; i++) if ($i == "Gbits/sec") print $(i-1) }' "$out/tcp.txt")
[ -n "$f_gbps" ] && [ -n "$t_gbps" ] && [ -n "$roce_mtu" ] \
  || { echo "[profile] a run failed: see $out" >&2; exit 1; }

# kinds DATA GBPS PACKET_BYTES: the table rows of one profile.
kinds() {
  perf report -i "$1" --no-children --sort comm,dso,sym -n --stdio -g none 2>/dev/null |
    awk -v gbps="$2" -v pkt="$3" -v hz=1999 -v secs=4 '
      /^#/ || NF < 5 { next }
      {
        n = $2; comm = $3; dso = $4; sym = $0; sub(/.*\] /, "", sym)
        if (comm == "swapper" || sym ~ /safe_halt|cpuidle/) next
        k = (dso ~ /^\[kernel/)
        if (sym ~ /_copy_(from|to)_iter|copy_page_(from|to)_iter|__pi_memcpy|skb_copy/) c = "kernel: copies of the data"
        else if (k && sym ~ /schedule|finish_task_switch|yield|futex|pick_next|switch_|dequeue|enqueue|update_curr|try_to_wake/) c = "kernel: scheduling, yields, wake-ups"
        else if (k) c = "kernel: the rest (skbs, veth, sockets)"
        else if (sym ~ /crc32|icrc/) c = "user space: ICRC"
        # A region read_at / write_at: their samples fall on the atomics of its lock, which
        # wait there for the stores of the copy to drain (perf annotate): the copy cost.
        else if (sym ~ /memmove|memcpy|Memory.* as .*RegionMemory>::(read_at|write_at)/) c = "user space: payload copies"
        else if (sym ~ /parse|ip_udp|from_slice|checksum|split_in_place|Opcode::lookup|header_len/) c = "user space: parsing and checking headers"
        else c = "user space: the rest"
        s[c] += n; total += n
      }
      END {
        gb = gbps / 8 * secs
        sort = "sort -t\"|\" -k4 -gr"
        for (c in s) printf "| %s | %.0f%% | %.3f | %s |\n", c, 100 * s[c] / total, s[c] / hz / gb, pkt ? sprintf("%.0f", s[c] / hz / (gb * 1e9 / pkt) * 1e9) : "" | sort
        close(sort)
        printf "| all (busy CPU, idle left out) | 100%% | %.3f | %s |\n", total / hz / gb, pkt ? sprintf("%.0f", total / hz / (gb * 1e9 / pkt) * 1e9) : ""
      }'
}
echo "Natively on $(date +%F), $(nproc) CPUs, Linux $(uname -r); veth MTU $MTU, ${SIZE}-byte WRITEs (RoCE MTU $roce_mtu)."
echo "ferroce $f_gbps Gb/s, kernel TCP $t_gbps Gb/s: $(awk -v a="$f_gbps" -v b="$t_gbps" 'BEGIN { printf "%.2fx", a / b }')."
echo
echo "| ferroce↔ferroce: kind of work | share | CPU s per GB | ns per packet |"
echo "| --- | ---: | ---: | ---: |"
kinds "$out/ferroce.data" "$f_gbps" "$roce_mtu"
echo
echo "| kernel TCP: kind of work | share | CPU s per GB | |"
echo "| --- | ---: | ---: | --- |"
kinds "$out/tcp.data" "$t_gbps" 0
echo
echo "Profiles: $out/{ferroce,tcp}.data (perf report -i ...)"
