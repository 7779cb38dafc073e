//! How the library is built: the speed of every C program on ferroce depends on it.

fn manifest(text: &str) -> toml::Table {
    text.parse().expect("a Cargo.toml parses")
}

/// Cargo runs the workspace's `lto = "fat"` only on a crate whose every output can take
/// it: with an rlib beside the cdylib, libibverbs.so was built without LTO and perftest on
/// it ran 64 KiB WRITEs at MTU 1500 11% slower (4 KiB 16%) than with it, wire's small
/// accessors left out of line (`ferroce exec -- ib_write_bw`, 2026-12-03).
#[test]
fn the_library_is_a_cdylib_alone_so_that_release_builds_take_lto() {
    let ours = manifest(include_str!("../Cargo.toml"));
    let types = ours.get("lib").and_then(|l| l.get("crate-type"));
    assert_eq!(
        types,
        Some(&toml::Value::Array(vec!["cdylib".into()])),
        "another crate type beside the cdylib turns LTO off for libibverbs.so"
    );
    let workspace = manifest(include_str!("../../Cargo.toml"));
    let lto = workspace
        .get("profile")
        .and_then(|p| p.get("release"))
        .and_then(|r| r.get("lto"))
        .and_then(|l| l.as_str());
    assert_eq!(lto, Some("fat"));
}
