//! `ferroce mesh`: one rank of an all-to-all RC test among processes sharing a host.
//!
//! Every rank has one RC QP to every other rank. Ranks meet through files in a shared
//! directory (each writes its GID, PSN, buffer and per-peer QP numbers, then waits for the
//! others'), then every rank RDMA-WRITEs `iters` messages of `size` bytes into each peer's
//! buffer, each WRITE carrying its iteration as immediate data; the receiving rank checks
//! every byte when the immediate arrives. A peer that dies mid-run shows as *lost*: the
//! QP to it ends in retry-exceeded (and flushed) completions, never a hang.
//!
//! `--idle` instead opens the device, creates one QP per peer, prints their numbers, and
//! waits: the "new process" of the crash test, which must receive nothing meant for a
//! dead one.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Write};
use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ferroce::verbs::{
    random_psn, wr, Access, Context, QpCap, QpType, QueuePair, RcPath, RecvWr, WcOpcode, WcStatus,
    WorkCompletion,
};

/// What one rank does.
#[derive(Debug, Clone)]
pub struct Options {
    /// This rank (0-based).
    pub rank: usize,
    /// How many ranks.
    pub ranks: usize,
    /// The directory the ranks meet in.
    pub dir: PathBuf,
    /// Bytes per message.
    pub size: usize,
    /// Messages to each peer.
    pub iters: usize,
    /// Pause between rounds (one message to every peer per round).
    pub interval: Duration,
    /// Local ACK timeout exponent of the QPs.
    pub qp_timeout: u8,
    /// Retries before retry-exceeded.
    pub retry_cnt: u8,
    /// Give up when nothing finishes for this long.
    pub timeout: Duration,
    /// Source GID index.
    pub gid_index: Option<usize>,
}

/// How the exchange with one peer ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerOutcome {
    /// Every message sent and received, every byte as expected.
    Ok,
    /// The connection died (the peer went away): the first error completion's status.
    Lost {
        /// Status of the first failed completion.
        status: WcStatus,
        /// Messages the peer acknowledged.
        sent: usize,
        /// Messages received (and checked) from it.
        received: usize,
    },
}

/// Why a rank failed.
#[derive(Debug)]
pub enum MeshError {
    /// I/O on the meeting directory.
    Io(io::Error),
    /// A verbs call failed.
    Verbs(ferroce::verbs::Error),
    /// Received bytes differ from what the peer wrote.
    Corrupt {
        /// The sending rank.
        from: usize,
        /// The message.
        iter: usize,
        /// First differing offset.
        offset: usize,
    },
    /// Something else (peers missing, timeout).
    Other(String),
}

impl fmt::Display for MeshError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MeshError::Io(e) => write!(f, "{e}"),
            MeshError::Verbs(e) => write!(f, "{e}"),
            MeshError::Corrupt { from, iter, offset } => write!(
                f,
                "data from rank {from}, message {iter}, differs at byte {offset}"
            ),
            MeshError::Other(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for MeshError {}

impl From<io::Error> for MeshError {
    fn from(e: io::Error) -> Self {
        MeshError::Io(e)
    }
}

impl From<ferroce::verbs::Error> for MeshError {
    fn from(e: ferroce::verbs::Error) -> Self {
        MeshError::Verbs(e)
    }
}

/// The byte at `i` of message `iter` from rank `src` to rank `dst`.
fn pattern(src: usize, dst: usize, iter: usize, i: usize) -> u8 {
    (src * 31 + dst * 17 + iter * 7 + i + (i >> 8) * 13) as u8
}

/// What a rank publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Card {
    gid: Ipv6Addr,
    psn: u32,
    rkey: u32,
    addr: u64,
    /// QP number towards each rank (this rank's own entry is 0).
    qpns: Vec<u32>,
}

impl Card {
    fn encode(&self) -> String {
        let q: Vec<String> = self.qpns.iter().map(|q| format!("{q:#x}")).collect();
        format!(
            "gid {}\npsn {:#x}\nrkey {:#x}\naddr {:#x}\nqpns {}\n",
            self.gid,
            self.psn,
            self.rkey,
            self.addr,
            q.join(" ")
        )
    }

