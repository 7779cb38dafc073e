#!/bin/bash
# A long `ferroce probe fuzz` campaign against Linux rxe, in the project's VM
# (tests/interop/rxe-vm), that goes on when a round panics the kernel. rxe runs in the
# same kernel as the probe and its programs, so a panic takes the whole VM down, and with
# it the fuzzer's own minimizing: this host-side loop boots a fresh VM and carries on,
# keeps the round that was in flight (the fuzzer journals each round to disk before
# sending it), and cuts it down by replaying parts of it in fresh VMs, one boot per try.
#
#   campaign.sh fuzz FERROCE_BINARY SECONDS OUTDIR [SLICE]
#       SECONDS of fuzzing in all (boot and reboot time not counted), in slices of SLICE
#       seconds (default 600) through ib_write_bw, ib_read_bw, ib_atomic_bw in turn;
#       CAMPAIGN_SEED (default 1) is slice 0's seed, slice i's is CAMPAIGN_SEED + i.
#   campaign.sh minimize FERROCE_BINARY FILE VIA OUTDIR
#       cut one panicking round down alone (FILE as the fuzzer journals a round: the
#       packets it sent, none received; e.g. a crash's in-flight.pcapng).
#
# fuzz writes OUTDIR/boot-NN/ (the VM's console and the slices' logs), OUTDIR/crashes/
# (crash-K.pcapng: the round in flight at the panic; crash-K.txt: the panic; crash-K-min.pcapng
# for the first crash of each signature, if it reproduces), and prints a table: per
# program, seconds, rounds, rounds/s and findings; then each crash. Exit 0 when the
# campaign ran its SECONDS (crashes are findings, reported, not failures), 1 if it could
# not (a VM that never ran its script, a slice that did not start).
# minimize prints "minimal: crash reproduced with packets LIST of N" (exit 0), or says
# that it did not reproduce in a fresh VM (exit 1).
set -u
here=$(cd "$(dirname "$0")" && pwd)
tests=$(cd "$here/.." && pwd)
vmrun=${CAMPAIGN_VMRUN:-$tests/interop/rxe-vm/run.sh}   # (a stand-in in tests/probe/campaign-test.sh)
guest=$here/campaign-guest.sh

# How the kernel starts reporting what took it down.
first_report='BUG: |general protection fault|kernel BUG at |Oops: '
# The panic in a boot's console: its one-line signature ("BUG title @ function") or "".
signature() {
  local con=$1/console.log title fn
  grep -q 'Kernel panic - not syncing' "$con" 2>/dev/null || return 0
  title=$(tr -d '\r' <"$con" | grep -m1 -oE "($first_report).*" | sed 's/, address: .*//; s/ *$//')
  fn=$(grep -m1 -oE 'RIP: 0010:[A-Za-z0-9_.]+' "$con" | sed 's/RIP: 0010://')
  echo "${title:-panic} @ ${fn:-?}"
}
# The panic's lines, from its first report to "Kernel panic".
panic_text() {
  tr -d '\r' <"$1/console.log" | awk -v start="$first_report|Kernel panic" '$0 ~ start {on = 1} on {print} /Kernel panic - not syncing/ {exit}'
}

# One VM boot replaying FILE through VIA; prints the panic's signature ("" if none).
replay_boot() {
  local file=$1 via=$2 dir=$3
  "$vmrun" --timeout 600 "$guest" "$dir" "$tests" "$F" replay "$file" "$via" >"$dir.log" 2>&1
  signature "$dir"
}

