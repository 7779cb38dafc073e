//! Writing one outgoing packet: the IB part is written by the QP role that owns it, the
//! IP/UDP headers and ICRC by the endpoint.

use core::net::Ipv6Addr;

use ferroce_wire::icrc_fold::PayloadCrc;
use ferroce_wire::packet::{pad_for, ICRC_LEN};
use ferroce_wire::{BthRepr, ExtRepr, IbRepr};

/// Largest datagram the engine emits: IPv6 + UDP + BTH + the largest extension headers
/// (AtomicETH) + a 4096-byte payload + pad + ICRC, rounded up.
pub const MAX_DATAGRAM_LEN: usize = 40 + 8 + 12 + 28 + 4096 + 4 + 4 + 32;

/// Where and how the endpoint sends a packet a QP wrote.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TxMeta {
    pub dst: Ipv6Addr,
    pub src: Ipv6Addr,
    pub traffic_class: u8,
    pub flow_label: u32,
    pub sport: u16,
    /// Bytes of the IB packet (BTH through ICRC) written after the IP/UDP headers.
    pub ib_len: usize,
    /// ECN bits to send instead of the low two bits of `traffic_class` (congestion
    /// control owns them when enabled).
    pub ecn: Option<u8>,
    /// The packet counts against the QP's DCQCN pacer (requests, READ responses).
    pub paced: bool,
    /// Silences in a row over what this packet repeats ([`crate::Transmit::silences`]).
    pub silences: u8,
    /// The payload's CRC, folded while it was copied (start counted in the IB packet).
    pub payload_crc: Option<PayloadCrc>,
}

/// Bytes of IP plus UDP header toward `dst`.
pub(crate) fn ip_udp_len(dst: &Ipv6Addr) -> usize {
    if dst.to_ipv4_mapped().is_some() {
        20 + 8
    } else {
        40 + 8
    }
}

/// Writes BTH, extension headers, a `payload_len`-byte payload produced by `fill`, zero
/// pad and room for the ICRC into `buf`. Returns the IB packet length, or `None` when
/// `fill` fails or the buffer is too small (nothing the caller may send).
pub(crate) fn write_ib<E>(
    buf: &mut [u8],
    bth: BthRepr,
    ext: ExtRepr,
    payload_len: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<Option<usize>, E> {
    let w = write_ib_folding(buf, bth, ext, payload_len, |p| fill(p).map(|()| None))?;
    Ok(w.map(|(n, _)| n))
}

/// [`write_ib`] whose `fill` may fold the payload into a CRC as it copies it
/// ([`ferroce_wire::icrc_fold`]): `Some` of what [`Fold::copy`] returned for the payload,
/// started from `0xffff_ffff`. Returns the IB packet length and, for a folded payload, its
/// CRC over payload and pad, with the payload's start in the IB packet.
///
/// [`Fold::copy`]: ferroce_wire::icrc_fold::Fold
pub(crate) fn write_ib_folding<E>(
    buf: &mut [u8],
    bth: BthRepr,
    ext: ExtRepr,
    payload_len: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<Option<u32>, E>,
) -> Result<Option<(usize, Option<PayloadCrc>)>, E> {
    let repr = IbRepr {
        bth,
        ext,
        payload: &[],
    };
    let pad = usize::from(pad_for(payload_len));
    let total = repr.header_len() + payload_len + pad + ICRC_LEN;
    if buf.len() < total {
        return Ok(None);
    }
    let Ok(hl) = repr.emit_headers(buf, payload_len) else {
        return Ok(None);
    };
    let folded = fill(&mut buf[hl..hl + payload_len])?;
    // Zero pad (0 to 3 bytes) and ICRC room: 4 to 7 bytes, covered by two overlapping
    // 4-byte stores. A `fill` of a length known only at run time is a call to memset for
    // every packet (2% of the engine benchmark's time).
    let tail = &mut buf[hl + payload_len..total];
    let n = tail.len();
    tail[..ICRC_LEN].copy_from_slice(&[0; ICRC_LEN]);
    tail[n - ICRC_LEN..].copy_from_slice(&[0; ICRC_LEN]);
    Ok(Some((total, folded.map(|c| PayloadCrc::new(hl, c, pad)))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroce_wire::{opcode::Opcode, Psn};

    #[test]
    fn pad_and_icrc_room_are_zero_whatever_the_buffer_held() {
        // Transmit buffers are reused: bytes the packet does not set would carry an
        // earlier packet's data onto the wire.
        for payload_len in 0..=8 {
            let mut buf = [0xa5u8; 64];
            let bth = BthRepr::new(Opcode::RC_SEND_ONLY, 0x11, Psn::new(1));
            let total = write_ib(&mut buf, bth, ExtRepr::default(), payload_len, |p| {
                p.fill(1);
                Ok::<(), ()>(())
            })
            .unwrap()
            .unwrap();
            let pad = usize::from(pad_for(payload_len));
            assert_eq!(total, 12 + payload_len + pad + ICRC_LEN);
            assert!(buf[12..12 + payload_len].iter().all(|&b| b == 1));
            assert!(
                buf[12 + payload_len..total].iter().all(|&b| b == 0),
                "{payload_len}-byte payload: {:?}",
                &buf[12 + payload_len..total]
            );
            assert!(
                buf[total..].iter().all(|&b| b == 0xa5),
                "nothing past the packet"
            );
        }
    }
}
