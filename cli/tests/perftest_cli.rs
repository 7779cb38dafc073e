//! `ferroce perf`: the seven tools exist, and flags perftest would refuse are refused with
//! one line on stderr and exit code 2, before any device is opened or peer contacted.

use std::process::{Command, Output};

fn ferroce(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferroce"))
        .args(args)
        .output()
        .expect("run ferroce")
}

fn fails(args: &[&str]) -> String {
    let out = ferroce(args);
    let err = String::from_utf8_lossy(&out.stderr).trim_end().to_string();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: one line, got:\n{err}");
    err
}

#[test]
fn seven_tools() {
    let out = ferroce(&["perf", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for t in [
        "write-bw",
        "read-bw",
        "send-bw",
        "atomic-bw",
        "write-lat",
        "read-lat",
        "send-lat",
    ] {
        assert!(help.contains(t), "{t} missing from:\n{help}");
    }
    let out = ferroce(&["perf", "write-bw", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--report_gbits",
        "-D, --duration",
        "-q, --qp",
        "-x, --gid-index",
        "-A",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}

#[test]
fn refused_flags() {
    let cases: &[(&[&str], &str)] = &[
        (&["perf", "write-bw", "-c", "XRC"], "not supported"),
        (
            &["perf", "write-bw", "-c", "UD"],
            "UD connection only possible in SEND",
        ),
        (
            &["perf", "read-bw", "-c", "UC"],
            "UC connection not possible",
        ),
        (
            &["perf", "atomic-bw", "-s", "16"],
            "Message size cannot be changed",
        ),
        (&["perf", "atomic-bw", "-A", "SWAP"], "invalid atomic type"),
        (&["perf", "write-bw", "-n", "2"], "iterations (-n)"),
        (&["perf", "send-lat", "-q", "2"], "one QP"),
        (&["perf", "write-bw", "-a", "-D", "2"], "all sizes"),
        (&["perf", "write-bw", "-m", "1000"], "invalid MTU"),
        (&["perf", "write-bw", "-i", "2"], "port 2 does not exist"),
        (&["perf", "write-bw", "-d", "no-such-if9"], "no-such-if9"),
        (
            &["perf", "write-bw", "--dcqcn-param", "rpg_ai_rate=1"],
            "--dcqcn-param needs --dcqcn",
        ),
        (
            &["perf", "write-bw", "--dcqcn", "--dcqcn-param", "rpg_ai=1"],
            "unknown DCQCN parameter \"rpg_ai\"; known: ecn, line_rate",
        ),
        (
            &["perf", "write-bw", "--dcqcn", "--dcqcn-param", "rpg_gd"],
            "write NAME=VALUE",
        ),
        (
            &[
                "perf",
                "write-bw",
                "--dcqcn",
                "--dcqcn-param",
                "line_rate=0",
            ],
            "invalid DCQCN parameter line_rate",
        ),
        (
            &[
                "perf",
                "write-bw",
                "--dcqcn",
                "--dcqcn-param",
                "rpg_min_rate=x",
            ],
            "is not a non-negative integer",
        ),
    ];
    for (args, want) in cases {
        let err = fails(args);
        assert!(err.contains(want), "{args:?}: '{want}' not in '{err}'");
    }
}