    /// The card of a mesh of `ranks` processes; `None` unless every field is there and in
    /// range (a card is another process's file: a short QP list must not index out of
    /// bounds, a value too wide must not be truncated into a valid-looking one).
    fn decode(s: &str, ranks: usize) -> Option<Card> {
        let field = |name: &str| {
            s.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ').map(str::to_string))
        };
        let hex = |v: &str| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok();
        let bits24 = |v: u64| (v < 1 << 24).then_some(v as u32);
        let qpns = field("qpns")?
            .split_whitespace()
            .map(|q| hex(q).and_then(bits24))
            .collect::<Option<Vec<u32>>>()?;
        if qpns.len() != ranks {
            return None;
        }
        Some(Card {
            gid: field("gid")?.parse().ok()?,
            psn: hex(&field("psn")?).and_then(bits24)?,
            rkey: u32::try_from(hex(&field("rkey")?)?).ok()?,
            addr: hex(&field("addr")?)?,
            qpns,
        })
    }
}

/// Writes `text` to `path` atomically (readers never see half a file).
fn publish(path: &Path, text: &str) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Waits until every rank's file `name(r)` exists; returns their contents.
fn gather(o: &Options, name: impl Fn(usize) -> String) -> Result<Vec<String>, MeshError> {
    let deadline = Instant::now() + o.timeout;
    let mut got: Vec<Option<String>> = vec![None; o.ranks];
    loop {
        for (r, slot) in got.iter_mut().enumerate() {
            if slot.is_none() {
                *slot = std::fs::read_to_string(o.dir.join(name(r))).ok();
            }
        }
        if got.iter().all(Option::is_some) {
            return Ok(got.into_iter().flatten().collect());
        }
        if Instant::now() > deadline {
            let missing: Vec<usize> = (0..o.ranks).filter(|r| got[*r].is_none()).collect();
            return Err(MeshError::Other(format!(
                "ranks {missing:?} did not show up in {} within {:?}",
                o.dir.display(),
                o.timeout
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Per-peer progress.
#[derive(Debug, Default, Clone)]
struct Progress {
    posted: usize,
    acked: usize,
    failed_sends: usize,
    received: usize,
    lost: Option<WcStatus>,
}

impl Progress {
    fn done(&self, iters: usize) -> bool {
        self.acked + self.failed_sends == self.posted
            && (self.lost.is_some() || (self.posted == iters && self.received == iters))
    }
}

/// Runs one rank; returns each peer's outcome (this rank's own entry is `Ok`).
pub fn run(ctx: &Context, o: &Options, out: &mut dyn Write) -> Result<Vec<PeerOutcome>, MeshError> {
    if o.rank >= o.ranks || o.ranks < 2 {
        return Err(MeshError::Other(format!(
            "rank {} of {} ranks: need 0 <= rank < ranks and ranks >= 2",
            o.rank, o.ranks
        )));
    }
    let (gid_index, gid) = ctx.source_gid(o.gid_index)?;
    let (n, iters, size) = (o.ranks, o.iters, o.size.max(1));
    let slot = |src: usize, iter: usize| (src * iters + iter) * size;
    let pd = ctx.alloc_pd()?;
    let inbox = pd.reg_mr(n * iters * size, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let outbox = pd.reg_mr(n * iters * size, Access::LOCAL_WRITE)?;
    let cq = ctx.create_cq((n - 1) * (2 * iters + 2))?;
    let cap = QpCap {
        max_send_wr: iters as u32 + 1,
        max_recv_wr: iters as u32 + 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut qps: Vec<Option<QueuePair>> = Vec::new();
    for p in 0..n {
        qps.push(if p == o.rank {
            None
        } else {
            let qp = pd.create_qp(&cq, &cq, QpType::Rc, cap)?;
            qp.init(Access::REMOTE_WRITE, 0)?;
            for _ in 0..iters {
                qp.post_recv(&RecvWr {
                    wr_id: p as u64,
                    sg_list: Vec::new(),
                })?;
            }
            Some(qp)
        });
    }
    let psn = random_psn()?;
    let me = Card {
        gid,
        psn,
        rkey: inbox.rkey(),
        addr: inbox.addr(),
        qpns: qps
            .iter()
            .map(|q| q.as_ref().map_or(0, QueuePair::qpn))
            .collect(),
    };
    publish(&o.dir.join(format!("rank-{}", o.rank)), &me.encode())?;
    let cards: Vec<Card> = gather(o, |r| format!("rank-{r}"))?
        .iter()
        .enumerate()
        .map(|(r, s)| {
            Card::decode(s, n).ok_or_else(|| {
                MeshError::Other(format!(
                    "rank {r}'s card in {} is malformed (is another mesh of a different size using the directory?)",
                    o.dir.display()
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    let mut by_qpn = HashMap::new();
    for (p, qp) in qps.iter().enumerate() {
        let Some(qp) = qp else { continue };
        let theirs = &cards[p];
        let mut path = RcPath::new(theirs.gid, theirs.qpns[o.rank], theirs.psn, psn);
        path.mtu = ctx.attr().active_mtu;
        path.sgid_index = gid_index as u8;
        path.timeout = o.qp_timeout;
        path.retry_cnt = o.retry_cnt;
        path.access = Access::REMOTE_WRITE;
        qp.connect(&path)?;
        by_qpn.insert(qp.qpn(), p);
    }
    // Nobody sends before every QP is ready to receive.
    publish(&o.dir.join(format!("ready-{}", o.rank)), "ready\n")?;
    gather(o, |r| format!("ready-{r}"))?;
    writeln!(
        out,
        "mesh: rank {} of {n} connected to {} peers",
        o.rank,
        n - 1
    )?;

    let mut progress = vec![Progress::default(); n];
    let mut wcs: Vec<WorkCompletion> = Vec::new();
    let mut check = vec![0u8; size];
    let mut handle = |wcs: &mut Vec<WorkCompletion>,
                      progress: &mut Vec<Progress>|
     -> Result<bool, MeshError> {
        wcs.clear();
        cq.poll(wcs, 64);
        for wc in wcs.iter() {
            let Some(&p) = by_qpn.get(&wc.qp_num) else {
                continue;
            };
            let pr = &mut progress[p];
            let is_recv = matches!(wc.opcode, WcOpcode::RecvRdmaWithImm | WcOpcode::Recv);
            if wc.status != WcStatus::Success {
                if pr.lost.is_none() {
                    pr.lost = Some(wc.status);
                }
                if !is_recv {
                    pr.failed_sends += 1;
                }
                continue;
            }
            if is_recv {
                let iter = wc.imm_data as usize;
                if iter >= iters {
                    return Err(MeshError::Other(format!(
                        "rank {p} sent message {iter} of {iters}"
                    )));
                }
                inbox.read(slot(p, iter), &mut check)?;
                if let Some(offset) = (0..size).find(|i| check[*i] != pattern(p, o.rank, iter, *i))
                {
                    return Err(MeshError::Corrupt {
                        from: p,
                        iter,
                        offset,
                    });
                }
                pr.received += 1;
            } else {
                pr.acked += 1;
            }
        }
        Ok(!wcs.is_empty())
    };

    for iter in 0..iters {
        for (p, qp) in qps.iter().enumerate() {
            let Some(qp) = qp else { continue };
            if progress[p].lost.is_some() {
                continue;
            }
            let bytes: Vec<u8> = (0..size).map(|i| pattern(o.rank, p, iter, i)).collect();
            let off = slot(p, iter);
            outbox.write(off, &bytes)?;
            let remote = cards[p].addr + slot(o.rank, iter) as u64;
            let w = wr::rdma_write_with_imm(
                iter as u64,
                outbox.sge(off, size),
                remote,
                cards[p].rkey,
                iter as u32,
            );
            match qp.post_send(&w) {
                Ok(()) => progress[p].posted += 1,
                // A QP already in error takes no more work: the peer is lost.
                Err(_) if progress[p].lost.is_some() => {}
                Err(e) => {
                    progress[p].lost.get_or_insert(WcStatus::WrFlushErr);
                    tracing::debug!(peer = p, error = %e, "post failed");
                }
            }
        }
        let until = Instant::now() + o.interval;
        while Instant::now() < until {
            if !handle(&mut wcs, &mut progress)? {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
    let mut last = Instant::now();
    while !(0..n).all(|p| p == o.rank || progress[p].done(iters)) {
        if handle(&mut wcs, &mut progress)? {
            last = Instant::now();
        } else if last.elapsed() > o.timeout {
            let stuck: Vec<usize> = (0..n)
                .filter(|p| *p != o.rank && !progress[*p].done(iters))
                .collect();
            return Err(MeshError::Other(format!(
                "no completion for {:?}; peers {stuck:?} unfinished: {:?}",
                o.timeout,
                stuck.iter().map(|p| &progress[*p]).collect::<Vec<_>>()
            )));
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let mut outcomes = Vec::new();
    for (p, pr) in progress.iter().enumerate() {
        let outcome = match pr.lost {
            _ if p == o.rank => PeerOutcome::Ok,
            None => PeerOutcome::Ok,
            Some(status) => PeerOutcome::Lost {
                status,
                sent: pr.acked,
                received: pr.received,
            },
        };
        if p != o.rank {
            match &outcome {
                PeerOutcome::Ok => writeln!(
                    out,
                    "mesh: rank {} peer {p}: ok, {} sent, {} received and checked",
                    o.rank, pr.acked, pr.received
                )?,
                PeerOutcome::Lost { status, sent, received } => writeln!(
                    out,
                    "mesh: rank {} peer {p}: lost ({status:?}), {sent} sent, {received} received and checked",
                    o.rank
                )?,
            }
        }
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// `--idle`: `qps` QPs that nobody talks to, for `wait`; prints their numbers.
pub fn idle(
    ctx: &Context,
    qps: usize,
    wait: Duration,
    out: &mut dyn Write,
) -> Result<(), MeshError> {
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(qps.max(1) * 2)?;
    let mut held = Vec::new();
    for _ in 0..qps {
        let qp = pd.create_qp(&cq, &cq, QpType::Rc, QpCap::default())?;
        qp.init(Access::REMOTE_WRITE, 0)?;
        writeln!(out, "mesh: idle qpn {:#x}", qp.qpn())?;
        held.push(qp);
    }
    out.flush()?;
    std::thread::sleep(wait);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cards_round_trip() {
        let c = Card {
            gid: "::ffff:10.0.0.1".parse().unwrap(),
            psn: 0xabcdef,
            rkey: 0x1234_5678,
            addr: 0x7f00_0000_1000,
            qpns: vec![0, 0x12_3456, 0xff_ffff],
        };
        assert_eq!(Card::decode(&c.encode(), 3), Some(c.clone()));
        assert_eq!(Card::decode("gid ::1\npsn 1\n", 3), None);
    }

    #[test]
    fn cards_of_another_size_or_out_of_range_are_refused() {
        let c = Card {
            gid: "::ffff:10.0.0.1".parse().unwrap(),
            psn: 1,
            rkey: 2,
            addr: 3,
            qpns: vec![0, 0x11],
        };
        let text = c.encode();
        // A card of a 2-process mesh read by a 4-process one: its QP list is short.
        assert_eq!(Card::decode(&text, 4), None);
        assert_eq!(Card::decode(&text, 2), Some(c));
        let wide = |from: &str, to: &str| Card::decode(&text.replace(from, to), 2);
        assert_eq!(
            wide("qpns 0x0 0x11", "qpns 0x0 0x1000011"),
            None,
            "QPN over 24 bits"
        );
        assert_eq!(wide("psn 0x1", "psn 0x1000001"), None, "PSN over 24 bits");
        assert_eq!(
            wide("rkey 0x2", "rkey 0x100000002"),
            None,
            "rkey over 32 bits"
        );
    }

    #[test]
    fn two_ranks_on_a_memory_wire_exchange_and_check() {
        // Two contexts on one in-memory wire stand in for two processes.
        let (a, b) = Context::memory_pair().unwrap();
        let dir = std::env::temp_dir().join(format!("ferroce-mesh-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let opts = |rank| Options {
            rank,
            ranks: 2,
            dir: dir.clone(),
            size: 3000,
            iters: 5,
            interval: Duration::from_millis(1),
            qp_timeout: 14,
            retry_cnt: 7,
            timeout: Duration::from_secs(20),
            gid_index: None,
        };
        let (oa, ob) = (opts(0), opts(1));
        let t =
            std::thread::spawn(move || run(&b, &ob, &mut Vec::new()).map_err(|e| e.to_string()));
        let mut text = Vec::new();
        let ra = run(&a, &oa, &mut text).unwrap();
        let rb = t.join().unwrap().unwrap();
        assert_eq!(ra, vec![PeerOutcome::Ok, PeerOutcome::Ok]);
        assert_eq!(rb, vec![PeerOutcome::Ok, PeerOutcome::Ok]);
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains("peer 1: ok, 5 sent, 5 received and checked"),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
