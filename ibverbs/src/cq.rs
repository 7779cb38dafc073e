//! Completion queues and completion channels.

use std::cell::RefCell;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU32, Ordering};

use ferroce::verbs::{CompletionChannel, CompletionQueue, WorkCompletion};

use crate::context::{c_ptr, ctx_of};
use crate::ffi::*;
use crate::guard::{catch, errno_of, null_with, set_errno};
use crate::handles::{self, Kind};

#[repr(C)]
pub(crate) struct Cq {
    /// An `ibv_cq_ex`, which begins with the fields of an `ibv_cq`: every CQ can be polled
    /// both ways (`ibv_poll_cq`, and `ibv_start_poll` on one from `ibv_create_cq_ex`).
    pub ibv: ibv_cq_ex,
    pub inner: CompletionQueue,
    /// The channel it reports to, if any (its `refcnt` counts us).
    pub channel: *mut Channel,
    /// The completion `ibv_start_poll` / `ibv_next_poll` made current.
    pub current: std::sync::Mutex<Option<WorkCompletion>>,
}

#[repr(C)]
pub(crate) struct Channel {
    pub ibv: ibv_comp_channel,
    pub inner: CompletionChannel,
    /// CQs attached: the channel cannot be destroyed before them.
    pub cqs: AtomicU32,
}

/// The CQ behind `p`, if live.
pub(crate) fn cq_of(p: *const ibv_cq) -> Option<&'static Cq> {
    // SAFETY: live (checked), freed only by ibv_destroy_cq.
    handles::get(p as *const Cq, Kind::Cq).map(|p| unsafe { &*p })
}

fn channel_of(p: *const ibv_comp_channel) -> Option<&'static Channel> {
    // SAFETY: live (checked), freed only by ibv_destroy_comp_channel.
    handles::get(p as *const Channel, Kind::Channel).map(|p| unsafe { &*p })
}

#[export_name = "__ferroce_ibv_create_comp_channel"]
pub unsafe extern "C" fn ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    catch("ibv_create_comp_channel", std::ptr::null_mut(), || {
        let Some(c) = ctx_of(context) else {
            return null_with(libc::EINVAL);
        };
        match CompletionChannel::new() {
            Ok(inner) => {
                let ibv = ibv_comp_channel {
                    context: c_ptr(c),
                    fd: inner.fd(),
                    refcnt: 0,
                };
                let ch = Channel {
                    ibv,
                    inner,
                    cqs: AtomicU32::new(0),
                };
                handles::insert(Box::new(ch), Kind::Channel).cast()
            }
            Err(e) => null_with(errno_of(&e)),
        }
    })
}

#[export_name = "__ferroce_ibv_destroy_comp_channel"]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    catch("ibv_destroy_comp_channel", -1, || {
        let Some(ch) = channel_of(channel) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if ch.cqs.load(Ordering::SeqCst) > 0 {
            set_errno(libc::EBUSY);
            return -1;
        }
        drop(handles::remove(channel as *mut Channel, Kind::Channel));
        0
    })
}

#[export_name = "__ferroce_ibv_create_cq"]
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    catch("ibv_create_cq", std::ptr::null_mut(), || {
        if cqe <= 0 {
            return null_with(libc::EINVAL);
        }
        match create(
            context,
            cqe as u32,
            cq_context,
            channel,
            comp_vector as u32,
            None,
        ) {
            Ok(p) => p.cast(),
            Err(e) => null_with(e),
        }
    })
}

