#!/bin/bash
# rsockets (librdmacm's sockets over RDMA) on ferroce's librdmacm.so.1, with Debian's
# unmodified rdmacm-utils and rdma-core's librspreload.so, via `ferroce exec`:
#   rstream       blocking (-T b), non-blocking spinning (the default), through rpoll
#                 (-T a), each with its data checked (-T v): 1 byte (inline), 4 KiB,
#                 and 1 MiB transfers (each larger than the 128 KiB rings, so every
#                 transfer goes through many credit updates); server in rs-b, client in rs-a
#   one host      rstream with server and client on lo of one namespace
#   ipv6          rstream between the namespaces over IPv6 (fd95::/64)
#   rcopy         a 3 MiB file copied to the other host, compared byte for byte
#   preload       iperf3 (server and client) under librspreload.so: every TCP socket
#                 of the program an rsocket (its control connection and its data), 3 s;
#                 the server's counters show the bytes went by RDMA
#   hostile       a peer that lies about a data message's length, or sends a reserved
#                 message (rsocket_hostile.c): the server's connection ends, counted
#   close         rclose while another thread is blocked in rrecv on the socket: the
#                 call returns EBADF (rsocket_close.c)
#   tests/netns/rsocket.sh [FERROCE_BINARY]   (needs root: namespaces, veth)
# Prints PASS/FAIL lines and "rsocket: N passed, M failed"; exit 0 iff all pass.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh" "$@"
A=rs-a B=rs-b IF=eth1
out=${OUT:-$root/target}/rsocket; rm -rf "$out"; mkdir -p "$out"
pass=0 fail=0
for p in rstream rcopy iperf3; do
  command -v $p >/dev/null || { echo "FAIL setup: $p is missing (Debian: rdmacm-utils, iperf3)"; echo "rsocket: 0 passed, 1 failed"; exit 1; }
done
preload=$(dpkg -L librdmacm1 2>/dev/null | grep '/librspreload\.so$' | head -1)
[ -n "$preload" ] || preload=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so
two_hosts $A $B $IF 10.95.0
# IPv6 addresses too (unique local, no duplicate detection to wait for).
ip -n $A addr add fd95::1/64 dev $IF nodad; ip -n $B addr add fd95::2/64 dev $IF nodad
echo "ferroce: $("$F" --version)"
X() { local ns=$1; shift; ip netns exec "$ns" timeout 60 "$F" exec -- "$@"; }

# run NAME SERVER_NS CLIENT_NS SERVER_CMD -- CLIENT_CMD: both exit 0; sets $s and $c.
run() {
  local name=$1 sns=$2 cns=$3 rc=0 scmd=() ; shift 3
  while [ "$1" != -- ]; do scmd+=("$1"); shift; done; shift
  s=$out/$name.server c=$out/$name.client
  X "$sns" "${scmd[@]}" >"$s" 2>&1 & local sp=$!
  sleep 1
  X "$cns" "$@" >"$c" 2>&1 || rc=1
  wait $sp || rc=1
  return $rc
}

# rstream prints one line per test: name size transfers iterations bytes seconds Gb/s
# usec/xfer. A line of the size asked for, in the client's output, is the pass.
rstream_case() { # NAME SIZE COUNT TESTOPTS [SERVER_NS CLIENT_NS ADDR]
  local name=$1 size=$2 count=$3 sns=${5:-$B} cns=${6:-$A} addr=${7:-10.95.0.2} t
  local args=(-S "$size" -C "$count")
  for t in $4; do args+=(-T "$t"); done
  if run "$name" "$sns" "$cns" rstream -b "$addr" "${args[@]}" -- rstream -s "$addr" "${args[@]}" \
     && line=$(grep -E '^custom ' "$c") && ! grep -qi 'error\|fail' "$s" "$c"; then
    ok "$name" "$(echo "$line" | tr -s ' ')"
  else
    ko "$name" "rstream ${args[*]} did not finish" "$s" "$c"
  fi
}

rstream_case rstream-blocking-1B 1 10000 "b v"
rstream_case rstream-blocking-4KiB 4096 2000 "b v"
rstream_case rstream-blocking-1MiB 1048576 50 "b v"
rstream_case rstream-nonblocking-64KiB 65536 200 "n v"
rstream_case rstream-poll-4KiB 4096 1000 "a v"
rstream_case rstream-poll-1MiB 1048576 20 "a v"
rstream_case rstream-one-host-lo 65536 200 "b v" $A $A 127.0.0.1
rstream_case rstream-ipv6 65536 200 "b v" $B $A fd95::2

