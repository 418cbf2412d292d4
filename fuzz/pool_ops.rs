//! Arbitrary operation sequences against the whole core (pool, races, route
//! database), nonsense included: ids the pool never issued, reports for
//! cancelled or finished attempts, duplicates, exchanges on calls that hold no
//! connection, time going backwards. No input may panic or break an invariant.
//! Shared by the `pool_ops` fuzz target and `core/tests/pool_ops.rs`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use switchyard_core::http2::GoAway;
use switchyard_core::pool::{ExchangeFailure, ExchangeFailureKind, Progress, RequestFacts};
use switchyard_core::{
    AcquireOptions, Address, AttemptId, CallId, CloseReason, ConnectError, ConnectionId, DnsAnswer, DnsError,
    Family, IdAllocator, Instant, Pool, PoolAction, PoolConfig, Protocol, QueryId, Race, RaceConfig,
    RaceRequest, Reuse, RouteDatabase, Scheme, TlsFacts,
};

#[derive(Arbitrary, Debug, Clone)]
pub enum Op {
    Acquire {
        host: u8,
        exclusive: bool,
        multiplexed: bool,
        deadline_ms: Option<u16>,
    },
    /// `family`: 0 every family at once; 1 AAAA only; 2 A only; else every
    /// family with a time to live of `family` seconds.
    Dns {
        query: u8,
        ips: Vec<u8>,
        fail: bool,
        family: u8,
    },
    Connected {
        attempt: u8,
    },
    Established {
        attempt: u8,
        h2: bool,
        facts: bool,
    },
    Failed {
        attempt: u8,
    },
    Finished {
        call: u8,
        reusable: bool,
    },
    ExchangeFailed {
        call: u8,
        kind: u8,
        progress: u8,
        idempotent: bool,
    },
    PeerClosed {
        connection: u8,
    },
    Settings {
        connection: u8,
        limit: u8,
    },
    GoAway {
        connection: u8,
    },
    Cancel {
        call: u8,
    },
    /// Declares an Address warm (`min` % 4 connections), or stops warming (`min` 255).
    Warm {
        host: u8,
        min: u8,
    },
    Advance {
        ms: u16,
    },
    Backwards {
        ms: u16,
    },
    Timeout,
    EvictAll,
    Shutdown,
}

/// Ids the pool handed out (live or not), and ids it never issued.
#[derive(Default)]
struct Ids {
    calls: Vec<CallId>,
    queries: Vec<QueryId>,
    attempts: Vec<AttemptId>,
    connections: Vec<ConnectionId>,
}

fn pick<T: Copy>(seen: &[T], foreign: &[T], i: u8) -> Option<T> {
    let all = seen.len() + foreign.len();
    if all == 0 {
        return None;
    }
    let i = usize::from(i) % all;
    Some(if i < seen.len() { seen[i] } else { foreign[i - seen.len()] })
}

fn addresses() -> Vec<Address> {
    let b = |scheme, host: &str, protocols: &[Protocol]| {
        Address::builder(scheme, host, 443).protocols(protocols.iter().copied()).build().unwrap()
    };
    vec![
        b(Scheme::Http, "127.0.0.1", &[Protocol::Http1]),
        b(Scheme::Https, "a.fuzz.test", &[Protocol::Http2, Protocol::Http1]),
        b(Scheme::Https, "b.fuzz.test", &[Protocol::Http2, Protocol::Http1]),
        b(Scheme::Http, "c.fuzz.test", &[Protocol::H2PriorKnowledge]),
    ]
}

