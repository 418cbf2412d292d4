//! HTTP/2 stream limits and GOAWAY churn, on virtual time (BEHAVIOUR §4, §6).
//!
//! A small world drives the pool: DNS, TCP and TLS answer after fixed
//! latencies, every HTTP/2 server opens with SETTINGS (its
//! MAX_CONCURRENT_STREAMS) one round trip after the handshake, and the server
//! enforces its limit strictly: a stream beyond it is refused
//! (REFUSED_STREAM), as nghttpd does. Optionally the server sends GOAWAY after
//! a number of streams per connection (nginx's `keepalive_requests`), failing
//! the streams it did not take as "not processed".
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use switchyard_core::http2::GoAway;
use switchyard_core::pool::{
    ExchangeFailure, ExchangeFailureKind, NoRetry, Progress, RequestFacts, RetryReason,
};
use switchyard_core::{
    AcquireOptions, Address, CallId, CloseReason, ConnectionId, FailureOutcome, Instant, Pool, PoolAction,
    PoolConfig, Protocol, Reuse, Scheme, TlsFacts,
};

fn ms(t: u64) -> Instant {
    Instant::from_millis(t)
}

#[derive(Debug)]
enum Ev {
    Dns(switchyard_core::QueryId),
    Connected(switchyard_core::AttemptId),
    Established(switchyard_core::AttemptId),
    Settings(ConnectionId),
    Finish(CallId, ConnectionId),
    /// The server's REFUSED_STREAM for a stream it got before its SETTINGS
    /// reached the client (it sent them first; frames arrive in order).
    Refuse(CallId),
}

#[derive(Clone, Copy, Debug)]
struct Server {
    /// MAX_CONCURRENT_STREAMS in the server's SETTINGS.
    limit: u32,
    /// GOAWAY after this many streams on a connection.
    goaway_after: Option<u32>,
    /// Latencies, ms.
    dns: u64,
    tcp: u64,
    tls: u64,
    settings: u64,
    exchange: u64,
}

#[derive(Default)]
struct ServerConn {
    open: u32,
    /// Streams accepted so far (GOAWAY counts these).
    accepted: u32,
    settings_sent: bool,
    going_away: bool,
    max_open: u32,
}

struct World {
    pool: Pool,
    server: Server,
    now: u64,
    seq: u64,
    queue: BTreeMap<(u64, u64), Ev>,
    conns: BTreeMap<ConnectionId, ServerConn>,
    done: BTreeSet<CallId>,
    failed: BTreeMap<CallId, NoRetry>,
    /// Calls the pool could not give a connection (the tests that expect
    /// none check this is empty).
    acquire_failed: BTreeMap<CallId, switchyard_core::AcquireError>,
    refused: u32,
    goaway_retries: u32,
}

impl World {
    fn new(config: PoolConfig, server: Server) -> World {
        World {
            pool: Pool::new(config),
            server,
            now: 0,
            seq: 0,
            queue: BTreeMap::new(),
            conns: BTreeMap::new(),
            done: BTreeSet::new(),
            failed: BTreeMap::new(),
            acquire_failed: BTreeMap::new(),
            refused: 0,
            goaway_retries: 0,
        }
    }

    fn at(&mut self, delay: u64, ev: Ev) {
        self.seq += 1;
        self.queue.insert((self.now + delay, self.seq), ev);
    }

    fn facts() -> RequestFacts {
        RequestFacts { idempotent: true, body_replayable: true }
    }

    fn failed(&mut self, call: CallId, kind: ExchangeFailureKind) {
        let failure = ExchangeFailure { kind, progress: Progress::RequestWritten, request: World::facts() };
        match self.pool.exchange_failed(ms(self.now), call, failure).unwrap() {
            FailureOutcome::Retrying(reason) => {
                if reason == RetryReason::GoAwayUnprocessed {
                    self.goaway_retries += 1;
                }
            }
            FailureOutcome::Failed(e) => {
                self.failed.insert(call, e.why);
            }
        }
    }

