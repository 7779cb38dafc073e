//! `rc-ops` trusts nothing in its peer's hello: sizes that would overflow or exhaust
//! memory are refused with an error, never a panic or an abort.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use ferroce::verbs::Context;
use ferroce_cli::apps::ops::{self, ops_memory, OpsError, OpsOptions};

fn serve_hello(hello: &str) -> Result<(), OpsError> {
    let (_a, b) = Context::memory_pair().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut peer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    peer.write_all(hello.as_bytes()).unwrap();
    let (stream, _) = listener.accept().unwrap();
    let o = OpsOptions {
        timeout: Duration::from_secs(2),
        ..OpsOptions::default()
    };
    ops::serve(&b, stream, &o, &mut Vec::new()).map(|_| ())
}

fn hello(size: u64, iters: u64) -> String {
    format!("ferroce-ops 1 qpn=17 psn=1 gid=::ffff:10.0.0.1 rkey=1 addr=0 seed=1 size={size} iters={iters}\n")
}

#[test]
fn hostile_hellos_are_refused_before_any_allocation() {
    for (size, iters) in [
        (1u64 << 62, 20),   // (2 + iters) * size overflows
        (1 << 42, 20),      // fits in u64, but 90 TB
        (1 << 20, 1 << 40), // iterations past any queue
        (65536, 0),         // nothing to do
        ((1 << 30) + 1, 1), // past the largest message
        (1 << 30, 5),       // each fine, together over 4 GiB
    ] {
        match serve_hello(&hello(size, iters)) {
            Err(OpsError::Protocol(m)) => assert!(m.contains("bad hello"), "{m}"),
            other => panic!("size {size} iters {iters}: {other:?}"),
        }
    }
}

#[test]
fn the_limits_admit_ordinary_runs() {
    assert_eq!(ops_memory(65536, 20), Ok(22 * 65536 + 8 + 60 * 65536));
    assert!(ops_memory(0, 1).is_ok());
    assert!(ops_memory(1 << 29, 1).is_ok());
    assert!(
        ops_memory(1 << 30, 1).is_err(),
        "3 GiB of target and 3 of receive buffers"
    );
    assert!(ops_memory(usize::MAX, 1).is_err());
    assert!(ops_memory(1, usize::MAX).is_err());
}
