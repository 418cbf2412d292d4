//! Replays the `pool_ops` fuzz corpus and a batch of seeded random inputs
//! through the same harness as the fuzz target, so `cargo test` catches
//! regressions without the fuzz tooling.
#![allow(clippy::unwrap_used)]

#[path = "../../fuzz/pool_ops.rs"]
mod pool_ops;

#[test]
fn corpus_replays() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/pool_ops");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 10, "seed corpus missing");
    for f in files {
        pool_ops::run(&std::fs::read(&f).unwrap());
    }
}

#[test]
fn seeded_random_inputs() {
    let mut x: u64 = 0x5eed;
    for _ in 0..3000 {
        let mut data = Vec::with_capacity(512);
        for _ in 0..512 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            data.push((x >> 24) as u8);
        }
        pool_ops::run(&data);
    }
}
