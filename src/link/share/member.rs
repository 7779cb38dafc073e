//! One process's membership in its network namespace's QPN registry: finding the table,
//! handing it on, and knowing who is alive.
//!
//! Everything lives in kernel objects that vanish with their last user, so nothing is left
//! behind on any exit, SIGKILL included:
//! - the table is a memfd (see `registry`), freed when the last member's descriptor closes;
//! - each member listens on the abstract Unix socket `ferroce-qpn.m.<id>` and hands the
//!   memfd to whoever connects; the socket existing *is* the member being alive (abstract
//!   sockets are per network namespace, like the interfaces they coordinate);
//! - the namespace's registry lock is the abstract name `ferroce-qpn.lock`: held by
//!   whoever managed to bind it, released by the kernel when that socket closes.
//!
//! A newcomer takes the lock, asks a live member for the table (or creates it if no member
//! lives), starts listening, and lets go of the lock: so two processes never start two
//! tables. The table is handed only to, and taken only from, processes of this user,
//! root, or a process holding CAP_NET_RAW — those able to open the interface at all.

use std::collections::HashSet;
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::net::{
    recvmsg, sendmsg, sockopt, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};

use super::registry::{Claimant, Registry};

const LOCK_NAME: &str = "ferroce-qpn.lock";
const MEMBER_PREFIX: &str = "ferroce-qpn.m.";
/// How long a newcomer waits for the registry lock before giving up.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// How long a block stays out of use after its owner let it go or died (override:
/// `FERROCE_QPN_QUARANTINE_SECS`). Peers that used its QPs retransmit for at most
/// `retry_cnt` local ACK timeouts (7 × 67 ms with perftest's timeout 14).
const QUARANTINE: Duration = Duration::from_secs(60);

fn abstract_addr(name: &str) -> io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(name.as_bytes())
}

/// CLOCK_BOOTTIME in milliseconds: one clock for every process of the host.
pub(crate) fn now_ms() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}

fn quarantine_ms() -> u64 {
    std::env::var("FERROCE_QPN_QUARANTINE_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map_or(QUARANTINE.as_millis() as u64, |s| s * 1000)
}

/// The ids of the members alive in this network namespace (their sockets exist).
pub(crate) fn live_members() -> io::Result<HashSet<u64>> {
    let table = std::fs::read_to_string("/proc/net/unix")?;
    let prefix = format!("@{MEMBER_PREFIX}");
    Ok(table
        .lines()
        .filter_map(|l| l.split_whitespace().nth(7))
        .filter_map(|p| p.strip_prefix(&prefix))
        .filter_map(|id| u64::from_str_radix(id, 16).ok())
        .collect())
}

/// The namespace's registry lock, held while this value lives.
struct NetnsLock {
    _socket: UnixDatagram,
}

impl NetnsLock {
    fn take() -> io::Result<NetnsLock> {
        let addr = abstract_addr(LOCK_NAME)?;
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            match UnixDatagram::bind_addr(&addr) {
                Ok(s) => return Ok(NetnsLock { _socket: s }),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_micros(500));
                }
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the QPN registry lock (abstract socket @{LOCK_NAME}) stayed taken for {LOCK_WAIT:?}"),
                    ))
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Whether the process at the other end of `s` may share the table: this user, root, or
/// a holder of CAP_NET_RAW.
fn trusted(s: &UnixStream) -> bool {
    let Ok(cred) = sockopt::socket_peercred(s) else {
        return false;
    };
    let uid = cred.uid.as_raw();
    if uid == 0 || uid == rustix::process::getuid().as_raw() {
        return true;
    }
    // CAP_NET_RAW is bit 13 of the effective set.
    std::fs::read_to_string(format!("/proc/{}/status", cred.pid.as_raw_nonzero()))
        .ok()
        .and_then(|st| {
            let hex = st.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
            u64::from_str_radix(hex.trim(), 16).ok()
        })
        .is_some_and(|caps| caps & (1 << 13) != 0)
}

