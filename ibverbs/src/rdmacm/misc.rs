//! The rest of rdma_cm's small calls: event names, ports, the device list, options.

use std::ffi::{c_char, c_int, c_void};

use super::devices;
use super::id::id_of;
use super::id::{api, ret};
use crate::ffi::cma_h::*;
use crate::ffi::*;
use crate::guard::catch;

#[export_name = "__ferroce_rdma_event_str"]
pub unsafe extern "C" fn rdma_event_str(event: rdma_cm_event_type) -> *const c_char {
    let s: &'static [u8] = match event {
        RDMA_CM_EVENT_ADDR_RESOLVED => b"RDMA_CM_EVENT_ADDR_RESOLVED\0",
        RDMA_CM_EVENT_ADDR_ERROR => b"RDMA_CM_EVENT_ADDR_ERROR\0",
        RDMA_CM_EVENT_ROUTE_RESOLVED => b"RDMA_CM_EVENT_ROUTE_RESOLVED\0",
        RDMA_CM_EVENT_ROUTE_ERROR => b"RDMA_CM_EVENT_ROUTE_ERROR\0",
        RDMA_CM_EVENT_CONNECT_REQUEST => b"RDMA_CM_EVENT_CONNECT_REQUEST\0",
        RDMA_CM_EVENT_CONNECT_RESPONSE => b"RDMA_CM_EVENT_CONNECT_RESPONSE\0",
        RDMA_CM_EVENT_CONNECT_ERROR => b"RDMA_CM_EVENT_CONNECT_ERROR\0",
        RDMA_CM_EVENT_UNREACHABLE => b"RDMA_CM_EVENT_UNREACHABLE\0",
        RDMA_CM_EVENT_REJECTED => b"RDMA_CM_EVENT_REJECTED\0",
        RDMA_CM_EVENT_ESTABLISHED => b"RDMA_CM_EVENT_ESTABLISHED\0",
        RDMA_CM_EVENT_DISCONNECTED => b"RDMA_CM_EVENT_DISCONNECTED\0",
        RDMA_CM_EVENT_DEVICE_REMOVAL => b"RDMA_CM_EVENT_DEVICE_REMOVAL\0",
        RDMA_CM_EVENT_MULTICAST_JOIN => b"RDMA_CM_EVENT_MULTICAST_JOIN\0",
        RDMA_CM_EVENT_MULTICAST_ERROR => b"RDMA_CM_EVENT_MULTICAST_ERROR\0",
        RDMA_CM_EVENT_ADDR_CHANGE => b"RDMA_CM_EVENT_ADDR_CHANGE\0",
        RDMA_CM_EVENT_TIMEWAIT_EXIT => b"RDMA_CM_EVENT_TIMEWAIT_EXIT\0",
        _ => b"UNKNOWN EVENT\0",
    };
    s.as_ptr().cast()
}

/// The port of the ID's source (`src`) or destination address, in network order.
fn port_of(id: *mut rdma_cm_id, src: bool) -> u16 {
    let Some(cid) = id_of(id) else { return 0 };
    let st = cid.shared.lock();
    let a = if src { st.src } else { st.dst };
    a.map_or(0, |a| a.port().to_be())
}

#[export_name = "__ferroce_rdma_get_src_port"]
pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    catch("rdma_get_src_port", 0, || port_of(id, true))
}

#[export_name = "__ferroce_rdma_get_dst_port"]
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    catch("rdma_get_dst_port", 0, || port_of(id, false))
}

/// The list `rdma_get_devices` returns: the contexts, NULL-terminated, after a header
/// slot holding the count (so `rdma_free_devices` knows the allocation's length).
#[export_name = "__ferroce_rdma_get_devices"]
pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
    catch("rdma_get_devices", std::ptr::null_mut(), || {
        let mut list: Vec<*mut ibv_context> = devices::all().iter().map(|d| d.verbs()).collect();
        if !num_devices.is_null() {
            // SAFETY: non-NULL, the caller's to write.
            unsafe { *num_devices = list.len() as c_int };
        }
        let n = list.len();
        list.insert(0, n as *mut ibv_context);
        list.push(std::ptr::null_mut());
        let b = list.into_boxed_slice();
        let p = Box::into_raw(b) as *mut *mut ibv_context;
        // SAFETY: one past the header slot, inside the allocation.
        unsafe { p.add(1) }
    })
}

#[export_name = "__ferroce_rdma_free_devices"]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    catch("rdma_free_devices", (), || {
        if list.is_null() {
            return;
        }
        // SAFETY: `list` came from rdma_get_devices: one slot after a header holding the
        // count, `count + 2` slots in all (the API's contract: nothing else is passed).
        unsafe {
            let base = list.sub(1);
            let n = *base as usize;
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                base,
                n + 2,
            )));
        }
    })
}

#[export_name = "__ferroce_rdma_set_option"]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    api("rdma_set_option", || {
        let cid = id_of(id).ok_or(libc::EINVAL)?;
        if optval.is_null() {
            return Err(libc::EINVAL);
        }
        match (level as u32, optname as u32) {
            // Accepted and without effect here: the type of service (ferroce marks
            // its own traffic), address reuse and v6-only change nothing a program can
            // observe on ferroce.
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) if optlen >= 1 => Ok(()),
            (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR | RDMA_OPTION_ID_AFONLY)
                if optlen >= size_of::<c_int>() =>
            {
                Ok(())
            }
            // The local ACK timeout the ID's QP gets at RTS (and rdma_init_qp_attr
            // reports), as with rdma_cm; RC only.
            (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) if optlen == 1 => {
                // SAFETY: non-NULL, one byte (checked), the caller's.
                let t = unsafe { *optval.cast::<u8>() };
                let mut st = cid.shared.lock();
                if st.ps == RDMA_PS_UDP || t > 31 {
                    return Err(libc::EINVAL);
                }
                st.ack_timeout = Some(t);
                if let Some(p) = &mut st.path {
                    p.timeout = t;
                }
                Ok(())
            }
            (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => Err(libc::ENOSYS),
            _ => Err(libc::EINVAL),
        }
    })
}

#[export_name = "__ferroce_rdma_notify"]
pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, _event: ibv_event_type) -> c_int {
    // The CM sees the first packet of a connection itself (the RTU's stand-in).
    catch("rdma_notify", -1, || {
        ret(id_of(id).map(|_| ()).ok_or(libc::EINVAL))
    })
}
