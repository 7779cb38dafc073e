//! The objects handed to C, and the table of live ones: every pointer a caller passes in
//! is looked up before it is used, so NULL, a pointer of the wrong kind, or one already
//! destroyed gets EINVAL instead of a crash inside ferroce.

use std::collections::HashMap;
use std::sync::{LazyLock, PoisonError, RwLock};

/// What a live pointer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Context,
    Pd,
    Mr,
    Mw,
    Cq,
    Channel,
    Qp,
    Srq,
    Ah,
    CmChannel,
    CmId,
    CmEvent,
}

/// C address → kind of every object alive.
static LIVE: LazyLock<RwLock<HashMap<usize, Kind>>> = LazyLock::new(Default::default);

/// Makes `obj` live; returns the pointer C sees (`addr_of` its C struct inside).
pub(crate) fn insert<T>(obj: Box<T>, kind: Kind) -> *mut T {
    let p = Box::into_raw(obj);
    LIVE.write()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(p as usize, kind);
    p
}

/// `p` if it is a live object of `kind`, else None.
pub(crate) fn get<T>(p: *const T, kind: Kind) -> Option<*mut T> {
    let live = LIVE.read().unwrap_or_else(PoisonError::into_inner);
    (!p.is_null() && live.get(&(p as usize)) == Some(&kind)).then_some(p as *mut T)
}

/// Ends `p`'s life: the box back, if `p` was a live object of `kind`.
pub(crate) fn remove<T>(p: *mut T, kind: Kind) -> Option<Box<T>> {
    let mut live = LIVE.write().unwrap_or_else(PoisonError::into_inner);
    if p.is_null() || live.get(&(p as usize)) != Some(&kind) {
        return None;
    }
    live.remove(&(p as usize));
    // SAFETY: `p` came from `Box::into_raw` in `insert` (the table holds nothing else)
    // and leaves the table here, once.
    Some(unsafe { Box::from_raw(p) })
}
