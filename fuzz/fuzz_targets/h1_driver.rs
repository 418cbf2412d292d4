//! The HTTP/1.1 connection driver under arbitrary splits, EOFs, write sizes,
//! errors and timer firings.
#![no_main]

#[path = "../h1_driver.rs"]
mod h1_driver;

libfuzzer_sys::fuzz_target!(|data: &[u8]| h1_driver::run(data));
