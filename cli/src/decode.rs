//! Turning captured frames into one-line and JSON summaries of RoCE v2 packets.

use std::net::IpAddr;

use ferroce_wire::{
    aeth::NakCode, cm, mad, Datagram, Error as WireError, Frame, IpHeader, Packet, Syndrome,
};
use serde_json::{json, Map, Value};

use ferroce::capture::{CapturedFrame, LinkType};

/// What a captured frame turned out to be.
#[derive(Debug)]
pub enum Classified<'a> {
    /// A well-formed RoCE v2 packet (its ICRC may still be bad).
    Roce(Datagram<'a>),
    /// Not RoCE v2 at all (ARP, TCP, other UDP ports, other link types).
    Other,
    /// Addressed to the RoCE v2 port (or claiming to be RoCE) but malformed.
    Corrupt(WireError),
}

fn is_not_roce(e: &WireError) -> bool {
    matches!(
        e,
        WireError::NotIp(_) | WireError::NotUdp(_) | WireError::NotRoce(_)
    )
}

/// Classifies a frame by parsing it down to the IB transport packet.
pub fn classify(frame: &CapturedFrame) -> Classified<'_> {
    let parsed = match frame.link {
        LinkType::Ethernet => Frame::parse(&frame.data).map(|f| f.datagram),
        LinkType::RawIp | LinkType::LinuxSll => match frame.ip_payload() {
            Some(ip) => Datagram::parse(ip),
            None => return Classified::Other,
        },
        LinkType::Other(_) => return Classified::Other,
    };
    match parsed {
        Ok(d) => Classified::Roce(d),
        Err(e) if is_not_roce(&e) => Classified::Other,
        Err(e) => Classified::Corrupt(e),
    }
}

/// The decoded fields of one RoCE v2 packet.
#[derive(Debug, Clone)]
pub struct Summary {
    pub index: usize,
    pub time: f64,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub json: Value,
    pub line: String,
}

/// Source and destination addresses of a datagram.
pub(crate) fn ip_addrs(d: &Datagram<'_>) -> (IpAddr, IpAddr) {
    match &d.ip {
        IpHeader::V4(h) => (h.source.into(), h.destination.into()),
        IpHeader::V6(h) => (h.source.into(), h.destination.into()),
    }
}

fn syndrome_json(s: Syndrome) -> (String, Value) {
    match s {
        Syndrome::Ack { credits } => (
            format!("ACK credits={credits}"),
            json!({"type": "ACK", "credits": credits}),
        ),
        Syndrome::RnrNak { timer } => (
            format!("RNR_NAK timer={timer}"),
            json!({"type": "RNR_NAK", "timer": timer}),
        ),
        Syndrome::Nak(code) => {
            let name = match code {
                NakCode::PsnSequenceError => "PSN_SEQUENCE_ERROR",
                NakCode::InvalidRequest => "INVALID_REQUEST",
                NakCode::RemoteAccessError => "REMOTE_ACCESS_ERROR",
                NakCode::RemoteOperationalError => "REMOTE_OPERATIONAL_ERROR",
                NakCode::InvalidRdRequest => "INVALID_RD_REQUEST",
            };
            (format!("NAK {name}"), json!({"type": "NAK", "code": name}))
        }
    }
}

