//! The kernel socket filter that lets only RoCE v2 frames reach user space.
//!
//! Classic BPF equivalent to `tcpdump -dd 'udp dst port 4791'` on an Ethernet link: IPv6
//! with next header UDP, or unfragmented IPv4 with protocol UDP, and UDP destination port
//! 4791. Everything else (ARP, TCP, other UDP) stays in the kernel.

/// One classic BPF instruction, laid out as the kernel's `struct sock_filter`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SockFilter {
    /// Opcode.
    pub code: u16,
    /// Jump offset if true.
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// Generic operand.
    pub k: u32,
}

const fn ins(code: u16, jt: u8, jf: u8, k: u32) -> SockFilter {
    SockFilter { code, jt, jf, k }
}

// Classic BPF opcodes used below (linux/filter.h).
const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const LD_H_IND: u16 = 0x48;
const LDX_B_MSH: u16 = 0xb1;
const JEQ_K: u16 = 0x15;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;

const ETHERTYPE_IPV6: u32 = 0x86dd;
const ETHERTYPE_IPV4: u32 = 0x0800;
const IPPROTO_UDP: u32 = 17;
const ROCE_PORT: u32 = ferroce_wire::ROCE_V2_PORT as u32;
/// Bytes of each accepted frame handed to user space (all of it).
const ACCEPT: u32 = 0x40000;

/// The filter program.
pub const ROCE_V2_FILTER: [SockFilter; 16] = [
    ins(LD_H_ABS, 0, 0, 12),          // 0: EtherType
    ins(JEQ_K, 0, 4, ETHERTYPE_IPV6), // 1: IPv6? else 6
    ins(LD_B_ABS, 0, 0, 20),          // 2: IPv6 next header
    ins(JEQ_K, 0, 11, IPPROTO_UDP),   // 3: UDP? else drop
    ins(LD_H_ABS, 0, 0, 56),          // 4: UDP destination port
    ins(JEQ_K, 8, 9, ROCE_PORT),      // 5: accept : drop
    ins(JEQ_K, 0, 8, ETHERTYPE_IPV4), // 6: IPv4? else drop
    ins(LD_B_ABS, 0, 0, 23),          // 7: IPv4 protocol
    ins(JEQ_K, 0, 6, IPPROTO_UDP),    // 8: UDP? else drop
    ins(LD_H_ABS, 0, 0, 20),          // 9: flags + fragment offset
    ins(JSET_K, 4, 0, 0x1fff),        // 10: a fragment: drop
    ins(LDX_B_MSH, 0, 0, 14),         // 11: X = IPv4 header length
    ins(LD_H_IND, 0, 0, 16),          // 12: UDP destination port
    ins(JEQ_K, 0, 1, ROCE_PORT),      // 13: accept : drop
    ins(RET_K, 0, 0, ACCEPT),         // 14: accept
    ins(RET_K, 0, 0, 0),              // 15: drop
];

/// Runs `prog` over `pkt` the way the kernel does; returns the bytes accepted (0 = drop).
/// Only the instructions the filter above uses are implemented; used to test it.
pub fn run(prog: &[SockFilter], pkt: &[u8]) -> u32 {
    let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
    let byte = |i: usize| pkt.get(i).copied().map(u32::from);
    let half = |i: usize| Some((byte(i)? << 8) | byte(i + 1)?);
    while let Some(i) = prog.get(pc) {
        pc += 1;
        let k = i.k as usize;
        // An out-of-bounds load ends the program with "drop", as in the kernel.
        match i.code {
            LD_H_ABS => match half(k) {
                Some(v) => a = v,
                None => return 0,
            },
            LD_B_ABS => match byte(k) {
                Some(v) => a = v,
                None => return 0,
            },
            LD_H_IND => match half(x as usize + k) {
                Some(v) => a = v,
                None => return 0,
            },
            LDX_B_MSH => match byte(k) {
                Some(v) => x = 4 * (v & 0xf),
                None => return 0,
            },
            JEQ_K => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
            JSET_K => pc += usize::from(if a & i.k != 0 { i.jt } else { i.jf }),
            RET_K => return i.k,
            _ => return 0,
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_roce_and_rejects_the_rest() {
        let roce = ferroce_wire::example_frame();
        assert_eq!(run(&ROCE_V2_FILTER, &roce), ACCEPT);
        let mut other_port = roce.clone();
        other_port[36..38].copy_from_slice(&4792u16.to_be_bytes());
        assert_eq!(run(&ROCE_V2_FILTER, &other_port), 0);
        let mut tcp = roce.clone();
        tcp[23] = 6;
        assert_eq!(run(&ROCE_V2_FILTER, &tcp), 0);
        let mut frag = roce.clone();
        frag[21] = 1;
        assert_eq!(run(&ROCE_V2_FILTER, &frag), 0);
        let mut arp = roce.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(run(&ROCE_V2_FILTER, &arp), 0);
        assert_eq!(
            run(&ROCE_V2_FILTER, &roce[..30]),
            0,
            "truncated frames are dropped"
        );
    }
}
