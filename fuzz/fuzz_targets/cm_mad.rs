#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferroce_fuzz::cm_mad(data));
