//! Writing one outgoing packet: the IB part is written by the QP role that owns it, the
//! IP/UDP headers and ICRC by the endpoint.

use core::net::Ipv6Addr;

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
    fill(&mut buf[hl..hl + payload_len])?;
    buf[hl + payload_len..total].fill(0);
    Ok(Some(total))
}