    fn drain(&mut self) {
        loop {
            while self.pool.poll_event().is_some() {}
            let Some(action) = self.pool.poll_action() else { break };
            match action {
                PoolAction::Resolve { query, .. } => self.at(self.server.dns, Ev::Dns(query)),
                PoolAction::Connect { attempt, .. } => self.at(self.server.tcp, Ev::Connected(attempt)),
                PoolAction::Handshake { attempt, .. } => self.at(self.server.tls, Ev::Established(attempt)),
                PoolAction::Established { connection, protocol, .. } => {
                    assert_eq!(protocol, Protocol::Http2);
                    self.conns.insert(connection, ServerConn::default());
                    self.at(self.server.settings, Ev::Settings(connection));
                }
                PoolAction::Acquired { call, connection, .. } => self.stream(call, connection),
                PoolAction::AcquireFailed { call, error } => {
                    assert!(self.server.limit == 0, "{call}: {error}");
                    self.acquire_failed.insert(call, error);
                }
                PoolAction::CancelAttempt { .. } | PoolAction::Close { .. } => {}
                PoolAction::Probe { .. } | PoolAction::Ping { .. } => {}
                PoolAction::Abort { connection, .. } => {
                    assert!(self.server.limit == 0, "{connection} aborted: its SETTINGS always come");
                }
            }
        }
    }

    /// The call's stream reaches the server.
    fn stream(&mut self, call: CallId, connection: ConnectionId) {
        let limit = self.server.limit;
        let pool_view = self.pool.connection(connection).unwrap();
        let c = self.conns.get_mut(&connection).unwrap();
        // The pool never opens more than one stream before SETTINGS, nor more
        // than the limit after.
        assert!(
            pool_view.in_flight() <= if c.settings_sent { limit } else { 1 },
            "{connection}: {} streams (SETTINGS seen: {})",
            pool_view.in_flight(),
            c.settings_sent
        );
        if !c.going_away && self.server.goaway_after.is_some_and(|n| c.accepted >= n) {
            c.going_away = true;
            let goaway = GoAway { last_stream_id: last_stream(c.accepted), error_code: 0 };
            self.pool.goaway(ms(self.now), connection, goaway).unwrap();
        }
        let c = self.conns.get_mut(&connection).unwrap();
        if c.going_away {
            // Above the GOAWAY's last stream id: not processed.
            self.failed(call, ExchangeFailureKind::GoAwayUnprocessed);
            return;
        }
        if limit == 0 && !c.settings_sent {
            self.refused += 1;
            self.at(self.server.settings, Ev::Refuse(call));
            return;
        }
        if c.open >= limit {
            self.refused += 1;
            self.failed(call, ExchangeFailureKind::RefusedStream);
            return;
        }
        c.open += 1;
        c.accepted += 1;
        c.max_open = c.max_open.max(c.open);
        let goaway = self.server.goaway_after.is_some_and(|n| c.accepted >= n);
        if goaway {
            c.going_away = true;
        }
        let accepted = c.accepted;
        self.at(self.server.exchange, Ev::Finish(call, connection));
        if goaway {
            // What a server with a per-connection limit sends (nginx's
            // `keepalive_requests`): the last stream it took.
            let goaway = GoAway { last_stream_id: last_stream(accepted), error_code: 0 };
            self.pool.goaway(ms(self.now), connection, goaway).unwrap();
        }
    }

    fn run(&mut self) {
        self.drain();
        while let Some(((t, _), ev)) = self.queue.pop_first() {
            while let Some(deadline) = self.pool.poll_timeout().filter(|d| *d <= ms(t)) {
                self.now = self.now.max(u64::try_from(deadline.elapsed_since_origin().as_millis()).unwrap());
                self.pool.handle_timeout(deadline);
                self.drain();
            }
            self.now = t;
            let now = ms(t);
            match ev {
                Ev::Dns(q) => self.pool.handle_dns(now, q, Ok(vec!["10.0.0.1".parse().unwrap()])).unwrap(),
                Ev::Connected(a) => self.pool.handle_connected(now, a).unwrap(),
                Ev::Established(a) => {
                    let tls = TlsFacts { dns_names: vec!["a.test".into()], ..TlsFacts::default() };
                    self.pool.handle_established(now, a, Some(Protocol::Http2), Some(tls)).unwrap();
                }
                Ev::Settings(k) => {
                    self.conns.get_mut(&k).unwrap().settings_sent = true;
                    if self.pool.connection(k).is_some() {
                        self.pool.settings(now, k, Some(self.server.limit)).unwrap();
                    }
                }
                Ev::Refuse(call) => self.failed(call, ExchangeFailureKind::RefusedStream),
                Ev::Finish(call, k) => {
                    self.conns.get_mut(&k).unwrap().open -= 1;
                    self.pool.exchange_finished(now, call, Reuse::Reusable).unwrap();
                    self.done.insert(call);
                }
            }
            self.drain();
        }
        self.pool.check_invariants().unwrap();
    }

