//! Queue pairs: create, modify (every attribute ibv_modify_qp takes for RC, UC and UD),
//! query, destroy, and the posting verbs the header's inline functions call.

use std::ffi::c_int;
use std::net::Ipv6Addr;
use std::sync::{Mutex, PoisonError};

use ferroce::verbs::{Error, MemoryRegion, QueuePair};
use ferroce_transport::Error as TransportError;
use ferroce_transport::{
    Access, AddressVector, Mtu, QpAttr, QpAttrMask, QpCap, QpState, QpType, SendWr, GID_FAMILIES,
    MAX_INLINE,
};

use crate::context::ctx_of;
use crate::cq::cq_of;
use crate::ffi::*;
use crate::guard::{catch, errno_of, null_with};
use crate::handles::{self, Kind};
use crate::hint;
use crate::pd::pd_of;
use crate::srq::srq_of;

#[repr(C)]
pub(crate) struct Qp {
    /// An `ibv_qp_ex`, which begins with the `ibv_qp`: C's `ibv_qp *` points at it.
    pub ibv: ibv_qp_ex,
    /// Shared with a connect or accept of rdma_cm under way, which may outlive
    /// ibv_destroy_qp by its wait (the QP goes when both are done).
    pub inner: std::sync::Arc<QueuePair>,
    /// The creation attributes, for ibv_query_qp.
    pub init: ibv_qp_init_attr,
    /// Where inline data is gathered before posting: the bytes of an inline send need
    /// not be registered memory, so they are copied here (the transport takes its own
    /// copy at post time, so one buffer per QP serves every post).
    pub inline: Option<Mutex<MemoryRegion>>,
    /// Made by `ibv_create_qp_ex` with `send_ops_flags`: `ibv_qp_to_qp_ex` gives its
    /// `ibv_qp_ex`.
    pub extended: bool,
    /// The work requests of an `ibv_wr_start` … `ibv_wr_complete` batch.
    pub builder: Mutex<Builder>,
}

/// Work requests being built with the `ibv_wr_*` functions, posted by `ibv_wr_complete`.
#[derive(Default)]
pub(crate) struct Builder {
    pub wrs: Vec<(SendWr, Option<Vec<u8>>)>,
    /// The first mistake of the batch (an unsupported call, a bad argument).
    pub error: Option<c_int>,
}

// SAFETY: the raw pointers inside are C handles, compared and handed back, never
// dereferenced without a live-table check.
unsafe impl Send for Qp {}
// SAFETY: as above; the Rust parts are Sync.
unsafe impl Sync for Qp {}

/// The QP behind `p`, if live.
pub(crate) fn qp_of(p: *const ibv_qp) -> Option<&'static Qp> {
    // SAFETY: live (checked), freed only by ibv_destroy_qp.
    handles::get(p as *const Qp, Kind::Qp).map(|p| unsafe { &*p })
}

pub(crate) fn qp_type_of(t: ibv_qp_type) -> Option<QpType> {
    match t {
        IBV_QPT_RC => Some(QpType::Rc),
        IBV_QPT_UC => Some(QpType::Uc),
        IBV_QPT_UD => Some(QpType::Ud),
        _ => None,
    }
}

fn state_of(s: ibv_qp_state) -> Option<QpState> {
    Some(match s {
        IBV_QPS_RESET => QpState::Reset,
        IBV_QPS_INIT => QpState::Init,
        IBV_QPS_RTR => QpState::Rtr,
        IBV_QPS_RTS => QpState::Rts,
        IBV_QPS_SQD => QpState::Sqd,
        IBV_QPS_SQE => QpState::Sqe,
        IBV_QPS_ERR => QpState::Err,
        _ => return None,
    })
}

fn ibv_state(s: QpState) -> ibv_qp_state {
    match s {
        QpState::Reset => IBV_QPS_RESET,
        QpState::Init => IBV_QPS_INIT,
        QpState::Rtr => IBV_QPS_RTR,
        QpState::Rts => IBV_QPS_RTS,
        QpState::Sqd => IBV_QPS_SQD,
        QpState::Sqe => IBV_QPS_SQE,
        QpState::Err => IBV_QPS_ERR,
    }
}

