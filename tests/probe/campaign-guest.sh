#!/bin/bash
# The guest half of tests/probe/campaign.sh, run in the rxe VM by rxe-vm/run.sh (which
# sets $OUT and $RXEVM_HOME):
#   campaign-guest.sh TESTS FERROCE fuzz BUDGET SLICE SEED0 FIRST
#       fuzz rxe through its perftest servers in slices of SLICE seconds, rotating
#       write-bw, read-bw, atomic-bw, until BUDGET seconds of fuzzing are used; slice i
#       (counted from FIRST across boots) uses seed SEED0 + i and writes $OUT/slice-i/
#       (its in-flight round, reproducers) and $OUT/slice-i.log. $OUT/slices gets a
#       "start EPOCH i VIA SEED" line before each slice and "end EPOCH i RC" after, so the
#       host knows which slice a kernel panic cut short.
#   campaign-guest.sh TESTS FERROCE replay FILE VIA
#       one `ferroce probe replay` of FILE through VIA's server, watching the kernel log.
tests=$1 F=$2 MODE=$3
shift 3
[ -f "$tests/probe/lib.sh" ] || tests=/run/hostroot$tests
[ -x "$F" ] || F=/run/hostroot$F
if [ ! -f "$tests/probe/lib.sh" ] || [ ! -x "$F" ]; then echo "guest: cannot see $tests or $F"; exit 1; fi
. "$tests/probe/lib.sh"
probe_setup rxe || exit 1
case $MODE in
fuzz)
  BUDGET=$1 SLICE=$2 SEED0=$3 i=$4
  programs=(write-bw read-bw atomic-bw)
  used=0
  while [ $((BUDGET - used)) -ge 30 ]; do
    via=${programs[$((i % 3))]} seed=$((SEED0 + i))
    secs=$SLICE; [ $((BUDGET - used)) -lt "$secs" ] && secs=$((BUDGET - used))
    t0=$(date +%s)
    echo "start $t0 $i $via $seed" >>"$OUT/slices"; sync
    start_loop "$via"
    fuzz_program "$via" "$secs" "$seed" "$OUT/slice-$i" "$OUT/slice-$i.log" --kmsg
    rc=$?
    stop_loop
    t1=$(date +%s)
    echo "end $t1 $i $rc" >>"$OUT/slices"; sync
    used=$((used + t1 - t0)) i=$((i + 1))
  done ;;
replay)
  FILE=$1 VIA=$2
  [ -f "$FILE" ] || FILE=/run/hostroot$FILE
  start_loop "$VIA"
  in_ns "$PNS" "$F" probe replay "$FILE" --via "$VIA" -d "$PDEV" --connect-wait 90 --kmsg "$TIP"
  echo "replay exit $?"
  stop_loop ;;
*) echo "guest: unknown mode $MODE"; exit 2 ;;
esac
exit 0
