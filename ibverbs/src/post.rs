//! The posting verbs (`ops.post_send`, `ops.post_recv`, `ops.post_srq_recv`): each C work
//! request list is converted and posted in order; the first one refused is returned in
//! `bad_wr` with its errno, and nothing after it is posted.

use std::ffi::c_int;

use ferroce_transport::{RecvWr, SendFlags, SendWr, Sge, UdDest, WrOpcode, MAX_SGE};

use crate::ah::ah_of;
use crate::ffi::*;
use crate::guard::{catch, errno_of};
use crate::qp::{inline_buf, qp_of, Qp};
use crate::srq::srq_of;

/// The scatter/gather list of a C work request.
///
/// # Safety
/// `sg_list` points at `num_sge` elements when `num_sge > 0` (the caller's contract).
unsafe fn sges(sg_list: *const ibv_sge, num_sge: c_int) -> Result<Vec<Sge>, c_int> {
    if num_sge < 0 || num_sge as u32 > MAX_SGE || (num_sge > 0 && sg_list.is_null()) {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's contract; checked non-NULL and bounded above.
    let list = unsafe { std::slice::from_raw_parts(sg_list, num_sge as usize) };
    Ok(list
        .iter()
        .map(|s| Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
        .collect())
}

fn opcode_of(op: ibv_wr_opcode) -> Result<WrOpcode, c_int> {
    Ok(match op {
        IBV_WR_SEND => WrOpcode::Send,
        IBV_WR_SEND_WITH_IMM => WrOpcode::SendWithImm,
        IBV_WR_SEND_WITH_INV => WrOpcode::SendWithInv,
        IBV_WR_RDMA_WRITE => WrOpcode::RdmaWrite,
        IBV_WR_RDMA_WRITE_WITH_IMM => WrOpcode::RdmaWriteWithImm,
        IBV_WR_RDMA_READ => WrOpcode::RdmaRead,
        IBV_WR_ATOMIC_CMP_AND_SWP => WrOpcode::AtomicCmpSwp,
        IBV_WR_ATOMIC_FETCH_AND_ADD => WrOpcode::AtomicFetchAdd,
        IBV_WR_BIND_MW => WrOpcode::BindMw,
        IBV_WR_LOCAL_INV => WrOpcode::LocalInv,
        _ => return Err(libc::EINVAL),
    })
}

/// Inline data: the bytes the SGEs name, read now from the program's memory (which need
/// not be registered) into the QP's inline buffer, posted as one SGE over it.
///
/// # Safety
/// Each SGE names `length` readable bytes at `addr` (ibv_post_send's contract for inline
/// sends).
unsafe fn gather_inline(q: &Qp, list: &[Sge]) -> Result<Vec<Sge>, c_int> {
    let total: u64 = list.iter().map(|s| s.length as u64).sum();
    let Some(buf) = inline_buf(q) else {
        return Err(libc::EINVAL);
    };
    if total > buf.len() as u64 {
        return Err(libc::EINVAL);
    }
    let mut off = 0;
    for s in list {
        if s.length == 0 {
            continue;
        }
        // SAFETY: the caller's contract for inline sends (see above).
        let bytes =
            unsafe { std::slice::from_raw_parts(s.addr as usize as *const u8, s.length as usize) };
        buf.write(off, bytes).map_err(|_| libc::EINVAL)?;
        off += bytes.len();
    }
    Ok(vec![buf.sge(0, total as usize)])
}

/// Converts one C send work request.
///
/// # Safety
/// `wr` is a valid work request (the caller's contract).
unsafe fn send_wr_of(q: &Qp, wr: &ibv_send_wr) -> Result<SendWr, c_int> {
    let opcode = opcode_of(wr.opcode)?;
    let flags = SendFlags(wr.send_flags & 0xf);
    // SAFETY: forwarded contract.
    let mut sg_list = unsafe { sges(wr.sg_list, wr.num_sge) }?;
    if flags.contains(SendFlags::INLINE)
        && matches!(
            opcode,
            WrOpcode::Send
                | WrOpcode::SendWithImm
                | WrOpcode::SendWithInv
                | WrOpcode::RdmaWrite
                | WrOpcode::RdmaWriteWithImm
        )
    {
        // SAFETY: forwarded contract.
        sg_list = unsafe { gather_inline(q, &sg_list) }?;
    }
    // SAFETY: union fields are plain integers; which one is meant depends on the opcode.
    let (imm, inv) = unsafe {
        (
            wr.__bindgen_anon_1.imm_data,
            wr.__bindgen_anon_1.invalidate_rkey,
        )
    };
    let mut out = SendWr {
        wr_id: wr.wr_id,
        opcode,
        sg_list,
        flags,
        imm_data: u32::from_be(imm),
        invalidate_rkey: inv,
        remote_addr: 0,
        rkey: 0,
        compare_add: 0,
        swap: 0,
        ud: None,
        bind_mw: None,
    };
    if opcode == WrOpcode::BindMw {
        // SAFETY: the `bind_mw` member is the one a BIND_MW work request fills.
        let b = unsafe { wr.__bindgen_anon_2.bind_mw };
        out.bind_mw = Some(crate::mw::bind_of(b.mw, b.rkey, &b.bind_info)?);
        return Ok(out);
    }
    if q.inner.qp_type() == ferroce_transport::QpType::Ud {
        // SAFETY: the `ud` member is the one a UD work request fills.
        let ud = unsafe { wr.wr.ud };
        let ah = ah_of(ud.ah).ok_or(libc::EINVAL)?;
        out.ud = Some(UdDest {
            av: ah.av,
            dest_qpn: ud.remote_qpn,
            qkey: ud.remote_qkey,
        });
        return Ok(out);
    }
    match opcode {
        WrOpcode::AtomicCmpSwp | WrOpcode::AtomicFetchAdd => {
            // SAFETY: the `atomic` member is the one atomics fill.
            let a = unsafe { wr.wr.atomic };
            out.remote_addr = a.remote_addr;
            out.rkey = a.rkey;
            out.compare_add = a.compare_add;
            out.swap = a.swap;
        }
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead => {
            // SAFETY: the `rdma` member is the one RDMA operations fill.
            let r = unsafe { wr.wr.rdma };
            out.remote_addr = r.remote_addr;
            out.rkey = r.rkey;
        }
        _ => {}
    }
    Ok(out)
}

/// `ops.post_send`.
pub(crate) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    catch("ibv_post_send", libc::EIO, || {
        let fail = |at: *mut ibv_send_wr, e: c_int| {
            if !bad_wr.is_null() {
                // SAFETY: checked non-NULL out-pointer.
                unsafe { bad_wr.write(at) };
            }
            e
        };
        let Some(q) = qp_of(qp) else {
            return fail(wr, libc::EINVAL);
        };
        let mut cur = wr;
        while !cur.is_null() {
            // SAFETY: a non-NULL element of the caller's list.
            let w = unsafe { &*cur };
            // SAFETY: the caller's contract for the work request's buffers.
            let converted = unsafe { send_wr_of(q, w) };
            let posted = match converted {
                Ok(s) => q.inner.post_send(&s).map_err(|e| errno_of(&e)),
                Err(e) => Err(e),
            };
            if let Err(e) = posted {
                return fail(cur, e);
            }
            cur = w.next;
        }
        0
    })
}

/// Walks a receive list, posting each with `post`.
unsafe fn post_recv_list(
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    mut post: impl FnMut(&RecvWr) -> Result<(), c_int>,
) -> c_int {
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: a non-NULL element of the caller's list.
        let w = unsafe { &*cur };
        // SAFETY: the caller's contract.
        let r = unsafe { sges(w.sg_list, w.num_sge) }.and_then(|sg_list| {
            post(&RecvWr {
                wr_id: w.wr_id,
                sg_list,
            })
        });
        if let Err(e) = r {
            if !bad_wr.is_null() {
                // SAFETY: checked non-NULL out-pointer.
                unsafe { bad_wr.write(cur) };
            }
            return e;
        }
        cur = w.next;
    }
    0
}

/// `ops.post_recv`.
pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    catch("ibv_post_recv", libc::EIO, || {
        let Some(q) = qp_of(qp) else {
            if !bad_wr.is_null() {
                // SAFETY: checked non-NULL out-pointer.
                unsafe { bad_wr.write(wr) };
            }
            return libc::EINVAL;
        };
        // SAFETY: the caller's contract.
        unsafe {
            post_recv_list(wr, bad_wr, |r| {
                q.inner.post_recv(r).map_err(|e| errno_of(&e))
            })
        }
    })
}

/// `ops.post_srq_recv`.
pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    catch("ibv_post_srq_recv", libc::EIO, || {
        let Some(s) = srq_of(srq) else {
            if !bad_wr.is_null() {
                // SAFETY: checked non-NULL out-pointer.
                unsafe { bad_wr.write(wr) };
            }
            return libc::EINVAL;
        };
        // SAFETY: the caller's contract.
        unsafe {
            post_recv_list(wr, bad_wr, |r| {
                s.inner.post_recv(r).map_err(|e| errno_of(&e))
            })
        }
    })
}
