//! `ferroce probe conformance` as a user runs it: against ferroce itself (`local`), its
//! exit status and table; and its usage mistakes.

use std::process::{Command, Output};

fn ferroce(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferroce"))
        .args(args)
        .output()
        .expect("run ferroce")
}

/// `local` is ferroce: the deviation its case files document for it is KNOWN, not a
/// failure, so the run succeeds; naming a stack the case file says nothing about makes it a
/// failure (exit 1).
#[test]
fn local_target_knows_its_own_deviations() {
    let only = [
        "probe",
        "conformance",
        "-q",
        "--only",
        "send-in-sequence,reserved-opcode",
    ];
    let out = ferroce(&[&only[..], &["local"]].concat());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("probe: 1 passed, 0 failed, 1 known, 0 skipped, 0 errors"),
        "{text}"
    );
    let out = ferroce(&[&only[..], &["--stack", "mynic", "local"]].concat());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("1 passed, 1 failed, 0 known"), "{text}");
}

#[test]
fn usage_mistakes_are_one_line_and_exit_2() {
    for (args, says) in [
        (&["probe", "conformance"][..], "no TARGET"),
        (
            &["probe", "conformance", "--only", "nosuch", "local"][..],
            "no case matches",
        ),
        (
            &[
                "probe",
                "conformance",
                "--cases",
                "/nonexistent.toml",
                "local",
            ][..],
            "cannot read case file",
        ),
        (
            &["probe", "fuzz", "--via", "read-bw-client", "local"][..],
            "sends requests to a server program",
        ),
    ] {
        let out = ferroce(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ferroce-probe-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A fuzz run against ferroce itself: the rounds asked for, nothing found, exit 0.
#[test]
fn fuzz_local_runs_the_rounds_asked_for() {
    let dir = temp_dir("fuzz");
    let out = ferroce(&[
        "probe",
        "fuzz",
        "--rounds",
        "15",
        "--seed",
        "2",
        "--answer-ms",
        "5",
        "--out",
        dir.to_str().unwrap(),
        "local",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("fuzz: 15 rounds"), "{text}");
    assert!(text.contains("0 findings"), "{text}");
    assert!(text.contains("seed 2"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A reproducer (here: one RDMA WRITE with a key one bit off) replayed to ferroce and,
/// with --diff, to a second ferroce: both NAK it alike and stay healthy.
#[test]
fn replay_with_diff_compares_two_targets() {
    use ferroce::link::{Link, MemoryLink};
    use ferroce_cli::probe::peer::{Addressing, Dir, Peer, Tweak};
    use ferroce_cli::probe::repro::{ConnInfo, Repro};
    use ferroce_wire::{BthRepr, ExtRepr, Opcode, Psn, RethRepr};
    use std::sync::Arc;

    let dir = temp_dir("replay");
    let (a, _b) = MemoryLink::pair([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]).unwrap();
    let link: Arc<dyn Link> = Arc::new(a);
    let addr = Addressing {
        mac: [2, 0, 0, 0, 0, 1],
        ip: [10, 1, 0, 1].into(),
        target_mac: [2, 0, 0, 0, 0, 2],
        target_ip: [10, 1, 0, 2].into(),
    };
    let conn = ConnInfo {
        tqpn: 0x21,
        epsn: 0x100,
        va: 0x4000,
        rkey: 0x77,
        pqpn: 0x31,
    };
    let mut peer = Peer::new(link, addr, conn.pqpn);
    let bth = BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, conn.tqpn, Psn::new(conn.epsn));
    let ext = ExtRepr {
        reth: Some(RethRepr {
            va: conn.va,
            rkey: conn.rkey ^ 0x100,
            dma_len: 64,
        }),
        ..Default::default()
    };
    let frame = peer.build(bth, ext, &[1; 64], &Tweak::default()).unwrap();
    let path = dir.join("bad-key.pcapng");
    Repro {
        conn,
        finding: String::new(),
        via: "local".into(),
        frames: vec![(Dir::Out, frame)],
    }
    .write(&path)
    .unwrap();
    let out = ferroce(&[
        "probe",
        "replay",
        path.to_str().unwrap(),
        "--diff",
        "local",
        "local",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("answer RC_ACKNOWLEDGE NAK(RemoteAccessError) psn=first+0"),
        "{text}"
    );
    assert!(
        text.contains("diff: local and local answered alike"),
        "{text}"
    );
    // Not a reproducer: a usage error.
    let out = ferroce(&["probe", "replay", "/proc/self/status", "local"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not a ferroce probe reproducer"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn conformance_diff_against_itself_finds_nothing() {
    let out = ferroce(&[
        "probe",
        "conformance",
        "-q",
        "--only",
        "psn-sequence-error,write-bad-rkey",
        "--diff",
        "local",
        "local",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("diff: 0 cases differ"), "{text}");
}

/// `--after-case` runs once after each case that reached the target, in order, with the
/// case's name, and not after a skipped one (which left the target's program waiting for
/// its connection); a failing command is reported and the run goes on.
#[test]
fn after_case_runs_after_each_case_that_ran() {
    let dir = temp_dir("after-case");
    let log = dir.join("after.log");
    let out = ferroce(&[
        "probe",
        "conformance",
        "-q",
        "--stack",
        "rxe",
        "--only",
        "send-in-sequence,write-first-zero-length,write-bad-rkey",
        "--after-case",
        &format!(
            "echo \"$FERROCE_PROBE_CASE\" >> '{}'; [ \"$FERROCE_PROBE_CASE\" != write-bad-rkey ]",
            log.display()
        ),
        "local",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}{err}");
    // write-first-zero-length is known to crash rxe: skipped, so no command after it.
    assert!(
        text.contains("2 passed, 0 failed, 0 known, 1 skipped"),
        "{text}"
    );
    let ran = std::fs::read_to_string(&log).unwrap();
    assert_eq!(ran, "send-in-sequence\nwrite-bad-rkey\n");
    assert!(
        err.contains("--after-case after write-bad-rkey: exit status: 1"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The one packet that panics Linux 6.1 rxe's kernel (found by `probe fuzz`, kept in
/// tests/probe/findings): replayed to ferroce, it draws an invalid-request NAK and ferroce
/// stays healthy.
#[test]
fn the_rxe_killer_packet_is_refused_by_ferroce() {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/probe/findings/rxe-6.1-write-first-zero-length.pcapng"
    );
    let out = ferroce(&["probe", "replay", file, "local"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("(1 packets)"), "{text}");
    assert!(
        text.contains("answer RC_ACKNOWLEDGE NAK(InvalidRequest) psn=first+0"),
        "{text}"
    );
    assert!(text.contains("target healthy"), "{text}");
}

/// `probe cut` turns the whole fuzz round that panicked rxe (five packets, as journaled
/// in flight) into its first packet alone, which replays as the one-packet reproducer does.
#[test]
fn cut_keeps_the_packets_named() {
    let dir = temp_dir("cut");
    let round = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/probe/findings/rxe-6.1-write-first-zero-length-round173.pcapng"
    );
    let small = dir.join("first.pcapng");
    let cut = |keep: &str| {
        ferroce(&[
            "probe",
            "cut",
            round,
            "--keep",
            keep,
            "-o",
            small.to_str().unwrap(),
        ])
    };
    let out = cut("1");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("cut: 1 packets of"), "{text}");
    let out = ferroce(&["probe", "replay", small.to_str().unwrap(), "local"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("(1 packets)"), "{text}");
    assert!(text.contains("[packets 1 of 5]"), "{text}");
    assert!(text.contains("RC_RDMA_WRITE_FIRST"), "{text}");
    assert!(
        text.contains("answer RC_ACKNOWLEDGE NAK(InvalidRequest) psn=first+0"),
        "{text}"
    );
    // A packet the file does not have: a one-line usage error.
    let out = cut("6");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("there is no sent packet 6 (the file has 5)"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
