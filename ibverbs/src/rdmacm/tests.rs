//! rdma_cm's C ABI called as a C program would, a hostile one included: NULL, foreign and
//! destroyed pointers get rdma_cm's error convention (-1 and errno); a channel's fd
//! counts its events; an ID's unread events go with it; rdma_getaddrinfo answers as
//! rdma_cm's does. Connections themselves need devices: tests/netns/rdmacm.sh.

use std::ffi::{c_int, CStr};
use std::net::Ipv4Addr;
use std::ptr::null_mut;

use super::addr::*;
use super::channel::*;
use super::conn::*;
use super::ep::*;
use super::id::*;
use super::misc::*;
use crate::ffi::cma_h::*;

fn errno() -> c_int {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

fn nonblocking(fd: c_int) {
    // SAFETY: fcntl on a descriptor this test owns.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        assert_eq!(libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK), 0);
    }
}

fn readable(fd: c_int) -> bool {
    ferroce::link::eventfd::poll_readable(&[fd], Some(std::time::Duration::ZERO)).unwrap() != 0
}

/// A new channel and a TCP-port-space ID on it, as a program makes them first.
fn channel_and_id() -> (*mut rdma_event_channel, *mut rdma_cm_id) {
    // SAFETY: valid calls; the out-pointer is a local.
    unsafe {
        let ch = rdma_create_event_channel();
        assert!(!ch.is_null());
        let mut id: *mut rdma_cm_id = null_mut();
        assert_eq!(rdma_create_id(ch, &mut id, null_mut(), RDMA_PS_TCP), 0);
        (ch, id)
    }
}

#[test]
fn null_foreign_and_destroyed_handles_get_rdma_cm_errors() {
    let junk = 0x1234usize as *mut rdma_cm_id;
    // SAFETY: exercising the C ABI with invalid arguments is what this test is for.
    unsafe {
        assert_eq!(rdma_destroy_id(junk), -1);
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(rdma_destroy_id(null_mut()), -1);
        assert_eq!(rdma_listen(junk, 1), -1);
        assert_eq!(rdma_connect(null_mut(), null_mut()), -1);
        assert_eq!(rdma_accept(junk, null_mut()), -1);
        assert_eq!(rdma_disconnect(junk), -1);
        assert_eq!(rdma_reject(junk, null_mut(), 0), -1);
        assert_eq!(rdma_resolve_route(junk, 100), -1);
        assert_eq!(rdma_ack_cm_event(junk.cast()), -1);
        let mut e: *mut rdma_cm_event = null_mut();
        assert_eq!(rdma_get_cm_event(junk.cast(), &mut e), -1);
        assert_eq!(errno(), libc::EINVAL);
        rdma_destroy_event_channel(junk.cast()); // ignored, no crash
        let s = CStr::from_ptr(rdma_event_str(999));
        assert_eq!(s.to_str().unwrap(), "UNKNOWN EVENT");

        let ch = rdma_create_event_channel();
        assert!(!ch.is_null());
        let mut id: *mut rdma_cm_id = null_mut();
        assert_eq!(rdma_create_id(ch, &mut id, null_mut(), RDMA_PS_IB), -1);
        assert_eq!(errno(), libc::EPROTONOSUPPORT);
        assert_eq!(rdma_create_id(ch, null_mut(), null_mut(), RDMA_PS_TCP), -1);
        assert_eq!(rdma_create_id(ch, &mut id, null_mut(), RDMA_PS_TCP), 0);
        // Steps out of order: nothing bound, resolved or requested.
        assert_eq!(rdma_listen(id, 1), -1);
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(rdma_connect(id, null_mut()), -1);
        assert_eq!(rdma_resolve_route(id, 100), -1);
        assert_eq!(rdma_accept(id, null_mut()), -1);
        assert_eq!(rdma_disconnect(id), -1);
        assert_eq!(rdma_resolve_addr(id, null_mut(), null_mut(), 100), -1);
        assert_eq!(errno(), libc::EINVAL);
        // A socket address of a family rdma_cm does not take.
        let mut un: libc::sockaddr_un = std::mem::zeroed();
        un.sun_family = libc::AF_UNIX as libc::sa_family_t;
        assert_eq!(rdma_bind_addr(id, (&raw mut un).cast()), -1);
        assert_eq!(errno(), libc::EAFNOSUPPORT);
        assert_eq!(rdma_destroy_id(id), 0);
        assert_eq!(rdma_destroy_id(id), -1, "destroyed twice");
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(rdma_get_src_port(id), 0);
        rdma_destroy_event_channel(ch);
        assert_eq!(rdma_get_cm_event(ch, &mut e), -1, "a destroyed channel");
    }
}

