//! rdma_cm's convenience layer: `rdma_getaddrinfo` / `rdma_freeaddrinfo` (names and
//! services to rdma_cm addresses, through the C library's getaddrinfo) and
//! `rdma_create_ep` / `rdma_destroy_ep` (a synchronous ID, bound or resolved, with its QP),
//! as rdma-core's rdma_server and rdma_client use them.

use std::ffi::{c_char, c_int};
use std::ptr::null_mut;

use super::conn::rdma_destroy_id;
use super::id::ret;
use super::id::{id_of, last_errno, rdma_create_id};
use super::qp::{rdma_create_qp, rdma_destroy_qp};
use crate::ffi::cma_h::*;
use crate::ffi::*;
use crate::guard::{catch, set_errno};

/// A copy of `len` bytes at `src` in C's heap (freed by rdma_freeaddrinfo).
fn copy_addr(
    src: *const libc::sockaddr,
    len: libc::socklen_t,
) -> Result<*mut libc::sockaddr, c_int> {
    // SAFETY: plain allocation; checked for NULL.
    let p = unsafe { libc::malloc(len as usize) }.cast::<libc::sockaddr>();
    if p.is_null() {
        return Err(libc::ENOMEM);
    }
    // SAFETY: `src` holds `len` bytes (getaddrinfo's or the caller's address); `p` as many.
    unsafe { std::ptr::copy_nonoverlapping(src.cast::<u8>(), p.cast::<u8>(), len as usize) };
    Ok(p)
}

/// getaddrinfo's hints for rdma_cm's.
fn ai_hints(h: &rdma_addrinfo) -> libc::addrinfo {
    // SAFETY: plain C data; zero is valid.
    let mut ai: libc::addrinfo = unsafe { std::mem::zeroed() };
    if h.ai_flags as u32 & RAI_PASSIVE != 0 {
        ai.ai_flags |= libc::AI_PASSIVE;
    }
    if h.ai_flags as u32 & RAI_NUMERICHOST != 0 {
        ai.ai_flags |= libc::AI_NUMERICHOST;
    }
    ai.ai_family = h.ai_family;
    ai.ai_socktype = match h.ai_qp_type as u32 {
        IBV_QPT_RC | IBV_QPT_UC => libc::SOCK_STREAM,
        IBV_QPT_UD => libc::SOCK_DGRAM,
        _ => 0,
    };
    ai.ai_protocol = match h.ai_port_space as u32 {
        RDMA_PS_TCP => libc::IPPROTO_TCP,
        RDMA_PS_UDP => libc::IPPROTO_UDP,
        _ => 0,
    };
    ai
}

/// Fills `rai` from the first answer of getaddrinfo.
fn from_ai(rai: &mut rdma_addrinfo, h: &rdma_addrinfo, ai: &libc::addrinfo) -> Result<(), c_int> {
    rai.ai_qp_type = match (h.ai_qp_type, ai.ai_socktype) {
        (t, _) if t != 0 => t,
        (_, libc::SOCK_DGRAM) => IBV_QPT_UD as c_int,
        _ => IBV_QPT_RC as c_int,
    };
    rai.ai_port_space = match (h.ai_port_space, ai.ai_protocol) {
        (p, _) if p != 0 => p,
        (_, libc::IPPROTO_UDP) => RDMA_PS_UDP as c_int,
        _ => RDMA_PS_TCP as c_int,
    };
    rai.ai_family = ai.ai_family;
    let a = copy_addr(ai.ai_addr, ai.ai_addrlen)?;
    if ai.ai_flags & libc::AI_PASSIVE != 0 {
        rai.ai_flags = RAI_PASSIVE as c_int;
        (rai.ai_src_addr, rai.ai_src_len) = (a, ai.ai_addrlen);
    } else {
        (rai.ai_dst_addr, rai.ai_dst_len) = (a, ai.ai_addrlen);
    }
    Ok(())
}

