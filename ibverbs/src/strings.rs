//! Names of enum values (what programs print), rate conversions, and the fork helpers
//! (nothing to do: ferroce pins no pages, so fork() is always safe).

use std::ffi::{c_char, c_int, c_void};

use crate::ffi::*;

macro_rules! cstr {
    ($s:literal) => {
        concat!($s, "\0").as_ptr() as *const c_char
    };
}

#[export_name = "__ferroce_ibv_wc_status_str"]
pub extern "C" fn ibv_wc_status_str(status: ibv_wc_status) -> *const c_char {
    match status {
        IBV_WC_SUCCESS => cstr!("success"),
        IBV_WC_LOC_LEN_ERR => cstr!("local length error"),
        IBV_WC_LOC_QP_OP_ERR => cstr!("local QP operation error"),
        IBV_WC_LOC_EEC_OP_ERR => cstr!("local EE context operation error"),
        IBV_WC_LOC_PROT_ERR => cstr!("local protection error"),
        IBV_WC_WR_FLUSH_ERR => cstr!("Work Request Flushed Error"),
        IBV_WC_MW_BIND_ERR => cstr!("memory management operation error"),
        IBV_WC_BAD_RESP_ERR => cstr!("bad response error"),
        IBV_WC_LOC_ACCESS_ERR => cstr!("local access error"),
        IBV_WC_REM_INV_REQ_ERR => cstr!("remote invalid request error"),
        IBV_WC_REM_ACCESS_ERR => cstr!("remote access error"),
        IBV_WC_REM_OP_ERR => cstr!("remote operation error"),
        IBV_WC_RETRY_EXC_ERR => cstr!("transport retry counter exceeded"),
        IBV_WC_RNR_RETRY_EXC_ERR => cstr!("RNR retry counter exceeded"),
        IBV_WC_LOC_RDD_VIOL_ERR => cstr!("local RDD violation error"),
        IBV_WC_REM_INV_RD_REQ_ERR => cstr!("remote invalid RD request"),
        IBV_WC_REM_ABORT_ERR => cstr!("aborted error"),
        IBV_WC_INV_EECN_ERR => cstr!("invalid EE context number"),
        IBV_WC_INV_EEC_STATE_ERR => cstr!("invalid EE context state"),
        IBV_WC_FATAL_ERR => cstr!("fatal error"),
        IBV_WC_RESP_TIMEOUT_ERR => cstr!("response timeout error"),
        IBV_WC_GENERAL_ERR => cstr!("general error"),
        IBV_WC_TM_ERR => cstr!("TM error"),
        IBV_WC_TM_RNDV_INCOMPLETE => cstr!("TM software rendezvous"),
        _ => cstr!("unknown"),
    }
}

#[export_name = "__ferroce_ibv_node_type_str"]
pub extern "C" fn ibv_node_type_str(node_type: ibv_node_type) -> *const c_char {
    match node_type {
        IBV_NODE_CA => cstr!("InfiniBand channel adapter"),
        IBV_NODE_SWITCH => cstr!("InfiniBand switch"),
        IBV_NODE_ROUTER => cstr!("InfiniBand router"),
        IBV_NODE_RNIC => cstr!("iWARP NIC"),
        IBV_NODE_USNIC => cstr!("usNIC"),
        IBV_NODE_USNIC_UDP => cstr!("usNIC UDP"),
        IBV_NODE_UNSPECIFIED => cstr!("unspecified"),
        _ => cstr!("unknown"),
    }
}

#[export_name = "__ferroce_ibv_port_state_str"]
pub extern "C" fn ibv_port_state_str(port_state: ibv_port_state) -> *const c_char {
    match port_state {
        IBV_PORT_NOP => cstr!("PORT_NOP"),
        IBV_PORT_DOWN => cstr!("PORT_DOWN"),
        IBV_PORT_INIT => cstr!("PORT_INIT"),
        IBV_PORT_ARMED => cstr!("PORT_ARMED"),
        IBV_PORT_ACTIVE => cstr!("PORT_ACTIVE"),
        IBV_PORT_ACTIVE_DEFER => cstr!("PORT_ACTIVE_DEFER"),
        _ => cstr!("invalid state"),
    }
}

