//! What a device says about itself: device and port attributes, the GID table (RoCE v2
//! entries built from the interface's addresses, as `ferroce devinfo` shows them), P_Keys.

use std::ffi::{c_int, c_uint};
use std::mem::size_of;

use ferroce_transport::{
    MAX_CQE, MAX_GROUPS, MAX_INLINE, MAX_QPS_PER_GROUP, MAX_RD_ATOMIC, MAX_SGE, MAX_WR,
};

use crate::context::{ctx_of, Ctx};
use crate::ffi::*;
use crate::guard::catch;

/// The default P_Key, the only one in the table.
const DEFAULT_PKEY: u16 = 0xffff;
/// Objects of each kind a device allows (ferroce's tables grow; these are what it
/// promises, rxe's values).
const MAX_OBJECTS: c_int = 0x10000;

fn device_attr(c: &Ctx) -> ibv_device_attr {
    // SAFETY: plain C data; zero is valid for every field.
    let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
    for (d, s) in a.fw_ver.iter_mut().zip(env!("CARGO_PKG_VERSION").bytes()) {
        *d = s as _;
    }
    let guid = c.inner.attr().node_guid.to_be();
    a.node_guid = guid;
    a.sys_image_guid = guid;
    a.max_mr_size = u64::MAX;
    a.page_size_cap = 0xffff_f000;
    a.vendor_id = 0xffffff;
    a.max_qp = MAX_OBJECTS;
    a.max_qp_wr = MAX_WR as c_int;
    a.device_cap_flags = IBV_DEVICE_PORT_ACTIVE_EVENT
        | IBV_DEVICE_SYS_IMAGE_GUID
        | IBV_DEVICE_RC_RNR_NAK_GEN
        | IBV_DEVICE_N_NOTIFY_CQ
        | IBV_DEVICE_MEM_WINDOW
        | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
    a.max_sge = MAX_SGE as c_int;
    a.max_sge_rd = MAX_SGE as c_int;
    a.max_cq = MAX_OBJECTS;
    a.max_cqe = MAX_CQE.min(c_int::MAX as usize) as c_int;
    a.max_mr = MAX_OBJECTS;
    a.max_mw = MAX_OBJECTS;
    a.max_pd = MAX_OBJECTS;
    a.max_qp_rd_atom = MAX_RD_ATOMIC as c_int;
    a.max_res_rd_atom = MAX_RD_ATOMIC as c_int * MAX_OBJECTS;
    a.max_qp_init_rd_atom = MAX_RD_ATOMIC as c_int;
    a.atomic_cap = IBV_ATOMIC_HCA;
    a.max_ah = MAX_OBJECTS;
    // Multicast groups as rxe counts them: pyverbs' tests skip multicast where
    // max_mcast_grp is 0.
    a.max_mcast_grp = MAX_GROUPS as c_int;
    a.max_mcast_qp_attach = MAX_QPS_PER_GROUP as c_int;
    a.max_total_mcast_qp_attach = (MAX_GROUPS * MAX_QPS_PER_GROUP) as c_int;
    a.max_srq = MAX_OBJECTS;
    a.max_srq_wr = MAX_WR as c_int;
    a.max_srq_sge = MAX_SGE as c_int;
    a.max_pkeys = 1;
    a.local_ca_ack_delay = 15;
    a.phys_port_cnt = 1;
    a
}

/// Slots of the GID table a port reports.
const GID_TABLE_SLOTS: usize = 16;

