# Measuring functions of scripts/bench.sh, for its host part and for the VM's guest.sh.
# Needs: F (ferroce binary), D (seconds per bandwidth run), R (runs of each), OUT (logs),
# and wait_port PORT [NETNS].

# veth_pair A B MTU NET: network namespaces A and B joined by one veth pair, vA in A with
# NET.1/24 and vB in B with NET.2/24, MTU on both ends, every link up.
veth_pair() {
  ip netns add "$1"; ip netns add "$2"
  ip link add "v$1" mtu "$3" netns "$1" type veth peer name "v$2" mtu "$3" netns "$2"
  ip -n "$1" addr add "$4.1/24" dev "v$1"; ip -n "$2" addr add "$4.2/24" dev "v$2"
  for ns in "$1" "$2"; do ip -n "$ns" link set lo up; ip -n "$ns" link set "v$ns" up; done
}

# The result row of a perftest table (ferroce prints the same tables).
row() { awk '/^ #bytes/ { t = 1; next } t && /^ [0-9]/ { r = $0 } /^---/ && t { exit } END { print r }' "$1"; }
result() {  # MTU TEST PAIR LOG KIND(bw|lat)
  local r v; r=$(row "$4")
  if [ "$5" = bw ]; then v=$(echo "$r" | awk '{ print $4 }'); u=Gb/s
  else v=$(echo "$r" | awk '{ print $5 }'); u=us; fi
  echo "RESULT $1 $2 $3 ${v:-FAILED} $u"
}
# bench MTU PAIR SERVER_NS SERVER_TOOL CLIENT_NS CLIENT_TOOL SERVER_ADDR
#   *_NS: a network namespace or "-" for the initial one;
#   *_TOOL: "rxe DEV GID" runs perftest, "ferroce DEV" runs ferroce perf, "cabi DEV GID"
#   runs perftest on ferroce's libibverbs (ferroce exec), "cm DEV" the same connected by
#   rdma_cm (-R).
bench() {
  local mtu=$1 pair=$2 sn=$3 st=$4 cn=$5 ct=$6 addr=$7 t c0
  # TOOL SIZE KIND [QPS]: 64 KiB WRITEs on 4 QPs too (-q 4, as MPI and NCCL spread
  # traffic), where packets of several QPs share one link.
  for t in "write_bw 65536 bw" "write_bw 4096 bw" "write_bw 65536 bw 4" "write_lat 2 lat"; do
    set -- $t
    local tool=$1 size=$2 kind=$3 qps=${4:-} flags attempt rep log test
    if [ "$kind" = bw ]; then flags="-s $size -D $D -F --report_gbits"; else flags="-s $size -n 2000 -F"; fi
    test=$tool-$size
    if [ -n "$qps" ]; then flags="$flags -q $qps"; test=$test-q$qps; fi
    for rep in $(seq 1 "$R"); do
    log=$OUT/logs/$mtu-$pair-$test-$rep
    # perftest calibrates its clock against /proc/cpuinfo; under TCG that sometimes fails
    # and it reports zeros: such a run goes once more.
    for attempt in 1 2; do
      in_ns "$sn" timeout 120 $(cmd "$st") >"$log.server" 2>&1 &
      local pid=$!
      # An rdma_cm server listens on no TCP port.
      if [ "${st%% *}" = cm ]; then sleep 1.5; else wait_port 18515 "${sn#-}" 2>/dev/null; fi
      c0=$(cpu_busy)
      in_ns "$cn" timeout 120 $(cmd "$ct") "$addr" >"$log.client" 2>&1
      echo "$c0 $(cpu_busy)" >"$log.cpu"
      wait $pid
      grep -q "Correlation coefficient" "$log.client" "$log.server" || break
    done
    result "$mtu" "$test" "$pair" "$log.client" "$kind"
    [ "$kind" = bw ] && cpu_per_gb "$mtu" "$test" "$pair" "$log.cpu" "$(row "$log.client" | awk '{ print $4 }')"
    done
  done
}
in_ns() { local ns=$1; shift; if [ "$ns" = - ]; then "$@"; else ip netns exec "$ns" "$@"; fi; }
cmd() {  # TOOL -> command line (uses $tool and $flags)
  set -- $1
  if [ "$1" = rxe ]; then echo "ib_$tool -d $2 -x $3 $flags"
  # Debian's perftest, unmodified, on ferroce's libibverbs.so.1.
  elif [ "$1" = cabi ]; then echo "$F exec -- ib_$tool -d $2 -x $3 $flags"
  # The same, its connection made by rdma_cm (ferroce's librdmacm.so.1).
  elif [ "$1" = cm ]; then echo "$F exec -- ib_$tool -R -d $2 $flags"
  else echo "$F perf ${tool//_/-} -d $2 $flags"; fi
}