#[test]
fn a_channels_fd_counts_its_events_and_an_ids_go_with_it() {
    // SAFETY: valid calls on objects this test makes.
    unsafe {
        let ch = rdma_create_event_channel();
        let fd = (*ch).fd;
        nonblocking(fd);
        let mut e: *mut rdma_cm_event = null_mut();
        assert_eq!(rdma_get_cm_event(ch, &mut e), -1);
        assert_eq!(
            errno(),
            libc::EAGAIN,
            "nothing yet: EAGAIN on a non-blocking fd"
        );
        assert!(!readable(fd));

        let (mut a, mut b): (*mut rdma_cm_id, *mut rdma_cm_id) = (null_mut(), null_mut());
        let ctx = 0x5150usize as *mut libc::c_void;
        assert_eq!(rdma_create_id(ch, &mut a, ctx, RDMA_PS_TCP), 0);
        assert_eq!(rdma_create_id(ch, &mut b, null_mut(), RDMA_PS_UDP), 0);
        assert_eq!((*a).context, ctx);
        assert_eq!((*b).qp_type, crate::ffi::IBV_QPT_UD);
        let events = channel_of(ch).unwrap().events.clone();
        let mut with_data = Event::new(RDMA_CM_EVENT_ESTABLISHED, a as usize, 0);
        with_data.private = b"hello".to_vec();
        events.post(Box::new(with_data));
        events.post(Box::new(Event::new(
            RDMA_CM_EVENT_DISCONNECTED,
            b as usize,
            0,
        )));
        events.post(Box::new(Event::new(RDMA_CM_EVENT_REJECTED, a as usize, 8)));
        assert!(readable(fd));

        assert_eq!(rdma_get_cm_event(ch, &mut e), 0);
        assert_eq!(((*e).event, (*e).id), (RDMA_CM_EVENT_ESTABLISHED, a));
        let p = (*e).param.conn;
        let data =
            std::slice::from_raw_parts(p.private_data.cast::<u8>(), p.private_data_len.into());
        assert_eq!(data, b"hello");
        assert_eq!(rdma_ack_cm_event(e), 0);
        assert_eq!(rdma_ack_cm_event(e), -1, "acked twice");

        // `a` goes: its REJECTED, still unread, goes with it; `b`'s stays.
        assert_eq!(rdma_destroy_id(a), 0);
        assert!(readable(fd));
        assert_eq!(rdma_get_cm_event(ch, &mut e), 0);
        assert_eq!(((*e).event, (*e).id), (RDMA_CM_EVENT_DISCONNECTED, b));
        assert_eq!(rdma_ack_cm_event(e), 0);
        assert!(
            !readable(fd),
            "the destroyed ID's event is gone, and its count"
        );
        assert_eq!(rdma_get_cm_event(ch, &mut e), -1);
        assert_eq!(errno(), libc::EAGAIN);
        assert_eq!(rdma_destroy_id(b), 0);
        rdma_destroy_event_channel(ch);
    }
}

fn sin(a: *const libc::sockaddr) -> (Ipv4Addr, u16) {
    // SAFETY: an AF_INET address rdma_getaddrinfo made.
    let s = unsafe { &*(a as *const libc::sockaddr_in) };
    assert_eq!(s.sin_family as c_int, libc::AF_INET);
    (
        Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
        u16::from_be(s.sin_port),
    )
}

