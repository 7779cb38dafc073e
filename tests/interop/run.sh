#!/bin/bash
# Runs ferroce's interop tests against Linux rxe:
#   tests/interop/run.sh [quick|full] [OUTDIR]
# Uses the host kernel's rdma_rxe when it has one; otherwise boots Linux 6.1 with rdma_rxe
# under qemu (tests/interop/rxe-vm, adapted from the project's shared recipe), with the host's
# root shared read-only, and runs the same script inside. Needs root (namespaces, veth, tc).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mode=${1:-full}
out=${2:-$root/target/interop}
rm -rf "$out"; mkdir -p "$out"
bin=${FERROCE_BIN:-$root/target/release/ferroce}
if [ -z "${FERROCE_BIN:-}" ]; then
  (cd "$root" && cargo build --release --quiet --bin ferroce)
fi
"$here/rxe-vm/build.sh" >/dev/null   # installs qemu, rdma-core, perftest, ... when missing

if modprobe rdma_rxe 2>/dev/null && [ -d /sys/module/rdma_rxe ]; then
  echo "[interop] host kernel has rdma_rxe: running on the host"
  cleanup() { rdma link del rxe0 2>/dev/null; ip link del vethR 2>/dev/null; ip netns del peer 2>/dev/null; true; }
  trap cleanup EXIT
  cleanup
  RXEVM_HOME="$here/rxe-vm" OUT="$out" bash "$here/rxe_pingpong.sh" "$bin" "$mode" | tee "$out/summary.txt"
  exit "${PIPESTATUS[0]}"
fi
echo "[interop] no rdma_rxe in this kernel: booting the rxe VM (TCG when KVM is unavailable)"
set +e
"$here/rxe-vm/run.sh" --timeout 2400 "$here/rxe_pingpong.sh" "$out" "$bin" "$mode" >"$out/vm.log" 2>&1
rc=$?
set -e
grep -E '^(PASS|FAIL|    |interop:|rxe0|tc |counters:)' "$out/console.log" | tee "$out/summary.txt" || true
grep -q '^interop: ' "$out/summary.txt" || { echo "[interop] the VM run produced no result (exit $rc); see $out/console.log"; tail -20 "$out/console.log"; }
exit $rc