/// Asks member `id` for the table.
fn fetch_from(id: u64) -> io::Result<Registry> {
    let s = UnixStream::connect_addr(&abstract_addr(&format!("{MEMBER_PREFIX}{id:016x}"))?)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    if !trusted(&s) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "untrusted member",
        ));
    }
    let mut byte = [0u8; 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    recvmsg(
        &s,
        &mut [IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fd: Option<OwnedFd> = None;
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = msg {
            for f in fds {
                fd.get_or_insert(f);
            }
        }
    }
    Registry::adopt(fd.ok_or_else(|| io::Error::other("no descriptor received"))?)
}

/// This process's membership.
#[derive(Debug)]
pub(crate) struct Member {
    registry: Arc<Registry>,
    id: u64,
    pid: u32,
    stop: Arc<AtomicBool>,
    server: Mutex<Option<JoinHandle<()>>>,
}

/// The process's membership while any link holds it.
static CURRENT: Mutex<Weak<Member>> = Mutex::new(Weak::new());

impl Member {
    /// The process's membership, joining the namespace's registry if not yet a member.
    pub(crate) fn get() -> io::Result<Arc<Member>> {
        let mut cur = CURRENT.lock().unwrap_or_else(PoisonError::into_inner);
        // A child of fork() inherits its parent's membership without the thread that
        // serves it: it joins as a member of its own.
        if let Some(m) = cur.upgrade().filter(|m| m.pid == std::process::id()) {
            return Ok(m);
        }
        let m = Arc::new(Member::join()?);
        *cur = Arc::downgrade(&m);
        Ok(m)
    }

    fn join() -> io::Result<Member> {
        let mut idb = [0u8; 8];
        getrandom::fill(&mut idb).map_err(io::Error::other)?;
        let id = u64::from_ne_bytes(idb) | 1;
        let _lock = NetnsLock::take()?;
        let mut registry = None;
        for other in live_members()? {
            match fetch_from(other) {
                Ok(r) => {
                    registry = Some(r);
                    break;
                }
                Err(e) => tracing::debug!(member = other, error = %e, "no registry from member"),
            }
        }
        let registry = Arc::new(match registry {
            Some(r) => r,
            None => Registry::create()?,
        });
        let listener =
            UnixListener::bind_addr(&abstract_addr(&format!("{MEMBER_PREFIX}{id:016x}"))?)?;
        let stop = Arc::new(AtomicBool::new(false));
        let server = {
            let (registry, stop) = (registry.clone(), stop.clone());
            crate::link::threads::spawn("ferroce-qpn", move || serve(&listener, &registry, &stop))?
        };
        Ok(Member {
            registry,
            id,
            pid: std::process::id(),
            stop,
            server: Mutex::new(Some(server)),
        })
    }

    /// Claims a free block for interface `ifindex`.
    pub(crate) fn claim(&self, ifindex: u32) -> io::Result<Option<u16>> {
        let _lock = NetnsLock::take()?;
        let live = live_members()?;
        let mut start = [0u8; 2];
        getrandom::fill(&mut start).map_err(io::Error::other)?;
        self.registry.claim(
            Claimant {
                member: self.id,
                pid: self.pid,
                ifindex,
            },
            u16::from_ne_bytes(start),
            now_ms(),
            quarantine_ms(),
            &|m| m == self.id || live.contains(&m),
        )
    }

    /// Gives `block` back.
    pub(crate) fn release(&self, block: u16) -> io::Result<()> {
        let _lock = NetnsLock::take()?;
        self.registry.release(block, self.id, now_ms())
    }

    /// Records this process's QP count in `block`'s slot. No registry lock: others write
    /// a live member's slot never (claims write free, expired and dead owners' slots), so
    /// only this process writes this one.
    pub(crate) fn set_qps(&self, block: u16, qps: u32) -> io::Result<()> {
        self.registry.set_qps(block, self.id, qps)
    }

    /// (processes, QPs) on interface `ifindex`.
    pub(crate) fn census(&self, ifindex: u32) -> io::Result<(usize, u64)> {
        let live = live_members()?;
        self.registry
            .census(ifindex, &|m| m == self.id || live.contains(&m))
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the server's accept(); it sees `stop` and returns.
        if let Ok(addr) = abstract_addr(&format!("{MEMBER_PREFIX}{:016x}", self.id)) {
            let _ = UnixStream::connect_addr(&addr);
        }
        let server = self
            .server
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(t) = server {
            let _ = t.join();
        }
    }
}

/// Hands the table to every trusted process that connects, until `stop`.
fn serve(listener: &UnixListener, registry: &Registry, stop: &AtomicBool) {
    for conn in listener.incoming() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(s) = conn else { continue };
        if !trusted(&s) {
            tracing::debug!("QPN registry refused to an untrusted process");
            continue;
        }
        let fds = [registry.file().as_fd()];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        control.push(SendAncillaryMessage::ScmRights(&fds));
        if let Err(e) = sendmsg(&s, &[IoSlice::new(&[0])], &mut control, SendFlags::NOSIGNAL) {
            tracing::debug!(error = %e, "could not hand over the QPN registry");
        }
    }
}
