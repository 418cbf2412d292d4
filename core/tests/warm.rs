//! Warm connections (BEHAVIOUR §11) on virtual time: the minimum at start, a
//! closed connection replaced at once, exact backoff with a fixed seed (cap
//! respected) and recovery, `Down` after the deadline, the idle timeout never
//! below the minimum, HTTP/2 stream minimums, and shutdown.
#![allow(clippy::unwrap_used)]

#[path = "support/pool.rs"]
mod support;

use std::time::Duration;

use support::{http, ms, tls, PoolSim};
use switchyard_core::{
    Backoff, CloseReason, ConnectError, EventKind, Misuse, PoolConfig, Protocol, Readiness, Reuse, WarmPolicy,
};

fn refused() -> ConnectError {
    ConnectError::from_io(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
}

fn policy(min: usize) -> WarmPolicy {
    WarmPolicy { min_connections: min, ..WarmPolicy::default() }
}

/// The readiness events, in order.
fn readiness(sim: &PoolSim) -> Vec<Readiness> {
    sim.events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::WarmReadiness { readiness, .. } => Some(*readiness),
            _ => None,
        })
        .collect()
}

/// The calls of the connects in `out` (`connect call#N addr`).
fn connecting(out: &[String]) -> Vec<String> {
    out.iter()
        .filter(|s| s.starts_with("connect "))
        .map(|s| s.split(' ').nth(1).unwrap().to_owned())
        .collect()
}

/// Connects every warm attempt in flight at `t`.
fn connect_all(sim: &mut PoolSim, t: u64) -> Vec<String> {
    let attempts: Vec<_> = sim.attempts.values().filter_map(|v| v.last().copied()).collect();
    let mut out = Vec::new();
    for a in attempts {
        if sim.pool.handle_connected(ms(t), a).is_ok() {
            out.extend(sim.drain());
        }
    }
    sim.attempts.clear();
    out
}

#[test]
fn the_minimum_is_open_before_any_call_and_calls_use_it() {
    let mut sim = PoolSim::new(PoolConfig::default());
    let a = http("127.0.0.1");
    sim.pool.warm(ms(0), a.clone(), policy(3)).unwrap();
    let out = sim.drain();
    assert_eq!(connecting(&out).len(), 3, "three connects, no caller: {out:?}");
    assert_eq!(sim.pool.warm_status(ms(0), &a).unwrap().readiness, Readiness::Warming);
    let out = connect_all(&mut sim, 5);
    assert_eq!(out.iter().filter(|s| s.starts_with("established")).count(), 3, "{out:?}");
    assert!(!out.iter().any(|s| s.starts_with("acquired")), "nobody asked: {out:?}");
    let status = sim.pool.warm_status(ms(5), &a).unwrap();
    assert_eq!((status.readiness, status.open, status.idle, status.wanted), (Readiness::Ready, 3, 3, 3));
    assert_eq!(readiness(&sim), [Readiness::Warming, Readiness::Ready]);
    // The first call opens nothing.
    let c = sim.acquire(6, &a);
    let out = sim.drain();
    assert_eq!(out.len(), 1);
    assert!(out[0].starts_with(&format!("acquired {c} ")) && out[0].ends_with("Pooled"), "{out:?}");
    let s = sim.pool.stats();
    assert_eq!((s.created, s.tcp_connects), (3, 3));
}

#[test]
fn a_closed_connection_is_replaced_at_once() {
    let mut sim = PoolSim::new(PoolConfig::default());
    let a = http("127.0.0.1");
    sim.pool.warm(ms(0), a.clone(), policy(2)).unwrap();
    sim.drain();
    connect_all(&mut sim, 1);
    // The server closes one of them: a new connect starts in the same input.
    let k = sim.open_connections()[0];
    sim.pool.connection_closed(ms(10), k, CloseReason::Failure).unwrap();
    let out = sim.drain();
    assert_eq!(connecting(&out).len(), 1, "replaced at once: {out:?}");
    assert_eq!(sim.pool.warm_status(ms(10), &a).unwrap().readiness, Readiness::Degraded);
    connect_all(&mut sim, 12);
    assert_eq!(sim.pool.warm_status(ms(12), &a).unwrap().readiness, Readiness::Ready);
    assert_eq!(
        readiness(&sim),
        [Readiness::Warming, Readiness::Ready, Readiness::Degraded, Readiness::Ready]
    );
    // A connection retired after an exchange (`Connection: close`) is replaced too.
    let c = sim.acquire(20, &a);
    sim.drain();
    sim.pool.exchange_finished(ms(21), c, Reuse::Retire(CloseReason::ServerClose)).unwrap();
    let out = sim.drain();
    assert_eq!(connecting(&out).len(), 1, "a retired connection is replaced: {out:?}");
}

