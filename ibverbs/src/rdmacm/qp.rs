//! `rdma_create_qp` and `rdma_destroy_qp`: a QP on the ID's device, brought to where
//! rdma_cm leaves it (RC: INIT, so receives can be posted before connecting; UD: RTS
//! with rdma_cm's Q_Key), with the ID's PD and CQs made when the program gives none (as
//! `rdma_create_ep` users expect).

use std::ffi::c_int;

use crate::cq::{ibv_create_comp_channel, ibv_create_cq, ibv_destroy_comp_channel, ibv_destroy_cq};
use crate::ffi::cma_h::*;
use crate::ffi::*;
use crate::guard::catch;
use crate::pd::ibv_alloc_pd;
use crate::qp::{ibv_create_qp, ibv_destroy_qp, ibv_modify_qp};

use super::id::{id_of, last_errno, ret};

/// A completion channel and a CQ of `cqe` entries on `verbs` whose `cq_context` is the ID
/// `id`, as rdma_cm makes them: rdma_verbs.h's `rdma_get_send_comp` and
/// `rdma_get_recv_comp` check that a CQ event names the ID.
fn cq_with_channel(
    verbs: *mut ibv_context,
    cqe: u32,
    id: *mut rdma_cm_id,
) -> Result<(*mut ibv_comp_channel, *mut ibv_cq), c_int> {
    // SAFETY: `verbs` is the ID's live context; the calls check their arguments.
    unsafe {
        let ch = ibv_create_comp_channel(verbs);
        if ch.is_null() {
            return Err(last_errno());
        }
        let cq = ibv_create_cq(verbs, cqe.max(1) as c_int, id.cast(), ch, 0);
        if cq.is_null() {
            return Err(last_errno());
        }
        Ok((ch, cq))
    }
}

/// The INIT attributes rdma_cm gives a QP of its IDs (port 1, P_Key index 0; a UD QP
/// rdma_cm's Q_Key, an RC QP remote WRITE, READ and atomics): set in `a`, their mask
/// returned (without IBV_QP_STATE). rdma_create_qp and rdma_init_qp_attr both use it.
pub(crate) fn init_attr(ud: bool, a: &mut ibv_qp_attr) -> u32 {
    a.pkey_index = 0;
    a.port_num = 1;
    let mut mask = IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if ud {
        a.qkey = RDMA_UDP_QKEY;
        mask |= IBV_QP_QKEY;
    } else {
        a.qp_access_flags =
            IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        mask |= IBV_QP_ACCESS_FLAGS;
    }
    mask
}

/// Moves a new QP to where rdma_cm leaves it.
fn ready(qp: *mut ibv_qp, ud: bool) -> Result<(), c_int> {
    // SAFETY: plain C data; zero is valid.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = IBV_QPS_INIT;
    let mask = IBV_QP_STATE | init_attr(ud, &mut a);
    let steps: &[(ibv_qp_state, c_int)] = if ud {
        &[
            (IBV_QPS_INIT, mask as c_int),
            (IBV_QPS_RTR, IBV_QP_STATE as c_int),
            (IBV_QPS_RTS, (IBV_QP_STATE | IBV_QP_SQ_PSN) as c_int),
        ]
    } else {
        &[(IBV_QPS_INIT, mask as c_int)]
    };
    for &(state, mask) in steps {
        a.qp_state = state;
        // SAFETY: `qp` is live (just made); `a` a local.
        let r = unsafe { ibv_modify_qp(qp, &mut a, mask) };
        if r != 0 {
            return Err(r);
        }
    }
    Ok(())
}

/// What `rdma_create_qp` and `rdma_create_qp_ex` share: the attributes rdma_cm fills in,
/// and what it checks, around the call that makes the QP.
struct Wanted<'a> {
    qp_type: &'a mut ibv_qp_type,
    pd: *mut ibv_pd,
    send_cq: &'a mut *mut ibv_cq,
    recv_cq: &'a mut *mut ibv_cq,
    cap: ibv_qp_cap,
}