/// Creates a CQ of either kind: `cqe` entries, reporting to `channel` if not NULL;
/// `table` fills an extended CQ's function table.
pub(crate) fn create(
    context: *mut ibv_context,
    cqe: u32,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: u32,
    table: Option<fn(&mut ibv_cq_ex)>,
) -> Result<*mut Cq, c_int> {
    let c = ctx_of(context).ok_or(libc::EINVAL)?;
    // One completion vector (num_comp_vectors is 1).
    if cqe == 0 || cqe > c_int::MAX as u32 || comp_vector != 0 {
        return Err(libc::EINVAL);
    }
    let ch = if channel.is_null() {
        None
    } else {
        Some(channel_of(channel).ok_or(libc::EINVAL)?)
    };
    let inner = c.inner.create_cq(cqe as usize).map_err(|e| errno_of(&e))?;
    // SAFETY: plain C data (pointers, ints, pthread objects, optional function
    // pointers); zero is valid for each.
    let mut ibv: ibv_cq_ex = unsafe { std::mem::zeroed() };
    ibv.context = c_ptr(c);
    ibv.channel = channel;
    ibv.cq_context = cq_context;
    ibv.cqe = cqe as c_int;
    if let Some(fill) = table {
        fill(&mut ibv);
    }
    let cq = Cq {
        ibv,
        inner,
        channel: channel.cast(),
        current: std::sync::Mutex::new(None),
    };
    let id = cq.inner.id();
    let p = handles::insert(Box::new(cq), Kind::Cq);
    c.events.add_cq(id, p.cast());
    if let Some(ch) = ch {
        // SAFETY: just made live.
        let cq = unsafe { &*p };
        // The channel's events carry the CQ's C address.
        cq.inner.attach_channel(&ch.inner, p as u64);
        ch.cqs.fetch_add(1, Ordering::SeqCst);
    }
    Ok(p)
}

#[export_name = "__ferroce_ibv_destroy_cq"]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    catch("ibv_destroy_cq", libc::EIO, || {
        let Some(q) = cq_of(cq) else {
            return libc::EINVAL;
        };
        if q.inner.in_use() {
            return libc::EBUSY;
        }
        let channel = q.channel;
        if let Some(c) = ctx_of(q.ibv.context) {
            c.events.remove_cq(q.inner.id());
        }
        drop(handles::remove(cq as *mut Cq, Kind::Cq));
        if let Some(ch) = channel_of(channel.cast()) {
            ch.cqs.fetch_sub(1, Ordering::SeqCst);
        }
        0
    })
}

#[export_name = "__ferroce_ibv_resize_cq"]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    catch("ibv_resize_cq", libc::EIO, || {
        let Some(q) = cq_of(cq) else {
            return libc::EINVAL;
        };
        if cqe <= 0 {
            return libc::EINVAL;
        }
        match q.inner.resize(cqe as usize) {
            Ok(()) => {
                // SAFETY: live CQ; C reads `cqe` to learn the new size.
                unsafe { (*(cq)).cqe = cqe };
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

#[export_name = "__ferroce_ibv_get_cq_event"]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    catch("ibv_get_cq_event", -1, || {
        let Some(ch) = channel_of(channel) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if cq.is_null() || cq_context.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        loop {
            // Blocks unless the program made the channel's fd non-blocking.
            let token = match ch.inner.get_event() {
                Ok(t) => t,
                Err(e) => {
                    set_errno(e.raw_os_error().unwrap_or(libc::EIO));
                    return -1;
                }
            };
            // An event of a CQ destroyed meanwhile is dropped.
            let Some(q) = cq_of(token as *const ibv_cq) else {
                continue;
            };
            // SAFETY: checked non-NULL out-pointers.
            unsafe {
                cq.write(token as *mut ibv_cq);
                cq_context.write(q.ibv.cq_context);
            }
            return 0;
        }
    })
}

#[export_name = "__ferroce_ibv_ack_cq_events"]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    if cq_of(cq).is_some() {
        // SAFETY: live CQ. Events are never waited for on destroy, so the count is only
        // bookkeeping the program may read.
        unsafe { (*cq).comp_events_completed = (*cq).comp_events_completed.wrapping_add(nevents) };
    }
}

thread_local! {
    /// Completions taken from the transport before conversion (no allocation per poll).
    static POLLED: RefCell<Vec<WorkCompletion>> = const { RefCell::new(Vec::new()) };
}

/// The C view of a completion.
pub(crate) fn to_ibv_wc(wc: &WorkCompletion) -> ibv_wc {
    let imm = if wc.wc_flags.contains(ferroce_transport::WcFlags::WITH_INV) {
        ibv_wc__bindgen_ty_1 {
            invalidated_rkey: wc.invalidated_rkey,
        }
    } else {
        ibv_wc__bindgen_ty_1 {
            imm_data: wc.imm_data.to_be(),
        }
    };
    ibv_wc {
        wr_id: wc.wr_id,
        status: wc.status as u32,
        opcode: wc.opcode as u32,
        vendor_err: 0,
        byte_len: wc.byte_len,
        __bindgen_anon_1: imm,
        qp_num: wc.qp_num,
        src_qp: wc.src_qp,
        wc_flags: wc.wc_flags.0,
        pkey_index: 0,
        slid: 0,
        sl: sl_of(wc),
        dlid_path_bits: 0,
    }
}

