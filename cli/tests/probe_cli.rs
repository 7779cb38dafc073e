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
    ] {
        let out = ferroce(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