# rcopy: the server writes what the client sends under the client's path.
head -c $((3 << 20)) /dev/urandom >"$out/rcopy.src"
rm -f "$out/rcopy.dst"
# The rcopy server serves until stopped.
s=$out/rcopy.server c=$out/rcopy.client
X $B rcopy >"$s" 2>&1 & sp=$!
sleep 1
rc=0
X $A rcopy "$out/rcopy.src" "10.95.0.2:$out/rcopy.dst" >"$c" 2>&1 || rc=1
sleep 0.5; stop $sp
if [ $rc = 0 ] && cmp -s "$out/rcopy.src" "$out/rcopy.dst"; then
  ok rcopy "3 MiB copied, identical"
else
  ko rcopy "the copy is missing or differs" "$s" "$c"
fi

# iperf3 under librspreload.so: its server handles one test (-1) and exits.
P() { local ns=$1; shift; ip netns exec "$ns" timeout 60 env FERROCE_STATS=1 "$F" exec -- env LD_PRELOAD="$preload" "$@"; }
s=$out/iperf3.server c=$out/iperf3.client
P $B iperf3 -s -1 -B 10.95.0.2 >"$s" 2>&1 & sp=$!
sleep 1
rc=0
P $A iperf3 -c 10.95.0.2 -t 3 -f g >"$c" 2>&1 || rc=1
wait $sp || rc=1
rate=$(awk '/receiver/ { print $(NF-2), $(NF-1) }' "$c")
# The bytes went by RDMA: the server's device took in at least 10 MB of RDMA payload
# (`rcvd_data_bytes`, its transport counter; FERROCE_STATS prints it at exit).
rdma=$(grep -o 'rcvd_data_bytes=[0-9]*' "$s" | cut -d= -f2 | sort -n | tail -1)
if [ $rc = 0 ] && [ -n "$rate" ] && [ "${rdma:-0}" -gt 10000000 ]; then
  ok iperf3-preload "$rate over rsockets, server took $rdma bytes by RDMA"
else
  ko iperf3-preload "iperf3 under librspreload.so failed (rc $rc, rate '${rate}', rcvd_data_bytes '${rdma:-none}')" "$s" "$c"
fi

# Hostile peers (rsocket_hostile.c): a peer that claims a data message larger than any
# buffer it was given, or sends a message of a reserved kind. The rstream server's rrecv
# fails with ECONNRESET, and its process counts the broken connection.
hc=$out/rsocket_hostile
if cc -O1 -Wall -o "$hc" "$here/rsocket_hostile.c" -lrdmacm -libverbs 2>"$out/hostile.cc"; then
  for mode in big reserved; do
    s=$out/hostile-$mode.server c=$out/hostile-$mode.client
    ip netns exec $B timeout 30 env FERROCE_STATS=1 "$F" exec -- rstream -b 10.95.0.2 -S 100000 -C 1 -T b >"$s" 2>&1 & sp=$!
    sleep 1
    X $A "$hc" 10.95.0.2 7471 $mode >"$c" 2>&1; crc=$?
    wait $sp; src=$?
    if [ $crc = 0 ] && [ $src != 0 ] && grep -q "rrecv: Connection reset by peer" "$s" \
       && grep -q "rsocket_protocol_errors=1" "$s"; then
      ok "hostile-$mode" "the server's rrecv: ECONNRESET; rsocket_protocol_errors=1"
    else
      ko "hostile-$mode" "client exit $crc, server exit $src" "$s" "$c"
    fi
  done
else
  ko hostile "cc failed" "$out/hostile.cc"
fi

# rclose under a blocked rrecv (rsocket_close.c, both ends in one process on lo): the
# blocked call returns -1 with EBADF.
cl=$out/rsocket_close
if cc -O1 -Wall -pthread -o "$cl" "$here/rsocket_close.c" -lrdmacm -libverbs 2>"$out/close.cc"; then
  if X $A "$cl" 127.0.0.1 7480 >"$out/close.log" 2>&1; then
    ok close-under-rrecv "$(sed 's/^rsocket_close: //' "$out/close.log")"
  else
    ko close-under-rrecv "the blocked rrecv did not return EBADF" "$out/close.log"
  fi
else
  ko close-under-rrecv "cc failed" "$out/close.cc"
fi

echo "rsocket: $pass passed, $fail failed"
[ $fail = 0 ]
