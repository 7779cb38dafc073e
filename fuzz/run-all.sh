#!/usr/bin/env bash
# Runs every cargo-fuzz target of this package in turn, from its committed seed corpus, and
# prints one Markdown table row per target: name, executions, crashes, command.
#
#   fuzz/run-all.sh [SECONDS_FOR_PACKET_TARGETS [SECONDS_FOR_HEADER_TARGETS]]   (60 45)
#
# The packet targets (frame_parse, datagram_parse, ib_packet_parse, icrc_verify, gso_split)
# and the transport target responder get the first time, the header targets the second.
#
# Needs nightly and cargo-fuzz (`cargo install cargo-fuzz --locked`). Logs go to
# fuzz/target/fuzz-logs/<target>.log, crashes to fuzz/artifacts/<target>/. libFuzzer stops
# at the first crash, so a run reports 0 or 1.
set -u
cd "$(dirname "$0")"
long=${1:-60}
short=${2:-45}
logs=target/fuzz-logs
mkdir -p "$logs"
cargo +nightly fuzz build >"$logs/build.log" 2>&1 || { cat "$logs/build.log"; exit 1; }
# [[bin]] names, in manifest order.
targets=$(awk '/^\[\[bin\]\]/ {bin=1; next} bin && /^name = / {gsub(/"/, "", $3); print $3; bin=0}' Cargo.toml)
echo "| target | seconds | executions | crashes | command |"
echo "| --- | ---: | ---: | ---: | --- |"
status=0
for t in $targets; do
    case $t in
        frame_parse | datagram_parse | ib_packet_parse | icrc_verify | gso_split | responder) secs=$long ;;
        *) secs=$short ;;
    esac
    args="-max_total_time=$secs -dict=dict/roce.dict -print_final_stats=1"
    cargo +nightly fuzz run "$t" -- $args >"$logs/$t.log" 2>&1 || status=1
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$t.log" | tail -1)
    crashes=$(find "artifacts/$t" -type f 2>/dev/null | wc -l)
    echo "| \`$t\` | $secs | ${execs:-?} | $crashes | \`cargo +nightly fuzz run $t -- $args\` |"
done
exit $status