fn mtu_of(m: ibv_mtu) -> Option<Mtu> {
    Some(match m {
        IBV_MTU_256 => Mtu::Mtu256,
        IBV_MTU_512 => Mtu::Mtu512,
        IBV_MTU_1024 => Mtu::Mtu1024,
        IBV_MTU_2048 => Mtu::Mtu2048,
        IBV_MTU_4096 => Mtu::Mtu4096,
        _ => return None,
    })
}

/// The path of an `ibv_ah_attr`: RoCE needs the GRH (`is_global`), which holds the
/// destination GID.
pub(crate) fn av_of(a: &ibv_ah_attr) -> Result<AddressVector, c_int> {
    if a.is_global == 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: every bit pattern of the gid union is a valid byte array.
    let raw = unsafe { a.grh.dgid.raw };
    Ok(AddressVector {
        dest_gid: Ipv6Addr::from(raw),
        sgid_index: a.grh.sgid_index,
        traffic_class: a.grh.traffic_class,
        hop_limit: a.grh.hop_limit,
        flow_label: a.grh.flow_label,
    })
}

pub(crate) fn ah_attr_of(av: &AddressVector) -> ibv_ah_attr {
    // SAFETY: plain C data; zero is valid for every field.
    let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
    a.grh.dgid = ibv_gid {
        raw: av.dest_gid.octets(),
    };
    a.grh.sgid_index = av.sgid_index;
    a.grh.traffic_class = av.traffic_class;
    a.grh.hop_limit = av.hop_limit;
    a.grh.flow_label = av.flow_label;
    a.is_global = 1;
    a.port_num = 1;
    a
}

fn cap_of(c: &ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

#[export_name = "__ferroce_ibv_create_qp"]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    catch("ibv_create_qp", std::ptr::null_mut(), || {
        if attr.is_null() {
            return null_with(libc::EINVAL);
        }
        // SAFETY: checked non-NULL; the caller passes a whole ibv_qp_init_attr.
        let init = unsafe { &mut *attr };
        match create(pd, init, None) {
            Ok(qp) => qp,
            Err(e) => null_with(e),
        }
    })
}

/// Creates a QP in `pd` from `init` (whose `cap` is updated to what the QP has);
/// `table` makes it an extended QP with the `ibv_wr_*` posting functions.
pub(crate) fn create(
    pd: *mut ibv_pd,
    init: &mut ibv_qp_init_attr,
    table: Option<fn(&mut ibv_qp_ex)>,
) -> Result<*mut ibv_qp, c_int> {
    let p = pd_of(pd).ok_or(libc::EINVAL)?;
    let (Some(send_cq), Some(recv_cq)) = (cq_of(init.send_cq), cq_of(init.recv_cq)) else {
        return Err(libc::EINVAL);
    };
    let qp_type = qp_type_of(init.qp_type).ok_or(libc::EOPNOTSUPP)?;
    let srq = if init.srq.is_null() {
        None
    } else {
        Some(&srq_of(init.srq).ok_or(libc::EINVAL)?.inner)
    };
    let cap = cap_of(&init.cap);
    let inner = p
        .inner
        .create_qp_with(
            &send_cq.inner,
            &recv_cq.inner,
            qp_type,
            cap,
            srq,
            init.sq_sig_all != 0,
        )
        .map_err(|e| errno_of(&e))?;
    let inline = if cap.max_inline_data > 0 {
        let len = cap.max_inline_data.min(MAX_INLINE) as usize;
        let mr = p
            .inner
            .reg_mr(len, Access::empty())
            .map_err(|e| errno_of(&e))?;
        Some(Mutex::new(mr))
    } else {
        None
    };
    // SAFETY: plain C data (pointers, ints, pthread objects, optional function pointers);
    // zero is valid for each.
    let mut ibv: ibv_qp_ex = unsafe { std::mem::zeroed() };
    let b = &mut ibv.qp_base;
    b.context = p.ibv.context;
    b.qp_context = init.qp_context;
    b.pd = pd;
    b.send_cq = init.send_cq;
    b.recv_cq = init.recv_cq;
    b.srq = init.srq;
    b.qp_num = inner.qpn();
    b.state = IBV_QPS_RESET;
    b.qp_type = init.qp_type;
    let extended = table.is_some();
    if let Some(fill) = table {
        fill(&mut ibv);
    }
    let qpn = inner.qpn();
    let qp = Qp {
        ibv,
        inner: std::sync::Arc::new(inner),
        init: *init,
        inline,
        extended,
        builder: Mutex::new(Builder::default()),
    };
    let p_qp = handles::insert(Box::new(qp), Kind::Qp).cast::<ibv_qp>();
    if let Some(c) = ctx_of(p.ibv.context) {
        c.events.add_qp(qpn, p_qp);
    }
    Ok(p_qp)
}

