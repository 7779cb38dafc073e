#!/bin/bash
# System tests that need root and real kernel features:
#   rust    the workspace's Rust tests marked #[ignore] because they need root or an
#           Ethernet interface (`cargo test --tests -- --ignored`), on this host
#   netns   ferroce <-> ferroce in two network namespaces over veth, also under tc netem
#           (tests/netns/run.sh)
#   libibverbs  unmodified ibverbs-utils and perftest binaries on ferroce's libibverbs.so.1
#           (`ferroce exec`) between two network namespaces over veth, on this host
#           (tests/netns/libibverbs.sh); UCX's ucx_info and ucx_perftest over rc_verbs
#           (tests/netns/ucx.sh); libfabric's fi_info and fi_pingpong over its verbs
#           provider, MSG, RDM and DGRAM (tests/netns/libfabric.sh); Open MPI over UCX with ranks in two namespaces
#           (tests/netns/mpi.sh); then rdma-core's own test suite on it
#           (tests/rdma_core/run.sh); then many processes on one interface: server and
#           client on one veth end and on lo (ferroce's tools and, on the library, Debian's
#           ib_write_bw, ib_send_lat, ibv_rc_pingpong), an 8-process all-to-all mesh with
#           one SIGKILLed, and what is left behind (tests/netns/many_procs.sh); the UDP
#           GSO data path at both MTUs (tests/netns/gso.sh); RC connections made through
#           ferroce's connection manager on QP1, `ferroce ucmatose` between two namespaces,
#           within one, on lo, and refused ports (tests/netns/cm.sh); Debian's rping,
#           ucmatose, udaddy, rdma_server/rdma_client and perftest's -R on ferroce's
#           librdmacm.so.1 (tests/netns/rdmacm.sh); rsockets: rstream, rcopy, and iperf3
#           under librspreload.so (tests/netns/rsocket.sh); `ferroce probe conformance`
#           and `ferroce probe fuzz` against ferroce's own servers (tests/probe/{conformance,fuzz}.sh ferroce)
#   dcqcn   two ferroce flows through a router namespace's htb + RED ECN bottleneck, DCQCN
#           on and off: utilisation, fairness, marks not drops (tests/dcqcn/run.sh)
#   interop ferroce <-> Linux rxe with rdma-core's ibv_*_pingpong, both roles, sizes, MTUs,
#           and 1% loss (tests/interop/rxe_pingpong.sh); `ferroce perf` <-> perftest's
#           ib_*_bw / ib_*_lat, both roles (tests/interop/rxe_perftest.sh); rdma_cm's
#           ucmatose on rxe against `ferroce ucmatose`, both roles, and refused connections
#           both ways (tests/interop/rxe_cm.sh); the same
#           ibv_*_pingpong and perftest binaries on both sides, on ferroce's libibverbs
#           (`ferroce exec`) and on rxe, both roles (tests/interop/rxe_libibverbs.sh);
#           Debian's rping, ucmatose, udaddy, rstream and perftest's -R on ferroce's
#           librdmacm and on rxe's rdma_cm, both roles (tests/interop/rxe_rdmacm.sh);
#           rdma-core's own test suite on rxe and on ferroce's libibverbs, side by side:
#           a FAIL where a test passes on rxe and fails on ferroce (tests/interop/rxe_rdma_core.sh);
#           `ferroce probe conformance` and a short `ferroce probe fuzz` against Debian's
#           programs on rxe (tests/probe/conformance.sh rxe, tests/probe/fuzz.sh rxe); in
#           fresh VMs, the rxe kernel panic that probe fuzz found, cut down from its round
#           again (tests/probe/campaign.sh minimize; never on a host with rdma_rxe); the
#           campaign harness's bookkeeping with a stand-in VM (tests/probe/campaign-test.sh)
# Each runs on this host when its kernel has what it needs (netem; sch_red; rdma_rxe) and otherwise
# inside the rxe VM (Debian's Linux 6.1 under qemu, TCG when there is no KVM), where both
# share one boot.
#   tests/system.sh [quick|full]
# Ends with "system: N passed, M failed".
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
mode=${1:-full}
out=$root/target/system
rm -rf "$out"; mkdir -p "$out"
# The whole workspace's binaries and examples: the same features as `cargo test --workspace
# --release` resolves, so after scripts/test.sh's tests nothing is built again (the
# ferroce-cli package alone resolves its dependencies' features differently, and rebuilt
# the binary and the example for 1-2 minutes of CI).
(cd "$root" && cargo build --release --quiet --workspace --bins --examples) || exit 1
bin=${CARGO_TARGET_DIR:-$root/target}/release/ferroce
"$here/interop/rxe-vm/build.sh" >"$out/build.log" 2>&1 || { cat "$out/build.log"; exit 1; }

