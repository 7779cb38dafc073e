//! ferroce's libibverbs.so.1 exports every function and variable Debian's exports, at the
//! same version (default and hidden compat ones), so programs and provider libraries
//! built against rdma-core bind to it; and, as it serves as librdmacm.so.1 too, every one
//! of Debian's librdmacm.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// (name, version) of every dynamic symbol whose version names `family`, hidden versions
/// in parentheses, without the version-node markers (`*ABS*`).
fn versioned_symbols(lib: &Path, family: &str) -> BTreeSet<(String, String)> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(lib)
        .output()
        .expect("objdump (binutils) runs");
    assert!(out.status.success(), "objdump -T {} failed", lib.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| (l.contains(" DF ") || l.contains(" DO ")) && !l.contains("*ABS*"))
        .filter(|l| !l.contains("*UND*"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (ver, name) = (f[f.len() - 2], f[f.len() - 1]);
            ver.contains(family)
                .then(|| (name.to_string(), ver.to_string()))
        })
        .collect()
}

#[test]
fn every_symbol_of_debians_libibverbs_is_exported_at_its_version() {
    let theirs = versioned_symbols(&common::debian_library(), "IBVERBS");
    assert!(theirs.len() > 150, "read too few symbols: {theirs:?}");
    let ours = versioned_symbols(&common::built_library(), "IBVERBS");
    let missing: Vec<_> = theirs.difference(&ours).collect();
    assert!(
        missing.is_empty(),
        "missing from ferroce's libibverbs: {missing:?}"
    );
}

#[test]
fn every_symbol_of_debians_librdmacm_is_exported_at_its_version() {
    let theirs = versioned_symbols(&common::debian_rdmacm(), "RDMACM");
    assert!(theirs.len() > 60, "read too few symbols: {theirs:?}");
    let ours = versioned_symbols(&common::built_library(), "RDMACM");
    let missing: Vec<_> = theirs.difference(&ours).collect();
    assert!(
        missing.is_empty(),
        "missing from ferroce's librdmacm: {missing:?}"
    );
}

#[test]
fn the_soname_is_libibverbs_so_1() {
    let out = Command::new("objdump")
        .arg("-p")
        .arg(common::built_library())
        .output()
        .expect("objdump runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().eq(["SONAME", "libibverbs.so.1"])),
        "{text}"
    );
}
