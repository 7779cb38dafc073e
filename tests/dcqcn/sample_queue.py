#!/usr/bin/env python3
"""The bottleneck queue's counters, sampled through rtnetlink by one process.

    sample_queue.py DEV HANDLE INTERVAL_S

Prints a CSV header, then every INTERVAL_S seconds one row for the qdisc HANDLE (hex
major, e.g. "10" for "10:") on DEV, a RED qdisc:

    time_s,marked,early,pdrop,other,dropped,backlog_bytes,sent_bytes

until killed. Why not `tc -s qdisc show` in a loop: under qemu's TCG, forking tc, awk
and date for each sample took about a second of the VM's CPU, which gave 8-10 samples per
15 s window and took that time from the very qdisc being measured (htb's timer fired
later, and its backlog grew). One process asking the kernel directly costs a fraction
of that. Only the standard library: RTM_GETQDISC dump, TCA_STATS2 (basic, queue) and
TCA_XSTATS (struct tc_red_xstats).
"""
import socket
import struct
import sys
import time

RTM_NEWQDISC, RTM_GETQDISC = 36, 38
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
TCA_XSTATS, TCA_STATS2 = 4, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE = 1, 3


def attrs(buf):
    """(type, payload) of each rtattr in buf."""
    off = 0
    while off + 4 <= len(buf):
        length, kind = struct.unpack_from("=HH", buf, off)
        if length < 4 or off + length > len(buf):
            return
        yield kind & 0x3FFF, buf[off + 4:off + length]
        off += (length + 3) & ~3


def sample(sock, ifindex, handle, seq):
    """The row's counters for the qdisc, or None if the kernel did not list it."""
    req = struct.pack("=BxxxiIII", socket.AF_UNSPEC, ifindex, 0, 0, 0)
    hdr = struct.pack("=IHHII", 16 + len(req), RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, seq, 0)
    sock.send(hdr + req)
    row = None
    while True:
        data = sock.recv(1 << 16)
        off = 0
        while off + 16 <= len(data):
            length, kind, _, _, _ = struct.unpack_from("=IHHII", data, off)
            if length < 16:
                return row
            body = data[off + 16:off + length]
            off += (length + 3) & ~3
            if kind in (NLMSG_DONE, NLMSG_ERROR):
                return row
            if kind != RTM_NEWQDISC or len(body) < 20:
                continue
            _, idx, h, _, _ = struct.unpack_from("=BxxxiIII", body)
            if idx != ifindex or h != handle:
                continue
            red = (0, 0, 0, 0)  # marked, early, pdrop, other
            sent = backlog = drops = 0
            for t, p in attrs(body[20:]):
                if t == TCA_STATS2:
                    for st, sp in attrs(p):
                        if st == TCA_STATS_BASIC and len(sp) >= 8:
                            (sent,) = struct.unpack_from("=Q", sp)
                        elif st == TCA_STATS_QUEUE and len(sp) >= 12:
                            _, backlog, drops = struct.unpack_from("=III", sp)
                elif t == TCA_XSTATS and len(p) >= 16:
                    early, pdrop, other, marked = struct.unpack_from("=IIII", p)
                    red = (marked, early, pdrop, other)
            row = red + (drops, backlog, sent)


def main():
    dev, handle, interval = sys.argv[1], int(sys.argv[2], 16) << 16, float(sys.argv[3])
    ifindex = socket.if_nametoindex(dev)
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)  # NETLINK_ROUTE
    sock.bind((0, 0))
    print("time_s,marked,early,pdrop,other,dropped,backlog_bytes,sent_bytes", flush=True)
    seq = 0
    while True:
        seq += 1
        t = time.time()
        row = sample(sock, ifindex, handle, seq)
        if row is not None:
            print("%.6f,%d,%d,%d,%d,%d,%d,%d" % ((t,) + row), flush=True)
        time.sleep(max(0.0, interval - (time.time() - t)))


if __name__ == "__main__":
    main()