# Each step's header, with the seconds since this script began (CI's time limit is tight on
# hosts that run the VM under TCG; this says where the time goes).
step() { echo "[system] $* (at $SECONDS s)"; }

host_has_netem() {
  ip link add fer-q0 type veth peer name fer-q1 2>/dev/null || return 1
  tc qdisc add dev fer-q0 root netem loss 1% 2>/dev/null; local r=$?
  ip link del fer-q0 2>/dev/null; return $r
}
host_has_red() {
  ip link add fer-q0 type veth peer name fer-q1 2>/dev/null || return 1
  tc qdisc add dev fer-q0 root red limit 100000 min 10000 max 30000 avpkt 1000 burst 20 \
    probability 0.1 bandwidth 10mbit ecn 2>/dev/null; local r=$?
  ip link del fer-q0 2>/dev/null; return $r
}
host_has_rxe() { modprobe rdma_rxe 2>/dev/null && [ -d /sys/module/rdma_rxe ]; }

# The Rust tests that the plain `cargo test` leaves out (#[ignore = "needs root ..."]):
# one PASS/FAIL line each, counted with the rest. Doc tests are left out (--tests).
step "Rust tests marked #[ignore] (root, an interface): cargo test -- --ignored"
(cd "$root" && cargo test --workspace --release --tests -- --ignored) >"$out/rust-ignored.log" 2>&1
rrc=$?
sed -n 's/^test \(.*\) \.\.\. ok$/PASS rust \1/p; s/^test \(.*\) \.\.\. FAILED$/FAIL rust \1/p' \
  "$out/rust-ignored.log" | tee "$out/rust.txt"
if [ "$rrc" != 0 ] && ! grep -q '^FAIL ' "$out/rust.txt"; then
  echo "FAIL rust: cargo test -- --ignored exited $rrc (see $out/rust-ignored.log)" | tee -a "$out/rust.txt"
elif ! grep -q '^PASS ' "$out/rust.txt"; then
  echo "FAIL rust: no #[ignore] test ran (see $out/rust-ignored.log)" | tee -a "$out/rust.txt"
fi

vm_parts=""
if host_has_netem; then
  step "netns tests on this host"
  OUT=$out bash "$here/netns/run.sh" "$bin" | tee "$out/netns.txt"
else
  step "this kernel has no netem: netns tests go to the VM"; vm_parts="netns"