    /// Runs, then lets the pool's timers fire until `until` ms (nothing else
    /// happening meanwhile), running again after each.
    fn run_until(&mut self, until: u64) {
        self.run();
        while let Some(deadline) = self.pool.poll_timeout().filter(|d| *d <= ms(until)) {
            self.now = self.now.max(u64::try_from(deadline.elapsed_since_origin().as_millis()).unwrap());
            self.pool.handle_timeout(deadline);
            self.run();
        }
    }
}

/// HTTP/2 with prior knowledge on 127.0.0.1: no DNS, no TLS.
fn h2c() -> Address {
    Address::builder(Scheme::Http, "127.0.0.1", 80).protocols([Protocol::H2PriorKnowledge]).build().unwrap()
}

/// Acquires for `a` and connects: the call holds a new connection (no SETTINGS yet).
fn open(pool: &mut Pool, a: &Address) -> (CallId, ConnectionId) {
    let call = pool.acquire(ms(0), a.clone(), AcquireOptions::default());
    let Some(PoolAction::Connect { attempt, .. }) = pool.poll_action() else { panic!() };
    pool.handle_connected(ms(1), attempt).unwrap();
    let Some(PoolAction::Established { connection, .. }) = pool.poll_action() else { panic!() };
    assert!(matches!(pool.poll_action(), Some(PoolAction::Acquired { call: c, .. }) if c == call));
    (call, connection)
}

fn address() -> Address {
    Address::builder(Scheme::Https, "a.test", 443).build().unwrap()
}

/// The id of a connection's `n`th client stream (1, 3, 5, …; 0 for none).
fn last_stream(n: u32) -> u32 {
    (2 * n).saturating_sub(1)
}

fn burst(world: &mut World, n: usize) -> Vec<CallId> {
    (0..n).map(|_| world.pool.acquire(ms(0), address(), AcquireOptions::default())).collect()
}

const SERVER: Server =
    Server { limit: 3, goaway_after: None, dns: 1, tcp: 2, tls: 3, settings: 1, exchange: 1_000 };

/// BEHAVIOUR §4's example: 64 calls at once against a server whose SETTINGS say
/// 3. At most 3 streams on any connection at any moment, not one refusal, and
/// ceil(64 / 3) = 22 connections: one first (its SETTINGS teach the limit),
/// then as many connects as the waiting calls need, at once.
#[test]
fn a_burst_of_64_against_a_limit_of_3_opens_22_connections_and_is_never_refused() {
    let mut w = World::new(PoolConfig::default(), SERVER);
    let calls = burst(&mut w, 64);
    w.run();
    assert_eq!(w.done.len(), 64, "every call completed");
    assert!(calls.iter().all(|c| w.done.contains(c)));
    assert_eq!(w.refused, 0, "no stream beyond the limit reached the server");
    assert!(w.conns.values().all(|c| c.max_open <= 3));
    let stats = w.pool.stats();
    assert_eq!(stats.created, 22, "ceil(64 / 3)");
    assert_eq!(stats.wasted, 0);
    // Each connection was filled to the limit.
    assert_eq!(w.conns.values().filter(|c| c.max_open == 3).count(), 21);
}

/// The same burst with a per-host cap: calls wait for streams, none is refused,
/// the cap holds.
#[test]
fn a_burst_under_a_per_host_cap_waits_for_streams() {
    let config = PoolConfig { max_connections_per_address: Some(4), ..PoolConfig::default() };
    let mut w = World::new(config, SERVER);
    burst(&mut w, 64);
    w.run();
    assert_eq!(w.done.len(), 64);
    assert_eq!(w.refused, 0);
    assert_eq!(w.pool.stats().created, 4);
}

