//! HTTP/3 response streams and a server's unidirectional streams under
//! arbitrary bytes and splits.
#![no_main]

#[path = "../h3_streams.rs"]
mod h3_streams;

libfuzzer_sys::fuzz_target!(|data: &[u8]| h3_streams::run(data));