#[test]
fn getaddrinfo_gives_rdma_cm_addresses() {
    // SAFETY: valid calls; results freed with rdma_freeaddrinfo.
    unsafe {
        let mut h: rdma_addrinfo = std::mem::zeroed();
        h.ai_port_space = RDMA_PS_TCP as c_int;
        let mut res: *mut rdma_addrinfo = null_mut();
        let r = rdma_getaddrinfo(c"10.1.2.3".as_ptr(), c"7471".as_ptr(), &h, &mut res);
        assert_eq!(r, 0);
        let a = &*res;
        assert_eq!(sin(a.ai_dst_addr), (Ipv4Addr::new(10, 1, 2, 3), 7471));
        assert!(a.ai_src_addr.is_null());
        assert_eq!(a.ai_qp_type as u32, crate::ffi::IBV_QPT_RC);
        assert_eq!(a.ai_port_space as u32, RDMA_PS_TCP);
        rdma_freeaddrinfo(res);

        // Passive, UDP port space: the address is the source, the QP type UD.
        h.ai_flags = RAI_PASSIVE as c_int;
        h.ai_port_space = RDMA_PS_UDP as c_int;
        let r = rdma_getaddrinfo(null_mut(), c"7174".as_ptr(), &h, &mut res);
        assert_eq!(r, 0);
        let a = &*res;
        assert_eq!(a.ai_flags as u32 & RAI_PASSIVE, RAI_PASSIVE);
        assert_eq!(sin(a.ai_src_addr).1, 7174);
        assert!(a.ai_dst_addr.is_null());
        assert_eq!(a.ai_qp_type as u32, crate::ffi::IBV_QPT_UD);
        rdma_freeaddrinfo(res);

        // getaddrinfo's own error codes come back as they are (for gai_strerror).
        h.ai_flags = RAI_NUMERICHOST as c_int;
        let r = rdma_getaddrinfo(c"not-an-address".as_ptr(), null_mut(), &h, &mut res);
        assert_eq!(r, libc::EAI_NONAME);
        assert_eq!(
            rdma_getaddrinfo(null_mut(), null_mut(), std::ptr::null(), &mut res),
            -1
        );
        assert_eq!(errno(), libc::EINVAL);
        rdma_freeaddrinfo(null_mut());
    }
}

#[test]
fn init_qp_attr_gives_init_at_once_and_rtr_only_with_a_peer() {
    use crate::ffi::*;
    // SAFETY: valid calls on objects this test makes; out-pointers are locals.
    unsafe {
        let (ch, mut id) = channel_and_id();
        let mut a: ibv_qp_attr = std::mem::zeroed();
        let mut mask: c_int = 0;
        a.qp_state = IBV_QPS_INIT;
        assert_eq!(rdma_init_qp_attr(id, &mut a, &mut mask), 0);
        let want = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        assert_eq!(mask as u32, want);
        assert_eq!((a.port_num, a.pkey_index), (1, 0));
        assert_ne!(a.qp_access_flags & IBV_ACCESS_REMOTE_READ, 0);
        // No request taken, no reply come: nothing to say about the peer.
        a.qp_state = IBV_QPS_RTR;
        assert_eq!(rdma_init_qp_attr(id, &mut a, &mut mask), -1);
        assert_eq!(errno(), libc::EINVAL);
        a.qp_state = IBV_QPS_SQD;
        assert_eq!(rdma_init_qp_attr(id, &mut a, &mut mask), -1);
        assert_eq!(rdma_init_qp_attr(id, null_mut(), &mut mask), -1);
        assert_eq!(rdma_establish(id), -1, "nothing to establish");
        assert_eq!(rdma_destroy_id(id), 0);
        // A UD ID's QP gets rdma_cm's Q_Key.
        assert_eq!(rdma_create_id(ch, &mut id, null_mut(), RDMA_PS_UDP), 0);
        a.qp_state = IBV_QPS_INIT;
        assert_eq!(rdma_init_qp_attr(id, &mut a, &mut mask), 0);
        assert_eq!(a.qkey, RDMA_UDP_QKEY);
        assert_ne!(mask as u32 & IBV_QP_QKEY, 0);
        assert_eq!(rdma_destroy_id(id), 0);
        rdma_destroy_event_channel(ch);
    }
}

#[test]
fn migrate_id_moves_the_id_and_its_unread_events() {
    // SAFETY: valid calls on objects this test makes.
    unsafe {
        let (ch1, ch2) = (rdma_create_event_channel(), rdma_create_event_channel());
        nonblocking((*ch1).fd);
        let mut id: *mut rdma_cm_id = null_mut();
        assert_eq!(rdma_create_id(ch1, &mut id, null_mut(), RDMA_PS_TCP), 0);
        let events = channel_of(ch1).unwrap().events.clone();
        events.post(Box::new(Event::new(
            RDMA_CM_EVENT_ESTABLISHED,
            id as usize,
            0,
        )));
        assert_eq!(rdma_migrate_id(id, ch2), 0);
        assert_eq!((*id).channel, ch2);
        assert!(!readable((*ch1).fd), "the event left with the ID");
        let mut e: *mut rdma_cm_event = null_mut();
        assert_eq!(rdma_get_cm_event(ch2, &mut e), 0);
        assert_eq!(((*e).event, (*e).id), (RDMA_CM_EVENT_ESTABLISHED, id));
        assert_eq!(rdma_ack_cm_event(e), 0);
        assert_eq!(rdma_destroy_id(id), 0);
        rdma_destroy_event_channel(ch1);
        rdma_destroy_event_channel(ch2);
    }
}