fi
# Plain veth, no netem: always on this host. The library is built here, not above, so that
# a library that does not build fails this part only.
step "libibverbs tests on this host"
# The interop part runs its programs on a copy of the library built here (FERROCE_LIBDIR),
# wherever it runs: the VM sees this host's / read-only, where `ferroce exec` could not make
# its ferroce-lib/ symlink, and a later rebuild of target/release cannot change what is
# tested. When the build fails the directory stays empty and those programs fail, saying so.
libdir=$out/lib; mkdir -p "$libdir"
if (cd "$root" && cargo build --release --quiet -p ferroce-ibverbs --lib); then
  cp "$(dirname "$bin")/libibverbs.so" "$libdir/libibverbs.so.1"
  ln -sf libibverbs.so.1 "$libdir/librdmacm.so.1"   # one library, both names
  OUT=$out bash "$here/netns/libibverbs.sh" "$bin" | tee "$out/libibverbs.txt"
  step "UCX's ucx_info and ucx_perftest on ferroce's libibverbs"
  OUT=$out bash "$here/netns/ucx.sh" "$bin" | tee "$out/ucx.txt"
  step "libfabric's verbs provider (fi_info, fi_pingpong) on ferroce's libraries"
  OUT=$out bash "$here/netns/libfabric.sh" "$bin" | tee "$out/libfabric.txt"
  step "Open MPI over UCX on ferroce's libibverbs, ranks in two namespaces"
  OUT=$out bash "$here/netns/mpi.sh" "$bin" | tee "$out/mpi.txt"
  step "rdma-core's own test suite on ferroce's libibverbs"
  OUT=$out bash "$here/rdma_core/run.sh" "$bin" | tee "$out/rdma-core.txt"
  step "the UDP GSO data path between two namespaces"
  OUT=$out bash "$here/netns/gso.sh" "$bin" | tee "$out/gso.txt"
  step "many processes on one interface (veth and lo), 8-rank mesh with a SIGKILL"
  OUT=$out bash "$here/netns/many_procs.sh" "$bin" | tee "$out/many-procs.txt"
  step "ferroce probe conformance against ferroce's own servers over a veth"
  OUT=$out bash "$here/probe/conformance.sh" "$bin" ferroce | tee "$out/probe-ferroce.txt"
  step "ferroce probe fuzz against ferroce's own servers over a veth (30 s per program)"
  OUT=$out bash "$here/probe/fuzz.sh" "$bin" ferroce 30 | tee "$out/probe-fuzz-ferroce.txt"
  step "unmodified rdma_cm programs on ferroce's librdmacm.so.1: two hosts, one host, lo"
  OUT=$out bash "$here/netns/rdmacm.sh" "$bin" | tee "$out/rdmacm.txt"
  step "rsockets (rstream, rcopy, iperf3 under librspreload.so) on ferroce's librdmacm.so.1"
  OUT=$out bash "$here/netns/rsocket.sh" "$bin" | tee "$out/rsocket.txt"
else
  echo "FAIL libibverbs: cargo build --release -p ferroce-ibverbs failed" | tee "$out/libibverbs.txt"
fi
step "connections through ferroce's connection manager (ucmatose): two hosts, one host, lo"
OUT=$out bash "$here/netns/cm.sh" "$bin" | tee "$out/cm.txt"
step "the rxe fuzz campaign's bookkeeping (a stand-in VM that panics)"
bash "$here/probe/campaign-test.sh" "$bin" | tee "$out/probe-campaign.txt"
if host_has_red && modprobe macvlan 2>/dev/null; then
  step "dcqcn test on this host"
  OUT=$out bash "$here/dcqcn/run.sh" "$bin" "$(dirname "$bin")/examples/dcqcn_report" | tee "$out/dcqcn.txt"
else
  step "this kernel has no sch_red: the dcqcn test goes to the VM"; vm_parts="${vm_parts:+$vm_parts,}dcqcn"
