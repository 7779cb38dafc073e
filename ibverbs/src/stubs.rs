//! Everything else libibverbs exports, so that any program or provider library built
//! against it loads: each answers as the verbs convention says for an unsupported
//! operation (EOPNOTSUPP, NULL with errno, or nothing). tests/symbols.rs fails when
//! Debian's libibverbs exports a function this library lacks.

use std::ffi::{c_char, c_int, c_void};

use crate::exports::{versioned, versioned_compat};
use crate::guard::set_errno;

/// `KIND NAME @ "VERSION";` — a stub of the given return kind, exported as `NAME@@VERSION`.
macro_rules! stubs {
    ($($kind:ident $name:ident @ $ver:literal;)*) => {
        $( stub_fn!($kind, $name, concat!("__ferroce_", stringify!($name))); )*
        versioned! { $($name @ $ver;)* }
    };
}

/// The same for the hidden pre-1.1 versions.
macro_rules! compat_stubs {
    ($($kind:ident $name:ident @ $ver:literal;)*) => {
        $( stub_fn!($kind, $name, concat!("__ferroce_compat_", stringify!($name))); )*
        versioned_compat! { $($name @ $ver;)* }
    };
}

macro_rules! stub_fn {
    (enotsup, $name:ident, $sym:expr) => {
        #[export_name = $sym]
        extern "C" fn $name() -> c_int {
            set_errno(libc::EOPNOTSUPP);
            libc::EOPNOTSUPP
        }
    };
    (minus1, $name:ident, $sym:expr) => {
        #[export_name = $sym]
        extern "C" fn $name() -> c_int {
            set_errno(libc::EOPNOTSUPP);
            -1
        }
    };
    (zero, $name:ident, $sym:expr) => {
        #[export_name = $sym]
        extern "C" fn $name() -> c_int {
            0
        }
    };
    (ptr, $name:ident, $sym:expr) => {
        #[export_name = $sym]
        extern "C" fn $name() -> *mut c_void {
            set_errno(libc::EOPNOTSUPP);
            std::ptr::null_mut()
        }
    };
    (minus1l, $name:ident, $sym:expr) => {
        #[export_name = $sym]
        extern "C" fn $name() -> isize {
            set_errno(libc::EOPNOTSUPP);
            -1
        }
    };
    (void, $name:ident, $sym:expr) => {
        #[export_name = $sym]
        extern "C" fn $name() {}
    };
}

stubs! {
    zero __ioctl_final_num_attrs @ "IBVERBS_PRIVATE_34";
    void __verbs_log @ "IBVERBS_PRIVATE_34";
    ptr _verbs_init_and_alloc_context @ "IBVERBS_PRIVATE_34";
    enotsup execute_ioctl @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_advise_mr @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_alloc_dm @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_alloc_mw @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_alloc_pd @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_attach_mcast @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_close_xrcd @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_create_ah @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_create_counters @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_create_cq @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_create_cq_ex @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_create_flow @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_create_flow_action_esp @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_create_qp @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_create_qp_ex @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_create_qp_ex2 @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_create_rwq_ind_table @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_create_srq @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_create_srq_ex @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_create_wq @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_dealloc_mw @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_dealloc_pd @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_dereg_mr @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_destroy_ah @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_destroy_counters @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_destroy_cq @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_destroy_flow @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_destroy_flow_action @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_destroy_qp @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_destroy_rwq_ind_table @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_destroy_srq @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_destroy_wq @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_detach_mcast @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_free_dm @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_get_context @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_modify_cq @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_modify_flow_action_esp @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_modify_qp @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_modify_qp_ex @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_modify_srq @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_modify_wq @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_open_qp @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_open_xrcd @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_poll_cq @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_post_recv @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_post_send @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_post_srq_recv @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_query_context @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_query_device_any @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_query_mr @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_query_port @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_query_qp @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_query_srq @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_read_counters @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_reg_dm_mr @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_reg_dmabuf_mr @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_reg_mr @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_req_notify_cq @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_rereg_mr @ "IBVERBS_PRIVATE_34";
    enotsup ibv_cmd_resize_cq @ "IBVERBS_PRIVATE_34";
    void ibv_copy_ah_attr_from_kern @ "IBVERBS_1.1";
    void ibv_copy_path_rec_from_kern @ "IBVERBS_1.0";
    void ibv_copy_path_rec_to_kern @ "IBVERBS_1.0";
    void ibv_copy_qp_attr_from_kern @ "IBVERBS_1.0";
    ptr ibv_import_device @ "IBVERBS_1.10";
    ptr ibv_import_dm @ "IBVERBS_1.13";
    ptr ibv_import_mr @ "IBVERBS_1.10";
    ptr ibv_import_pd @ "IBVERBS_1.10";
    enotsup ibv_query_ece @ "IBVERBS_1.10";
    zero ibv_query_qp_data_in_order @ "IBVERBS_1.14";
    minus1 ibv_read_ibdev_sysfs_file @ "IBVERBS_PRIVATE_34";
    minus1 ibv_read_sysfs_file @ "IBVERBS_1.0";
    ptr ibv_reg_dmabuf_mr @ "IBVERBS_1.12";
    minus1 ibv_rereg_mr @ "IBVERBS_1.1";
    enotsup ibv_resolve_eth_l2_from_gid @ "IBVERBS_1.1";
    enotsup ibv_set_ece @ "IBVERBS_1.10";
    void ibv_unimport_dm @ "IBVERBS_1.13";
    void ibv_unimport_mr @ "IBVERBS_1.10";
    void ibv_unimport_pd @ "IBVERBS_1.10";
    void verbs_init_cq @ "IBVERBS_PRIVATE_34";
    ptr verbs_open_device @ "IBVERBS_PRIVATE_34";
    void verbs_register_driver_34 @ "IBVERBS_PRIVATE_34";
    void verbs_set_ops @ "IBVERBS_PRIVATE_34";
    void verbs_uninit_context @ "IBVERBS_PRIVATE_34";    // Nodes of other rdma-core releases' providers: present, so they load (and find no
    // device: registering a driver does nothing).
    void verbs_register_driver_57 @ "IBVERBS_PRIVATE_57";
    void verbs_register_driver_59 @ "IBVERBS_PRIVATE_59";
    void verbs_register_driver_64 @ "IBVERBS_PRIVATE_64";
}

