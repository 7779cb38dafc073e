//! Memory windows (`ibv_alloc_mw`, `ibv_bind_mw`, `ibv_dealloc_mw`, and the BIND_MW /
//! LOCAL_INV work requests): type 1 and type 2B, as rxe has them.

use std::ffi::c_int;

use ferroce::verbs::{next_rkey, MemoryWindow};
use ferroce_transport::{Access, MwBind, MwType, SendFlags, SendWr};

use crate::ffi::*;
use crate::guard::{catch, errno_of, null_with};
use crate::handles::{self, Kind};
use crate::pd::pd_of;
use crate::qp::qp_of;

#[repr(C)]
pub(crate) struct Mw {
    pub ibv: ibv_mw,
    pub inner: MemoryWindow,
}

/// The window behind `p`, if live.
pub(crate) fn mw_of(p: *const ibv_mw) -> Option<&'static Mw> {
    // SAFETY: live (checked), freed only by ibv_dealloc_mw.
    handles::get(p as *const Mw, Kind::Mw).map(|p| unsafe { &*p })
}

/// `ops.alloc_mw`: type 1 or type 2; any other type is EINVAL (rxe's answer).
pub(crate) unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, type_: ibv_mw_type) -> *mut ibv_mw {
    catch("ibv_alloc_mw", std::ptr::null_mut(), || {
        let Some(p) = pd_of(pd) else {
            return null_with(libc::EINVAL);
        };
        let kind = match type_ {
            IBV_MW_TYPE_1 => MwType::Type1,
            IBV_MW_TYPE_2 => MwType::Type2,
            _ => return null_with(libc::EINVAL),
        };
        match p.inner.alloc_mw(kind) {
            Ok(inner) => {
                let ibv = ibv_mw {
                    context: p.ibv.context,
                    pd,
                    rkey: inner.rkey(),
                    handle: inner.id().0,
                    type_,
                };
                handles::insert(Box::new(Mw { ibv, inner }), Kind::Mw).cast()
            }
            Err(e) => null_with(errno_of(&e)),
        }
    })
}

/// `ops.dealloc_mw`: the window's key stops working at once, bound or not.
pub(crate) unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    catch("ibv_dealloc_mw", libc::EIO, || {
        match handles::remove(mw as *mut Mw, Kind::Mw) {
            Some(m) => {
                drop(m);
                0
            }
            None => libc::EINVAL,
        }
    })
}

/// A window's access flags: the remote rights (LOCAL_WRITE is accepted and means
/// nothing for a window); zero-based windows and anything else are EINVAL.
fn mw_access(flags: u32) -> Result<Access, c_int> {
    let known = IBV_ACCESS_LOCAL_WRITE
        | IBV_ACCESS_REMOTE_WRITE
        | IBV_ACCESS_REMOTE_READ
        | IBV_ACCESS_REMOTE_ATOMIC;
    if flags & !known != 0 {
        return Err(libc::EINVAL);
    }
    Ok(Access(flags))
}

/// The transport's bind for window `mw`, new key `rkey` and the C bind info.
pub(crate) fn bind_of(
    mw: *const ibv_mw,
    rkey: u32,
    info: &ibv_mw_bind_info,
) -> Result<MwBind, c_int> {
    let w = mw_of(mw).ok_or(libc::EINVAL)?;
    let mr_lkey = if info.length == 0 {
        0
    } else {
        crate::mr::mr_of(info.mr).ok_or(libc::EINVAL)?.ibv.lkey
    };
    Ok(MwBind {
        mw: w.inner.id(),
        rkey,
        mr_lkey,
        addr: info.addr,
        len: info.length,
        access: mw_access(info.mw_access_flags)?,
    })
}

/// `ops.bind_mw` (`ibv_bind_mw`, type 1): posts a BIND_MW work request on `qp` with the
/// window's next key, which the window shows from now on (as rxe's provider does; after
/// an error completion the caller undoes it).
pub(crate) unsafe extern "C" fn bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    mw_bind: *mut ibv_mw_bind,
) -> c_int {
    catch("ibv_bind_mw", libc::EIO, || {
        let (Some(q), Some(w)) = (qp_of(qp), mw_of(mw)) else {
            return libc::EINVAL;
        };
        if mw_bind.is_null() || w.ibv.type_ != IBV_MW_TYPE_1 {
            return libc::EINVAL;
        }
        let current = w.ibv.rkey;
        // SAFETY: checked non-NULL; the caller passes a whole ibv_mw_bind.
        let b = unsafe { &*mw_bind };
        let rkey = next_rkey(current);
        let bind = match bind_of(mw, rkey, &b.bind_info) {
            Ok(x) => x,
            Err(e) => return e,
        };
        let wr = SendWr {
            flags: SendFlags(b.send_flags & 0xf),
            ..SendWr::bind_mw(b.wr_id, bind)
        };
        match q.inner.post_send(&wr) {
            Ok(()) => {
                // SAFETY: `mw` is live (checked above; only ibv_dealloc_mw frees it) and
                // no reference into it is held here; the program reads `rkey` after
                // this call returns, per the verbs contract.
                unsafe { std::ptr::addr_of_mut!((*mw).rkey).write(rkey) };
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}