fi
if host_has_rxe; then
  step "this kernel has rdma_rxe: interop tests on this host"
  cleanup() { rdma link del rxe0 2>/dev/null; ip link del vethR 2>/dev/null; ip netns del peer 2>/dev/null; true; }
  cleanup
  RXEVM_HOME="$here/interop/rxe-vm" OUT=$out bash "$here/interop/rxe_pingpong.sh" "$bin" "$mode" | tee "$out/interop.txt"
  RXEVM_HOME="$here/interop/rxe-vm" OUT=$out bash "$here/interop/rxe_perftest.sh" "$bin" "$mode" | tee "$out/perftest.txt"
  RXEVM_HOME="$here/interop/rxe-vm" OUT=$out bash "$here/interop/rxe_cm.sh" "$bin" | tee "$out/rxe-cm.txt"
  FERROCE_LIBDIR=$libdir RXEVM_HOME="$here/interop/rxe-vm" OUT=$out bash "$here/interop/rxe_libibverbs.sh" "$bin" "$mode" | tee "$out/rxe-libibverbs.txt"
  FERROCE_LIBDIR=$libdir RXEVM_HOME="$here/interop/rxe-vm" OUT=$out bash "$here/interop/rxe_rdmacm.sh" "$bin" | tee "$out/rxe-rdmacm.txt"
  FERROCE_LIBDIR=$libdir RXEVM_HOME="$here/interop/rxe-vm" OUT=$out bash "$here/interop/rxe_rdma_core.sh" "$bin" | tee "$out/rdma-core-rxe.txt"
  cleanup
  RXEVM_HOME="$here/interop/rxe-vm" OUT=$out bash "$here/probe/conformance.sh" "$bin" rxe | tee "$out/probe-rxe.txt"
  cleanup
  RXEVM_HOME="$here/interop/rxe-vm" OUT=$out bash "$here/probe/fuzz.sh" "$bin" rxe 45 | tee "$out/probe-fuzz-rxe.txt"
  cleanup
else
  step "this kernel has no rdma_rxe: interop tests go to the VM"; vm_parts="${vm_parts:+$vm_parts,}interop,probe,fuzz"
fi
if [ -n "$vm_parts" ]; then
  step "booting the rxe VM for: $vm_parts"
  t0=$(date +%s)
  "$here/interop/rxe-vm/run.sh" --timeout 3000 "$here/interop/guest.sh" "$out/vm" "$here" "$bin" "$mode" "$vm_parts" "$libdir" >"$out/vm.log" 2>&1
  echo "[system] VM run: exit $?, $(( $(date +%s) - t0 )) s"
  grep -E '^(=====|PASS|FAIL|NOTE|    |interop:|netns:|perftest:|rxe-cm:|rxe-libibverbs:|rxe-rdmacm:|rdma-core-rxe:|probe-rxe:|probe-fuzz-rxe:|\||dcqcn:|rxe0|tc |counters:)' "$out/vm/console.log" | tee "$out/vm.txt"
fi
if [ -n "$vm_parts" ] && ! host_has_rxe; then
  # Never on a host with rdma_rxe: the packet panics the kernel it reaches.
  step "the rxe kernel panic found by probe fuzz, cut down again in fresh VMs"
  crash=$here/probe/findings/rxe-6.1-write-first-zero-length-round173.pcapng
  bash "$here/probe/campaign.sh" minimize "$bin" "$crash" write-bw "$out/vm-crash" >"$out/vm-crash.log" 2>&1
  if grep -q '^minimal: crash reproduced with packets 1 of 5' "$out/vm-crash.log" &&
     grep -q 'panics the VM: BUG: kernel NULL pointer dereference @ rxe_mr_copy' "$out/vm-crash.log"; then
    echo "PASS probe-crash-rxe: $(grep -m1 'panics the VM' "$out/vm-crash.log" | sed 's/.*: BUG/BUG/'), cut to packet 1 of 5" | tee "$out/probe-crash.txt"
  else
    echo "FAIL probe-crash-rxe: the recorded round did not panic rxe and cut down to its first packet" | tee "$out/probe-crash.txt"
    sed 's/^/    /' "$out/vm-crash.log" | tail -12 | tee -a "$out/probe-crash.txt"
  fi
fi
passed=$(cat "$out"/*.txt 2>/dev/null | grep -cE '^PASS ')
failed=$(cat "$out"/*.txt 2>/dev/null | grep -cE '^FAIL ')
[ "$passed" -gt 0 ] || { echo "[system] no test ran; see $out"; failed=$((failed + 1)); }
echo "system: $passed passed, $failed failed"
[ "$failed" = 0 ]
