//! The kernel socket filter that lets only this process's RoCE v2 frames reach user space.
//!
//! Classic BPF, built for each socket by [`roce_filter`]: IPv6 with next header UDP, or
//! unfragmented IPv4 with protocol UDP, UDP destination port 4791, and — when several
//! processes share the interface — a BTH destination QP inside one of this process's QP
//! number blocks. Everything else (ARP, TCP, other UDP, frames for other processes' QPs)
//! stays in the kernel: a frame is copied to the one process that owns its QP, not to
//! every process to be dropped in user space.
//!
//! Frames another process on this host *sends* (`PACKET_OUTGOING`) are seen too once one
//! of this process's QPs talks to this host (before that the socket ignores them), and are
//! kept only when addressed to the interface's own MAC address: that is how processes on
//! one Ethernet interface reach each other through the host's own addresses. On `lo` the
//! same frame also comes back in as an incoming one, so there outgoing frames are dropped.
//!
//! Frames to the multicast QP (0xffffff) get in only for the groups a QP of this process
//! is in, by their destination IP address; and those another process here sends to a
//! group are kept too (their destination MAC is a multicast one).

use std::net::IpAddr;

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

// Classic BPF opcodes used below (linux/filter.h).
const LD_W_ABS: u16 = 0x20;
const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const LD_W_IND: u16 = 0x40;
const LD_H_IND: u16 = 0x48;
const LDX_B_MSH: u16 = 0xb1;
const ALU_AND_K: u16 = 0x54;
const ALU_RSH_K: u16 = 0x74;
const JA: u16 = 0x05;
const JEQ_K: u16 = 0x15;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;

/// `SKF_AD_OFF + SKF_AD_PKTTYPE`: loads the frame's packet type (linux/filter.h).
const AD_PKTTYPE: u32 = 0xffff_f000 + 4;
/// `PACKET_OUTGOING`: a frame this host sends.
pub const PKTTYPE_OUTGOING: u32 = 4;
/// `PACKET_HOST`: a frame addressed to this host.
pub const PKTTYPE_HOST: u32 = 0;

const ETHERTYPE_IPV6: u32 = 0x86dd;
const ETHERTYPE_IPV4: u32 = 0x0800;
const IPPROTO_UDP: u32 = 17;
const ROCE_PORT: u32 = ferroce_wire::ROCE_V2_PORT as u32;
/// Bytes of each accepted frame handed to user space (all of it).
pub const ACCEPT: u32 = 0x40000;
/// Bits of a QP number below its block (the driver checks that the transport agrees).
pub const QPN_BLOCK_BITS: u32 = 8;
/// Most QP number blocks one filter checks (jump offsets are 8 bits wide).
pub const MAX_BLOCKS: usize = 200;

/// What a socket's filter lets through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterSpec {
    /// The interface's MAC address.
    pub own_mac: [u8; 6],
    /// Keep frames other processes send to `own_mac` (false on `lo`, where they also come
    /// back as incoming frames).
    pub outgoing_to_self: bool,
    /// Only frames whose destination QP lies in one of these blocks (a QP number's bits
    /// above [`QPN_BLOCK_BITS`]); `None`: any destination QP.
    pub blocks: Option<Vec<u16>>,
    /// Also frames to the multicast QP for these groups (a QP of this process is in
    /// them), and, with `outgoing_to_self`, those other processes here send to a group.
    pub multicast: Groups,
}

/// The multicast groups a filter takes frames for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Groups {
    /// None: the multicast QP's frames stay out.
    #[default]
    None,
    /// These (at most [`MAX_FILTER_GROUPS`]): an IPv4 group by its whole address, an IPv6
    /// one by its last 32 bits (those its MAC address carries; a rare other group with
    /// the same bits gets in, and the transport drops it).
    Some(Vec<IpAddr>),
    /// Any group (a process in more groups than one filter checks).
    All,
}

impl Groups {
    /// `groups` as a filter checks them: each, or all when there are too many.
    pub fn of(groups: impl IntoIterator<Item = IpAddr>) -> Groups {
        let g: Vec<IpAddr> = groups.into_iter().collect();
        match g.len() {
            0 => Groups::None,
            n if n > MAX_FILTER_GROUPS => Groups::All,
            _ => Groups::Some(g),
        }
    }
}

