#!/bin/sh
# mpirun's rsh agent for tests/netns/mpi.sh: `mpi_agent.sh HOST COMMAND...` runs COMMAND
# (Open MPI's orted) in network namespace HOST under `ferroce exec`, as ssh would run it on
# another host with ferroce installed. FERROCE is the ferroce binary.
host=$1; shift
exec ip netns exec "$host" "$FERROCE" exec -- /bin/sh -c "$*"
