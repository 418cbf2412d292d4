//! Arbitrary (and nonsensical) operation sequences against the whole core.
#![no_main]

#[path = "../pool_ops.rs"]
mod pool_ops;

libfuzzer_sys::fuzz_target!(|data: &[u8]| pool_ops::run(data));
