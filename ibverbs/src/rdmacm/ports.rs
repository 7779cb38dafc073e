//! Listening ports held host-wide: a port one process listens on through a device is
//! refused to the others (`rdma_listen` fails with EADDRINUSE), as the kernel's rdma_cm
//! refuses a port that is taken within a network namespace.
//!
//! Each ferroce process runs a connection manager of its own, and each sees every
//! connect request that reaches its devices' QP1. Two processes listening on one port
//! would both take a request: the client's connection goes to whichever REP arrives
//! first, and the other server waits for an RTU that never comes, its program none the
//! wiser.
//!
//! A port is held by binding an abstract Unix socket named for the interface, the port
//! space and the port. Abstract names belong to the network namespace, as interface
//! names and rdma_cm's ports do, and the kernel frees one when the last descriptor of its
//! socket closes, at exit or SIGKILL included, so nothing is left behind.
//!
//! Within one process, listeners share the hold of a port: the library's own rules
//! decide there (one live listening ID per port and device; a listening ID made again on
//! a port that is still lingering takes it over, see `conn::stop_listening`).

use std::ffi::c_int;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::{Arc, Weak};

use crate::ffi::cma_h::rdma_port_space;
use crate::per_process::PerProcess;

/// A port held on one interface: dropped with its last holder.
#[derive(Debug)]
pub(crate) struct PortHold {
    _socket: UnixDatagram,
}

/// (interface, port space, port) of a hold.
type Key = (String, rdma_port_space, u16);

/// This process's holds. A child of fork() starts with none, and the descriptors it
/// inherited keep its parent's ports held until it execs (they close on exec) or exits:
/// as a TCP listening socket a child inherits does, and unlike rdma_cm, whose ports go
/// with the ID whatever children the process has.
static HELD: PerProcess<(Key, Weak<PortHold>)> = PerProcess::new();

/// The abstract socket name that stands for `key`.
fn name_of((iface, ps, port): &Key) -> String {
    format!("ferroce-rdmacm.{iface}.{ps:x}.{port}")
}

/// Holds `port` of port space `ps` on interface `iface` for this process: EADDRINUSE
/// while another process holds it.
pub(crate) fn hold(iface: &str, ps: rdma_port_space, port: u16) -> Result<Arc<PortHold>, c_int> {
    let key: Key = (iface.to_owned(), ps, port);
    let mut held = HELD.lock();
    held.retain(|(_, w)| w.strong_count() > 0);
    if let Some(h) = held
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, w)| w.upgrade())
    {
        return Ok(h);
    }
    let addr = SocketAddr::from_abstract_name(name_of(&key)).map_err(|_| libc::EINVAL)?;
    let socket = UnixDatagram::bind_addr(&addr).map_err(|e| {
        let errno = e.raw_os_error().unwrap_or(libc::EIO);
        if errno == libc::EADDRINUSE {
            tracing::info!(
                iface,
                port,
                "rdma_listen: another process here listens on that port"
            );
        }
        errno
    })?;
    let h = Arc::new(PortHold { _socket: socket });
    held.push((key, Arc::downgrade(&h)));
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::cma_h::{RDMA_PS_TCP, RDMA_PS_UDP};

    /// Another process's hold, as a bound socket of the same name.
    fn foreign(iface: &str, ps: rdma_port_space, port: u16) -> UnixDatagram {
        let key = (iface.to_owned(), ps, port);
        UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name_of(&key)).unwrap()).unwrap()
    }

    #[test]
    fn a_port_held_elsewhere_is_in_use_and_free_once_let_go() {
        let other = foreign("ferroce-t0", RDMA_PS_TCP, 7001);
        assert_eq!(
            hold("ferroce-t0", RDMA_PS_TCP, 7001).unwrap_err(),
            libc::EADDRINUSE
        );
        // Another port, port space or interface is another hold.
        let _a = hold("ferroce-t0", RDMA_PS_TCP, 7002).unwrap();
        let _b = hold("ferroce-t0", RDMA_PS_UDP, 7001).unwrap();
        let _c = hold("ferroce-t1", RDMA_PS_TCP, 7001).unwrap();
        drop(other);
        let mine = hold("ferroce-t0", RDMA_PS_TCP, 7001).expect("free once let go");
        drop(mine);
        drop(foreign("ferroce-t0", RDMA_PS_TCP, 7001)); // and free again after
    }

    #[test]
    fn holders_in_one_process_share_a_hold_until_the_last_goes() {
        let a = hold("ferroce-t2", RDMA_PS_TCP, 7003).unwrap();
        let b = hold("ferroce-t2", RDMA_PS_TCP, 7003).expect("shared");
        assert!(Arc::ptr_eq(&a, &b));
        drop(a);
        let key = ("ferroce-t2".to_owned(), RDMA_PS_TCP, 7003);
        let addr = SocketAddr::from_abstract_name(name_of(&key)).unwrap();
        assert!(UnixDatagram::bind_addr(&addr).is_err(), "still held by b");
        drop(b);
        assert!(
            UnixDatagram::bind_addr(&addr).is_ok(),
            "let go with the last"
        );
    }
}
