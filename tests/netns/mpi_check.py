"""The MPI program of tests/netns/mpi.sh (mpi4py): which network namespace each rank runs
in and which libibverbs it loaded; ping-pong between rank 0 and the last rank (8 B, 64 KiB,
1 MiB, every byte checked); a checked all-to-all of 64 KiB blocks among all ranks; an
allreduce. Rank 0 prints one line per result; a wrong byte prints BAD and exits 1."""
import os
import sys
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
netns = os.readlink("/proc/self/ns/net")
libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libibverbs" in l})
where = comm.gather((netns, libs))
bad = 0


def pattern(seed, n):
    return bytes((i * 7 + seed) % 251 for i in range(n))


if rank == 0:
    for r, (ns, lib) in enumerate(where):
        print(f"rank {r}: {ns} {' '.join(lib) or 'no libibverbs'}", flush=True)

peer = size - 1
for n in (8, 65536, 1 << 20):
    want = pattern(n % 251, n)
    buf = bytearray(want) if rank == 0 else bytearray(n)
    iters = 20 if n >= 1 << 20 else 200
    comm.Barrier()
    t = time.perf_counter()
    for i in range(iters):
        if rank == 0:
            comm.Send([buf, MPI.BYTE], dest=peer, tag=i)
            buf[:] = bytes(n)
            comm.Recv([buf, MPI.BYTE], source=peer, tag=i)
        elif rank == peer:
            comm.Recv([buf, MPI.BYTE], source=0, tag=i)
            comm.Send([buf, MPI.BYTE], dest=0, tag=i)
    half = (time.perf_counter() - t) / iters / 2
    if rank == 0:
        ok = bytes(buf) == want
        bad += not ok
        print(f"pingpong {n} B: {half * 1e6:.1f} us half round trip, "
              f"{n / half / 1e6:.1f} MB/s, data {'ok' if ok else 'BAD'}", flush=True)

block = 65536
send = b"".join(pattern(rank * 16 + j, block) for j in range(size))
recv = bytearray(block * size)
comm.Alltoall([send, MPI.BYTE], [recv, MPI.BYTE])
mine = sum(bytes(recv[j * block:(j + 1) * block]) != pattern(j * 16 + rank, block)
           for j in range(size))
wrong = comm.reduce(mine)
total = comm.allreduce(rank + 1)
if rank == 0:
    bad += wrong != 0
    print(f"alltoall {block} B blocks: {'ok' if wrong == 0 else f'BAD ({wrong} blocks)'}")
    ok = total == size * (size + 1) // 2
    bad += not ok
    print(f"allreduce: {'ok' if ok else 'BAD'}")
sys.exit(comm.bcast(1 if bad else 0))