fn port_attr(c: &Ctx) -> ibv_port_attr {
    let attr = c.inner.attr();
    // SAFETY: plain C data; zero is valid for every field.
    let mut p: ibv_port_attr = unsafe { std::mem::zeroed() };
    // rxe's rule: ACTIVE while the netdev runs with carrier, DOWN otherwise.
    let up = c.inner.port_active();
    p.state = if up { IBV_PORT_ACTIVE } else { IBV_PORT_DOWN };
    p.max_mtu = IBV_MTU_4096;
    p.active_mtu = attr.active_mtu as u32;
    // A sparse table, as on rxe (1024 slots) and RoCE NICs: the interface's addresses
    // first, the rest empty (ibv_query_gid reads the zero GID there, ibv_query_gid_ex
    // ENODATA), so programs and rdma-core's tests can tell a free index from a used one.
    p.gid_tbl_len = attr.gids.entries().len().max(GID_TABLE_SLOTS) as c_int;
    p.port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_DEVICE_MGMT_SUP | IBV_PORT_VENDOR_CLASS_SUP;
    p.max_msg_sz = 1 << 31;
    p.pkey_tbl_len = 1;
    p.max_vl_num = 1;
    p.active_width = 1; // 1X
    p.active_speed = 1; // SDR: the link's real speed is the interface's
    p.phys_state = if up { 5 } else { 3 }; // LinkUp, Disabled (as rxe reports)
    p.link_layer = IBV_LINK_LAYER_ETHERNET as u8;
    let _ = MAX_INLINE;
    p
}

/// Copies the first `len` bytes of `value` to `out` (the caller's struct may be older and
/// shorter, or newer and longer: the rest is zeroed).
unsafe fn write_sized<T>(value: &T, out: *mut u8, len: usize) {
    let n = len.min(size_of::<T>());
    // SAFETY: the caller guarantees `out` has `len` writable bytes; `value` has size_of T.
    unsafe {
        std::ptr::copy_nonoverlapping(value as *const T as *const u8, out, n);
        if len > n {
            std::ptr::write_bytes(out.add(n), 0, len - n);
        }
    }
}

#[export_name = "__ferroce_ibv_query_device"]
pub unsafe extern "C" fn ibv_query_device(
    context: *mut ibv_context,
    device_attr_out: *mut ibv_device_attr,
) -> c_int {
    catch("ibv_query_device", libc::EIO, || {
        let Some(c) = ctx_of(context) else {
            return libc::EINVAL;
        };
        if device_attr_out.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: checked non-NULL; the caller passes a whole ibv_device_attr.
        unsafe { device_attr_out.write(device_attr(c)) };
        0
    })
}

/// `verbs_context.query_device_ex`: fills `attr_size` bytes (the caller's struct).
pub(crate) unsafe extern "C" fn query_device_ex(
    context: *mut ibv_context,
    _input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    catch("ibv_query_device_ex", libc::EIO, || {
        let Some(c) = ctx_of(context) else {
            return libc::EINVAL;
        };
        if attr.is_null() || attr_size < size_of::<ibv_device_attr>() {
            return libc::EINVAL;
        }
        // SAFETY: plain C data; zero is valid for every field.
        let mut ex: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        ex.orig_attr = device_attr(c);
        ex.phys_port_cnt_ex = 1;
        // SAFETY: the caller says `attr` has `attr_size` bytes.
        unsafe { write_sized(&ex, attr.cast(), attr_size) };
        0
    })
}

/// `verbs_context.query_port`: what the header's inline `ibv_query_port` calls.
pub(crate) unsafe extern "C" fn query_port_ex(
    context: *mut ibv_context,
    port_num: u8,
    port_attr_out: *mut ibv_port_attr,
    port_attr_len: usize,
) -> c_int {
    catch("ibv_query_port", libc::EIO, || {
        let Some(c) = ctx_of(context) else {
            return libc::EINVAL;
        };
        if port_num != 1 || port_attr_out.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller says `port_attr_out` has `port_attr_len` bytes.
        unsafe { write_sized(&port_attr(c), port_attr_out.cast(), port_attr_len) };
        0
    })
}

/// The exported `ibv_query_port`, which the header's inline version calls when a
/// context has no `query_port` op, and older binaries call directly. Its struct is opaque
/// in the header; every version of it has `ibv_port_attr`'s size (the old trailing
/// `reserved` byte and padding became `flags` and `port_cap_flags2`).
#[export_name = "__ferroce_ibv_query_port"]
pub unsafe extern "C" fn ibv_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr_out: *mut _compat_ibv_port_attr,
) -> c_int {
    // SAFETY: forwarded; the caller's struct has ibv_port_attr's size (see above).
    unsafe {
        query_port_ex(
            context,
            port_num,
            port_attr_out.cast(),
            size_of::<ibv_port_attr>(),
        )
    }
}