#[export_name = "__ferroce_rdma_getaddrinfo"]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    catch("rdma_getaddrinfo", -1, || {
        if (node.is_null() && service.is_null() && hints.is_null()) || res.is_null() {
            return ret(Err(libc::EINVAL));
        }
        // SAFETY: plain C data; zero is valid ("no hints").
        let none: rdma_addrinfo = unsafe { std::mem::zeroed() };
        // SAFETY: NULL or the caller's whole rdma_addrinfo.
        let h = unsafe { hints.as_ref() }.unwrap_or(&none);
        // SAFETY: plain allocation of a zeroed struct; checked for NULL.
        let rai = unsafe { libc::calloc(1, size_of::<rdma_addrinfo>()) }.cast::<rdma_addrinfo>();
        if rai.is_null() {
            return ret(Err(libc::ENOMEM));
        }
        // SAFETY: just allocated and zeroed.
        let r = unsafe { &mut *rai };
        let mut status: Result<(), c_int> = Ok(());
        if !node.is_null() || !service.is_null() {
            let ah = ai_hints(h);
            let mut ai: *mut libc::addrinfo = null_mut();
            let hp = if hints.is_null() {
                std::ptr::null()
            } else {
                &ah as *const libc::addrinfo
            };
            // SAFETY: NUL-terminated strings or NULL (the caller's), hints a local.
            let e = unsafe { libc::getaddrinfo(node, service, hp, &mut ai) };
            if e != 0 {
                // SAFETY: `rai` is ours, with nothing inside yet.
                unsafe { libc::free(rai.cast()) };
                return e; // an EAI_* code, for gai_strerror
            }
            // SAFETY: getaddrinfo succeeded: `ai` is a list of at least one entry.
            status = from_ai(r, h, unsafe { &*ai });
            // SAFETY: the list getaddrinfo returned, freed once.
            unsafe { libc::freeaddrinfo(ai) };
        } else {
            r.ai_flags = h.ai_flags;
            r.ai_family = h.ai_family;
            r.ai_qp_type = h.ai_qp_type;
            r.ai_port_space = h.ai_port_space;
            if h.ai_dst_len != 0 && !h.ai_dst_addr.is_null() {
                status = copy_addr(h.ai_dst_addr, h.ai_dst_len)
                    .map(|a| (r.ai_dst_addr, r.ai_dst_len) = (a, h.ai_dst_len));
            }
        }
        if status.is_ok() && r.ai_src_len == 0 && h.ai_src_len != 0 && !h.ai_src_addr.is_null() {
            status = copy_addr(h.ai_src_addr, h.ai_src_len)
                .map(|a| (r.ai_src_addr, r.ai_src_len) = (a, h.ai_src_len));
        }
        if let Err(e) = status {
            // SAFETY: ours, made above.
            unsafe { rdma_freeaddrinfo(rai) };
            return ret(Err(e));
        }
        // SAFETY: non-NULL, the caller's to write.
        unsafe { *res = rai };
        0
    })
}

#[export_name = "__ferroce_rdma_freeaddrinfo"]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    catch("rdma_freeaddrinfo", (), || {
        let mut p = res;
        while !p.is_null() {
            // SAFETY: a list rdma_getaddrinfo made (the API's contract): each entry and
            // what it points to came from C's heap there.
            unsafe {
                let r = &*p;
                let next = r.ai_next;
                for q in [
                    r.ai_src_addr.cast::<libc::c_void>(),
                    r.ai_dst_addr.cast(),
                    r.ai_src_canonname.cast(),
                    r.ai_dst_canonname.cast(),
                    r.ai_route,
                    r.ai_connect,
                ] {
                    libc::free(q);
                }
                libc::free(p.cast());
                p = next;
            }
        }
    })
}

#[export_name = "__ferroce_rdma_create_ep"]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    catch("rdma_create_ep", -1, || {
        if id.is_null() || res.is_null() {
            return ret(Err(libc::EINVAL));
        }
        // SAFETY: non-NULL, the caller's (typically rdma_getaddrinfo's) rdma_addrinfo.
        let r = unsafe { &*res };
        let mut cm: *mut rdma_cm_id = null_mut();
        // SAFETY: a NULL channel makes a synchronous ID; `cm` a local.
        if unsafe { rdma_create_id(null_mut(), &mut cm, null_mut(), r.ai_port_space as u32) } != 0 {
            return -1;
        }
        if !qp_init_attr.is_null() {
            // SAFETY: non-NULL, the caller's.
            let a = unsafe { &mut *qp_init_attr };
            a.qp_type = match r.ai_qp_type {
                0 if r.ai_port_space as u32 == RDMA_PS_UDP => IBV_QPT_UD,
                0 => IBV_QPT_RC,
                t => t as u32,
            };
        }
        let step = || -> c_int {
            // SAFETY: `cm` is live (just made); addresses are the caller's.
            unsafe {
                if r.ai_flags as u32 & RAI_PASSIVE != 0 {
                    if super::addr::rdma_bind_addr(cm, r.ai_src_addr) != 0 {
                        return -1;
                    }
                    if !qp_init_attr.is_null() {
                        // Each request's ID gets a QP like this (rdma_get_request).
                        if let Some(l) = id_of(cm) {
                            l.shared.lock().ep_qp = Some(super::id::EpQp {
                                pd,
                                attr: *qp_init_attr,
                            });
                        }
                    }
                    return 0;
                }
                let src = if r.ai_src_len != 0 {
                    r.ai_src_addr
                } else {
                    null_mut()
                };
                if super::addr::rdma_resolve_addr(cm, src, r.ai_dst_addr, 2000) != 0
                    || super::addr::rdma_resolve_route(cm, 2000) != 0
                {
                    return -1;
                }
                if !qp_init_attr.is_null() && rdma_create_qp(cm, pd, qp_init_attr) != 0 {
                    return -1;
                }
                0
            }
        };
        if step() != 0 {
            let e = last_errno();
            // SAFETY: ours, live.
            unsafe { rdma_destroy_id(cm) };
            set_errno(e);
            return -1;
        }
        // SAFETY: non-NULL, the caller's to write.
        unsafe { *id = cm };
        0
    })
}

#[export_name = "__ferroce_rdma_destroy_ep"]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    catch("rdma_destroy_ep", (), || {
        // SAFETY: both check `id`.
        unsafe {
            rdma_destroy_qp(id);
            rdma_destroy_id(id);
        }
    })
}
