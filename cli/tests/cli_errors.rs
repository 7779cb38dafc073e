//! User mistakes get one clear line on stderr that says what to do, and a non-zero exit.
//!
//! The tests that need an Ethernet interface or root are `#[ignore]`d; tests/system.sh,
//! which runs as root, runs them with `cargo test --workspace --release --tests --
//! --ignored`.

use std::process::{Command, Output};

mod common;

use common::refusing_port;

fn ferroce(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferroce"))
        .args(args)
        .output()
        .expect("run ferroce")
}

/// Exit code and the single stderr line.
fn fails(args: &[&str]) -> (i32, String) {
    let out = ferroce(args);
    let err = String::from_utf8_lossy(&out.stderr).trim_end().to_string();
    assert!(!out.status.success(), "{args:?} succeeded");
    assert_eq!(
        err.lines().count(),
        1,
        "{args:?}: expected one line, got:\n{err}"
    );
    (out.status.code().unwrap_or(-1), err)
}

#[test]
fn missing_and_non_pcap_files() {
    let (code, err) = fails(&["decode", "/nonexistent/x.pcap"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("cannot read capture") && err.contains("No such file"),
        "{err}"
    );
    // This source file: it exists and is not a capture.
    let (code, err) = fails(&[
        "decode",
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cli_errors.rs"),
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("not a pcap or pcapng capture") && err.contains("give a .pcap"),
        "{err}"
    );
}

#[test]
fn unknown_interface_names_the_ones_that_exist() {
    for cmd in ["rc-pingpong", "uc-pingpong", "ud-pingpong", "rc-ops"] {
        let (code, err) = fails(&[cmd, "-d", "no-such-if9"]);
        assert_eq!(code, 2, "{cmd}");
        assert!(
            err.contains("no network interface named 'no-such-if9'") && err.contains("available:"),
            "{err}"
        );
    }
    let (code, err) = fails(&["devinfo", "-d", "no-such-if9"]);
    assert_eq!(code, 2);
    assert!(err.contains("no-such-if9"), "{err}");
}

#[test]
fn bad_flags() {
    let (code, err) = fails(&["rc-pingpong", "-m", "1000"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("invalid MTU 1000") && err.contains("4096"),
        "{err}"
    );
    let (code, err) = fails(&["rc-pingpong", "-i", "2"]);
    assert_eq!(code, 2);
    assert!(err.contains("port 2 does not exist"), "{err}");
    // clap's own errors are several lines with usage; they still exit 2.
    let out = ferroce(&["rc-pingpong", "--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2));
}

fn ethernet_interface() -> Option<String> {
    ferroce::verbs::Device::list()
        .into_iter()
        .next()
        .map(|d| d.name().to_string())
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

// Needs an interface; as root also `setpriv`. tests/system.sh runs it (`-- --ignored`).
#[test]
#[ignore = "needs an Ethernet interface"]
fn no_raw_socket_permission() {
    let ifname = ethernet_interface().expect("this test needs an Ethernet interface");
    let bin = env!("CARGO_BIN_EXE_ferroce");
    // As root, drop to an unprivileged user (setpriv is in util-linux); otherwise run as is.
    let out = if is_root() {
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
                bin,
                "rc-pingpong",
                "-d",
                &ifname,
            ])
            .output()
            .expect("setpriv (util-linux)")
    } else {
        Command::new(bin)
            .args(["rc-pingpong", "-d", &ifname])
            .output()
            .unwrap()
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no permission to open a raw socket") && err.contains("CAP_NET_RAW"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

// tests/system.sh runs it as root (`-- --ignored`).
#[test]
#[ignore = "needs root and an Ethernet interface"]
fn unreachable_server_and_busy_port() {
    assert!(is_root(), "this test needs root (CAP_NET_RAW)");
    let ifname = ethernet_interface().expect("this test needs an Ethernet interface");
    // Nobody listens on this port (held, bound, not listening): the connection is refused.
    let (_held, port) = refusing_port();
    let port = port.to_string();
    let out = ferroce(&["rc-pingpong", "-d", &ifname, "-p", &port, "127.0.0.1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("couldn't connect to 127.0.0.1") && err.contains("is the server running?"),
        "{err}"
    );
    // The out-of-band port is taken.
    let busy = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let out = ferroce(&["rc-pingpong", "-d", &ifname, "-p", &port]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("couldn't listen on port {port}")),
        "{err}"
    );
}

/// A reader that stops early (`ferroce devinfo | grep -q PORT_ACTIVE`, `ferroce demo |
/// head -1`) ends the command quietly: exit 0, no panic message on stderr (Rust ignores SIGPIPE, so the write fails
/// with EPIPE instead of killing the process; `println!` would panic on it).
#[test]
fn a_closed_stdout_ends_listings_quietly() {
    for args in [
        &["devices"][..],
        &["devinfo", "-d", "lo", "-v"][..],
        &["demo", "-n", "2"][..],
    ] {
        let (reader, writer) = std::io::pipe().expect("pipe");
        // Closed before the child starts: its first write fails, whatever the timing.
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_ferroce"))
            .args(args)
            .stdout(writer)
            .output()
            .expect("run ferroce");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(out.status.success(), "{args:?}: {:?}\n{err}", out.status);
    }
}

#[test]
fn ucmatose_mistakes() {
    let (code, err) = fails(&["ucmatose", "-c", "2"]);
    assert_eq!(code, 2);
    assert!(err.contains("make one connection; leave -c out"), "{err}");
    let (code, err) = fails(&["ucmatose", "-b", "192.0.2.77"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("-b 192.0.2.77: no interface has this address"),
        "{err}"
    );
}
