//! Extended QPs (`ibv_create_qp_ex`) and the work-request builder API (`ibv_wr_start`,
//! `ibv_wr_send`, `ibv_wr_set_sge`, ..., `ibv_wr_complete`) of their `ibv_qp_ex`.

use std::ffi::{c_int, c_void};
use std::sync::{MutexGuard, PoisonError};

use ferroce_transport::{SendFlags, SendWr, Sge, UdDest, WrOpcode, MAX_SGE};

use crate::ah::ah_of;
use crate::ffi::*;
use crate::guard::{catch, errno_of, null_with};
use crate::qp::{create, inline_buf, qp_of, Builder, Qp};

/// The builder operations ferroce implements (`send_ops_flags`).
const SUPPORTED_OPS: u64 = (IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_SEND_WITH_INV
    | IBV_QP_EX_WITH_BIND_MW
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_ATOMIC_WRITE) as u64;

/// `verbs_context.create_qp_ex`: a QP from `ibv_qp_init_attr_ex` (a PD is required;
/// XRC, RSS, TSO and creation flags are refused).
pub(crate) unsafe extern "C" fn create_qp_ex(
    _context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    catch("ibv_create_qp_ex", std::ptr::null_mut(), || {
        if attr.is_null() {
            return null_with(libc::EINVAL);
        }
        // SAFETY: checked non-NULL; the caller passes a whole ibv_qp_init_attr_ex.
        let a = unsafe { &mut *attr };
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
            return null_with(libc::EINVAL);
        }
        // What ferroce lacks is refused; fields that ask for nothing are fine.
        let asks = |bit: u32, used: bool| a.comp_mask & bit != 0 && used;
        if asks(IBV_QP_INIT_ATTR_XRCD, true)
            || asks(IBV_QP_INIT_ATTR_IND_TABLE, true)
            || asks(IBV_QP_INIT_ATTR_RX_HASH, true)
            || asks(IBV_QP_INIT_ATTR_CREATE_FLAGS, a.create_flags != 0)
            || asks(IBV_QP_INIT_ATTR_MAX_TSO_HEADER, a.max_tso_header != 0)
            || a.comp_mask >= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS << 1
        {
            return null_with(libc::EOPNOTSUPP);
        }
        let with_ops = a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0;
        if with_ops && a.send_ops_flags & !SUPPORTED_OPS != 0 {
            return null_with(libc::EOPNOTSUPP);
        }
        let mut init = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        let table: Option<fn(&mut ibv_qp_ex)> = if with_ops { Some(install) } else { None };
        match create(a.pd, &mut init, table) {
            Ok(qp) => {
                a.cap = init.cap;
                qp
            }
            Err(e) => null_with(e),
        }
    })
}

#[export_name = "__ferroce_ibv_qp_to_qp_ex"]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    match qp_of(qp) {
        Some(q) if q.extended => qp.cast(),
        _ => std::ptr::null_mut(),
    }
}

fn install(t: &mut ibv_qp_ex) {
    t.wr_start = Some(wr_start);
    t.wr_complete = Some(wr_complete);
    t.wr_abort = Some(wr_abort);
    t.wr_send = Some(wr_send);
    t.wr_send_imm = Some(wr_send_imm);
    t.wr_send_inv = Some(wr_send_inv);
    t.wr_bind_mw = Some(wr_bind_mw);
    t.wr_local_inv = Some(wr_local_inv);
    t.wr_rdma_write = Some(wr_rdma_write);
    t.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    t.wr_rdma_read = Some(wr_rdma_read);
    t.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    t.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    t.wr_atomic_write = Some(wr_atomic_write);
    t.wr_set_ud_addr = Some(wr_set_ud_addr);
    t.wr_set_sge = Some(wr_set_sge);
    t.wr_set_sge_list = Some(wr_set_sge_list);
    t.wr_set_inline_data = Some(wr_set_inline_data);
    t.wr_set_inline_data_list = Some(wr_set_inline_data_list);
}

