//! Symbol versions. Programs linked against rdma-core's libibverbs ask for each function
//! at a version (`ibv_reg_mr@IBVERBS_1.1`); provider libraries for rdma-core's private
//! `IBVERBS_PRIVATE_34` ones. Each export here is a one-jump trampoline carrying the
//! version (`.symver`), in the same object as its directive as the assembler requires;
//! the Rust function it jumps to is exported as `__ferroce_NAME`. The version nodes
//! themselves are declared in `libibverbs.map` (see build.rs).

/// `NAME @ "VERSION";` — exports `__ferroce_NAME` as the default `NAME@@VERSION`.
macro_rules! versioned {
    ($($name:ident @ $ver:literal;)*) => { $(
        core::arch::global_asm!(concat!(
            ".globl __ferroce_v_", stringify!($name), "\n",
            ".type __ferroce_v_", stringify!($name), ", @function\n",
            "__ferroce_v_", stringify!($name), ":\n",
            "    jmp __ferroce_", stringify!($name), "@PLT\n",
            ".symver __ferroce_v_", stringify!($name), ", ", stringify!($name), "@@", $ver, "\n",
        ));
    )* };
}
pub(crate) use versioned;

/// `NAME @ "VERSION";` — exports `__ferroce_compat_NAME` as the hidden, older
/// `NAME@VERSION` (the pre-1.1 ABI some old binaries still name).
macro_rules! versioned_compat {
    ($($name:ident @ $ver:literal;)*) => { $(
        core::arch::global_asm!(concat!(
            ".globl __ferroce_c_", stringify!($name), "\n",
            ".type __ferroce_c_", stringify!($name), ", @function\n",
            "__ferroce_c_", stringify!($name), ":\n",
            "    jmp __ferroce_compat_", stringify!($name), "@PLT\n",
            ".symver __ferroce_c_", stringify!($name), ", ", stringify!($name), "@", $ver, "\n",
        ));
    )* };
}
pub(crate) use versioned_compat;

versioned! {
    _ibv_query_gid_ex @ "IBVERBS_1.11";
    _ibv_query_gid_table @ "IBVERBS_1.11";
    ibv_ack_async_event @ "IBVERBS_1.1";
    ibv_ack_cq_events @ "IBVERBS_1.1";
    ibv_alloc_pd @ "IBVERBS_1.1";
    ibv_attach_mcast @ "IBVERBS_1.1";
    ibv_close_device @ "IBVERBS_1.1";
    ibv_create_ah @ "IBVERBS_1.1";
    ibv_create_ah_from_wc @ "IBVERBS_1.1";
    ibv_create_comp_channel @ "IBVERBS_1.0";
    ibv_create_cq @ "IBVERBS_1.1";
    ibv_create_qp @ "IBVERBS_1.1";
    ibv_create_srq @ "IBVERBS_1.1";
    ibv_dealloc_pd @ "IBVERBS_1.1";
    ibv_dereg_mr @ "IBVERBS_1.1";
    ibv_destroy_ah @ "IBVERBS_1.1";
    ibv_destroy_comp_channel @ "IBVERBS_1.0";
    ibv_destroy_cq @ "IBVERBS_1.1";
    ibv_destroy_qp @ "IBVERBS_1.1";
    ibv_detach_mcast @ "IBVERBS_1.1";
    ibv_destroy_srq @ "IBVERBS_1.1";
    ibv_dofork_range @ "IBVERBS_1.1";
    ibv_dontfork_range @ "IBVERBS_1.1";
    ibv_event_type_str @ "IBVERBS_1.1";
    ibv_fork_init @ "IBVERBS_1.1";
    ibv_free_device_list @ "IBVERBS_1.1";
    ibv_get_async_event @ "IBVERBS_1.1";
    ibv_get_cq_event @ "IBVERBS_1.1";
    ibv_get_device_guid @ "IBVERBS_1.1";
    ibv_get_device_index @ "IBVERBS_1.9";
    ibv_get_device_list @ "IBVERBS_1.1";
    ibv_get_device_name @ "IBVERBS_1.1";
    ibv_get_pkey_index @ "IBVERBS_1.5";
    ibv_init_ah_from_wc @ "IBVERBS_1.1";
    ibv_is_fork_initialized @ "IBVERBS_1.13";
    ibv_modify_qp @ "IBVERBS_1.1";
    ibv_modify_srq @ "IBVERBS_1.1";
    ibv_node_type_str @ "IBVERBS_1.1";
    ibv_open_device @ "IBVERBS_1.1";
    ibv_port_state_str @ "IBVERBS_1.1";
    ibv_query_device @ "IBVERBS_1.1";
    ibv_query_gid @ "IBVERBS_1.1";
    ibv_query_gid_type @ "IBVERBS_PRIVATE_34";
    ibv_query_pkey @ "IBVERBS_1.1";
    ibv_query_port @ "IBVERBS_1.1";
    ibv_query_qp @ "IBVERBS_1.1";
    ibv_qp_to_qp_ex @ "IBVERBS_1.6";
    ibv_query_srq @ "IBVERBS_1.1";
    ibv_rate_to_mbps @ "IBVERBS_1.1";
    ibv_rate_to_mult @ "IBVERBS_1.0";
    ibv_reg_mr @ "IBVERBS_1.1";
    ibv_reg_mr_iova @ "IBVERBS_1.7";
    ibv_reg_mr_iova2 @ "IBVERBS_1.8";
    ibv_resize_cq @ "IBVERBS_1.1";
    ibv_wc_status_str @ "IBVERBS_1.1";
    mbps_to_ibv_rate @ "IBVERBS_1.1";
    mult_to_ibv_rate @ "IBVERBS_1.0";    ibv_get_sysfs_path @ "IBVERBS_1.0";
}
