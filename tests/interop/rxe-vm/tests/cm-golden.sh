#!/bin/bash
# Golden vectors of rdma_cm's connection management between two rxe devices: the IB CM
# MADs on QP1 (REQ, REP, RTU, DREQ, DREP, REJ, SIDR REQ/REP) that the kernel's CM and
# rdma_cm exchange for real programs.  rxeA on vethA 10.77.0.1 (active side), rxeB on
# vethB 10.77.0.2 (passive side); captured on vethA.  One pcap per exchange in $OUT/pcaps.
. "$RXEVM_HOME/guest/lib.sh"
setup_veth_loop || exit 1
show_gids | tee "$OUT/gids.txt"
fails=0
run() { # run NAME SERVER CLIENT [WAIT]
  cap_start "$1"; pair "$@" || fails=$((fails+1)); cap_stop || fails=$((fails+1))
}
# RC connection: REQ, REP, RTU, then SEND/READ/WRITE, then DREQ/DREP
run cm_rping "rping -s -a 10.77.0.2 -p 7471 -v -C 2 -S 64" \
  "rping -c -a 10.77.0.2 -I 10.77.0.1 -p 7471 -v -C 2 -S 64" sleep:3
# No listener on the port: the passive CM answers the REQ with a REJ (invalid service ID)
cap_start cm_rej
timeout 60 rping -c -a 10.77.0.2 -I 10.77.0.1 -p 7999 -v -C 1 -S 64 >"$OUT/cm_rej.client.txt" 2>&1
echo "rej client rc=$?"; cat "$OUT/cm_rej.client.txt"
cap_stop || fails=$((fails+1))
# UD through rdma_cm: SIDR REQ / SIDR REP
run cm_udaddy "udaddy -b 10.77.0.2 -c 2 -C 2" "udaddy -s 10.77.0.2 -b 10.77.0.1 -c 2 -C 2" sleep:3
# perftest's rdma_cm mode
run cm_write_bw_R "ib_write_bw -R -d rxeB -F -n 5 -s 64" "ib_write_bw -R -d rxeA -F -n 5 -s 64 10.77.0.2" sleep:3
echo "failures: $fails"
exit $fails
