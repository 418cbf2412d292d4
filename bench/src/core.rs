//! Scenario 6: the core alone. Acquire + release on a pool holding 10, 1 000
//! or 100 000 idle connections (over up to 1 000 Addresses), and decoding a
//! typical HTTP/1.1 response (200, 10 header fields, 1 KiB body). Timed here,
//! and counted in instructions under callgrind (exactly repeatable), where only
//! [`measured`] is collected, so setup never counts.

use std::time::{Duration, Instant as Clock};

use bytes::BytesMut;
use switchyard_core::http1::{Frame, Limits, ResponseDecoder};
use switchyard_core::{AcquireOptions, Address, Instant, Pool, PoolAction, Reuse};

/// A pool with `connections` idle connections.
pub struct Setup {
    pool: Pool,
    addresses: Vec<Address>,
    now: Instant,
    next: usize,
}

/// The same inputs as the core's divan benches.
#[path = "../../core/benches/support/fixtures.rs"]
#[allow(dead_code)]
mod fixtures;

pub use fixtures::typical_response;

/// A pool with `connections` idle connections.
/// Events off, as the adapters drive the pool when nothing listens
/// (`Pool::set_events`); `CORE_EVENTS=on` measures it queueing them (a
/// listener, or `tracing` at `debug`).
pub fn pool_with(connections: usize) -> Setup {
    let (mut pool, addresses, now) = fixtures::idle_pool(connections);
    pool.set_events(std::env::var_os("CORE_EVENTS").is_some_and(|v| v == "on"));
    Setup { pool, addresses, now, next: 0 }
}

/// One acquire served from the pool, then its release.
fn acquire_release(s: &mut Setup) {
    s.next = s.next.wrapping_add(7919);
    let address = s.addresses[s.next % s.addresses.len()].clone();
    s.now += Duration::from_micros(1);
    let call = s.pool.acquire(s.now, address, AcquireOptions::default());
    let Some(PoolAction::Acquired { .. }) = s.pool.poll_action() else { panic!("not served from the pool") };
    s.pool.exchange_finished(s.now, call, Reuse::Reusable).expect("released");
    while s.pool.poll_action().is_some() {}
    while s.pool.poll_event().is_some() {}
}

fn decode_once(input: &[u8]) -> usize {
    let mut buf = BytesMut::from(input);
    let mut d = ResponseDecoder::new(&http::Method::GET, Limits::default());
    let mut body = 0;
    loop {
        match d.decode(&mut buf, false).expect("valid") {
            Some(Frame::Data(b)) => body += b.len(),
            Some(Frame::End) => return body,
            Some(_) => {}
            None => panic!("incomplete"),
        }
    }
}

/// What to measure.
pub enum Op<'a> {
    /// Acquire + release on this pool.
    AcquireRelease(&'a mut Setup),
    /// Decode this response.
    Decode(&'a [u8]),
}

/// The measured loop: `ops` operations. Callgrind collects inside this
/// function only (`--toggle-collect=*core*measured*`).
#[inline(never)]
pub fn measured(op: &mut Op<'_>, ops: usize) -> usize {
    let mut sink = 0;
    for _ in 0..ops {
        match op {
            Op::AcquireRelease(s) => acquire_release(s),
            Op::Decode(input) => sink += decode_once(input),
        }
    }
    sink
}

/// Nanoseconds per operation, median of 5 timed batches.
pub fn time_per_op(op: &mut Op<'_>, ops: usize) -> f64 {
    measured(op, ops / 10); // warm-up
    let mut batches: Vec<f64> = (0..5)
        .map(|_| {
            let t = Clock::now();
            std::hint::black_box(measured(op, ops));
            t.elapsed().as_nanos() as f64 / ops as f64
        })
        .collect();
    batches.sort_by(f64::total_cmp);
    batches[2]
}