/// Until a connection's SETTINGS arrive it carries one stream; if they never
/// arrive, the handshake timeout retires it and the calls that waited for it
/// race connections of their own.
#[test]
fn calls_wait_for_settings_and_move_on_when_they_never_come() {
    let config = PoolConfig::default();
    let timeout = config.race.handshake_timeout;
    let mut pool = Pool::new(config);
    let a = h2c();
    let first = pool.acquire(ms(0), a.clone(), AcquireOptions::default());
    let Some(PoolAction::Connect { attempt, .. }) = pool.poll_action() else { panic!() };
    let waiting: Vec<_> = (0..5).map(|_| pool.acquire(ms(1), a.clone(), AcquireOptions::default())).collect();
    assert_eq!(pool.poll_action(), None, "prior knowledge: one connect for the origin; the rest wait");
    pool.handle_connected(ms(2), attempt).unwrap();
    let Some(PoolAction::Established { connection, .. }) = pool.poll_action() else { panic!() };
    assert!(matches!(pool.poll_action(), Some(PoolAction::Acquired { call, .. }) if call == first));
    assert_eq!(pool.poll_action(), None, "one stream until SETTINGS");
    assert_eq!(pool.connection(connection).unwrap().stream_limit(), 1);
    assert!(!pool.connection(connection).unwrap().settings_received());
    assert_eq!(pool.stats().totals.waiters, 5);

    assert_eq!(pool.poll_timeout(), Some(ms(2) + timeout), "SETTINGS are due by the handshake timeout");
    pool.handle_timeout(ms(2) + timeout);
    assert_eq!(pool.connection(connection).unwrap().no_new_exchanges(), Some(CloseReason::NeverUsable));
    let actions: Vec<_> = std::iter::from_fn(|| pool.poll_action()).collect();
    // The first call's stream cannot finish: the driver ends the connection now.
    assert_eq!(actions[0], PoolAction::Abort { connection, reason: CloseReason::NeverUsable });
    let connects = actions.iter().filter(|a| matches!(a, PoolAction::Connect { .. })).count();
    assert_eq!(connects, 1, "the first waiter races; the others wait for its connect");
    assert_eq!(pool.stats().totals.waiters, waiting.len() - 1);
}

/// SETTINGS in time: the waiting calls share the connection up to its limit.
#[test]
fn settings_release_the_waiting_calls_up_to_the_limit() {
    let mut pool = Pool::new(PoolConfig::default());
    let a = h2c();
    pool.acquire(ms(0), a.clone(), AcquireOptions::default());
    let Some(PoolAction::Connect { attempt, .. }) = pool.poll_action() else { panic!() };
    for _ in 0..5 {
        pool.acquire(ms(1), a.clone(), AcquireOptions::default());
    }
    pool.handle_connected(ms(2), attempt).unwrap();
    let Some(PoolAction::Established { connection, .. }) = pool.poll_action() else { panic!() };
    while pool.poll_action().is_some() {}
    pool.settings(ms(3), connection, Some(4)).unwrap();
    let actions: Vec<_> = std::iter::from_fn(|| pool.poll_action()).collect();
    let shared = actions.iter().filter(|a| matches!(a, PoolAction::Acquired { .. })).count();
    let connects = actions.iter().filter(|a| matches!(a, PoolAction::Connect { .. })).count();
    assert_eq!(
        (shared, connects),
        (3, 1),
        "3 more streams (limit 4); one connect for the other 2: {actions:?}"
    );
    assert_eq!(pool.connection(connection).unwrap().in_flight(), 4);
    let settings_due = ms(2) + PoolConfig::default().race.handshake_timeout;
    assert_ne!(pool.poll_timeout(), Some(settings_due), "SETTINGS arrived: not due any more");
}