/// The QP and its builder, if `qp` is a live extended QP.
fn builder(qp: *mut ibv_qp_ex) -> Option<(&'static Qp, MutexGuard<'static, Builder>)> {
    let q = qp_of(qp as *const ibv_qp)?;
    Some((q, q.builder.lock().unwrap_or_else(PoisonError::into_inner)))
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    if let Some((_, mut b)) = builder(qp) {
        *b = Builder::default();
    }
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    // SAFETY: forwarded.
    unsafe { wr_start(qp) }
}

/// Posts the batch in order; the first refusal ends it with its errno.
unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    catch("ibv_wr_complete", libc::EIO, || {
        let Some((q, mut b)) = builder(qp) else {
            return libc::EINVAL;
        };
        let batch = std::mem::take(&mut *b);
        drop(b);
        if let Some(e) = batch.error {
            return e;
        }
        for (mut wr, inline) in batch.wrs {
            if let Some(bytes) = inline {
                let Some(buf) = inline_buf(q) else {
                    return libc::EINVAL;
                };
                if bytes.len() > buf.len() || buf.write(0, &bytes).is_err() {
                    return libc::EINVAL;
                }
                wr.sg_list = vec![buf.sge(0, bytes.len())];
                wr.flags |= SendFlags::INLINE;
                if let Err(e) = q.inner.post_send(&wr) {
                    return errno_of(&e);
                }
                continue;
            }
            if let Err(e) = q.inner.post_send(&wr) {
                return errno_of(&e);
            }
        }
        0
    })
}

/// Starts a new work request of `opcode` with the QP's `wr_id` and `wr_flags`.
fn begin(qp: *mut ibv_qp_ex, opcode: WrOpcode, f: impl FnOnce(&mut SendWr)) {
    let Some((_, mut b)) = builder(qp) else {
        return;
    };
    // SAFETY: a live extended QP (checked by `builder`); C sets these two fields.
    let (wr_id, flags) = unsafe { ((*qp).wr_id, (*qp).wr_flags) };
    let mut wr = SendWr {
        wr_id,
        opcode,
        sg_list: Vec::new(),
        flags: SendFlags(flags & 0xf),
        imm_data: 0,
        invalidate_rkey: 0,
        remote_addr: 0,
        rkey: 0,
        compare_add: 0,
        swap: 0,
        ud: None,
        bind_mw: None,
    };
    f(&mut wr);
    b.wrs.push((wr, None));
}

/// Changes the work request being built.
fn last(
    qp: *mut ibv_qp_ex,
    f: impl FnOnce(&mut SendWr, &mut Option<Vec<u8>>) -> Result<(), c_int>,
) {
    let Some((_, mut b)) = builder(qp) else {
        return;
    };
    let b = &mut *b;
    let r = match b.wrs.last_mut() {
        Some((wr, inline)) => f(wr, inline),
        None => Err(libc::EINVAL),
    };
    if let Err(e) = r {
        b.error.get_or_insert(e);
    }
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    begin(qp, WrOpcode::Send, |_| {});
}
unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm: __be32) {
    begin(qp, WrOpcode::SendWithImm, |w| {
        w.imm_data = u32::from_be(imm)
    });
}
unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    begin(qp, WrOpcode::SendWithInv, |w| w.invalidate_rkey = rkey);
}
unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    bind_info: *const ibv_mw_bind_info,
) {
    // SAFETY: NULL or the caller's whole ibv_mw_bind_info.
    let info = unsafe { bind_info.as_ref() };
    let bind = info
        .ok_or(libc::EINVAL)
        .and_then(|i| crate::mw::bind_of(mw, rkey, i));
    begin(qp, WrOpcode::BindMw, |w| w.bind_mw = bind.ok());
    if let Err(e) = bind {
        last(qp, |_, _| Err(e));
    }
}
unsafe extern "C" fn wr_local_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    begin(qp, WrOpcode::LocalInv, |w| w.invalidate_rkey = rkey);
}
unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    begin(qp, WrOpcode::RdmaWrite, |w| {
        (w.rkey, w.remote_addr) = (rkey, addr)
    });
}
unsafe extern "C" fn wr_rdma_write_imm(qp: *mut ibv_qp_ex, rkey: u32, addr: u64, imm: __be32) {
    begin(qp, WrOpcode::RdmaWriteWithImm, |w| {
        (w.rkey, w.remote_addr, w.imm_data) = (rkey, addr, u32::from_be(imm));
    });
}
unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    begin(qp, WrOpcode::RdmaRead, |w| {
        (w.rkey, w.remote_addr) = (rkey, addr)
    });
}
unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    compare: u64,
    swap: u64,
) {
    begin(qp, WrOpcode::AtomicCmpSwp, |w| {
        (w.rkey, w.remote_addr, w.compare_add, w.swap) = (rkey, addr, compare, swap);
    });
}
unsafe extern "C" fn wr_atomic_fetch_add(qp: *mut ibv_qp_ex, rkey: u32, addr: u64, add: u64) {
    begin(qp, WrOpcode::AtomicFetchAdd, |w| {
        (w.rkey, w.remote_addr, w.compare_add) = (rkey, addr, add);
    });
}