# Cuts FILE (a round that panicked with signature SIG) down: each packet alone first (one
# packet is the usual culprit), else dropping packets one by one while it still panics.
# Writes OUT.pcapng and prints "packets LIST of N", or prints nothing if FILE does not
# panic a fresh VM the same way.
minimize() {
  local file=$1 via=$2 sig=$3 work=$4 out=$5 confirmed=${6:-} n k all keep try s
  mkdir -p "$work"
  n=$("$F" decode "$file" 2>/dev/null | sed -n 's/^\([0-9]*\) frames:.*/\1/p')
  [ "${n:-0}" -ge 1 ] || return 0
  if [ -z "$confirmed" ]; then
    s=$(replay_boot "$file" "$via" "$work/confirm")
    echo "  [minimize] whole round ($n packets) in a fresh VM: ${s:-no panic}" >&2
    [ "$s" = "$sig" ] || return 0
  fi
  all=$(seq -s, 1 "$n") keep=$all
  if [ "$n" -gt 1 ]; then
    for k in $(seq 1 "$n"); do
      "$F" probe cut "$file" --keep "$k" -o "$work/only-$k.pcapng" >/dev/null || continue
      s=$(replay_boot "$work/only-$k.pcapng" "$via" "$work/only-$k")
      echo "  [minimize] packet $k alone: ${s:-no panic}" >&2
      if [ "$s" = "$sig" ]; then keep=$k; break; fi
    done
  fi
  if [ "$keep" = "$all" ] && [ "$n" -gt 1 ]; then
    for k in $(seq "$n" -1 1); do
      try=$(echo "$keep" | tr , '\n' | grep -vx "$k" | paste -sd,)
      [ -n "$try" ] || continue
      "$F" probe cut "$file" --keep "$try" -o "$work/try-$k.pcapng" >/dev/null || continue
      s=$(replay_boot "$work/try-$k.pcapng" "$via" "$work/try-$k")
      echo "  [minimize] without packet $k: ${s:-no panic}" >&2
      [ "$s" = "$sig" ] && keep=$try
    done
  fi
  "$F" probe cut "$file" --keep "$keep" -o "$out" >/dev/null && echo "packets $keep of $n"
}

MODE=${1:-}
case $MODE in
minimize)
  F=${2:?usage: campaign.sh minimize FERROCE_BINARY FILE VIA OUTDIR} FILE=${3:?} VIA=${4:?} OUTDIR=${5:?}
  F=$(cd "$(dirname "$F")" && pwd)/$(basename "$F"); FILE=$(cd "$(dirname "$FILE")" && pwd)/$(basename "$FILE")
  mkdir -p "$OUTDIR"; OUTDIR=$(cd "$OUTDIR" && pwd)
  s=$(replay_boot "$FILE" "$VIA" "$OUTDIR/first")
  if [ -z "$s" ]; then echo "minimize: $FILE did not panic a fresh VM"; exit 1; fi
  echo "minimize: $FILE panics the VM: $s"
  r=$(minimize "$FILE" "$VIA" "$s" "$OUTDIR/tries" "$OUTDIR/minimal.pcapng" confirmed)
  if [ -z "$r" ]; then echo "minimize: no smaller file could be written"; exit 1; fi
  echo "minimal: crash reproduced with $r -> $OUTDIR/minimal.pcapng"
  "$F" decode "$OUTDIR/minimal.pcapng" | sed 's/^/    /'
  exit 0 ;;
fuzz) ;;
*) sed -n '2,26p' "$0"; exit 2 ;;
esac

