# Measuring functions of scripts/bench.sh, for its host part and for the VM's guest.sh.
# Needs: F (ferroce binary), D (seconds per bandwidth run), R (runs of each), OUT (logs),
# and wait_port PORT [NETNS].

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
#   runs perftest on ferroce's libibverbs (ferroce exec).
bench() {
  local mtu=$1 pair=$2 sn=$3 st=$4 cn=$5 ct=$6 addr=$7 t
  for t in "write_bw 65536 bw" "write_bw 4096 bw" "write_lat 2 lat"; do
    set -- $t
    local tool=$1 size=$2 kind=$3 flags attempt rep log
    if [ "$kind" = bw ]; then flags="-s $size -D $D -F --report_gbits"; else flags="-s $size -n 2000 -F"; fi
    for rep in $(seq 1 "$R"); do
    log=$OUT/logs/$mtu-$pair-$tool-$size-$rep
    # perftest calibrates its clock against /proc/cpuinfo; under TCG that sometimes fails
    # and it reports zeros: such a run goes once more.
    for attempt in 1 2; do
      in_ns "$sn" timeout 120 $(cmd "$st") >"$log.server" 2>&1 &
      local pid=$!
      wait_port 18515 "${sn#-}" 2>/dev/null
      in_ns "$cn" timeout 120 $(cmd "$ct") "$addr" >"$log.client" 2>&1
      wait $pid
      grep -q "Correlation coefficient" "$log.client" "$log.server" || break
    done
    result "$mtu" "$tool-$size" "$pair" "$log.client" "$kind"
    done
  done
}
in_ns() { local ns=$1; shift; if [ "$ns" = - ]; then "$@"; else ip netns exec "$ns" "$@"; fi; }
cmd() {  # TOOL -> command line (uses $tool and $flags)
  set -- $1
  if [ "$1" = rxe ]; then echo "ib_$tool -d $2 -x $3 $flags"
  # Debian's perftest, unmodified, on ferroce's libibverbs.so.1.
  elif [ "$1" = cabi ]; then echo "$F exec -- ib_$tool -d $2 -x $3 $flags"
  else echo "$F perf ${tool//_/-} -d $2 $flags"; fi
}

# iperf MTU SERVER_NS CLIENT_NS SERVER_ADDR: R runs of iperf3 between the two namespaces.
iperf() {
  local mtu=$1 sn=$2 cn=$3 addr=$4 rep
  for rep in $(seq 1 "$R"); do
    in_ns "$sn" iperf3 -s -1 -B "$addr" >"$OUT/logs/$mtu-iperf3-$rep.server" 2>&1 &
    wait_port 5201 "${sn#-}"
    in_ns "$cn" iperf3 -c "$addr" -t "$D" -J >"$OUT/logs/$mtu-iperf3-$rep.json" 2>&1
    wait
    echo "RESULT $mtu tcp tcp-iperf3 $(awk -F: '/"bits_per_second"/ { v = $2 } END { gsub(/[ ,]/, "", v); printf "%.3f", v / 1e9 }' "$OUT/logs/$mtu-iperf3-$rep.json") Gb/s"
  done
}
