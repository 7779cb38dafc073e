//! Whether an interface can carry frames (administratively up, with carrier), and whether
//! it still exists, watched over rtnetlink: the state of the IB port ferroce makes of the
//! interface, and what raises its PORT_ACTIVE / PORT_ERR and DEVICE_FATAL events.
//!
//! rxe does the same from the kernel's netdev notifier: its port is ACTIVE while the
//! netdev runs with carrier, DOWN otherwise, with an event at each change; and when the
//! netdev is unregistered (deleted, or moved to another network namespace) the rxe device
//! goes with it. A packet socket bound to an interface that left is unbound for good, even
//! if one comes back with the same index, so "gone" never turns back.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use netlink_packet_core::{NetlinkMessage, NetlinkPayload};
use netlink_packet_route::link::LinkFlags;
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr as NlAddr};

use super::interface::Interface;

/// rtnetlink's multicast group of link changes (`RTNLGRP_LINK`).
const RTNLGRP_LINK: u32 = 1;

/// What notifications or a listing said about the interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Up, with carrier.
    Up,
    /// There, but down or without carrier.
    Down,
    /// Deleted or moved to another namespace.
    Gone,
}

/// One interface's operational state, kept current from the kernel's notifications.
#[derive(Debug)]
pub struct OperState {
    socket: Socket,
    index: u32,
    up: AtomicBool,
    gone: AtomicBool,
}

impl OperState {
    /// Watches the interface of index `index`. Subscribes before it reads the current
    /// state, so no change between the two is missed.
    pub fn watch(index: u32) -> io::Result<OperState> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind(&NlAddr::new(0, 0))?;
        socket.add_membership(RTNLGRP_LINK)?;
        socket.set_non_blocking(true)?;
        let w = OperState {
            socket,
            index,
            up: AtomicBool::new(false),
            gone: AtomicBool::new(false),
        };
        w.note(w.read_now());
        Ok(w)
    }

    /// The descriptor that polls readable when a notification is queued.
    pub fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// Whether the interface is up, as of the last notification read.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Whether the interface has left (deleted, or moved to another namespace), as of the
    /// last notification read. Once it has, it stays gone.
    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }

    /// Takes in what was seen; "gone" is final.
    fn note(&self, seen: Seen) {
        if seen == Seen::Gone {
            self.gone.store(true, Ordering::Relaxed);
        }
        self.up
            .store(seen == Seen::Up && !self.is_gone(), Ordering::Relaxed);
    }

    /// Reads the queued notifications and returns the interface's state after them.
    pub fn refresh(&self) -> bool {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            buf.clear();
            match self.socket.recv(&mut buf, libc::MSG_DONTWAIT) {
                Ok(0) => break,
                Ok(_) => {
                    if let Some(seen) = self.state_in(&buf) {
                        self.note(seen);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // ENOBUFS: notifications were lost; the kernel's state is the truth.
                    // (Any error ends the walk: one that repeats must not spin the driver.)
                    tracing::debug!(error = %e, "link notifications lost; reading the state");
                    self.note(self.read_now());
                    break;
                }
            }
        }
        self.is_up()
    }

    /// The state our interface has in the last of the messages in `data`, if any is ours.
    fn state_in(&self, data: &[u8]) -> Option<Seen> {
        let mut state = None;
        let mut at = 0;
        while at < data.len() {
            let Ok(msg) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&data[at..]) else {
                break;
            };
            let len = msg.header.length as usize;
            match msg.payload {
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(l))
                    if l.header.index == self.index =>
                {
                    let f = l.header.flags;
                    state = Some(
                        if f.contains(LinkFlags::Up) && f.contains(LinkFlags::Running) {
                            Seen::Up
                        } else {
                            Seen::Down
                        },
                    );
                }
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelLink(l))
                    if l.header.index == self.index =>
                {
                    state = Some(Seen::Gone);
                }
                _ => {}
            }
            // Messages are 4-byte aligned.
            let step = (len + 3) & !3;
            if step == 0 {
                break;
            }
            at += step;
        }
        state
    }

    /// The state the kernel reports now, by the rule every interface listing uses
    /// ([`Interface::up`]); an interface the listing lacks is gone.
    fn read_now(&self) -> Seen {
        match Interface::all().iter().find(|i| i.index == self.index) {
            None => Seen::Gone,
            Some(i) if i.up => Seen::Up,
            Some(_) => Seen::Down,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::NetlinkHeader;
    use netlink_packet_route::link::LinkMessage;

    fn notification(index: u32, flags: LinkFlags, del: bool) -> Vec<u8> {
        let mut l = LinkMessage::default();
        l.header.index = index;
        l.header.flags = flags;
        let inner = if del {
            RouteNetlinkMessage::DelLink(l)
        } else {
            RouteNetlinkMessage::NewLink(l)
        };
        let mut m = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::from(inner));
        m.finalize();
        let mut buf = vec![0; m.header.length as usize];
        m.serialize(&mut buf);
        buf
    }

    #[test]
    fn lo_is_up_and_an_unknown_interface_is_not() {
        let lo = OperState::watch(1).expect("rtnetlink");
        assert!(lo.is_up(), "lo is up wherever the tests run");
        assert!(lo.refresh(), "no notification: no change");
        assert!(!lo.is_gone());
        let none = OperState::watch(u32::MAX).expect("rtnetlink");
        assert!(!none.is_up());
        assert!(none.is_gone(), "no such interface: gone");
    }

    #[test]
    fn notifications_about_our_interface_set_the_state_and_the_last_one_wins() {
        let w = OperState::watch(7).expect("rtnetlink");
        let up = LinkFlags::Up | LinkFlags::Running | LinkFlags::LowerUp;
        assert_eq!(w.state_in(&notification(7, up, false)), Some(Seen::Up));
        // Administratively up without carrier (a veth whose peer is down): not active.
        assert_eq!(
            w.state_in(&notification(7, LinkFlags::Up, false)),
            Some(Seen::Down)
        );
        assert_eq!(
            w.state_in(&notification(7, up, true)),
            Some(Seen::Gone),
            "deleted"
        );
        assert_eq!(
            w.state_in(&notification(8, up, false)),
            None,
            "another interface"
        );
        let mut two = notification(7, LinkFlags::Up, false);
        two.extend(notification(8, LinkFlags::empty(), false));
        two.extend(notification(7, up, false));
        assert_eq!(w.state_in(&two), Some(Seen::Up));
        // Garbage from the socket is not a state.
        assert_eq!(w.state_in(&[0xff; 7]), None);
        assert_eq!(w.state_in(&[]), None);
    }

    #[test]
    fn a_deleted_interface_stays_gone_and_down() {
        let w = OperState::watch(1).expect("rtnetlink");
        assert!(w.is_up() && !w.is_gone());
        w.note(Seen::Down);
        assert!(!w.is_up() && !w.is_gone(), "down is not gone");
        w.note(Seen::Up);
        assert!(w.is_up());
        w.note(Seen::Gone);
        assert!(!w.is_up() && w.is_gone());
        // An interface that comes back with the index is not this socket's any more.
        w.note(Seen::Up);
        assert!(!w.is_up() && w.is_gone(), "gone is final");
    }
}
