//! Warm connections (BEHAVIOUR §11) on virtual time: the minimum at start, a
//! closed connection replaced at once, exact backoff with a fixed seed (cap
//! respected) and recovery, `Down` after the deadline, the idle timeout never
//! below the minimum, HTTP/2 stream minimums, and shutdown. And the class of
//! servers that accept connections but serve nothing (HTTP/1.1 and HTTP/2,
//! before or after SETTINGS, seen at once or only by the probation's probe):
//! never ready, never a storm — each dead connection is a failed connect and
//! its replacement waits for the backoff.
#![allow(clippy::unwrap_used)]

#[path = "support/pool.rs"]
mod support;

use std::time::Duration;

use support::{http, ms, tls, PoolSim};
use switchyard_core::http2::GoAway;
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

/// Runs the timeouts at `t` and answers every probe they ask for as healthy:
/// HTTP/1.1 connections prove usable at the end of their probation.
fn prove_all(sim: &mut PoolSim, t: u64) -> Vec<String> {
    let out = sim.timeout_to(t);
    for probe in out.iter().filter_map(|s| s.strip_prefix("probe ")) {
        let k = sim.open_connections().into_iter().find(|k| k.to_string() == probe).unwrap();
        sim.pool.probe_passed(ms(t), k).unwrap();
    }
    let mut out = out;
    out.extend(sim.drain());
    out
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
    // Connected is not usable: on probation until a probe at its end passes.
    let status = sim.pool.warm_status(ms(5), &a).unwrap();
    assert_eq!((status.readiness, status.open, status.proving), (Readiness::Warming, 0, 3));
    assert_eq!(sim.pool.poll_timeout(), Some(ms(505)), "the probation ends");
    let out = prove_all(&mut sim, 505);
    assert_eq!(out.iter().filter(|s| s.starts_with("probe ")).count(), 3, "{out:?}");
    let status = sim.pool.warm_status(ms(505), &a).unwrap();
    assert_eq!(
        (status.readiness, status.open, status.idle, status.proving, status.wanted),
        (Readiness::Ready, 3, 3, 0, 3)
    );
    assert_eq!(readiness(&sim), [Readiness::Warming, Readiness::Ready]);
    // The first call opens nothing.
    let c = sim.acquire(506, &a);
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
    prove_all(&mut sim, 501);
    // Long after its probation the server closes one: a new connect starts
    // in the same input, no backoff (it had been a success).
    let k = sim.open_connections()[0];
    sim.pool.connection_closed(ms(10_000), k, CloseReason::Failure).unwrap();
    let out = sim.drain();
    assert_eq!(connecting(&out).len(), 1, "replaced at once: {out:?}");
    let status = sim.pool.warm_status(ms(10_000), &a).unwrap();
    assert_eq!((status.readiness, status.failures), (Readiness::Degraded, 0));
    connect_all(&mut sim, 10_002);
    prove_all(&mut sim, 10_502);
    assert_eq!(sim.pool.warm_status(ms(10_502), &a).unwrap().readiness, Readiness::Ready);
    assert_eq!(
        readiness(&sim),
        [Readiness::Warming, Readiness::Ready, Readiness::Degraded, Readiness::Ready]
    );
    // A connection retired after an exchange (`Connection: close`) is replaced too.
    let c = sim.acquire(20_000, &a);
    sim.drain();
    sim.pool.exchange_finished(ms(20_001), c, Reuse::Retire(CloseReason::ServerClose)).unwrap();
    let out = sim.drain();
    assert_eq!(connecting(&out).len(), 1, "a retired connection is replaced: {out:?}");
    // Its replacement serves an exchange before its probation ends: that
    // proves it at once.
    connect_all(&mut sim, 20_002);
    let c = sim.acquire(20_003, &a);
    sim.drain();
    sim.finish(20_004, c);
    let status = sim.pool.warm_status(ms(20_004), &a).unwrap();
    assert_eq!((status.readiness, status.open, status.proving), (Readiness::Ready, 2, 0));
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
    // The server is back: connected, but still down until it proves usable;
    // then ready with the backoff reset.
    connect_all(&mut sim, t + 3);
    let status = sim.pool.warm_status(ms(t + 3), &a).unwrap();
    assert_eq!((status.readiness, status.proving, status.failures), (Readiness::Down, 1, 7));
    prove_all(&mut sim, t + 503);
    let status = sim.pool.warm_status(ms(t + 503), &a).unwrap();
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

/// Drives a server that accepts every connection and ends it with `end` for
/// 5 s of virtual time (no jitter), and returns the connect times. Every
/// connect succeeds 1 ms after it starts (TCP, and TLS where there is any).
fn dead_server_connects(
    a: &switchyard_core::Address,
    min: usize,
    end: &dyn Fn(&mut PoolSim, u64),
) -> (Vec<u64>, Vec<Readiness>) {
    let backoff = Backoff { jitter: 0.0, ..Backoff::default() };
    let mut sim = PoolSim::new(PoolConfig::default());
    sim.pool.warm(ms(0), a.clone(), WarmPolicy { backoff, ..policy(min) }).unwrap();
    let mut connects: Vec<u64> = connecting(&sim.drain()).iter().map(|_| 0).collect();
    let mut t = 0;
    while t < 5_000 {
        t += 1;
        let attempts: Vec<_> = sim.attempts.values().filter_map(|v| v.last().copied()).collect();
        let out = connect_all(&mut sim, t);
        let handshakes = out.iter().filter(|s| s.starts_with("handshake ")).count();
        if handshakes > 0 {
            assert_eq!(attempts.len(), handshakes);
            for attempt in attempts {
                sim.pool
                    .handle_established(ms(t), attempt, Some(Protocol::Http2), Some(tls(&["127.0.0.1"])))
                    .unwrap();
                sim.drain();
            }
        }
        // The server ends it: at once, or when the probe asks.
        end(&mut sim, t);
        let status = sim.pool.warm_status(ms(t), a).unwrap();
        assert_ne!(status.readiness, Readiness::Ready, "at {t} ms: {status:?}");
        // The next thing that happens is the pool's next deadline.
        let Some(next) = sim.pool.poll_timeout() else { break };
        t = (next - switchyard_core::Instant::ZERO).as_millis() as u64;
        let out = prove_or_kill(&mut sim, t);
        connects.extend(connecting(&out).iter().map(|_| t));
    }
    // After the first failure, never ready again: connections on probation
    // count only once they settle.
    let r = readiness(&sim);
    let failed = r.iter().position(|r| *r == Readiness::Degraded).expect("degraded");
    assert!(r[failed..].iter().all(|r| *r != Readiness::Ready), "{r:?}");
    connects.retain(|t| *t <= 5_000);
    let mut r = r;
    r.dedup(); // an event each time the next retry changes
    (connects, r)
}

/// Timeouts at `t`; a probe finds the connection dead (the server closed it).
fn prove_or_kill(sim: &mut PoolSim, t: u64) -> Vec<String> {
    let mut out = sim.timeout_to(t);
    for probe in out.clone().iter().filter_map(|s| s.strip_prefix("probe ")) {
        let k = sim.open_connections().into_iter().find(|k| k.to_string() == probe).unwrap();
        sim.pool.connection_closed(ms(t), k, CloseReason::Unhealthy).unwrap();
        out.extend(sim.drain());
    }
    out
}

/// Ends every open connection with `reason`.
fn close_all(sim: &mut PoolSim, t: u64, reason: CloseReason) {
    for k in sim.open_connections() {
        sim.pool.connection_closed(ms(t), k, reason).unwrap();
        sim.drain();
    }
}

#[test]
fn a_server_that_accepts_and_closes_is_never_ready_and_never_stormed() {
    // Connects at 0, then after each backoff step (1 s, 1.6 s, 2.56 s): two
    // per step for a minimum of two, whatever the protocol and however the
    // close is seen. Never ready.
    let never_ready = [Readiness::Warming, Readiness::Degraded];
    let (h1, r) =
        dead_server_connects(&http("127.0.0.1"), 2, &|sim, t| close_all(sim, t, CloseReason::ServerClose));
    assert_eq!(h1, [0, 0, 1_001, 1_001, 2_602, 2_602], "HTTP/1.1, close seen at once");
    assert_eq!(r, never_ready);
    // HTTP/1.1 whose close is seen only by the probe at the probation's end.
    let (h1, r) = dead_server_connects(&http("127.0.0.1"), 2, &|_, _| {});
    assert_eq!(h1, [0, 0, 1_501, 1_501, 3_602, 3_602], "HTTP/1.1, close seen by the probe");
    assert_eq!(r, never_ready);
    // HTTP/2 with prior knowledge, closed before any SETTINGS.
    let (h2c, r) = dead_server_connects(&support::h2c("127.0.0.1"), 2, &|sim, t| {
        close_all(sim, t, CloseReason::Failure)
    });
    assert_eq!(h2c, [0, 0, 1_001, 1_001, 2_602, 2_602], "h2c, no SETTINGS");
    assert_eq!(r, never_ready);
    // HTTP/2 over TLS whose SETTINGS arrive, then GOAWAY at once: usable for
    // a moment (ready once), but dead young — the backoff still grows, and
    // after that first failure its successors must settle to count.
    let (h2, r) = dead_server_connects(&support::https("127.0.0.1"), 1, &|sim, t| {
        for k in sim.open_connections() {
            sim.pool.settings(ms(t), k, Some(100)).unwrap();
            sim.drain();
            sim.pool.goaway(ms(t), k, GoAway::graceful()).unwrap();
            sim.drain();
        }
    });
    assert_eq!(h2, [0, 1_001, 2_602], "HTTP/2 over TLS, SETTINGS then GOAWAY");
    assert_eq!(r, [Readiness::Warming, Readiness::Ready, Readiness::Degraded]);
}

#[test]
fn a_connection_that_dies_young_is_a_failure_with_its_words() {
    let mut sim = PoolSim::new(PoolConfig::default());
    let a = http("127.0.0.1");
    sim.pool.warm(ms(0), a.clone(), policy(1)).unwrap();
    sim.drain();
    connect_all(&mut sim, 1);
    let k = sim.open_connections()[0];
    sim.pool.connection_closed(ms(4), k, CloseReason::ServerClose).unwrap();
    assert!(connecting(&sim.drain()).is_empty(), "its replacement waits for the backoff");
    let s = sim.pool.warm_status(ms(4), &a).unwrap();
    assert_eq!((s.readiness, s.open, s.proving, s.failures), (Readiness::Degraded, 0, 0, 1));
    let e = s.last_error.unwrap();
    assert!(
        e.contains("server closed")
            && e.contains("3 ms after connecting")
            && e.contains("before it was usable"),
        "{e}"
    );
    assert!(s.next_retry.is_some_and(|t| t > ms(4)));
    let last = sim.events.iter().rev().find_map(|e| match &e.kind {
        EventKind::WarmReadiness { last_error, next_retry, .. } => Some((last_error.clone(), *next_retry)),
        _ => None,
    });
    assert!(
        last.is_some_and(|(e, r)| e.is_some() && r.is_some()),
        "the event carries the error and the retry"
    );
}

#[test]
fn closes_of_the_pools_own_choosing_are_not_failures() {
    // evict_all during the probation: replaced at once, no failure counted.
    let mut sim = PoolSim::new(PoolConfig::default());
    let a = http("127.0.0.1");
    sim.pool.warm(ms(0), a.clone(), policy(1)).unwrap();
    sim.drain();
    connect_all(&mut sim, 1);
    sim.pool.evict_all(ms(2));
    let out = sim.drain();
    assert_eq!(connecting(&out).len(), 1, "{out:?}");
    assert_eq!(sim.pool.warm_status(ms(2), &a).unwrap().failures, 0);
    // A settled connection that the server closes later is no failure either.
    connect_all(&mut sim, 3);
    prove_all(&mut sim, 503);
    let k = sim.open_connections()[0];
    sim.pool.connection_closed(ms(600), k, CloseReason::ServerClose).unwrap();
    assert_eq!(connecting(&sim.drain()).len(), 1, "replaced at once");
    assert_eq!(sim.pool.warm_status(ms(600), &a).unwrap().failures, 0);
}

#[test]
fn an_http2_connection_proves_usable_by_its_settings() {
    let mut sim = PoolSim::new(PoolConfig::default());
    let a = support::h2c("127.0.0.1");
    sim.pool.warm(ms(0), a.clone(), policy(1)).unwrap();
    sim.drain();
    connect_all(&mut sim, 1);
    assert_eq!(sim.pool.warm_status(ms(1), &a).unwrap().readiness, Readiness::Warming);
    let k = sim.open_connections()[0];
    sim.settings(2, k, Some(100));
    let s = sim.pool.warm_status(ms(2), &a).unwrap();
    assert_eq!((s.readiness, s.open, s.proving), (Readiness::Ready, 1, 0), "SETTINGS make it usable");
    // No probe for HTTP/2: its probation ends quietly.
    let out = sim.timeout_to(501);
    assert!(!out.iter().any(|o| o.starts_with("probe")), "{out:?}");
    // A server that never sends SETTINGS: retired as never usable, a failure.
    let mut sim = PoolSim::new(PoolConfig::default());
    sim.pool.warm(ms(0), a.clone(), policy(1)).unwrap();
    sim.drain();
    connect_all(&mut sim, 1);
    let out = sim.timeout_to(10_001);
    assert!(out.iter().any(|o| o.ends_with("never usable")), "{out:?}");
    assert!(connecting(&out).is_empty(), "{out:?}");
    let s = sim.pool.warm_status(ms(10_001), &a).unwrap();
    assert_eq!((s.readiness, s.failures), (Readiness::Degraded, 1));
}
