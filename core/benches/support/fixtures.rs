//! Inputs shared by the core's divan benches and `switchyard-bench`'s scenario 6
//! (which includes this file), so both measure the same thing.

use std::time::Duration;

use switchyard_core::{AcquireOptions, Address, Instant, Pool, PoolAction, PoolConfig, Reuse, Scheme};

/// A typical response: 200, 10 header fields, a 1 KiB body.
pub fn typical_response() -> Vec<u8> {
    let mut r = b"HTTP/1.1 200 OK\r\n".to_vec();
    for (n, v) in [
        ("date", "Sun, 29 Nov 2026 20:00:00 GMT"),
        ("server", "bench"),
        ("content-type", "application/json; charset=utf-8"),
        ("cache-control", "no-cache, no-store"),
        ("x-request-id", "7f3c2a9e-54b1-4c1e-9a55-0c8d3b2e1f00"),
        ("vary", "accept-encoding"),
        ("etag", "\"33a64df551425fcc55e4d42a148795d9f25f89d4\""),
        ("x-frame-options", "DENY"),
        ("strict-transport-security", "max-age=63072000"),
        ("content-length", "1024"),
    ] {
        r.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
    }
    r.extend_from_slice(b"\r\n");
    r.extend(std::iter::repeat_n(b'x', 1024));
    r
}

/// A pool holding `connections` idle connections over up to 1 000 Addresses:
/// every connection opened (all calls in flight at once), then all released.
pub fn idle_pool(connections: usize) -> (Pool, Vec<Address>, Instant) {
    let address_count = connections.clamp(1, 1000);
    let addresses: Vec<Address> = (0..address_count)
        .map(|i| Address::builder(Scheme::Http, "127.0.0.1", 1 + i as u32).build().expect("address"))
        .collect();
    let mut pool = Pool::new(PoolConfig {
        keep_alive: Duration::from_secs(1_000_000),
        max_idle_per_address: usize::MAX,
        max_idle_total: None,
        ..PoolConfig::default()
    });
    let mut now = Instant::ZERO;
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
        pool.handle_connected(now, attempt).expect("connected");
        while pool.poll_action().is_some() {}
        while pool.poll_event().is_some() {}
        calls.push(call);
    }
    for call in calls {
        now += Duration::from_micros(1);
        pool.exchange_finished(now, call, Reuse::Reusable).expect("released");
        while pool.poll_action().is_some() {}
        while pool.poll_event().is_some() {}
    }
    assert_eq!(pool.stats().totals.idle, connections);
    (pool, addresses, now)
}