/// The `sl` of a completion: on Ethernet there is no service level, so a UD receive
/// reports which network header its GRH area holds, as mlx5's provider passes its CQE's
/// RoCE packet type there (1 IPv6, 2 IPv4; 0 would be a RoCE v1 GRH).
///
/// UCX's ud_verbs reads these bits to know where the destination address lies in the
/// 40-byte GRH area (bytes 36..40 for IPv4, 24..40 for IPv6) and silently drops every
/// packet whose address is not its own; with 0 it took an IPv4 packet for IPv6 and
/// dropped them all, so an IPv4 GID hung. Other receives keep 0.
fn sl_of(wc: &WorkCompletion) -> u8 {
    const IPV6: u8 = 1;
    const IPV4: u8 = 2;
    match wc.src_gid {
        Some(gid) if gid.to_ipv4_mapped().is_some() => IPV4,
        Some(_) => IPV6,
        None => 0,
    }
}

/// `ops.poll_cq`: what the header's inline `ibv_poll_cq` calls.
pub(crate) unsafe extern "C" fn poll_cq(
    cq: *mut ibv_cq,
    num_entries: c_int,
    wc: *mut ibv_wc,
) -> c_int {
    catch("ibv_poll_cq", -1, || {
        let Some(q) = cq_of(cq) else {
            return -1;
        };
        if num_entries <= 0 {
            return 0;
        }
        if wc.is_null() {
            return -1;
        }
        POLLED.with_borrow_mut(|polled| {
            polled.clear();
            let (n, received) = q.inner.poll_busy(polled, num_entries as usize);
            if n == 0 && !received {
                // Programs call ibv_poll_cq in a tight loop. Where CPUs are fewer than
                // busy threads (two perftest processes on a 2-CPU runner), the spinner
                // holds a CPU that ferroce's driver thread or the peer process needs to
                // produce the very completion it waits for; a yield is one cheap system
                // call when nothing else wants the CPU. Every idle poll yields: against
                // every 16th, `ib_write_bw` 64 KiB at MTU 1500 gained a fifth, latency
                // no change beyond the noise (README, "the C library"). A poll that took
                // frames in did the driver thread's work, and more is likely waiting: it
                // does not (`ib_write_bw -R` 4 KiB, whose server spins on a CQ that never
                // completes while the WRITEs stream in: 15.8 -> 16.9 Gb/s).
                std::thread::yield_now();
            }
            for (i, w) in polled.iter().enumerate() {
                // SAFETY: the caller gives room for num_entries completions; n <= that.
                unsafe { wc.add(i).write(to_ibv_wc(w)) };
            }
            n as c_int
        })
    })
}

/// `ops.req_notify_cq`.
pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    catch("ibv_req_notify_cq", libc::EIO, || {
        let Some(q) = cq_of(cq) else {
            return libc::EINVAL;
        };
        match q.inner.req_notify(solicited_only != 0) {
            Ok(()) => 0,
            Err(e) => errno_of(&e),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroce_transport::{WcFlags, WcOpcode, WcStatus};
    use std::net::Ipv6Addr;

    fn ud_recv(src_gid: Option<Ipv6Addr>) -> WorkCompletion {
        WorkCompletion {
            wr_id: 7,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 48,
            imm_data: 0,
            invalidated_rkey: 0,
            src_qp: 0x11,
            src_gid,
            qp_num: 0x22,
            wc_flags: if src_gid.is_some() {
                WcFlags::GRH
            } else {
                WcFlags::empty()
            },
        }
    }

    #[test]
    fn a_ud_receive_reports_its_network_header_in_sl() {
        let v4: Ipv6Addr = "::ffff:10.88.0.2".parse().unwrap();
        let v6: Ipv6Addr = "fe80::1".parse().unwrap();
        // UCX reads 2 as: the address is IPv4's, in the GRH area's last 4 bytes.
        assert_eq!(to_ibv_wc(&ud_recv(Some(v4))).sl, 2);
        assert_eq!(to_ibv_wc(&ud_recv(Some(v6))).sl, 1);
        assert_eq!(to_ibv_wc(&ud_recv(None)).sl, 0);
    }
}
