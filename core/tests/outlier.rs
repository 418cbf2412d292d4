//! Outlier ejection per route (BEHAVIOUR §5, `OutlierPolicy`), on virtual
//! time: which failures count, what an ejection does to planning and to
//! pooled connections, the half-open trial, and the opt-in 5xx counting.
#![allow(clippy::unwrap_used)]

#[path = "support/pool.rs"]
mod support;

use std::time::Duration;

use support::{http, ms, PoolSim};
use switchyard_core::pool::{Backoff, ExchangeFailure, ExchangeFailureKind, Progress, RequestFacts};
use switchyard_core::{Address, CallId, ConnectionId, EventKind, FailureOutcome, OutlierPolicy, PoolConfig};

fn policy() -> OutlierPolicy {
    OutlierPolicy {
        backoff: Backoff {
            initial: Duration::from_secs(10),
            multiplier: 2.0,
            jitter: 0.0,
            max: Duration::from_secs(300),
        },
        ..OutlierPolicy::default()
    }
}

/// The failed-route memory lasts 1 s here, so what keeps a route last after
/// that is its ejection alone.
fn config(outliers: OutlierPolicy) -> PoolConfig {
    PoolConfig {
        keep_alive: Duration::from_secs(3600),
        route_ttl: Duration::from_secs(1),
        outliers,
        ..PoolConfig::default()
    }
}

fn post() -> RequestFacts {
    RequestFacts { idempotent: false, body_replayable: false }
}

fn reset(progress: Progress) -> ExchangeFailure {
    ExchangeFailure {
        kind: ExchangeFailureKind::Io {
            kind: std::io::ErrorKind::ConnectionReset,
            message: "connection reset".into(),
        },
        progress,
        request: post(),
    }
}

/// `n` calls that each open a new connection (first IP of the answer), in
/// use when this returns. The first call resolves when `ips` is given.
fn open_busy(sim: &mut PoolSim, t: u64, a: &Address, ips: Option<&[&str]>, n: usize) -> Vec<CallId> {
    let mut calls = Vec::new();
    for i in 0..n {
        let c = sim.acquire(t, a);
        let out = sim.drain();
        match ips {
            Some(ips) if i == 0 => {
                assert_eq!(out, [format!("resolve {}", a.host())]);
                let out = sim.dns(t, c, ips);
                assert!(out[0].starts_with(&format!("connect {c} ")), "{out:?}");
            }
            _ => assert!(out[0].starts_with(&format!("connect {c} ")), "{out:?}"),
        }
        let out = sim.connected(t, c);
        assert!(out.iter().any(|s| s.starts_with(&format!("acquired {c} "))), "{out:?}");
        calls.push(c);
    }
    calls
}

fn ejections(sim: &PoolSim) -> Vec<(String, u32, Duration)> {
    sim.events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::RouteEjected { route, failures, backoff } => {
                Some((route.socket_addr().to_string(), *failures, *backoff))
            }
            _ => None,
        })
        .collect()
}

fn restorations(sim: &PoolSim) -> Vec<String> {
    sim.events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::RouteRestored { route } => Some(route.socket_addr().to_string()),
            _ => None,
        })
        .collect()
}

fn fail(sim: &mut PoolSim, t: u64, c: CallId, progress: Progress) -> Vec<String> {
    let out = sim.pool.exchange_failed(ms(t), c, reset(progress)).unwrap();
    assert!(matches!(out, FailureOutcome::Failed(_)), "{out:?}");
    sim.drain()
}

/// Two IPs; a pooled connection to the first; five new connections to the
/// first fail their first exchange. Returns the pooled connection.
fn eject_first_of_two(sim: &mut PoolSim, a: &Address) -> ConnectionId {
    let calls = open_busy(sim, 0, a, Some(&["10.0.0.1", "10.0.0.2"]), 6);
    let pooled = sim.held[&calls[0]];
    sim.finish(1, calls[0]);
    for (i, &c) in calls[1..].iter().enumerate() {
        let k = sim.held[&c];
        let out = fail(sim, 2 + i as u64, c, Progress::ResponseStarted);
        if i < 4 {
            assert_eq!(out, [format!("close {k} failure")]);
            assert!(ejections(sim).is_empty(), "{i} failures");
        } else {
            // The fifth ejects the route: its pooled connection takes no new
            // exchange (the Address has 10.0.0.2 to go to).
            assert_eq!(out, [format!("close {k} failure"), format!("close {pooled} route ejected")]);
        }
    }
    pooled
}

