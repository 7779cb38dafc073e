//! `ferroce perf`'s out-of-band protocol against the real thing: the TCP exchanges of
//! perftest 4.5 (rxe <-> rxe) in the golden captures must be exactly the messages
//! `exchange::Script` predicts, every message must decode and re-encode byte for byte, and
//! `exchange::Control` playing either side against the recorded other side must read all
//! of it and write as many bytes as perftest did.

use std::io::{self, Read, Write};
use std::net::Ipv4Addr;
use std::path::Path;

use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use ferroce::capture::CaptureReader;
use ferroce::verbs::Mtu;
use ferroce_cli::apps::perftest::exchange::{
    decode_mtu, decode_version, BwReport, Control, KeyMsg, Script, DONE, KEY_MSG_LEN, VERSION_LEN,
};
use ferroce_cli::apps::perftest::Test;

/// Golden captures of perftest runs: file, test, `-s` (MANIFEST.md).
const RUNS: &[(&str, Test, u64)] = &[
    ("write_bw_s64.pcap", Test::WRITE_BW, 64),
    ("write_bw_s1024.pcap", Test::WRITE_BW, 1024),
    ("write_bw_s4100.pcap", Test::WRITE_BW, 4100),
    ("write_bw_uc_s2500.pcap", Test::WRITE_BW, 2500),
    ("read_bw_s64.pcap", Test::READ_BW, 64),
    ("read_bw_s1024.pcap", Test::READ_BW, 1024),
    ("read_bw_s4100.pcap", Test::READ_BW, 4100),
    ("send_bw_s64.pcap", Test::SEND_BW, 64),
    ("send_bw_s1024.pcap", Test::SEND_BW, 1024),
    ("send_bw_s4100.pcap", Test::SEND_BW, 4100),
    ("send_bw_ud_s512.pcap", Test::SEND_BW, 512),
    ("atomic_fadd.pcap", Test::ATOMIC_BW, 8),
    ("atomic_cas.pcap", Test::ATOMIC_BW, 8),
    ("write_lat_s2.pcap", Test::WRITE_LAT, 2),
];

/// The client's and the server's TCP byte streams on port 18515.
fn streams(file: &str) -> (Vec<u8>, Vec<u8>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/vectors/rxe")
        .join(file);
    let client_ip = Ipv4Addr::new(10, 77, 0, 1);
    let (mut c, mut s) = (Vec::new(), Vec::new());
    for f in CaptureReader::open(&path).expect("capture") {
        let f = f.expect("frame");
        let Ok(p) = SlicedPacket::from_ethernet(&f.data) else {
            continue;
        };
        let (Some(NetSlice::Ipv4(ip)), Some(TransportSlice::Tcp(tcp))) = (p.net, p.transport)
        else {
            continue;
        };
        if tcp.source_port() != 18515 && tcp.destination_port() != 18515 {
            continue;
        }
        let data = tcp.payload();
        if ip.header().source_addr() == client_ip {
            c.extend_from_slice(data);
        } else {
            s.extend_from_slice(data);
        }
    }
    (c, s)
}

/// Splits one side's stream into the messages perftest sends, checking each kind.
fn check_stream(file: &str, stream: &[u8], test: Test, client: bool, size: u64) {
    let mut at = 0;
    let mut take = |n: usize| {
        assert!(at + n <= stream.len(), "{file}: stream ends early");
        at += n;
        &stream[at - n..at]
    };
    assert_eq!(decode_version(take(VERSION_LEN)), "6.06", "{file}");
    assert_eq!(take(4), 4096u32.to_be_bytes(), "{file}: cycle buffer");
    assert_eq!(take(4), 64u32.to_be_bytes(), "{file}: cache line");
    assert_eq!(decode_mtu(take(2)), Some(Mtu::Mtu1024), "{file}");
    let script = Script::of(test, 1);
    let mut report = Vec::new();
    let mut keys = 0;
    for n in script.messages(1, false) {
        let m = take(n);
        match n {
            KEY_MSG_LEN => {
                let k = KeyMsg::decode(m).unwrap_or_else(|e| panic!("{file}: {e}"));
                assert_eq!(&k.encode()[..], m, "{file}: key message re-encodes");
                keys += 1;
            }
            8 => report.push(<[u8; 8]>::try_from(m).unwrap()),
            5 => assert_eq!(m, DONE, "{file}"),
            _ => unreachable!(),
        }
    }
    assert_eq!(
        at,
        stream.len(),
        "{file}: bytes after the script's last message"
    );
    assert!(keys >= 4, "{file}");
    if client && script.reports {
        let r = BwReport::decode(&report.try_into().unwrap());
        assert_eq!((r.size, r.iters), (size, 5), "{file}: {r:?}");
        assert!(r.bw_avg > 0.0 && r.bw_peak >= r.bw_avg, "{file}: {r:?}");
    }
}

#[test]
fn golden_exchanges_follow_the_script() {
    for &(file, test, size) in RUNS {
        let (c, s) = streams(file);
        check_stream(file, &c, test, true, size);
        check_stream(file, &s, test, false, size);
    }
}

/// Reads the recorded peer's bytes, records what is written.
struct Replay {
    input: io::Cursor<Vec<u8>>,
    written: usize,
}

impl Read for Replay {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.input.read(buf)
    }
}

impl Write for Replay {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.written += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Plays one side of `test`'s exchange against `peer`; returns (bytes read, bytes written).
fn play(test: Test, client: bool, peer: Vec<u8>) -> (usize, usize) {
    let total = peer.len();
    let mut ctl = Control::new(
        Replay {
            input: io::Cursor::new(peer),
            written: 0,
        },
        client,
    );
    let key = KeyMsg {
        lid: 0,
        out_reads: 1,
        qpn: 0x11,
        psn: 0x123456,
        rkey: 0x1234,
        vaddr: 0x7f00_0000_1000,
        gid: "::ffff:10.77.0.9".parse().unwrap(),
        srqn: 0,
    };
    assert_eq!(ctl.versions().unwrap(), "6.06");
    assert_eq!(ctl.sys_data(4096, 64).unwrap(), (4096, 64));
    assert_eq!(ctl.mtu(Mtu::Mtu4096).unwrap(), Mtu::Mtu1024);
    let script = Script::of(test, 1);
    for _ in 0..script.before {
        let theirs = ctl.handshake(&key).unwrap();
        assert_eq!(theirs.lid, 0);
    }
    if script.reports {
        ctl.handshake(&key).unwrap();
        ctl.bw_reports(&BwReport::default()).unwrap();
    }
    let r = if script.close {
        ctl.close(&key).unwrap()
    } else {
        ctl.into_inner()
    };
    // Everything but the peer's final "done", which perftest never reads either.
    let unread = if script.close { DONE.len() } else { 0 };
    assert_eq!(
        r.input.position() as usize,
        total - unread,
        "the recorded stream is read"
    );
    (total, r.written)
}

#[test]
fn control_replays_both_roles() {
    for &(file, test, _) in RUNS {
        let (c, s) = streams(file);
        // As the client against the recorded server, and as the server against the client.
        let (_, wrote) = play(test, true, s.clone());
        assert_eq!(wrote, c.len(), "{file}: client bytes");
        let (_, wrote) = play(test, false, c.clone());
        assert_eq!(wrote, s.len(), "{file}: server bytes");
    }
}
