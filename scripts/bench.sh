#!/bin/bash
# Side-by-side benchmark: ferroce against Linux rxe and kernel TCP, in one run.
#
#   scripts/bench.sh [vm|host|memory|pairs|cm|rsocket|all]  (default all: vm, host, memory; the others
#                                                    on their own; all but memory need root)
#
#   vm    inside the rxe VM (tests/interop/rxe-vm; TCG when there is no KVM, so the
#         figures are emulated), on one veth pair: rxe <-> rxe (perftest), ferroce <-> rxe
#         packet by packet (FERROCE_GSO=1) and with super-packets through UDP sockets
#         (FERROCE_GSO=udp, Linux 6.1's default: "(udp)<->rxe"), ferroce <-> ferroce the
#         same two ways, TCP (iperf3);
#         for each veth MTU in $MTUS (default "1500 9000": RoCE MTU 1024 and 4096).
#         (scripts/bench/guest.sh; the measuring functions, shared with the host part, are
#         in scripts/bench/lib.sh)
#   host  natively on this machine: ferroce <-> ferroce between two network namespaces on a
#         veth pair, the same tests with Debian's perftest on ferroce's libibverbs.so.1
#         (`ferroce exec`; "lib / ferroce" is what the C ABI keeps, 1.00x = no cost), and
#         iperf3 on the same pair (and rxe <-> rxe when this kernel has it).
#
# Tests: RDMA WRITE bandwidth at 64 KiB and 4 KiB (`ib_write_bw` / `ferroce perf write-bw`,
# -D $DURATION s, default 8), at 64 KiB on 4 QPs too (-q 4), and 2-byte WRITE latency
# (`ib_write_lat` / `ferroce perf write-lat`, 2000 iterations, typical = median). Prints a table per place with ratios:
# ferroce<->ferroce over rxe<->rxe and over the kernel for bandwidth, rxe over ferroce for
# latency (so > 1 is ferroce ahead everywhere). "kernel" is TCP (iperf3) beside bandwidth
# and, natively, the kernel's UDP ping-pong (sockperf, median half round trip) beside
# latency. A second table gives the CPU cost of each bandwidth test: busy seconds of the
# whole machine (both ends, /proc/stat) per GB moved, ferroce's beside TCP's. Each figure is the median of $REPEAT runs (default
# 3; the VM's figures swing by up to 2x between runs). Logs: target/bench/.
#   memory  resident memory with 1, 100 and 10,000 QP pairs open (examples/qp_memory.rs).
#   pairs   natively: aggregate `ferroce perf write-bw` (64 KiB, -D $DURATION s) of 1, 2 and 4
#           process pairs at once on one veth pair (all servers on one end, all clients on
#           the other), and 1 pair beside 3 idle processes per end (sockets held, no
#           traffic), for each MTU in $MTUS: what sharing an interface costs. Beside each,
#           the same number of kernel TCP process pairs (iperf3) on the same veth.
#   cm      natively, veth MTU 1500: Debian's perftest on ferroce's libibverbs with its
#           connection made by rdma_cm (`-R`, ferroce's librdmacm.so.1) beside the same
#           tests connected over perftest's TCP socket: what a connection rdma_cm made
#           costs the data path afterwards (1.00x = nothing).
#   rsocket natively, veth MTU 1500: rstream and iperf3 (under librspreload.so) over
#           ferroce's rsockets beside the same programs over kernel TCP
#           (scripts/bench/rsocket.sh).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
what=${1:-all}
case $what in vm|host|memory|pairs|cm|rsocket|all) ;; *) echo "usage: scripts/bench.sh [vm|host|memory|pairs|cm|rsocket|all]" >&2; exit 2 ;; esac
if [ "$what" = memory ] || [ "$what" = all ]; then
  echo "[bench] resident memory per QP (in-memory wire, no privileges needed)"
  (cd "$root" && cargo run --release --quiet -p ferroce --example qp_memory -- 1 100 10000) || exit 1
  [ "$what" = memory ] && exit 0
