//! One rsocket connection's verbs resources, made through this library's own verbs as a
//! C program would: a completion channel and CQ, an RC QP on the rdma_cm ID, and three
//! registered buffers (send ring with its control area, receive ring, target list). The
//! buffers are this library's allocations, registered in place; the peer writes into the
//! receive ring and the target list, so they are only ever touched through raw pointers
//! (volatile for the target list, which the peer rewrites while we read it).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ffi::c_int;
use std::ptr::{null_mut, read_volatile, write_volatile};

use super::flow::{Sizes, CTRL_SLOTS, SGL_ENTRIES};
use super::proto::{Sge, SGE_LEN};
use crate::cq::{ibv_create_comp_channel, ibv_create_cq, ibv_destroy_comp_channel, ibv_destroy_cq};
use crate::ffi::cma_h::rdma_cm_id;
use crate::ffi::*;
use crate::mr::{ibv_dereg_mr, ibv_reg_mr};
use crate::rdmacm::{rdma_create_qp, rdma_destroy_qp};

/// Marks a receive's work request id (sends carry their message instead).
pub(crate) const RECV_WR: u64 = 1 << 63;

/// Memory this library owns, zeroed, 64-byte aligned, freed on drop.
pub(crate) struct RawBuf {
    ptr: *mut u8,
    len: usize,
}

impl RawBuf {
    fn new(len: usize) -> Result<RawBuf, c_int> {
        let layout = Layout::from_size_align(len.max(1), 64).map_err(|_| libc::ENOMEM)?;
        // SAFETY: a layout of non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(libc::ENOMEM);
        }
        Ok(RawBuf { ptr, len })
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub(crate) fn addr(&self) -> u64 {
        self.ptr as u64
    }
}

impl Drop for RawBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len.max(1), 64).expect("made in new");
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { dealloc(self.ptr, layout) };
    }
}

/// The resources of a connected rsocket.
pub(crate) struct Ep {
    pub comp: *mut ibv_comp_channel,
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    /// The ID whose QP this is (rdma_destroy_qp takes the ID).
    id: *mut rdma_cm_id,
    pub sbuf: RawBuf,
    pub rbuf: RawBuf,
    pub tgt: RawBuf,
    pub smr: *mut ibv_mr,
    pub rmr: *mut ibv_mr,
    pub tmr: *mut ibv_mr,
    /// Inline bytes the QP took.
    pub inline: u32,
    pub sizes: Sizes,
}

// SAFETY: the raw pointers are verbs objects of this library, whose calls are
// thread-safe; the Ep lives inside its socket's mutex, so one thread uses it at a time.
unsafe impl Send for Ep {}

impl Ep {
    /// Makes the resources on `id` (address and route resolved, or a connect request's
    /// ID) and posts every receive.
    pub(crate) fn new(id: *mut rdma_cm_id, sizes: Sizes, inline: u32) -> Result<Ep, c_int> {
        let mut ep = Ep {
            comp: null_mut(),
            cq: null_mut(),
            qp: null_mut(),
            id,
            sbuf: RawBuf::new(sizes.sbuf as usize + SGE_LEN * CTRL_SLOTS as usize)?,
            rbuf: RawBuf::new(sizes.rbuf as usize)?,
            tgt: RawBuf::new(SGE_LEN * SGL_ENTRIES)?,
            smr: null_mut(),
            rmr: null_mut(),
            tmr: null_mut(),
            inline,
            sizes,
        };
        // On failure, Drop takes back whatever was made.
        ep.make(id)?;
        Ok(ep)
    }

