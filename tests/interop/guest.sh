#!/bin/bash
# Guest side of tests/system.sh: runs inside the rxe VM the parts the host cannot.
#   guest.sh TESTS_DIR FERROCE_BINARY MODE PARTS   PARTS: "interop", "netns", "dcqcn", comma-separated
# (run.sh copies this script into the output directory, so the tests' own path is passed in.)
tests=$1 F=$2 MODE=$3 PARTS=$4
# The guest mounts scratch file systems over /tmp and friends; the host's whole root stays
# visible under /run/hostroot, so a checkout or binary there (e.g. a clone in /tmp) is
# reached through it.
# (Only the harness and the output directory are put back at their own paths, so check
# for the files themselves, not their directories.)
[ -f "$tests/netns/run.sh" ] || tests=/run/hostroot$tests
[ -x "$F" ] || F=/run/hostroot$F
[ -f "$tests/netns/run.sh" ] && [ -x "$F" ] || { echo "guest: cannot see $tests or $F"; exit 1; }
rc=0
case ",$PARTS," in *,netns,*)
  echo "===== netns: ferroce <-> ferroce over veth, with netem ====="
  bash "$tests/netns/run.sh" "$F" || rc=1 ;;
esac
case ",$PARTS," in *,dcqcn,*)
  echo "===== dcqcn: two ferroce flows through an htb + RED ECN bottleneck ====="
  OUT=${OUT:-.} bash "$tests/dcqcn/run.sh" "$F" "$(dirname "$F")/examples/dcqcn_report" || rc=1 ;;
esac
case ",$PARTS," in *,interop,*)
  echo "===== interop: ferroce <-> Linux rxe ====="
  bash "$tests/interop/rxe_pingpong.sh" "$F" "$MODE" || rc=1
  echo "===== perftest: ferroce perf <-> perftest on Linux rxe ====="
  bash "$tests/interop/rxe_perftest.sh" "$F" "$MODE" || rc=1 ;;
esac
exit $rc
