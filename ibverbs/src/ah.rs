//! Address handles for UD sends, also built from a received completion's GRH area.

use std::ffi::c_int;
use std::net::{Ipv4Addr, Ipv6Addr};

use ferroce::verbs::AddressHandle;
use ferroce_transport::AddressVector;

use crate::context::ctx_of;
use crate::ffi::*;
use crate::guard::{catch, errno_of, null_with};
use crate::handles::{self, Kind};
use crate::pd::pd_of;
use crate::qp::av_of;

#[repr(C)]
pub(crate) struct Ah {
    pub ibv: ibv_ah,
    pub av: AddressVector,
    pub inner: AddressHandle,
}

/// The AH behind `p`, if live.
pub(crate) fn ah_of(p: *const ibv_ah) -> Option<&'static Ah> {
    // SAFETY: live (checked), freed only by ibv_destroy_ah.
    handles::get(p as *const Ah, Kind::Ah).map(|p| unsafe { &*p })
}

#[export_name = "__ferroce_ibv_create_ah"]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    catch("ibv_create_ah", std::ptr::null_mut(), || {
        let Some(p) = pd_of(pd) else {
            return null_with(libc::EINVAL);
        };
        if attr.is_null() {
            return null_with(libc::EINVAL);
        }
        // SAFETY: checked non-NULL.
        let av = match av_of(unsafe { &*attr }) {
            Ok(av) => av,
            Err(e) => return null_with(e),
        };
        match p.inner.create_ah(av) {
            Ok(inner) => {
                let ibv = ibv_ah {
                    context: p.ibv.context,
                    pd,
                    handle: 0,
                };
                handles::insert(Box::new(Ah { ibv, av, inner }), Kind::Ah).cast()
            }
            Err(e) => {
                if let ferroce::verbs::Error::Resolve(r) = &e {
                    crate::hint::unreachable(av.dest_gid, r);
                }
                null_with(errno_of(&e))
            }
        }
    })
}

#[export_name = "__ferroce_ibv_destroy_ah"]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    catch("ibv_destroy_ah", libc::EIO, || {
        match handles::remove(ah as *mut Ah, Kind::Ah) {
            Some(a) => {
                drop(a);
                0
            }
            None => libc::EINVAL,
        }
    })
}

/// The sender's and receiver's GIDs, traffic class and hop limit from a UD receive
/// buffer's 40-byte GRH area: an IPv6 header, or an IPv4 header in its last 20 bytes.
fn parse_grh(g: &[u8; 40]) -> Option<(Ipv6Addr, Ipv6Addr, u8, u8)> {
    if g[0] >> 4 == 6 {
        let src: [u8; 16] = g[8..24].try_into().ok()?;
        let dst: [u8; 16] = g[24..40].try_into().ok()?;
        let tclass = (g[0] << 4) | (g[1] >> 4);
        return Some((src.into(), dst.into(), tclass, g[7]));
    }
    let ip = &g[20..];
    if ip[0] >> 4 == 4 {
        let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]).to_ipv6_mapped();
        let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]).to_ipv6_mapped();
        return Some((src, dst, ip[1], ip[8]));
    }
    None
}

#[export_name = "__ferroce_ibv_init_ah_from_wc"]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    catch("ibv_init_ah_from_wc", -1, || {
        let Some(c) = ctx_of(context) else {
            return -1;
        };
        if wc.is_null() || grh.is_null() || ah_attr.is_null() || port_num != 1 {
            return -1;
        }
        // SAFETY: checked non-NULL; the GRH area is 40 bytes (sizeof(struct ibv_grh)).
        let bytes: [u8; 40] = unsafe { std::ptr::read(grh.cast()) };
        let Some((src, dst, tclass, _hops)) = parse_grh(&bytes) else {
            return -1;
        };
        let Some(sgid_index) = c.inner.attr().gids.index_of(dst) else {
            return -1;
        };
        let mut a = crate::qp::ah_attr_of(&AddressVector {
            dest_gid: src,
            sgid_index: sgid_index as u8,
            traffic_class: tclass,
            hop_limit: 0xff,
            flow_label: 0,
        });
        a.port_num = port_num;
        // SAFETY: checked non-NULL.
        unsafe { ah_attr.write(a) };
        0
    })
}

#[export_name = "__ferroce_ibv_create_ah_from_wc"]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port_num: u8,
) -> *mut ibv_ah {
    let Some(p) = pd_of(pd) else {
        return null_with(libc::EINVAL);
    };
    // SAFETY: plain C data; zero is valid.
    let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
    // SAFETY: forwarded contract; `a` is a local.
    if unsafe { ibv_init_ah_from_wc(p.ibv.context, port_num, wc, grh, &mut a) } != 0 {
        return null_with(libc::EINVAL);
    }
    // SAFETY: forwarded; `a` is a local.
    unsafe { ibv_create_ah(pd, &mut a) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv4_header_in_the_last_20_bytes_gives_mapped_gids() {
        let mut g = [0u8; 40];
        g[20] = 0x45;
        g[21] = 0x02; // tos
        g[28] = 64; // ttl
        g[32..36].copy_from_slice(&[10, 0, 0, 1]);
        g[36..40].copy_from_slice(&[10, 0, 0, 2]);
        let (src, dst, tc, hops) = parse_grh(&g).unwrap();
        assert_eq!(src, Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped());
        assert_eq!(dst, Ipv4Addr::new(10, 0, 0, 2).to_ipv6_mapped());
        assert_eq!((tc, hops), (2, 64));
        assert!(parse_grh(&[0; 40]).is_none(), "no header: no path");
    }
}