    fn make(&mut self, id: *mut rdma_cm_id) -> Result<(), c_int> {
        let err = crate::rdmacm::last_errno;
        // SAFETY: `id` is a live ID of this library with a device (checked by the caller's
        // resolve or request); every pointer passed is checked or just made.
        unsafe {
            let verbs = (*id).verbs;
            if verbs.is_null() {
                return Err(libc::ENODEV);
            }
            self.comp = ibv_create_comp_channel(verbs);
            if self.comp.is_null() {
                return Err(err());
            }
            set_nonblocking((*self.comp).fd)?;
            let cqe = c_int::from(self.sizes.sq) + c_int::from(self.sizes.rq);
            self.cq = ibv_create_cq(verbs, cqe, null_mut(), self.comp, 0);
            if self.cq.is_null() {
                return Err(err());
            }
            let mut attr = ibv_qp_init_attr {
                qp_context: null_mut(),
                send_cq: self.cq,
                recv_cq: self.cq,
                srq: null_mut(),
                cap: ibv_qp_cap {
                    max_send_wr: u32::from(self.sizes.sq),
                    max_recv_wr: u32::from(self.sizes.rq),
                    max_send_sge: 2,
                    max_recv_sge: 1,
                    max_inline_data: self.inline,
                },
                qp_type: IBV_QPT_RC,
                sq_sig_all: 1,
            };
            if rdma_create_qp(id, null_mut(), &mut attr) != 0 {
                return Err(err());
            }
            self.qp = (*id).qp;
            self.inline = attr.cap.max_inline_data;
            let pd = (*id).pd;
            let local = IBV_ACCESS_LOCAL_WRITE as c_int;
            let remote = (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) as c_int;
            let sbuf_len = self.sizes.sbuf as usize + SGE_LEN * CTRL_SLOTS as usize;
            self.smr = ibv_reg_mr(pd, self.sbuf.ptr().cast(), sbuf_len, local);
            self.rmr = ibv_reg_mr(pd, self.rbuf.ptr().cast(), self.sizes.rbuf as usize, remote);
            self.tmr = ibv_reg_mr(pd, self.tgt.ptr().cast(), SGE_LEN * SGL_ENTRIES, remote);
            if self.smr.is_null() || self.rmr.is_null() || self.tmr.is_null() {
                return Err(err());
            }
        }
        for _ in 0..self.sizes.rq {
            self.post_recv()?;
        }
        Ok(())
    }

    /// Posts one receive (rsockets' receives carry no buffer: data comes by WRITE).
    pub(crate) fn post_recv(&self) -> Result<(), c_int> {
        let mut wr = ibv_recv_wr {
            wr_id: RECV_WR,
            next: null_mut(),
            sg_list: null_mut(),
            num_sge: 0,
        };
        let mut bad = null_mut();
        // SAFETY: a live QP of this library; `wr` lives across the call.
        let r = unsafe { crate::post::post_recv(self.qp, &mut wr, &mut bad) };
        if r == 0 {
            Ok(())
        } else {
            Err(r)
        }
    }

