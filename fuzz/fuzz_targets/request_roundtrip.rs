//! Encode a random request with a chunked body, decode it with an independent test
//! decoder, compare.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::check_roundtrip(data));
