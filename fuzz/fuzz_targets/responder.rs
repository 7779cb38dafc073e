#![no_main]

// The body is shared with the stable test transport/tests/fuzz_responder.rs; it needs
// ferroce-transport, so it lives beside lib.rs rather than in it (see fuzz/README.md).
#[allow(dead_code)]
#[path = "../src/transport_bodies.rs"]
mod transport_bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| transport_bodies::responder(data));