/// Extension headers as `(text, key, json)` triples, in wire order.
fn extensions(p: &Packet<&[u8]>) -> Vec<(String, &'static str, Value)> {
    let mut out = Vec::new();
    if let Some(h) = p.deth() {
        out.push((
            format!("DETH qkey={:#x} src_qp={:#x}", h.qkey(), h.src_qp()),
            "deth",
            json!({"qkey": h.qkey(), "src_qp": h.src_qp()}),
        ));
    }
    if let Some(h) = p.reth() {
        out.push((
            format!(
                "RETH va={:#x} rkey={:#x} len={}",
                h.va(),
                h.rkey(),
                h.dma_len()
            ),
            "reth",
            json!({"va": h.va(), "rkey": h.rkey(), "dma_len": h.dma_len()}),
        ));
    }
    if let Some(h) = p.atomic_eth() {
        out.push((
            format!(
                "AtomicETH va={:#x} rkey={:#x} swap_add={:#x} compare={:#x}",
                h.va(),
                h.rkey(),
                h.swap_add(),
                h.compare()
            ),
            "atomic_eth",
            json!({"va": h.va(), "rkey": h.rkey(), "swap_add": h.swap_add(), "compare": h.compare()}),
        ));
    }
    if let Some(h) = p.aeth() {
        let raw = h.syndrome_raw();
        let (text, mut v) = match Syndrome::from_byte(raw) {
            Ok(s) => syndrome_json(s),
            Err(_) => ("RESERVED".to_string(), json!({"type": "RESERVED"})),
        };
        v["syndrome"] = json!(raw);
        v["msn"] = json!(h.msn());
        out.push((format!("AETH {text} msn={}", h.msn()), "aeth", v));
    }
    if let Some(h) = p.atomic_ack_eth() {
        out.push((
            format!("AtomicAckETH orig={:#x}", h.orig()),
            "atomic_ack_eth",
            json!({"orig": h.orig()}),
        ));
    }
    if let Some(h) = p.immdt() {
        out.push((
            format!("ImmDt {:#010x}", h.imm()),
            "immdt",
            json!({"imm": h.imm()}),
        ));
    }
    if let Some(h) = p.ieth() {
        out.push((
            format!("IETH rkey={:#x}", h.rkey()),
            "ieth",
            json!({"rkey": h.rkey()}),
        ));
    }
    if p.cnp().is_some() {
        out.push(("CNP".to_string(), "cnp", json!({})));
    }
    if p.deth().is_some() && p.bth().dest_qp() == mad::GSI_QPN {
        out.push(management(p.payload()));
    }
    out
}

/// A MAD to QP1: the CM message it holds (with rdma_cm's addresses when a request has
/// them), or why it is not one.
fn management(payload: &[u8]) -> (String, &'static str, Value) {
    let parsed = mad::Mad::new_checked(payload).and_then(|m| cm::Repr::parse(&m));
    let r = match parsed {
        Ok(r) => r,
        Err(e) => return (format!("MAD ({e})"), "mad", json!({"error": e.to_string()})),
    };
    let ids = |local: u32, remote: u32| {
        (
            format!("comm={local:#x} remote={remote:#x}"),
            json!({"local_comm_id": local, "remote_comm_id": remote}),
        )
    };
    let rdma_cm_ip = |private: &[u8]| match cm::rdma_cm::IpHeader::parse(private) {
        Ok(h) => (
            format!(" ip={}:{} -> {}", h.src, h.src_port, h.dst),
            json!({"src": h.src.to_string(), "src_port": h.src_port, "dst": h.dst.to_string()}),
        ),
        Err(_) => (String::new(), Value::Null),
    };
    let service = |sid: u64| match cm::rdma_cm::split_service_id(sid) {
        Some((ps, port)) => format!("sid={sid:#x} (ps={:#06x} port={port})", ps.0),
        None => format!("sid={sid:#x}"),
    };
    let (text, mut v) = match &r.msg {
        cm::Message::Req(q) => {
            let (ip, ipj) = rdma_cm_ip(&q.private_data);
            (
                format!(
                    "comm={:#x} {} qpn={:#x} psn={:#x} {:?} mtu={} retry={} rnr_retry={}{ip}",
                    q.local_comm_id,
                    service(q.service_id),
                    q.local_qpn,
                    q.starting_psn,
                    q.transport,
                    q.path_mtu,
                    q.retry_count,
                    q.rnr_retry_count
                ),
                json!({"local_comm_id": q.local_comm_id, "service_id": q.service_id,
                       "local_qpn": q.local_qpn, "starting_psn": q.starting_psn,
                       "transport": format!("{:?}", q.transport), "path_mtu": q.path_mtu,
                       "rdma_cm": ipj}),
            )
        }
        cm::Message::Rep(p) => {
            let (t, mut j) = ids(p.local_comm_id, p.remote_comm_id);
            j["local_qpn"] = json!(p.local_qpn);
            j["starting_psn"] = json!(p.starting_psn);
            (
                format!("{t} qpn={:#x} psn={:#x}", p.local_qpn, p.starting_psn),
                j,
            )
        }
        cm::Message::Rej(x) => {
            let (t, mut j) = ids(x.local_comm_id, x.remote_comm_id);
            j["reason"] = json!(x.reason.0);
            j["message_rejected"] = json!(format!("{:?}", x.message_rejected));
            (
                format!("{t} reason={} of {:?}", x.reason.0, x.message_rejected),
                j,
            )
        }
        cm::Message::Mra(x) => ids(x.local_comm_id, x.remote_comm_id),
        cm::Message::Rtu(x) => ids(x.local_comm_id, x.remote_comm_id),
        cm::Message::Drep(x) => ids(x.local_comm_id, x.remote_comm_id),
        cm::Message::Dreq(x) => {
            let (t, mut j) = ids(x.local_comm_id, x.remote_comm_id);
            j["remote_qpn"] = json!(x.remote_qpn);
            (format!("{t} remote_qpn={:#x}", x.remote_qpn), j)
        }
        cm::Message::SidrReq(x) => {
            let (ip, ipj) = rdma_cm_ip(&x.private_data);
            (
                format!("req={:#x} {}{ip}", x.request_id, service(x.service_id)),
                json!({"request_id": x.request_id, "service_id": x.service_id, "rdma_cm": ipj}),
            )
        }
        cm::Message::SidrRep(x) => (
            format!(
                "req={:#x} status={} qpn={:#x} qkey={:#x}",
                x.request_id, x.status.0, x.qpn, x.qkey
            ),
            json!({"request_id": x.request_id, "status": x.status.0, "qpn": x.qpn,
                   "qkey": x.qkey}),
        ),
    };
    v["type"] = json!(r.msg.name());
    v["tid"] = json!(r.tid);
    (format!("CM {} {text}", r.msg.name()), "cm", v)
}

