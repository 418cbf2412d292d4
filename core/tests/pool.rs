//! The pool, rule by rule (BEHAVIOUR §4–6), with exact virtual times.
//! Addresses are data only; nothing here touches a socket.
#![allow(clippy::unwrap_used)]

#[path = "support/pool.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use support::{h2c, http, https, ms, tls, PoolSim};
use switchyard_core::http2::GoAway;
use switchyard_core::pool::{
    ExchangeFailure, ExchangeFailureKind, NoRetry, Progress, RequestFacts, RetryBudget, RetryReason,
};
use switchyard_core::{
    AcquireOptions, Address, CloseReason, EventKind, FailureOutcome, Misuse, PoolConfig, Protocol, Proxy,
    Reuse, Scheme, StreamLimitPolicy, TlsFacts, TlsIdentity,
};

fn config() -> PoolConfig {
    PoolConfig { keep_alive: Duration::from_millis(100), ..PoolConfig::default() }
}

// ---------------------------------------------------------------- eviction

#[test]
fn keep_alive_closes_exactly_on_time() {
    let mut sim = PoolSim::new(config());
    let a = http("127.0.0.1");
    let (c1, conn) = sim.open(0, &a);
    assert_eq!(sim.pool.poll_timeout(), None, "in use: no timer");
    sim.finish(50, c1);
    assert_eq!(sim.pool.connection(conn).unwrap().idle_since(), Some(ms(50)));
    assert_eq!(sim.timeout(150), [format!("close {conn} idle timeout")]);
    assert_eq!(sim.pool.stats().closed[&CloseReason::IdleTimeout], 1);
    assert_eq!(sim.pool.poll_timeout(), None);
}

