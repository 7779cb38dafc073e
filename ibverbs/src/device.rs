//! The device list: one device per Ethernet interface with an address, named after the
//! interface (as `ferroce devices` lists them).

use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use ferroce::verbs::Device;

use crate::ffi::*;
use crate::guard::{catch, null_with};

/// A device as C sees it. Devices live for the whole process (a program may keep an
/// `ibv_device *` after freeing the list), one per interface name.
#[repr(C)]
pub(crate) struct Dev {
    pub ibv: ibv_device,
    /// The node GUID and interface index of the interface now under the name (an
    /// interface made again under it has a new index), updated at each listing while
    /// other threads may read them: atomics.
    pub guid: AtomicU64,
    pub ifindex: AtomicU32,
}

impl Dev {
    /// The index of the interface under its name, as of the last listing.
    pub(crate) fn ifindex(&self) -> u32 {
        self.ifindex.load(Ordering::Relaxed)
    }
}

// SAFETY: the C struct holds no pointers that are used from Rust; everything is plain data.
unsafe impl Send for Dev {}

/// Every device ever listed; never shrinks, and each is boxed so that its address stays
/// valid while the list grows.
#[allow(clippy::vec_box)]
static DEVICES: Mutex<Vec<Box<Dev>>> = Mutex::new(Vec::new());

fn copy_str(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = *b as c_char;
    }
    dst[n] = 0;
}

/// The `ibv_device` for `d`, made on first sight.
pub(crate) fn device_for(d: &Device) -> *mut ibv_device {
    let mut all = DEVICES.lock().unwrap_or_else(PoisonError::into_inner);
    // Shared references only: other threads may hold this device (`dev_of`).
    let found = all.iter().position(|x| name_of(&x.ibv) == d.name());
    let dev: &Dev = match found {
        Some(i) => &all[i],
        None => {
            // SAFETY: ibv_device is plain C data; all-zero is a valid value of it.
            let mut ibv: ibv_device = unsafe { std::mem::zeroed() };
            ibv.node_type = IBV_NODE_CA;
            ibv.transport_type = IBV_TRANSPORT_IB;
            copy_str(&mut ibv.name, d.name());
            copy_str(&mut ibv.dev_name, &d.dev_name());
            copy_str(&mut ibv.dev_path, "/sys/class/infiniband_verbs/ferroce");
            copy_str(
                &mut ibv.ibdev_path,
                &format!("/sys/class/infiniband/{}", d.name()),
            );
            all.push(Box::new(Dev {
                ibv,
                guid: AtomicU64::new(d.node_guid()),
                ifindex: AtomicU32::new(d.interface().index),
            }));
            all.last().expect("just pushed")
        }
    };
    dev.guid.store(d.node_guid(), Ordering::Relaxed);
    dev.ifindex.store(d.interface().index, Ordering::Relaxed);
    // C takes `ibv_device *` (not const) and writes nothing through it.
    std::ptr::from_ref(&dev.ibv).cast_mut()
}

fn name_of(d: &ibv_device) -> String {
    // SAFETY: `name` is NUL-terminated by `copy_str`.
    unsafe { CStr::from_ptr(d.name.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// A device pointer C passed in, if it is one of ours.
pub(crate) fn dev_of(p: *const ibv_device) -> Option<&'static Dev> {
    let all = DEVICES.lock().unwrap_or_else(PoisonError::into_inner);
    let d = all.iter().find(|x| std::ptr::eq(&x.ibv, p))?;
    // SAFETY: devices are never freed or moved (boxed, the list only grows).
    Some(unsafe { &*(d.as_ref() as *const Dev) })
}

/// The interface name of a device.
pub(crate) fn device_name(d: &Dev) -> String {
    name_of(&d.ibv)
}

#[export_name = "__ferroce_ibv_get_device_list"]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    catch("ibv_get_device_list", std::ptr::null_mut(), || {
        crate::log::init();
        let devs: Vec<*mut ibv_device> = Device::list().iter().map(device_for).collect();
        // The caller frees the array with ibv_free_device_list: malloc'd, NULL-terminated.
        let size = std::mem::size_of::<*mut ibv_device>() * (devs.len() + 1);
        // SAFETY: plain allocation of `size` bytes, checked below.
        let arr = unsafe { libc::malloc(size) } as *mut *mut ibv_device;
        if arr.is_null() {
            return null_with(libc::ENOMEM);
        }
        for (i, d) in devs.iter().chain([&std::ptr::null_mut()]).enumerate() {
            // SAFETY: `arr` has room for devs.len() + 1 pointers.
            unsafe { arr.add(i).write(*d) };
        }
        if !num_devices.is_null() {
            // SAFETY: the caller passes a valid int pointer or NULL (checked).
            unsafe { *num_devices = devs.len() as c_int };
        }
        arr
    })
}

#[export_name = "__ferroce_ibv_free_device_list"]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: `list` came from ibv_get_device_list's malloc (or is NULL: a no-op).
    unsafe { libc::free(list.cast()) }
}

#[export_name = "__ferroce_ibv_get_device_name"]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    match dev_of(device) {
        Some(d) => d.ibv.name.as_ptr(),
        None => null_with::<c_char>(libc::EINVAL),
    }
}

#[export_name = "__ferroce_ibv_get_device_guid"]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> __be64 {
    dev_of(device).map_or(0, |d| d.guid.load(Ordering::Relaxed).to_be())
}

#[export_name = "__ferroce_ibv_get_device_index"]
pub unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    dev_of(device).map_or(-1, |d| d.ifindex() as c_int)
}
