//! The Rust view of `<infiniband/verbs.h>` and `<rdma/rdma_cma.h>` (bindgen's, committed)
//! against gcc's view of the installed headers: sizes and field offsets of every struct a program hands to, or
//! gets from, ferroce. A header that changed under a committed binding fails here.

use std::mem::{offset_of, size_of};
use std::process::Command;

use crate::ffi::cma_h::*;
use crate::ffi::*;

macro_rules! layouts {
    ($($ty:ident { $($field:ident),* $(,)? })*) => {
        vec![$(
            (stringify!($ty), size_of::<$ty>(), vec![$((stringify!($field), offset_of!($ty, $field))),*]),
        )*]
    };
}

type Layout = (&'static str, usize, Vec<(&'static str, usize)>);

fn rust_layouts() -> Vec<Layout> {
    layouts! {
        ibv_device { node_type, transport_type, name, dev_name, dev_path, ibdev_path }
        ibv_context { device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat }
        ibv_context_ops { poll_cq, req_notify_cq, post_srq_recv, post_send, post_recv }
        verbs_context { query_port, query_device_ex, create_cq_ex, sz, context }
        ibv_device_attr { fw_ver, node_guid, max_qp_wr, device_cap_flags, max_cqe, atomic_cap, max_pkeys, phys_port_cnt }
        ibv_device_attr_ex { orig_attr, comp_mask, phys_port_cnt_ex }
        ibv_port_attr { state, max_mtu, active_mtu, gid_tbl_len, max_msg_sz, pkey_tbl_len, lid, link_layer, flags, port_cap_flags2 }
        ibv_gid_entry { gid, gid_index, port_num, gid_type, ndev_ifindex }
        ibv_pd { context, handle }
        ibv_mr { context, pd, addr, length, handle, lkey, rkey }
        ibv_cq { context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed, async_events_completed }
        ibv_comp_channel { context, fd, refcnt }
        ibv_qp { context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type, mutex, cond, events_completed }
        ibv_qp_cap { max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data }
        ibv_qp_init_attr { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all }
        ibv_qp_attr { qp_state, cur_qp_state, path_mtu, qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags, cap, ah_attr, pkey_index, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, rate_limit }
        ibv_ah_attr { grh, dlid, sl, src_path_bits, static_rate, is_global, port_num }
        ibv_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class }
        ibv_srq { context, srq_context, pd, handle, events_completed }
        ibv_srq_init_attr { srq_context, attr }
        ibv_srq_attr { max_wr, max_sge, srq_limit }
        ibv_ah { context, pd, handle }
        ibv_sge { addr, length, lkey }
        ibv_send_wr { wr_id, next, sg_list, num_sge, opcode, send_flags, wr, qp_type }
        ibv_recv_wr { wr_id, next, sg_list, num_sge }
        ibv_wc { wr_id, status, opcode, vendor_err, byte_len, qp_num, src_qp, wc_flags, pkey_index, slid, sl, dlid_path_bits }
        ibv_grh { version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid }
        ibv_async_event { element, event_type }
        rdma_event_channel { fd }
        rdma_cm_id { verbs, channel, context, qp, route, ps, port_num, event, send_cq_channel, send_cq, recv_cq_channel, recv_cq, srq, pd, qp_type }
        rdma_route { addr, path_rec, num_paths }
        rdma_ib_addr { sgid, dgid, pkey }
        rdma_conn_param { private_data, private_data_len, responder_resources, initiator_depth, flow_control, retry_count, rnr_retry_count, srq, qp_num }
        rdma_ud_param { private_data, private_data_len, ah_attr, qp_num, qkey }
        rdma_cm_event { id, listen_id, event, status, param }
        rdma_addrinfo { ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len, ai_dst_len, ai_src_addr, ai_dst_addr, ai_src_canonname, ai_dst_canonname, ai_route_len, ai_route, ai_connect_len, ai_connect, ai_next }
    }
}

/// The same sizes and offsets as gcc computes them from the installed header.
fn c_layouts(layouts: &[Layout]) -> String {
    let mut src = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\n#include <rdma/rdma_cma.h>\nint main(void) {\n",
    );
    for (ty, _, fields) in layouts {
        src += &format!("printf(\"{ty} %zu\\n\", sizeof(struct {ty}));\n");
        for (f, _) in fields {
            src += &format!("printf(\"{ty}.{f} %zu\\n\", offsetof(struct {ty}, {f}));\n");
        }
    }
    src += "return 0; }\n";
    let dir = std::env::temp_dir().join(format!("ferroce-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (c, exe) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&c, src).unwrap();
    let cc = Command::new("gcc")
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("gcc runs");
    assert!(
        cc.status.success(),
        "gcc could not build the layout probe (are libibverbs-dev and librdmacm-dev installed?): {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe).output().expect("the probe runs");
    std::fs::remove_dir_all(&dir).ok();
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn struct_layouts_match_the_installed_header() {
    let layouts = rust_layouts();
    let c = c_layouts(&layouts);
    let mut rust = String::new();
    for (ty, size, fields) in &layouts {
        rust += &format!("{ty} {size}\n");
        for (f, off) in fields {
            rust += &format!("{ty}.{f} {off}\n");
        }
    }
    assert!(c.lines().count() > 150, "probe printed too little: {c}");
    let diff: Vec<_> = rust
        .lines()
        .zip(c.lines())
        .filter(|(r, c)| r != c)
        .collect();
    assert!(diff.is_empty(), "(rust, gcc) differ: {diff:?}");
    assert_eq!(rust.lines().count(), c.lines().count());
}
