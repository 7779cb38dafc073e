//! The out-of-band TCP exchange of rdma-core's ibv_*_pingpong examples.
//!
//! Each side sends `LID:QPN:PSN:GID` as `%04x:%06x:%06x:` plus 32 hex digits of the GID
//! (in the byte order of `gid_to_wire_gid`: each 32-bit word printed as `%08x` of its
//! big-endian value) and a NUL: 52 bytes. The client sends first, reads the server's
//! message, then sends "done".
//!
//! ferroce's programs keep the connection for the end of the run ([`finish`]): each side
//! says "done" again and waits for the other's before it destroys its QP. rdma-core's
//! examples have no such step, so a run's last ACK lost on the wire leaves one side
//! resending to a QP that is gone until its retry count runs out (RetryExcErr). They
//! close the connection after the exchange, so with them [`finish`] returns at once.

use std::io::{self, Read, Write};
use std::net::{Ipv6Addr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Bytes of one message, NUL included.
pub const MSG_LEN: usize = 52;

/// What each side tells the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
    pub gid: Ipv6Addr,
}

impl Dest {
    /// The 52-byte wire form.
    pub fn encode(&self) -> [u8; MSG_LEN] {
        let g = self.gid.octets();
        let mut hex = String::with_capacity(32);
        for w in g.chunks(4) {
            hex.push_str(&format!(
                "{:08x}",
                u32::from_be_bytes([w[0], w[1], w[2], w[3]])
            ));
        }
        let s = format!(
            "{:04x}:{:06x}:{:06x}:{}",
            self.lid,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            hex
        );
        let mut out = [0u8; MSG_LEN];
        out[..s.len()].copy_from_slice(s.as_bytes());
        out
    }

    /// Parses the wire form.
    pub fn decode(msg: &[u8]) -> Option<Dest> {
        let text = std::str::from_utf8(msg).ok()?.trim_end_matches('\0');
        let mut it = text.split(':');
        let lid = u16::from_str_radix(it.next()?, 16).ok()?;
        let qpn = u32::from_str_radix(it.next()?, 16).ok()?;
        let psn = u32::from_str_radix(it.next()?, 16).ok()?;
        let hex = it.next()?;
        if hex.len() != 32 || it.next().is_some() {
            return None;
        }
        let mut g = [0u8; 16];
        for (i, w) in g.chunks_mut(4).enumerate() {
            let v = u32::from_str_radix(&hex[i * 8..i * 8 + 8], 16).ok()?;
            w.copy_from_slice(&v.to_be_bytes());
        }
        Some(Dest {
            lid,
            qpn,
            psn,
            gid: Ipv6Addr::from(g),
        })
    }
}

fn read_msg(s: &mut TcpStream) -> io::Result<Dest> {
    let mut buf = [0u8; MSG_LEN];
    s.read_exact(&mut buf)?;
    Dest::decode(&buf).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "malformed address message from peer",
        )
    })
}

/// Client side: connect to `server:port`, send `mine`, receive the server's, send "done".
/// The connection is kept for [`finish`].
pub fn client_exchange(server: &str, port: u16, mine: &Dest) -> io::Result<(TcpStream, Dest)> {
    let addr = (server, port).to_socket_addrs()?.next().ok_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, format!("cannot resolve {server}"))
    })?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("couldn't connect to {server}:{port}: {e} (is the server running?)"),
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let theirs = client_exchange_on(&mut s, mine)?;
    Ok((s, theirs))
}

/// Client side on a connection already made: send `mine`, receive the server's, send
/// "done".
pub fn client_exchange_on(s: &mut TcpStream, mine: &Dest) -> io::Result<Dest> {
    s.write_all(&mine.encode())?;
    let theirs = read_msg(s)?;
    s.write_all(b"done\0")?;
    Ok(theirs)
}

/// Server side, first half: accept one connection on `port` and read the client's message.
pub fn server_accept(port: u16) -> io::Result<(TcpStream, Dest)> {
    let listener = TcpListener::bind(("::", port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .map_err(|e| io::Error::new(e.kind(), format!("couldn't listen on port {port}: {e}")))?;
    let (mut s, _) = listener.accept()?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let theirs = read_msg(&mut s)?;
    Ok((s, theirs))
}

/// Server side, second half (after connecting the QP): send ours, wait for "done". The
/// connection is kept for [`finish`].
pub fn server_finish(mut s: TcpStream, mine: &Dest) -> io::Result<TcpStream> {
    s.write_all(&mine.encode())?;
    let mut done = [0u8; 5];
    // Older clients close without "done"; either way the exchange is over.
    let _ = s.read(&mut done);
    Ok(s)
}

/// The end of a run, once this side has all its completions: send "done" and wait (at
/// most `wait`) until the peer has sent its own or closed the connection. Until then the
/// caller's QP stays up, so the peer's resends of a request whose ACK was lost are still
/// answered. Errors count as the peer being gone: there is nothing left to wait for.
pub fn finish(s: &mut TcpStream, wait: Duration) {
    let _ = s.set_read_timeout(Some(wait));
    let _ = s.write_all(b"done\0");
    // Its "done", or the end of the stream (an error: the peer closed), or the timeout.
    let _ = s.read_exact(&mut [0u8; 5]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_rdma_core_format() {
        let d = Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0x123456,
            gid: "::ffff:10.77.0.1".parse().unwrap(),
        };
        let m = d.encode();
        assert_eq!(
            &m[..51],
            b"0000:000011:123456:00000000000000000000ffff0a4d0001"
        );
        assert_eq!(m[51], 0);
        assert_eq!(Dest::decode(&m), Some(d));
        assert_eq!(Dest::decode(b"0000:000011:123456:zz"), None);
    }

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn finish_waits_until_the_peer_is_done_too() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let (mut a, mut b) = pair();
        let peer_done = Arc::new(AtomicBool::new(false));
        let flag = peer_done.clone();
        let peer = std::thread::spawn(move || {
            // The peer still has work after this side finished.
            std::thread::sleep(Duration::from_millis(200));
            flag.store(true, Ordering::SeqCst);
            finish(&mut b, Duration::from_secs(20));
        });
        finish(&mut a, Duration::from_secs(20));
        assert!(
            peer_done.load(Ordering::SeqCst),
            "finish returned before the peer finished"
        );
        peer.join().unwrap();
    }

    #[test]
    fn finish_returns_when_the_peer_closed_the_connection() {
        // rdma-core's examples close the connection right after the exchange.
        let (mut a, b) = pair();
        drop(b);
        let t = std::time::Instant::now();
        finish(&mut a, Duration::from_secs(20));
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    }
}
