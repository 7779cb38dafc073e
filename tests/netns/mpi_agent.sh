#!/bin/sh
# mpirun's rsh agent for tests/netns/mpi.sh, standing in for ssh: `mpi_agent.sh HOST
# COMMAND...` runs COMMAND in network namespace HOST. COMMAND is mpirun's launch agent,
# which the test sets to `ferroce exec -- orted`, as users would over ssh.
host=$1; shift
exec ip netns exec "$host" /bin/sh -c "$*"