/// Makes the ID's QP with `make` (given the PD), its PD and CQs first when missing.
fn create_on(
    id: *mut rdma_cm_id,
    w: Wanted<'_>,
    make: impl FnOnce(*mut ibv_pd) -> *mut ibv_qp,
) -> Result<(), c_int> {
    let cid = id_of(id).ok_or(libc::EINVAL)?;
    let mut st = cid.shared.lock();
    let sh = &cid.shared;
    let ud = st.ps == RDMA_PS_UDP;
    let c = sh.c(&mut st).ok_or(libc::EINVAL)?;
    if c.verbs.is_null() || !c.qp.is_null() {
        return Err(libc::EINVAL);
    }
    // The port space decides: connections (RC, or UC) on TCP's, datagrams on UDP's.
    let fits = match c.qp_type {
        IBV_QPT_UD => *w.qp_type == IBV_QPT_UD,
        _ => *w.qp_type == IBV_QPT_RC || *w.qp_type == IBV_QPT_UC,
    };
    if !fits {
        return Err(libc::EINVAL);
    }
    let pd = if w.pd.is_null() {
        if c.pd.is_null() {
            // SAFETY: the ID's live context.
            c.pd = unsafe { ibv_alloc_pd(c.verbs) };
            if c.pd.is_null() {
                return Err(last_errno());
            }
        }
        c.pd
    } else {
        // rdma_reg_msgs and the other rdma_verbs.h helpers use the ID's PD.
        c.pd = w.pd;
        w.pd
    };
    if w.send_cq.is_null() {
        if c.send_cq.is_null() {
            (c.send_cq_channel, c.send_cq) = cq_with_channel(c.verbs, w.cap.max_send_wr, id)?;
        }
        *w.send_cq = c.send_cq;
    }
    if w.recv_cq.is_null() {
        if c.recv_cq.is_null() {
            (c.recv_cq_channel, c.recv_cq) = cq_with_channel(c.verbs, w.cap.max_recv_wr, id)?;
        }
        *w.recv_cq = c.recv_cq;
    }
    let qp = make(pd);
    if qp.is_null() {
        return Err(last_errno());
    }
    // SAFETY: just made, live.
    if unsafe { (*qp).context } != c.verbs {
        // SAFETY: as above; a QP of another device is no use to this ID.
        unsafe { ibv_destroy_qp(qp) };
        return Err(libc::EINVAL);
    }
    if let Err(e) = ready(qp, ud) {
        // SAFETY: as above.
        unsafe { ibv_destroy_qp(qp) };
        return Err(e);
    }
    c.qp = qp;
    Ok(())
}

#[export_name = "__ferroce_rdma_create_qp"]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    catch("rdma_create_qp", -1, || {
        if qp_init_attr.is_null() {
            return ret(Err(libc::EINVAL));
        }
        // SAFETY: non-NULL, the caller's whole ibv_qp_init_attr.
        let init = unsafe { &mut *qp_init_attr };
        let init_p: *mut ibv_qp_init_attr = init;
        let w = Wanted {
            qp_type: &mut init.qp_type,
            pd,
            send_cq: &mut init.send_cq,
            recv_cq: &mut init.recv_cq,
            cap: init.cap,
        };
        // SAFETY: `pd` is checked by ibv_create_qp; `init_p` the caller's, filled in.
        ret(create_on(id, w, |pd| unsafe { ibv_create_qp(pd, init_p) }))
    })
}

#[export_name = "__ferroce_rdma_create_qp_ex"]
pub unsafe extern "C" fn rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    qp_init_attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    catch("rdma_create_qp_ex", -1, || {
        if qp_init_attr.is_null() {
            return ret(Err(libc::EINVAL));
        }
        // SAFETY: non-NULL, the caller's whole ibv_qp_init_attr_ex.
        let a = unsafe { &mut *qp_init_attr };
        let pd = if a.comp_mask & IBV_QP_INIT_ATTR_PD != 0 {
            a.pd
        } else {
            std::ptr::null_mut()
        };
        let a_p: *mut ibv_qp_init_attr_ex = a;
        let w = Wanted {
            qp_type: &mut a.qp_type,
            pd,
            send_cq: &mut a.send_cq,
            recv_cq: &mut a.recv_cq,
            cap: a.cap,
        };
        ret(create_on(id, w, |pd| {
            // SAFETY: `a_p` is the caller's, whole; create_qp_ex checks what it names.
            unsafe {
                (*a_p).pd = pd;
                (*a_p).comp_mask |= IBV_QP_INIT_ATTR_PD;
                crate::qp_ex::create_qp_ex(std::ptr::null_mut(), a_p)
            }
        }))
    })
}

#[export_name = "__ferroce_rdma_destroy_qp"]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    catch("rdma_destroy_qp", (), || {
        let Some(cid) = id_of(id) else { return };
        let mut st = cid.shared.lock();
        let Some(c) = cid.shared.c(&mut st) else {
            return;
        };
        if !c.qp.is_null() {
            // SAFETY: checked by ibv_destroy_qp.
            unsafe { ibv_destroy_qp(c.qp) };
            c.qp = std::ptr::null_mut();
        }
        // The CQs and channels rdma_create_qp made for the ID, as rdma_cm frees them.
        // SAFETY: each call checks its handle (ours, or NULL).
        unsafe {
            for cq in [c.send_cq, c.recv_cq] {
                if !cq.is_null() {
                    ibv_destroy_cq(cq);
                }
            }
            for ch in [c.send_cq_channel, c.recv_cq_channel] {
                if !ch.is_null() {
                    ibv_destroy_comp_channel(ch);
                }
            }
        }
        (c.send_cq, c.recv_cq) = (std::ptr::null_mut(), std::ptr::null_mut());
        (c.send_cq_channel, c.recv_cq_channel) = (std::ptr::null_mut(), std::ptr::null_mut());
    })
}