#[test]
fn a_failing_server_backs_off_exactly_with_its_cap_then_recovers() {
    let backoff = Backoff { jitter: 0.0, max: Duration::from_secs(5), ..Backoff::default() };
    let p = WarmPolicy { backoff, down_after: Duration::from_secs(10), ..policy(1) };
    let mut sim = PoolSim::new(PoolConfig::default());
    let a = http("127.0.0.1");
    sim.pool.warm(ms(0), a.clone(), p).unwrap();
    sim.drain();
    // 1 s, 1.6 s, 2.56 s, 4.096 s, then the 5 s cap.
    let mut t = 0u64;
    let mut delays = Vec::new();
    for _ in 0..7 {
        let attempt = *sim.attempts.values().next_back().unwrap().last().unwrap();
        sim.attempts.clear();
        sim.pool.handle_failed(ms(t), attempt, refused()).unwrap();
        let out = sim.drain();
        assert!(connecting(&out).is_empty(), "no connect before the delay: {out:?}");
        let status = sim.pool.warm_status(ms(t), &a).unwrap();
        let next = status.next_retry.unwrap();
        let next_ms = (next - switchyard_core::Instant::ZERO).as_millis() as u64;
        delays.push(next_ms - t);
        assert!(status.last_error.unwrap().contains("refused"));
        // Nothing happens before it: the pool's next deadline is the retry (or Down).
        let due = sim.pool.poll_timeout().unwrap();
        assert!(due <= next);
        t = next_ms;
        let out = sim.timeout_to(t);
        assert_eq!(connecting(&out).len(), 1, "the retry at {t} ms: {out:?}");
    }
    assert_eq!(delays, [1000, 1600, 2560, 4096, 5000, 5000, 5000]);
    // Past 10 s without a connection: down, with the error.
    assert!(t > 10_000);
    assert!(readiness(&sim).contains(&Readiness::Down), "{:?}", readiness(&sim));
    assert_eq!(readiness(&sim)[..2], [Readiness::Warming, Readiness::Degraded]);
    // The server is back: ready, and the backoff is reset.
    connect_all(&mut sim, t + 3);
    let status = sim.pool.warm_status(ms(t + 3), &a).unwrap();
    assert_eq!((status.readiness, status.failures, status.next_retry), (Readiness::Ready, 0, None));
}

#[test]
fn jitter_comes_from_the_seed() {
    let run = |seed: u64| {
        let mut sim = PoolSim::new(PoolConfig { seed, ..PoolConfig::default() });
        let a = http("127.0.0.1");
        sim.pool.warm(ms(0), a.clone(), policy(1)).unwrap();
        sim.drain();
        let mut t = 0u64;
        let mut delays = Vec::new();
        for _ in 0..5 {
            let attempt = *sim.attempts.values().next_back().unwrap().last().unwrap();
            sim.attempts.clear();
            sim.pool.handle_failed(ms(t), attempt, refused()).unwrap();
            sim.drain();
            let next = sim.pool.warm_status(ms(t), &a).unwrap().next_retry.unwrap();
            let next_ms = (next - switchyard_core::Instant::ZERO).as_millis() as u64;
            delays.push(next_ms - t);
            t = next_ms;
            sim.timeout_to(t);
        }
        delays
    };
    let (a, b, c) = (run(7), run(7), run(8));
    assert_eq!(a, b, "the same seed, the same delays");
    assert_ne!(a, c, "another seed, other delays");
    for (i, d) in a.iter().enumerate() {
        let base = 1000.0 * 1.6f64.powi(i32::try_from(i).unwrap());
        let d = *d as f64;
        assert!(d >= (base * 0.8).floor() && d <= (base * 1.2).ceil(), "delay {i}: {d} vs {base}");
    }
}

