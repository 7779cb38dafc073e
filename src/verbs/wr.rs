//! Shorthands for common work requests (all signaled).

use ferroce_transport::{SendFlags, SendWr, Sge, UdDest, WrOpcode};

fn wr(wr_id: u64, opcode: WrOpcode, sge: Sge) -> SendWr {
    SendWr {
        wr_id,
        opcode,
        sg_list: vec![sge],
        flags: SendFlags::SIGNALED,
        ..Default::default()
    }
}

/// SEND of `sge`.
pub fn send(wr_id: u64, sge: Sge) -> SendWr {
    wr(wr_id, WrOpcode::Send, sge)
}

/// SEND with immediate data.
pub fn send_with_imm(wr_id: u64, sge: Sge, imm: u32) -> SendWr {
    SendWr {
        imm_data: imm,
        ..wr(wr_id, WrOpcode::SendWithImm, sge)
    }
}

/// UD SEND of `sge` to `dest`.
pub fn ud_send(wr_id: u64, sge: Sge, dest: UdDest) -> SendWr {
    SendWr {
        ud: Some(dest),
        ..wr(wr_id, WrOpcode::Send, sge)
    }
}

/// RDMA WRITE of `sge` to `remote_addr` under `rkey`.
pub fn rdma_write(wr_id: u64, sge: Sge, remote_addr: u64, rkey: u32) -> SendWr {
    SendWr {
        remote_addr,
        rkey,
        ..wr(wr_id, WrOpcode::RdmaWrite, sge)
    }
}

/// RDMA WRITE with immediate data.
pub fn rdma_write_with_imm(wr_id: u64, sge: Sge, remote_addr: u64, rkey: u32, imm: u32) -> SendWr {
    SendWr {
        remote_addr,
        rkey,
        imm_data: imm,
        ..wr(wr_id, WrOpcode::RdmaWriteWithImm, sge)
    }
}

/// RDMA READ from `remote_addr` into `sge`.
pub fn rdma_read(wr_id: u64, sge: Sge, remote_addr: u64, rkey: u32) -> SendWr {
    SendWr {
        remote_addr,
        rkey,
        ..wr(wr_id, WrOpcode::RdmaRead, sge)
    }
}

/// Atomic compare-and-swap of the 8 bytes at `remote_addr`; the old value lands in `sge`.
pub fn compare_swap(
    wr_id: u64,
    sge: Sge,
    remote_addr: u64,
    rkey: u32,
    compare: u64,
    swap: u64,
) -> SendWr {
    SendWr {
        remote_addr,
        rkey,
        compare_add: compare,
        swap,
        ..wr(wr_id, WrOpcode::AtomicCmpSwp, sge)
    }
}

/// Atomic fetch-and-add on the 8 bytes at `remote_addr`; the old value lands in `sge`.
pub fn fetch_add(wr_id: u64, sge: Sge, remote_addr: u64, rkey: u32, add: u64) -> SendWr {
    SendWr {
        remote_addr,
        rkey,
        compare_add: add,
        ..wr(wr_id, WrOpcode::AtomicFetchAdd, sge)
    }
}

/// Atomic write (RC only): the 8 bytes `value` stored at once at the 8-byte aligned
/// `remote_addr`, which the peer's region and QP open for remote writes. Nothing comes
/// back but the completion.
pub fn atomic_write(wr_id: u64, remote_addr: u64, rkey: u32, value: [u8; 8]) -> SendWr {
    SendWr {
        wr_id,
        opcode: WrOpcode::AtomicWrite,
        flags: SendFlags::SIGNALED,
        remote_addr,
        rkey,
        compare_add: u64::from_ne_bytes(value),
        ..Default::default()
    }
}