/// Most groups one filter checks one by one (its jumps are 8 bits wide); beyond, it takes
/// every group's frames.
pub const MAX_FILTER_GROUPS: usize = 64;
/// Offset of an IPv4 frame's destination address, and of an IPv6 frame's last 32 bits of
/// it (14 bytes of Ethernet header before either).
const IPV4_DST: u32 = 14 + 16;
const IPV6_DST_LOW: u32 = 14 + 24 + 12;

/// The destination QP of multicast packets.
const MULTICAST_QPN: u32 = 0xff_ffff;

#[derive(Clone, Copy)]
enum Label {
    Accept,
    Drop,
    Eth,
    V4,
    V6,
    Qp,
    /// The group checks: an IPv6 frame's, a group matched, the unicast block list.
    GroupV6,
    GroupAccept,
    Blocks,
}

enum Op {
    Ins(SockFilter),
    Jump {
        code: u16,
        k: u32,
        t: Option<Label>,
        f: Option<Label>,
    },
    Always(Label),
    Mark(Label),
}

fn ins(code: u16, k: u32) -> Op {
    Op::Ins(SockFilter {
        code,
        jt: 0,
        jf: 0,
        k,
    })
}

/// A conditional jump; `None` falls through to the next instruction.
fn jump(code: u16, k: u32, t: Option<Label>, f: Option<Label>) -> Op {
    Op::Jump { code, k, t, f }
}