/// The pre-1.1 ABI's entry points (binaries from 2006): refused.
mod compat {
    use super::*;
    compat_stubs! {
    void ibv_ack_async_event @ "IBVERBS_1.0";
    void ibv_ack_cq_events @ "IBVERBS_1.0";
    ptr ibv_alloc_pd @ "IBVERBS_1.0";
    enotsup ibv_attach_mcast @ "IBVERBS_1.0";
    enotsup ibv_close_device @ "IBVERBS_1.0";
    ptr ibv_create_ah @ "IBVERBS_1.0";
    ptr ibv_create_cq @ "IBVERBS_1.0";
    ptr ibv_create_qp @ "IBVERBS_1.0";
    ptr ibv_create_srq @ "IBVERBS_1.0";
    enotsup ibv_dealloc_pd @ "IBVERBS_1.0";
    enotsup ibv_dereg_mr @ "IBVERBS_1.0";
    enotsup ibv_destroy_ah @ "IBVERBS_1.0";
    enotsup ibv_destroy_cq @ "IBVERBS_1.0";
    enotsup ibv_destroy_qp @ "IBVERBS_1.0";
    enotsup ibv_destroy_srq @ "IBVERBS_1.0";
    enotsup ibv_detach_mcast @ "IBVERBS_1.0";
    void ibv_free_device_list @ "IBVERBS_1.0";
    enotsup ibv_get_async_event @ "IBVERBS_1.0";
    enotsup ibv_get_cq_event @ "IBVERBS_1.0";
    enotsup ibv_get_device_guid @ "IBVERBS_1.0";
    ptr ibv_get_device_list @ "IBVERBS_1.0";
    ptr ibv_get_device_name @ "IBVERBS_1.0";
    enotsup ibv_modify_qp @ "IBVERBS_1.0";
    enotsup ibv_modify_srq @ "IBVERBS_1.0";
    ptr ibv_open_device @ "IBVERBS_1.0";
    enotsup ibv_query_device @ "IBVERBS_1.0";
    enotsup ibv_query_gid @ "IBVERBS_1.0";
    enotsup ibv_query_pkey @ "IBVERBS_1.0";
    enotsup ibv_query_port @ "IBVERBS_1.0";
    enotsup ibv_query_qp @ "IBVERBS_1.0";
    enotsup ibv_query_srq @ "IBVERBS_1.0";
    ptr ibv_reg_mr @ "IBVERBS_1.0";
    void ibv_register_driver @ "IBVERBS_1.1";
    enotsup ibv_resize_cq @ "IBVERBS_1.0";    }
}

/// librdmacm asks where sysfs is while it starts; ferroce has no verbs devices there.
#[export_name = "__ferroce_ibv_get_sysfs_path"]
extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    c"/sys".as_ptr()
}

// rdma-core's `bool verbs_allow_disassociate_destroy`, a variable providers read: false.
core::arch::global_asm!(
    ".pushsection .data",
    ".globl __ferroce_d_verbs_allow_disassociate_destroy",
    ".type __ferroce_d_verbs_allow_disassociate_destroy, @object",
    ".size __ferroce_d_verbs_allow_disassociate_destroy, 1",
    "__ferroce_d_verbs_allow_disassociate_destroy:",
    "    .byte 0",
    ".popsection",
    ".symver __ferroce_d_verbs_allow_disassociate_destroy, verbs_allow_disassociate_destroy@@IBVERBS_PRIVATE_34",
);

// librdmacm's calls ferroce does not offer: rsockets' zero-copy maps (riomap, riowrite;
// the rest of rsockets is `crate::rsocket`), SRQs made by rdma_cm, ECE.
stubs! {
    minus1l riomap @ "RDMACM_1.0";
    minus1 riounmap @ "RDMACM_1.0";
    minus1l riowrite @ "RDMACM_1.0";
    minus1 rdma_create_srq @ "RDMACM_1.0";
    minus1 rdma_create_srq_ex @ "RDMACM_1.0";
    void rdma_destroy_srq @ "RDMACM_1.0";
    minus1 rdma_get_remote_ece @ "RDMACM_1.3";
    minus1 rdma_reject_ece @ "RDMACM_1.3";
    minus1 rdma_set_local_ece @ "RDMACM_1.3";
}
