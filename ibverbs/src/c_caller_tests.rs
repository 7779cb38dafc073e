//! The C ABI called as a C program would, including a hostile one: NULL, foreign and
//! destroyed pointers get the verbs error convention; two QPs of one device move data
//! between the program's own buffers through the ops table; completion channels fire.

use std::ffi::c_int;
use std::ptr::null_mut;
use std::time::Duration;

use ferroce::verbs::Context;

use crate::cq::*;
use crate::ffi::*;
use crate::mr::*;
use crate::open::*;
use crate::pd::*;
use crate::qp::*;
use crate::query::*;

fn errno() -> c_int {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// A device with no privileges needed: one end of an in-memory wire.
fn memory_device() -> (*mut ibv_context, Context) {
    let (a, b) = Context::memory_pair().unwrap();
    (wrap(a, null_mut()).unwrap(), b)
}

#[test]
fn null_and_foreign_pointers_get_verbs_errors() {
    let junk = 0x1234usize as *mut u8;
    // SAFETY: exercising the C ABI with invalid arguments is what this test is for.
    unsafe {
        assert!(ibv_alloc_pd(null_mut()).is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert!(ibv_alloc_pd(junk.cast()).is_null());
        assert_eq!(ibv_dealloc_pd(junk.cast()), libc::EINVAL);
        assert_eq!(ibv_dealloc_pd(null_mut()), libc::EINVAL);
        assert!(ibv_create_cq(junk.cast(), 16, null_mut(), null_mut(), 0).is_null());
        assert_eq!(ibv_destroy_cq(null_mut()), libc::EINVAL);
        assert_eq!(ibv_destroy_qp(junk.cast()), libc::EINVAL);
        assert_eq!(ibv_dereg_mr(junk.cast()), libc::EINVAL);
        assert_eq!(ibv_close_device(null_mut()), libc::EINVAL);
        assert_eq!(ibv_query_gid(junk.cast(), 1, 0, null_mut()), -1);
        assert!(ibv_reg_mr(null_mut(), null_mut(), 0, 0).is_null());
        assert!(crate::device::ibv_get_device_name(junk.cast()).is_null());
        assert_eq!(poll_cq(junk.cast(), 4, null_mut()), -1);
        let mut bad: *mut ibv_send_wr = null_mut();
        assert_eq!(
            crate::post::post_send(junk.cast(), null_mut(), &mut bad),
            libc::EINVAL
        );
    }
}

#[test]
fn destroyed_objects_are_refused_not_touched() {
    let (ctx, _peer) = memory_device();
    // SAFETY: valid calls, then calls on destroyed objects (the point of the test).
    unsafe {
        let pd = ibv_alloc_pd(ctx);
        assert!(!pd.is_null());
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_dealloc_pd(pd), libc::EINVAL, "double free");
        assert!(ibv_reg_mr(pd, null_mut(), 0, 0).is_null(), "use after free");
        let cq = ibv_create_cq(ctx, 4, null_mut(), null_mut(), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(req_notify_cq(cq, 0), libc::EINVAL);
        assert_eq!(ibv_close_device(ctx), 0);
        assert_eq!(ibv_close_device(ctx), libc::EINVAL);
        assert!(ibv_alloc_pd(ctx).is_null());
    }
}

/// Moves `qp` RESET → INIT → RTR → RTS towards `dest_qpn` on the device's own GID 0.
unsafe fn connect(ctx: *mut ibv_context, qp: *mut ibv_qp, dest_qpn: u32, access: u32) {
    // SAFETY: forwarded.
    unsafe { connect_with(ctx, qp, dest_qpn, access, 14, 7) }
}

/// `connect` with the local ACK timeout and retry count given.
unsafe fn connect_with(
    ctx: *mut ibv_context,
    qp: *mut ibv_qp,
    dest_qpn: u32,
    access: u32,
    timeout: u8,
    retry_cnt: u8,
) {
    // SAFETY: the caller passes live objects; attributes are locals.
    unsafe {
        let mut gid = ibv_gid { raw: [0; 16] };
        assert_eq!(ibv_query_gid(ctx, 1, 0, &mut gid), 0);
        let mut a: ibv_qp_attr = std::mem::zeroed();
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        a.qp_access_flags = access;
        let m = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        assert_eq!(ibv_modify_qp(qp, &mut a, m as c_int), 0);
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = IBV_MTU_1024;
        a.dest_qp_num = dest_qpn;
        a.rq_psn = 7;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = gid;
        a.ah_attr.grh.hop_limit = 64;
        a.ah_attr.port_num = 1;
        let m = IBV_QP_STATE
            | IBV_QP_AV
            | IBV_QP_PATH_MTU
            | IBV_QP_DEST_QPN
            | IBV_QP_RQ_PSN
            | IBV_QP_MAX_DEST_RD_ATOMIC
            | IBV_QP_MIN_RNR_TIMER;
        assert_eq!(ibv_modify_qp(qp, &mut a, m as c_int), 0);
        a.qp_state = IBV_QPS_RTS;
        a.sq_psn = 7;
        a.timeout = timeout;
        a.retry_cnt = retry_cnt;
        a.rnr_retry = 7;
        a.max_rd_atomic = 1;
        let m = IBV_QP_STATE
            | IBV_QP_TIMEOUT
            | IBV_QP_RETRY_CNT
            | IBV_QP_RNR_RETRY
            | IBV_QP_SQ_PSN
            | IBV_QP_MAX_QP_RD_ATOMIC;
        assert_eq!(ibv_modify_qp(qp, &mut a, m as c_int), 0);
        assert_eq!((*qp).state, IBV_QPS_RTS);
    }
}

/// Polls `cq` through the ops table until `n` completions came; all must succeed.
/// Two RC QPs of `pd` on `cq` with queue sizes `cap`, connected to each other.
unsafe fn rc_pair(
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    cap: ibv_qp_cap,
    access: u32,
) -> (*mut ibv_qp, *mut ibv_qp) {
    // SAFETY: live objects (the caller's contract); `init` is a whole ibv_qp_init_attr.
    unsafe {
        let mut init: ibv_qp_init_attr = std::mem::zeroed();
        init.send_cq = cq;
        init.recv_cq = cq;
        init.qp_type = IBV_QPT_RC;
        init.cap = cap;
        let q1 = ibv_create_qp(pd, &mut init);
        let q2 = ibv_create_qp(pd, &mut init);
        assert!(!q1.is_null() && !q2.is_null());
        connect(ctx, q1, (*q2).qp_num, access);
        connect(ctx, q2, (*q1).qp_num, access);
        (q1, q2)
    }
}

unsafe fn completions(ctx: *mut ibv_context, cq: *mut ibv_cq, n: usize) -> Vec<ibv_wc> {
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while got.len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {n} completions",
            got.len()
        );
        // SAFETY: live objects; room for 4 completions.
        unsafe {
            let mut wc: [ibv_wc; 4] = std::mem::zeroed();
            let poll = (*ctx).ops.poll_cq.unwrap();
            let k = poll(cq, 4, wc.as_mut_ptr());
            assert!(k >= 0);
            got.extend_from_slice(&wc[..k as usize]);
        }
    }
    for w in &got {
        assert_eq!(w.status, IBV_WC_SUCCESS, "wr {}", w.wr_id);
    }
    got
}

