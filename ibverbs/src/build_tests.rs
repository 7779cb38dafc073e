//! How the library is built: the speed of every C program on ferroce depends on it.

/// The lines of `manifest` that set `key`, trimmed.
fn settings<'a>(manifest: &'a str, key: &str) -> Vec<&'a str> {
    manifest
        .lines()
        .map(str::trim)
        .filter(|l| l.split('=').next().map(str::trim) == Some(key))
        .collect()
}

/// Cargo runs the workspace's `lto = "fat"` only on a crate whose every output can take
/// it: with an rlib beside the cdylib, libibverbs.so was built without LTO and perftest on
/// it ran 64 KiB WRITEs at MTU 1500 11% slower (4 KiB 16%) than with it, wire's small
/// accessors left out of line (`ferroce exec -- ib_write_bw`, 2026-12-03).
#[test]
fn the_library_is_a_cdylib_alone_so_that_release_builds_take_lto() {
    let ours = include_str!("../Cargo.toml");
    assert_eq!(
        settings(ours, "crate-type"),
        [r#"crate-type = ["cdylib"]"#],
        "another crate type beside the cdylib turns LTO off for libibverbs.so"
    );
    let workspace = include_str!("../../Cargo.toml");
    let release = workspace
        .split("[profile.release]")
        .nth(1)
        .and_then(|s| s.split("\n[").next())
        .expect("the workspace has a [profile.release]");
    assert_eq!(settings(release, "lto"), [r#"lto = "fat""#]);
}

#[test]
fn settings_finds_only_the_key_itself() {
    let m = "name = \"x\"\n  crate-type = [\"a\"]\n# crate-type = [\"b\"]\ncrate-types = 1\n";
    assert_eq!(settings(m, "crate-type"), [r#"crate-type = ["a"]"#]);
}
