//! `ferroce perf` against itself: two devices on an in-memory wire, the out-of-band
//! exchange over TCP on localhost, every test in both roles (no privileges needed). The
//! interop with perftest itself is tests/interop/rxe_perftest.sh.

use std::net::TcpListener;
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

mod common;

use common::refusing_port;
use ferroce::verbs::Context;
use ferroce_cli::apps::perftest::{self, AtomicOp, Conn, Options, Outcome, PerfError, Test};

/// One run at a time: each brings up two driver threads.
static SERIAL: Mutex<()> = Mutex::new(());

struct Pair {
    server: Outcome,
    client: Outcome,
    server_out: String,
    client_out: String,
}

/// Runs `test` with both sides configured by `tweak`.
fn run(test: Test, tweak: impl Fn(&mut Options)) -> Pair {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (a, b) = Context::memory_pair().expect("memory pair");
    // The server's listener is bound (port 0: the kernel picks a free one) before either
    // side starts, so the client's connection cannot be refused or go elsewhere.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a listener");
    let mut so = Options::new(test);
    so.port = listener.local_addr().unwrap().port();
    so.timeout = Duration::from_secs(20);
    tweak(&mut so);
    let mut co = so.clone();
    co.server = Some("127.0.0.1".into());
    let server = thread::spawn(move || {
        let mut out = Vec::new();
        let r = perftest::serve(&b, &so, &listener, &mut out);
        (r, String::from_utf8(out).unwrap())
    });
    let mut out = Vec::new();
    let client = perftest::run(&a, &co, &mut out);
    let client_out = String::from_utf8(out).unwrap();
    let (server, server_out) = server.join().expect("server thread");
    let client = client.unwrap_or_else(|e| panic!("client: {e}\n{client_out}"));
    let server = server.unwrap_or_else(|e| panic!("server: {e}\n{server_out}"));
    Pair {
        server,
        client,
        server_out,
        client_out,
    }
}

fn header_and_rows(out: &str, header: &str, rows: usize) {
    let lines: Vec<&str> = out.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with(header))
        .unwrap_or_else(|| panic!("no '{header}' in:\n{out}"));
    assert!(
        lines.len() > at + rows && lines[at + rows + 1].starts_with("-----"),
        "{rows} rows after the header in:\n{out}"
    );
}

#[test]
fn write_bw_two_qps() {
    let p = run(Test::WRITE_BW, |o| {
        o.iters = Some(50);
        o.size = Some(4096);
        o.num_qps = 2;
    });
    let c = &p.client.bw;
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].size, c[0].iters), (4096, 100));
    assert!(c[0].bw_avg > 0.0 && c[0].bw_peak >= c[0].bw_avg, "{c:?}");
    // The server prints the client's result, as perftest.
    assert_eq!(p.server.bw, p.client.bw);
    header_and_rows(
        &p.client_out,
        " #bytes     #iterations    BW peak[MB/sec]",
        1,
    );
    header_and_rows(
        &p.server_out,
        " #bytes     #iterations    BW peak[MB/sec]",
        1,
    );
    assert!(p
        .server_out
        .contains("* Waiting for client to connect... *"));
    assert_eq!(p.client_out.matches(" local address:").count(), 2);
    assert_eq!(p.client_out.matches(" remote address:").count(), 2);
    assert!(p.client_out.contains(" TX depth        : 50"));
}

#[test]
fn read_and_atomic_bw() {
    let p = run(Test::READ_BW, |o| {
        o.iters = Some(40);
        o.size = Some(3000);
        o.report_gbits = true;
    });
    assert_eq!((p.client.bw[0].size, p.client.bw[0].iters), (3000, 40));
    assert!(p.client_out.contains("BW peak[Gb/sec]"));
    assert!(p.client_out.contains(" Outstand reads  : 16"));
    for op in [AtomicOp::FetchAndAdd, AtomicOp::CmpAndSwap] {
        let p = run(Test::ATOMIC_BW, |o| {
            o.iters = Some(40);
            o.atomic = op;
        });
        assert_eq!((p.client.bw[0].size, p.client.bw[0].iters), (8, 40));
        assert!(p
            .client_out
            .contains(&format!("Atomic {} BW Test", op.name())));
    }
}