/// Builds the filter program for `spec`. Panics if `spec` names more than [`MAX_BLOCKS`]
/// blocks (the caller stops claiming before that).
pub fn roce_filter(spec: &FilterSpec) -> Vec<SockFilter> {
    use Label::*;
    let mac = spec.own_mac;
    let mut ops = vec![
        ins(LD_W_ABS, AD_PKTTYPE),
        jump(JEQ_K, PKTTYPE_OUTGOING, None, Some(Eth)),
    ];
    if spec.outgoing_to_self {
        if spec.multicast != Groups::None {
            // The group bit of the destination MAC: another process's multicast.
            ops.extend([ins(LD_B_ABS, 0), jump(JSET_K, 1, Some(Eth), None)]);
        }
        ops.extend([
            ins(LD_W_ABS, 0),
            jump(
                JEQ_K,
                u32::from_be_bytes([mac[0], mac[1], mac[2], mac[3]]),
                None,
                Some(Drop),
            ),
            ins(LD_H_ABS, 4),
            jump(
                JEQ_K,
                u32::from(u16::from_be_bytes([mac[4], mac[5]])),
                Some(Eth),
                Some(Drop),
            ),
        ]);
    } else {
        ops.push(Op::Always(Drop));
    }
    ops.extend([
        Op::Mark(Eth),
        ins(LD_H_ABS, 12),
        jump(JEQ_K, ETHERTYPE_IPV6, Some(V6), None),
        jump(JEQ_K, ETHERTYPE_IPV4, Some(V4), Some(Drop)),
        Op::Mark(V6),
        ins(LD_B_ABS, 20),
        jump(JEQ_K, IPPROTO_UDP, None, Some(Drop)),
        ins(LD_H_ABS, 14 + 40 + 2),
        jump(JEQ_K, ROCE_PORT, None, Some(Drop)),
        ins(LD_W_ABS, 14 + 40 + 8 + 4), // BTH bytes 4..8: reserved byte, destination QP
        Op::Always(Qp),
        Op::Mark(V4),
        ins(LD_B_ABS, 23),
        jump(JEQ_K, IPPROTO_UDP, None, Some(Drop)),
        ins(LD_H_ABS, 20),
        jump(JSET_K, 0x1fff, Some(Drop), None), // a fragment
        ins(LDX_B_MSH, 14),                     // X = IPv4 header length
        ins(LD_H_IND, 14 + 2),
        jump(JEQ_K, ROCE_PORT, None, Some(Drop)),
        ins(LD_W_IND, 14 + 8 + 4),
        Op::Always(Qp),
        // Before the block list, so that every jump to it stays short.
        Op::Mark(Drop),
        ins(RET_K, 0),
        Op::Mark(Qp),
    ]);
    match &spec.multicast {
        Groups::None => {}
        // Before the block list: a jump over it stays within 255 instructions.
        Groups::All => ops.extend([
            ins(ALU_AND_K, MULTICAST_QPN),
            jump(JEQ_K, MULTICAST_QPN, Some(Accept), None),
        ]),
        Groups::Some(groups) => {
            assert!(
                groups.len() <= MAX_FILTER_GROUPS,
                "too many groups for one filter"
            );
            let word = |ip: &IpAddr| match ip {
                IpAddr::V4(a) => u32::from(*a),
                IpAddr::V6(a) => (a.to_bits() & 0xffff_ffff) as u32,
            };
            ops.extend([
                ins(ALU_AND_K, MULTICAST_QPN),
                jump(JEQ_K, MULTICAST_QPN, None, Some(Blocks)),
                ins(LD_H_ABS, 12),
                jump(JEQ_K, ETHERTYPE_IPV6, Some(GroupV6), None),
            ]);
            // IPv4's destination compared with each IPv4 group, then IPv6's.
            for (v6, at) in [(false, IPV4_DST), (true, IPV6_DST_LOW)] {
                if v6 {
                    ops.push(Op::Mark(GroupV6));
                }
                ops.push(ins(LD_W_ABS, at));
                for g in groups.iter().filter(|g| g.is_ipv6() == v6) {
                    ops.push(jump(JEQ_K, word(g), Some(GroupAccept), None));
                }
                ops.push(ins(RET_K, 0));
            }
            ops.extend([
                Op::Mark(GroupAccept),
                ins(RET_K, ACCEPT),
                // Reached from the multicast QP test alone: A is still the destination
                // QP, for the block list below.
                Op::Mark(Blocks),
            ]);
        }
    }
    if let Some(blocks) = &spec.blocks {
        assert!(
            blocks.len() <= MAX_BLOCKS,
            "too many QPN blocks for one filter"
        );
        ops.push(ins(ALU_RSH_K, QPN_BLOCK_BITS));
        ops.push(ins(ALU_AND_K, 0xffff));
        for b in blocks {
            ops.push(jump(JEQ_K, u32::from(*b), Some(Accept), None));
        }
        ops.push(ins(RET_K, 0));
    }
    ops.extend([Op::Mark(Accept), ins(RET_K, ACCEPT)]);
    assemble(&ops)
}

/// Resolves labels into relative jumps.
fn assemble(ops: &[Op]) -> Vec<SockFilter> {
    let mut at = [0usize; 9];
    let mut pc = 0;
    for op in ops {
        match op {
            Op::Mark(l) => at[*l as usize] = pc,
            _ => pc += 1,
        }
    }
    let mut out = Vec::with_capacity(pc);
    for op in ops {
        let here = out.len();
        let rel = |l: Option<Label>| -> u8 {
            l.map_or(0, |l| {
                u8::try_from(at[l as usize] - here - 1).expect("jump within 255 instructions")
            })
        };
        match op {
            Op::Mark(_) => {}
            Op::Ins(i) => out.push(*i),
            Op::Jump { code, k, t, f } => out.push(SockFilter {
                code: *code,
                jt: rel(*t),
                jf: rel(*f),
                k: *k,
            }),
            Op::Always(l) => out.push(SockFilter {
                code: JA,
                jt: 0,
                jf: 0,
                k: (at[*l as usize] - here - 1) as u32,
            }),
        }
    }
    out
}

