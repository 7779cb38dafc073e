//! Names the shared library `libibverbs.so.1` (its SONAME), so that programs linked
//! against rdma-core's libibverbs bind to it when it is first on their library path, and
//! declares rdma-core's symbol version nodes (libibverbs.map) for src/exports.rs.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo");
    println!("cargo:rerun-if-changed=libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/libibverbs.map");
}
