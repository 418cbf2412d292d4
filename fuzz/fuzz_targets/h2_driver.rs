//! The HTTP/2 connection driver under hostile frames, floods and arbitrary
//! splits, interleaved with the caller's side.
#![no_main]

#[path = "../h2_driver.rs"]
mod h2_driver;

libfuzzer_sys::fuzz_target!(|data: &[u8]| h2_driver::run(data));
