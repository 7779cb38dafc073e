#!/bin/bash
# tests/probe/campaign.sh's own bookkeeping, without a VM: a stand-in for rxe-vm/run.sh
# (CAMPAIGN_VMRUN) plays a first boot that panics in slice 0 with the round recorded in
# tests/probe/findings (5 packets, the first one the killer), replay boots that panic
# exactly when that first packet is sent, and a second boot that fuzzes to the end. The
# campaign must save the crash, cut it to packet 1 of 5, boot again, count both slices and
# exit 0.
#   tests/probe/campaign-test.sh FERROCE_BINARY     (one PASS or FAIL line)
set -u
F=${1:?usage: campaign-test.sh FERROCE_BINARY}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/ferroce-campaign-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
cat >"$work/fake-run.sh" <<'EOF'
#!/bin/bash
# rxe-vm/run.sh's interface: [--timeout S] SCRIPT OUTDIR ARG...; the guest's work faked.
[ "$1" = --timeout ] && shift 2
dir=$2; shift 2; mkdir -p "$dir"
tests=$1 F=$2 mode=$3
findings=$tests/probe/findings
panic() { { echo "[run] fake"; cat "$findings/rxe-6.1-write-first-zero-length.panic.txt"; } >"$dir/console.log"; exit 255; }
case $mode in
replay)
  # Panics when the recorded killer (RDMA WRITE FIRST with a zero DMA length) is sent.
  echo "[run] fake" >"$dir/console.log"
  "$F" decode "$4" | grep -q 'RC_RDMA_WRITE_FIRST.*len=0 ' && panic
  echo 0 >"$dir/guest-exit-code"; exit 0 ;;
fuzz)
  budget=$4 first=$7 now=$(date +%s)
  if [ "$first" = 0 ]; then
    echo "start $((now - 40)) 0 write-bw 5" >"$dir/slices"
    mkdir -p "$dir/slice-0"
    cp "$findings/rxe-6.1-write-first-zero-length-round173.pcapng" "$dir/slice-0/in-flight.pcapng"
    touch -d "@$now" "$dir/slice-0/in-flight.pcapng"
    echo "round 150: 400 packets, 4.0 rounds/s, 0 findings" >"$dir/slice-0.log"
    panic
  fi
  echo "start $now $first read-bw 6" >"$dir/slices"
  echo "fuzz: 30 rounds, 45 packets, 61 connections in $budget.0 s (x); 1 findings; seed 6" >"$dir/slice-$first.log"
  echo "FINDING lost-liveness (round 12): no answer" >>"$dir/slice-$first.log"
  echo "end $((now + budget)) $first 1" >>"$dir/slices"
  echo "[run] fake" >"$dir/console.log"; echo 0 >"$dir/guest-exit-code"; exit 0 ;;
esac
EOF
chmod +x "$work/fake-run.sh"
CAMPAIGN_VMRUN=$work/fake-run.sh CAMPAIGN_SEED=5 bash "$here/campaign.sh" fuzz "$F" 100 "$work/out" 60 >"$work/log" 2>&1
rc=$?
fail=""
grep -q 'campaign: crash 1 in slice 0 (write-bw, seed 5, round 173): BUG: kernel NULL pointer dereference @ rxe_mr_copy' "$work/log" || fail="$fail; crash not reported"
grep -q 'campaign: crash 1 minimized: packets 1 of 5' "$work/log" || fail="$fail; not cut to packet 1 of 5"
"$F" decode "$work/out/crashes/crash-1-min.pcapng" 2>/dev/null | grep -q '^1 frames' || fail="$fail; crash-1-min.pcapng is not one packet"
cmp -s "$work/out/crashes/crash-1.pcapng" "$here/findings/rxe-6.1-write-first-zero-length-round173.pcapng" || fail="$fail; the in-flight round was not kept"
grep -q 'campaign: 2 boots, 100 s of fuzzing' "$work/log" || fail="$fail; not 2 boots and 40 + 60 s"
grep -q '^| all | 100 | 203 | ' "$work/log" || fail="$fail; rounds not 173 + 30"
grep -q '^fuzzer finding: *1 FINDING lost-liveness' "$work/log" || fail="$fail; the fuzzer's finding not listed"
[ "$rc" = 0 ] || fail="$fail; exit $rc"
if [ -z "$fail" ]; then
  echo "PASS probe-campaign-bookkeeping: a panicking boot kept, cut to its one packet, the campaign went on"
else
  echo "FAIL probe-campaign-bookkeeping:${fail#;}"
  sed 's/^/    /' "$work/log" | tail -30
fi
[ -z "$fail" ]