/// A refusal of a stream opened before SETTINGS that then allowed fewer
/// streams is the client's doing: free retry, not held against the connection.
#[test]
fn a_refusal_beyond_the_advertised_limit_is_not_held_against_anyone() {
    let config = PoolConfig { max_retries: 0, ..PoolConfig::default() };
    let mut pool = Pool::new(config);
    let a = h2c();
    let (call, connection) = open(&mut pool, &a);
    // The server allows no stream yet, and refuses the one it got.
    pool.settings(ms(2), connection, Some(0)).unwrap();
    let refused = ExchangeFailure {
        kind: ExchangeFailureKind::RefusedStream,
        progress: Progress::RequestWritten,
        request: World::facts(),
    };
    let out = pool.exchange_failed(ms(3), call, refused.clone()).unwrap();
    assert_eq!(out, FailureOutcome::Retrying(RetryReason::StreamLimit), "free: max_retries is 0");
    assert_eq!(pool.connection(connection).unwrap().no_new_exchanges(), None, "not held against it");
    // The server raises its limit; the call gets its stream there (the connect
    // it started meanwhile joins the pool).
    pool.settings(ms(4), connection, Some(10)).unwrap();
    let acquired = std::iter::from_fn(|| pool.poll_action()).any(
        |a| matches!(a, PoolAction::Acquired { call: c, connection: k, .. } if c == call && k == connection),
    );
    assert!(acquired);
    // A refusal within the limit counts as usual (and max_retries is 0).
    let out = pool.exchange_failed(ms(5), call, refused).unwrap();
    assert!(
        matches!(out, FailureOutcome::Failed(ref e) if e.why == NoRetry::RetryLimit && !e.may_have_been_sent)
    );
}

/// nginx with `keepalive_requests 10`: a GOAWAY every 10 streams. Retries after
/// GOAWAY do not count toward the cap: every call completes, even with
/// `max_retries` 0.
#[test]
fn goaway_churn_never_fails_a_call() {
    let config = PoolConfig { max_retries: 0, ..PoolConfig::default() };
    let server = Server { limit: 100, goaway_after: Some(10), exchange: 5, ..SERVER };
    let mut w = World::new(config, server);
    // 16 callers, 2,000 calls: each caller's next call starts when one ends.
    let mut started = 16;
    burst(&mut w, 16);
    w.run();
    while started < 2_000 {
        let more = 16.min(2_000 - started);
        started += more;
        burst(&mut w, more);
        w.run();
    }
    assert_eq!(w.failed, BTreeMap::new());
    assert_eq!(w.done.len(), 2_000);
    assert!(w.goaway_retries > 0, "the churn happened");
    let closed = &w.pool.stats().closed;
    let recycled =
        closed.get(&CloseReason::GoAway).unwrap_or(&0) + closed.get(&CloseReason::StreamBudget).unwrap_or(&0);
    assert!(recycled >= 199, "{closed:?}");
}

/// nginx's `keepalive_requests 5` under 128 callers (issue: an egress proxy
/// lost half its requests): the pool learns from two GOAWAYs that left
/// streams unprocessed that the server takes 5 streams per connection, and
/// from then on gives each connection 5 and no more: every call completes
/// with the default retry bounds, and the server turns away no stream after
/// the first few connections.
#[test]
fn a_per_connection_stream_limit_is_learned_from_goaway() {
    let server = Server { limit: 128, goaway_after: Some(5), exchange: 5, ..SERVER };
    let mut w = World::new(PoolConfig::default(), server);
    let mut started = 128;
    burst(&mut w, 128);
    w.run();
    let retries_early = w.goaway_retries;
    assert!(retries_early > 0, "the first connections turned streams away");
    while started < 5_000 {
        let more = 128.min(5_000 - started);
        started += more;
        burst(&mut w, more);
        w.run();
    }
    assert_eq!(w.failed, BTreeMap::new());
    assert_eq!(w.acquire_failed, BTreeMap::new());
    assert_eq!(w.done.len(), 5_000);
    assert_eq!(w.goaway_retries, retries_early, "once learned, no stream is turned away");
    let closed = &w.pool.stats().closed;
    assert!(closed.get(&CloseReason::StreamBudget).is_some_and(|n| *n >= 900), "{closed:?}");
}

