#!/bin/bash
# Open MPI (Debian's openmpi-bin, with mpi4py) over UCX or libfabric on ferroce's libraries, between
# two network namespaces standing in for two hosts: mpirun runs in mpi-a under
# `ferroce exec` and starts its daemon in mpi-b as `ferroce exec -- orted` (its launch
# agent) through tests/netns/mpi_agent.sh, an `ip netns exec` in place of ssh. tests/netns/mpi_check.py is the program: ping-pong between rank 0 (in
# mpi-a) and the last rank (in mpi-b) at 8 B, 64 KiB and 1 MiB, a 64 KiB all-to-all and an
# allreduce, every byte checked.
#   mpi-rc          2 ranks, --mca pml ucx, UCX_TLS=rc,self: RDMA over RC (UD for wire-up),
#                   on every device UCX is offered (no UCX_NET_DEVICES, as users run it)
#   mpi-ud          2 ranks, UCX_TLS=ud,self: everything over UD
#   mpi-4-ranks     2 ranks per namespace, UCX_TLS=rc,sm,self: shared memory within a
#                   namespace, RoCE between them
#   mpi-ofi-rxm     2 ranks, --mca pml cm --mca mtl ofi, FI_PROVIDER='verbs;ofi_rxm':
#                   libfabric's verbs provider in place of UCX (RC connections by rdma_cm)
# Each PASSes on rank 0's lines all ok, ranks in both namespaces on ferroce's library,
# mpirun's exit 0, and the echoed ping-pong data (34 MB) counted in mpi-a's eth1 rx_bytes:
# it crossed the veth, not shared memory.
#   tests/netns/mpi.sh [FERROCE_BINARY]   (needs root: namespaces, veth, mounts)
# Prints PASS/FAIL lines and "mpi: N passed, M failed"; exit 0 iff all pass.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh" "$@"
A=mpi-a B=mpi-b IF=eth1
out=${OUT:-$root/target}/mpi; rm -rf "$out"; mkdir -p "$out"
pass=0 fail=0
if ! command -v mpirun >/dev/null || ! /usr/bin/python3 -c 'import mpi4py' 2>/dev/null; then
  echo "FAIL mpi-installed: needs mpirun and mpi4py (Debian packages openmpi-bin, python3-mpi4py)"
  echo "mpi: 0 passed, 1 failed"; exit 1
fi
two_hosts $A $B $IF 10.89.0
echo "ferroce: $("$F" --version); $(mpirun --version | head -1)"
nsa=$(ip netns exec $A readlink /proc/self/ns/net) nsb=$(ip netns exec $B readlink /proc/self/ns/net)
lib=$(cd "$(dirname "$F")" && pwd)/libibverbs.so
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# NAME NP UCX_TLS: mpirun in A with NP ranks, half of them in each namespace, with the
# PML (MCA arguments) given: UCX's unless the caller sets another.
PML=(--mca pml ucx)
run() {
  local name=$1 np=$2 tls=$3 e=$out/$1
  printf 'localhost slots=%s\n%s slots=%s\n' $((np / 2)) $B $((np / 2)) >"$out/hosts"
  local rx0; rx0=$(ip netns exec $A cat /sys/class/net/$IF/statistics/rx_bytes)
  ip netns exec $A timeout 120 "$F" exec -- mpirun --hostfile "$out/hosts" -np "$np" \
    --mca plm_rsh_agent "$here/mpi_agent.sh" --launch-agent "$F exec -- orted" \
    "${PML[@]}" --mca btl ^openib,uct,tcp \
    -x UCX_TLS="$tls" /usr/bin/python3 "$here/mpi_check.py" >"$e" 2>&1; local rc=$?
  local rx=$(($(ip netns exec $A cat /sys/class/net/$IF/statistics/rx_bytes) - rx0))
  local ranks_a ranks_b results bads
  ranks_a=$(grep '^rank ' "$e" | grep -F "$lib" | grep -cF ": $nsa ")
  ranks_b=$(grep '^rank ' "$e" | grep -F "$lib" | grep -cF ": $nsb ")
  results=$(grep -cE '^(pingpong .*data ok|alltoall .*: ok|allreduce: ok)$' "$e")
  bads=$(grep -c 'BAD' "$e")
  # Echoes that rank 0 received: 200 x (8 B + 64 KiB) + 20 x 1 MiB.
  local least=$((200 * (8 + 65536) + 20 * 1048576))
  if [ $rc = 0 ] && [ "$ranks_a" = $((np / 2)) ] && [ "$ranks_b" = $((np / 2)) ] && [ "$results" = 5 ] && [ "$bads" = 0 ] && [ $rx -ge $least ]; then
    ok "$name" "$(grep -E '^pingpong (8|1048576) B' "$e" | sed 's/, data ok//' | paste -sd ';'); $rx bytes in on $A's $IF"
  else
    ko "$name" "mpirun exit $rc, ranks on ferroce: $ranks_a in $A and $ranks_b in $B of $((np / 2)) each, $results of 5 results ok, $bads BAD, $rx bytes in on $A's $IF (at least $least)" "$e"
  fi
}
run mpi-rc 2 rc,self
run mpi-ud 2 ud,self
run mpi-4-ranks 4 rc,sm,self
PML=(--mca pml cm --mca mtl ofi -x "FI_PROVIDER=verbs;ofi_rxm")
run mpi-ofi-rxm 2 rc,self

echo "mpi: $pass passed, $fail failed"
[ $fail = 0 ]