    /// Posts an RDMA WRITE with immediate `imm` of `sges` (none: a bare message) to
    /// `addr`/`rkey`; its completion carries `imm` back as the work request id.
    pub(crate) fn post_write_imm(
        &self,
        sges: &mut [ibv_sge],
        imm: u32,
        inline: bool,
        addr: u64,
        rkey: u32,
    ) -> Result<(), c_int> {
        // SAFETY: ibv_send_wr is plain C data; all-zero is a valid empty request.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = u64::from(imm);
        wr.sg_list = if sges.is_empty() {
            null_mut()
        } else {
            sges.as_mut_ptr()
        };
        wr.num_sge = sges.len() as c_int;
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.send_flags = if inline { IBV_SEND_INLINE } else { 0 };
        wr.__bindgen_anon_1.imm_data = imm.to_be();
        wr.wr.rdma = ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
            remote_addr: addr,
            rkey,
        };
        let mut bad = null_mut();
        // SAFETY: a live QP; `wr` and the SGEs it points to live across the call (inline
        // data is copied by the post).
        let r = unsafe { crate::post::post_send(self.qp, &mut wr, &mut bad) };
        if r == 0 {
            Ok(())
        } else {
            Err(r)
        }
    }

    /// The target list entry `i` (the peer may rewrite it at any time).
    pub(crate) fn target(&self, i: usize) -> Sge {
        let p = self.tgt.ptr().cast::<u64>().wrapping_add(i * 2);
        // SAFETY: `i` < SGL_ENTRIES (the flow's index), so both words lie in `tgt`, which
        // is 64-byte aligned; volatile, as the peer writes it through the QP.
        let (w0, w1) = unsafe { (read_volatile(p), read_volatile(p.add(1))) };
        let b1 = w1.to_ne_bytes();
        Sge {
            addr: w0,
            key: u32::from_ne_bytes(b1[0..4].try_into().expect("4 bytes")),
            length: u32::from_ne_bytes(b1[4..8].try_into().expect("4 bytes")),
        }
    }

    /// Writes target list entry `i`.
    pub(crate) fn set_target(&self, i: usize, s: Sge) {
        let p = self.tgt.ptr().cast::<u64>().wrapping_add(i * 2);
        let mut b1 = [0u8; 8];
        b1[0..4].copy_from_slice(&s.key.to_ne_bytes());
        b1[4..8].copy_from_slice(&s.length.to_ne_bytes());
        // SAFETY: as in `target`.
        unsafe {
            write_volatile(p, s.addr);
            write_volatile(p.add(1), u64::from_ne_bytes(b1));
        }
    }

    /// Copies `src` into the send ring at `off`.
    pub(crate) fn fill_sbuf(&self, off: u32, src: &[u8]) {
        let end = off as usize + src.len();
        assert!(end <= self.sizes.sbuf as usize + SGE_LEN * CTRL_SLOTS as usize);
        // SAFETY: in bounds (checked above); the send ring is this library's own memory,
        // read by the QP only for sends already completed or not yet posted here.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.sbuf.ptr().add(off as usize),
                src.len(),
            )
        };
    }

    /// Copies `len` bytes of the receive ring at `off` to `dst`.
    pub(crate) fn read_rbuf(&self, off: u32, dst: *mut u8, len: u32) {
        assert!(off as usize + len as usize <= self.sizes.rbuf as usize);
        // SAFETY: in bounds (checked above); `dst` is the caller's buffer of at least
        // `len` bytes (rrecv's contract).
        unsafe {
            std::ptr::copy_nonoverlapping(self.rbuf.ptr().add(off as usize), dst, len as usize)
        };
    }

    /// Address of the send ring's control slot `slot`.
    pub(crate) fn ctrl_slot(&self, slot: u32) -> u32 {
        self.sizes.sbuf + slot * SGE_LEN as u32
    }

    pub(crate) fn lkey(mr: *mut ibv_mr) -> u32 {
        // SAFETY: a live MR of this Ep.
        unsafe { (*mr).lkey }
    }

    pub(crate) fn rkey(mr: *mut ibv_mr) -> u32 {
        // SAFETY: a live MR of this Ep.
        unsafe { (*mr).rkey }
    }
}

impl Drop for Ep {
    fn drop(&mut self) {
        // The QP goes first, so that nothing more lands in the buffers; then the CQ, its
        // channel, and the registrations. The buffers are freed after this.
        // SAFETY: each handle was made in `make` and is destroyed once.
        unsafe {
            if !self.qp.is_null() {
                rdma_destroy_qp(self.id);
            }
            if !self.cq.is_null() {
                ibv_destroy_cq(self.cq);
            }
            if !self.comp.is_null() {
                ibv_destroy_comp_channel(self.comp);
            }
            for mr in [self.smr, self.rmr, self.tmr] {
                if !mr.is_null() {
                    ibv_dereg_mr(mr);
                }
            }
        }
    }
}

/// Makes `fd` non-blocking.
pub(crate) fn set_nonblocking(fd: c_int) -> Result<(), c_int> {
    // SAFETY: fcntl on a descriptor this library made.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl < 0 || libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
            return Err(crate::rdmacm::last_errno());
        }
    }
    Ok(())
}
