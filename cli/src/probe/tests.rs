//! The built-in suite against ferroce itself on an in-memory wire, and the runner's own
//! checks: a wrong expectation must fail, a missing capability must skip.

use super::cases::{self, Case};
use super::local::LocalTarget;
use super::runner::Verdict;
use super::*;

fn run(cases: &[Case]) -> Vec<Outcome> {
    run_as(cases, None)
}

fn run_as(cases: &[Case], stack: Option<&str>) -> Vec<Outcome> {
    let (mut target, link, addr) = LocalTarget::new().unwrap();
    let opts = SuiteOptions {
        stack: stack.map(str::to_string),
        ..Default::default()
    };
    // Only the cases that did not pass are printed: a failure's story comes first in the
    // captured output, where CI's excerpt of it begins.
    let mut log = Vec::new();
    let outcomes = run_suite(cases, &mut target, &link, addr, &opts, &mut |c, o| {
        if o.verdict != Verdict::Pass {
            report::case_block(&mut log, c, o).unwrap();
        }
    });
    print!("{}", String::from_utf8_lossy(&log));
    outcomes
}

/// Every case passes on ferroce but the deviations its case files document for it.
#[test]
fn ferroce_passes_the_builtin_suite() {
    let all = cases::builtin();
    let outcomes = run_as(&all, Some("ferroce"));
    let bad: Vec<_> = outcomes
        .iter()
        .filter(|o| !matches!(o.verdict, Verdict::Pass | Verdict::Known(_)))
        .map(|o| format!("{} {:?} at step {:?}", o.name, o.verdict, o.failed_step))
        .collect();
    assert!(bad.is_empty(), "cases not passed: {bad:#?}");
    assert_eq!(outcomes.len(), all.len());
    let known: Vec<_> = outcomes
        .iter()
        .filter(|o| matches!(o.verdict, Verdict::Known(_)))
        .map(|o| o.name.as_str())
        .collect();
    assert_eq!(known, ["reserved-opcode"]);
}