#[export_name = "__ferroce_ibv_event_type_str"]
pub extern "C" fn ibv_event_type_str(event: ibv_event_type) -> *const c_char {
    match event {
        IBV_EVENT_CQ_ERR => cstr!("CQ error"),
        IBV_EVENT_QP_FATAL => cstr!("local work queue catastrophic error"),
        IBV_EVENT_QP_REQ_ERR => cstr!("invalid request local work queue error"),
        IBV_EVENT_QP_ACCESS_ERR => cstr!("local access violation work queue error"),
        IBV_EVENT_COMM_EST => cstr!("communication established"),
        IBV_EVENT_SQ_DRAINED => cstr!("send queue drained"),
        IBV_EVENT_PATH_MIG => cstr!("path migrated"),
        IBV_EVENT_PATH_MIG_ERR => cstr!("path migration request error"),
        IBV_EVENT_DEVICE_FATAL => cstr!("local catastrophic error"),
        IBV_EVENT_PORT_ACTIVE => cstr!("port active"),
        IBV_EVENT_PORT_ERR => cstr!("port error"),
        IBV_EVENT_LID_CHANGE => cstr!("LID change"),
        IBV_EVENT_PKEY_CHANGE => cstr!("P_Key change"),
        IBV_EVENT_SM_CHANGE => cstr!("SM change"),
        IBV_EVENT_SRQ_ERR => cstr!("SRQ catastrophic error"),
        IBV_EVENT_SRQ_LIMIT_REACHED => cstr!("SRQ limit reached"),
        IBV_EVENT_QP_LAST_WQE_REACHED => cstr!("last WQE reached"),
        IBV_EVENT_CLIENT_REREGISTER => cstr!("client reregistration"),
        IBV_EVENT_GID_CHANGE => cstr!("GID table change"),
        IBV_EVENT_WQ_FATAL => cstr!("WQ fatal"),
        _ => cstr!("unknown"),
    }
}

/// (rate, multiple of 2.5 Gb/s, Mb/s) for every `ibv_rate`.
const RATES: &[(ibv_rate, c_int, c_int)] = &[
    (IBV_RATE_2_5_GBPS, 1, 2500),
    (IBV_RATE_5_GBPS, 2, 5000),
    (IBV_RATE_10_GBPS, 4, 10000),
    (IBV_RATE_20_GBPS, 8, 20000),
    (IBV_RATE_30_GBPS, 12, 30000),
    (IBV_RATE_40_GBPS, 16, 40000),
    (IBV_RATE_60_GBPS, 24, 60000),
    (IBV_RATE_80_GBPS, 32, 80000),
    (IBV_RATE_120_GBPS, 48, 120000),
    (IBV_RATE_14_GBPS, -1, 14062),
    (IBV_RATE_56_GBPS, -1, 56250),
    (IBV_RATE_112_GBPS, -1, 112500),
    (IBV_RATE_168_GBPS, -1, 168750),
    (IBV_RATE_25_GBPS, 10, 25781),
    (IBV_RATE_100_GBPS, 40, 103125),
    (IBV_RATE_200_GBPS, 80, 206250),
    (IBV_RATE_300_GBPS, 120, 309375),
    (IBV_RATE_28_GBPS, 11, 28125),
    (IBV_RATE_50_GBPS, 20, 53125),
    (IBV_RATE_400_GBPS, 160, 425000),
    (IBV_RATE_600_GBPS, 240, 637500),
    (IBV_RATE_800_GBPS, 320, 850000),
    (IBV_RATE_1200_GBPS, 480, 1275000),
];

#[export_name = "__ferroce_ibv_rate_to_mult"]
pub extern "C" fn ibv_rate_to_mult(rate: ibv_rate) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
}

#[export_name = "__ferroce_mult_to_ibv_rate"]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> ibv_rate {
    RATES
        .iter()
        .find(|r| r.1 == mult && mult > 0)
        .map_or(IBV_RATE_MAX, |r| r.0)
}

#[export_name = "__ferroce_ibv_rate_to_mbps"]
pub extern "C" fn ibv_rate_to_mbps(rate: ibv_rate) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

#[export_name = "__ferroce_mbps_to_ibv_rate"]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> ibv_rate {
    RATES
        .iter()
        .find(|r| r.2 == mbps)
        .map_or(IBV_RATE_MAX, |r| r.0)
}

#[export_name = "__ferroce_ibv_fork_init"]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

#[export_name = "__ferroce_ibv_is_fork_initialized"]
pub extern "C" fn ibv_is_fork_initialized() -> ibv_fork_status {
    IBV_FORK_UNNEEDED
}

#[export_name = "__ferroce_ibv_dontfork_range"]
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

#[export_name = "__ferroce_ibv_dofork_range"]
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn names_and_rates() {
        // SAFETY: the functions return static NUL-terminated strings.
        let s = |p: *const c_char| unsafe { CStr::from_ptr(p) }.to_str().unwrap();
        assert_eq!(
            s(ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR)),
            "transport retry counter exceeded"
        );
        assert_eq!(s(ibv_wc_status_str(999)), "unknown");
        assert_eq!(s(ibv_port_state_str(IBV_PORT_ACTIVE)), "PORT_ACTIVE");
        assert_eq!(ibv_rate_to_mult(IBV_RATE_40_GBPS), 16);
        assert_eq!(mult_to_ibv_rate(16), IBV_RATE_40_GBPS);
        assert_eq!(
            mbps_to_ibv_rate(ibv_rate_to_mbps(IBV_RATE_100_GBPS)),
            IBV_RATE_100_GBPS
        );
    }
}