#[test]
fn two_qps_of_one_device_move_the_programs_own_bytes() {
    let (ctx, _peer) = memory_device();
    let mut src: Vec<u8> = (0..=255).collect();
    let mut dst = vec![0u8; 256];
    let access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    // SAFETY: valid calls on live objects; the buffers outlive their registrations.
    unsafe {
        let pd = ibv_alloc_pd(ctx);
        assert!(ibv_reg_mr(
            pd,
            dst.as_mut_ptr().cast(),
            256,
            IBV_ACCESS_ON_DEMAND as c_int
        )
        .is_null());
        assert_eq!(
            errno(),
            libc::EINVAL,
            "unsupported access flags are refused"
        );
        let smr = ibv_reg_mr(pd, src.as_mut_ptr().cast(), 256, access as c_int);
        let dmr = ibv_reg_mr(pd, dst.as_mut_ptr().cast(), 256, access as c_int);
        assert!(!smr.is_null() && !dmr.is_null());
        assert_eq!((*dmr).addr, dst.as_mut_ptr().cast(), "registered in place");
        let ch = ibv_create_comp_channel(ctx);
        let cq = ibv_create_cq(ctx, 16, 0x77 as *mut _, ch, 0);
        assert!(!cq.is_null());
        let (q1, q2) = rc_pair(
            ctx,
            pd,
            cq,
            ibv_qp_cap {
                max_send_wr: 8,
                max_recv_wr: 8,
                max_send_sge: 2,
                max_recv_sge: 2,
                max_inline_data: 64,
            },
            access,
        );
        assert_eq!(ibv_destroy_cq(cq), libc::EBUSY, "QPs still use it");
        assert_eq!(ibv_destroy_comp_channel(ch), -1, "a CQ still uses it");

        // SEND: the receive lands in the program's buffer; the channel fires.
        let mut rsge = ibv_sge {
            addr: dst.as_ptr() as u64,
            length: 64,
            lkey: (*dmr).lkey,
        };
        let mut rwr: ibv_recv_wr = std::mem::zeroed();
        rwr.wr_id = 1;
        rwr.sg_list = &mut rsge;
        rwr.num_sge = 1;
        let mut bad_r = null_mut();
        assert_eq!(((*ctx).ops.post_recv.unwrap())(q2, &mut rwr, &mut bad_r), 0);
        assert_eq!(((*ctx).ops.req_notify_cq.unwrap())(cq, 0), 0);
        let mut ssge = ibv_sge {
            addr: src.as_ptr() as u64,
            length: 64,
            lkey: (*smr).lkey,
        };
        let mut swr: ibv_send_wr = std::mem::zeroed();
        swr.wr_id = 2;
        swr.sg_list = &mut ssge;
        swr.num_sge = 1;
        swr.opcode = IBV_WR_SEND;
        swr.send_flags = IBV_SEND_SIGNALED;
        let mut bad = null_mut();
        assert_eq!(((*ctx).ops.post_send.unwrap())(q1, &mut swr, &mut bad), 0);
        let ready =
            ferroce::link::eventfd::poll_readable(&[(*ch).fd], Some(Duration::from_secs(5)))
                .unwrap();
        assert_eq!(ready, 1, "the completion channel fires");
        let (mut ev_cq, mut ev_ctx) = (null_mut(), null_mut());
        assert_eq!(ibv_get_cq_event(ch, &mut ev_cq, &mut ev_ctx), 0);
        assert_eq!((ev_cq, ev_ctx as usize), (cq, 0x77));
        ibv_ack_cq_events(cq, 1);
        let wcs = completions(ctx, cq, 2);
        let recv = wcs.iter().find(|w| w.wr_id == 1).expect("receive");
        assert_eq!(
            (recv.opcode, recv.byte_len, recv.qp_num),
            (IBV_WC_RECV, 64, (*q2).qp_num)
        );
        assert_eq!(dst[..64], src[..64]);

        // RDMA WRITE with immediate-free inline data from unregistered stack memory.
        let stack = [0xabu8; 32];
        let mut isge = ibv_sge {
            addr: stack.as_ptr() as u64,
            length: 32,
            lkey: 0,
        };
        swr.wr_id = 3;
        swr.sg_list = &mut isge;
        swr.opcode = IBV_WR_RDMA_WRITE;
        swr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
        swr.wr.rdma = ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
            remote_addr: dst.as_ptr() as u64 + 64,
            rkey: (*dmr).rkey,
        };
        assert_eq!(((*ctx).ops.post_send.unwrap())(q1, &mut swr, &mut bad), 0);
        completions(ctx, cq, 1);
        assert_eq!(dst[64..96], [0xab; 32]);

        // A malformed request comes back in bad_wr with EINVAL; nothing is posted.
        swr.num_sge = -1;
        bad = null_mut();
        assert_eq!(
            ((*ctx).ops.post_send.unwrap())(q1, &mut swr, &mut bad),
            libc::EINVAL
        );
        assert_eq!(bad, &mut swr as *mut _);

        assert_eq!(ibv_destroy_qp(q1), 0);
        assert_eq!(ibv_destroy_qp(q2), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        assert_eq!(ibv_dereg_mr(smr), 0);
        assert_eq!(ibv_dereg_mr(dmr), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

#[test]
fn a_qp_that_fails_by_itself_is_reported_on_the_async_fd() {
    let (ctx, _peer) = memory_device();
    // SAFETY: valid calls on live objects; the buffer outlives its registration.
    unsafe {
        let pd = ibv_alloc_pd(ctx);
        let mut buf = vec![0u8; 64];
        let mr = ibv_reg_mr(
            pd,
            buf.as_mut_ptr().cast(),
            64,
            IBV_ACCESS_LOCAL_WRITE as c_int,
        );
        let cq = ibv_create_cq(ctx, 16, null_mut(), null_mut(), 0);
        let mut init: ibv_qp_init_attr = std::mem::zeroed();
        init.send_cq = cq;
        init.recv_cq = cq;
        init.qp_type = IBV_QPT_RC;
        init.cap.max_send_wr = 4;
        init.cap.max_recv_wr = 4;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        let qp = ibv_create_qp(pd, &mut init);
        // Nobody has QP number 0xabcde: the retries run out.
        connect_with(ctx, qp, 0xabcde, IBV_ACCESS_LOCAL_WRITE, 1, 0);
        let mut sge = ibv_sge {
            addr: buf.as_ptr() as u64,
            length: 8,
            lkey: (*mr).lkey,
        };
        let mut wr: ibv_send_wr = std::mem::zeroed();
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        let mut bad = null_mut();
        assert_eq!(((*ctx).ops.post_send.unwrap())(qp, &mut wr, &mut bad), 0);
        let wc = completions_any(ctx, cq);
        assert_eq!(wc.status, IBV_WC_RETRY_EXC_ERR);
        let fd = (*ctx).async_fd;
        let ready =
            ferroce::link::eventfd::poll_readable(&[fd], Some(Duration::from_secs(10))).unwrap();
        assert_eq!(ready, 1, "async_fd readable");
        let mut ev: ibv_async_event = std::mem::zeroed();
        assert_eq!(crate::async_event::ibv_get_async_event(ctx, &mut ev), 0);
        assert_eq!(ev.event_type, IBV_EVENT_QP_FATAL);
        assert_eq!(ev.element.qp, qp);
        crate::async_event::ibv_ack_async_event(&mut ev);
        assert_eq!((*qp).events_completed, 1);
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

/// The next completion, whatever its status.
unsafe fn completions_any(ctx: *mut ibv_context, cq: *mut ibv_cq) -> ibv_wc {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        assert!(std::time::Instant::now() < deadline, "no completion");
        // SAFETY: live objects; room for one completion.
        unsafe {
            let mut wc: ibv_wc = std::mem::zeroed();
            if ((*ctx).ops.poll_cq.unwrap())(cq, 1, &mut wc) == 1 {
                return wc;
            }
        }
    }
}

#[test]
fn an_extended_cq_reads_completions_field_by_field() {
    let (ctx, _peer) = memory_device();
    let mut src: Vec<u8> = (0..64).collect();
    let mut dst = vec![0u8; 64];
    // SAFETY: valid calls on live objects; the buffers outlive their registrations.
    unsafe {
        let vctx = (ctx as *mut u8).sub(std::mem::offset_of!(verbs_context, context))
            as *mut verbs_context;
        let create_cq_ex = (*vctx)
            .create_cq_ex
            .expect("create_cq_ex in the verbs_context");
        let mut attr: ibv_cq_init_attr_ex = std::mem::zeroed();
        attr.cqe = 8;
        attr.wc_flags = (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) as u64;
        assert!(
            create_cq_ex(ctx, &mut attr).is_null(),
            "timestamps are refused"
        );
        assert_eq!(errno(), libc::EOPNOTSUPP);
        attr.wc_flags = (IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM) as u64;
        let cqx = create_cq_ex(ctx, &mut attr);
        assert!(!cqx.is_null());
        let cq = cqx as *mut ibv_cq;
        let pd = ibv_alloc_pd(ctx);
        let access = IBV_ACCESS_LOCAL_WRITE;
        let smr = ibv_reg_mr(pd, src.as_mut_ptr().cast(), 64, access as c_int);
        let dmr = ibv_reg_mr(pd, dst.as_mut_ptr().cast(), 64, access as c_int);
        let (q1, q2) = rc_pair(
            ctx,
            pd,
            cq,
            ibv_qp_cap {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            access,
        );
        let mut poll_attr = ibv_poll_cq_attr { comp_mask: 0 };
        assert_eq!(
            ((*cqx).start_poll.unwrap())(cqx, &mut poll_attr),
            libc::ENOENT,
            "empty"
        );
        let mut rsge = ibv_sge {
            addr: dst.as_ptr() as u64,
            length: 64,
            lkey: (*dmr).lkey,
        };
        let mut rwr: ibv_recv_wr = std::mem::zeroed();
        rwr.wr_id = 10;
        rwr.sg_list = &mut rsge;
        rwr.num_sge = 1;
        let mut bad_r = null_mut();
        assert_eq!(((*ctx).ops.post_recv.unwrap())(q2, &mut rwr, &mut bad_r), 0);
        let mut ssge = ibv_sge {
            addr: src.as_ptr() as u64,
            length: 48,
            lkey: (*smr).lkey,
        };
        let mut swr: ibv_send_wr = std::mem::zeroed();
        swr.wr_id = 20;
        swr.sg_list = &mut ssge;
        swr.num_sge = 1;
        swr.opcode = IBV_WR_SEND;
        swr.send_flags = IBV_SEND_SIGNALED;
        let mut bad = null_mut();
        assert_eq!(((*ctx).ops.post_send.unwrap())(q1, &mut swr, &mut bad), 0);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut seen = Vec::new();
        while seen.len() < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "completions: {seen:?}"
            );
            if ((*cqx).start_poll.unwrap())(cqx, &mut poll_attr) != 0 {
                continue;
            }
            loop {
                assert_eq!((*cqx).status, IBV_WC_SUCCESS);
                let op = ((*cqx).read_opcode.unwrap())(cqx);
                let len = ((*cqx).read_byte_len.unwrap())(cqx);
                let qpn = ((*cqx).read_qp_num.unwrap())(cqx);
                seen.push(((*cqx).wr_id, op, len, qpn));
                if ((*cqx).next_poll.unwrap())(cqx) != 0 {
                    break;
                }
            }
            ((*cqx).end_poll.unwrap())(cqx);
        }
        seen.sort();
        assert_eq!(
            seen,
            vec![
                (10, IBV_WC_RECV, 48, (*q2).qp_num),
                (20, IBV_WC_SEND, 48, (*q1).qp_num)
            ]
        );
        assert_eq!(dst[..48], src[..48]);
        assert_eq!(ibv_destroy_qp(q1), 0);
        assert_eq!(ibv_destroy_qp(q2), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_dereg_mr(smr), 0);
        assert_eq!(ibv_dereg_mr(dmr), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

#[test]
fn an_extended_qp_posts_with_the_work_request_builder() {
    let (ctx, _peer) = memory_device();
    let mut src: Vec<u8> = (100..164).collect();
    let mut dst = vec![0u8; 64];
    // SAFETY: valid calls on live objects; the buffers outlive their registrations.
    unsafe {
        let vctx = (ctx as *mut u8).sub(std::mem::offset_of!(verbs_context, context))
            as *mut verbs_context;
        let create_qp_ex = (*vctx)
            .create_qp_ex
            .expect("create_qp_ex in the verbs_context");
        let pd = ibv_alloc_pd(ctx);
        let access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
        let smr = ibv_reg_mr(pd, src.as_mut_ptr().cast(), 64, access as c_int);
        let dmr = ibv_reg_mr(pd, dst.as_mut_ptr().cast(), 64, access as c_int);
        let cq = ibv_create_cq(ctx, 16, null_mut(), null_mut(), 0);
        let mut a: ibv_qp_init_attr_ex = std::mem::zeroed();
        a.send_cq = cq;
        a.recv_cq = cq;
        a.qp_type = IBV_QPT_RC;
        a.cap = ibv_qp_cap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 32,
        };
        a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        a.pd = pd;
        a.send_ops_flags = (IBV_QP_EX_WITH_TSO) as u64;
        assert!(create_qp_ex(ctx, &mut a).is_null(), "TSO is refused");
        a.send_ops_flags = (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND) as u64;
        let q1 = create_qp_ex(ctx, &mut a);
        a.comp_mask = IBV_QP_INIT_ATTR_PD;
        let q2 = create_qp_ex(ctx, &mut a);
        assert!(!q1.is_null() && !q2.is_null());
        assert!(
            crate::qp_ex::ibv_qp_to_qp_ex(q2).is_null(),
            "no builder without send_ops_flags"
        );
        let x = crate::qp_ex::ibv_qp_to_qp_ex(q1);
        assert_eq!(x as *mut ibv_qp, q1);
        connect(ctx, q1, (*q2).qp_num, access);
        connect(ctx, q2, (*q1).qp_num, access);

        // A WRITE from registered memory and a SEND of inline data, in one batch.
        let mut rsge = ibv_sge {
            addr: dst.as_ptr() as u64 + 32,
            length: 32,
            lkey: (*dmr).lkey,
        };
        let mut rwr: ibv_recv_wr = std::mem::zeroed();
        rwr.wr_id = 9;
        rwr.sg_list = &mut rsge;
        rwr.num_sge = 1;
        let mut bad_r = null_mut();
        assert_eq!(((*ctx).ops.post_recv.unwrap())(q2, &mut rwr, &mut bad_r), 0);
        ((*x).wr_start.unwrap())(x);
        (*x).wr_id = 1;
        (*x).wr_flags = IBV_SEND_SIGNALED;
        ((*x).wr_rdma_write.unwrap())(x, (*dmr).rkey, dst.as_ptr() as u64);
        ((*x).wr_set_sge.unwrap())(x, (*smr).lkey, src.as_ptr() as u64, 16);
        (*x).wr_id = 2;
        ((*x).wr_send.unwrap())(x);
        let mut stack = [7u8; 8];
        ((*x).wr_set_inline_data.unwrap())(x, stack.as_mut_ptr().cast(), 8);
        stack = [0; 8]; // reused at once: the data was copied at the call
        assert_eq!(((*x).wr_complete.unwrap())(x), 0);
        let wcs = completions(ctx, cq, 3);
        let mut ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
        ids.sort();
        assert_eq!(ids, vec![1, 2, 9]);
        assert_eq!(dst[..16], src[..16]);
        assert_eq!(dst[32..40], [7; 8]);
        assert_eq!(stack, [0; 8]);

        // A batch with a mistake posts nothing and says why.
        ((*x).wr_start.unwrap())(x);
        ((*x).wr_set_sge.unwrap())(x, 0, 0, 0);
        assert_eq!(
            ((*x).wr_complete.unwrap())(x),
            libc::EINVAL,
            "an SGE before any WR"
        );

        assert_eq!(ibv_destroy_qp(q1), 0);
        assert_eq!(ibv_destroy_qp(q2), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_dereg_mr(smr), 0);
        assert_eq!(ibv_dereg_mr(dmr), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

#[test]
fn memory_windows_open_and_close_remote_access_through_the_ops_table() {
    let (ctx, _peer) = memory_device();
    let mut src = vec![0x5au8; 64];
    let mut dst = vec![0u8; 256];
    let qp_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    // SAFETY: valid calls on live objects, then hostile ones; the buffers outlive
    // their registrations.
    unsafe {
        let ops = &(*ctx).ops;
        let (alloc, dealloc, bind) = (
            ops.alloc_mw.unwrap(),
            ops.dealloc_mw.unwrap(),
            ops.bind_mw.unwrap(),
        );
        let pd = ibv_alloc_pd(ctx);
        assert!(alloc(null_mut(), IBV_MW_TYPE_1).is_null());
        assert!(alloc(pd, 3).is_null(), "type 3 does not exist");
        assert_eq!(errno(), libc::EINVAL);
        let smr = ibv_reg_mr(
            pd,
            src.as_mut_ptr().cast(),
            64,
            IBV_ACCESS_LOCAL_WRITE as c_int,
        );
        let dmr = ibv_reg_mr(
            pd,
            dst.as_mut_ptr().cast(),
            256,
            (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND) as c_int,
        );
        let cq = ibv_create_cq(ctx, 16, null_mut(), null_mut(), 0);
        let (q1, q2) = rc_pair(
            ctx,
            pd,
            cq,
            ibv_qp_cap {
                max_send_wr: 8,
                max_recv_wr: 8,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_access,
        );

        // Type 1: ibv_bind_mw posts the bind and shows the window's next key.
        let mw = alloc(pd, IBV_MW_TYPE_1);
        assert!(!mw.is_null());
        let key0 = (*mw).rkey;
        let mut b: ibv_mw_bind = std::mem::zeroed();
        b.wr_id = 9;
        b.send_flags = IBV_SEND_SIGNALED;
        b.bind_info = ibv_mw_bind_info {
            mr: dmr,
            addr: dst.as_ptr() as u64 + 128,
            length: 64,
            mw_access_flags: IBV_ACCESS_REMOTE_WRITE,
        };
        assert_eq!(bind(q2, mw, &mut b), 0);
        assert_eq!((*mw).rkey, (key0 & !0xff) | (key0.wrapping_add(1) & 0xff));
        let wc = completions_any(ctx, cq);
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (9, IBV_WC_SUCCESS, IBV_WC_BIND_MW)
        );
        assert_eq!(ibv_dereg_mr(dmr), libc::EBUSY, "a window is bound to it");

        let write = |rkey: u32, at: u64| {
            let mut sge = ibv_sge {
                addr: src.as_ptr() as u64,
                length: 64,
                lkey: (*smr).lkey,
            };
            let mut wr: ibv_send_wr = std::mem::zeroed();
            wr.wr_id = 1;
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
            wr.opcode = IBV_WR_RDMA_WRITE;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.wr.rdma = ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
                remote_addr: at,
                rkey,
            };
            let mut bad = null_mut();
            assert_eq!(((*ctx).ops.post_send.unwrap())(q1, &mut wr, &mut bad), 0);
            completions_any(ctx, cq).status
        };
        assert_eq!(write((*mw).rkey, dst.as_ptr() as u64 + 128), IBV_WC_SUCCESS);
        assert_eq!(dst[128..192], [0x5a; 64]);
        assert_eq!(dst[..128], [0; 128]);
        // Hostile and stale uses: NULL and freed windows, a bind with a bad region.
        assert_eq!(bind(q2, null_mut(), &mut b), libc::EINVAL);
        assert_eq!(bind(q2, mw, null_mut()), libc::EINVAL);
        b.bind_info.mr = 0x1000 as *mut ibv_mr;
        assert_eq!(bind(q2, mw, &mut b), libc::EINVAL);
        let old = (*mw).rkey;
        assert_eq!(dealloc(mw), 0);
        assert_eq!(dealloc(mw), libc::EINVAL, "double free");
        assert_eq!(bind(q2, mw, &mut b), libc::EINVAL, "use after free");
        assert_eq!(ibv_dereg_mr(dmr), 0, "no window holds it now");
        // The freed window's key opens nothing: the WRITE fails remotely.
        assert_eq!(write(old, dst.as_ptr() as u64 + 128), IBV_WC_REM_ACCESS_ERR);
        assert_eq!(ibv_destroy_qp(q1), 0);
        assert_eq!(ibv_destroy_qp(q2), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_dereg_mr(smr), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

/// A UD QP of `pd` on `cq`, in RTS with Q_Key `qkey`.
unsafe fn ud_qp(pd: *mut ibv_pd, cq: *mut ibv_cq, qkey: u32) -> *mut ibv_qp {
    // SAFETY: live objects (the caller's contract); locals for the attributes.
    unsafe {
        let mut init: ibv_qp_init_attr = std::mem::zeroed();
        init.send_cq = cq;
        init.recv_cq = cq;
        init.qp_type = IBV_QPT_UD;
        init.cap = ibv_qp_cap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = ibv_create_qp(pd, &mut init);
        assert!(!qp.is_null());
        let mut a: ibv_qp_attr = std::mem::zeroed();
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        a.qkey = qkey;
        let m = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
        assert_eq!(ibv_modify_qp(qp, &mut a, m as c_int), 0);
        a.qp_state = IBV_QPS_RTR;
        assert_eq!(ibv_modify_qp(qp, &mut a, IBV_QP_STATE as c_int), 0);
        a.qp_state = IBV_QPS_RTS;
        a.sq_psn = 1;
        let m = IBV_QP_STATE | IBV_QP_SQ_PSN;
        assert_eq!(ibv_modify_qp(qp, &mut a, m as c_int), 0);
        qp
    }
}

#[test]
fn a_ud_qp_in_a_multicast_group_receives_what_is_sent_to_it() {
    use crate::ah::ibv_create_ah;
    use crate::mcast::{ibv_attach_mcast, ibv_detach_mcast};
    const QKEY: u32 = 0x1111_2222;
    let (ctx, _peer) = memory_device();
    let group = ibv_gid {
        raw: std::net::Ipv4Addr::new(239, 7, 7, 7)
            .to_ipv6_mapped()
            .octets(),
    };
    let unicast = ibv_gid {
        raw: std::net::Ipv4Addr::new(10, 7, 7, 7)
            .to_ipv6_mapped()
            .octets(),
    };
    let mut buf = vec![0u8; 256];
    // SAFETY: valid calls on live objects, and invalid ones (NULL, RC QP, a unicast GID,
    // a second detach) that must fail with EINVAL; `buf` outlives its registration.
    unsafe {
        let pd = ibv_alloc_pd(ctx);
        let cq = ibv_create_cq(ctx, 16, null_mut(), null_mut(), 0);
        let (sender, member, outsider) = (
            ud_qp(pd, cq, QKEY),
            ud_qp(pd, cq, QKEY),
            ud_qp(pd, cq, QKEY),
        );
        let (rc, _) = rc_pair(
            ctx,
            pd,
            cq,
            ibv_qp_cap {
                max_send_wr: 1,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            0,
        );
        assert_eq!(ibv_attach_mcast(null_mut(), &group, 0), libc::EINVAL);
        assert_eq!(ibv_attach_mcast(member, std::ptr::null(), 0), libc::EINVAL);
        assert_eq!(ibv_attach_mcast(rc, &group, 0), libc::EINVAL, "RC QP");
        assert_eq!(
            ibv_attach_mcast(member, &unicast, 0),
            libc::EINVAL,
            "no group"
        );
        assert_eq!(
            ibv_detach_mcast(member, &group, 0),
            libc::EINVAL,
            "not attached"
        );
        assert_eq!(ibv_attach_mcast(member, &group, 0), 0);

        let mr = ibv_reg_mr(
            pd,
            buf.as_mut_ptr().cast(),
            256,
            IBV_ACCESS_LOCAL_WRITE as c_int,
        );
        let base = buf.as_ptr() as u64;
        let post_recv = |qp: *mut ibv_qp, id: u64, at: u64| {
            let mut sge = ibv_sge {
                addr: base + at,
                length: 64,
                lkey: (*mr).lkey,
            };
            let mut wr: ibv_recv_wr = std::mem::zeroed();
            wr.wr_id = id;
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
            let mut bad = null_mut();
            assert_eq!(((*ctx).ops.post_recv.unwrap())(qp, &mut wr, &mut bad), 0);
        };
        post_recv(member, 10, 0);
        post_recv(outsider, 11, 64);
        let mut ah_attr: ibv_ah_attr = std::mem::zeroed();
        ah_attr.is_global = 1;
        ah_attr.grh.dgid = group;
        ah_attr.grh.hop_limit = 1;
        ah_attr.port_num = 1;
        let ah = ibv_create_ah(pd, &mut ah_attr);
        assert!(!ah.is_null(), "a group needs no neighbour");
        buf[128..133].copy_from_slice(b"hello");
        let send = |id: u64| {
            let mut sge = ibv_sge {
                addr: base + 128,
                length: 5,
                lkey: (*mr).lkey,
            };
            let mut wr: ibv_send_wr = std::mem::zeroed();
            wr.wr_id = id;
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
            wr.opcode = IBV_WR_SEND;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.wr.ud.ah = ah;
            wr.wr.ud.remote_qpn = 0xff_ffff;
            wr.wr.ud.remote_qkey = QKEY;
            let mut bad = null_mut();
            assert_eq!(
                ((*ctx).ops.post_send.unwrap())(sender, &mut wr, &mut bad),
                0
            );
        };
        send(1);
        let wcs = completions(ctx, cq, 2);
        let recv = wcs
            .iter()
            .find(|w| w.wr_id == 10)
            .expect("the member's receive");
        assert_eq!(
            (recv.qp_num, recv.src_qp, recv.byte_len),
            ((*member).qp_num, (*sender).qp_num, 40 + 5)
        );
        assert_eq!(&buf[40..45], b"hello");
        let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
        assert!(!ids.contains(&11), "the outsider got it: {ids:?}");

        // Detached, the member gets nothing more: only the send completes.
        assert_eq!(ibv_detach_mcast(member, &group, 0), 0);
        assert_eq!(ibv_detach_mcast(member, &group, 0), libc::EINVAL);
        post_recv(member, 12, 0);
        send(2);
        let wcs = completions(ctx, cq, 1);
        assert_eq!(wcs[0].wr_id, 2);
        std::thread::sleep(Duration::from_millis(50));
        let mut wc: [ibv_wc; 4] = std::mem::zeroed();
        assert_eq!(((*ctx).ops.poll_cq.unwrap())(cq, 4, wc.as_mut_ptr()), 0);

        // A destroyed QP leaves its groups with it.
        assert_eq!(ibv_attach_mcast(member, &group, 0), 0);
        assert_eq!(ibv_destroy_qp(member), 0);
        assert_eq!(
            ibv_attach_mcast(member, &group, 0),
            libc::EINVAL,
            "destroyed"
        );
    }
}