#[test]
fn migrate_id_moves_between_synchronous_use_and_a_channel() {
    // SAFETY: valid calls on objects this test makes, and the handles they gave.
    unsafe {
        // Made without a channel (synchronous, as libfabric's verbs provider makes every
        // ID), then moved onto one: its own channel goes, its unread event follows.
        let mut id: *mut rdma_cm_id = null_mut();
        assert_eq!(
            rdma_create_id(null_mut(), &mut id, null_mut(), RDMA_PS_TCP),
            0
        );
        let own = (*id).channel;
        assert!(channel_of(own).is_some());
        assert_eq!(rdma_migrate_id(id, null_mut()), -1, "already synchronous");
        assert_eq!(errno(), libc::EINVAL);
        channel_of(own).unwrap().events.post(Box::new(Event::new(
            RDMA_CM_EVENT_ADDR_RESOLVED,
            id as usize,
            0,
        )));
        let ch = rdma_create_event_channel();
        nonblocking((*ch).fd);
        assert_eq!(rdma_migrate_id(id, ch), 0);
        assert_eq!((*id).channel, ch);
        assert!(channel_of(own).is_none(), "its own channel is gone");
        assert!(id_of(id).unwrap().shared.own_channel().is_none());
        let mut e: *mut rdma_cm_event = null_mut();
        assert_eq!(rdma_get_cm_event(ch, &mut e), 0);
        assert_eq!(((*e).event, (*e).id), (RDMA_CM_EVENT_ADDR_RESOLVED, id));
        assert_eq!(rdma_ack_cm_event(e), 0);
        assert_eq!(rdma_migrate_id(id, ch), 0, "onto the channel it is on");
        assert_eq!((*id).channel, ch);

        // And back: synchronous again, on a channel made for it.
        assert_eq!(rdma_migrate_id(id, null_mut()), 0);
        let own = (*id).channel;
        assert!(!own.is_null() && own != ch);
        assert_eq!(id_of(id).unwrap().shared.own_channel(), Some(own as usize));
        assert!(!readable((*ch).fd));
        assert_eq!(rdma_destroy_id(id), 0);
        assert!(channel_of(own).is_none(), "destroyed with the ID");
        rdma_destroy_event_channel(ch);
    }
}

#[test]
fn destroy_id_waits_for_its_events_to_be_acknowledged() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    // SAFETY: valid calls on objects this test makes; the event is acknowledged once.
    unsafe {
        let (ch, id) = channel_and_id();
        let e = Event::new(RDMA_CM_EVENT_DISCONNECTED, id as usize, 0);
        assert!(id_of(id).unwrap().shared.post(e));
        let mut got: *mut rdma_cm_event = null_mut();
        assert_eq!(rdma_get_cm_event(ch, &mut got), 0);
        let acked = Arc::new(AtomicBool::new(false));
        let (flag, ev) = (acked.clone(), got as usize);
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            flag.store(true, Ordering::SeqCst);
            assert_eq!(rdma_ack_cm_event(ev as *mut rdma_cm_event), 0);
        });
        assert_eq!(rdma_destroy_id(id), 0);
        assert!(
            acked.load(Ordering::SeqCst),
            "destroyed before its event was acknowledged"
        );
        t.join().unwrap();
        rdma_destroy_event_channel(ch);
    }
}

