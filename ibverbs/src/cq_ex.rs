//! Extended CQs (`ibv_create_cq_ex`): completions read one field at a time through the
//! `ibv_cq_ex` function table (`ibv_start_poll`, `ibv_next_poll`, `ibv_wc_read_*`).

use std::ffi::{c_int, c_uint};
use std::sync::PoisonError;

use ferroce::verbs::WorkCompletion;

use crate::cq::{cq_of, create, to_ibv_wc, Cq};
use crate::ffi::*;
use crate::guard::{catch, null_with};

/// The fields an extended CQ can report (what `wc_flags` may ask for).
const SUPPORTED: u64 = (IBV_WC_EX_WITH_BYTE_LEN
    | IBV_WC_EX_WITH_IMM
    | IBV_WC_EX_WITH_QP_NUM
    | IBV_WC_EX_WITH_SRC_QP
    | IBV_WC_EX_WITH_SLID
    | IBV_WC_EX_WITH_SL
    | IBV_WC_EX_WITH_DLID_PATH_BITS) as u64;

/// Fills the function table of a new CQ.
fn install(ibv: &mut ibv_cq_ex) {
    ibv.start_poll = Some(start_poll);
    ibv.next_poll = Some(next_poll);
    ibv.end_poll = Some(end_poll);
    ibv.read_opcode = Some(read_opcode);
    ibv.read_vendor_err = Some(read_vendor_err);
    ibv.read_byte_len = Some(read_byte_len);
    ibv.read_imm_data = Some(read_imm_data);
    ibv.read_qp_num = Some(read_qp_num);
    ibv.read_src_qp = Some(read_src_qp);
    ibv.read_wc_flags = Some(read_wc_flags);
    ibv.read_slid = Some(read_slid);
    ibv.read_sl = Some(read_sl);
    ibv.read_dlid_path_bits = Some(read_dlid_path_bits);
}

/// `verbs_context.create_cq_ex`.
pub(crate) unsafe extern "C" fn create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    catch("ibv_create_cq_ex", std::ptr::null_mut(), || {
        if attr.is_null() {
            return null_with(libc::EINVAL);
        }
        // SAFETY: checked non-NULL; the caller passes a whole ibv_cq_init_attr_ex.
        let a = unsafe { &*attr };
        if a.wc_flags & !SUPPORTED != 0 {
            return null_with(libc::EOPNOTSUPP); // timestamps, VLAN, flow tags, TM
        }
        if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS) != 0 {
            return null_with(libc::EOPNOTSUPP); // parent domains
        }
        let flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
        if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 && a.flags & !flags != 0 {
            return null_with(libc::EOPNOTSUPP);
        }
        match create(
            context,
            a.cqe,
            a.cq_context,
            a.channel,
            a.comp_vector,
            Some(install),
        ) {
            Ok(p) => p.cast(),
            Err(e) => null_with(e),
        }
    })
}

fn cq(current: *mut ibv_cq_ex) -> Option<&'static Cq> {
    cq_of(current as *const ibv_cq)
}

/// Takes the next completion into `current`; ENOENT when there is none.
unsafe fn advance(current: *mut ibv_cq_ex) -> c_int {
    let Some(q) = cq(current) else {
        return libc::EINVAL;
    };
    let mut one = Vec::with_capacity(1);
    if q.inner.poll(&mut one, 1) == 0 {
        return libc::ENOENT;
    }
    let wc = one[0];
    // SAFETY: live CQ; C reads `status` and `wr_id` directly.
    unsafe {
        (*current).status = wc.status as u32;
        (*current).wr_id = wc.wr_id;
    }
    *q.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(wc);
    0
}

unsafe extern "C" fn start_poll(current: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    catch("ibv_start_poll", libc::EIO, || {
        // SAFETY: `attr` is checked before use; comp_mask must be 0.
        if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
            return libc::EINVAL;
        }
        // SAFETY: forwarded.
        unsafe { advance(current) }
    })
}

unsafe extern "C" fn next_poll(current: *mut ibv_cq_ex) -> c_int {
    // SAFETY: forwarded.
    catch("ibv_next_poll", libc::EIO, || unsafe { advance(current) })
}

unsafe extern "C" fn end_poll(current: *mut ibv_cq_ex) {
    if let Some(q) = cq(current) {
        *q.current.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// The current completion, as an `ibv_wc` (zero outside a poll).
fn wc(current: *mut ibv_cq_ex) -> ibv_wc {
    let cur: Option<WorkCompletion> =
        cq(current).and_then(|q| *q.current.lock().unwrap_or_else(PoisonError::into_inner));
    // SAFETY: plain C data; zero is valid.
    cur.map_or(unsafe { std::mem::zeroed() }, |w| to_ibv_wc(&w))
}

unsafe extern "C" fn read_opcode(current: *mut ibv_cq_ex) -> ibv_wc_opcode {
    wc(current).opcode
}
unsafe extern "C" fn read_vendor_err(current: *mut ibv_cq_ex) -> u32 {
    wc(current).vendor_err
}
unsafe extern "C" fn read_byte_len(current: *mut ibv_cq_ex) -> u32 {
    wc(current).byte_len
}
unsafe extern "C" fn read_imm_data(current: *mut ibv_cq_ex) -> __be32 {
    // SAFETY: the union's members are both plain u32s.
    unsafe { wc(current).__bindgen_anon_1.imm_data }
}
unsafe extern "C" fn read_qp_num(current: *mut ibv_cq_ex) -> u32 {
    wc(current).qp_num
}
unsafe extern "C" fn read_src_qp(current: *mut ibv_cq_ex) -> u32 {
    wc(current).src_qp
}
unsafe extern "C" fn read_wc_flags(current: *mut ibv_cq_ex) -> c_uint {
    wc(current).wc_flags
}
unsafe extern "C" fn read_slid(current: *mut ibv_cq_ex) -> u32 {
    wc(current).slid as u32
}
unsafe extern "C" fn read_sl(current: *mut ibv_cq_ex) -> u8 {
    wc(current).sl
}
unsafe extern "C" fn read_dlid_path_bits(current: *mut ibv_cq_ex) -> u8 {
    wc(current).dlid_path_bits
}
