# Shared by tests/probe/conformance.sh and tests/probe/fuzz.sh: a target stack reached
# over a veth pair with the probe in its own namespace, and the target's program kept in a
# loop (each probe connection takes a fresh run of it).
#   probe_setup ferroce|rxe  sets PNS PDEV PIP (the probe's namespace, interface, address),
#                            TNS TIP (the target's) and server(); installs the cleanup
#   start_loop PROGRAM       runs PROGRAM's server (read-bw-client: an ib_read_bw client
#                            reading from the probe; write-bw-gid0: an ib_write_bw server
#                            on GID 0, the IPv6 link-local one) in a loop, in its own session
#   stop_loop                kills that loop and everything in its session
#   in_ns NS CMD...          runs CMD in namespace NS ("" = here)
#   fuzz_program VIA SECS SEED OUTDIR LOG [ARGS...]
#                            `ferroce probe fuzz` from the probe's namespace through VIA's
#                            server ($F: the binary), output to LOG; its exit status
loop=""
stop_loop() {
  [ -n "$loop" ] || return 0
  pkill -s "$loop" 2>/dev/null; wait "$loop" 2>/dev/null; sleep 0.2; pkill -9 -s "$loop" 2>/dev/null
  loop=""
}
in_ns() { local ns=$1; shift; if [ -n "$ns" ]; then ip netns exec "$ns" "$@"; else "$@"; fi; }
fuzz_program() {
  local via=$1 secs=$2 seed=$3 dir=$4 log=$5; shift 5
  in_ns "$PNS" timeout $((secs + 900)) "$F" probe fuzz --via "$via" -d "$PDEV" --time "$secs" \
    --seed "$seed" --connect-wait 90 --answer-ms 100 --out "$dir" "$@" "$TIP" >"$log" 2>&1
}

probe_setup() {
  local stack=$1
  if [ "$stack" = rxe ]; then
    . "$RXEVM_HOME/guest/lib.sh"
    if [ -d /sys/class/net/vethR ] && [ -d /sys/class/infiniband/rxe0 ]; then
      G=$(gid_index rxe0 10.77.0.2)
    else
      G=$(setup_peer_ns 9000) || { echo "setup_peer_ns failed"; return 1; }
    fi
    PNS=peer PDEV=vethP TIP=10.77.0.2 PIP=10.77.0.1
    TNS=""
    server() {
      case $1 in
        pingpong) echo "timeout 20 ibv_rc_pingpong -d rxe0 -g $G -n 1 -m 1024" ;;
        # -u 18: a 1.07 s ACK timer (perftest's default is 67 ms). The client posts its
        # READ as soon as its QP is ready; a TCG guest that stalls the probe for half a
        # second before the case's first step would otherwise spend all seven retries on
        # timer resends, and the READ ends in error before the probe answers it.
        read-bw-client) echo "timeout 30 ib_read_bw -d rxe0 -x $G -m 1024 -s 2048 -n 5 -t 1 -u 18 $PIP" ;;
        write-bw-gid0) echo "timeout 60 ib_write_bw -d rxe0 -x 0 -m 1024" ;;
        *) echo "timeout 60 ib_${1/-/_} -d rxe0 -x $G -m 1024" ;;
      esac
    }
    trap stop_loop EXIT
  else
    PNS=probe-a TNS=probe-b PDEV=probe-va TIP=10.94.0.2 PIP=10.94.0.1
    cleanup() { stop_loop; ip netns del $PNS 2>/dev/null; ip netns del $TNS 2>/dev/null; true; }
    cleanup
    ip netns add $PNS && ip netns add $TNS || { echo "cannot create network namespaces (need root)"; return 1; }
    ip link add probe-va netns $PNS type veth peer name probe-vb netns $TNS
    ip -n $PNS addr add 10.94.0.1/24 dev probe-va; ip -n $TNS addr add $TIP/24 dev probe-vb
    for ns in $PNS $TNS; do ip -n $ns link set lo up; done
    ip -n $PNS link set probe-va mtu 9000 up; ip -n $TNS link set probe-vb mtu 9000 up
    server() {
      case $1 in
        pingpong) echo "timeout 20 $F rc-pingpong -d probe-vb -n 1 -m 1024" ;;
        read-bw-client) echo "timeout 30 $F perf read-bw -d probe-vb -m 1024 -s 2048 -n 5 -t 1 $PIP" ;;
        write-bw-gid0) echo "timeout 60 $F perf write-bw -d probe-vb -x 0 -m 1024 --dcqcn" ;;
        *) echo "timeout 60 $F perf $1 -d probe-vb -m 1024 --dcqcn" ;;
      esac
    }
    trap cleanup EXIT
  fi
}

start_loop() {
  # Started directly, not through in_ns, so that $! is the session's leader.
  if [ -n "$TNS" ]; then
    ip netns exec "$TNS" setsid bash -c "while :; do $(server "$1") >/dev/null 2>&1; sleep 0.1; done" &
  else
    setsid bash -c "while :; do $(server "$1") >/dev/null 2>&1; sleep 0.1; done" &
  fi
  loop=$!
  sleep 0.5
}