#[export_name = "__ferroce_ibv_query_gid"]
pub unsafe extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    catch("ibv_query_gid", -1, || {
        let Some(c) = ctx_of(context) else {
            return -1;
        };
        if port_num != 1 || gid.is_null() || index < 0 {
            return -1;
        }
        let g = c
            .inner
            .gid(index as usize)
            .map(|g| g.octets())
            .unwrap_or([0; 16]);
        // SAFETY: checked non-NULL; the caller passes one ibv_gid.
        unsafe { gid.write(ibv_gid { raw: g }) };
        // An index past the table reads as the zero GID, as with a sparse kernel table.
        0
    })
}

/// rdma-core's private `ibv_query_gid_type`, which librdmacm uses: every entry is RoCE v2
/// (`IBV_GID_TYPE_SYSFS_ROCE_V2`).
#[export_name = "__ferroce_ibv_query_gid_type"]
pub unsafe extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port_num: u8,
    index: c_uint,
    gid_type: *mut c_uint,
) -> c_int {
    catch("ibv_query_gid_type", libc::EIO, || {
        let Some(c) = ctx_of(context) else {
            return libc::EINVAL;
        };
        if port_num != 1 || gid_type.is_null() || c.inner.gid(index as usize).is_none() {
            return libc::EINVAL;
        }
        // SAFETY: checked non-NULL.
        unsafe { gid_type.write(1) };
        0
    })
}

fn gid_entry(c: &Ctx, index: usize) -> Option<ibv_gid_entry> {
    let g = c.inner.gid(index)?;
    Some(ibv_gid_entry {
        gid: ibv_gid { raw: g.octets() },
        gid_index: index as u32,
        port_num: 1,
        gid_type: IBV_GID_TYPE_ROCE_V2,
        ndev_ifindex: crate::device::dev_of(c.vctx.context.device).map_or(0, |d| d.ifindex()),
    })
}

#[export_name = "__ferroce__ibv_query_gid_ex"]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    _flags: u32,
    entry_size: usize,
) -> c_int {
    catch("ibv_query_gid_ex", libc::EIO, || {
        let Some(c) = ctx_of(context) else {
            return libc::EINVAL;
        };
        if port_num != 1 || entry.is_null() {
            return libc::EINVAL;
        }
        let Some(e) = gid_entry(c, gid_index as usize) else {
            return libc::ENODATA;
        };
        // SAFETY: the caller says `entry` has `entry_size` bytes.
        unsafe { write_sized(&e, entry.cast(), entry_size) };
        0
    })
}

#[export_name = "__ferroce__ibv_query_gid_table"]
pub unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    _flags: u32,
    entry_size: usize,
) -> isize {
    catch("ibv_query_gid_table", -(libc::EIO as isize), || {
        let Some(c) = ctx_of(context) else {
            return -(libc::EINVAL as isize);
        };
        if entries.is_null() || entry_size < size_of::<ibv_gid_entry>() {
            return -(libc::EINVAL as isize);
        }
        let n = c.inner.attr().gids.entries().len();
        if n > max_entries {
            return -(libc::EINVAL as isize);
        }
        for i in 0..n {
            let Some(e) = gid_entry(c, i) else { break };
            // SAFETY: room for max_entries entries of entry_size bytes (caller's contract).
            unsafe { write_sized(&e, (entries as *mut u8).add(i * entry_size), entry_size) };
        }
        n as isize
    })
}

#[export_name = "__ferroce_ibv_query_pkey"]
pub unsafe extern "C" fn ibv_query_pkey(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut __be16,
) -> c_int {
    if ctx_of(context).is_none() || port_num != 1 || pkey.is_null() {
        return -1;
    }
    // SAFETY: checked non-NULL.
    unsafe { pkey.write(if index == 0 { DEFAULT_PKEY.to_be() } else { 0 }) };
    0
}

#[export_name = "__ferroce_ibv_get_pkey_index"]
pub unsafe extern "C" fn ibv_get_pkey_index(
    context: *mut ibv_context,
    port_num: u8,
    pkey: __be16,
) -> c_int {
    if ctx_of(context).is_none() || port_num != 1 {
        return -1;
    }
    if u16::from_be(pkey) & 0x7fff == DEFAULT_PKEY & 0x7fff {
        0
    } else {
        -1
    }
}
