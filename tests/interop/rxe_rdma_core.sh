#!/bin/bash
# rdma-core's own test suite (Debian's python3-pyverbs, /usr/share/doc/rdma-core/tests) on
# Linux rxe and on ferroce, side by side. Runs where rdma_rxe is available: inside the rxe
# VM (tests/interop/guest.sh, part "interop") or on a host whose kernel has it.
# Topology (rxe-vm's setup_peer_ns, shared with the other interop scripts): rxe0 on vethR
# 10.77.0.2 in the initial namespace, where the suite runs plain (the system libibverbs and
# its rxe provider); ferroce on vethP 10.77.0.1 in netns "peer", where the same suite runs on
# ferroce's libibverbs through `ferroce exec`. Each run uses its device alone (its tests
# talk to themselves), the same copy of the suite, one after the other.
#   rxe_rdma_core.sh FERROCE_BINARY      (normally started by tests/system.sh)
# The library is the one `ferroce exec` finds: $FERROCE_LIBDIR, else libibverbs.so next to
# FERROCE_BINARY through its ferroce-lib/ symlink (which must exist already when / is
# read-only, in the VM).
# Prints each run's totals and failures ("rdma-core-rxe: rxe (...): ..."; their tables per
# module, tests/rdma_core/table.py's, in $OUT/logs/rdma-core-rxe/{rxe,ferroce}.txt), then the
# side-by-side Markdown table (module | rxe passed / failed / skipped | ferroce passed /
# failed / skipped), every test that passes on rxe and not on ferroce with ferroce's reason
# (the skip message or the failure's last line), and per module where rxe passes a test:
#   PASS rdma-core-rxe MODULE: ... (each rxe pass passes on ferroce or is a ferroce skip)
#   FAIL rdma-core-rxe MODULE: ... (a test that passes on rxe fails on ferroce)
# and "rdma-core-rxe: N passed, M failed" (modules; a run that did not finish is a FAIL).
# Outcomes per test: $OUT/logs/rdma-core-rxe/{rxe,ferroce}.json.
# shellcheck source-path=SCRIPTDIR source=rxe-vm/guest/lib.sh disable=SC1091
. "$RXEVM_HOME/guest/lib.sh"
F=${1:?usage: rxe_rdma_core.sh FERROCE_BINARY}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
table=$here/../rdma_core/table.py
OUT=${OUT:-/tmp/ferroce-interop}
L=$OUT/logs/rdma-core-rxe
rm -rf "$L"; mkdir -p "$L"
T=${RDMA_CORE_TIMEOUT:-1500}   # time limit of each run of the suite
P=rdma-core-rxe
die() { echo "FAIL $P: $*"; echo "$P: 0 passed, 1 failed"; exit 1; }

src=/usr/share/doc/rdma-core/tests
if [ ! -f "$src/run_tests.py" ] || ! /usr/bin/python3 -c 'import pyverbs' 2>/dev/null; then
  die "install Debian's python3-pyverbs (the suite and its bindings)"
fi
if ! { cp -r "$src" "$L/tests" && gunzip -f "$L"/tests/*.gz; }; then die "cannot copy the suite to $L"; fi

if [ -d /sys/class/net/vethR ] && [ -d /sys/class/infiniband/rxe0 ]; then
  G=$(gid_index rxe0 10.77.0.2)   # set up already (by the interop scripts in the same boot)
else
  G=$(setup_peer_ns 9000) || die "setup_peer_ns failed"
fi
[ -n "$G" ] || die "rxe0 has no RoCE v2 GID for 10.77.0.2"
# ferroce's GID table holds vethP's IPv6 link-local address first once it is settled, then
# the IPv4 address: wait for it, and take the index from `ferroce devinfo -v`.
settled() { ip -n peer -6 addr show dev vethP scope link | grep -q inet6 && ! ip -n peer -6 addr show dev vethP | grep -q tentative; }
for _ in $(seq 1 100); do settled && break; sleep 0.1; done
ip netns exec peer "$F" devinfo -d vethP -v >"$L/devinfo.ferroce" 2>&1
GF=$(sed -n 's/.*GID\[ *\([0-9]*\)\]:[[:space:]]*::ffff:10\.77\.0\.1,.*/\1/p' "$L/devinfo.ferroce" | head -1)
[ -n "$GF" ] || die "ferroce devinfo -v lists no GID ::ffff:10.77.0.1 on vethP ($(head -3 "$L/devinfo.ferroce" | tr '\n' ' '))"
lib=$(readlink -e "${FERROCE_LIBDIR:-$(dirname "$F")/ferroce-lib}/libibverbs.so.1")
echo "rxe0 GID index $G, vethP GID index $GF; ferroce: $("$F" --version 2>&1); library: ${lib:-none found}; python3-pyverbs $(dpkg-query -W -f '${Version}' python3-pyverbs 2>/dev/null)"

# run NAME DEV GID CMD...: one run of the suite, CMD being how python3 is started; prints
# its totals and failures (its whole table goes to $L/NAME.txt); fails unless the suite
# ran to the end and wrote its JSON.
run() {
  local name=$1 dev=$2 gid=$3 t0=$SECONDS rc; shift 3
  "$@" "$table" "$L/tests" --dev "$dev" --gid "$gid" --json "$L/$name.json" >"$L/$name.txt" 2>"$L/$name.stderr"
  rc=$?
  echo "$P: $name ($dev, GID index $gid): $(awk '$1 == "total" { printf "%s passed, %s failed, %s skipped %s %s", $2, $3, $4, $5, $6 }' "$L/$name.txt"), suite exit $rc, $((SECONDS - t0)) s"
  # Its failures: "--- TEST" and the last line of the traceback.
  sed -n '/^--- /{N;s/\n/: /;s/^--- /    failed on '"$name"': /;p}' "$L/$name.txt"
  [ "$rc" = 0 ] && [ -s "$L/$name.json" ] && return 0
  case $rc in 124) rc="timed out after $T s" ;; *) rc="exit $rc" ;; esac
  echo "FAIL $P $name: the suite did not run to the end ($rc); see $L/$name.stderr"
  tail -n 5 "$L/$name.stderr" | sed 's/^/    stderr: /'
  return 1
}
bad=0
run rxe rxe0 "$G" timeout "$T" /usr/bin/python3 || bad=$((bad + 1))
run ferroce vethP "$GF" ip netns exec peer timeout "$T" "$F" exec -- /usr/bin/python3 || bad=$((bad + 1))
if [ $bad != 0 ]; then echo "$P: 0 passed, $bad failed"; exit 1; fi
/usr/bin/python3 "$table" --compare "$L/rxe.json" "$L/ferroce.json" --names rxe,ferroce --prefix "$P"
