//! `Alt-Svc` field values and the alternative-service cache under arbitrary
//! input and operation sequences.
#![no_main]

#[path = "../alt_svc.rs"]
mod alt_svc;

libfuzzer_sys::fuzz_target!(|data: &[u8]| alt_svc::run(data));