/// `ibv_wr_atomic_write`: the 8 bytes at `atomic_wr` are read now (the program may reuse
/// them once the call returns) and stored at once at the peer's `remote_addr`.
unsafe extern "C" fn wr_atomic_write(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    atomic_wr: *const c_void,
) {
    let value = (!atomic_wr.is_null()).then(|| {
        // SAFETY: the caller's contract: `atomic_wr` points at 8 readable bytes (any
        // alignment: read unaligned).
        unsafe { std::ptr::read_unaligned(atomic_wr.cast::<[u8; 8]>()) }
    });
    begin(qp, WrOpcode::AtomicWrite, |w| {
        (w.rkey, w.remote_addr) = (rkey, remote_addr);
        w.compare_add = u64::from_ne_bytes(value.unwrap_or_default());
    });
    if value.is_none() {
        last(qp, |_, _| Err(libc::EINVAL));
    }
}

unsafe extern "C" fn wr_set_ud_addr(
    qp: *mut ibv_qp_ex,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    last(qp, |w, _| {
        let a = ah_of(ah).ok_or(libc::EINVAL)?;
        w.ud = Some(UdDest {
            av: a.av,
            dest_qpn: remote_qpn,
            qkey: remote_qkey,
        });
        Ok(())
    });
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    last(qp, |w, _| {
        w.sg_list = vec![Sge { addr, length, lkey }];
        Ok(())
    });
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    last(qp, |w, _| {
        if num_sge > MAX_SGE as usize || (num_sge > 0 && sg_list.is_null()) {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's contract: `sg_list` holds `num_sge` elements (bounded).
        let list = unsafe { std::slice::from_raw_parts(sg_list, num_sge) };
        w.sg_list = list
            .iter()
            .map(|s| Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            })
            .collect();
        Ok(())
    });
}

/// Copies inline data now: the program may reuse its buffer as soon as the call returns.
///
/// # Safety
/// Each buffer holds `length` readable bytes at `addr` (the caller's contract).
unsafe fn inline_from(bufs: &[(*const c_void, usize)]) -> Result<Vec<u8>, c_int> {
    let total: usize = bufs.iter().map(|b| b.1).sum();
    if total > ferroce_transport::MAX_INLINE as usize {
        return Err(libc::EINVAL);
    }
    let mut out = Vec::with_capacity(total);
    for &(addr, len) in bufs {
        if len == 0 {
            continue;
        }
        if addr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's contract (see above).
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), len) });
    }
    Ok(out)
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    last(qp, |_, inline| {
        // SAFETY: forwarded contract.
        *inline = Some(unsafe { inline_from(&[(addr, length)]) }?);
        Ok(())
    });
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    num_buf: usize,
    buf_list: *const ibv_data_buf,
) {
    last(qp, |_, inline| {
        if num_buf > MAX_SGE as usize || (num_buf > 0 && buf_list.is_null()) {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's contract: `buf_list` holds `num_buf` elements (bounded).
        let list = unsafe { std::slice::from_raw_parts(buf_list, num_buf) };
        let bufs: Vec<_> = list
            .iter()
            .map(|b| (b.addr as *const c_void, b.length))
            .collect();
        // SAFETY: forwarded contract.
        *inline = Some(unsafe { inline_from(&bufs) }?);
        Ok(())
    });
}