/// rdma_destroy_id never returns while an event of the ID is in the program's hands: an
/// event the program's event thread takes while the ID is being destroyed is waited for,
/// as one taken before. (The count of events handed out was raised after the event left
/// the queue, so a destroy in between neither found it queued nor waited for it: Debian's
/// rping then handled DISCONNECTED after its main thread had destroyed the ID and the
/// channel, and its next rdma_get_cm_event failed with EINVAL.) Each of the 5000 rounds
/// races the two threads; before the fix about one round in a few thousand returned early.
#[test]
fn destroy_id_waits_for_an_event_taken_while_it_runs() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    // Before its fix, taking the count of an event back could block on the channel's
    // eventfd while holding the queue the event thread waited for: a hang, which this
    // watchdog makes a failure.
    let finished = Arc::new(AtomicBool::new(false));
    let done = finished.clone();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(60));
        if !done.load(Ordering::SeqCst) {
            eprintln!("destroy_id_waits_for_an_event_taken_while_it_runs: hung for 60 s");
            std::process::abort();
        }
    });
    let mut early = 0;
    for _ in 0..5000 {
        // SAFETY: valid calls on objects this test makes; each event acknowledged once.
        unsafe {
            let (ch, id) = channel_and_id();
            let mut other: *mut rdma_cm_id = null_mut();
            assert_eq!(rdma_create_id(ch, &mut other, null_mut(), RDMA_PS_TCP), 0);
            let acked = Arc::new(AtomicBool::new(false));
            let (flag, chp, idp) = (acked.clone(), ch as usize, id as usize);
            let t = std::thread::spawn(move || {
                let mut e: *mut rdma_cm_event = null_mut();
                assert_eq!(rdma_get_cm_event(chp as *mut _, &mut e), 0);
                let mine = (*e).id as usize == idp;
                if mine {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    flag.store(true, Ordering::SeqCst);
                }
                assert_eq!(rdma_ack_cm_event(e), 0);
                mine
            });
            std::thread::yield_now();
            assert!(id_of(id).unwrap().shared.post(Event::new(
                RDMA_CM_EVENT_DISCONNECTED,
                id as usize,
                0
            )));
            assert_eq!(rdma_destroy_id(id), 0);
            let acked_when_destroyed = acked.load(Ordering::SeqCst);
            // Wakes the thread if the destroy took the event back unread.
            assert!(id_of(other).unwrap().shared.post(Event::new(
                RDMA_CM_EVENT_ESTABLISHED,
                other as usize,
                0
            )));
            let got_it = t.join().unwrap();
            if got_it && !acked_when_destroyed {
                early += 1;
            }
            assert_eq!(rdma_destroy_id(other), 0);
            rdma_destroy_event_channel(ch);
        }
    }
    finished.store(true, Ordering::SeqCst);
    assert_eq!(
        early, 0,
        "destroys that returned with the ID's event unacknowledged"
    );
}

#[test]
fn a_listen_backlog_bounds_unread_requests_until_they_are_read() {
    use std::sync::Arc;
    let b = Arc::new(Backlog::default());
    b.set_limit(2);
    let (s1, s2) = (b.take().unwrap(), b.take().unwrap());
    assert!(b.take().is_none(), "full at the backlog");
    drop(s1); // its event went unread with its ID
    let s3 = b.take().expect("room again");
    assert_eq!(b.unread(), 2);
    drop((s2, s3));
    for (asked, got) in [
        (0, MAX_BACKLOG),
        (-1, MAX_BACKLOG),
        (1 << 20, MAX_BACKLOG),
        (7, 7),
    ] {
        b.set_limit(asked);
        let slots: Vec<_> = std::iter::from_fn(|| b.take())
            .take(MAX_BACKLOG + 1)
            .collect();
        assert_eq!(slots.len(), got, "rdma_listen backlog {asked}");
    }
    assert_eq!(b.unread(), 0);

    // Reading the CONNECT_REQUEST gives its place back, before it is acknowledged.
    b.set_limit(1);
    // SAFETY: the C ABI as a program uses it.
    unsafe {
        let ch = rdma_create_event_channel();
        let mut e = Event::new(RDMA_CM_EVENT_CONNECT_REQUEST, 0x10, 0);
        e.slot = b.take();
        channel_of(ch).unwrap().events.post(Box::new(e));
        assert!(b.take().is_none());
        let mut got: *mut rdma_cm_event = null_mut();
        assert_eq!(rdma_get_cm_event(ch, &mut got), 0);
        assert_eq!(b.unread(), 0, "read: room for the next request");
        assert_eq!(rdma_ack_cm_event(got), 0);
        rdma_destroy_event_channel(ch);
    }
}
