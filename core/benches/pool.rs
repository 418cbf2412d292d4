//! Acquire + release on the core alone, at 10, 1 000 and 100 000 pooled
//! connections spread over up to 1 000 Addresses. The per-operation cost must stay
//! flat as the pool grows (no linear scans on the hot path).
//!
//! Run: `cargo bench -p switchyard-core --bench pool`
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use switchyard_core::{AcquireOptions, Address, Instant, Pool, PoolAction, PoolConfig, Reuse, Scheme};

fn main() {
    divan::main();
}

struct Setup {
    pool: Pool,
    addresses: Vec<Address>,
    now: Instant,
}

fn build(connections: usize) -> Setup {
    let address_count = connections.min(1000);
    let addresses: Vec<Address> = (0..address_count)
        .map(|i| Address::builder(Scheme::Http, "127.0.0.1", 1 + i as u32).build().unwrap())
        .collect();
    let mut pool = Pool::new(PoolConfig {
        keep_alive: Duration::from_secs(1_000_000),
        max_idle_per_address: usize::MAX,
        ..PoolConfig::default()
    });
    let mut now = Instant::ZERO;
    // Open every connection first (all calls in flight at once), then release them
    // all, so the pool ends with `connections` idle connections.
    let mut calls = Vec::with_capacity(connections);
    for i in 0..connections {
        let call = pool.acquire(now, addresses[i % address_count].clone(), AcquireOptions::default());
        let attempt = loop {
            match pool.poll_action() {
                Some(PoolAction::Connect { attempt, .. }) => break attempt,
                Some(_) => {}
                None => panic!("no connect"),
            }
        };
        pool.handle_connected(now, attempt).unwrap();
        while pool.poll_action().is_some() {}
        while pool.poll_event().is_some() {}
        calls.push(call);
    }
    for call in calls {
        now += Duration::from_micros(1);
        pool.exchange_finished(now, call, Reuse::Reusable).unwrap();
        while pool.poll_action().is_some() {}
        while pool.poll_event().is_some() {}
    }
    assert_eq!(pool.stats().totals.idle, connections);
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