fi
[ "$(id -u)" = 0 ] || { echo "scripts/bench.sh needs root (network namespaces, the VM's rxe); run it with sudo" >&2; exit 2; }
MTUS=${MTUS:-1500 9000} DURATION=${DURATION:-8} REPEAT=${REPEAT:-3}
out=$root/target/bench; mkdir -p "$out"   # each part replaces only its own files
# The Debian packages the parts run, installed in one go when missing: iperf3 everywhere,
# sockperf natively, perftest on ferroce's library natively (host, cm) and against rxe in
# the VM.
need=""
command -v iperf3 >/dev/null || need="$need iperf3"
[ "$what" = vm ] || command -v sockperf >/dev/null || need="$need sockperf"
[ "$what" = pairs ] || command -v ib_write_bw >/dev/null || need="$need perftest"
if [ -n "$need" ]; then
  echo "[bench] installing:$need"; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
fi
# Two commands: a `--bin` filter would apply to both packages and skip the library.
(cd "$root" && cargo build --release --quiet -p ferroce-cli --bin ferroce \
  && cargo build --release --quiet -p ferroce-ibverbs --lib) || exit 1
F=${CARGO_TARGET_DIR:-$root/target}/release/ferroce
machine="$(nproc) CPUs, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), Linux $(uname -r)"

# The awk function the tables share: the median of vals[k, 1..n[k]] ("" when none).
MED='
    function med(vals, n, k,   m, i, j, t, a) {
      m = n[k]; if (m == 0) return ""
      for (i = 1; i <= m; i++) a[i] = vals[k, i]
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
    }'

# table TITLE RESULTS_FILE: RESULT lines "RESULT mtu test pair value unit" -> a table.
table() {
  echo
  echo "$1"
  awk "$MED"'
    $1 == "RESULT" && $5 != "FAILED" && $5 + 0 > 0 { k = $2 " " $3 " " $4; n[k]++; all[k, n[k]] = $5 + 0 }
    $1 == "RESULT" { mtus[$2] = 1; tests[$3] = 1 }
    function median(k) { return med(all, n, k) }
    function f(x) { return (x == "" || x == "FAILED") ? "-" : x }
    function ratio(a, b) { return (a + 0 > 0 && b + 0 > 0) ? sprintf("%.2fx", a / b) : "-" }
    END {
      printf "| %-5s | %-20s | %-10s | %-13s | %-13s | %-16s | %-16s | %-16s | %-10s | %-15s | %-15s | %-16s | %-16s |\n", "MTU", "test", "rxe<->rxe", "ferroce<->rxe", "(udp)<->rxe", "ferroce<->ferroce", "(udp)<->(udp)", "perftest on lib", "kernel", "ferroce / rxe", "(udp) / rxe", "ferroce / kernel", "lib / ferroce"
      print "|-------|----------------------|------------|---------------|---------------|------------------|------------------|------------------|------------|-----------------|-----------------|------------------|------------------|"
      nt = split("write_bw-65536 write_bw-4096 write_bw-65536-q4 write_lat-2", order, " ")
      for (m in mtus) for (i = 1; i <= nt; i++) {
        t = order[i]; if (!(t in tests)) continue
        rr = median(m " " t " rxe-rxe"); fr = median(m " " t " ferroce-rxe"); ff = median(m " " t " ferroce-ferroce")
        fu = median(m " " t " ferroce-rxe-udp"); if (fu != "") fu = sprintf("%.3g", fu)
        uu = median(m " " t " ferroce-ferroce-udp"); if (uu != "") uu = sprintf("%.3g", uu)
        # The kernel: TCP (iperf3) beside bandwidth, UDP ping-pong (sockperf) beside latency.
        tcp = (t ~ /lat/) ? median(m " " t " udp-sockperf") : median(m " tcp tcp-iperf3")
        cc = median(m " " t " cabi-cabi")
        if (rr != "") rr = sprintf("%.3g", rr); if (fr != "") fr = sprintf("%.3g", fr); if (ff != "") ff = sprintf("%.3g", ff); if (tcp != "") tcp = sprintf("%.3g", tcp)
        if (cc != "") cc = sprintf("%.3g", cc)
        lat = (t ~ /lat/)
        name = (t == "write_bw-65536") ? "WRITE 64 KiB, Gb/s" : (t == "write_bw-4096") ? "WRITE 4 KiB, Gb/s" : (t == "write_bw-65536-q4") ? "64 KiB on 4 QPs, Gb/s" : "WRITE 2 B, us typ."
        printf "| %-5s | %-20s | %-10s | %-13s | %-13s | %-16s | %-16s | %-16s | %-10s | %-15s | %-15s | %-16s | %-16s |\n", m, name, f(rr), f(fr), f(fu), f(ff), f(uu), f(cc),
          f(tcp), ratio(lat ? rr : ff, lat ? ff : rr), ratio(lat ? rr : uu, lat ? uu : rr), ratio(lat ? tcp : ff, lat ? ff : tcp), ratio(lat ? ff : cc, lat ? cc : ff)
      }
    }' "$2"
}

