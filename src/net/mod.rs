//! Addresses: the GID table an interface's addresses make, and neighbour (MAC address)
//! resolution. Nothing here moves frames: that is [`crate::link`].

pub mod gid;
pub mod neigh;