/// `before_timer` waits three quarters of the target's ACK timer (the local target's is
/// 268 ms), not a fixed time.
#[test]
fn before_timer_scales_the_wait_to_the_targets_timer() {
    let c = one(r#"
[[case]]
name = "quiet"
needs = "write"
summary = "s"
cite = "c"
steps = [ { expect = "REQUEST", before_timer = true } ]
"#);
    let start = std::time::Instant::now();
    let o = run(&c);
    let waited = start.elapsed();
    assert_eq!(o[0].verdict, Verdict::Fail);
    assert!(
        o[0].lines.iter().any(|l| l
            .text
            .contains("within 201 ms (before the target's 268 ms ACK timer)")),
        "{:#?}",
        o[0].lines
    );
    assert!(
        waited >= std::time::Duration::from_millis(201),
        "{waited:?}"
    );
}

/// The `reader` target sends of its own accord, as an ib_read_bw client does once
/// connected; connecting drains the probe's queue, and must not drop its first READ. (CI
/// once failed `target-read-implied-nak` so: the reader thread, started inside `connect`,
/// sometimes sent before the drain; the probe then saw only the READ's retransmission
/// after the ACK timer, and the target, rightly, started no second retry for the implied
/// NAK while that one was under way.) Here `connect` lingers as a slow machine might.
#[test]
fn what_the_target_sends_while_connecting_reaches_the_case() {
    use std::time::{Duration, Instant};
    struct Eager(LocalTarget);
    impl target::Target for Eager {
        fn describe(&self) -> String {
            "sends while connecting".into()
        }
        fn offers(&self) -> &[cases::Needs] {
            self.0.offers()
        }
        fn connect(
            &mut self,
            mine: target::Mine,
            needs: cases::Needs,
        ) -> Result<target::Connected, String> {
            let c = self.0.connect(mine, needs)?;
            // Time for a READ posted inside `connect` to reach the wire before it returns.
            std::thread::sleep(Duration::from_millis(100));
            Ok(c)
        }
    }
    let (t, link, addr) = LocalTarget::new().unwrap();
    let mut t = Eager(t);
    let (mut peer, connected) =
        connect_fresh(&mut t, &link, &mut addr.into(), cases::Needs::Reader).unwrap();
    // Well before the target's ACK timer (268 ms) could send the READ a second time.
    let deadline = Instant::now() + Duration::from_millis(connected.remote.timeout_ms / 2);
    let first = peer.recv(deadline).unwrap();
    assert!(
        matches!(&first, Some(r) if r.opcode == ferroce_wire::Opcode::RC_RDMA_READ_REQUEST),
        "the target's first READ did not reach the case: {first:?}"
    );
}

fn one(text: &str) -> Vec<Case> {
    cases::parse(text, "test.toml").unwrap()
}

#[test]
fn a_wrong_expectation_fails_at_its_step() {
    // The target ACKs this SEND; the case claims a NAK, then an ACK with a wrong PSN.
    let c = one(r#"
[[case]]
name = "wrong-nak"
needs = "send"
summary = "s"
cite = "c"
steps = [ { send = "SEND", len = 8 }, { expect = "NAK_PSN_SEQ" } ]

[[case]]
name = "wrong-psn"
needs = "send"
summary = "s"
cite = "c"
steps = [ { send = "SEND", len = 8 }, { expect = "ACK", psn = "last+1" } ]

[[case]]
name = "wrong-silence"
needs = "send"
summary = "s"
cite = "c"
known = { ferroce = "documented" }
steps = [ { send = "SEND", len = 8 }, { expect = "NOTHING" } ]
"#);
    let o = run(&c);
    assert_eq!(o[0].verdict, Verdict::Fail);
    assert_eq!(o[0].failed_step, Some(2));
    assert!(o[0]
        .lines
        .iter()
        .any(|l| l.what == "observed" && l.text.contains("RC_ACKNOWLEDGE")));
    assert_eq!(o[1].verdict, Verdict::Fail);
    assert_eq!(o[2].verdict, Verdict::Fail);
    // With the stack named, a documented deviation is KNOWN, not FAIL.
    let (mut target, link, addr) = LocalTarget::new().unwrap();
    let opts = SuiteOptions {
        stack: Some("ferroce".into()),
        ..Default::default()
    };
    let o = run_suite(&c[2..], &mut target, &link, addr, &opts, &mut |_, _| {});
    assert_eq!(o[0].verdict, Verdict::Known("documented".into()));
}

#[test]
fn missing_capabilities_skip_and_pcaps_hold_both_directions() {
    struct Writer(LocalTarget);
    impl target::Target for Writer {
        fn describe(&self) -> String {
            "write only".into()
        }
        fn offers(&self) -> &[cases::Needs] {
            &[cases::Needs::Any, cases::Needs::Write]
        }
        fn connect(
            &mut self,
            mine: target::Mine,
            needs: cases::Needs,
        ) -> Result<target::Connected, String> {
            self.0.connect(mine, needs)
        }
    }
    let (t, link, addr) = LocalTarget::new().unwrap();
    let mut t = Writer(t);
    let dir = std::env::temp_dir().join(format!("ferroce-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let opts = SuiteOptions {
        pcap_dir: Some(dir.clone()),
        ..Default::default()
    };
    let all = cases::builtin();
    let o = run_suite(&all, &mut t, &link, addr, &opts, &mut |_, _| {});
    for (c, o) in all.iter().zip(&o) {
        let runs = matches!(c.needs, cases::Needs::Any | cases::Needs::Write);
        assert_eq!(!runs, matches!(o.verdict, Verdict::Skip(_)), "{}", c.name);
    }
    // A case's pcap holds what the probe sent and what came back, ICRCs intact.
    let pcap = dir.join("psn-sequence-error.pcap");
    assert!(!pcap.exists(), "a skipped case writes no pcap");
    let pcap = dir.join("write-bad-rkey.pcap");
    let mut r = ferroce::capture::CaptureReader::open(&pcap).unwrap();
    let mut frames = Vec::new();
    while let Some(f) = r.next_frame() {
        frames.push(f.unwrap());
    }
    assert!(frames.len() >= 2, "{} frames", frames.len());
    let ops: Vec<_> = frames
        .iter()
        .map(|f| {
            let fr = ferroce_wire::frame::Frame::parse(&f.data).unwrap();
            assert!(fr.icrc_ok());
            fr.ib().opcode()
        })
        .collect();
    assert_eq!(ops[0], ferroce_wire::Opcode::RC_RDMA_WRITE_ONLY);
    assert_eq!(ops[1], ferroce_wire::Opcode::RC_ACKNOWLEDGE);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A case known to crash a stack is skipped for it, saying why, unless asked for; other
/// stacks run it (ferroce NAKs the zero-length WRITE that panics rxe's kernel).
#[test]
fn cases_known_to_crash_a_stack_are_skipped_for_it() {
    let c: Vec<Case> = cases::builtin()
        .into_iter()
        .filter(|c| c.name == "write-first-zero-length")
        .collect();
    assert_eq!(c.len(), 1);
    let o = run_as(&c, Some("rxe"));
    assert!(
        matches!(&o[0].verdict, Verdict::Skip(why) if why.contains("known to crash rxe")),
        "{:?}",
        o[0].verdict
    );
    assert_eq!(run_as(&c, None)[0].verdict, Verdict::Pass);
    let (mut target, link, addr) = LocalTarget::new().unwrap();
    let opts = SuiteOptions {
        stack: Some("rxe".into()),
        include_crashing: true,
        ..Default::default()
    };
    let o = run_suite(&c, &mut target, &link, addr, &opts, &mut |_, _| {});
    assert_eq!(o[0].verdict, Verdict::Pass);
}

/// A CNP is matched whichever side of the ACK it comes; a target without congestion
/// control (rxe, ferroce without `--dcqcn`) fails the CNP case at its CNP step and passes
/// the unmarked one.
#[test]
fn cnps_are_expected_in_either_order_and_missed_when_not_sent() {
    let c = one(r#"
[[case]]
name = "ack-then-cnp"
needs = "write"
summary = "s"
cite = "c"
steps = [ { send = "WRITE", len = 64, ecn = 3 }, { expect = "ACK", psn = "last" }, { expect = "CNP" } ]
"#);
    let o = run(&c);
    assert_eq!(o[0].verdict, Verdict::Pass, "{:#?}", o[0].lines);
    let builtin: Vec<Case> = cases::builtin()
        .into_iter()
        .filter(|c| c.name.contains("cnp-for") || c.name.starts_with("no-cnp"))
        .collect();
    assert_eq!(builtin.len(), 2);
    // A target as rxe is, or ferroce without `--dcqcn`: no congestion control.
    let without_cc = |cases: &[Case], stack: Option<&str>| {
        let (mut target, link, addr) = LocalTarget::new().unwrap();
        target.congestion_control(false).unwrap();
        let opts = SuiteOptions {
            stack: stack.map(str::to_string),
            ..Default::default()
        };
        run_suite(cases, &mut target, &link, addr, &opts, &mut |_, _| {})
    };
    let o = without_cc(&builtin, None);
    assert_eq!(o[0].name, "cnp-for-ce-marked-request");
    assert_eq!(o[0].verdict, Verdict::Fail);
    assert_eq!(o[0].failed_step, Some(2));
    assert_eq!(o[1].verdict, Verdict::Pass);
    // Named as rxe, the missing CNP is the deviation its case documents.
    let o = without_cc(&builtin[..1], Some("rxe"));
    assert!(
        matches!(o[0].verdict, Verdict::Known(_)),
        "{:?}",
        o[0].verdict
    );
}

/// A target that floods the probe (here: up to 30 000 CNPs during a case that marked its
/// request, so each is kept for a CNP step) fills the transcript, the answers and the CNP
/// queue only up to the peer's log limit.
#[test]
fn a_flood_of_cnps_is_kept_within_bounds() {
    use super::peer::{Addressing, Peer, Tweak, MAX_LOG};
    use super::runner::{run_case, Remote};
    use ferroce::link::{Link, MemoryLink};
    use ferroce_wire::{BthRepr, CnpRepr, ExtRepr, Opcode, Psn};
    use std::sync::Arc;

    let (a, b) = MemoryLink::pair([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]).unwrap();
    let probe_addr = Addressing {
        mac: [2, 0, 0, 0, 0, 1],
        ip: [10, 1, 0, 1].into(),
        target_mac: [2, 0, 0, 0, 0, 2],
        target_ip: [10, 1, 0, 2].into(),
    };
    let target_addr = Addressing {
        mac: probe_addr.target_mac,
        ip: probe_addr.target_ip,
        target_mac: probe_addr.mac,
        target_ip: probe_addr.ip,
    };
    let (probe_qpn, target_qpn) = (0x31, 0x21);
    let b: Arc<dyn Link> = Arc::new(b);
    let mut target = Peer::new(b.clone(), target_addr, target_qpn);
    let ext = ExtRepr {
        cnp: Some(CnpRepr::default()),
        ..Default::default()
    };
    let cnp = target
        .build(
            BthRepr::new(Opcode::CNP, probe_qpn, Psn::new(0)),
            ext,
            &[],
            &Tweak::default(),
        )
        .unwrap();
    // More than the in-memory wire holds at once, so sent while the case waits.
    let flood = std::thread::spawn(move || {
        for _ in 0..60 {
            for _ in 0..500 {
                b.send(&cnp).unwrap();
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    });
    let c = one(r#"
[[case]]
name = "flooded"
needs = "write"
summary = "s"
cite = "c"
steps = [ { send = "WRITE", len = 8, ecn = 3 }, { expect = "NOTHING", within_ms = 2000 }, { expect = "CNP", within_ms = 10 } ]
"#);
    let mut peer = Peer::new(Arc::new(a) as Arc<dyn Link>, probe_addr, probe_qpn);
    let remote = Remote {
        qpn: target_qpn,
        epsn: 0x100,
        va: 0x1000,
        rkey: 0x77,
        size: 4096,
        mtu: 1024,
        timeout_ms: 67,
    };
    let o = run_case(&c[0], &mut peer, remote);
    flood.join().unwrap();
    // The CNPs were passed over while nothing was expected, and one was there for the
    // CNP step.
    assert_eq!(o.verdict, Verdict::Pass, "{:?}", o.lines.last());
    assert_eq!(o.answers.len(), MAX_LOG);
    assert_eq!(o.lines.len(), MAX_LOG + 1);
    assert!(o
        .lines
        .iter()
        .any(|l| l.text == "transcript full: later lines dropped"));
}

/// A target whose program announces a GID of the other IP version than the one the probe
/// guessed (run on GID 0, the IPv6 link-local address, while its exchange runs over
/// IPv4): the probe ends that connection, connects once more from a GID of the
/// target's version, and sends to the announced address. With `-g` (a fixed GID) it stops
/// and says so instead.
#[test]
fn a_target_announcing_another_ip_version_is_reached_at_its_gid() {
    use std::net::{IpAddr, Ipv6Addr};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use ferroce::link::MemoryLink;
    use ferroce::net::neigh::StaticResolver;

    use super::peer::Addressing;
    use super::route::Route;
    use super::runner::Remote;

    struct Announcing {
        gid: Ipv6Addr,
        seen: Vec<Ipv6Addr>,
        closed: Arc<AtomicUsize>,
    }
    impl target::Target for Announcing {
        fn describe(&self) -> String {
            "announces an IPv6 link-local GID".into()
        }
        fn offers(&self) -> &[cases::Needs] {
            &[cases::Needs::Any]
        }
        fn connect(
            &mut self,
            mine: target::Mine,
            _needs: cases::Needs,
        ) -> Result<target::Connected, String> {
            self.seen.push(mine.gid);
            let closed = self.closed.clone();
            Ok(target::Connected {
                remote: Remote {
                    qpn: 0x11,
                    epsn: mine.psn,
                    va: 0,
                    rkey: 0,
                    size: 0,
                    mtu: 1024,
                    timeout_ms: 67,
                },
                gid: self.gid,
                close: Some(Box::new(move || {
                    closed.fetch_add(1, Ordering::SeqCst);
                })),
            })
        }
    }
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let target_mac = [2, 0, 0, 0, 0, 2];
    let first = Addressing {
        mac: [2, 0, 0, 0, 0, 1],
        ip: ip("10.0.0.1"),
        target_mac,
        target_ip: ip("10.0.0.2"),
    };
    let own = vec![ip("fe80::1"), ip("10.0.0.1")];
    let resolver = Arc::new(StaticResolver::new([(ip("fe80::2"), target_mac)]));
    let (link, _other) = MemoryLink::pair([2, 0, 0, 0, 0, 1], target_mac).unwrap();
    let link: Arc<dyn ferroce::link::Link> = Arc::new(link);
    let closed = Arc::new(AtomicUsize::new(0));
    let mut t = Announcing {
        gid: "fe80::2".parse().unwrap(),
        seen: Vec::new(),
        closed: closed.clone(),
    };

    let mut route = Route::new(first, own.clone(), false, resolver.clone());
    let (peer, c) = connect_fresh(&mut t, &link, &mut route, cases::Needs::Any).unwrap();
    let v4: Ipv6Addr = "::ffff:10.0.0.1".parse().unwrap();
    let ll: Ipv6Addr = "fe80::1".parse().unwrap();
    assert_eq!(
        t.seen,
        [v4, ll],
        "the second connection announces the IPv6 GID"
    );
    assert_eq!(
        closed.load(Ordering::SeqCst),
        1,
        "the first connection is ended"
    );
    assert_eq!(peer.gid(), ll);
    assert_eq!(peer.addressing().target_ip, ip("fe80::2"));
    assert_eq!(c.gid, t.gid);
    // Later cases connect once each.
    connect_fresh(&mut t, &link, &mut route, cases::Needs::Any).unwrap();
    assert_eq!(t.seen.len(), 3);

    let mut fixed = Route::new(first, own, true, resolver);
    let e = connect_fresh(&mut t, &link, &mut fixed, cases::Needs::Any).unwrap_err();
    assert!(
        e.contains("pick a GID of the target's IP version with -g"),
        "{e}"
    );
}