# cpu_table TITLE RESULTS_FILE: CPU lines "CPU mtu test pair value s/GB" -> a table of
# busy CPU seconds (whole machine, so both ends) per gigabyte moved.
cpu_table() {
  grep -q '^CPU ' "$2" || return 0
  echo
  echo "$1"
  awk "$MED"'
    $1 == "CPU" && $5 != "FAILED" && $5 + 0 > 0 { k = $2 " " $3 " " $4; n[k]++; all[k, n[k]] = $5 + 0; mtus[$2] = 1 }
    function median(k,   x) { x = med(all, n, k); return x == "" ? "" : sprintf("%.3g", x) }
    function f(x) { return x == "" ? "-" : x }
    function ratio(a, b) { return (a + 0 > 0 && b + 0 > 0) ? sprintf("%.2fx", a / b) : "-" }
    END {
      printf "| %-5s | %-20s | %-10s | %-13s | %-13s | %-16s | %-16s | %-16s | %-10s | %-15s |\n", "MTU", "CPU s per GB", "rxe<->rxe", "ferroce<->rxe", "(udp)<->rxe", "ferroce<->ferroce", "(udp)<->(udp)", "perftest on lib", "TCP iperf3", "ferroce / TCP"
      print "|-------|----------------------|------------|---------------|---------------|------------------|------------------|------------------|------------|-----------------|"
      for (m in mtus) {
        tcp = median(m " tcp tcp-iperf3")
        split("write_bw-65536 write_bw-4096", order, " ")
        for (i = 1; i <= 2; i++) {
          t = order[i]; ff = median(m " " t " ferroce-ferroce")
          printf "| %-5s | %-20s | %-10s | %-13s | %-13s | %-16s | %-16s | %-16s | %-10s | %-15s |\n", m, (i == 1 ? "WRITE 64 KiB" : "WRITE 4 KiB"),
            f(median(m " " t " rxe-rxe")), f(median(m " " t " ferroce-rxe")), f(median(m " " t " ferroce-rxe-udp")), f(ff), f(median(m " " t " ferroce-ferroce-udp")), f(median(m " " t " cabi-cabi")), f(tcp), ratio(ff, tcp)
        }
      }
    }' "$2"
}

if [ "$what" = rsocket ]; then
  command -v rstream >/dev/null || { echo "[bench] installing: rdmacm-utils"; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rdmacm-utils >/dev/null; }
  echo "[bench] natively: rsockets on ferroce's librdmacm beside kernel TCP, veth MTU 1500"
  echo "Natively on this host on $(date +%F): $machine; median of $REPEAT"
  F=$F REPEAT=$REPEAT bash "$root/scripts/bench/rsocket.sh" | tee "$out/rsocket-results.txt"
  exit 0
