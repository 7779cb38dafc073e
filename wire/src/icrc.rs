//! The invariant CRC (ICRC) of RoCE v2, computed exactly as Linux rxe does.
//!
//! CRC-32 (IEEE) over eight 0xff bytes (the masked LRH of InfiniBand), then the IP header,
//! UDP header, BTH and the rest of the packet up to the ICRC, with the fields that routers
//! may change masked to all ones: IPv4 TOS, TTL and header checksum; IPv6 traffic class,
//! flow label and hop limit; the UDP checksum; BTH byte 4 (FECN/BECN/reserved). The result
//! is stored little-endian in the last four bytes of the UDP payload.

use crate::packet::ICRC_LEN;
use crate::{Error, Layer, Result};

/// Bytes of IP + UDP + BTH that may need masking: at most a 60-byte IPv4 header + 8 + 12.
const MAX_MASKED: usize = 60 + 8 + 12;

/// Computes the ICRC of `ip_packet`: an IPv4 or IPv6 packet from its header to the end of
/// the IB pad bytes, without the ICRC trailer.
pub fn compute(ip_packet: &[u8]) -> Result<u32> {
    let first = *ip_packet.first().ok_or(Error::Truncated(Layer::Ip))?;
    let ip_len = match first >> 4 {
        4 => usize::from(first & 0xf) * 4,
        6 => 40,
        _ => return Err(Error::BadIpHeader),
    };
    if ip_len < 20 {
        return Err(Error::BadIpHeader);
    }
    let masked_len = ip_len + 8 + 12;
    if ip_packet.len() < masked_len {
        return Err(Error::Truncated(Layer::Bth));
    }
    let mut m = [0u8; MAX_MASKED];
    let m = &mut m[..masked_len];
    m.copy_from_slice(&ip_packet[..masked_len]);
    if first >> 4 == 4 {
        m[1] = 0xff; // TOS (DSCP + ECN)
        m[8] = 0xff; // TTL
        m[10] = 0xff; // header checksum
        m[11] = 0xff;
    } else {
        m[0] |= 0x0f; // traffic class (high nibble) ...
        m[1] = 0xff; // ... traffic class (low nibble) and flow label
        m[2] = 0xff;
        m[3] = 0xff;
        m[7] = 0xff; // hop limit
    }
    m[ip_len + 6] = 0xff; // UDP checksum
    m[ip_len + 7] = 0xff;
    m[ip_len + 8 + crate::bth::ICRC_MASKED_BYTE] = 0xff;

    let mut h = crc32fast::Hasher::new();
    h.update(&[0xff; 8]);
    h.update(m);
    h.update(&ip_packet[masked_len..]);
    Ok(h.finalize())
}

/// Verifies the ICRC trailer at the end of `ip_packet` (IP header through ICRC).
pub fn verify(ip_packet: &[u8]) -> Result<()> {
    let n = ip_packet.len();
    if n < ICRC_LEN {
        return Err(Error::Truncated(Layer::Icrc));
    }
    let computed = compute(&ip_packet[..n - ICRC_LEN])?;
    let t = &ip_packet[n - ICRC_LEN..];
    let found = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
    if computed == found {
        Ok(())
    } else {
        Err(Error::IcrcMismatch { computed, found })
    }
}

/// Computes and writes the ICRC trailer of `ip_packet` (IP header through ICRC).
pub fn fill(ip_packet: &mut [u8]) -> Result<()> {
    let n = ip_packet.len();
    if n < ICRC_LEN {
        return Err(Error::Truncated(Layer::Icrc));
    }
    let icrc = compute(&ip_packet[..n - ICRC_LEN])?;
    ip_packet[n - ICRC_LEN..].copy_from_slice(&icrc.to_le_bytes());
    Ok(())
}
