//! Process-wide tables that a child of `fork()` must not inherit.
//!
//! A child gets a copy of its parent's memory but none of its threads. The library's
//! tables of open devices, rdma_cm devices and listeners hold objects whose driver and
//! connection-manager threads stay in the parent; handed to the child, they answer
//! nothing (Python's multiprocessing runs rdma-core's rdma_cm tests so). Each such table
//! is a [`PerProcess`]: the first lock in a new process finds it empty.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// A table of this process's own: emptied, its inherited contents left as they are, at the
/// first lock after a `fork()`.
pub(crate) struct PerProcess<T> {
    inner: Mutex<(u32, Vec<T>)>,
}

impl<T> PerProcess<T> {
    pub(crate) const fn new() -> PerProcess<T> {
        PerProcess {
            inner: Mutex::new((0, Vec::new())),
        }
    }

    /// The table, as this process filled it.
    pub(crate) fn lock(&self) -> PerProcessGuard<'_, T> {
        let mut g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let me = std::process::id();
        if g.0 != me {
            // The parent's entries: never dropped here, since ending them would wait for
            // threads this process does not have.
            std::mem::forget(std::mem::take(&mut g.1));
            g.0 = me;
        }
        PerProcessGuard(g)
    }
}

/// A locked [`PerProcess`] table.
pub(crate) struct PerProcessGuard<'a, T>(MutexGuard<'a, (u32, Vec<T>)>);

impl<T> std::ops::Deref for PerProcessGuard<'_, T> {
    type Target = Vec<T>;
    fn deref(&self) -> &Vec<T> {
        &self.0 .1
    }
}

impl<T> std::ops::DerefMut for PerProcessGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.0 .1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_filled_by_another_process_is_empty_here_and_its_entries_live_on() {
        let t: PerProcess<std::sync::Arc<u8>> = PerProcess::new();
        let kept = std::sync::Arc::new(7);
        // As a parent (another pid) left it before fork().
        *t.inner.lock().unwrap() = (std::process::id().wrapping_add(1), vec![kept.clone()]);
        assert!(
            t.lock().is_empty(),
            "the parent's entries are not this process's"
        );
        assert_eq!(
            std::sync::Arc::strong_count(&kept),
            2,
            "and are not dropped"
        );
        t.lock().push(kept.clone());
        assert_eq!(t.lock().len(), 1, "this process's own stay");
    }
}