#[test]
fn the_idle_timeout_never_drops_below_the_minimum() {
    let config = PoolConfig { keep_alive: Duration::from_millis(100), ..PoolConfig::default() };
    let mut sim = PoolSim::new(config);
    let a = http("127.0.0.1");
    sim.pool.warm(ms(0), a.clone(), policy(2)).unwrap();
    sim.drain();
    connect_all(&mut sim, 1);
    // A burst needs a third connection.
    let calls: Vec<_> = (0..3).map(|i| sim.acquire(2 + i, &a)).collect();
    let out = sim.drain();
    assert_eq!(connecting(&out).len(), 1, "{out:?}");
    connect_all(&mut sim, 5);
    for c in &calls {
        sim.finish(6, *c);
    }
    assert_eq!(sim.pool.stats().totals.idle, 3);
    // After the keep-alive one closes (above the minimum); the other two stay, for good.
    sim.timeout_to(106);
    assert_eq!(sim.pool.stats().totals.idle, 2);
    for t in [300, 1_000, 60_000] {
        sim.timeout_to(t);
        assert_eq!(sim.pool.stats().totals.idle, 2, "at {t} ms");
    }
    assert_eq!(sim.pool.stats().closed.get(&CloseReason::IdleTimeout), Some(&1));
    assert_eq!(sim.pool.warm_status(ms(60_000), &a).unwrap().readiness, Readiness::Ready);
}

#[test]
fn an_http2_minimum_in_streams_opens_enough_connections_at_the_servers_limit() {
    let mut sim = PoolSim::new(PoolConfig::default());
    let a = support::https("a.test");
    let p = WarmPolicy { min_connections: 1, min_streams: 250, ..WarmPolicy::default() };
    sim.pool.warm(ms(0), a.clone(), p).unwrap();
    let out = sim.drain();
    assert_eq!(out, ["resolve a.test"], "one connection first, its SETTINGS say how many");
    let warm_call = sim.queries.keys().copied().next().unwrap();
    sim.dns(0, warm_call, &["127.0.0.1"]);
    let attempt = sim.last_attempt(warm_call);
    sim.pool.handle_connected(ms(1), attempt).unwrap();
    assert_eq!(sim.drain(), [format!("handshake {warm_call}")]);
    sim.pool.handle_established(ms(2), attempt, Some(Protocol::Http2), Some(tls(&["a.test"]))).unwrap();
    sim.drain();
    let k = sim.open_connections()[0];
    // A limit of 100 streams: 250 need three connections.
    sim.pool.settings(ms(3), k, Some(100)).unwrap();
    let out = sim.drain();
    assert_eq!(connecting(&out).len(), 2, "{out:?}");
    assert_eq!(sim.pool.warm_status(ms(3), &a).unwrap().wanted, 3);
}

#[test]
fn stop_warming_cancels_connects_and_replaces_nothing() {
    let mut sim = PoolSim::new(PoolConfig::default());
    let a = http("127.0.0.1");
    sim.pool.warm(ms(0), a.clone(), policy(2)).unwrap();
    sim.drain();
    // One connects; the other is still in flight when warming stops.
    let attempts: Vec<_> = sim.attempts.values().filter_map(|v| v.last().copied()).collect();
    sim.pool.handle_connected(ms(1), attempts[0]).unwrap();
    sim.drain();
    sim.pool.stop_warming(ms(2));
    let out = sim.drain();
    assert_eq!(out, [format!("cancel-attempt {}", attempts[1])]);
    assert_eq!(sim.pool.warm_status(ms(2), &a).unwrap().readiness, Readiness::ShutDown);
    let k = sim.open_connections()[0];
    sim.pool.connection_closed(ms(3), k, CloseReason::Failure).unwrap();
    assert!(connecting(&sim.drain()).is_empty(), "nothing re-warms after stop_warming");
    // And a minimum that cannot stay idle under the caps is refused.
    let mut sim = PoolSim::new(PoolConfig { max_idle_per_address: 2, ..PoolConfig::default() });
    assert!(matches!(
        sim.pool.warm(ms(0), a, policy(3)),
        Err(Misuse::WarmAboveIdleCap { wanted: 3, cap: 2 })
    ));
}