/// Runs the ops; panics on any broken invariant.
pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let small = u.arbitrary::<bool>().unwrap_or(false);
    let config = PoolConfig {
        keep_alive: Duration::from_millis(500),
        max_connections_per_address: small.then_some(2),
        max_connections_total: small.then_some(3),
        max_idle_per_address: 2,
        acquire_timeout: Duration::from_millis(700),
        max_lifetime: small.then_some(Duration::from_millis(900)),
        ..PoolConfig::default()
    };
    let mut pool = Pool::new(config);
    let addresses = addresses();
    let mut now = Instant::from_millis(1_000_000);
    let mut ids = Ids::default();

    // Ids from another owner: never issued by this pool.
    let mut alien = IdAllocator::default();
    for _ in 0..10_000 {
        alien.next_call();
    }
    let mut db = RouteDatabase::default();
    let alien_call = alien.next_call();
    let alien_race = Race::start(
        RaceRequest {
            call: alien_call,
            address: addresses[1].clone(),
            proxies: vec![],
            proxy_reason: None,
            deadline: None,
            first_sequence: Default::default(),
            avoid: Vec::new(),
            known_answers: Vec::new(),
        },
        RaceConfig::default(),
        now,
        &mut db,
    );
    let _ = alien_race;
    let foreign_calls = [alien_call];
    let foreign_connections = [alien.next_connection(), alien.next_connection()];

    for _ in 0..256 {
        let Ok(op) = u.arbitrary::<Op>() else { break };
        match op {
            Op::Acquire { host, exclusive, multiplexed, deadline_ms } => {
                let options = AcquireOptions {
                    exclusive,
                    require_multiplexed: multiplexed,
                    deadline: deadline_ms.map(|d| now + Duration::from_millis(u64::from(d))),
                    proxies: vec![],
                    proxy_reason: None,
                };
                let id = pool.acquire(now, addresses[usize::from(host) % addresses.len()].clone(), options);
                ids.calls.push(id);
            }
            Op::Dns { query, ips, fail, family } => {
                if let Some(q) = pick(&ids.queries, &[], query) {
                    let answer = if fail {
                        Err(DnsError::Timeout)
                    } else {
                        Ok(ips
                            .iter()
                            .take(6)
                            .map(|b| {
                                if b % 2 == 0 {
                                    format!("10.0.0.{}", b % 4)
                                } else {
                                    format!("fd00::{}", b % 4)
                                }
                                .parse()
                                .unwrap()
                            })
                            .collect())
                    };
                    let answer = match family {
                        0 => DnsAnswer::all(answer),
                        1 => DnsAnswer::family(Family::V6, answer),
                        2 => DnsAnswer::family(Family::V4, answer),
                        ttl => {
                            DnsAnswer::all(answer).with_ttl(std::time::Duration::from_secs(u64::from(ttl)))
                        }
                    };
                    let _ = pool.handle_dns_answer(now, q, answer);
                }
            }
            Op::Connected { attempt } => {
                if let Some(a) = pick(&ids.attempts, &[], attempt) {
                    let _ = pool.handle_connected(now, a);
                }
            }
            Op::Established { attempt, h2, facts } => {
                if let Some(a) = pick(&ids.attempts, &[], attempt) {
                    let alpn = if h2 { Protocol::Http2 } else { Protocol::Http1 };
                    let facts = facts
                        .then(|| TlsFacts { dns_names: vec!["*.fuzz.test".into()], ..TlsFacts::default() });
                    let _ = pool.handle_established(now, a, Some(alpn), facts);
                }
            }
            Op::Failed { attempt } => {
                if let Some(a) = pick(&ids.attempts, &[], attempt) {
                    let e =
                        ConnectError::from_io(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
                    let _ = pool.handle_failed(now, a, e);
                }
            }
            Op::Finished { call, reusable } => {
                if let Some(c) = pick(&ids.calls, &foreign_calls, call) {
                    let reuse =
                        if reusable { Reuse::Reusable } else { Reuse::Retire(CloseReason::ServerClose) };
                    let _ = pool.exchange_finished(now, c, reuse);
                }
            }
            Op::ExchangeFailed { call, kind, progress, idempotent } => {
                if let Some(c) = pick(&ids.calls, &foreign_calls, call) {
                    let kind = match kind % 7 {
                        0 => ExchangeFailureKind::Io {
                            kind: std::io::ErrorKind::ConnectionReset,
                            message: String::new(),
                        },
                        1 => ExchangeFailureKind::Timeout,
                        2 => ExchangeFailureKind::RefusedStream,
                        3 => ExchangeFailureKind::GoAwayUnprocessed,
                        4 => ExchangeFailureKind::Misdirected,
                        5 => ExchangeFailureKind::StreamReset { code: 2 },
                        _ => ExchangeFailureKind::Protocol { message: String::new() },
                    };
                    let progress =
                        [Progress::NothingWritten, Progress::RequestWritten, Progress::ResponseStarted]
                            [usize::from(progress % 3)];
                    let request = RequestFacts { idempotent, body_replayable: true };
                    let _ = pool.exchange_failed(now, c, ExchangeFailure { kind, progress, request });
                }
            }
            Op::PeerClosed { connection } => {
                if let Some(c) = pick(&ids.connections, &foreign_connections, connection) {
                    let _ = pool.connection_closed(now, c, CloseReason::ServerClose);
                }
            }
            Op::Settings { connection, limit } => {
                if let Some(c) = pick(&ids.connections, &foreign_connections, connection) {
                    let _ = pool.settings(now, c, (limit % 6 < 5).then(|| u32::from(limit % 6)));
                }
            }
            Op::GoAway { connection } => {
                if let Some(c) = pick(&ids.connections, &foreign_connections, connection) {
                    let _ = pool.goaway(now, c, GoAway::graceful());
                }
            }
            Op::Cancel { call } => {
                if let Some(c) = pick(&ids.calls, &foreign_calls, call) {
                    pool.cancel(now, c);
                }
            }
            Op::Warm { host, min } => {
                if min == 255 {
                    pool.stop_warming(now);
                } else {
                    let address = addresses[usize::from(host) % addresses.len()].clone();
                    let policy = switchyard_core::WarmPolicy {
                        min_connections: usize::from(min % 4),
                        min_streams: u32::from(min / 4 % 3) * 50,
                        ..switchyard_core::WarmPolicy::default()
                    };
                    let _ = pool.warm(now, address, policy);
                }
            }
            Op::Advance { ms } => {
                now += Duration::from_millis(u64::from(ms));
                pool.handle_timeout(now);
            }
            Op::Backwards { ms } => {
                // A driver whose clock steps back: harmless.
                let back = Instant::from_millis(1_000_000u64.saturating_sub(u64::from(ms)));
                pool.handle_timeout(back.min(now));
            }
            Op::Timeout => pool.handle_timeout(now),
            Op::EvictAll => pool.evict_all(now),
            Op::Shutdown => pool.shutdown(now),
        }
        while let Some(action) = pool.poll_action() {
            match action {
                PoolAction::Resolve { query, .. } => ids.queries.push(query),
                PoolAction::Connect { attempt, .. } => ids.attempts.push(attempt),
                PoolAction::Established { connection, .. } => ids.connections.push(connection),
                _ => {}
            }
        }
        while pool.poll_event().is_some() {}
        if let Err(e) = pool.check_invariants() {
            panic!("invariant broken: {e}");
        }
        if let Some(t) = pool.poll_timeout() {
            if t <= now {
                pool.handle_timeout(now);
                while pool.poll_action().is_some() {}
                assert!(pool.poll_timeout().is_none_or(|t| t > now), "timer busy loop");
            }
        }
    }
    // Wind down: every call ends once time passes and exchanges finish.
    for c in ids.calls.clone() {
        let _ = pool.exchange_finished(now, c, Reuse::Reusable);
    }
    for a in ids.attempts.clone() {
        let e = ConnectError::from_io(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let _ = pool.handle_failed(now, a, e);
    }
    for _ in 0..1000 {
        while let Some(PoolAction::Connect { attempt, .. }) = pool.poll_action() {
            let e = ConnectError::from_io(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
            let _ = pool.handle_failed(now, attempt, e);
        }
        while pool.poll_action().is_some() {}
        match pool.poll_timeout() {
            Some(t) => {
                now = now.max(t);
                pool.handle_timeout(now);
            }
            None => break,
        }
        for c in ids.calls.clone() {
            let _ = pool.exchange_finished(now, c, Reuse::Reusable);
        }
    }
    pool.check_invariants().unwrap();
}
