#!/bin/bash
# rdma-core's own test suite (Debian's python3-pyverbs, /usr/share/doc/rdma-core/tests)
# against a ferroce device: a veth end with an address in its own namespace, the suite's
# Python process on ferroce's libibverbs through `ferroce exec`. Prints a table per test
# module (passed / failed / skipped), then PASS/FAIL per module that ran a test, and
# "rdma-core: N passed, M failed" (modules); exit 0 iff no test failed. Every test's
# outcome goes to $OUT/rdma-core/results.json (table.py --compare reads it beside rxe's).
#   tests/rdma_core/run.sh [FERROCE_BINARY]        (needs root: namespaces, veth)
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
F=${1:-${CARGO_TARGET_DIR:-$root/target}/release/ferroce}
out=${OUT:-$root/target}/rdma-core; rm -rf "$out"; mkdir -p "$out"
src=/usr/share/doc/rdma-core/tests
if [ ! -f "$src/run_tests.py" ] || ! /usr/bin/python3 -c 'import pyverbs' 2>/dev/null; then
  echo "FAIL rdma-core: install Debian's python3-pyverbs (the suite and its bindings)"
  echo "rdma-core: 0 passed, 1 failed"; exit 1
fi
cp -r "$src" "$out/tests" && gunzip -f "$out"/tests/*.gz
NS=ferroce-rc
cleanup() { ip netns del $NS 2>/dev/null; ip link del rc-host 2>/dev/null; true; }
trap cleanup EXIT
cleanup
ip netns add $NS || { echo "FAIL rdma-core: cannot create a namespace (need root)"; exit 1; }
ip link add rc-host type veth peer name rc0 netns $NS
ip -n $NS addr add 10.92.0.1/24 dev rc0
ip -n $NS link set rc0 up; ip -n $NS link set lo up; ip link set rc-host up
# The suite picks GID index 0 unless told; ferroce's IPv4 GID comes after the link-local.
for _ in $(seq 1 50); do ip -n $NS -6 addr show dev rc0 | grep -q 'scope link' && ! ip -n $NS -6 addr show dev rc0 | grep -q tentative && break; sleep 0.1; done
gid=$(ip netns exec $NS "$F" devinfo -d rc0 -v 2>/dev/null | sed -n 's/.*GID\[ *\([0-9]*\)\]:.*::ffff:10\.92\.0\.1,.*/\1/p' | head -1)
ip netns exec $NS timeout 900 "$F" exec -- /usr/bin/python3 "$here/table.py" "$out/tests" --dev rc0 --gid "${gid:-1}" \
  --json "$out/results.json" >"$out/table.txt" 2>"$out/stderr.txt"
rc=$?
cat "$out/table.txt"
pass=$(grep -c '^PASS ' "$out/table.txt"); fail=$(grep -c '^FAIL ' "$out/table.txt")
if [ "$rc" != 0 ] || [ "$pass" = 0 ]; then
  echo "FAIL rdma-core: the suite did not run to the end (exit $rc); see $out/stderr.txt"; tail -5 "$out/stderr.txt"
  fail=$((fail + 1))
fi
# The tests rxe passes (rdma-core's suite in the rxe VM) that ferroce passes too must
# keep passing: must_pass.txt, one test id per line.
if [ -f "$out/results.json" ]; then
  lost=$(/usr/bin/python3 - "$out/results.json" "$here/must_pass.txt" <<'PY'
import json, sys
res = json.load(open(sys.argv[1]))["tests"]
for line in open(sys.argv[2]):
    t = line.split("#")[0].strip()
    if t and res.get(t, {}).get("status") != "passed":
        print(f"{t} ({res.get(t, {}).get('status', 'missing')}: {res.get(t, {}).get('reason', '')})")
PY
)
  n=$(grep -cv '^\s*\(#\|$\)' "$here/must_pass.txt")
  if [ -n "$lost" ]; then
    echo "FAIL rdma-core must-pass: of $n tests, these did not pass:"; echo "$lost" | sed 's/^/    /'
    fail=$((fail + 1))
  else
    echo "PASS rdma-core must-pass: all $n tests passed"; pass=$((pass + 1))
  fi
fi
echo "rdma-core: $pass passed, $fail failed"
[ "$fail" = 0 ]