fi
if [ "$what" = cm ]; then
  echo "[bench] natively: perftest on ferroce's library, connected by rdma_cm (-R) and by TCP"
  cleanup() { ip netns del ca 2>/dev/null; ip netns del cb 2>/dev/null; true; }
  cleanup; trap cleanup EXIT
  res=$out/cm-results.txt; : >"$res"; rm -rf "$out/cm"
  wait_port() { for _ in $(seq 1 100); do ip netns exec "$2" ss -ltn | grep -q ":$1\b" && return 0; sleep 0.05; done; return 1; }
  (
    OUT=$out/cm D=$DURATION R=$REPEAT; mkdir -p "$OUT/logs"
    . "$root/scripts/bench/lib.sh"
    veth_pair ca cb 1500 10.77.0
    for ns in ca cb; do  # until the port is up (a fresh veth's carrier takes a moment)
      for _ in $(seq 1 50); do ip netns exec $ns "$F" devinfo -d v$ns | grep -q PORT_ACTIVE && break; sleep 0.2; done
    done
    gid() { ip netns exec "$1" "$F" devinfo -d "$2" -v | sed -n "s/.*GID\[ *\([0-9]*\)\]:.*::ffff:$3,.*/\1/p" | head -1; }
    bench 1500 cabi-cabi cb "cabi vcb $(gid cb vcb 10.77.0.2)" ca "cabi vca $(gid ca vca 10.77.0.1)" 10.77.0.2
    bench 1500 cabi-cm cb "cm vcb" ca "cm vca" 10.77.0.2
  ) | tee -a "$res"
  echo
  echo "Natively on this host on $(date +%F): $machine; veth MTU 1500, median of $REPEAT"
  awk "$MED"'
    $1 == "RESULT" && !($3 in seen) { seen[$3] = 1; order[++t] = $3 }
    $1 == "RESULT" && $5 != "FAILED" { k = $3 " " $4; n[k]++; v[k, n[k]] = $5 + 0; u[$3] = $6 }
    $1 == "RESULT" && $5 == "FAILED" { failed[$3 " " $4]++ }
    function median(k) { return med(v, n, k) + 0 }
    END {
      print "| test                | unit | TCP-connected | rdma_cm (-R) | -R vs TCP-connected | failed runs |"
      print "|---------------------|------|---------------|--------------|---------------------|-------------|"
      for (i = 1; i <= t; i++) {
        x = order[i]; a = median(x " cabi-cabi"); b = median(x " cabi-cm"); lat = (u[x] == "us")
        r = (a > 0 && b > 0) ? sprintf("%.2fx", lat ? a / b : b / a) : "-"
        printf "| %-19s | %-4s | %-13.3g | %-12.3g | %-19s | %-11d |\n", x, u[x], a, b, r, failed[x " cabi-cabi"] + failed[x " cabi-cm"]
      }
    }' "$res" | tee "$out/cm-table.md"
  echo "(-R vs TCP-connected: > 1.00x is -R ahead, for latency too)"
  exit 0
fi

