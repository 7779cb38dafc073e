//! The fuzzer against ferroce in process: no findings against a healthy target; a planted
//! bug found, cut down to the packet that triggers it, saved, and replayed.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferroce::link::Link;
use ferroce_wire::Opcode;

use super::*;
use crate::probe::local::LocalTarget;
use crate::probe::target::Target;

/// The probe's end of the wire, with a planted bug "in the target": after the probe sends
/// a packet with P_Key 0x7fff, the next six READ response packets carry one wrong byte
/// (with a good ICRC) — as a target that corrupts memory would answer.
struct Planted {
    inner: Arc<dyn Link>,
    corrupt: AtomicU32,
}

const BTH: usize = 14 + 20 + 8;

impl Link for Planted {
    fn mac(&self) -> [u8; 6] {
        self.inner.mac()
    }
    fn send(&self, frame: &[u8]) -> std::io::Result<bool> {
        if frame.get(BTH + 2..BTH + 4) == Some(&[0x7f, 0xff][..]) {
            self.corrupt.store(6, Ordering::SeqCst);
        }
        self.inner.send(frame)
    }
    fn recv(&self, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
        let r = self.inner.recv(buf)?;
        if let Some(n) = r {
            let op = Opcode::new(buf[BTH]);
            let read_response = op.is_some_and(|o| {
                o.operation() == ferroce_wire::Operation::RdmaReadResponse && o.has_payload()
            });
            if read_response && n > BTH + 40 && self.corrupt.load(Ordering::SeqCst) > 0 {
                self.corrupt.fetch_sub(1, Ordering::SeqCst);
                buf[n - 8] ^= 0x40;
                ferroce_wire::icrc::fill(&mut buf[14..n]).unwrap();
            }
        }
        Ok(r)
    }
    fn fd(&self) -> RawFd {
        self.inner.fd()
    }
}

