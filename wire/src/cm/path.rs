//! The path a REQ proposes (primary, and an alternate for automatic path migration): 44
//! bytes at a fixed place in the REQ. Over RoCE the GIDs are the IP addresses (IPv4 ones
//! mapped into IPv6), the LIDs are unused and the hop limit and traffic class are the IP
//! header's.

use super::{bits, put_bits};
use crate::field::*;

mod field {
    pub const LOCAL_LID: usize = 0;
    pub const REMOTE_LID: usize = 2;
    pub const LOCAL_GID: usize = 4;
    pub const REMOTE_GID: usize = 20;
    pub const FLOW_LABEL: usize = 36;
    pub const PACKET_RATE: usize = 39;
    pub const TRAFFIC_CLASS: usize = 40;
    pub const HOP_LIMIT: usize = 41;
    pub const SL: usize = 42;
    pub const ACK_TIMEOUT: usize = 43;
}

/// Bytes of one path in a REQ.
pub const LEN: usize = 44;

/// A path in a REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Path {
    /// The requester's port LID (RoCE: unused, Linux sends 0xffff, the permissive LID).
    pub local_lid: u16,
    /// The responder's port LID.
    pub remote_lid: u16,
    /// The requester's GID: its IP address.
    pub local_gid: [u8; 16],
    /// The responder's GID.
    pub remote_gid: [u8; 16],
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Static rate (6 bits, IBA's rate encoding).
    pub packet_rate: u8,
    /// Traffic class (RoCE v2: the IP DSCP and ECN byte).
    pub traffic_class: u8,
    /// Hop limit (RoCE v2: the IP TTL).
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Whether the path stays in one subnet.
    pub subnet_local: bool,
    /// Local ACK timeout (5 bits): 4.096 µs × 2^n before the requester retries.
    pub local_ack_timeout: u8,
}

impl Path {
    /// Reads a path from the 44 bytes at the start of `b`.
    pub(crate) fn parse(b: &[u8]) -> Path {
        Path {
            local_lid: u16_at(b, field::LOCAL_LID),
            remote_lid: u16_at(b, field::REMOTE_LID),
            local_gid: super::private(b, field::LOCAL_GID),
            remote_gid: super::private(b, field::REMOTE_GID),
            flow_label: u32_at(b, field::FLOW_LABEL) >> 12,
            packet_rate: bits(b[field::PACKET_RATE], 2, 6),
            traffic_class: b[field::TRAFFIC_CLASS],
            hop_limit: b[field::HOP_LIMIT],
            sl: bits(b[field::SL], 0, 4),
            subnet_local: bits(b[field::SL], 4, 1) != 0,
            local_ack_timeout: bits(b[field::ACK_TIMEOUT], 0, 5),
        }
    }

    /// Writes the path into the 44 bytes at the start of `b` (assumed zeroed). Bits beyond
    /// a field's width are dropped.
    pub(crate) fn emit(&self, b: &mut [u8]) {
        put_u16(b, field::LOCAL_LID, self.local_lid);
        put_u16(b, field::REMOTE_LID, self.remote_lid);
        b[field::LOCAL_GID..field::LOCAL_GID + 16].copy_from_slice(&self.local_gid);
        b[field::REMOTE_GID..field::REMOTE_GID + 16].copy_from_slice(&self.remote_gid);
        put_u32(b, field::FLOW_LABEL, (self.flow_label & 0xf_ffff) << 12);
        put_bits(&mut b[field::PACKET_RATE], 2, 6, self.packet_rate);
        b[field::TRAFFIC_CLASS] = self.traffic_class;
        b[field::HOP_LIMIT] = self.hop_limit;
        put_bits(&mut b[field::SL], 0, 4, self.sl);
        put_bits(&mut b[field::SL], 4, 1, self.subnet_local.into());
        put_bits(&mut b[field::ACK_TIMEOUT], 0, 5, self.local_ack_timeout);
    }
}
