//! Replays the fuzz corpora (`pool_ops`, `h1_driver`, `h2_driver`, `alt_svc`, `h3_streams`) and a batch of seeded
//! random inputs through the same harnesses as the fuzz targets, so `cargo
//! test` catches regressions without the fuzz tooling.
#![allow(clippy::unwrap_used)]

#[path = "../../fuzz/alt_svc.rs"]
mod alt_svc;
#[path = "../../fuzz/h1_driver.rs"]
mod h1_driver;
#[path = "../../fuzz/h2_driver.rs"]
mod h2_driver;
#[path = "../../fuzz/h3_streams.rs"]
mod h3_streams;
#[path = "../../fuzz/pool_ops.rs"]
mod pool_ops;

fn corpus(target: &str, at_least: usize, run: fn(&[u8])) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= at_least, "{target}: seed corpus missing");
    for f in files {
        run(&std::fs::read(&f).unwrap());
    }
}

/// `count` inputs of `len` bytes from a fixed xorshift seed.
fn seeded(seed: u64, count: usize, len: usize, run: fn(&[u8])) {
    let mut x = seed;
    for _ in 0..count {
        let mut data = Vec::with_capacity(len);
        for _ in 0..len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            data.push((x >> 24) as u8);
        }
        run(&data);
    }
}

#[test]
fn pool_ops_corpus_replays() {
    corpus("pool_ops", 10, pool_ops::run);
}

#[test]
fn pool_ops_seeded_random_inputs() {
    seeded(0x5eed, 3000, 512, pool_ops::run);
}

#[test]
fn h1_driver_corpus_replays() {
    corpus("h1_driver", 10, h1_driver::run);
}

#[test]
fn h1_driver_seeded_random_inputs() {
    seeded(0xd71e, 3000, 256, h1_driver::run);
}

#[test]
fn h2_driver_corpus_replays() {
    corpus("h2_driver", 10, h2_driver::run);
}

#[test]
fn h2_driver_seeded_random_inputs() {
    seeded(0x4832, 3000, 512, h2_driver::run);
}

#[test]
fn alt_svc_corpus_replays() {
    corpus("alt_svc", 10, alt_svc::run);
}

#[test]
fn alt_svc_seeded_random_inputs() {
    seeded(0xa175, 3000, 256, alt_svc::run);
}

#[test]
fn h3_streams_corpus_replays() {
    corpus("h3_streams", 10, h3_streams::run);
}

#[test]
fn h3_streams_seeded_random_inputs() {
    seeded(0x4833, 3000, 256, h3_streams::run);
}
