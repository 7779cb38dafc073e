#!/usr/bin/env bash
# Prints the results of the parse_icrc criterion benchmark as two Markdown tables.
#
#   cargo bench -p ferroce-wire --bench parse_icrc
#   wire/benches/report.sh
#
# Reads target/criterion/<group>/<size>/new/{estimates,sample,benchmark}.json (or under
# $CARGO_TARGET_DIR). Every group's Throughput::Bytes is the same byte count, the
# ICRC-covered bytes (IP packet without its ICRC), so the ratios are throughput over raw
# crc32fast throughput. GiB/s are 2^30 bytes per second.
#
# * "typical": criterion's estimate of the time per packet (the slope, else the mean), the
#   figure `cargo bench` prints;
# * "best sample": the fastest per-iteration time among criterion's samples. On a shared
#   machine (other builds running) the typical figures swing by 2x from run to run; the best
#   sample is the one least disturbed and is stable to a few percent.
#
# Needs jq.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${CARGO_TARGET_DIR:-$root/target}/criterion
command -v jq >/dev/null || { echo "report.sh: needs jq" >&2; exit 1; }
[ -d "$dir/icrc_verify" ] || { echo "report.sh: no results in $dir; run cargo bench first" >&2; exit 1; }

typical() { jq -r '(.slope // .mean).point_estimate' "$dir/$1/$2/new/estimates.json"; }
best() { jq -r '[.iters, .times] | transpose | map(.[1] / .[0]) | min' "$dir/$1/$2/new/sample.json"; }
bytes() { jq -r '.throughput.Bytes' "$dir/$1/$2/new/benchmark.json"; }

for kind in typical best; do
    [ "$kind" = typical ] && echo "Typical (criterion estimate):" || echo "Best sample:"
    echo
    echo "| payload | ICRC-covered bytes | Frame::parse + verify_icrc | icrc::verify | crc32fast::hash | verify / raw | parse + verify / raw |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for size in 64 1024 4096; do
        b=$(bytes icrc_verify "$size")
        p=$($kind frame_parse_verify "$size")
        v=$($kind icrc_verify "$size")
        r=$($kind crc32fast_raw "$size")
        awk -v s="$size" -v b="$b" -v p="$p" -v v="$v" -v r="$r" 'BEGIN {
            g = 1e9 / 1073741824
            printf "| %d B | %d | %.2f GiB/s (%.0f ns) | %.2f GiB/s (%.0f ns) | %.2f GiB/s (%.0f ns) | %.0f %% | %.0f %% |\n",
                s, b, b / p * g, p, b / v * g, v, b / r * g, r, 100 * r / v, 100 * r / p
        }'
    done
    echo
done