fn options(dir: &std::path::Path, rounds: u64, seed: u64) -> FuzzOptions {
    FuzzOptions {
        rounds: Some(rounds),
        duration: None,
        seed,
        max_packets: 8,
        out_dir: dir.to_path_buf(),
        answer_ms: 5,
        via: "local".into(),
        minimize: true,
        recover_wait: Duration::from_secs(5),
    }
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ferroce-fuzz-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A fuzz run of `rounds` rounds against `target` that must find nothing: the totals.
fn run_clean(
    target: &mut dyn Target,
    link: Arc<dyn Link>,
    addr: crate::probe::peer::Addressing,
    dir: &std::path::Path,
    rounds: u64,
    seed: u64,
) -> FuzzReport {
    let r = run(
        target,
        link,
        addr,
        &options(dir, rounds, seed),
        mutate::builtin_templates(),
        None,
        &mut |_| {},
    )
    .unwrap();
    let found: Vec<String> = r.findings.iter().map(finding_text).collect();
    assert!(found.is_empty(), "{found:#?}");
    r
}

/// ferroce itself survives 150 rounds with every check right: no finding, no transient
/// failure (a false positive here would make every finding against another stack
/// doubtful).
#[test]
fn a_healthy_target_yields_no_findings() {
    let dir = temp_dir("healthy");
    let (mut target, link, addr) = LocalTarget::new().unwrap();
    let r = run_clean(&mut target, link, addr, &dir, 150, 1);
    assert_eq!(r.rounds, 150);
    assert!(r.packets >= 150);
    assert_eq!(r.transient, 0);
    assert!(r.connections >= 300, "a round and a check per round");
    // The target counted the mutations it refused (rxe's counter names).
    let counters = target.counters();
    let count = |n: &str| counters.iter().find(|c| c.0 == n).map_or(0, |c| c.1);
    assert!(
        count("rcvd_seq_err") + count("rx_bad_state") + count("rx_malformed") > 0,
        "{counters:?}"
    );
    // The last round is on disk before it was sent (what a crash leaves behind).
    let last = Repro::read(&dir.join("in-flight.pcapng")).unwrap();
    assert!(
        last.finding.starts_with("in flight: round 150 of seed 1"),
        "{}",
        last.finding
    );
    assert!(!last.sent().is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The planted bug is found as a wrong answer, cut down to the one packet that triggers
/// it, and its reproducer does it again on a new connection — but not to a healthy
/// target.
#[test]
fn a_planted_bug_is_found_minimized_and_replayed() {
    let dir = temp_dir("planted");
    let (mut target, link, addr) = LocalTarget::new().unwrap();
    let planted: Arc<dyn Link> = Arc::new(Planted {
        inner: link,
        corrupt: AtomicU32::new(0),
    });
    let mut opts = options(&dir, 400, 3);
    opts.rounds = Some(400);
    let mut found = None;
    let r = run(
        &mut target,
        planted.clone(),
        addr,
        &opts,
        mutate::builtin_templates(),
        None,
        &mut |_| {},
    )
    .unwrap();
    for f in &r.findings {
        if f.symptom.kind == FindingKind::WrongAnswer {
            found = Some(f.clone());
            break;
        }
    }
    let f = found.unwrap_or_else(|| {
        panic!(
            "the planted bug was not found in {} rounds: {:#?}",
            r.rounds,
            r.findings.iter().map(finding_text).collect::<Vec<_>>()
        )
    });
    assert!(f.reproduced, "{}", finding_text(&f));
    assert_eq!(f.kept.len(), 1, "{}", finding_text(&f));
    assert!(
        f.packets[f.kept[0]].contains("P_Key 0x7fff"),
        "{}",
        finding_text(&f)
    );
    assert!(
        f.symptom.detail.contains("read back"),
        "{}",
        f.symptom.detail
    );
    // The reproducer: one packet sent, on the connection it was sent on.
    let path = f.file.clone().expect("a reproducer was written");
    let repro = Repro::read(&path).unwrap();
    let sent = repro.sent();
    assert_eq!(sent.len(), 1);
    assert!(
        repro.finding.starts_with("wrong-answer"),
        "{}",
        repro.finding
    );
    // Replayed to the planted target: the same symptom.
    let mut fz = Fuzzer::new(&mut target, planted, addr, 5);
    let a = fz.replay(&sent, &repro.conn);
    assert_eq!(a.symptom.map(|s| s.kind), Some(FindingKind::WrongAnswer));
    // Replayed to a healthy ferroce: nothing wrong.
    let (mut healthy, link, addr) = LocalTarget::new().unwrap();
    let mut fz = Fuzzer::new(&mut healthy, link, addr, 5);
    let a = fz.replay(&sent, &repro.conn);
    assert!(a.symptom.is_none(), "{:?}", a.symptom);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_checks_parse_and_fit_each_program() {
    use Needs::*;
    for (offers, name) in [
        (
            vec![Any, Write, Read, Atomic, Send],
            "check-write-read-back",
        ),
        (vec![Any, Atomic, NoRecv], "check-fetch-add-twice"),
        (vec![Any, Read, NoRecv], "check-read"),
        (vec![Any, Write, NoRecv], "check-write"),
        (vec![Any, Send, Requester], "check-send"),
    ] {
        assert_eq!(check_case(&offers).name, name);
    }
}

/// Of three packets, the finding keeps the one that causes it.
#[test]
fn minimizing_keeps_only_the_packet_that_matters() {
    use ferroce_wire::{BthRepr, ExtRepr, Psn, RethRepr};
    let dir = temp_dir("minimize");
    let (mut target, link, addr) = LocalTarget::new().unwrap();
    let planted: Arc<dyn Link> = Arc::new(Planted {
        inner: link,
        corrupt: AtomicU32::new(0),
    });
    let opts = options(&dir, 1, 1);
    let mut fz = Fuzzer::new(&mut target, planted, addr, 5);
    let mut described = Vec::new();
    let first = fz.attempt(&mut |peer, remote| {
        (0..3u32)
            .map(|k| {
                let mut bth = BthRepr::new(
                    Opcode::RC_RDMA_WRITE_ONLY,
                    remote.qpn,
                    Psn::new((remote.epsn + k) & Psn::MASK),
                );
                if k == 1 {
                    bth.pkey = 0x7fff;
                }
                let ext = ExtRepr {
                    reth: Some(RethRepr {
                        va: remote.va + u64::from(k) * 64,
                        rkey: remote.rkey,
                        dma_len: 64,
                    }),
                    ..Default::default()
                };
                described.push(format!("write {k}"));
                peer.build(bth, ext, &[k as u8; 64], &Default::default())
                    .unwrap()
            })
            .collect()
    });
    let symptom = first.symptom.clone().expect("the planted bug shows");
    assert_eq!(symptom.kind, FindingKind::WrongAnswer);
    let mut report = FuzzReport::default();
    let f = settle(&mut fz, &opts, 1, first, described, symptom, &mut report);
    assert!(f.reproduced, "{}", finding_text(&f));
    assert_eq!(f.kept, vec![1], "{}", finding_text(&f));
    assert!(report.stopped.is_none());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// ferroce as ibv_rc_pingpong offers it: SENDs only, a SEND answered with one.
struct PingpongLike(LocalTarget);

impl Target for PingpongLike {
    fn describe(&self) -> String {
        "ferroce, pingpong rights".into()
    }
    fn offers(&self) -> &[Needs] {
        &[Needs::Any, Needs::Send, Needs::Requester]
    }
    fn connect(
        &mut self,
        mine: crate::probe::target::Mine,
        needs: Needs,
    ) -> Result<crate::probe::target::Connected, String> {
        self.0.connect(mine, needs)
    }
    fn waits_for_send(&self) -> bool {
        true
    }
}

/// Through a pingpong program the check is a SEND, its answer acknowledged; rounds of
/// SENDs leave a healthy target healthy.
#[test]
fn pingpong_targets_are_checked_with_sends() {
    let dir = temp_dir("pingpong");
    let (local, link, addr) = LocalTarget::new().unwrap();
    let mut target = PingpongLike(local);
    assert_eq!(check_case(target.offers()).name, "check-send");
    let r = run_clean(&mut target, link, addr, &dir, 15, 4);
    assert_eq!((r.rounds, r.transient), (15, 0));
    std::fs::remove_dir_all(&dir).unwrap();
}