/// A GOAWAY that turned nothing away (a shutdown, or the server's limit met
/// exactly) teaches nothing; nor do two that disagree (reloads land
/// anywhere): a later connection keeps taking streams. Two that agree do.
#[test]
fn only_goaways_that_agree_teach_a_stream_budget() {
    let a = h2c();
    let budget_closes =
        |pool: &Pool| pool.stats().closed.get(&CloseReason::StreamBudget).copied().unwrap_or(0);
    // Three streams on a new connection, then its GOAWAY after `processed`.
    let round = |pool: &mut Pool, t: u64, processed: u32| {
        let (first, k) = open(pool, &a);
        pool.settings(ms(t), k, Some(100)).unwrap();
        let calls: Vec<CallId> =
            (0..2).map(|_| pool.acquire(ms(t), a.clone(), AcquireOptions::default())).collect();
        let mut on_k = 1;
        while let Some(action) = pool.poll_action() {
            if let PoolAction::Acquired { connection, .. } = action {
                on_k += u32::from(connection == k);
            }
        }
        pool.goaway(ms(t), k, GoAway { last_stream_id: last_stream(processed), error_code: 0 }).unwrap();
        for c in std::iter::once(first).chain(calls) {
            let _ = pool.exchange_finished(ms(t + 1), c, Reuse::Reusable);
        }
        while pool.poll_action().is_some() {}
        on_k
    };
    let mut pool = Pool::new(PoolConfig::default());
    // Met exactly (3 of 3), then two that disagree (1, then 2).
    for (t, processed) in [(10, 3), (20, 1), (30, 2)] {
        assert_eq!(round(&mut pool, t, processed), 3);
    }
    assert_eq!(round(&mut pool, 40, 3), 3, "no budget learned: the connection took all three");
    assert_eq!(budget_closes(&pool), 0);
    // The same GOAWAY twice on one connection is one lesson, not two.
    let mut pool = Pool::new(PoolConfig::default());
    let (first, k) = open(&mut pool, &a);
    pool.settings(ms(5), k, Some(100)).unwrap();
    let more: Vec<CallId> =
        (0..2).map(|_| pool.acquire(ms(5), a.clone(), AcquireOptions::default())).collect();
    while pool.poll_action().is_some() {}
    for _ in 0..2 {
        pool.goaway(ms(6), k, GoAway { last_stream_id: last_stream(2), error_code: 0 }).unwrap();
    }
    for c in std::iter::once(first).chain(more) {
        let _ = pool.exchange_finished(ms(7), c, Reuse::Reusable);
    }
    while pool.poll_action().is_some() {}
    assert_eq!(round(&mut pool, 10, 9), 3, "one connection's GOAWAYs taught nothing");
    // Two that agree (2, 2): the next connection takes two streams, no more.
    let mut pool = Pool::new(PoolConfig::default());
    assert_eq!(round(&mut pool, 10, 2), 3);
    assert_eq!(round(&mut pool, 20, 2), 3);
    assert_eq!(round(&mut pool, 30, 9), 2, "the budget retired it after two streams");
    assert_eq!(budget_closes(&pool), 1);
}

/// The free retries are bounded: a call turned away by GOAWAY more than
/// `max_free_retries` times fails, saying the request was not processed.
#[test]
fn goaway_retries_are_bounded() {
    let config = PoolConfig { max_free_retries: 3, ..PoolConfig::default() };
    // Every connection goes away before it takes any stream.
    let server = Server { limit: 100, goaway_after: Some(0), ..SERVER };
    let mut w = World::new(config, server);
    let calls = burst(&mut w, 1);
    w.run();
    assert_eq!(w.failed.get(&calls[0]), Some(&NoRetry::FreeRetryLimit));
    assert_eq!(w.goaway_retries, 3);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// For any limit and burst size: never a stream beyond the limit (or more
    /// than one before SETTINGS), never a refusal, and exactly ceil(n / limit)
    /// connections when the exchanges outlast the connects.
    #[test]
    fn bursts_use_the_fewest_connections_the_limit_allows(
        limit in 1u32..=12,
        n in 1usize..=150,
        dns in 0u64..5, tcp in 0u64..5, tls in 0u64..5, settings in 0u64..5,
    ) {
        let server = Server { limit, goaway_after: None, dns, tcp, tls, settings, exchange: 10_000 };
        let mut w = World::new(PoolConfig::default(), server);
        burst(&mut w, n);
        w.run();
        prop_assert_eq!(w.done.len(), n);
        prop_assert_eq!(w.refused, 0);
        let expected = (n as u64).div_ceil(u64::from(limit));
        prop_assert_eq!(w.pool.stats().created, expected);
        prop_assert!(w.conns.values().all(|c| c.max_open <= limit));
    }
}

