//! Where the built library is, for tests that load or inspect it.

use std::path::PathBuf;

/// `target/<profile>/libibverbs.so`, which cargo builds beside the test binaries.
pub fn built_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>");
    let lib = dir.join("libibverbs.so");
    assert!(
        lib.exists(),
        "{} is missing: build the ferroce-ibverbs cdylib",
        lib.display()
    );
    lib
}

/// The libibverbs.so.1 Debian's libibverbs1 package installs.
pub fn debian_library() -> PathBuf {
    let p = PathBuf::from("/usr/lib/x86_64-linux-gnu/libibverbs.so.1");
    assert!(
        p.exists(),
        "{} is missing: install Debian's libibverbs1 (scripts/test.sh does)",
        p.display()
    );
    p
}

/// The librdmacm.so.1 Debian's librdmacm1 package installs.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn debian_rdmacm() -> PathBuf {
    let p = PathBuf::from("/usr/lib/x86_64-linux-gnu/librdmacm.so.1");
    assert!(
        p.exists(),
        "{} is missing: install Debian's librdmacm1 (scripts/test.sh does)",
        p.display()
    );
    p
}