#[export_name = "__ferroce_ibv_destroy_qp"]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    catch("ibv_destroy_qp", libc::EIO, || {
        match handles::remove(qp as *mut Qp, Kind::Qp) {
            Some(q) => {
                if let Some(c) = ctx_of(q.ibv.qp_base.context) {
                    c.events.remove_qp(q.inner.qpn());
                }
                drop(q);
                0
            }
            None => libc::EINVAL,
        }
    })
}

/// Applies the fields `mask` names from `a` over `cur`.
fn merge(cur: &mut QpAttr, a: &ibv_qp_attr, mask: QpAttrMask) -> Result<(), c_int> {
    let has = |m: QpAttrMask| mask.contains(m);
    if has(QpAttrMask::STATE) {
        cur.qp_state = state_of(a.qp_state).ok_or(libc::EINVAL)?;
    }
    if has(QpAttrMask::CUR_STATE) {
        cur.cur_qp_state = state_of(a.cur_qp_state).ok_or(libc::EINVAL)?;
    }
    if has(QpAttrMask::EN_SQD_ASYNC_NOTIFY) {
        cur.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    }
    if has(QpAttrMask::ACCESS_FLAGS) {
        cur.qp_access_flags = crate::mr::access_of(a.qp_access_flags)?;
    }
    if has(QpAttrMask::PKEY_INDEX) {
        cur.pkey_index = a.pkey_index;
    }
    if has(QpAttrMask::PORT) {
        cur.port_num = a.port_num;
    }
    if has(QpAttrMask::QKEY) {
        cur.qkey = a.qkey;
    }
    if has(QpAttrMask::AV) {
        cur.av = av_of(&a.ah_attr)?;
    }
    if has(QpAttrMask::PATH_MTU) {
        cur.path_mtu = mtu_of(a.path_mtu).ok_or(libc::EINVAL)?;
    }
    if has(QpAttrMask::TIMEOUT) {
        cur.timeout = a.timeout;
    }
    if has(QpAttrMask::RETRY_CNT) {
        cur.retry_cnt = a.retry_cnt;
    }
    if has(QpAttrMask::RNR_RETRY) {
        cur.rnr_retry = a.rnr_retry;
    }
    if has(QpAttrMask::RQ_PSN) {
        cur.rq_psn = a.rq_psn;
    }
    if has(QpAttrMask::MAX_QP_RD_ATOMIC) {
        cur.max_rd_atomic = a.max_rd_atomic;
    }
    if has(QpAttrMask::MIN_RNR_TIMER) {
        cur.min_rnr_timer = a.min_rnr_timer;
    }
    if has(QpAttrMask::SQ_PSN) {
        cur.sq_psn = a.sq_psn;
    }
    if has(QpAttrMask::MAX_DEST_RD_ATOMIC) {
        cur.max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
    if has(QpAttrMask::DEST_QPN) {
        cur.dest_qp_num = a.dest_qp_num;
    }
    if has(QpAttrMask::CAP) {
        cur.cap = cap_of(&a.cap);
    }
    Ok(())
}

#[export_name = "__ferroce_ibv_modify_qp"]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    catch("ibv_modify_qp", libc::EIO, || {
        let Some(q) = qp_of(qp) else {
            return libc::EINVAL;
        };
        if attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: checked non-NULL; the caller passes a whole ibv_qp_attr.
        let a = unsafe { &*attr };
        // Bits past the ones RC/UC/UD define (rate limit, ...) are refused.
        let mask = QpAttrMask(attr_mask as u32);
        if attr_mask as u32 & !((1 << 21) - 1) != 0 {
            return libc::EINVAL;
        }
        let mut cur = match q.inner.query() {
            Ok(c) => c,
            Err(e) => return errno_of(&e),
        };
        if let Err(e) = merge(&mut cur, a, mask) {
            return e;
        }
        match q.inner.modify(&cur, mask) {
            Ok(()) => {
                if let Ok(s) = q.inner.state() {
                    // SAFETY: live QP; C reads `state`.
                    unsafe { (*qp).state = ibv_state(s) };
                }
                0
            }
            Err(e) => {
                tracing::debug!(qpn = q.inner.qpn(), error = %e, "ibv_modify_qp refused");
                // SAFETY: live QP; its context pointer is checked by ctx_of.
                let c = ctx_of(unsafe { (*qp).context });
                match &e {
                    Error::Transport(TransportError::InvalidAttr("path_mtu")) => {
                        hint::path_mtu(cur.path_mtu, c)
                    }
                    Error::Transport(TransportError::InvalidAttr(GID_FAMILIES)) => {
                        hint::gid_families(&cur.av, c)
                    }
                    Error::Resolve(r) => hint::unreachable(cur.av.dest_gid, r),
                    _ => {}
                }
                errno_of(&e)
            }
        }
    })
}