/// Summarises a RoCE v2 datagram found in `frame`.
pub fn summarize(frame: &CapturedFrame, d: &Datagram<'_>) -> Summary {
    let p = d.ib();
    let bth = p.bth();
    let op = p.opcode();
    let (src, dst) = ip_addrs(d);
    let icrc_ok = d.icrc_ok();
    let time = frame.timestamp.as_secs_f64();
    let ext = extensions(&p);
    let payload_len = p.payload().len();

    let mut line = format!(
        "{:>5} {:.6} {} -> {} {} qp={:#x} psn={}{}",
        frame.index,
        time,
        src,
        dst,
        op.name(),
        bth.dest_qp(),
        bth.psn(),
        if bth.ack_req() { " ack_req" } else { "" },
    );
    for (text, _, _) in &ext {
        line.push_str(" | ");
        line.push_str(text);
    }
    line.push_str(&format!(
        " | payload={payload_len} icrc={}",
        if icrc_ok { "ok" } else { "BAD" }
    ));

    let mut obj = Map::new();
    obj.insert("index".into(), json!(frame.index));
    obj.insert("time".into(), json!(time));
    obj.insert("src".into(), json!(src.to_string()));
    obj.insert("dst".into(), json!(dst.to_string()));
    obj.insert("src_port".into(), json!(d.udp.source_port));
    obj.insert("opcode".into(), json!(op.name()));
    obj.insert("opcode_value".into(), json!(op.value()));
    obj.insert("dest_qp".into(), json!(bth.dest_qp()));
    obj.insert("psn".into(), json!(bth.psn().value()));
    obj.insert("ack_req".into(), json!(bth.ack_req()));
    obj.insert("solicited".into(), json!(bth.solicited()));
    obj.insert("pkey".into(), json!(bth.pkey()));
    obj.insert("pad".into(), json!(bth.pad_count()));
    obj.insert("ecn".into(), json!(d.ecn()));
    obj.insert("payload_len".into(), json!(payload_len));
    obj.insert("icrc_ok".into(), json!(icrc_ok));
    for (_, key, v) in ext {
        obj.insert(key.into(), v);
    }
    Summary {
        index: frame.index,
        time,
        src,
        dst,
        json: Value::Object(obj),
        line,
    }
}

/// Counts over a whole capture.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub frames: usize,
    pub roce: usize,
    pub other: usize,
    pub corrupt: usize,
    pub icrc_bad: usize,
}
