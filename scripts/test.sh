#!/usr/bin/env bash
# Runs every test of ferroce, installing what the tests need first.
#
#   scripts/test.sh            format and lint checks, then all workspace tests (release
#                              and debug builds), then tests/system.sh
#
# Needs: the Rust toolchain (cargo), and root or sudo for apt-get on a machine without
# tshark (Debian package `tshark`, the independent decoder the wire tests compare against),
# a font for the DCQCN plot (`fonts-dejavu-core`), or rdma-core's libibverbs-dev,
# ibverbs-utils, librdmacm-dev, rdmacm-utils and perftest, ucx-utils, libfabric-bin, iperf3, openmpi-bin and python3-mpi4py (the C ABI's
# tests).
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

need_pkgs=""
command -v tshark >/dev/null 2>&1 || need_pkgs="$need_pkgs tshark"
# The C ABI's tests: the real header (layouts), the real library (symbols), and the
# unmodified programs that run on ferroce's libibverbs (tests/netns/libibverbs.sh).
[ -f /usr/include/infiniband/verbs.h ] || need_pkgs="$need_pkgs libibverbs-dev"
command -v ibv_rc_pingpong >/dev/null 2>&1 || need_pkgs="$need_pkgs ibverbs-utils"
# The same for librdmacm: its header and library, and its example programs (rping,
# ucmatose, udaddy, rdma_server/rdma_client; tests/netns/rdmacm.sh).
[ -f /usr/include/rdma/rdma_cma.h ] || need_pkgs="$need_pkgs librdmacm-dev"
command -v rping >/dev/null 2>&1 || need_pkgs="$need_pkgs rdmacm-utils"
command -v ib_write_bw >/dev/null 2>&1 || need_pkgs="$need_pkgs perftest"
# qperf's RC tests over rdma_cm (-cm1: its only way onto RoCE; tests/netns/rdmacm.sh).
command -v qperf >/dev/null 2>&1 || need_pkgs="$need_pkgs qperf"
# UCX's own tools on ferroce's library (tests/netns/ucx.sh).
command -v ucx_perftest >/dev/null 2>&1 || need_pkgs="$need_pkgs ucx-utils"
# libfabric's fi_info and fi_pingpong on ferroce's library (tests/netns/libfabric.sh).
command -v fi_pingpong >/dev/null 2>&1 || need_pkgs="$need_pkgs libfabric-bin"
# iperf3 under rdma-core's librspreload.so, all its sockets rsockets (tests/netns/rsocket.sh).
command -v iperf3 >/dev/null 2>&1 || need_pkgs="$need_pkgs iperf3"
# Open MPI over UCX on ferroce's library, with an mpi4py program (tests/netns/mpi.sh).
command -v mpirun >/dev/null 2>&1 || need_pkgs="$need_pkgs openmpi-bin"
/usr/bin/python3 -c 'import mpi4py' 2>/dev/null || need_pkgs="$need_pkgs python3-mpi4py"
/usr/bin/python3 -c 'import pyverbs' 2>/dev/null || need_pkgs="$need_pkgs python3-pyverbs"
command -v objdump >/dev/null 2>&1 || need_pkgs="$need_pkgs binutils"
# A TrueType font for the DCQCN test's plot (cli/examples/dcqcn_report.rs).
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need_pkgs="$need_pkgs fonts-dejavu-core"
if [ -n "$need_pkgs" ]; then
  echo "[test] installing:$need_pkgs"
  if ! ls /var/lib/apt/lists/*_Packages >/dev/null 2>&1; then
    as_root apt-get update -qq
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need_pkgs >/dev/null
fi

# Release builds here leave out the release profile's whole-program LTO: the tests check
# optimised code without overflow checks, which LTO does not change, and linking each of
# the workspace's ~70 test binaries with it took about 15 of CI's 55 minutes (on 2 CPUs;
# 5 without). The system tests run the same build. CARGO_PROFILE_RELEASE_LTO=fat in the
# environment tests the profile as shipped instead.
export CARGO_PROFILE_RELEASE_LTO=${CARGO_PROFILE_RELEASE_LTO:-off}
echo "[test] release builds with CARGO_PROFILE_RELEASE_LTO=$CARGO_PROFILE_RELEASE_LTO"
echo "[test] cargo fmt --check (at $SECONDS s)"
cargo fmt --all -- --check
echo "[test] cargo clippy (at $SECONDS s)"
cargo clippy --workspace --all-targets --quiet -- -D warnings

log=$(mktemp)
trap 'rm -f "$log"' EXIT
passed=0 failed=0 rc=0
# cargo_test LABEL ARGS...: runs `cargo test ARGS`, adds its "test result:" lines to the
# counts; a run that fails without a failed test (a build error) counts as one failure.
cargo_test() {
  local label=$1; shift
  echo "[test] cargo test $* ($label, at $SECONDS s)"
  set +e
  cargo test "$@" 2>&1 | tee "$log"
  local r=${PIPESTATUS[0]}
  set -e
  local p f
  p=$(awk '/^test result:/ {for (i = 1; i <= NF; i++) if ($i ~ /^passed;?$/) s += $(i-1)} END {print s + 0}' "$log")
  f=$(awk '/^test result:/ {for (i = 1; i <= NF; i++) if ($i ~ /^failed;?$/) s += $(i-1)} END {print s + 0}' "$log")
  if [ "$r" != 0 ]; then rc=1; [ "$f" -gt 0 ] || f=1; fi
  echo "[test] $label: $p passed, $f failed"
  passed=$((passed + p)); failed=$((failed + f))
}
# `cargo test` does not build the C ABI's cdylib (the crate has no rlib for its tests to
# link); its symbol tests read the library, so it is built first.
cargo build --release --quiet -p ferroce-ibverbs
cargo_test release --workspace --release --no-fail-fast
# The same tests in a debug build, where overflow checks and debug_assert!s are on.
cargo build --quiet -p ferroce-ibverbs
cargo_test debug --workspace --no-fail-fast

# System tests (network namespaces, Linux rxe interop) need root; FERROCE_SKIP_SYSTEM=1
# leaves them out on a machine where they cannot run.
if [ -z "${FERROCE_SKIP_SYSTEM:-}" ]; then
  echo "[test] system tests (tests/system.sh, at $SECONDS s)"
  set +e
  tests/system.sh "${FERROCE_SYSTEM_MODE:-full}" 2>&1 | tee "$log"
  src=${PIPESTATUS[0]}
  set -e
  sp=$(sed -n 's/^system: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$log" | tail -1)
  sf=$(sed -n 's/^system: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$log" | tail -1)
  passed=$((passed + ${sp:-0})); failed=$((failed + ${sf:-1}))
  [ "$src" = 0 ] || rc=1
fi
echo
echo "[test] done in $SECONDS s"
echo "tests: $passed passed, $failed failed"
exit "$rc"
