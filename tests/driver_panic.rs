//! A panic while the driver handles packets aborts the process with a message, rather
//! than leaving a device that silently stopped (see `src/driver/fatal.rs` for why).
//! The device runs in a child process (this test binary, re-run with an environment
//! variable); the parent checks how it died.

use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::RawFd;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use ferroce::link::{Link, MemoryLink};
use ferroce::net::gid::GidTable;
use ferroce::net::neigh::StaticResolver;
use ferroce::verbs::{Context, DeviceAttr, Mtu};

const CHILD: &str = "FERROCE_DRIVER_PANIC_CHILD";
const MAC_DEV: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC_PEER: [u8; 6] = [2, 0, 0, 0, 0, 2];

/// A link that panics when a frame arrives: a stand-in for any bug reached while the
/// driver holds the device.
struct PanickingLink(MemoryLink);

impl Link for PanickingLink {
    fn mac(&self) -> [u8; 6] {
        self.0.mac()
    }
    fn send(&self, frame: &[u8]) -> io::Result<bool> {
        self.0.send(frame)
    }
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self.0.recv(buf)? {
            Some(_) => panic!("a frame reached a bug"),
            None => Ok(None),
        }
    }
    fn fd(&self) -> RawFd {
        self.0.fd()
    }
}

/// The child: a device whose link panics on the first frame. Returning normally means
/// the device survived the panic silently, which the parent reports as a failure.
#[test]
fn child_device_whose_link_panics() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let (a, b) = MemoryLink::pair(MAC_DEV, MAC_PEER).unwrap();
    let attr = DeviceAttr {
        name: "panic0".into(),
        node_guid: 1,
        mac: MAC_DEV,
        netdev_mtu: 1500,
        active_mtu: Mtu::Mtu1024,
        gids: GidTable::from_addrs(&[ip]),
    };
    let resolver = Arc::new(StaticResolver::new([(ip, MAC_DEV)]));
    let ctx = Context::with_link(attr, Arc::new(PanickingLink(a)), resolver).unwrap();
    b.send(&[0u8; 60]).unwrap();
    std::thread::sleep(Duration::from_secs(10));
    drop(ctx);
}

#[test]
fn a_panic_in_packet_handling_aborts_with_a_message() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_device_whose_link_panics",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "the child should abort: {:?}\n{stderr}",
        out.status
    );
    assert!(
        stderr.contains("panic in packet handling") && stderr.contains("aborting"),
        "{stderr}"
    );
}