# CPU time the whole machine spent busy so far (user, nice, system, irq, softirq, steal),
# in clock ticks: both ends of a run between two namespaces of one host.
# median: the median of the numbers on stdin, one per line (nothing when there are none).
# Empty lines are no runs: counted as runs, they made scripts/bench/rsocket.sh print the
# mean of the two lowest of three runs until 2026-12-03.
median() { sort -g | awk 'NF { v[++n] = $1 } END { if (n) print (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }'; }
cpu_busy() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }
# cpu_per_gb MTU TEST PAIR CPU_LOG GBPS: busy CPU seconds per gigabyte moved, from the
# ticks before and after the client ran ($D seconds of transfer at GBPS, plus its set-up,
# which both ferroce and TCP pay) -> "CPU mtu test pair value s/GB".
cpu_per_gb() {
  local v
  v=$(awk -v hz="$(getconf CLK_TCK)" -v gbps="$5" -v d="$D" \
    'NF == 2 && gbps + 0 > 0 { printf "%.3f", ($2 - $1) / hz / (gbps * d / 8) }' "$4")
  echo "CPU $1 $2 $3 ${v:-FAILED} s/GB"
}

# iperf MTU SERVER_NS CLIENT_NS SERVER_ADDR: R runs of iperf3 between the two namespaces.
iperf() {
  local mtu=$1 sn=$2 cn=$3 addr=$4 rep log bw
  for rep in $(seq 1 "$R"); do
    log=$OUT/logs/$mtu-iperf3-$rep
    in_ns "$sn" iperf3 -s -1 -B "$addr" >"$log.server" 2>&1 &
    wait_port 5201 "${sn#-}"
    echo "$(cpu_busy)" >"$log.cpu"
    in_ns "$cn" iperf3 -c "$addr" -t "$D" -J >"$log.json" 2>&1
    echo "$(cat "$log.cpu") $(cpu_busy)" >"$log.cpu"
    wait
    bw=$(awk -F: '/"bits_per_second"/ { v = $2 } END { gsub(/[ ,]/, "", v); printf "%.3f", v / 1e9 }' "$log.json")
    echo "RESULT $mtu tcp tcp-iperf3 $bw Gb/s"
    cpu_per_gb "$mtu" tcp tcp-iperf3 "$log.cpu" "$bw"
  done
}

# udp_pingpong MTU SERVER_NS CLIENT_NS SERVER_ADDR: R runs of the kernel's own UDP
# ping-pong (sockperf, 16-byte messages, $D s): the median half round trip, beside the
# 2-byte WRITE latency (perftest's latency is a half round trip too).
udp_pingpong() {
  local mtu=$1 sn=$2 cn=$3 addr=$4 rep log pid
  command -v sockperf >/dev/null || return 0
  for rep in $(seq 1 "$R"); do
    log=$OUT/logs/$mtu-sockperf-$rep
    in_ns "$sn" timeout $((D + 30)) sockperf server -i "$addr" -p 11111 >"$log.server" 2>&1 &
    pid=$!
    sleep 0.5
    in_ns "$cn" timeout $((D + 30)) sockperf ping-pong -i "$addr" -p 11111 -m 16 -t "$D" >"$log.client" 2>&1
    kill $pid 2>/dev/null; wait $pid 2>/dev/null
    echo "RESULT $mtu write_lat-2 udp-sockperf $(awk '/percentile 50.000/ { v = $NF } END { print (v == "" ? "FAILED" : v) }' "$log.client") us"
  done
}