if [ "$what" = pairs ]; then
  echo "[bench] natively: 1, 2 and 4 ferroce perf write-bw pairs at once on one veth pair"
  . "$root/scripts/bench/lib.sh"   # veth_pair
  cleanup() { ip netns del pa 2>/dev/null; ip netns del pb 2>/dev/null; true; }
  cleanup; trap cleanup EXIT
  res=$out/pairs-results.txt; : >"$res"; mkdir -p "$out/pairs"
  # wait_listen NS PORT: until a TCP socket in NS listens on PORT (at most 5 s).
  wait_listen() { for _ in $(seq 1 100); do ip netns exec "$1" ss -ltn | grep -q ":$2\b" && break; sleep 0.05; done; }
  # aggregate N EXT AWK: the sum over pairs 1..N of what AWK prints (last line) from
  # $out/pairs/$MTU-N-i-$rep.EXT, or FAILED if a pair printed nothing.
  aggregate() {
    local total=0 got=0 i bw
    for i in $(seq 1 "$1"); do
      bw=$(awk "$3" "$out/pairs/$MTU-$1-$i-$rep.$2" | tail -1)
      [ -n "$bw" ] && got=$((got + 1)) && total=$(awk -v a="$total" -v b="$bw" 'BEGIN { print a + b }')
    done
    if [ "$got" = "$1" ]; then echo "$total"; else echo FAILED; fi
  }
  for MTU in $MTUS; do
    veth_pair pa pb "$MTU" 10.79.0
    for rep in $(seq 1 "$REPEAT"); do
      for cfg in 1 1+3 2 4; do
        # 1+3: one pair while three more processes per interface only hold their
        # sockets (servers waiting for a client): what sharing costs a frame. It runs
        # right after 1, which it is compared with: after the four-pair runs it came out
        # 0-15% lower, in alternation with 1 the same.
        n=${cfg%%+*} idle=() pids=()
        if [ "$cfg" = 1+3 ]; then
          for i in 1 2 3; do
            ip netns exec pa "$F" perf write-bw -d vpa -p $((18800 + i)) >/dev/null 2>&1 &
            idle+=($!)
            ip netns exec pb "$F" perf write-bw -d vpb -p $((18800 + i)) >/dev/null 2>&1 &
            idle+=($!)
          done
          for i in 1 2 3; do
            for ns in pa pb; do wait_listen $ns $((18800 + i)); done
          done
        fi
        for i in $(seq 1 "$n"); do
          ip netns exec pb "$F" perf write-bw -d vpb -s 65536 -D "$DURATION" --report_gbits -p $((18700 + i)) \
            >"$out/pairs/$MTU-$n-$i-$rep.server" 2>&1 &
          pids+=($!)
        done
        for i in $(seq 1 "$n"); do wait_listen pb $((18700 + i)); done
        for i in $(seq 1 "$n"); do
          ip netns exec pa "$F" perf write-bw -d vpa -s 65536 -D "$DURATION" --report_gbits -p $((18700 + i)) 10.79.0.2 \
            >"$out/pairs/$MTU-$n-$i-$rep.client" 2>&1 &
          pids+=($!)
        done
        wait "${pids[@]}"
        if [ ${#idle[@]} -gt 0 ]; then kill "${idle[@]}" 2>/dev/null; wait "${idle[@]}" 2>/dev/null; fi
        echo "PAIRS $MTU $cfg $(aggregate "$n" client '/^ #bytes/ { getline; print $4; exit }')" | tee -a "$res"
        # The reference: as many kernel TCP process pairs (iperf3) on the same veth.
        [ "$cfg" = 1+3 ] && continue
        pids=()
        for i in $(seq 1 "$n"); do
          ip netns exec pb iperf3 -s -1 -p $((5300 + i)) >/dev/null 2>&1 &
        done
        for i in $(seq 1 "$n"); do wait_listen pb $((5300 + i)); done
        for i in $(seq 1 "$n"); do
          ip netns exec pa iperf3 -c 10.79.0.2 -p $((5300 + i)) -t "$DURATION" -f g \
            >"$out/pairs/$MTU-$n-$i-$rep.tcp" 2>&1 &
          pids+=($!)
        done
        wait "${pids[@]}"
        echo "TCPPAIRS $MTU $cfg $(aggregate "$n" tcp '/receiver$/ { for (k = 1; k < NF; k++) if ($(k + 1) == "Gbits/sec") print $k }')" | tee -a "$res"
      done
    done
    cleanup
  done
  echo
  echo "Natively on this host on $(date +%F): $machine; 64 KiB RDMA WRITE, ${DURATION} s, median of $REPEAT"
  awk "$MED"'
    $1 == "PAIRS" && $4 != "FAILED" { k = $2 " " $3; n[k]++; v[k, n[k]] = $4 + 0; mtus[$2] = 1 }
    $1 == "PAIRS" && $4 == "FAILED" { failed[$2 " " $3]++ }
    $1 == "TCPPAIRS" && $4 != "FAILED" { k = "tcp " $2 " " $3; n[k]++; v[k, n[k]] = $4 + 0 }
    function median(k) { return med(v, n, k) + 0 }
    END {
      print "| MTU   | pairs       | aggregate Gb/s | per pair Gb/s | total / 1 pair | failed runs | TCP pairs Gb/s | TCP total / 1 pair |"
      print "|-------|-------------|----------------|---------------|----------------|-------------|----------------|--------------------|"
      for (m in mtus) {
        one = median(m " 1"); tone = median("tcp " m " 1")
        split("1 2 4 1+3", cfgs, " ")
        for (c = 1; c <= 4; c++) {
          p = cfgs[c]; t = median(m " " p); np = p + 0; tt = median("tcp " m " " p)
          printf "| %-5s | %-11s | %-14.3g | %-13.3g | %-14s | %-11d | %-14s | %-18s |\n", m, (p == "1+3" ? "1 (+3 idle)" : p), t, t / np, (one > 0 ? sprintf("%.2fx", t / one) : "-"), failed[m " " p] + 0, (tt > 0 ? sprintf("%.3g", tt) : "-"), (tt > 0 && tone > 0 ? sprintf("%.2fx", tt / tone) : "-")
        }
      }
    }' "$res" | tee "$out/pairs-table.md"
  exit 0
fi

if [ "$what" != host ]; then
  rm -rf "$out/vm" "$out"/vm-* "$out/vm.log"
  echo "[bench] rxe VM: MTUs $MTUS, ${DURATION} s per bandwidth run (TCG: emulated figures)"
  "$root/tests/interop/rxe-vm/run.sh" --timeout 3000 "$root/scripts/bench/guest.sh" "$out/vm" "$F" "$MTUS" "$DURATION" "$REPEAT" "$root/scripts/bench/lib.sh" >"$out/vm.log" 2>&1
  echo "[bench] VM exit $?"
  grep -E '^(guest:|RESULT|CPU )' "$out/vm/console.log" | tee "$out/vm-results.txt"
  table "In the rxe VM (emulated: qemu TCG, 2 vCPUs) on $(date +%F), host: $machine" "$out/vm-results.txt" | tee "$out/vm-table.md"
  cpu_table "CPU cost in the rxe VM (busy seconds of both vCPUs per GB moved; lower is better)" "$out/vm-results.txt" | tee -a "$out/vm-table.md"
fi

if [ "$what" != vm ]; then
  echo "[bench] natively on this host: ferroce <-> ferroce and iperf3 between netns ba and bb"
  rm -rf "$out"/host-* "$out/host"
  res=$out/host-results.txt; : >"$res"
  cleanup() { ip netns del ba 2>/dev/null; ip netns del bb 2>/dev/null; true; }
  cleanup; trap cleanup EXIT
  wait_port() { for _ in $(seq 1 100); do ip netns exec "$2" ss -ltn | grep -q ":$1\b" && return 0; sleep 0.05; done; return 1; }
  (
    OUT=$out/host D=$DURATION R=$REPEAT; mkdir -p "$OUT/logs"
    . "$root/scripts/bench/lib.sh"
    for MTU in $MTUS; do
      veth_pair ba bb "$MTU" 10.78.0
      bench "$MTU" ferroce-ferroce bb "ferroce vbb" ba "ferroce vba" 10.78.0.2
      # The same tests with Debian's perftest on ferroce's libibverbs: what the C ABI costs.
      if [ -f "$(dirname "$F")/libibverbs.so" ] && command -v ib_write_bw >/dev/null; then
        gid() { ip netns exec "$1" "$F" devinfo -d "$2" -v | sed -n "s/.*GID\[ *\([0-9]*\)\]:.*::ffff:$3,.*/\1/p" | head -1; }
        bench "$MTU" cabi-cabi bb "cabi vbb $(gid bb vbb 10.78.0.2)" ba "cabi vba $(gid ba vba 10.78.0.1)" 10.78.0.2
      else
        echo "[bench] no perftest on the library at MTU $MTU: needs $(dirname "$F")/libibverbs.so and ib_write_bw (Debian perftest)" >&2
      fi
      iperf "$MTU" bb ba 10.78.0.2
      udp_pingpong "$MTU" bb ba 10.78.0.2
      cleanup
    done
  ) | tee -a "$res"
  table "Natively on this host (no rxe in its kernel) on $(date +%F): $machine" "$res" | tee "$out/host-table.md"
  cpu_table "CPU cost natively (both ends on this host: busy seconds of all CPUs per GB moved; lower is better)" "$res" | tee -a "$out/host-table.md"
fi