/// Runs `prog` over `pkt` of packet type `pkttype` the way the kernel does; returns the
/// bytes accepted (0 = drop). Only the instructions [`roce_filter`] uses are implemented;
/// used to test it.
pub fn run(prog: &[SockFilter], pkt: &[u8], pkttype: u32) -> u32 {
    let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
    let byte = |i: usize| pkt.get(i).copied().map(u32::from);
    let half = |i: usize| Some((byte(i)? << 8) | byte(i + 1)?);
    let word = |i: usize| Some((half(i)? << 16) | half(i + 2)?);
    while let Some(i) = prog.get(pc) {
        pc += 1;
        let k = i.k as usize;
        // An out-of-bounds load ends the program with "drop", as in the kernel.
        let loaded = match i.code {
            LD_W_ABS if i.k == AD_PKTTYPE => Some(pkttype),
            LD_W_ABS => word(k),
            LD_H_ABS => half(k),
            LD_B_ABS => byte(k),
            LD_W_IND => word(x as usize + k),
            LD_H_IND => half(x as usize + k),
            LDX_B_MSH => {
                match byte(k) {
                    Some(v) => x = 4 * (v & 0xf),
                    None => return 0,
                }
                continue;
            }
            ALU_AND_K => Some(a & i.k),
            ALU_RSH_K => Some(a >> i.k),
            JA => {
                pc += k;
                continue;
            }
            JEQ_K => {
                pc += usize::from(if a == i.k { i.jt } else { i.jf });
                continue;
            }
            JSET_K => {
                pc += usize::from(if a & i.k != 0 { i.jt } else { i.jf });
                continue;
            }
            RET_K => return i.k,
            _ => return 0,
        };
        match loaded {
            Some(v) => a = v,
            None => return 0,
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 9];

    fn spec(blocks: Option<Vec<u16>>, outgoing_to_self: bool) -> Vec<SockFilter> {
        roce_filter(&FilterSpec {
            own_mac: MAC,
            outgoing_to_self,
            blocks,
            multicast: Groups::None,
        })
    }

    /// The example frame (IPv4) with destination QP `qpn`.
    fn frame_to(qpn: u32) -> Vec<u8> {
        let mut f = ferroce_wire::example_frame();
        f[14 + 20 + 8 + 5..14 + 20 + 8 + 8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        f
    }

    #[test]
    fn accepts_roce_and_rejects_the_rest() {
        let prog = spec(None, false);
        let roce = ferroce_wire::example_frame();
        assert_eq!(run(&prog, &roce, PKTTYPE_HOST), ACCEPT);
        let mut other_port = roce.clone();
        other_port[36..38].copy_from_slice(&4792u16.to_be_bytes());
        assert_eq!(run(&prog, &other_port, PKTTYPE_HOST), 0);
        let mut tcp = roce.clone();
        tcp[23] = 6;
        assert_eq!(run(&prog, &tcp, PKTTYPE_HOST), 0);
        let mut frag = roce.clone();
        frag[21] = 1;
        assert_eq!(run(&prog, &frag, PKTTYPE_HOST), 0);
        let mut arp = roce.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(run(&prog, &arp, PKTTYPE_HOST), 0);
        assert_eq!(
            run(&prog, &roce[..30], PKTTYPE_HOST),
            0,
            "truncated frames are dropped"
        );
    }

    #[test]
    fn only_this_process_blocks_get_through() {
        let prog = spec(Some(vec![0x1234, 0x0077]), true);
        assert_eq!(run(&prog, &frame_to(0x12_3456), PKTTYPE_HOST), ACCEPT);
        assert_eq!(run(&prog, &frame_to(0x7700), PKTTYPE_HOST), ACCEPT);
        assert_eq!(run(&prog, &frame_to(0x12_3556), PKTTYPE_HOST), 0);
        assert_eq!(
            run(&prog, &frame_to(0x0001), PKTTYPE_HOST),
            0,
            "QP1 is nobody's"
        );
        let none = spec(Some(vec![]), true);
        assert_eq!(run(&none, &frame_to(0x12_3456), PKTTYPE_HOST), 0);
    }

    #[test]
    fn the_block_test_reads_the_ipv6_bth_too() {
        let prog = spec(Some(vec![0x00ab]), true);
        // An IPv6 RoCE frame: Ethernet, 40-byte IPv6 header with next header UDP, UDP to
        // 4791, then a BTH whose destination QP is 0xab01.
        let mut f = vec![0u8; 14 + 40 + 8 + 12 + 4];
        f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        f[14] = 0x60;
        f[14 + 6] = 17;
        f[14 + 40 + 2..14 + 40 + 4].copy_from_slice(&4791u16.to_be_bytes());
        f[14 + 40 + 8 + 5..14 + 40 + 8 + 8].copy_from_slice(&[0, 0xab, 1]);
        assert_eq!(run(&prog, &f, PKTTYPE_HOST), ACCEPT);
        f[14 + 40 + 8 + 6] = 0xac;
        assert_eq!(run(&prog, &f, PKTTYPE_HOST), 0);
    }

    #[test]
    fn outgoing_frames_only_when_sent_to_our_own_mac() {
        let prog = spec(Some(vec![0x1234]), true);
        let mut to_self = frame_to(0x12_3456);
        to_self[..6].copy_from_slice(&MAC);
        let mut to_peer = to_self.clone();
        to_peer[5] = 10;
        assert_eq!(run(&prog, &to_self, PKTTYPE_OUTGOING), ACCEPT);
        assert_eq!(run(&prog, &to_peer, PKTTYPE_OUTGOING), 0);
        assert_eq!(run(&prog, &to_peer, PKTTYPE_HOST), ACCEPT);
        // On lo the frame also comes back in: its outgoing copy would be a duplicate.
        let lo = spec(Some(vec![0x1234]), false);
        assert_eq!(run(&lo, &to_self, PKTTYPE_OUTGOING), 0);
        assert_eq!(run(&lo, &to_self, PKTTYPE_HOST), ACCEPT);
    }

    #[test]
    fn the_most_blocks_still_assemble() {
        let many: Vec<IpAddr> = (0..MAX_FILTER_GROUPS as u32)
            .map(|n| IpAddr::V4(std::net::Ipv4Addr::from(0xef00_0000 | n)))
            .collect();
        for groups in [Groups::None, Groups::All, Groups::Some(many)] {
            let blocks: Vec<u16> = (1..=MAX_BLOCKS as u16).collect();
            let prog = roce_filter(&FilterSpec {
                own_mac: MAC,
                outgoing_to_self: true,
                blocks: Some(blocks),
                multicast: groups.clone(),
            });
            assert_eq!(run(&prog, &frame_to(200 << 8), PKTTYPE_HOST), ACCEPT);
            assert_eq!(run(&prog, &frame_to(201 << 8), PKTTYPE_HOST), 0);
            let in_group = if groups == Groups::None { 0 } else { ACCEPT };
            let to_group = to_group(MULTICAST_QPN, [239, 0, 0, 63]);
            assert_eq!(
                run(&prog, &to_group, PKTTYPE_MULTICAST),
                in_group,
                "{groups:?}"
            );
        }
    }

    const PKTTYPE_MULTICAST: u32 = 2;

    /// The example frame (IPv4) to group `ip`'s MAC address and `ip`, QP `qpn`.
    fn to_group(qpn: u32, ip: [u8; 4]) -> Vec<u8> {
        let mut f = frame_to(qpn);
        f[..6].copy_from_slice(&[0x01, 0x00, 0x5e, ip[1] & 0x7f, ip[2], ip[3]]);
        f[30..34].copy_from_slice(&ip);
        f
    }

    fn member_of(groups: Groups, outgoing_to_self: bool) -> Vec<SockFilter> {
        roce_filter(&FilterSpec {
            own_mac: MAC,
            outgoing_to_self,
            blocks: Some(vec![0x1234]),
            multicast: groups,
        })
    }

    #[test]
    fn multicast_frames_only_for_the_groups_a_process_is_in() {
        let g = |a, b, c, d| IpAddr::V4(std::net::Ipv4Addr::new(a, b, c, d));
        let member = member_of(Groups::Some(vec![g(239, 1, 2, 3), g(224, 5, 5, 5)]), true);
        let other = member_of(Groups::None, true);
        let (mine, theirs) = (
            to_group(MULTICAST_QPN, [239, 1, 2, 3]),
            to_group(MULTICAST_QPN, [239, 1, 2, 4]),
        );
        assert_eq!(run(&member, &mine, PKTTYPE_MULTICAST), ACCEPT);
        assert_eq!(
            run(
                &member,
                &to_group(MULTICAST_QPN, [224, 5, 5, 5]),
                PKTTYPE_MULTICAST
            ),
            ACCEPT
        );
        assert_eq!(run(&member, &theirs, PKTTYPE_MULTICAST), 0, "another group");
        assert_eq!(run(&other, &mine, PKTTYPE_MULTICAST), 0, "in no group");
        // Sent by another process on this host: seen going out.
        assert_eq!(run(&member, &mine, PKTTYPE_OUTGOING), ACCEPT);
        assert_eq!(run(&member, &theirs, PKTTYPE_OUTGOING), 0);
        assert_eq!(run(&other, &mine, PKTTYPE_OUTGOING), 0);
        // The reserved byte before the QP number does not hide the multicast QP.
        let mut reserved = mine.clone();
        reserved[14 + 20 + 8 + 4] = 0xff;
        assert_eq!(run(&member, &reserved, PKTTYPE_MULTICAST), ACCEPT);
        // To a group's address but not to the multicast QP: the block list decides.
        assert_eq!(
            run(
                &member,
                &to_group(0x12_3456, [239, 1, 2, 3]),
                PKTTYPE_MULTICAST
            ),
            ACCEPT
        );
        assert_eq!(
            run(
                &member,
                &to_group(0x12_3556, [239, 1, 2, 3]),
                PKTTYPE_MULTICAST
            ),
            0
        );
        // A member still takes only its own blocks' unicast frames, and no one else's
        // outgoing unicast.
        assert_eq!(run(&member, &frame_to(0x12_3456), PKTTYPE_HOST), ACCEPT);
        assert_eq!(run(&member, &frame_to(0x12_3556), PKTTYPE_HOST), 0);
        let mut to_peer = frame_to(0x12_3456);
        to_peer[..6].copy_from_slice(&[2, 0, 0, 0, 0, 10]);
        assert_eq!(run(&member, &to_peer, PKTTYPE_OUTGOING), 0);
        // On lo every frame comes back in: outgoing copies stay out.
        let lo = member_of(Groups::Some(vec![g(239, 1, 2, 3)]), false);
        assert_eq!(run(&lo, &mine, PKTTYPE_OUTGOING), 0);
        assert_eq!(run(&lo, &mine, PKTTYPE_MULTICAST), ACCEPT);
        // Too many groups for one filter: every group's frames.
        assert_eq!(
            Groups::of((0..=MAX_FILTER_GROUPS as u32).map(|n| g(239, 0, 0, n as u8))),
            Groups::All
        );
        assert_eq!(Groups::of([]), Groups::None);
    }

    #[test]
    fn an_ipv6_group_is_checked_by_its_last_32_bits() {
        let group: std::net::Ipv6Addr = "ff12::8000:1234".parse().unwrap();
        let member = member_of(Groups::Some(vec![IpAddr::V6(group)]), true);
        // An IPv6 RoCE frame to the group and the multicast QP.
        let frame = |dst: std::net::Ipv6Addr| {
            let mut f = vec![0u8; 14 + 40 + 8 + 12 + 4];
            f[..6].copy_from_slice(&[0x33, 0x33, 0x80, 0, 0x12, 0x34]);
            f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
            f[14] = 0x60;
            f[14 + 6] = 17;
            f[14 + 24..14 + 40].copy_from_slice(&dst.octets());
            f[14 + 40 + 2..14 + 40 + 4].copy_from_slice(&4791u16.to_be_bytes());
            f[14 + 40 + 8 + 5..14 + 40 + 8 + 8].copy_from_slice(&[0xff; 3]);
            f
        };
        assert_eq!(run(&member, &frame(group), PKTTYPE_MULTICAST), ACCEPT);
        let other: std::net::Ipv6Addr = "ff12::8000:1235".parse().unwrap();
        assert_eq!(run(&member, &frame(other), PKTTYPE_MULTICAST), 0);
    }
}
