//! Acquire + release on the core alone, at 10, 1 000 and 100 000 pooled
//! connections spread over up to 1 000 Addresses. The per-operation cost must stay
//! flat as the pool grows (no linear scans on the hot path).
//!
//! Run: `cargo bench -p switchyard-core --bench pool`
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use switchyard_core::{AcquireOptions, Address, Instant, Pool, PoolAction, Reuse};

fn main() {
    divan::main();
}

#[path = "support/fixtures.rs"]
#[allow(dead_code, unreachable_pub)] // each bench uses half of it
mod fixtures;

struct Setup {
    pool: Pool,
    addresses: Vec<Address>,
    now: Instant,
}

fn build(connections: usize) -> Setup {
    let (pool, addresses, now) = fixtures::idle_pool(connections);
    Setup { pool, addresses, now }
}

#[divan::bench(args = [10, 1_000, 100_000], sample_count = 50, sample_size = 2_000)]
fn acquire_release(bencher: divan::Bencher<'_, '_>, connections: usize) {
    let mut s = build(connections);
    let mut i = 0usize;
    bencher.bench_local(|| {
        i = i.wrapping_add(7919);
        let address = s.addresses[i % s.addresses.len()].clone();
        s.now += Duration::from_micros(1);
        let call = s.pool.acquire(s.now, address, AcquireOptions::default());
        let Some(PoolAction::Acquired { .. }) = s.pool.poll_action() else {
            panic!("not served from the pool")
        };
        s.pool.exchange_finished(s.now, call, Reuse::Reusable).unwrap();
        while s.pool.poll_action().is_some() {}
        while s.pool.poll_event().is_some() {}
    });
}
