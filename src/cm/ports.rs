//! Services held host-wide: a service ID (an rdma_cm port) one process listens on through
//! an interface is refused to the others, and the others can tell it is served.
//!
//! Each ferroce process runs a connection manager of its own, and each sees every
//! connect request that reaches its interface's QP1. Two processes listening on one port
//! would both take a request (the client connects to whichever REP arrives first, and
//! the other server waits for an RTU that never comes); and a process that does not
//! listen cannot tell a request for another process's port from one for a port nobody
//! serves, which it should refuse, as the kernel's rdma_cm does.
//!
//! A service is held by binding an abstract Unix datagram socket named for the interface
//! and the service ID. Abstract names belong to the network namespace, as interface names
//! and rdma_cm's ports do, and the kernel frees one when the last descriptor of its socket
//! closes, at exit or SIGKILL included, so nothing is left behind. Whether a service is
//! held is asked by connecting a socket to the name, which takes nothing.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// A service held on one interface, let go when dropped.
#[derive(Debug)]
pub struct ServiceHold {
    _socket: UnixDatagram,
}

/// The abstract socket name that stands for `service_id` on `iface`.
fn name_of(iface: &str, service_id: u64) -> io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(format!("ferroce-cm.{iface}.{service_id:016x}"))
}

/// Holds `service_id` on `iface` for this process: `AddrInUse` while another holder (in
/// this process or another) has it.
pub fn hold(iface: &str, service_id: u64) -> io::Result<ServiceHold> {
    let socket = UnixDatagram::bind_addr(&name_of(iface, service_id)?)?;
    Ok(ServiceHold { _socket: socket })
}

/// Whether some process holds `service_id` on `iface`. An error other than "nobody
/// there" (no descriptors left, say) answers yes: a request that may be another's is
/// left to it, as before holds could be asked.
pub fn is_held(iface: &str, service_id: u64) -> bool {
    let Ok(addr) = name_of(iface, service_id) else {
        return true;
    };
    let Ok(probe) = UnixDatagram::unbound() else {
        return true;
    };
    match probe.connect_addr(&addr) {
        Ok(()) => true,
        Err(e) => e.kind() != io::ErrorKind::ConnectionRefused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_service_is_in_use_and_seen_until_let_go() {
        let sid = 0x0106_0000_1b59;
        assert!(!is_held("ferroce-p0", sid));
        let h = hold("ferroce-p0", sid).unwrap();
        assert!(is_held("ferroce-p0", sid));
        assert_eq!(
            hold("ferroce-p0", sid).unwrap_err().kind(),
            io::ErrorKind::AddrInUse
        );
        // Another service or interface is another hold.
        assert!(!is_held("ferroce-p0", sid + 1));
        assert!(!is_held("ferroce-p1", sid));
        let _other = hold("ferroce-p1", sid).unwrap();
        // Asking took nothing: still only the one holder, and free once it lets go.
        drop(h);
        assert!(!is_held("ferroce-p0", sid));
        drop(hold("ferroce-p0", sid).expect("free once let go"));
    }
}
