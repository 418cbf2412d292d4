//! The response decoder fed arbitrary bytes in arbitrary splits: no panic, bounded
//! work, and the same outcome whole, split, and byte by byte.
#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::check_split_invariance(data));
