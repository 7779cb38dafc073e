#!/bin/bash
# Guest side of tests/system.sh: runs inside the rxe VM the parts the host cannot.
#   guest.sh TESTS_DIR FERROCE_BINARY MODE PARTS [LIBDIR]
#     PARTS: "interop", "netns", "dcqcn", comma-separated; "rxelib" and "rdmacore" run only
#       one step of interop (the Debian programs on ferroce's library against rxe,
#       rxe_libibverbs.sh and rxe_rdmacm.sh; rdma-core's test suite on rxe and ferroce, rxe_rdma_core.sh);
#       "probe" runs `ferroce probe conformance` against rxe (tests/probe/conformance.sh);
#       "fuzz" a short `ferroce probe fuzz` run against rxe (45 s per program,
#       tests/probe/fuzz.sh), "fuzzlong" a long one (FUZZ_SECS, default 1200 s per program)
#     LIBDIR: the directory holding the libibverbs.so.1 (and librdmacm.so.1) that interop's programs run on
#       through `ferroce exec` (FERROCE_LIBDIR); without it, the library next to
#       FERROCE_BINARY, whose ferroce-lib/ symlink must exist already (/ is read-only here)
# (run.sh copies this script into the output directory, so the tests' own path is passed in.)
tests=$1 F=$2 MODE=$3 PARTS=$4 LIBDIR=${5:-}
# The guest mounts scratch file systems over /tmp and friends; the host's whole root stays
# visible under /run/hostroot, so a checkout or binary there (e.g. a clone in /tmp) is
# reached through it.
# (Only the harness and the output directory are put back at their own paths, so check
# for the files themselves, not their directories.)
[ -f "$tests/netns/run.sh" ] || tests=/run/hostroot$tests
[ -x "$F" ] || F=/run/hostroot$F
if [ ! -f "$tests/netns/run.sh" ] || [ ! -x "$F" ]; then echo "guest: cannot see $tests or $F"; exit 1; fi
# (A LIBDIR that cannot be seen is left as it is: the programs then fail, saying so.)
[ -z "$LIBDIR" ] || [ -d "$LIBDIR" ] || [ ! -d "/run/hostroot$LIBDIR" ] || LIBDIR=/run/hostroot$LIBDIR
rc=0
# Each section's header, after the time the one before it took (the VM is most of CI's
# run time; this says where it goes).
section_name="" section_t0=0
section() {
  local now; now=$(date +%s)
  [ -z "$section_name" ] || echo "===== $section_name took $((now - section_t0)) s ====="
  section_name=${1%%:*} section_t0=$now
  [ -z "$1" ] || echo "===== $1 ====="
}
case ",$PARTS," in *,netns,*)
  section "netns: ferroce <-> ferroce over veth, with netem"
  bash "$tests/netns/run.sh" "$F" || rc=1 ;;
esac
case ",$PARTS," in *,dcqcn,*)
  section "dcqcn: two ferroce flows through an htb + RED ECN bottleneck"
  OUT=${OUT:-.} bash "$tests/dcqcn/run.sh" "$F" "$(dirname "$F")/examples/dcqcn_report" || rc=1 ;;
esac
case ",$PARTS," in *,interop,*)
  section "interop: ferroce <-> Linux rxe"
  bash "$tests/interop/rxe_pingpong.sh" "$F" "$MODE" || rc=1
  section "perftest: ferroce perf <-> perftest on Linux rxe"
  bash "$tests/interop/rxe_perftest.sh" "$F" "$MODE" || rc=1
  section "rxe-cm: ferroce's connection manager <-> rdma_cm on rxe (ucmatose)"
  bash "$tests/interop/rxe_cm.sh" "$F" || rc=1
esac
case ",$PARTS," in *,interop,*|*,rxelib,*)
  section "rxe-libibverbs: the same rdma-core programs on ferroce's libibverbs and on rxe"
  FERROCE_LIBDIR=$LIBDIR bash "$tests/interop/rxe_libibverbs.sh" "$F" "$MODE" || rc=1
  section "rxe-rdmacm: the same rdma_cm programs on ferroce's librdmacm and on rxe"
  FERROCE_LIBDIR=$LIBDIR bash "$tests/interop/rxe_rdmacm.sh" "$F" || rc=1 ;;
esac
case ",$PARTS," in *,interop,*|*,rdmacore,*)
  section "rdma-core-rxe: rdma-core's test suite on rxe and on ferroce's libibverbs"
  FERROCE_LIBDIR=$LIBDIR bash "$tests/interop/rxe_rdma_core.sh" "$F" || rc=1 ;;
esac
case ",$PARTS," in *,probe,*)
  section "probe-rxe: ferroce probe conformance against Linux rxe"
  OUT=${OUT:-.} bash "$tests/probe/conformance.sh" "$F" rxe || rc=1 ;;
esac
case ",$PARTS," in *,fuzz,*)
  section "probe-fuzz-rxe: ferroce probe fuzz against Linux rxe"
  OUT=${OUT:-.} bash "$tests/probe/fuzz.sh" "$F" rxe 45 || rc=1 ;;
esac
case ",$PARTS," in *,fuzzlong,*)
  section "probe-fuzz-rxe: a long ferroce probe fuzz run against Linux rxe"
  FUZZ_SEED=${FUZZ_SEED:-7} OUT=${OUT:-.} bash "$tests/probe/fuzz.sh" "$F" rxe "${FUZZ_SECS:-1200}" || rc=1 ;;
esac
section ""
exit $rc