/// A call turned away by GOAWAY keeps its place: it waits ahead of calls that
/// asked after it, so it gets the next connection's first free stream (a
/// server that takes only so many streams per connection would otherwise turn
/// the same call away again and again).
#[test]
fn a_call_turned_away_by_goaway_waits_ahead_of_newer_calls() {
    let mut pool = Pool::new(PoolConfig::default());
    let a = h2c();
    let acquire = |pool: &mut Pool, t| pool.acquire(ms(t), a.clone(), AcquireOptions::default());
    let (first, k1) = open(&mut pool, &a);
    pool.settings(ms(2), k1, None).unwrap();
    let old = acquire(&mut pool, 3);
    assert!(matches!(pool.poll_action(), Some(PoolAction::Acquired { call, .. }) if call == old));
    pool.goaway(ms(4), k1, GoAway::graceful()).unwrap();
    // Newer calls: one races a new connection, one waits for it.
    let racer = acquire(&mut pool, 5);
    let Some(PoolAction::Connect { attempt, .. }) = pool.poll_action() else { panic!() };
    let newer = acquire(&mut pool, 6);
    // The old call's stream was above the GOAWAY's last stream id.
    let unprocessed = ExchangeFailure {
        kind: ExchangeFailureKind::GoAwayUnprocessed,
        progress: Progress::RequestWritten,
        request: World::facts(),
    };
    let out = pool.exchange_failed(ms(7), old, unprocessed).unwrap();
    assert_eq!(out, FailureOutcome::Retrying(RetryReason::GoAwayUnprocessed));
    pool.handle_connected(ms(8), attempt).unwrap();
    let Some(PoolAction::Established { connection: k2, .. }) = pool.poll_action() else { panic!() };
    assert!(matches!(pool.poll_action(), Some(PoolAction::Acquired { call, .. }) if call == racer));
    pool.settings(ms(9), k2, Some(2)).unwrap();
    let next: Vec<CallId> = std::iter::from_fn(|| pool.poll_action())
        .filter_map(|a| match a {
            PoolAction::Acquired { call, connection, .. } if connection == k2 => Some(call),
            _ => None,
        })
        .collect();
    assert_eq!(next, [old], "the turned-away call first; {newer} waits for a stream or a connect");
    pool.exchange_finished(ms(10), first, Reuse::Reusable).unwrap();
}

/// A connection that fails before the server's first SETTINGS never answered
/// as an HTTP/2 server (HTTP/2 with prior knowledge to an HTTP/1.1 server):
/// whatever the adapter saw (nothing written yet, or the request written; an
/// I/O error or bytes that are not frames), the call fails one way — a
/// protocol error, "may have been sent", not retried. After SETTINGS, an I/O
/// failure with nothing written keeps its proof: retried.
#[test]
fn a_connection_failing_before_settings_fails_every_stream_one_way() {
    let reports = [
        (
            ExchangeFailureKind::Io { kind: std::io::ErrorKind::ConnectionReset, message: "reset".into() },
            Progress::NothingWritten,
        ),
        (ExchangeFailureKind::Protocol { message: "frame size".into() }, Progress::NothingWritten),
        (ExchangeFailureKind::Protocol { message: "frame size".into() }, Progress::RequestWritten),
    ];
    for (kind, progress) in reports {
        let mut pool = Pool::new(PoolConfig::default());
        let a = h2c();
        let (call, _) = open(&mut pool, &a);
        let failure = ExchangeFailure { kind: kind.clone(), progress, request: World::facts() };
        let out = pool.exchange_failed(ms(2), call, failure).unwrap();
        let FailureOutcome::Failed(e) = out else { panic!("{kind:?}: retried") };
        assert_eq!(e.why, NoRetry::Protocol, "{kind:?}");
        assert!(e.may_have_been_sent, "{kind:?}");
        assert!(e.kind.to_string().contains("did not answer as an HTTP/2 server"), "{}", e.kind);
    }
    let mut pool = Pool::new(PoolConfig::default());
    let (call, k) = open(&mut pool, &h2c());
    pool.settings(ms(2), k, None).unwrap();
    let reset =
        ExchangeFailureKind::Io { kind: std::io::ErrorKind::ConnectionReset, message: "reset".into() };
    let failure =
        ExchangeFailure { kind: reset, progress: Progress::NothingWritten, request: World::facts() };
    assert_eq!(
        pool.exchange_failed(ms(2), call, failure),
        Ok(FailureOutcome::Retrying(RetryReason::NotSent))
    );
}

