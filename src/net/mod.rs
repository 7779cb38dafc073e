//! Packet I/O on real Linux interfaces: raw sockets, the RoCE socket filter, interface and
//! neighbour information, and the GID table.

pub mod af_packet;
pub mod bpf;
pub mod eventfd;
pub mod gid;
pub mod interface;
pub mod neigh;
pub mod packet_ring;
pub mod port_guard;
pub mod timerfd;