#[export_name = "__ferroce_ibv_query_qp"]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    catch("ibv_query_qp", libc::EIO, || {
        let Some(q) = qp_of(qp) else {
            return libc::EINVAL;
        };
        if attr.is_null() || init_attr.is_null() {
            return libc::EINVAL;
        }
        let cur = match q.inner.query() {
            Ok(c) => c,
            Err(e) => return errno_of(&e),
        };
        // SAFETY: plain C data; zero is valid for every field.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_state(cur.qp_state);
        a.cur_qp_state = ibv_state(cur.qp_state);
        a.path_mtu = cur.path_mtu as u32;
        a.path_mig_state = IBV_MIG_MIGRATED;
        a.qkey = cur.qkey;
        a.rq_psn = cur.rq_psn;
        a.sq_psn = cur.sq_psn;
        a.dest_qp_num = cur.dest_qp_num;
        a.qp_access_flags = cur.qp_access_flags.0;
        a.cap = q.init.cap;
        a.ah_attr = ah_attr_of(&cur.av);
        a.pkey_index = cur.pkey_index;
        a.en_sqd_async_notify = cur.en_sqd_async_notify as u8;
        a.max_rd_atomic = cur.max_rd_atomic;
        a.max_dest_rd_atomic = cur.max_dest_rd_atomic;
        a.min_rnr_timer = cur.min_rnr_timer;
        a.port_num = 1;
        a.timeout = cur.timeout;
        a.retry_cnt = cur.retry_cnt;
        a.rnr_retry = cur.rnr_retry;
        // SAFETY: checked non-NULL out-pointers to whole structs.
        unsafe {
            attr.write(a);
            init_attr.write(q.init);
        }
        0
    })
}

/// The inline buffer of `q`, locked.
pub(crate) fn inline_buf(q: &Qp) -> Option<std::sync::MutexGuard<'_, MemoryRegion>> {
    q.inline
        .as_ref()
        .map(|m| m.lock().unwrap_or_else(PoisonError::into_inner))
}