F=${2:?usage: campaign.sh fuzz FERROCE_BINARY SECONDS OUTDIR [SLICE]} TOTAL=${3:?} OUTDIR=${4:?}
SLICE=${5:-600} SEED0=${CAMPAIGN_SEED:-1}
F=$(cd "$(dirname "$F")" && pwd)/$(basename "$F")
mkdir -p "$OUTDIR/crashes"; OUTDIR=$(cd "$OUTDIR" && pwd)
stats=$OUTDIR/slices.tsv   # slice via seed seconds rounds packets findings how-it-ended
printf 'slice\tvia\tseed\tseconds\trounds\tpackets\tfindings\tend\n' >"$stats"
echo "campaign: $TOTAL s of fuzzing Linux rxe, slices of $SLICE s, seeds from $SEED0; $("$F" --version)"
used=0 next=0 boot=0 crashes=0 bad=0 t_start=$(date +%s)
declare -A seen
while [ $((TOTAL - used)) -ge 30 ]; do
  boot=$((boot + 1)); dir=$OUTDIR/boot-$(printf %02d $boot)
  budget=$((TOTAL - used))
  "$vmrun" --timeout $((budget + 1800)) "$guest" "$dir" "$tests" "$F" fuzz "$budget" "$SLICE" "$SEED0" "$next" >"$dir.log" 2>&1
  rc=$?
  sig=$(signature "$dir")
  started=0
  # Account each slice this boot started.
  while read -r what t i via seed; do
    [ "$what" = start ] || continue
    started=$((started + 1))
    log=$dir/slice-$i.log
    read -r end erc < <(awk -v i="$i" '$1 == "end" && $3 == i {print $2, $4}' "$dir/slices")
    sum=$(grep -m1 '^fuzz: [0-9]* rounds' "$log" 2>/dev/null)
    nfind=$(grep -c '^FINDING' "$log" 2>/dev/null)
    if [ -n "$end" ]; then
      secs=$((end - t)) rounds=$(echo "$sum" | awk '{print $2}')
      packets=$(echo "$sum" | awk '{print $4}')
      how=done; case $erc in 0|1) ;; *) how=fuzz-exit-$erc; bad=1 ;; esac
    else
      # Cut short: the journal says which round was in flight, its file's time when.
      jf=$dir/slice-$i/in-flight.pcapng
      rounds=$(grep -aoE 'in flight: round [0-9]+' "$jf" 2>/dev/null | awk '{print $4}' | tail -1)
      rounds=${rounds:-0}
      secs=0; [ -f "$jf" ] && secs=$(( $(stat -c %Y "$jf") - t ))
      packets=$(grep -oE '^round [0-9]+: [0-9]+ packets' "$log" 2>/dev/null | tail -1 | awk '{print $3}')
      how=${sig:+panic}; how=${how:-vm-exit-$rc}
      if [ -n "$sig" ] && [ -f "$jf" ]; then
        crashes=$((crashes + 1)); c=$OUTDIR/crashes/crash-$crashes
        cp "$jf" "$c.pcapng"; panic_text "$dir" >"$c.txt"
        echo "$via" >"$c.via"; echo "$sig" >"$c.sig"
        echo "campaign: crash $crashes in slice $i ($via, seed $seed, round $rounds): $sig"
        if [ -z "${seen[$sig]:-}" ]; then
          seen[$sig]=$crashes
          r=$(minimize "$c.pcapng" "$via" "$sig" "$c-tries" "$c-min.pcapng")
          echo "${r:-did not reproduce in a fresh VM}" >"$c.min"
          echo "campaign: crash $crashes minimized: ${r:-did not reproduce in a fresh VM}"
        else
          echo "same as crash ${seen[$sig]}" >"$c.min"
        fi
      fi
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$i" "$via" "$seed" "$secs" "${rounds:-0}" "${packets:-0}" "$nfind" "$how" >>"$stats"
    used=$((used + secs)) next=$((i + 1))
  done < <(cat "$dir/slices" 2>/dev/null)
  echo "campaign: boot $boot: exit $rc, $started slices, ${sig:-no panic}; $used of $TOTAL s fuzzed"
  if [ "$started" = 0 ]; then
    echo "campaign: boot $boot started no slice (see $dir/console.log)"; bad=1; break
  fi
done
wall=$(( $(date +%s) - t_start ))
echo
echo "campaign: $boot boots, $used s of fuzzing in $wall s of wall time"
awk -F'\t' 'NR > 1 { s[$2] += $4; r[$2] += $5; p[$2] += $6; f[$2] += $7; c[$2] += ($8 == "panic");
                     S += $4; R += $5; P += $6; Fi += $7; C += ($8 == "panic") }
  END { printf "| program | seconds | rounds | rounds/s | packets | packets/s | fuzzer findings | kernel panics |\n"
        printf "|---|---:|---:|---:|---:|---:|---:|---:|\n"
        for (v in s) printf "| %s | %d | %d | %.2f | %d | %.1f | %d | %d |\n", v, s[v], r[v], r[v] / (s[v] ? s[v] : 1), p[v], p[v] / (s[v] ? s[v] : 1), f[v], c[v]
        printf "| all | %d | %d | %.2f | %d | %.1f | %d | %d |\n", S, R, R / (S ? S : 1), P, P / (S ? S : 1), Fi, C }' "$stats"
for c in $(ls "$OUTDIR"/crashes/crash-*.sig 2>/dev/null | sort -V); do
  b=${c%.sig}
  echo "crash $(basename "$b" | sed 's/crash-//'): $(cat "$b.sig") via $(cat "$b.via"); minimal: $(cat "$b.min")"
done
grep -h '^FINDING' "$OUTDIR"/boot-*/slice-*.log 2>/dev/null | sort | uniq -c | sed 's/^/fuzzer finding: /'
[ "$bad" = 0 ]