/// A server whose SETTINGS allow zero streams (MAX_CONCURRENT_STREAMS 0):
/// its connection is never usable. Calls open one connection between them
/// (not one per retry), wait for its never-usable timer, and fail typed,
/// naming the server's setting; a call after that may try one new
/// connection, which costs the same: one connection per period.
#[test]
fn a_server_allowing_zero_streams_costs_one_connection_per_never_usable_period() {
    let config = PoolConfig::default();
    let timeout = config.race.handshake_timeout.as_millis() as u64;
    let server = Server { limit: 0, ..SERVER };
    let mut w = World::new(config, server);
    let calls = burst(&mut w, 3);
    w.run_until(2 * timeout);
    assert_eq!(w.pool.stats().created, 1, "one connection for the whole never-usable period");
    assert!(w.done.is_empty() && w.failed.is_empty(), "no call was refused as an exchange failure");
    for call in &calls {
        let error = w.acquire_failed.get(call).map(ToString::to_string).expect("every call failed");
        assert!(error.contains("MAX_CONCURRENT_STREAMS 0"), "{error}");
        assert!(matches!(w.acquire_failed[call], switchyard_core::AcquireError::NoStreams { .. }), "{error}");
    }
    assert!(w.now >= timeout, "the calls waited for the never-usable timer ({} ms)", w.now);
    assert_eq!(w.pool.stats().closed.get(&CloseReason::NeverUsable), Some(&1));

    // The next call, after the period: one new connection, the same end.
    let next = w.pool.acquire(ms(w.now), address(), AcquireOptions::default());
    w.run_until(w.now + 2 * timeout);
    assert_eq!(w.pool.stats().created, 2);
    assert!(matches!(w.acquire_failed.get(&next), Some(switchyard_core::AcquireError::NoStreams { .. })));
}

/// A server that allows zero streams at first and raises its limit before
/// the never-usable timer: the waiting calls are served on that connection.
#[test]
fn zero_streams_then_a_raised_limit_serves_the_waiting_calls() {
    let mut pool = Pool::new(PoolConfig::default());
    let a = h2c();
    let (first, connection) = open(&mut pool, &a);
    pool.settings(ms(2), connection, Some(0)).unwrap();
    // The early stream is refused: beyond the limit the SETTINGS set, a free retry.
    let failure = ExchangeFailure {
        kind: ExchangeFailureKind::RefusedStream,
        progress: Progress::RequestWritten,
        request: World::facts(),
    };
    let outcome = pool.exchange_failed(ms(3), first, failure).unwrap();
    assert_eq!(outcome, FailureOutcome::Retrying(RetryReason::StreamLimit));
    let second = pool.acquire(ms(4), a.clone(), AcquireOptions::default());
    let actions: Vec<_> = std::iter::from_fn(|| pool.poll_action()).collect();
    assert!(
        actions.iter().all(|x| !matches!(x, PoolAction::Connect { .. } | PoolAction::Resolve { .. })),
        "no new connection while the only one allows zero streams: {actions:?}"
    );
    assert_eq!(pool.stats().totals.waiters, 2);
    pool.settings(ms(50), connection, Some(10)).unwrap();
    let acquired: Vec<CallId> = std::iter::from_fn(|| pool.poll_action())
        .filter_map(|x| match x {
            PoolAction::Acquired { call, connection: c, .. } if c == connection => Some(call),
            _ => None,
        })
        .collect();
    assert_eq!(acquired, vec![first, second]);
    pool.check_invariants().unwrap();
}