/// The idle sweep is the core's: every probe interval, each idle HTTP/1.1
/// connection is probed (oldest idle first); an HTTP/2 connection never is
/// (GOAWAY and its own liveness tell); the timer disarms when none is idle.
#[test]
fn idle_http1_connections_are_probed_on_the_core_timer() {
    let every = Duration::from_millis(1000);
    let cfg = PoolConfig { keep_alive: Duration::from_secs(60), probe_interval: Some(every), ..config() };
    let mut sim = PoolSim::new(cfg);
    let a = http("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    let (c2, k2) = sim.open(0, &a);
    sim.finish(10, c2);
    sim.finish(20, c1);
    // Armed when the first connection went idle (as it was established, at 0).
    assert_eq!(sim.pool.poll_timeout(), Some(ms(1000)));
    assert_eq!(sim.timeout(1000), [format!("probe {k2}"), format!("probe {k1}")]);
    assert_eq!(sim.pool.poll_timeout(), Some(ms(2000)));
    // The server closed one: the driver says so; the next sweep skips it.
    sim.pool.connection_closed(ms(1500), k2, CloseReason::ServerClose).unwrap();
    assert_eq!(sim.drain(), [format!("close {k2} server closed")]);
    assert_eq!(sim.timeout(2000), [format!("probe {k1}")]);
    // In use again: nothing idle, one more tick finds none and disarms.
    let c3 = sim.acquire(2100, &a);
    sim.drain();
    assert_eq!(sim.timeout(3000), Vec::<String>::new());
    assert_eq!(sim.pool.poll_timeout(), None);
    sim.finish(3100, c3);
    assert_eq!(sim.pool.poll_timeout(), Some(ms(4100)));
}

/// HTTP/2 liveness is the core's: a stalled stream read sends one PING (not
/// two while it is out); a PONG in time keeps the connection; none within the
/// pong timeout marks it unhealthy (no new exchanges). HTTP/1.1 is never pinged.
#[test]
fn a_stalled_http2_stream_sends_one_ping_and_no_pong_retires_the_connection() {
    let mut sim = PoolSim::new(config());
    let a = h2c("127.0.0.1");
    let (_call, k) = sim.open(0, &a);
    sim.pool.stream_stalled(ms(10), k).unwrap();
    sim.pool.stream_stalled(ms(20), k).unwrap();
    assert_eq!(sim.drain(), [format!("ping {k}")], "one PING while one is out");
    sim.pool.pong(ms(500), k).unwrap();
    assert_eq!(sim.pool.poll_timeout(), None, "the PONG disarmed the timer");
    sim.pool.stream_stalled(ms(600), k).unwrap();
    assert_eq!(sim.drain(), [format!("ping {k}")]);
    assert_eq!(sim.timeout(1600), Vec::<String>::new(), "in use: retired, not closed yet");
    assert_eq!(
        sim.pool.connection(k).unwrap().no_new_exchanges(),
        Some(CloseReason::Unhealthy),
        "no new exchanges after a missing PONG"
    );

    let h1 = http("127.0.0.1");
    let (_c, k1) = sim.open(2000, &h1);
    sim.pool.stream_stalled(ms(2010), k1).unwrap();
    assert_eq!(sim.drain(), Vec::<String>::new(), "HTTP/1.1: the read timeout retires it, no PING");
}

#[test]
fn without_a_probe_interval_nothing_is_probed() {
    let mut sim = PoolSim::new(PoolConfig { keep_alive: Duration::from_secs(60), ..config() });
    let a = http("127.0.0.1");
    let (c1, _) = sim.open(0, &a);
    sim.finish(10, c1);
    assert_eq!(sim.pool.poll_timeout(), Some(ms(60_010)), "only the keep-alive");
}

#[test]
fn two_idle_connections_close_oldest_first() {
    let mut sim = PoolSim::new(config());
    let a = http("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    let (c2, k2) = sim.open(0, &a);
    assert_ne!(k1, k2);
    sim.finish(20, c2);
    sim.finish(30, c1);
    assert_eq!(sim.timeout(120), [format!("close {k2} idle timeout")]);
    assert_eq!(sim.timeout(130), [format!("close {k1} idle timeout")]);
}

#[test]
fn in_use_connections_are_never_evicted() {
    let mut sim = PoolSim::new(config());
    let a = http("127.0.0.1");
    let (_c1, k1) = sim.open(0, &a);
    sim.pool.handle_timeout(ms(1_000_000));
    assert!(sim.drain().is_empty());
    sim.pool.evict_all(ms(1_000_001));
    assert!(sim.drain().is_empty());
    assert!(sim.pool.connection(k1).is_some());
}

#[test]
fn over_the_idle_cap_the_oldest_closes_after_the_grace() {
    let grace = Duration::from_millis(50);
    let mut sim = PoolSim::new(PoolConfig { max_idle_per_address: 2, idle_cap_grace: grace, ..config() });
    let a = http("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    let (c2, _) = sim.open(0, &a);
    let (c3, _) = sim.open(0, &a);
    sim.finish(10, c1);
    sim.finish(20, c2);
    assert!(sim.finish(30, c3).is_empty(), "three idle over a cap of two: not at once");
    assert_eq!(
        sim.timeout(60),
        [format!("close {k1} over idle cap")],
        "the oldest, idle since 10 ms, at 10 + 50"
    );
    assert_eq!(sim.pool.address_stats(&a).idle, 2);
}

/// 64 steady callers against a per-host idle cap of 32: every round all 64
/// release, then all 64 acquire again. Nothing closes and nothing reconnects;
/// once demand falls, the excess 32 close after the grace.
#[test]
fn steady_demand_never_trims_and_falling_demand_does() {
    let mut sim = PoolSim::new(PoolConfig::default()); // idle cap 32, grace 5 s, keep-alive 90 s
    let a = http("127.0.0.1");
    let mut calls: Vec<_> = (0..64).map(|_| sim.open(0, &a).0).collect();
    for round in 1..=20u64 {
        let t = round * 1000;
        for c in &calls {
            assert!(sim.finish(t, *c).is_empty(), "round {round}: nothing closes");
        }
        calls = (0..64)
            .map(|_| {
                let c = sim.acquire(t + 1, &a);
                let out = sim.drain();
                assert!(out.len() == 1 && out[0].ends_with("Pooled"), "round {round}: {out:?}");
                c
            })
            .collect();
    }
    assert_eq!(sim.pool.stats().created, 64);
    assert!(sim.pool.stats().closed.is_empty());
    // Demand falls: everyone releases at 30 s and nobody comes back.
    for c in &calls {
        sim.finish(30_000, *c);
    }
    let closed = sim.timeout(35_000);
    assert_eq!(closed.len(), 32, "{closed:?}");
    assert!(closed.iter().all(|c| c.ends_with("over idle cap")));
    assert_eq!(sim.pool.address_stats(&a).idle, 32);
}

#[test]
fn total_idle_cap_spans_addresses() {
    let mut sim = PoolSim::new(PoolConfig { max_idle_total: Some(1), ..config() });
    let (c1, k1) = sim.open(0, &http("127.0.0.1"));
    let (c2, _) = sim.open(0, &http("127.0.0.2"));
    sim.finish(10, c1);
    assert_eq!(sim.finish(20, c2), [format!("close {k1} over idle cap")]);
}

#[test]
fn the_total_idle_cap_has_a_default() {
    // 150 hosts, each used once: at most 100 idle connections stay open.
    let mut sim = PoolSim::new(PoolConfig::default());
    let mut closed = Vec::new();
    for i in 0..150u64 {
        let (c, _) = sim.open(i, &http(&format!("127.0.{}.{}", i / 200, i % 200 + 1)));
        closed.extend(sim.finish(i, c));
    }
    assert_eq!(sim.pool.stats().totals.idle, 100);
    assert_eq!(closed.len(), 50);
    assert!(closed.iter().all(|c| c.ends_with("over idle cap")), "{closed:?}");
}

#[test]
fn out_of_descriptors_closes_the_least_recently_used_idle_connection_and_connects_again() {
    let mut sim = PoolSim::new(config());
    let (c1, k1) = sim.open(0, &http("127.0.0.1"));
    let (c2, k2) = sim.open(0, &http("127.0.0.2"));
    sim.finish(5, c1);
    sim.finish(6, c2);
    let b = http("127.0.0.3");
    let call = sim.acquire(10, &b);
    assert_eq!(sim.drain(), [format!("connect {call} 127.0.0.3:80")]);
    let attempt = sim.last_attempt(call);
    let emfile = std::io::Error::from_raw_os_error(24);
    let error = switchyard_core::ConnectError::from_io(&emfile);
    assert!(matches!(error, switchyard_core::ConnectError::Exhausted { .. }), "{error:?}");
    sim.pool.handle_failed(ms(11), attempt, error.clone()).unwrap();
    assert_eq!(
        sim.drain(),
        [format!("close {k1} evicted for capacity"), format!("connect {call} 127.0.0.3:80")],
        "the least recently used idle connection makes room; the same attempt connects again"
    );
    assert_eq!(sim.last_attempt(call), attempt);
    sim.pool.handle_failed(ms(12), attempt, error.clone()).unwrap();
    assert_eq!(
        sim.drain(),
        [format!("close {k2} evicted for capacity"), format!("connect {call} 127.0.0.3:80")]
    );
    // Nothing idle left to close: the failure is the race's, as any other.
    sim.pool.handle_failed(ms(13), attempt, error).unwrap();
    let out = sim.drain();
    assert!(
        out.iter().any(|s| s.starts_with(&format!("failed {call}")) && s.contains("file descriptors")),
        "{out:?}"
    );
}

#[test]
fn max_lifetime_retires_in_use_and_closes_idle() {
    let mut sim = PoolSim::new(PoolConfig {
        max_lifetime: Some(Duration::from_millis(1000)),
        max_lifetime_jitter: 0.0,
        keep_alive: Duration::from_secs(90),
        ..PoolConfig::default()
    });
    let a = http("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    let (c2, k2) = sim.open(500, &a);
    sim.finish(600, c2);
    assert!(sim.timeout(1000).is_empty(), "in use: retired, not closed");
    assert_eq!(sim.pool.connection(k1).unwrap().no_new_exchanges(), Some(CloseReason::MaxLifetime));
    // Released after its lifetime: closed, not pooled.
    assert_eq!(sim.finish(1200, c1), [format!("close {k1} max lifetime")]);
    assert_eq!(sim.timeout(1500), [format!("close {k2} max lifetime")]);
}

/// Connections opened in one instant retire at different instants, each
/// within ±10 % of the max lifetime, and the same seed gives the same
/// instants.
#[test]
fn max_lifetime_is_jittered_per_connection_from_the_seed() {
    let lifetimes = |seed: u64| {
        let mut sim = PoolSim::new(PoolConfig {
            max_lifetime: Some(Duration::from_secs(100)),
            keep_alive: Duration::from_secs(1000),
            seed,
            ..PoolConfig::default()
        });
        let a = http("127.0.0.1");
        let opened: Vec<_> = (0..8).map(|_| sim.open(0, &a)).collect();
        for (call, _) in &opened {
            sim.finish(1, *call);
        }
        // Step through time: each close's instant is that connection's lifetime.
        let mut closed = BTreeMap::new();
        while let Some(t) = sim.pool.poll_timeout() {
            let t = u64::try_from(t.elapsed_since_origin().as_millis()).unwrap();
            for line in sim.timeout(t) {
                assert!(line.ends_with("max lifetime"), "{line}");
                closed.insert(line, t);
            }
        }
        assert_eq!(closed.len(), 8);
        closed.into_values().collect::<Vec<u64>>()
    };
    let first = lifetimes(7);
    assert_eq!(first, lifetimes(7), "the same seed, the same lifetimes");
    assert_ne!(first, lifetimes(8), "another seed, other lifetimes");
    for t in &first {
        assert!((90_000..=110_000).contains(t), "{t} ms is outside 100 s ± 10 %");
    }
    let distinct: BTreeSet<u64> = first.iter().copied().collect();
    assert!(distinct.len() >= 7, "opened together, they do not retire together: {first:?}");
    let spread = distinct.last().unwrap() - distinct.first().unwrap();
    assert!(spread > 5_000, "the draws use the range: {first:?}");
}

#[test]
fn evict_all_closes_idle_only() {
    let mut sim = PoolSim::new(config());
    let a = http("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    let (_c2, k2) = sim.open(0, &a);
    sim.finish(5, c1);
    sim.pool.evict_all(ms(6));
    assert_eq!(sim.drain(), [format!("close {k1} evict all")]);
    assert!(sim.pool.connection(k2).is_some());
}

#[test]
fn shutdown_refuses_closes_idle_lets_in_use_finish() {
    let mut sim = PoolSim::new(PoolConfig { max_connections_per_address: Some(2), ..config() });
    let a = http("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    let (c2, k2) = sim.open(0, &a);
    let waiter = sim.acquire(1, &a);
    assert!(sim.drain().is_empty());
    sim.finish(2, c1); // the waiter takes k1
    assert_eq!(sim.pool.call_connection(waiter), Some(k1));
    sim.finish(3, waiter);
    let racing = sim.acquire(4, &http("127.0.0.2"));
    sim.drain();
    sim.pool.shutdown(ms(5));
    let out = sim.drain();
    assert!(out.contains(&format!("failed {racing}: the connection pool is shut down")), "{out:?}");
    assert!(out.iter().any(|s| s.starts_with("cancel-attempt")), "{out:?}");
    assert!(out.contains(&format!("close {k1} shutdown")), "{out:?}");
    assert!(sim.pool.connection(k2).is_some(), "in use: left to finish");
    let late = sim.acquire(6, &a);
    assert_eq!(sim.drain(), [format!("failed {late}: the connection pool is shut down")]);
    assert_eq!(sim.finish(7, c2), [format!("close {k2} shutdown")]);
    assert_eq!(sim.pool.stats().totals.open, 0);
}

// ---------------------------------------------------------------- reuse

#[test]
fn most_recently_used_idle_connection_first_and_no_connect_events() {
    let mut sim = PoolSim::new(config());
    let a = http("127.0.0.1");
    let (c1, _k1) = sim.open(0, &a);
    let (c2, k2) = sim.open(0, &a);
    sim.finish(10, c1);
    sim.finish(20, c2);
    sim.events.clear();
    let c3 = sim.acquire(30, &a);
    assert_eq!(sim.drain(), [format!("acquired {c3} {k2} Pooled")]);
    assert_eq!(sim.event_names(), ["ConnectionAcquired"]);
    assert_eq!(sim.pool.stats().reused, 1);
}

#[test]
fn per_address_cap_queues_fifo_and_wakes_on_release() {
    let mut sim = PoolSim::new(PoolConfig { max_connections_per_address: Some(1), ..config() });
    let a = http("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    let c2 = sim.acquire(1, &a);
    let c3 = sim.acquire(2, &a);
    assert!(sim.drain().is_empty());
    assert_eq!(sim.pool.address_stats(&a).waiters, 2);
    assert_eq!(sim.finish(3, c1), [format!("acquired {c2} {k1} Pooled")]);
    assert_eq!(sim.finish(4, c2), [format!("acquired {c3} {k1} Pooled")]);
    assert_eq!(sim.pool.address_stats(&a).waiters, 0);
}

#[test]
fn a_cancelled_waiter_leaves_nothing_behind() {
    let mut sim = PoolSim::new(PoolConfig { max_connections_per_address: Some(1), ..config() });
    let a = http("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    let c2 = sim.acquire(1, &a);
    let c3 = sim.acquire(2, &a);
    sim.pool.cancel(ms(3), c2);
    assert!(sim.drain().is_empty());
    assert_eq!(sim.pool.stats().totals.waiters, 1);
    assert_eq!(sim.finish(4, c1), [format!("acquired {c3} {k1} Pooled")]);
    sim.finish(5, c3);
    assert_eq!(sim.pool.stats().calls, 0);
}

#[test]
fn waiting_is_bounded_by_the_acquire_timeout() {
    let mut sim = PoolSim::new(PoolConfig {
        max_connections_per_address: Some(1),
        acquire_timeout: Duration::from_millis(500),
        ..config()
    });
    let a = http("127.0.0.1");
    let (_c1, _) = sim.open(0, &a);
    let c2 = sim.acquire(100, &a);
    assert_eq!(
        sim.timeout(600),
        [format!("failed {c2}: timed out after 500ms waiting for a connection to http://127.0.0.1:80")]
    );
    assert_eq!(sim.pool.stats().totals.waiters, 0);
}

#[test]
fn total_cap_evicts_the_oldest_idle_connection_of_another_address() {
    let mut sim = PoolSim::new(PoolConfig { max_connections_total: Some(1), ..config() });
    let (c1, k1) = sim.open(0, &http("127.0.0.1"));
    sim.finish(1, c1);
    let c2 = sim.acquire(2, &http("127.0.0.2"));
    let out = sim.drain();
    assert_eq!(out[0], format!("close {k1} evicted for capacity"));
    assert_eq!(out[1], format!("connect {c2} 127.0.0.2:80"));
}

#[test]
fn a_pooled_connection_arriving_mid_race_wins() {
    let mut sim = PoolSim::new(config());
    let a = http("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    let c2 = sim.acquire(1, &a);
    assert_eq!(sim.drain(), [format!("connect {c2} 127.0.0.1:80")]);
    let attempt = sim.last_attempt(c2);
    let out = sim.finish(2, c1);
    // The only attempt in flight is kept for the pool, not thrown away.
    assert_eq!(out, [format!("acquired {c2} {k1} Pooled")]);
    // Its TCP connect finishes: cleartext needs no handshake, so it joins idle.
    sim.pool.handle_connected(ms(3), attempt).unwrap();
    let out = sim.drain();
    assert_eq!(out.len(), 1);
    assert!(out[0].starts_with("established "), "{out:?}");
    let s = sim.pool.stats();
    assert_eq!((s.created, s.joined_idle, s.totals.idle, s.tcp_connects, s.wasted), (2, 1, 1, 2, 0));
}

#[test]
fn with_several_attempts_connecting_none_is_kept() {
    // The second call resolves on its own.
    let mut sim = PoolSim::new(without_dns_cache(config()));
    let a = https_h1("a.test");
    let (c1, k1) = open_tls(&mut sim, 0, &a, Protocol::Http1);
    let c2 = sim.acquire(1, &a);
    sim.drain();
    sim.dns(1, c2, &["::1", "127.0.0.1"]);
    let first = sim.last_attempt(c2);
    // The attempt delay passes: a second attempt starts beside the first.
    let out = sim.timeout(251);
    assert_eq!(out.len(), 1, "{out:?}");
    let second = sim.last_attempt(c2);
    assert_ne!(first, second);
    let out = sim.finish(252, c1);
    assert_eq!(
        out,
        [
            format!("cancel-attempt {first}"),
            format!("cancel-attempt {second}"),
            format!("acquired {c2} {k1} Pooled")
        ]
    );
}

#[test]
fn a_call_waits_for_an_attempt_kept_for_the_pool_rather_than_connecting() {
    let mut sim = PoolSim::new(config());
    let a = http("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    let c2 = sim.acquire(1, &a);
    sim.drain();
    let kept = sim.last_attempt(c2);
    assert_eq!(sim.finish(2, c1), [format!("acquired {c2} {k1} Pooled")]);
    // c3 comes while the kept attempt connects: it waits for it.
    let c3 = sim.acquire(3, &a);
    assert!(sim.drain().is_empty(), "no new connect");
    sim.pool.handle_connected(ms(4), kept).unwrap();
    let out = sim.drain();
    assert_eq!(out.len(), 2, "{out:?}");
    assert!(out[0].starts_with("established ") && out[1].starts_with(&format!("acquired {c3} ")), "{out:?}");
    assert_eq!(sim.pool.stats().tcp_connects, 2);
}

/// `config` with the DNS cache off: every call resolves (in-flight lookups are
/// still shared).
fn without_dns_cache(config: PoolConfig) -> PoolConfig {
    PoolConfig { dns_cache: switchyard_core::DnsCacheConfig { capacity: 0, ..Default::default() }, ..config }
}

/// An https Address that speaks HTTP/1.1 only, with one route.
fn https_h1(host: &str) -> Address {
    Address::builder(Scheme::Https, host, 443).protocols([Protocol::Http1]).build().unwrap()
}

/// Opens a connection to an https Address through DNS, TCP and TLS.
fn open_tls(
    sim: &mut PoolSim,
    t: u64,
    a: &Address,
    alpn: Protocol,
) -> (switchyard_core::CallId, switchyard_core::ConnectionId) {
    let c = sim.acquire(t, a);
    assert_eq!(sim.drain().len(), 1, "resolve");
    sim.dns(t, c, &["127.0.0.1"]);
    sim.connected(t, c);
    let out = sim.established(t, c, Some(alpn), Some(tls(&[&a.host().to_string()])));
    assert!(out.iter().any(|s| s.starts_with("acquired")), "{out:?}");
    (c, sim.held[&c])
}

#[test]
fn a_pooled_connection_arriving_mid_handshake_keeps_the_attempt_for_the_pool() {
    // The second call resolves on its own.
    let mut sim = PoolSim::new(without_dns_cache(PoolConfig::default()));
    let a = https_h1("a.test");
    let (c1, k1) = open_tls(&mut sim, 0, &a, Protocol::Http1);
    let c2 = sim.acquire(1, &a);
    sim.drain();
    sim.dns(1, c2, &["127.0.0.1"]);
    assert_eq!(sim.connected(2, c2), [format!("handshake {c2}")]);
    let attempt = sim.last_attempt(c2);
    // c1's exchange ends while c2's attempt is in TLS: c2 takes k1 at once, and
    // the attempt is not cancelled.
    assert_eq!(sim.finish(3, c1), [format!("acquired {c2} {k1} Pooled")]);
    assert_eq!(sim.pool.stats().totals.connecting, 1, "the kept attempt still counts as connecting");
    // Its handshake finishes: the connection joins the pool idle.
    sim.pool.handle_established(ms(4), attempt, Some(Protocol::Http1), None).unwrap();
    let joined = sim.drain();
    let s = sim.pool.stats();
    assert_eq!((s.created, s.joined_idle, s.wasted, s.totals.idle, s.totals.connecting), (2, 1, 0, 1, 0));
    assert!(sim.event_names().contains(&"AttemptKeptForPool".to_owned()));
    // The next call uses it without connecting.
    let c3 = sim.acquire(5, &a);
    let out = sim.drain();
    assert_eq!(out.len(), 1);
    assert!(out[0].starts_with(&format!("acquired {c3} ")) && out[0].ends_with("Pooled"), "{out:?}");
    let k2 = sim.held[&c3];
    assert_ne!(k2, k1);
    assert_eq!(joined, [format!("established {k2}")]);
    assert_eq!(s.tcp_connects, 2);
    assert_eq!(s.tls_handshakes, 2);
}

#[test]
fn a_kept_attempt_that_fails_or_times_out_is_only_a_route_failure() {
    // The second call resolves on its own.
    let mut sim = PoolSim::new(without_dns_cache(PoolConfig::default()));
    let a = https_h1("a.test");
    let (c1, k1) = open_tls(&mut sim, 0, &a, Protocol::Http1);
    let c2 = sim.acquire(1, &a);
    sim.drain();
    sim.dns(1, c2, &["127.0.0.1"]);
    sim.connected(2, c2);
    let attempt = sim.last_attempt(c2);
    sim.finish(3, c1);
    // Nobody waits for it; its handshake deadline (10 s after TCP) cancels it.
    assert_eq!(sim.timeout(10_002), [format!("cancel-attempt {attempt}")]);
    assert_eq!(sim.pool.stats().totals.connecting, 0);
    sim.finish(10_003, c2);
    assert_eq!(sim.pool.connection(k1).map(|c| c.id()), Some(k1));
    sim.pool.check_invariants().unwrap();
}

#[test]
fn a_call_cancelled_by_its_caller_cancels_its_handshake() {
    let mut sim = PoolSim::new(PoolConfig::default());
    let a = https_h1("a.test");
    let c = sim.acquire(0, &a);
    sim.drain();
    sim.dns(0, c, &["127.0.0.1"]);
    sim.connected(1, c);
    let attempt = sim.last_attempt(c);
    sim.pool.cancel(ms(2), c);
    assert_eq!(sim.drain(), [format!("cancel-attempt {attempt}")]);
    assert_eq!(sim.pool.stats().wasted, 1, "TCP was done: a wasted connect");
}

#[test]
fn a_burst_to_a_new_http2_origin_makes_one_connect() {
    let mut sim = PoolSim::new(PoolConfig::default());
    let a = https("a.test");
    let first = sim.acquire(0, &a);
    assert_eq!(sim.drain(), ["resolve a.test"]);
    let rest: Vec<_> = (1..64).map(|i| sim.acquire(i, &a)).collect();
    assert!(sim.drain().is_empty(), "63 calls wait for the connect in flight");
    assert_eq!(sim.pool.stats().totals.waiters, 63);
    sim.dns(64, first, &["127.0.0.1"]);
    sim.connected(65, first);
    let out = sim.established(66, first, Some(Protocol::Http2), Some(tls(&["a.test"])));
    let k = sim.held[&first];
    assert_eq!(out, [format!("established {k}"), format!("acquired {first} {k} New")]);
    assert_eq!(sim.pool.stats().totals.waiters, 63, "the rest wait for the server's SETTINGS");
    let out = sim.settings(67, k, None);
    let acquired = out.iter().filter(|s| s.starts_with("acquired")).count();
    assert_eq!(acquired, 63, "{out:?}");
    assert!(!out.iter().any(|s| s.starts_with("resolve") || s.starts_with("connect")), "{out:?}");
    let s = sim.pool.stats();
    assert_eq!((s.tcp_connects, s.tls_handshakes, s.created), (1, 1, 1));
    for c in rest {
        assert!(sim.held.contains_key(&c));
    }
}

#[test]
fn a_burst_whose_connect_yields_http1_races_at_once() {
    let mut sim = PoolSim::new(PoolConfig::default());
    let a = https("a.test");
    let first = sim.acquire(0, &a);
    sim.drain();
    let rest: Vec<_> = (1..64).map(|i| sim.acquire(i, &a)).collect();
    assert!(sim.drain().is_empty());
    sim.dns(64, first, &["127.0.0.1"]);
    sim.connected(65, first);
    let out = sim.established(66, first, Some(Protocol::Http1), Some(tls(&["a.test"])));
    assert_eq!(out.iter().filter(|s| s.starts_with("acquired")).count(), 1, "{out:?}");
    // They race at once, with the first call's DNS answer from the cache.
    assert_eq!(
        out.iter().filter(|s| s.starts_with("connect")).count(),
        63,
        "the others race at once: {out:?}"
    );
    assert!(!out.iter().any(|s| s.starts_with("resolve")), "{out:?}");
    assert_eq!(sim.pool.stats().dns_cache_hits, 63);
    // The Address is now known to speak HTTP/1.1: a later call races at once too.
    let late = sim.acquire(67, &a);
    assert_eq!(sim.drain(), [format!("connect {late} 127.0.0.1:443")]);
    assert!(!rest.contains(&late));
}

#[test]
fn waiting_for_a_pending_http2_connect_can_be_turned_off() {
    let mut sim = PoolSim::new(PoolConfig { await_pending_http2: false, ..PoolConfig::default() });
    let a = https("a.test");
    let first = sim.acquire(0, &a);
    let second = sim.acquire(1, &a);
    // Both race; the second shares the first's lookup.
    assert_eq!(sim.drain(), ["resolve a.test"]);
    assert_eq!(sim.pool.stats().dns_shared, 1);
    let out = sim.dns(2, first, &["127.0.0.1"]);
    assert_eq!(out, [format!("connect {first} 127.0.0.1:443"), format!("connect {second} 127.0.0.1:443")]);
}

#[test]
fn exclusive_connections_are_retired_when_handed_out() {
    let mut sim = PoolSim::new(config());
    let a = http("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    sim.finish(1, c1);
    let up = sim.acquire_with(2, &a, AcquireOptions { exclusive: true, ..AcquireOptions::default() });
    assert_eq!(sim.drain(), [format!("acquired {up} {k1} Pooled")]);
    assert_eq!(sim.pool.connection(k1).unwrap().no_new_exchanges(), Some(CloseReason::Exclusive));
    let other = sim.acquire(3, &a);
    assert_eq!(sim.drain(), [format!("connect {other} 127.0.0.1:80")]);
    assert_eq!(sim.finish(4, up), [format!("close {k1} exclusive use")]);
}

// ---------------------------------------------------------------- HTTP/2

#[test]
fn http2_shares_up_to_the_stream_limit_then_opens_another() {
    let mut sim = PoolSim::new(config());
    let a = h2c("127.0.0.1");
    let (_c1, k1) = sim.open(0, &a);
    let c2 = sim.acquire(1, &a);
    assert_eq!(sim.drain(), [format!("acquired {c2} {k1} Shared")]);
    sim.pool.settings(ms(2), k1, Some(2)).unwrap();
    let c3 = sim.acquire(3, &a);
    assert_eq!(sim.drain(), [format!("connect {c3} 127.0.0.1:80")]);
}

#[test]
fn http2_wait_policy_waits_for_a_stream() {
    let mut sim = PoolSim::new(PoolConfig { stream_limit_policy: StreamLimitPolicy::Wait, ..config() });
    let a = h2c("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    sim.pool.settings(ms(1), k1, Some(1)).unwrap();
    let c2 = sim.acquire(2, &a);
    assert!(sim.drain().is_empty());
    assert_eq!(sim.finish(3, c1), [format!("acquired {c2} {k1} Pooled")]);
    // A raised limit wakes waiters at once.
    let c3 = sim.acquire(4, &a);
    assert!(sim.drain().is_empty());
    sim.pool.settings(ms(5), k1, Some(10)).unwrap();
    assert_eq!(sim.drain(), [format!("acquired {c3} {k1} Shared")]);
}

#[test]
fn goaway_retires_once_and_closes_when_streams_end() {
    let mut sim = PoolSim::new(config());
    let a = h2c("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    let c2 = sim.acquire(1, &a);
    sim.drain();
    sim.pool.goaway(ms(2), k1, GoAway::graceful()).unwrap();
    sim.pool.goaway(ms(3), k1, GoAway::graceful()).unwrap();
    assert!(sim.drain().is_empty());
    let no_new = sim.events.iter().filter(|e| matches!(e.kind, EventKind::NoNewExchanges { .. })).count();
    assert_eq!(no_new, 1, "emitted once, on the transition");
    let c3 = sim.acquire(4, &a);
    assert_eq!(sim.drain(), [format!("connect {c3} 127.0.0.1:80")]);
    assert!(sim.finish(5, c1).is_empty());
    assert_eq!(sim.finish(6, c2), [format!("close {k1} GOAWAY")]);
}

// ---------------------------------------------------------------- coalescing

/// Opens an h2 TLS connection to `host` at `ip` whose certificate covers `names`.
fn h2_conn(sim: &mut PoolSim, address: &Address, ip: &str, names: &[&str]) -> switchyard_core::ConnectionId {
    h2_conn_with(sim, address, ip, tls(names)).1
}

/// Opens an h2 TLS connection to `host` at `ip` with these certificate facts:
/// the call that made it, and the connection.
fn h2_conn_with(
    sim: &mut PoolSim,
    address: &Address,
    ip: &str,
    facts: TlsFacts,
) -> (switchyard_core::CallId, switchyard_core::ConnectionId) {
    let c = sim.acquire(0, address);
    assert_eq!(sim.drain(), [format!("resolve {}", address.host())]);
    sim.dns(0, c, &[ip]);
    sim.connected(1, c);
    let out = sim.established(2, c, Some(Protocol::Http2), Some(facts));
    assert!(out.iter().any(|s| s.starts_with("acquired")), "{out:?}");
    let k = sim.held[&c];
    assert_eq!(sim.settings(3, k, None), Vec::<String>::new());
    (c, k)
}

fn coalesce_attempt(sim: &mut PoolSim, address: &Address, ips: &[&str]) -> Vec<String> {
    let c = sim.acquire(10, address);
    assert_eq!(sim.drain(), [format!("resolve {}", address.host())]);
    sim.dns(11, c, ips)
}

#[test]
fn coalesces_when_ip_and_certificate_both_match() {
    let mut sim = PoolSim::new(config());
    let k1 = h2_conn(&mut sim, &https("a.example.com"), "10.0.0.1", &["a.example.com", "*.example.com"]);
    let out = coalesce_attempt(&mut sim, &https("b.example.com"), &["10.0.0.9", "10.0.0.1"]);
    assert_eq!(out.len(), 1);
    assert!(out[0].ends_with(&format!("{k1} Coalesced")), "{out:?}");
    assert_eq!(sim.pool.stats().coalesced, 1);
}

/// A call that waited for a pending connect to its origin is not left waiting
/// when that race ends by coalescing: it goes on at once.
#[test]
fn a_call_waiting_on_a_race_that_coalesces_goes_on() {
    let mut sim = PoolSim::new(config());
    let k1 = h2_conn(&mut sim, &https("a.example.com"), "10.0.0.1", &["a.example.com", "*.example.com"]);
    let b = https("b.example.com");
    let racer = sim.acquire(10, &b);
    assert_eq!(sim.drain(), ["resolve b.example.com"]);
    let waiter = sim.acquire(11, &b);
    assert!(sim.drain().is_empty(), "waits for the connect in flight");
    let out = sim.dns(12, racer, &["10.0.0.1"]);
    assert_eq!(out[0], format!("acquired {racer} {k1} Coalesced"));
    // The waiter races at once, with the cached answer, and coalesces too.
    assert_eq!(out[1..], [format!("acquired {waiter} {k1} Coalesced")], "the waiter races at once");
    assert_eq!(sim.pool.stats().totals.waiters, 0);
}

/// A connection whose certificate was not verified (a client told to accept
/// any certificate) is never a coalescing target, however well its names and
/// address match; and every event about it says it is unverified.
#[test]
fn an_unverified_certificate_never_coalesces_and_its_events_say_so() {
    let mut sim = PoolSim::new(config());
    let a = https("a.example.com");
    let facts = TlsFacts { unverified: true, ..tls(&["a.example.com", "*.example.com"]) };
    let (c, k) = h2_conn_with(&mut sim, &a, "10.0.0.1", facts);
    let out = coalesce_attempt(&mut sim, &https("b.example.com"), &["10.0.0.1"]);
    assert!(out[0].starts_with("connect"), "no coalescing onto an unverified certificate: {out:?}");
    assert_eq!(sim.pool.stats().coalesced, 0);
    let about_k: Vec<_> = sim
        .events
        .iter()
        .filter(|e| {
            e.kind.connection() == Some(k)
                || matches!(e.kind, EventKind::SecureConnectEnd { .. } | EventKind::ConnectEnd { .. })
                    && e.call == Some(c)
        })
        .collect();
    assert!(about_k.len() >= 3, "{about_k:?}");
    assert!(about_k.iter().all(|e| e.unverified_tls), "{about_k:?}");
    // Its close says so too; a verified connection's events are not marked.
    sim.pool.evict_all(ms(5_000));
    let _ = sim.drain();
    let closed = sim
        .events
        .iter()
        .find(|e| matches!(e.kind, EventKind::ConnectionClosed { connection, .. } if connection == k));
    assert!(closed.is_none_or(|e| e.unverified_tls), "{closed:?}");
    let mut sim = PoolSim::new(config());
    let k2 = h2_conn(&mut sim, &a, "10.0.0.1", &["a.example.com"]);
    assert!(sim.events.iter().filter(|e| e.kind.connection() == Some(k2)).all(|e| !e.unverified_tls));
}

#[test]
fn never_coalesces_on_ip_alone() {
    let mut sim = PoolSim::new(config());
    h2_conn(&mut sim, &https("a.example.com"), "10.0.0.1", &["a.example.com"]);
    let out = coalesce_attempt(&mut sim, &https("b.example.com"), &["10.0.0.1"]);
    assert!(out[0].starts_with("connect"), "{out:?}");
}

#[test]
fn never_coalesces_on_certificate_alone() {
    let mut sim = PoolSim::new(config());
    h2_conn(&mut sim, &https("a.example.com"), "10.0.0.1", &["a.example.com", "b.example.com"]);
    let out = coalesce_attempt(&mut sim, &https("b.example.com"), &["10.0.0.2"]);
    assert!(out[0].starts_with("connect"), "{out:?}");
}

#[test]
fn never_coalesces_across_tls_identities_ports_or_http1() {
    let mut sim = PoolSim::new(config());
    h2_conn(&mut sim, &https("a.example.com"), "10.0.0.1", &["*.example.com"]);
    let other_tls =
        Address::builder(Scheme::Https, "b.example.com", 443).tls_identity(TlsIdentity(9)).build().unwrap();
    assert!(coalesce_attempt(&mut sim, &other_tls, &["10.0.0.1"])[0].starts_with("connect"));
    let other_port = Address::builder(Scheme::Https, "c.example.com", 8443).build().unwrap();
    assert!(coalesce_attempt(&mut sim, &other_port, &["10.0.0.1"])[0].starts_with("connect"));

    let mut sim = PoolSim::new(config());
    let c = sim.acquire(0, &https("a.example.com"));
    sim.drain();
    sim.dns(0, c, &["10.0.0.1"]);
    sim.connected(1, c);
    sim.established(2, c, Some(Protocol::Http1), Some(tls(&["*.example.com"])));
    assert!(coalesce_attempt(&mut sim, &https("b.example.com"), &["10.0.0.1"])[0].starts_with("connect"));
}

#[test]
fn never_coalesces_onto_a_proxied_connection() {
    let mut sim = PoolSim::new(config());
    let proxy = Proxy::http("10.9.0.1", 3128).unwrap();
    let a = Address::builder(Scheme::Https, "a.example.com", 443).proxy(proxy.clone()).build().unwrap();
    let c = sim.acquire(0, &a);
    assert_eq!(sim.drain(), [format!("connect {c} 10.9.0.1:3128")]);
    sim.connected(1, c);
    sim.established(2, c, Some(Protocol::Http2), Some(tls(&["*.example.com"])));
    // A direct call to b.example whose DNS answer holds the proxy's IP.
    let out = coalesce_attempt(&mut sim, &https("b.example.com"), &["10.9.0.1"]);
    assert!(out[0].starts_with("connect"), "{out:?}");
}

#[test]
fn pins_must_pass_to_coalesce() {
    let mut pins = switchyard_core::pool::CertificatePins::default();
    pins.add("b.example.com", [7; 32]);
    let mut sim = PoolSim::new(PoolConfig { pins, ..config() });
    h2_conn(&mut sim, &https("a.example.com"), "10.0.0.1", &["*.example.com"]);
    let out = coalesce_attempt(&mut sim, &https("b.example.com"), &["10.0.0.1"]);
    assert!(out[0].starts_with("connect"), "{out:?}");
}

fn facts(idempotent: bool) -> RequestFacts {
    RequestFacts { idempotent, body_replayable: true }
}

#[test]
fn a_421_marks_no_coalescing_and_retries_on_a_fresh_connection() {
    let mut sim = PoolSim::new(config());
    let k1 = h2_conn(&mut sim, &https("a.example.com"), "10.0.0.1", &["*.example.com"]);
    let b = https("b.example.com");
    let c = sim.acquire(10, &b);
    sim.drain();
    let out = sim.dns(11, c, &["10.0.0.1"]);
    assert!(out[0].ends_with("Coalesced"));
    let outcome = sim
        .pool
        .exchange_failed(
            ms(12),
            c,
            ExchangeFailure {
                kind: ExchangeFailureKind::Misdirected,
                progress: Progress::ResponseStarted,
                request: facts(false),
            },
        )
        .unwrap();
    assert_eq!(outcome, FailureOutcome::Retrying(RetryReason::Misdirected));
    let out = sim.drain();
    assert_eq!(out, [format!("connect {c} 10.0.0.1:443")], "a fresh connection: a new race (DNS known)");
    assert!(sim.pool.connection(k1).unwrap().is_no_coalescing());
    // Nor will anyone else coalesce onto it.
    let out = coalesce_attempt(&mut sim, &https("c.example.com"), &["10.0.0.1"]);
    assert!(out[0].starts_with("connect"), "{out:?}");
}

#[test]
fn a_new_http2_connection_that_finds_a_coalescable_one_is_closed_as_duplicate() {
    let mut sim = PoolSim::new(config());
    let (a, b) = (https("a.example.com"), https("b.example.com"));
    let ca = sim.acquire(0, &a);
    let cb = sim.acquire(0, &b);
    sim.drain();
    sim.dns(1, ca, &["10.0.0.1"]);
    sim.dns(1, cb, &["10.0.0.1"]); // nothing to coalesce onto yet
    sim.connected(2, ca);
    sim.connected(2, cb);
    sim.established(3, ca, Some(Protocol::Http2), Some(tls(&["*.example.com"])));
    let ka = sim.held[&ca];
    sim.settings(3, ka, None);
    let out = sim.established(4, cb, Some(Protocol::Http2), Some(tls(&["*.example.com"])));
    assert_eq!(out.len(), 3, "{out:?}");
    assert!(out[0].starts_with("established"));
    let dup = out[0].rsplit(' ').next().unwrap().to_owned();
    assert_eq!(out[1], format!("close {dup} duplicate"));
    assert_eq!(out[2], format!("acquired {cb} {ka} Coalesced"));
    assert!(sim
        .events
        .iter()
        .any(|e| matches!(e.kind, EventKind::ConnectionClosed { reason: CloseReason::Duplicate, .. })));
}

// ---------------------------------------------------------------- retries

fn io_reset() -> ExchangeFailureKind {
    ExchangeFailureKind::Io { kind: std::io::ErrorKind::ConnectionReset, message: "connection reset".into() }
}

#[test]
fn a_stale_pooled_connection_retries_a_get_on_a_fresh_connection() {
    let mut sim = PoolSim::new(config());
    let a = http("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    sim.finish(1, c1);
    let c2 = sim.acquire(1, &a);
    assert_eq!(sim.drain(), [format!("acquired {c2} {k1} Pooled")]);
    let outcome = sim
        .pool
        .exchange_failed(
            ms(2),
            c2,
            ExchangeFailure { kind: io_reset(), progress: Progress::RequestWritten, request: facts(true) },
        )
        .unwrap();
    assert_eq!(outcome, FailureOutcome::Retrying(RetryReason::StaleConnection));
    let out = sim.drain();
    assert_eq!(out, [format!("close {k1} failure"), format!("connect {c2} 127.0.0.1:80")]);
}

/// The retry decision sees the call's deadline: a retry that could not finish
/// in time is not started, and the failure says why.
#[test]
fn no_retry_after_the_call_deadline() {
    let mut sim = PoolSim::new(config());
    let a = http("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    sim.finish(1, c1);
    let options = AcquireOptions { deadline: Some(ms(50)), ..AcquireOptions::default() };
    let c2 = sim.acquire_with(2, &a, options.clone());
    assert_eq!(sim.drain(), [format!("acquired {c2} {k1} Pooled")]);
    let stale =
        || ExchangeFailure { kind: io_reset(), progress: Progress::RequestWritten, request: facts(true) };
    match sim.pool.exchange_failed(ms(50), c2, stale()).unwrap() {
        FailureOutcome::Failed(e) => {
            assert!(e.to_string().contains("deadline"), "{e}");
            assert!(e.may_have_been_sent);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(sim.drain(), [format!("close {k1} failure")], "no connect for a retry");
    // Before the deadline the same failure is retried.
    let mut sim = PoolSim::new(config());
    let (c1, _) = sim.open(0, &a);
    sim.finish(1, c1);
    let c2 = sim.acquire_with(2, &a, options);
    sim.drain();
    let outcome = sim.pool.exchange_failed(ms(49), c2, stale()).unwrap();
    assert_eq!(outcome, FailureOutcome::Retrying(RetryReason::StaleConnection));
}

/// Past the call's deadline the verdict's reason is the deadline, whatever
/// else the failure would have said (a timeout, which is never retried
/// anyway): the adapters report the call's timeout on that verdict alone.
/// Before the deadline the failure's own reason stands; `may_have_been_sent`
/// is the failure's either way.
#[test]
fn past_the_deadline_every_failure_says_deadline() {
    let a = http("127.0.0.1");
    let options = AcquireOptions { deadline: Some(ms(50)), ..AcquireOptions::default() };
    let timeout = || ExchangeFailure {
        kind: ExchangeFailureKind::Timeout,
        progress: Progress::RequestWritten,
        request: facts(true),
    };
    for (at, why) in [(ms(50), NoRetry::DeadlinePassed), (ms(49), NoRetry::Timeout)] {
        let mut sim = PoolSim::new(config());
        let (c1, _) = sim.open(0, &a);
        sim.finish(1, c1);
        let c2 = sim.acquire_with(2, &a, options.clone());
        sim.drain();
        match sim.pool.exchange_failed(at, c2, timeout()).unwrap() {
            FailureOutcome::Failed(e) => {
                assert_eq!(e.why, why, "at {at:?}");
                assert!(e.may_have_been_sent);
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_stale_pooled_connection_does_not_replay_a_post() {
    let mut sim = PoolSim::new(config());
    let a = http("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    sim.finish(1, c1);
    let c2 = sim.acquire(2, &a);
    sim.drain();
    let outcome = sim
        .pool
        .exchange_failed(
            ms(3),
            c2,
            ExchangeFailure { kind: io_reset(), progress: Progress::RequestWritten, request: facts(false) },
        )
        .unwrap();
    let FailureOutcome::Failed(e) = outcome else { panic!("{outcome:?}") };
    assert!(e.may_have_been_sent);
    assert_eq!(e.why, NoRetry::NotIdempotent);
    assert_eq!(
        e.to_string(),
        format!(
            "connection failed: connection reset on 127.0.0.1:80 ({k1}); the request may have been sent; \
             not retried: the method is not idempotent and the request was not marked retryable"
        )
    );
    assert_eq!(sim.drain(), [format!("close {k1} failure")]);
    assert_eq!(sim.pool.stats().calls, 0);
}

#[test]
fn refused_stream_retries_on_the_same_connection_once() {
    let mut sim = PoolSim::new(config());
    let a = h2c("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    let refused = || ExchangeFailure {
        kind: ExchangeFailureKind::RefusedStream,
        progress: Progress::RequestWritten,
        request: facts(false),
    };
    let out = sim.pool.exchange_failed(ms(1), c1, refused()).unwrap();
    assert_eq!(out, FailureOutcome::Retrying(RetryReason::RefusedStream));
    assert_eq!(sim.drain(), [format!("acquired {c1} {k1} Shared")]);
    // The second refusal retires the connection; the call moves elsewhere.
    let out = sim.pool.exchange_failed(ms(2), c1, refused()).unwrap();
    assert_eq!(out, FailureOutcome::Retrying(RetryReason::RefusedStream));
    assert_eq!(sim.drain(), [format!("close {k1} refused streams"), format!("connect {c1} 127.0.0.1:80")]);
}

#[test]
fn a_fresh_connection_failing_after_write_is_not_retried_and_marks_the_route() {
    let mut sim = PoolSim::new(config());
    let a = http("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    let route = sim.pool.connection(k1).unwrap().route().clone();
    let out = sim
        .pool
        .exchange_failed(
            ms(1),
            c1,
            ExchangeFailure { kind: io_reset(), progress: Progress::RequestWritten, request: facts(true) },
        )
        .unwrap();
    assert!(matches!(out, FailureOutcome::Failed(ref e) if e.why == NoRetry::FreshConnection));
    assert!(sim.pool.route_database().should_postpone(&route, ms(1)));
}

#[test]
fn timeouts_are_never_retried() {
    let mut sim = PoolSim::new(config());
    let a = http("127.0.0.1");
    let (c1, _) = sim.open(0, &a);
    let out = sim
        .pool
        .exchange_failed(
            ms(1),
            c1,
            ExchangeFailure {
                kind: ExchangeFailureKind::Timeout,
                progress: Progress::NothingWritten,
                request: facts(true),
            },
        )
        .unwrap();
    assert!(
        matches!(out, FailureOutcome::Failed(ref e) if e.why == NoRetry::Timeout && !e.may_have_been_sent)
    );
}

#[test]
fn retries_stop_at_the_limit_and_never_return_to_a_failed_connection() {
    let mut sim = PoolSim::new(PoolConfig { max_retries: 1, ..config() });
    let a = h2c("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    let not_sent =
        || ExchangeFailure { kind: io_reset(), progress: Progress::NothingWritten, request: facts(true) };
    let c2 = sim.acquire(1, &a); // shares k1
    sim.drain();
    let out = sim.pool.exchange_failed(ms(2), c2, not_sent()).unwrap();
    assert_eq!(out, FailureOutcome::Retrying(RetryReason::NotSent));
    assert_eq!(sim.drain(), [format!("connect {c2} 127.0.0.1:80")], "not back onto {k1}");
    sim.connected(3, c2);
    let k2 = sim.held[&c2];
    sim.settings(3, k2, None);
    let out = sim.pool.exchange_failed(ms(4), c2, not_sent()).unwrap();
    assert!(
        matches!(out, FailureOutcome::Failed(ref e) if e.why == NoRetry::RetryLimit && !e.may_have_been_sent)
    );
    sim.finish(5, c1);
}

// ---------------------------------------------------------------- misuse

#[test]
fn driver_misuse_is_typed() {
    let mut sim = PoolSim::new(config());
    let a = http("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    sim.finish(1, c1);
    assert_eq!(sim.pool.exchange_finished(ms(2), c1, Reuse::Reusable), Err(Misuse::NoExchange(c1)));
    sim.pool.evict_all(ms(3));
    sim.drain();
    assert_eq!(sim.pool.goaway(ms(4), k1, GoAway::graceful()), Err(Misuse::ClosedConnection(k1)));
    sim.pool.check_invariants().unwrap();
}

#[test]
fn finishing_a_call_that_has_no_exchange_yet_leaves_it_as_it_was() {
    let mut sim = PoolSim::new(config());
    let a = http("127.0.0.1");
    let c1 = sim.acquire(0, &a);
    let out = sim.drain();
    assert!(out[0].starts_with("connect"), "{out:?}");
    // Connecting: not an exchange. The misuse is typed and the call goes on.
    assert_eq!(sim.pool.exchange_finished(ms(1), c1, Reuse::Reusable), Err(Misuse::NoExchange(c1)));
    assert_eq!(sim.pool.stats().calls, 1);
    let out = sim.connected(2, c1);
    assert!(out.iter().any(|s| s.starts_with("acquired")), "{out:?}");
    sim.finish(3, c1);
    assert_eq!(sim.pool.stats().calls, 0);
    sim.pool.check_invariants().unwrap();
}

#[test]
fn peer_close_while_idle_closes_with_its_reason() {
    let mut sim = PoolSim::new(config());
    let a = http("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    sim.finish(1, c1);
    sim.pool.connection_closed(ms(2), k1, CloseReason::ServerClose).unwrap();
    assert_eq!(sim.drain(), [format!("close {k1} server closed")]);
    let c2 = sim.acquire(3, &a);
    assert_eq!(sim.drain(), [format!("connect {c2} 127.0.0.1:80")], "never handed out closed");
}

// ---------------------------------------------------------------- events

#[test]
fn event_order_for_a_fresh_call_then_a_pooled_call() {
    let mut sim = PoolSim::new(config());
    let a = http("example.com");
    let c1 = sim.acquire(0, &a);
    assert_eq!(sim.drain(), ["resolve example.com"]);
    sim.dns(1, c1, &["10.0.0.1"]);
    sim.connected(2, c1);
    sim.finish(3, c1);
    assert_eq!(
        sim.event_names(),
        [
            "ProxySelectStart",
            "ProxySelectEnd",
            "DnsStart",
            "DnsEnd",
            "ConnectStart",
            "ConnectEnd",
            "ConnectionAcquired",
            "ConnectionReleased",
        ]
    );
    sim.events.clear();
    let c2 = sim.acquire(4, &a);
    sim.drain();
    sim.finish(5, c2);
    assert_eq!(sim.event_names(), ["ConnectionAcquired", "ConnectionReleased"]);
    assert!(sim.events.iter().all(|e| e.call == Some(c2)));
}

#[test]
fn failed_route_then_success_events() {
    let mut sim = PoolSim::new(config());
    let a = http("example.com");
    let c1 = sim.acquire(0, &a);
    sim.drain();
    sim.dns(0, c1, &["10.0.0.1", "10.0.0.2"]);
    let first = sim.last_attempt(c1);
    let refused =
        switchyard_core::ConnectError::from_io(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
    sim.pool.handle_failed(ms(5), first, refused).unwrap();
    sim.drain();
    sim.connected(6, c1);
    let names = sim.event_names();
    assert_eq!(
        names[4..],
        ["ConnectStart", "ConnectFailed", "ConnectStart", "ConnectEnd", "ConnectionAcquired"]
    );
}

#[test]
fn a_retried_call_never_reuses_an_attempt_id() {
    // Found by the simulation: the retry's race numbered its attempts from zero
    // again, so a late report from the first race could be taken for the second's.
    let mut sim = PoolSim::new(config());
    let a = http("127.0.0.1");
    let c = sim.acquire(0, &a);
    sim.drain();
    let first = sim.last_attempt(c);
    sim.connected(1, c);
    let out = sim
        .pool
        .exchange_failed(
            ms(2),
            c,
            ExchangeFailure { kind: io_reset(), progress: Progress::NothingWritten, request: facts(true) },
        )
        .unwrap();
    assert_eq!(out, FailureOutcome::Retrying(RetryReason::NotSent));
    let out = sim.drain();
    assert_eq!(out.len(), 2, "{out:?}"); // the failed connection closes, a new race starts
    let second = sim.last_attempt(c);
    assert_ne!(first, second);
    // A late, duplicate report about the first race's attempt changes nothing.
    sim.pool.handle_connected(ms(3), first).unwrap();
    assert!(sim.drain().is_empty());
    assert_eq!(sim.pool.stats().totals.connecting, 1);
}

#[test]
fn a_call_that_cannot_use_the_idle_connections_evicts_one_rather_than_wait() {
    // Found by the mixed fault run: a stale-connection retry needs a fresh
    // connection; with the per-host cap held by idle connections it waited until
    // its timeout instead of closing one of them.
    let mut sim = PoolSim::new(PoolConfig { max_connections_per_address: Some(2), ..config() });
    let plain = http("127.0.0.1");
    // Two idle HTTP/1 connections fill a cap of 2 for `plain`.
    let (p1, k1) = sim.open(0, &plain);
    let (p2, _k2) = sim.open(0, &plain);
    sim.finish(1, p1);
    sim.finish(2, p2);
    // A call that only an HTTP/2 connection will do cannot use them.
    let c = sim.acquire_with(
        3,
        &plain,
        AcquireOptions { require_multiplexed: true, ..AcquireOptions::default() },
    );
    assert_eq!(
        sim.drain(),
        [format!("close {k1} evicted for capacity"), format!("connect {c} 127.0.0.1:80")]
    );
}

// ------------------------------------------------- route memory (BEHAVIOUR §6)

fn failure(kind: ExchangeFailureKind, progress: Progress) -> ExchangeFailure {
    ExchangeFailure { kind, progress, request: facts(true) }
}

/// A read timeout on a connection that never completed an exchange marks its
/// route failed: with proxies [P1, P2], P1 accepting and never answering, the
/// next call starts with P2.
#[test]
fn a_timeout_on_a_new_connection_marks_its_route() {
    let mut sim = PoolSim::new(config());
    let a = http("origin.example");
    let proxies = vec![Proxy::http("10.9.0.1", 3128).unwrap(), Proxy::http("10.9.0.2", 3128).unwrap()];
    let options = AcquireOptions { proxies: proxies.clone(), ..AcquireOptions::default() };
    let c1 = sim.acquire_with(0, &a, options.clone());
    assert_eq!(sim.drain(), [format!("connect {c1} 10.9.0.1:3128")]);
    sim.connected(1, c1);
    let out = sim.pool.exchange_failed(
        ms(301),
        c1,
        failure(ExchangeFailureKind::Timeout, Progress::RequestWritten),
    );
    assert!(matches!(out, Ok(FailureOutcome::Failed(ref e)) if e.why == NoRetry::Timeout));
    sim.drain();
    let c2 = sim.acquire_with(400, &a, options);
    assert_eq!(sim.drain(), [format!("connect {c2} 10.9.0.2:3128")], "P1's route is postponed");
}

/// Refused twice on one connection: the call's next race tries its other
/// routes first, and reuses its DNS answer (no second lookup).
#[test]
fn refused_twice_moves_to_another_route_without_resolving_again() {
    let mut sim = PoolSim::new(PoolConfig { max_connections_per_address: Some(1), ..config() });
    let a = Address::builder(Scheme::Http, "two.example", 80)
        .protocols([Protocol::H2PriorKnowledge])
        .build()
        .unwrap();
    let c = sim.acquire(0, &a);
    assert_eq!(sim.drain(), ["resolve two.example"]);
    let out = sim.dns(1, c, &["10.0.0.1", "10.0.0.2"]);
    assert_eq!(out, [format!("connect {c} 10.0.0.1:80")]);
    sim.connected(2, c);
    let k1 = sim.held[&c];
    sim.pool.settings(ms(3), k1, None).unwrap();
    sim.drain();
    let refused = || failure(ExchangeFailureKind::RefusedStream, Progress::RequestWritten);
    assert_eq!(
        sim.pool.exchange_failed(ms(4), c, refused()),
        Ok(FailureOutcome::Retrying(RetryReason::RefusedStream))
    );
    assert_eq!(sim.drain(), [format!("acquired {c} {k1} Shared")], "the first refusal: the same connection");
    assert_eq!(
        sim.pool.exchange_failed(ms(5), c, refused()),
        Ok(FailureOutcome::Retrying(RetryReason::RefusedStream))
    );
    let out = sim.drain();
    assert_eq!(
        out,
        [format!("close {k1} refused streams"), format!("connect {c} 10.0.0.2:80")],
        "another route, no DNS"
    );
    // Refused on the second connection too: a typed "refused" error.
    sim.connected(6, c);
    let k2 = sim.held[&c];
    sim.pool.settings(ms(7), k2, None).unwrap();
    sim.drain();
    let out = sim.pool.exchange_failed(ms(8), c, refused()).unwrap();
    assert!(
        matches!(out, FailureOutcome::Failed(ref e) if e.why == NoRetry::Refused && !e.may_have_been_sent),
        "{out:?}"
    );
}

/// A stale connection's retry reuses the call's DNS answer.
#[test]
fn a_retry_reuses_the_calls_dns_answer() {
    let mut sim = PoolSim::new(config());
    let a = http("stale.example");
    let c = sim.acquire(0, &a);
    assert_eq!(sim.drain(), ["resolve stale.example"]);
    sim.dns(1, c, &["10.0.0.7"]);
    sim.connected(2, c);
    let out = sim.pool.exchange_failed(ms(3), c, failure(io_reset(), Progress::NothingWritten)).unwrap();
    assert_eq!(out, FailureOutcome::Retrying(RetryReason::NotSent));
    let out = sim.drain();
    assert!(out.iter().all(|s| !s.starts_with("resolve")), "no second lookup: {out:?}");
    assert!(out.contains(&format!("connect {c} 10.0.0.7:80")), "{out:?}");
}

/// `connection_acquired` numbers the exchanges on a connection; a connection
/// retired at its release says so before the release, then closes.
#[test]
fn acquired_counts_exchanges_and_retirement_is_told_before_release() {
    let mut sim = PoolSim::new(config());
    let a = http("127.0.0.1");
    let (c1, k) = sim.open(0, &a);
    sim.finish(1, c1);
    let c2 = sim.acquire(2, &a);
    sim.drain();
    sim.pool.exchange_finished(ms(3), c2, Reuse::Retire(CloseReason::RequestClose)).unwrap();
    sim.drain();
    let exchanges: Vec<u64> = sim
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::ConnectionAcquired { exchange, .. } => Some(exchange),
            _ => None,
        })
        .collect();
    assert_eq!(exchanges, [0, 1]);
    let tail: Vec<&str> = sim
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::NoNewExchanges { connection, .. } if connection == k => Some("no_new_exchanges"),
            EventKind::ConnectionReleased { .. } if e.call == Some(c2) => Some("released"),
            EventKind::ConnectionClosed { .. } => Some("closed"),
            _ => None,
        })
        .collect();
    assert_eq!(tail, ["no_new_exchanges", "released", "closed"]);
}

/// An IP-literal origin coalesces onto an HTTP/2 connection to that IP whose
/// certificate has the IP as a SAN (no DNS to wait for), and never onto one
/// whose certificate lacks it.
#[test]
fn an_ip_literal_coalesces_when_the_certificate_has_the_ip() {
    let mut sim = PoolSim::new(config());
    let a = https("a.example.com");
    let facts = TlsFacts { ip_addresses: vec!["10.0.0.1".parse().unwrap()], ..tls(&["a.example.com"]) };
    let (_, k) = h2_conn_with(&mut sim, &a, "10.0.0.1", facts);
    let ip = https("10.0.0.1");
    let call = sim.acquire(10, &ip);
    let out = sim.drain();
    assert_eq!(out, [format!("acquired {call} {k} Coalesced")], "{out:?}");
    assert_eq!(sim.pool.stats().coalesced, 1);
    // Another IP, or a certificate without it: a connect of its own.
    let other = sim.acquire(11, &https("10.0.0.2"));
    assert!(sim.drain()[0].starts_with("connect"), "{other}");
    let mut sim = PoolSim::new(config());
    let _ = h2_conn(&mut sim, &a, "10.0.0.1", &["a.example.com"]);
    let _ = sim.acquire(10, &ip);
    assert!(sim.drain()[0].starts_with("connect"));
}

/// Every attempt's events are complete and under the call that started it:
/// one end (`ConnectEnd`, `ConnectFailed` or `ConnectCancelled`) per
/// `ConnectStart`, and a `SecureConnectEnd` for every `SecureConnectStart`
/// whose attempt did not fail or get cancelled (BEHAVIOUR §7).
fn assert_attempt_events_complete(events: &[switchyard_core::Event]) {
    use std::collections::BTreeMap;
    use switchyard_core::EventKind as K;
    // attempt -> (starts, secure starts, secure ends, ends, failed or cancelled)
    let mut seen: BTreeMap<switchyard_core::AttemptId, [u32; 5]> = BTreeMap::new();
    for e in events {
        let Some(attempt) = e.kind.attempt() else { continue };
        assert_eq!(e.call, Some(attempt.call()), "{:?} under the call that started it", e.kind);
        let row = seen.entry(attempt).or_default();
        match &e.kind {
            K::ConnectStart { .. } => row[0] += 1,
            K::SecureConnectStart { .. } => row[1] += 1,
            K::SecureConnectEnd { .. } => row[2] += 1,
            K::ConnectEnd { .. } => row[3] += 1,
            K::ConnectFailed { .. } | K::ConnectCancelled { .. } => row[4] += 1,
            _ => {}
        }
    }
    for (attempt, [starts, secure_starts, secure_ends, ends, failed]) in seen {
        assert_eq!((starts, ends + failed), (1, 1), "{attempt}: one start, one end");
        if ends == 1 {
            assert_eq!((secure_starts, secure_ends), (secure_ends, secure_starts), "{attempt}");
        }
        assert!(secure_ends <= secure_starts, "{attempt}");
    }
}

/// The names of `attempt`'s events, in order.
fn attempt_event_names(sim: &PoolSim, attempt: switchyard_core::AttemptId) -> Vec<String> {
    sim.events
        .iter()
        .filter(|e| e.kind.attempt() == Some(attempt))
        .map(|e| format!("{:?}", e.kind).split([' ', '{']).next().unwrap().to_owned())
        .collect()
}

/// A pool with one TLS connection held by a first call, and a second call
/// racing for the same Address (resolved): (pool, first call, second call).
fn second_call_racing(a: &Address) -> (PoolSim, switchyard_core::CallId, switchyard_core::CallId) {
    let mut sim = PoolSim::new(without_dns_cache(PoolConfig::default()));
    let (c1, _) = open_tls(&mut sim, 0, a, Protocol::Http1);
    let c2 = sim.acquire(1, a);
    sim.drain();
    sim.dns(1, c2, &["127.0.0.1"]);
    (sim, c1, c2)
}

#[test]
fn an_attempt_kept_for_the_pool_reports_every_event_under_its_call() {
    // Kept mid-handshake: its SecureConnectEnd and ConnectEnd still come.
    let a = https_h1("a.test");
    let (mut sim, c1, c2) = second_call_racing(&a);
    sim.connected(2, c2);
    let attempt = sim.last_attempt(c2);
    sim.finish(3, c1);
    sim.pool.handle_established(ms(4), attempt, Some(Protocol::Http1), None).unwrap();
    sim.drain();
    assert_eq!(
        attempt_event_names(&sim, attempt),
        ["ConnectStart", "SecureConnectStart", "AttemptKeptForPool", "SecureConnectEnd", "ConnectEnd"]
    );
    assert_attempt_events_complete(&sim.events);

    // Kept while still in TCP connect: the pool starts its TLS, and every
    // event follows.
    let (mut sim, c1, c2) = second_call_racing(&a);
    let attempt = sim.last_attempt(c2);
    sim.finish(2, c1);
    sim.pool.handle_connected(ms(3), attempt).unwrap();
    assert_eq!(sim.drain(), [format!("handshake {c2}")]);
    sim.pool.handle_established(ms(4), attempt, Some(Protocol::Http1), None).unwrap();
    sim.drain();
    assert_eq!(
        attempt_event_names(&sim, attempt),
        ["ConnectStart", "AttemptKeptForPool", "SecureConnectStart", "SecureConnectEnd", "ConnectEnd"]
    );
    assert_attempt_events_complete(&sim.events);

    // Kept, then its handshake fails: ConnectFailed under its call.
    let (mut sim, c1, c2) = second_call_racing(&a);
    sim.connected(2, c2);
    let attempt = sim.last_attempt(c2);
    sim.finish(3, c1);
    let error =
        switchyard_core::ConnectError::from_io(&std::io::Error::from(std::io::ErrorKind::ConnectionReset));
    sim.pool.handle_failed(ms(4), attempt, error).unwrap();
    sim.drain();
    assert_attempt_events_complete(&sim.events);
}

#[test]
fn an_idle_cap_of_zero_closes_a_released_connection_at_once() {
    // HTTP/1.1 and HTTP/2 alike: zero keeps none, with no grace.
    for a in [http("127.0.0.1"), h2c("127.0.0.1")] {
        let mut sim = PoolSim::new(PoolConfig { max_idle_per_address: 0, ..config() });
        let (c, k) = sim.open(0, &a);
        let out = sim.finish(1, c);
        assert_eq!(out, [format!("close {k} over idle cap")], "{a}");
        let c = sim.acquire(2, &a);
        let out = sim.drain();
        assert!(out[0].starts_with(&format!("connect {c} ")), "nothing to reuse: {out:?}");
    }
}

// ---------------------------------------------------------------- retry budget

/// Retries (stale pooled connections here) are spent from the Address's
/// budget: a quarter of its calls in the window, no floor. Past it the
/// failure is final, typed, and names the budget; once the window has moved
/// on, calls deposit again. Another Address has its own budget.
#[test]
fn the_retry_budget_bounds_retries_per_address_over_its_window() {
    let budget = RetryBudget { ratio: 0.25, min_per_second: 0, window: Duration::from_secs(10) };
    let mut sim = PoolSim::new(PoolConfig { retry_budget: Some(budget), ..config() });
    let a = http("127.0.0.1");
    let stale =
        || ExchangeFailure { kind: io_reset(), progress: Progress::RequestWritten, request: facts(true) };
    let opened: Vec<_> = (0..8).map(|_| sim.open(0, &a)).collect();
    for (call, _) in &opened {
        sim.finish(1, *call);
    }
    // 8 more calls take the 8 pooled connections: 16 calls, 4 retries allowed.
    let calls: Vec<_> = (0..8).map(|_| sim.acquire(2, &a)).collect();
    sim.drain();
    let mut outcomes = Vec::new();
    for call in &calls {
        outcomes.push(match sim.pool.exchange_failed(ms(3), *call, stale()).unwrap() {
            FailureOutcome::Retrying(reason) => format!("retrying: {reason:?}"),
            FailureOutcome::Failed(e) => {
                assert!(e.may_have_been_sent, "the budget does not change what the server may have seen");
                assert!(e.to_string().ends_with("not retried: retry budget exhausted for this host (its recent retries reached their share of its calls)"), "{e}");
                format!("failed: {:?}", e.why)
            }
        });
    }
    let retried = outcomes.iter().filter(|o| o.starts_with("retrying")).count();
    assert_eq!(retried, 4, "{outcomes:?}");
    assert_eq!(outcomes[4..], vec!["failed: RetryBudget".to_string(); 4]);
    let stats = sim.pool.stats();
    assert_eq!((stats.retries, stats.retries_over_budget), (4, 4));
    let out = sim.drain();
    assert_eq!(out.iter().filter(|o| o.starts_with("connect")).count(), 4, "{out:?}");
    // Another Address has a budget of its own (no calls, no floor: none).
    let b = http("127.0.0.2");
    let (cb, kb) = sim.open(4, &b);
    sim.finish(5, cb);
    let cb = sim.acquire(6, &b);
    assert_eq!(sim.drain(), [format!("acquired {cb} {kb} Pooled")]);
    let out = sim.pool.exchange_failed(ms(7), cb, stale()).unwrap();
    assert!(
        matches!(out, FailureOutcome::Failed(ref e) if e.why == NoRetry::RetryBudget),
        "2 calls: 0 retries"
    );
    // 10 s on, the window has moved: a call and its retry count afresh
    // (4 calls at 10 s: one retry).
    sim.drain();
    for (call, _) in (0..3).map(|_| sim.open(10_000, &a)).collect::<Vec<_>>() {
        sim.finish(10_001, call);
    }
    let call = sim.acquire(10_002, &a);
    sim.drain();
    let out = sim.pool.exchange_failed(ms(10_003), call, stale()).unwrap();
    assert_eq!(out, FailureOutcome::Retrying(RetryReason::StaleConnection));
    sim.pool.check_invariants().unwrap();
}

/// Without a budget only the per-call limits apply.
#[test]
fn without_a_retry_budget_every_allowed_retry_runs() {
    let mut sim = PoolSim::new(PoolConfig { retry_budget: None, ..config() });
    let a = http("127.0.0.1");
    let (c1, _) = sim.open(0, &a);
    sim.finish(1, c1);
    let c2 = sim.acquire(2, &a);
    sim.drain();
    let stale =
        ExchangeFailure { kind: io_reset(), progress: Progress::RequestWritten, request: facts(true) };
    let out = sim.pool.exchange_failed(ms(3), c2, stale).unwrap();
    assert_eq!(out, FailureOutcome::Retrying(RetryReason::StaleConnection));
    assert_eq!(sim.pool.stats().retries, 1);
}

// ---------------------------------------------------------------- DNS refresh and drain

/// The answer a refresh lookup asked for (the query of no call).
fn refresh_query(sim: &PoolSim) -> switchyard_core::QueryId {
    *sim.queries.values().flatten().max_by_key(|q| q.call()).unwrap()
}

/// A name with pooled connections is looked up again when its answer
/// expires, by no call. The same answer changes nothing; answers without
/// the connections' IP drain exactly them once the absence lasts the grace
/// period (here three TTLs, 30 s): the idle one closes at once, the busy one
/// takes no new exchange and closes when released. The next call connects to
/// the new address from the refreshed cache.
#[test]
fn a_dns_answer_that_drops_an_ip_drains_exactly_the_connections_to_it() {
    let dns_cache =
        switchyard_core::DnsCacheConfig { default_ttl: Duration::from_secs(10), ..Default::default() };
    let mut sim = PoolSim::new(PoolConfig {
        dns_cache,
        dns_drain_grace: Duration::from_secs(1),
        keep_alive: Duration::from_secs(1000),
        ..config()
    });
    let a = http("moving.test");
    let b = http("staying.test");
    let c1 = sim.acquire(0, &a);
    assert_eq!(sim.drain(), ["resolve moving.test"]);
    sim.dns(0, c1, &["127.0.0.2"]);
    sim.connected(1, c1);
    let c2 = sim.acquire(2, &a); // the cached answer, its own connection
    assert_eq!(sim.drain(), [format!("connect {c2} 127.0.0.2:80")]);
    sim.connected(3, c2);
    let (k1, k2) = (sim.held[&c1], sim.held[&c2]);
    sim.finish(4, c1); // k1 idle, k2 in use
    let cb = sim.acquire(5, &b);
    sim.drain();
    sim.dns(5, cb, &["127.0.0.5"]);
    sim.connected(6, cb);
    let kb = sim.held[&cb];
    sim.finish(7, cb);
    let answer = |sim: &mut PoolSim, t: u64, ip: &str| {
        let q = refresh_query(sim);
        sim.pool.handle_dns(ms(t), q, Ok(vec![ip.parse().unwrap()])).unwrap();
        sim.drain()
    };
    // Each name is asked when its answer expires (rounds a second apart at
    // least); the same answer drains nothing.
    assert_eq!(sim.timeout(10_000), ["resolve moving.test"]);
    assert!(answer(&mut sim, 10_001, "127.0.0.2").is_empty(), "the same answer drains nothing");
    assert_eq!(sim.timeout(11_000), ["resolve staying.test"]);
    assert!(answer(&mut sim, 11_001, "127.0.0.5").is_empty());
    // Ten seconds on, moving.test has moved; one answer, then a second,
    // without its address are not yet a sustained absence.
    assert_eq!(sim.timeout(20_001), ["resolve moving.test"]);
    assert!(answer(&mut sim, 20_002, "127.0.0.3").is_empty(), "absent 10 s of 30");
    assert_eq!(sim.timeout(21_001), ["resolve staying.test"]);
    assert!(answer(&mut sim, 21_002, "127.0.0.5").is_empty());
    assert_eq!(sim.timeout(30_002), ["resolve moving.test"]);
    assert!(answer(&mut sim, 30_003, "127.0.0.3").is_empty(), "absent 20 s of 30");
    assert_eq!(sim.timeout(31_002), ["resolve staying.test"]);
    assert!(answer(&mut sim, 31_003, "127.0.0.5").is_empty());
    assert!(sim.pool.connection(k1).unwrap().no_new_exchanges().is_none());
    assert_eq!(sim.timeout(40_003), ["resolve moving.test"]);
    assert_eq!(answer(&mut sim, 40_004, "127.0.0.3"), [format!("close {k1} address no longer in DNS")]);
    assert_eq!(sim.pool.connection(k2).unwrap().no_new_exchanges(), Some(CloseReason::DnsChanged));
    assert!(sim.pool.connection(kb).unwrap().no_new_exchanges().is_none(), "another name's connection stays");
    assert_eq!(sim.finish(40_005, c2), [format!("close {k2} address no longer in DNS")]);
    // New calls go to the new address, from the cache the refresh filled.
    let c3 = sim.acquire(40_006, &a);
    assert_eq!(sim.drain(), [format!("connect {c3} 127.0.0.3:80")]);
    let stats = sim.pool.stats();
    assert_eq!((stats.dns_refreshes, stats.dns_drained, stats.dns_lookups), (7, 2, 2));
    assert_eq!(stats.closed[&CloseReason::DnsChanged], 2);
}

/// A name that answers each query with one of four addresses (TTL 1 s), as
/// object stores and cloud load balancers do, and a steady client: its one
/// connection is never drained, because its address keeps turning up within
/// the grace period (60 s), however long the run. An address that leaves
/// the rotation for good drains once the grace has passed.
#[test]
fn rotating_answers_never_drain_a_connection_whose_address_keeps_serving() {
    let dns_cache =
        switchyard_core::DnsCacheConfig { default_ttl: Duration::from_secs(1), ..Default::default() };
    let mut sim = PoolSim::new(PoolConfig { dns_cache, keep_alive: Duration::from_secs(1000), ..config() });
    let a = http("rotating.test");
    let ips = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"];
    let c = sim.acquire(0, &a);
    sim.drain();
    sim.dns(0, c, &[ips[0]]);
    sim.connected(1, c);
    let k = sim.held[&c];
    sim.finish(2, c);
    let mut t = 2;
    let mut round = 1;
    // When an answer last gave 127.0.0.2 (the connection's own answer first).
    let mut last_named = 0;
    // 10 calls a second for 300 s; every refresh round answers the next
    // address in the rotation. From 200 s on 127.0.0.2 leaves the rotation.
    while t < 300_000 {
        t += 100;
        if let Some(due) = sim.pool.poll_timeout().filter(|d| *d <= ms(t)) {
            let asked = sim.timeout(u64::try_from(due.elapsed_since_origin().as_millis()).unwrap());
            if asked == ["resolve rotating.test"] {
                let pick = if t >= 200_000 { ips[1 + round % 3] } else { ips[round % 4] };
                round += 1;
                if pick == ips[0] {
                    last_named = t;
                }
                let q = refresh_query(&sim);
                sim.pool.handle_dns(ms(t), q, Ok(vec![pick.parse().unwrap()])).unwrap();
                let out = sim.drain();
                if out.iter().any(|o| o.contains("no longer in DNS")) {
                    assert!(t >= 200_000, "drained at {t} ms while its address was in the rotation");
                    let absent = t - last_named;
                    assert!((60_000..62_000).contains(&absent), "drained after {absent} ms of absence");
                    break;
                }
            }
        }
        if sim.pool.connection(k).is_some_and(|c| c.no_new_exchanges().is_none()) {
            let call = sim.acquire(t, &a);
            assert_eq!(sim.drain(), [format!("acquired {call} {k} Pooled")], "at {t} ms");
            sim.finish(t + 1, call);
        }
    }
    let stats = sim.pool.stats();
    assert_eq!(stats.created, 1, "one connection through the rotation: {stats:?}");
    assert!(stats.dns_refreshes >= 100, "a refresh every second or two: {stats:?}");
    assert_eq!(stats.dns_drained, 1, "drained once the address left for good");
}

/// A lookup made for one call does not close a connection another call can
/// use: a call that finds the pooled connection busy races, its own lookup
/// answers other addresses, and when the connection is released mid-race
/// (OkHttp's scenario) the call takes it, still usable.
#[test]
fn a_calls_own_lookup_does_not_close_a_connection_released_mid_race() {
    let dns_cache =
        switchyard_core::DnsCacheConfig { default_ttl: Duration::from_secs(1), ..Default::default() };
    let mut sim = PoolSim::new(PoolConfig { dns_cache, dns_refresh: false, ..config() });
    let a = http("rotating.test");
    let c1 = sim.acquire(0, &a);
    sim.drain();
    sim.dns(0, c1, &["127.0.0.2"]);
    sim.connected(1, c1);
    let k1 = sim.held[&c1];
    // 5 s on (the answer expired), c1 still holds k1; c2 looks up afresh.
    let c2 = sim.acquire(5_000, &a);
    assert_eq!(sim.drain(), ["resolve rotating.test"]);
    assert_eq!(sim.dns(5_001, c2, &["127.0.0.3"]), [format!("connect {c2} 127.0.0.3:80")]);
    assert!(sim.pool.connection(k1).unwrap().no_new_exchanges().is_none(), "k1 still takes exchanges");
    let out = sim.finish(5_002, c1);
    assert!(out.contains(&format!("acquired {c2} {k1} Pooled")), "{out:?}");
    assert_eq!(sim.pool.stats().dns_drained, 0);
}

/// Refresh rounds are at least a second apart and only for names that
/// still have connections; without the refresh, nothing is asked.
#[test]
fn dns_refresh_is_bounded_and_can_be_turned_off() {
    let dns_cache =
        switchyard_core::DnsCacheConfig { default_ttl: Duration::from_millis(100), ..Default::default() };
    for refresh in [true, false] {
        let mut sim = PoolSim::new(PoolConfig {
            dns_cache,
            dns_refresh: refresh,
            keep_alive: Duration::from_secs(5),
            ..config()
        });
        let a = http("short.test");
        let c1 = sim.acquire(0, &a);
        sim.drain();
        sim.dns(0, c1, &["127.0.0.2"]);
        sim.connected(1, c1);
        sim.finish(2, c1);
        if !refresh {
            assert_eq!(sim.timeout(5_002), [format!("close {} idle timeout", sim.held[&c1])]);
            assert_eq!(sim.pool.stats().dns_refreshes, 0);
            continue;
        }
        // A TTL of 100 ms, rounds a second apart.
        assert_eq!(sim.timeout(1_001), ["resolve short.test"]);
        let q = refresh_query(&sim);
        sim.pool.handle_dns(ms(1_002), q, Ok(vec!["127.0.0.2".parse().unwrap()])).unwrap();
        assert!(sim.drain().is_empty());
        assert_eq!(sim.timeout(2_001), ["resolve short.test"]);
        // An answer still in flight is not asked again.
        assert!(sim.timeout(3_001).is_empty());
        sim.pool.evict_all(ms(3_002));
        sim.drain();
        // No connection left: the round finds nothing and stops.
        assert_eq!(sim.pool.poll_timeout(), Some(ms(4_001)));
        assert!(sim.timeout(4_001).is_empty());
        assert_eq!(sim.pool.poll_timeout(), None);
        assert_eq!(sim.pool.stats().dns_refreshes, 2);
    }
}

// ---------------------------------------------------------------- HTTP/2 keep-alive

/// Every `ping_interval` an HTTP/2 connection sends one PING; a PONG keeps
/// it, a missing PONG closes it (idle) `pong_timeout` later.
#[test]
fn keepalive_pings_find_a_dead_http2_peer_within_interval_plus_timeout() {
    let mut sim = PoolSim::new(PoolConfig {
        ping_interval: Some(Duration::from_secs(10)),
        pong_timeout: Duration::from_secs(1),
        keep_alive: Duration::from_secs(1000),
        ..config()
    });
    let a = h2c("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    sim.finish(1, c1);
    assert_eq!(sim.timeout(10_000), [format!("ping {k1}")]);
    sim.pool.pong(ms(10_005), k1).unwrap();
    assert_eq!(sim.timeout(20_000), [format!("ping {k1}")]);
    // No PONG: unhealthy at 21 s, and idle, so closed.
    assert_eq!(sim.timeout(21_000), [format!("close {k1} unhealthy")]);
    assert_eq!(sim.pool.stats().keepalive_pings, 2);
    // HTTP/1.1 connections are probed, not pinged; without an interval, no PING.
    let mut sim = PoolSim::new(PoolConfig { keep_alive: Duration::from_secs(1000), ..config() });
    let (c1, _) = sim.open(0, &a);
    sim.finish(1, c1);
    assert_eq!(sim.pool.poll_timeout(), Some(ms(1_000_001)), "only the keep-alive");
}

/// Gauges and counters per Address, in the order of their names.
#[test]
fn stats_by_address_counts_each_address_in_name_order() {
    let mut sim = PoolSim::new(config());
    let (a, b) = (http("127.0.0.2"), http("127.0.0.1"));
    let (ca, _) = sim.open(0, &a);
    let (cb, kb) = sim.open(1, &b);
    sim.finish(2, cb);
    let cb2 = sim.acquire(3, &b);
    assert_eq!(sim.drain(), [format!("acquired {cb2} {kb} Pooled")]);
    sim.finish(4, cb2);
    sim.pool.evict_all(ms(5));
    sim.drain();
    let all = sim.pool.stats_by_address();
    let names: Vec<String> = all.iter().map(|m| m.address.to_string()).collect();
    assert_eq!(names, ["http://127.0.0.1:80", "http://127.0.0.2:80"]);
    let (mb, ma) = (&all[0], &all[1]);
    assert_eq!((mb.counters.calls, mb.counters.created, mb.gauges.open), (2, 1, 0));
    assert_eq!(mb.counters.closed[&CloseReason::EvictAll], 1);
    assert_eq!((ma.counters.calls, ma.counters.created, ma.gauges.in_use, ma.gauges.open), (1, 1, 1, 1));
    assert!(ma.counters.closed.is_empty());
    sim.finish(6, ca);
}

/// A graceful shutdown's order, on virtual time: new calls refused, idle
/// connections closed at once, busy ones draining; at the deadline the HTTP/2
/// connection still carrying a stream is ended (its stream fails then), the
/// HTTP/1.1 one is left to its exchange.
#[test]
fn shutdown_then_abort_ends_only_busy_http2_connections() {
    let mut sim = PoolSim::new(config());
    let (h1, h2) = (http("127.0.0.1"), h2c("127.0.0.2"));
    let (c1, k1) = sim.open(0, &h1);
    let (c2, k2) = sim.open(0, &h1);
    let (c3, k3) = sim.open(0, &h2);
    sim.finish(1, c2); // k2 idle
    sim.pool.shutdown(ms(2));
    assert_eq!(sim.drain(), [format!("close {k2} shutdown")]);
    let late = sim.acquire(3, &h1);
    assert_eq!(sim.drain(), [format!("failed {late}: the connection pool is shut down")]);
    assert_eq!(sim.pool.abort_in_use(ms(4)), 1);
    assert_eq!(sim.drain(), [format!("abort {k3} shutdown")]);
    assert_eq!(sim.pool.connection(k3).unwrap().no_new_exchanges(), Some(CloseReason::Shutdown));
    // The aborted stream is reported failed as the shutdown's (the HTTP/2
    // session says so: `ExchangeFailureKind::Shutdown`), never retried, and
    // nothing is held against its route; the HTTP/1.1 exchange ends on its own.
    let route3 = sim.pool.connection(k3).unwrap().route().clone();
    let ended = ExchangeFailure {
        kind: ExchangeFailureKind::Shutdown,
        progress: Progress::RequestWritten,
        request: facts(true),
    };
    match sim.pool.exchange_failed(ms(5), c3, ended).unwrap() {
        FailureOutcome::Failed(e) => {
            assert_eq!((e.why, e.may_have_been_sent), (NoRetry::Shutdown, true));
            assert_eq!(e.kind, ExchangeFailureKind::Shutdown);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(sim.drain(), [format!("close {k3} shutdown")]);
    assert!(!sim.pool.route_database().should_postpone(&route3, ms(6)), "its route not marked failed");
    assert!(sim.pool.route_database().is_empty());
    assert_eq!(sim.finish(6, c1), [format!("close {k1} shutdown")]);
    assert_eq!(sim.pool.stats().totals.open, 0);
}

/// During a shutdown a failure that would be retried is not: no new
/// connection is opened for it, and the call fails typed.
#[test]
fn no_retry_opens_a_connection_during_shutdown() {
    let mut sim = PoolSim::new(config());
    let a = http("127.0.0.1");
    let (c1, _) = sim.open(0, &a);
    sim.finish(1, c1);
    let c2 = sim.acquire(2, &a);
    sim.drain();
    sim.pool.shutdown(ms(3));
    sim.drain();
    let stale =
        ExchangeFailure { kind: io_reset(), progress: Progress::RequestWritten, request: facts(true) };
    let out = sim.pool.exchange_failed(ms(4), c2, stale).unwrap();
    let drained = sim.drain();
    assert!(!drained.iter().any(|l| l.starts_with("connect")), "{drained:?} after {out:?}");
    let FailureOutcome::Failed(e) = out else { panic!("{out:?}") };
    assert_eq!(e.why, NoRetry::Shutdown);
    assert!(
        e.may_have_been_sent && e.to_string().ends_with("not retried: the client is shutting down"),
        "{e}"
    );
    // HTTP/2: a free retry (a stream a GOAWAY left unprocessed) and a
    // same-connection one (a first REFUSED_STREAM) are not made either.
    for kind in [ExchangeFailureKind::GoAwayUnprocessed, ExchangeFailureKind::RefusedStream] {
        let mut sim = PoolSim::new(config());
        let (c1, k1) = sim.open(0, &h2c("127.0.0.1"));
        sim.pool.shutdown(ms(1));
        sim.drain();
        let failure =
            ExchangeFailure { kind: kind.clone(), progress: Progress::RequestWritten, request: facts(true) };
        let out = sim.pool.exchange_failed(ms(2), c1, failure).unwrap();
        assert!(
            matches!(out, FailureOutcome::Failed(ref e) if e.why == NoRetry::Shutdown && !e.may_have_been_sent),
            "{kind:?}: {out:?}"
        );
        assert_eq!(sim.drain(), [format!("close {k1} shutdown")], "{kind:?}");
    }
}

// ---------------------------------------------------------------- eviction while settling

/// `evict_all` covers what would become idle without a call: a connect kept
/// for the pool (its call took a released connection) is cancelled, and a
/// connection whose caller dropped the response while its body drains closes
/// when the drain ends. Nothing is left open after the drops settle.
#[test]
fn eviction_covers_connections_still_settling() {
    let mut sim = PoolSim::new(PoolConfig { keep_alive: Duration::from_secs(1000), ..config() });
    let a = http("127.0.0.1");
    let (c1, k1) = sim.open(0, &a);
    let c2 = sim.acquire(1, &a);
    assert_eq!(sim.drain(), [format!("connect {c2} 127.0.0.1:80")]);
    let attempt = *sim.attempts[&c2].last().unwrap();
    // k1 comes back: c2 takes it, its own connect is kept for the pool.
    let out = sim.finish(2, c1);
    assert!(out.contains(&format!("acquired {c2} {k1} Pooled")), "{out:?}");
    // c2's caller drops the response; the body drains in the background.
    sim.pool.draining(ms(3), c2);
    sim.pool.evict_all(ms(4));
    assert_eq!(sim.drain(), [format!("cancel-attempt {attempt}")], "the kept connect is cancelled");
    assert_eq!(sim.pool.connection(k1).unwrap().no_new_exchanges(), Some(CloseReason::EvictAll));
    // The drain ends: the connection closes instead of going back idle.
    assert_eq!(sim.finish(5, c2), [format!("close {k1} evict all")]);
    let stats = sim.pool.stats();
    assert_eq!((stats.totals.open, stats.totals.connecting, stats.calls), (0, 0, 0), "{stats:?}");

    // A drain that ends before any eviction returns its connection as usual.
    let (c3, k3) = sim.open(10, &a);
    sim.pool.draining(ms(11), c3);
    assert!(sim.finish(12, c3).is_empty());
    assert!(sim.pool.connection(k3).unwrap().no_new_exchanges().is_none());
    // And an eviction leaves live calls' connections alone.
    let c4 = sim.acquire(13, &a);
    assert_eq!(sim.drain(), [format!("acquired {c4} {k3} Pooled")]);
    sim.pool.evict_all(ms(14));
    assert!(sim.drain().is_empty());
    assert!(sim.pool.connection(k3).unwrap().no_new_exchanges().is_none());
}

// ---------------------------------------------------------------- per-host bounds

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4))]
    /// Calls to many distinct hosts — most refused, some answered and kept
    /// idle, at any pace — never grow the per-host maps past their bounds:
    /// the Addresses tracked stay within 64 + 2 × (busy + IDLE_ADDRESSES_KEPT)
    /// (busy: something open, connecting or waiting), and the DNS cache
    /// within its capacity (the pool's invariants check both at every step).
    #[test]
    fn per_host_state_stays_within_its_bounds(
        hosts in 2_500usize..4_000,
        gap_ms in 0u64..20,
        every in 3usize..50,
    ) {
        let mut sim = PoolSim::new(PoolConfig { keep_alive: Duration::from_secs(1000), ..config() });
        let mut t = 0;
        for i in 0..hosts {
            t += gap_ms;
            let a = http(&format!("h{i}.test"));
            let c = sim.acquire(t, &a);
            sim.drain();
            sim.dns(t, c, &["127.0.0.1"]);
            if i % every == 0 {
                sim.connected(t, c);
                sim.finish(t, c);
            } else {
                let attempt = *sim.attempts[&c].last().unwrap();
                let refused = switchyard_core::ConnectError::Io {
                    kind: std::io::ErrorKind::ConnectionRefused,
                    message: "refused".into(),
                };
                sim.pool.handle_failed(ms(t), attempt, refused).unwrap();
                sim.drain();
            }
            if i % 250 != 0 {
                continue;
            }
            let tracked = sim.pool.stats_by_address().len();
            let busy = sim.pool.stats_by_address().iter().filter(|m| m.gauges.open + m.gauges.connecting + m.gauges.waiters > 0).count();
            proptest::prop_assert!(
                tracked <= 64 + 2 * (busy + switchyard_core::pool::IDLE_ADDRESSES_KEPT),
                "{tracked} Addresses tracked ({busy} busy) after {i} hosts"
            );
        }
    }
}
