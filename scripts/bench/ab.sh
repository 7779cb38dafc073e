#!/bin/bash
# Two (or more) ferroce builds in alternating runs: a change's effect on this host's
# swinging figures, measured against the build before in the same minutes.
#
#   sudo scripts/bench/ab.sh [-n ROUNDS] [-m MTU] [-s SIZE] [-D SECONDS] BINARY BINARY...
#
# Defaults: 4 rounds, veth MTU 1500, 64 KiB WRITEs, 6 s. Each round runs `ferroce perf
# write-bw` once per binary, in the order given, between two network namespaces on one
# veth pair (as `scripts/bench.sh host`), and prints the rate and the whole machine's
# busy CPU seconds (both ends, `/proc/stat`, set-up included) per GB moved; then each
# binary's range and median. Build the binaries first (e.g. copy `target/release/ferroce`
# aside before and after the change). Needs root (network namespaces).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=4 MTU=1500 SIZE=65536 DUR=6
while getopts n:m:s:D: o; do
  case $o in
    n) ROUNDS=$OPTARG ;; m) MTU=$OPTARG ;; s) SIZE=$OPTARG ;; D) DUR=$OPTARG ;;
    *) echo "usage: scripts/bench/ab.sh [-n ROUNDS] [-m MTU] [-s SIZE] [-D SECONDS] BINARY BINARY..." >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 2 ] || { echo "scripts/bench/ab.sh: give two or more ferroce binaries to compare" >&2; exit 2; }
for b in "$@"; do
  [ -x "$b" ] || { echo "scripts/bench/ab.sh: $b is not an executable ferroce binary" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "scripts/bench/ab.sh needs root (network namespaces); run it with sudo" >&2; exit 2; }
. "$root/scripts/bench/lib.sh"   # row, cpu_busy, veth_pair
out=""
cleanup() { ip netns del aba 2>/dev/null || true; ip netns del abb 2>/dev/null || true; [ -z "$out" ] || rm -rf "$out"; }
trap cleanup EXIT
cleanup
out=$(mktemp -d)
veth_pair aba abb "$MTU" 10.82.0
sleep 1
hz=$(getconf CLK_TCK)
echo "| round | binary | Gb/s | CPU s per GB |"
echo "| ---: | --- | ---: | ---: |"
for r in $(seq 1 "$ROUNDS"); do
  k=0
  for F in "$@"; do
    k=$((k + 1))
    ip netns exec abb "$F" perf write-bw -d vabb -p 18991 >"$out/server" 2>&1 &
    server=$!
    sleep 0.5
    c0=$(cpu_busy)
    ip netns exec aba "$F" perf write-bw -d vaba -s "$SIZE" -D "$DUR" --report_gbits -p 18991 \
      10.82.0.2 >"$out/client" 2>&1 || true
    c1=$(cpu_busy)
    wait "$server" || true
    g=$(row "$out/client" | awk '{ print $4 }')
    s=$(awk -v a="$c0" -v b="$c1" -v hz="$hz" -v g="${g:-0}" -v d="$DUR" \
      'BEGIN { if (g + 0 > 0) printf "%.3f", (b - a) / hz / (g * d / 8); else print "FAILED" }')
    echo "| $r | $k: $F | ${g:-FAILED} | $s |"
    echo "$k ${g:-FAILED} $s" >>"$out/all"
    sleep 0.5
  done
done
echo
echo "| binary | Gb/s (median) | CPU s per GB (median) |"
echo "| --- | --- | --- |"
k=0
for F in "$@"; do
  k=$((k + 1))
  awk -v k="$k" -v f="$F" '
    function med(a, n,   i, j, t) {
      for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    $1 == k && $2 != "FAILED" { n++; g[n] = $2 + 0; c[n] = $3 + 0 }
    END {
      if (!n) { printf "| %d: %s | all failed | |\n", k, f; exit }
      lo = g[1]; hi = g[1]; clo = c[1]; chi = c[1]
      for (i = 1; i <= n; i++) { if (g[i] < lo) lo = g[i]; if (g[i] > hi) hi = g[i]; if (c[i] < clo) clo = c[i]; if (c[i] > chi) chi = c[i] }
      printf "| %d: %s | %s-%s (%.2f) | %s-%s (%.3f) |\n", k, f, lo, hi, med(g, n), clo, chi, med(c, n)
    }' "$out/all"
done