#[test]
fn send_bw_rc_uc_ud() {
    for (conn, size) in [(Conn::Rc, 65536), (Conn::Uc, 5000), (Conn::Ud, 1024)] {
        let p = run(Test::SEND_BW, |o| {
            o.iters = Some(60);
            o.size = Some(size);
            o.conn = conn;
        });
        let (s, c) = (&p.server.bw[0], &p.client.bw[0]);
        assert_eq!((c.size, c.iters), (size, 60), "{conn:?}");
        // The receiver counts what arrived: everything, on a lossless wire.
        assert_eq!((s.size, s.iters), (size, 60), "{conn:?}");
        assert!(s.bw_avg > 0.0 && s.bw_peak == 0.0, "{conn:?}: {s:?}");
        assert!(p.server_out.contains(" RX depth        : 60"), "{conn:?}");
    }
}

#[test]
fn all_sizes() {
    let p = run(Test::SEND_BW, |o| {
        o.iters = Some(5);
        o.all_sizes = true;
        o.conn = Conn::Ud;
    });
    // UD stops at the path MTU (4096 on the memory wire): 2, 4, ..., 4096.
    let sizes: Vec<u64> = p.client.bw.iter().map(|r| r.size).collect();
    assert_eq!(sizes, (1..=12).map(|i| 1u64 << i).collect::<Vec<_>>());
    assert_eq!(p.server.bw.len(), 12);
    let p = run(Test::WRITE_BW, |o| {
        o.iters = Some(5);
        o.all_sizes = true;
    });
    assert_eq!(p.client.bw.len(), 23);
    assert_eq!(p.client.bw[22].size, 1 << 23);
    // The server prints only the last size, which the client reports.
    assert_eq!(p.server.bw, vec![p.client.bw[22]]);
}

#[test]
fn latency_tests() {
    for (test, conn) in [
        (Test::WRITE_LAT, Conn::Rc),
        (Test::WRITE_LAT, Conn::Uc),
        (Test::SEND_LAT, Conn::Rc),
        (Test::SEND_LAT, Conn::Ud),
        (Test::READ_LAT, Conn::Rc),
    ] {
        let p = run(test, |o| {
            o.iters = Some(30);
            o.size = Some(64);
            o.conn = conn;
        });
        let row = &p.client.lat[0];
        let s = row.stats.expect("statistics");
        assert_eq!((row.size, row.iters), (64, 30), "{test:?} {conn:?}");
        assert!(
            0.0 < s.min && s.min <= s.typical && s.typical <= s.max && s.max <= s.p99,
            "{test:?} {conn:?}: {s:?}"
        );
        header_and_rows(&p.client_out, " #bytes #iterations    t_min[usec]", 1);
        if test == Test::READ_LAT {
            assert!(p.server.lat.is_empty());
        } else {
            assert_eq!(p.server.lat.len(), 1, "{test:?}");
            header_and_rows(&p.server_out, " #bytes #iterations    t_min[usec]", 1);
        }
    }
    let p = run(Test::WRITE_LAT, |o| {
        o.iters = Some(5);
        o.all_sizes = true;
    });
    assert_eq!(p.client.lat.len(), 23);
    assert_eq!(p.server.lat.len(), 23);
    let p = run(Test::SEND_LAT, |o| {
        o.iters = Some(5);
        o.all_sizes = true;
    });
    assert_eq!(p.server.lat.len(), 23);
}

#[test]
fn duration_mode() {
    let p = run(Test::WRITE_BW, |o| {
        o.duration = Some(2);
        o.size = Some(4096);
    });
    let c = &p.client.bw[0];
    assert!(c.iters > 0 && c.bw_avg > 0.0 && c.bw_peak == 0.0, "{c:?}");
    assert_eq!(p.server.bw, p.client.bw);
    let p = run(Test::SEND_LAT, |o| o.duration = Some(2));
    let row = &p.client.lat[0];
    assert!(
        row.iters > 0 && row.avg_usec.is_some_and(|a| a > 0.0),
        "{row:?}"
    );
    assert!(p
        .client_out
        .contains(" #bytes        #iterations       t_avg[usec]    tps average"));
}

#[test]
fn mismatched_peers_fail_cleanly() {
    // UD is for SEND tests only: refused before any exchange.
    let (a, _b) = Context::memory_pair().unwrap();
    let mut o = Options::new(Test::WRITE_BW);
    o.conn = Conn::Ud;
    assert!(matches!(
        perftest::run(&a, &o, &mut Vec::new()),
        Err(PerfError::Usage(_))
    ));
    // Nobody listening.
    let (_held, port) = refusing_port();
    let mut o = Options::new(Test::WRITE_BW);
    o.server = Some("127.0.0.1".into());
    o.port = port;
    assert!(matches!(
        perftest::run(&a, &o, &mut Vec::new()),
        Err(PerfError::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused
    ));
    // `serve` is for the server side only.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    assert!(matches!(
        perftest::serve(&a, &o, &listener, &mut Vec::new()),
        Err(PerfError::Usage(_))
    ));
}