#[test]
fn five_failures_in_a_row_eject_the_route_and_retire_its_pooled_connections() {
    let mut sim = PoolSim::new(config(policy()));
    let a = http("two.example");
    eject_first_of_two(&mut sim, &a);
    assert_eq!(ejections(&sim), [("10.0.0.1:80".to_owned(), 5, Duration::from_secs(10))]);
    let s = sim.pool.stats();
    assert_eq!((s.ejections, s.ejected_routes), (1, 1));
    let by_address = sim.pool.stats_by_address();
    assert_eq!(by_address[0].counters.ejections, 1);
    // Past the failed-route memory (1 s), the ejection alone plans it last.
    let c = sim.acquire(2_000, &a);
    assert_eq!(sim.drain(), [format!("connect {c} 10.0.0.2:80")]);
    // And it is never skipped: when 10.0.0.2 fails too, 10.0.0.1 is tried.
    let attempt = sim.last_attempt(c);
    let refused =
        switchyard_core::ConnectError::from_io(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
    sim.pool.handle_failed(ms(2_001), attempt, refused).unwrap();
    assert_eq!(sim.drain(), [format!("connect {c} 10.0.0.1:80")]);
}

#[test]
fn after_the_backoff_one_attempt_tries_the_route_and_its_success_restores_it() {
    let mut sim = PoolSim::new(config(policy()));
    let a = http("two.example");
    eject_first_of_two(&mut sim, &a);
    // Ejected at 6 ms: half-open from 10.006 s. A call in use on 10.0.0.2 keeps
    // the next call from reusing it.
    let held = open_busy(&mut sim, 5_000, &a, None, 1)[0];
    assert!(sim.pool.connection(sim.held[&held]).unwrap().route().socket_addr().to_string() == "10.0.0.2:80");
    let trial = sim.acquire(10_006, &a);
    assert_eq!(sim.drain(), [format!("connect {trial} 10.0.0.1:80")], "the half-open trial");
    // While the trial runs, other calls plan the route last.
    let other = sim.acquire(10_007, &a);
    assert_eq!(sim.drain(), [format!("connect {other} 10.0.0.2:80")]);
    sim.connected(10_010, trial);
    assert!(restorations(&sim).is_empty(), "connecting is not enough: the exchange must complete");
    sim.finish(10_020, trial);
    assert_eq!(restorations(&sim), ["10.0.0.1:80"]);
    let s = sim.pool.stats();
    assert_eq!((s.ejections, s.restorations, s.ejected_routes), (1, 1, 0));
    // Restored: planned first again.
    sim.connected(10_021, other);
    let next = sim.acquire(10_022, &a);
    let out = sim.drain();
    assert!(
        out[0].starts_with(&format!("acquired {next} ")),
        "the restored route's connection is pooled: {out:?}"
    );
}

#[test]
fn a_failed_trial_ejects_again_for_twice_as_long() {
    let mut sim = PoolSim::new(config(policy()));
    let a = http("two.example");
    eject_first_of_two(&mut sim, &a);
    let trial = sim.acquire(10_006, &a);
    assert_eq!(sim.drain(), [format!("connect {trial} 10.0.0.1:80")]);
    let refused =
        switchyard_core::ConnectError::from_io(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
    sim.pool.handle_failed(ms(10_010), sim.last_attempt(trial), refused).unwrap();
    assert_eq!(sim.drain(), [format!("connect {trial} 10.0.0.2:80")], "the call goes on to the other route");
    assert_eq!(
        ejections(&sim),
        [
            ("10.0.0.1:80".to_owned(), 5, Duration::from_secs(10)),
            ("10.0.0.1:80".to_owned(), 6, Duration::from_secs(20)),
        ]
    );
    // Still last until 30.010 s (the trial's call holds its connection, so
    // each call here races).
    sim.connected(10_011, trial);
    let c2 = sim.acquire(30_009, &a);
    assert_eq!(sim.drain(), [format!("connect {c2} 10.0.0.2:80")]);
    let c3 = sim.acquire(30_010, &a);
    assert_eq!(sim.drain(), [format!("connect {c3} 10.0.0.1:80")], "half-open again");
}

#[test]
fn a_host_with_one_route_keeps_using_it_when_ejected() {
    let mut sim = PoolSim::new(config(policy()));
    let a = http("one.example");
    let calls = open_busy(&mut sim, 0, &a, Some(&["10.0.0.9"]), 6);
    let pooled = sim.held[&calls[0]];
    sim.finish(1, calls[0]);
    for &c in &calls[1..] {
        fail(&mut sim, 2, c, Progress::ResponseStarted);
    }
    assert_eq!(ejections(&sim).len(), 1);
    assert!(sim.pool.connection(pooled).is_some(), "nowhere else to go: its connection stays");
    let c = sim.acquire(3, &a);
    assert_eq!(sim.drain(), [format!("acquired {c} {pooled} Pooled")]);
    let c2 = sim.acquire(3, &a);
    assert_eq!(sim.drain(), [format!("connect {c2} 10.0.0.9:80")], "an ejected only route still gets a try");
    // A success during the backoff does not restore it; one after it does.
    sim.finish(4, c);
    assert!(restorations(&sim).is_empty());
    sim.connected(10_002, c2);
    sim.finish(10_003, c2);
    assert_eq!(restorations(&sim), ["10.0.0.9:80"]);
}

/// The whole class of failures that are not the route's: a reused
/// connection that fails before any response byte (the stale keep-alive
/// race, whatever was written) counts for nothing, however many in a row;
/// the same connections failing mid-response do count.
#[test]
fn stale_keep_alive_failures_do_not_count_mid_response_failures_do() {
    for (progress, ejected) in [
        (Progress::NothingWritten, false),
        (Progress::RequestWritten, false),
        (Progress::ResponseStarted, true),
    ] {
        let mut sim = PoolSim::new(config(policy()));
        let a = http("10.0.0.1");
        let calls = open_busy(&mut sim, 0, &a, None, 5);
        for &c in &calls {
            sim.finish(1, c);
        }
        let reused: Vec<CallId> = (0..5).map(|_| sim.acquire(2, &a)).collect();
        sim.drain();
        for &c in &reused {
            // A POST: retried only when nothing was written (on a new
            // connection, which never connects here).
            let out = sim.pool.exchange_failed(ms(3), c, reset(progress)).unwrap();
            let retried = matches!(out, FailureOutcome::Retrying(_));
            assert_eq!(retried, progress == Progress::NothingWritten, "{progress:?}: {out:?}");
        }
        sim.drain();
        assert_eq!(!ejections(&sim).is_empty(), ejected, "{progress:?}");
    }
}

#[test]
fn a_completed_exchange_ends_the_streak() {
    let mut sim = PoolSim::new(config(policy()));
    let a = http("one.example");
    let calls = open_busy(&mut sim, 0, &a, Some(&["10.0.0.9"]), 9);
    for &c in &calls[..4] {
        fail(&mut sim, 1, c, Progress::ResponseStarted);
    }
    sim.finish(2, calls[4]);
    for &c in &calls[5..] {
        fail(&mut sim, 3, c, Progress::ResponseStarted);
    }
    assert!(ejections(&sim).is_empty(), "4, a success, 4");
}

#[test]
fn server_errors_count_only_when_the_policy_says_so() {
    for counted in [false, true] {
        let mut sim = PoolSim::new(config(OutlierPolicy { server_errors: counted, ..policy() }));
        let a = http("10.0.0.1");
        let (c, k) = sim.open(0, &a);
        sim.finish(1, c);
        for t in 2..7 {
            let c = sim.acquire(t, &a);
            sim.drain();
            sim.pool.server_error(ms(t), c).unwrap();
            // Reported twice for one call: counted once.
            sim.pool.server_error(ms(t), c).unwrap();
            sim.finish(t, c);
        }
        assert_eq!(ejections(&sim).len(), usize::from(counted), "server_errors: {counted}");
        assert!(sim.pool.connection(k).is_some(), "one route: the connection stays");
    }
}

#[test]
fn off_means_no_ejection() {
    let mut sim = PoolSim::new(config(OutlierPolicy::off()));
    let a = http("10.0.0.1");
    let calls = open_busy(&mut sim, 0, &a, None, 20);
    for &c in &calls {
        fail(&mut sim, 1, c, Progress::ResponseStarted);
    }
    assert!(ejections(&sim).is_empty());
    assert_eq!(sim.pool.stats().ejections, 0);
}

/// Nobody tries an ejected route for the backoff's maximum after its
/// backoff ended: it is forgotten and reported restored, so the stats do
/// not show it ejected for ever.
#[test]
fn an_ejection_nobody_tries_is_forgotten_after_the_backoff_maximum() {
    let mut sim = PoolSim::new(config(policy()));
    let a = http("two.example");
    eject_first_of_two(&mut sim, &a);
    assert_eq!(sim.pool.stats().ejected_routes, 1);
    // A call on the healthy route at 311 s (the DNS answer expired: asked
    // again): its success prunes.
    let c = open_busy(&mut sim, 311_000, &a, Some(&["10.0.0.2"]), 1)[0];
    sim.finish(311_001, c);
    assert_eq!(restorations(&sim), ["10.0.0.1:80"]);
    assert_eq!(sim.pool.stats().ejected_routes, 0);
}
