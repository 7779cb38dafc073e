#!/bin/bash
# libfabric (Debian's libfabric1 and libfabric-bin, as they are) on ferroce's libibverbs.so.1
# and librdmacm.so.1 through `ferroce exec`, between two network namespaces joined by a
# veth pair: libfabric's verbs provider is how MPICH, Intel MPI, Open MPI's ofi layers and
# others reach RDMA devices.
#   fi_info -p verbs           an FI_EP_MSG endpoint on the veth's device (the provider finds
#                              it through rdma_cm: it binds to "localhost" and keeps only
#                              the device that bind gives, if any)
#   fi_info -p 'verbs;ofi_rxm' an FI_EP_RDM endpoint on it (RDM over MSG connections)
#   fi_pingpong                every size fi_pingpong tries, data checked (-c), over
#                              verbs MSG (rdma_cm connections, SENDs), verbs;ofi_rxm RDM
#                              (untagged and tagged), verbs DGRAM (UD) and verbs;ofi_rxd RDM
# Each server runs in lf-b (10.87.0.2), each client in lf-a (10.87.0.1); both interfaces
# are named eth1.
#   tests/netns/libfabric.sh [FERROCE_BINARY]   (needs root: namespaces, veth)
# Prints PASS/FAIL lines and "libfabric: N passed, M failed"; exit 0 iff all pass.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh" "$@"
A=lf-a B=lf-b IF=eth1 SERVER=10.87.0.2
out=${OUT:-$root/target}/libfabric; rm -rf "$out"; mkdir -p "$out"
pass=0 fail=0
if ! command -v fi_pingpong >/dev/null; then
  echo "FAIL libfabric-bin: fi_pingpong is not installed (Debian package libfabric-bin)"; echo "libfabric: 0 passed, 1 failed"; exit 1
fi
two_hosts $A $B $IF 10.87.0
echo "ferroce: $("$F" --version); $(fi_info --version | tr '\n' ' ')"

X() { local ns=$1 t=$2; shift 2; ip netns exec "$ns" timeout "$t" "$F" exec -- "$@"; }

# fi_info NAME PROVIDER TYPE: PROVIDER's list in B has a TYPE endpoint on domain eth1.
info() {
  local name=$1 prov=$2 type=$3 e=$out/$1
  X $B 30 fi_info -p "$prov" >"$e" 2>&1; local rc=$?
  # Each entry: "provider:", "fabric:", "domain:", "version:", "type:", "protocol:".
  if [ $rc = 0 ] && awk -v d="$IF" -v t="$type" '
       $1 == "domain:" { dom = $2 } $1 == "type:" && dom == d && $2 == t { found = 1 }
       END { exit !found }' "$e"; then
    ok "$name" "$prov: $type on domain $IF"
  else ko "$name" "exit $rc, no $type endpoint on domain $IF" "$e"; fi
}
info fi_info-verbs-msg verbs FI_EP_MSG
info fi_info-verbs-rxm-rdm 'verbs;ofi_rxm' FI_EP_RDM

# pingpong NAME ARGS...: fi_pingpong ARGS -c as the server in B and as the client in A.
# PASS when both exit 0 and the client printed a result row for each size (bytes, #sent,
# #ack, total, time, MB/sec, usec/xfer, Mxfers/sec).
pingpong() {
  local name=$1 port=$((47600 + pass + fail)) e=$out/$1; shift
  X $B 60 fi_pingpong -B $port -c "$@" >"$e.server" 2>&1 &
  local sp=$!
  for _ in $(seq 1 100); do ip netns exec $B ss -ltn | grep -q ":$port\b" && break; sleep 0.05; done
  X $A 60 fi_pingpong -P $port -c "$@" $SERVER >"$e.client" 2>&1; local rc=$?
  wait $sp; local src=$?
  local rows; rows=$(awk '$1 ~ /^[0-9]+[kmg]?$/ && $3 ~ /^=/' "$e.client")
  if [ $rc = 0 ] && [ $src = 0 ] && [ -n "$rows" ]; then
    ok "$name" "$(echo "$rows" | wc -l) sizes, $(echo "$rows" | head -1 | awk '{ print $1 " B " $7 " us" }') .. $(echo "$rows" | tail -1 | awk '{ print $1 " B " $6 " MB/s" }')"
  else ko "$name" "client exit $rc, server exit $src (124: timed out), $(echo -n "$rows" | grep -c .) result rows" "$e.client" "$e.server"; fi
}
pingpong pingpong-verbs-msg -p verbs -e msg -I 200
pingpong pingpong-verbs-rxm-rdm -p 'verbs;ofi_rxm' -e rdm -I 200
pingpong pingpong-verbs-rxm-rdm-tagged -p 'verbs;ofi_rxm' -e rdm -m tagged -I 200
pingpong pingpong-verbs-dgram -p verbs -e dgram -d $IF-dgram -I 200
pingpong pingpong-verbs-rxd-rdm -p 'verbs;ofi_rxd' -e rdm -d $IF-dgram -I 200

echo "libfabric: $pass passed, $fail failed"
[ $fail = 0 ]
