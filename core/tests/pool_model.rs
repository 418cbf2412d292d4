//! A proptest model test of the pool: random sequences of acquire, connect ok/fail,
//! finish, exchange failure, peer close, SETTINGS, GOAWAY, clock advance, cancel and
//! evict_all, checked after every step against a driver-side reference model and
//! the pool's invariants: never two exchanges on an HTTP/1 connection; never a new
//! stream above the HTTP/2 limit; never above a cap; a closed or no-new-exchanges
//! connection is never handed out; stats equal a recount from scratch; and, once
//! the sequence is over and everything is wound down, every call has ended with a
//! connection or a typed error and nothing is left waiting, connecting or in use.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use proptest::prelude::*;
use switchyard_core::http2::GoAway;
use switchyard_core::pool::{ExchangeFailure, ExchangeFailureKind, Progress, RequestFacts};
use switchyard_core::{
    AcquireOptions, Address, AttemptId, CallId, CloseReason, ConnectError, ConnectionId, FailureOutcome,
    Instant, Pool, PoolAction, PoolConfig, Protocol, Reuse, Scheme, StreamLimitPolicy, TlsFacts,
};

#[derive(Clone, Debug)]
enum Op {
    Acquire { addr: usize, exclusive: bool, multiplexed: bool },
    ConnectOk(usize),
    ConnectFail(usize),
    Finish { call: usize, reusable: bool },
    ExchangeFail { call: usize, kind: u8, progress: u8, idempotent: bool },
    PeerClose(usize),
    Settings { conn: usize, limit: u32 },
    GoAway(usize),
    Advance(u64),
    Cancel(usize),
    EvictAll,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..5, prop::bool::weighted(0.1), prop::bool::weighted(0.1))
            .prop_map(|(addr, exclusive, multiplexed)| Op::Acquire { addr, exclusive, multiplexed }),
        4 => any::<usize>().prop_map(Op::ConnectOk),
        1 => any::<usize>().prop_map(Op::ConnectFail),
        4 => (any::<usize>(), prop::bool::weighted(0.8)).prop_map(|(call, reusable)| Op::Finish { call, reusable }),
        1 => (any::<usize>(), 0u8..6, 0u8..3, any::<bool>())
            .prop_map(|(call, kind, progress, idempotent)| Op::ExchangeFail { call, kind, progress, idempotent }),
        1 => any::<usize>().prop_map(Op::PeerClose),
        1 => (any::<usize>(), 0u32..4).prop_map(|(conn, limit)| Op::Settings { conn, limit }),
        1 => any::<usize>().prop_map(Op::GoAway),
        2 => (0u64..200).prop_map(Op::Advance),
        1 => any::<usize>().prop_map(Op::Cancel),
        1 => Just(Op::EvictAll),
    ]
}

fn addresses() -> Vec<Address> {
    let b = |s, h: &str| Address::builder(s, h, 80);
    vec![
        b(Scheme::Http, "127.0.0.1").build().unwrap(),
        b(Scheme::Http, "127.0.0.2").build().unwrap(),
        b(Scheme::Http, "127.0.0.3").protocols([Protocol::H2PriorKnowledge]).build().unwrap(),
        Address::builder(Scheme::Https, "a.example.com", 443).build().unwrap(),
        Address::builder(Scheme::Https, "b.example.com", 443).build().unwrap(),
    ]
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum CallModel {
    Pending,
    Active(ConnectionId),
    Ended,
}

struct Model {
    pool: Pool,
    now: Instant,
    attempts: Vec<AttemptId>,
    handshakes: Vec<AttemptId>,
    calls: BTreeMap<CallId, CallModel>,
    order: Vec<CallId>,
    open: BTreeMap<ConnectionId, Protocol>,
    active: BTreeMap<ConnectionId, BTreeSet<CallId>>,
    /// Events drained so far.
    events: usize,
}

fn pick<T: Copy>(items: &[T], i: usize) -> Option<T> {
    (!items.is_empty()).then(|| items[i % items.len()])
}

impl Model {
    fn drain(&mut self) -> Result<(), TestCaseError> {
        while let Some(a) = self.pool.poll_action() {
            match a {
                PoolAction::Resolve { query, .. } => {
                    // Every https host lives on one IP, so coalescing can happen.
                    self.pool.handle_dns(self.now, query, Ok(vec!["127.0.0.4".parse().unwrap()])).unwrap();
                }
                PoolAction::Connect { attempt, .. } => self.attempts.push(attempt),
                PoolAction::Handshake { attempt, .. } => {
                    self.attempts.retain(|a| *a != attempt);
                    self.handshakes.push(attempt);
                }
                PoolAction::CancelAttempt { attempt } => {
                    let before = self.attempts.len() + self.handshakes.len();
                    self.attempts.retain(|a| *a != attempt);
                    self.handshakes.retain(|a| *a != attempt);
                    prop_assert_eq!(
                        before,
                        self.attempts.len() + self.handshakes.len() + 1,
                        "cancel of unknown attempt"
                    );
                }
                PoolAction::Established { attempt, connection, protocol } => {
                    self.attempts.retain(|a| *a != attempt);
                    self.handshakes.retain(|a| *a != attempt);
                    prop_assert!(self.open.insert(connection, protocol).is_none());
                }
                PoolAction::Acquired { call, connection, .. } => {
                    prop_assert_eq!(
                        self.calls.get(&call),
                        Some(&CallModel::Pending),
                        "acquired twice or ended"
                    );
                    prop_assert!(self.open.contains_key(&connection), "handed out a closed connection");
                    let c = self.pool.connection(connection).unwrap();
                    prop_assert!(
                        matches!(c.no_new_exchanges(), None | Some(CloseReason::Exclusive)),
                        "handed out a retired connection: {:?}",
                        c.no_new_exchanges()
                    );
                    prop_assert!(c.in_flight() <= c.stream_limit(), "over the stream limit");
                    let set = self.active.entry(connection).or_default();
                    set.insert(call);
                    if self.open[&connection] == Protocol::Http1 {
                        prop_assert_eq!(set.len(), 1, "two exchanges on HTTP/1");
                    }
                    self.calls.insert(call, CallModel::Active(connection));
                }
                PoolAction::AcquireFailed { call, .. } => {
                    if let Some(state) = self.calls.get_mut(&call) {
                        prop_assert_eq!(*state, CallModel::Pending, "failed after acquiring");
                        *state = CallModel::Ended;
                    }
                }
                PoolAction::Probe { connection } => {
                    prop_assert!(self.open.contains_key(&connection), "probed a closed connection");
                    prop_assert!(
                        self.active.get(&connection).is_none_or(BTreeSet::is_empty),
                        "probed in use"
                    );
                }
                PoolAction::Ping { connection } => {
                    prop_assert!(self.open.contains_key(&connection), "pinged a closed connection");
                }
                PoolAction::Abort { connection, .. } => {
                    prop_assert!(self.open.contains_key(&connection), "aborted a closed connection");
                    prop_assert!(
                        self.active.get(&connection).is_some_and(|a| !a.is_empty()),
                        "aborted with nothing in flight (it would just close)"
                    );
                }
                PoolAction::Close { connection, .. } => {
                    prop_assert!(self.open.remove(&connection).is_some(), "closed twice");
                    prop_assert!(
                        self.active.get(&connection).is_none_or(BTreeSet::is_empty),
                        "closed in use"
                    );
                }
            }
        }
        while self.pool.poll_event().is_some() {
            self.events += 1;
        }
        self.pool.check_invariants().map_err(TestCaseError::fail)?;
        // The reference model and the pool agree on what is open, in use and live.
        let stats = self.pool.stats();
        prop_assert_eq!(stats.totals.open, self.open.len());
        let in_use = self.active.values().filter(|s| !s.is_empty()).count();
        prop_assert_eq!(stats.totals.in_use, in_use);
        let live = self.calls.values().filter(|s| **s != CallModel::Ended).count();
        prop_assert_eq!(stats.calls, live);
        Ok(())
    }

    fn end_exchange(&mut self, call: CallId) {
        if let Some(CallModel::Active(conn)) = self.calls.get(&call).copied() {
            self.active.get_mut(&conn).unwrap().remove(&call);
            self.calls.insert(call, CallModel::Ended);
        }
    }

    fn active_calls(&self) -> Vec<CallId> {
        self.calls.iter().filter(|(_, s)| matches!(s, CallModel::Active(_))).map(|(c, _)| *c).collect()
    }

    fn apply(&mut self, op: &Op, addrs: &[Address]) -> Result<(), TestCaseError> {
        let now = self.now;
        match *op {
            Op::Acquire { addr, exclusive, multiplexed } => {
                let options = AcquireOptions {
                    exclusive,
                    require_multiplexed: multiplexed,
                    ..AcquireOptions::default()
                };
                let id = self.pool.acquire(now, addrs[addr].clone(), options);
                self.calls.insert(id, CallModel::Pending);
                self.order.push(id);
            }
            Op::ConnectOk(i) => {
                let all: Vec<AttemptId> = self.attempts.iter().chain(&self.handshakes).copied().collect();
                if let Some(a) = pick(&all, i) {
                    if self.handshakes.contains(&a) {
                        let facts =
                            TlsFacts { dns_names: vec!["*.example.com".into()], ..TlsFacts::default() };
                        self.pool.handle_established(now, a, Some(Protocol::Http2), Some(facts)).unwrap();
                    } else {
                        self.pool.handle_connected(now, a).unwrap();
                    }
                }
            }
            Op::ConnectFail(i) => {
                let all: Vec<AttemptId> = self.attempts.iter().chain(&self.handshakes).copied().collect();
                if let Some(a) = pick(&all, i) {
                    self.attempts.retain(|x| *x != a);
                    self.handshakes.retain(|x| *x != a);
                    let e =
                        ConnectError::from_io(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
                    self.pool.handle_failed(now, a, e).unwrap();
                }
            }
            Op::Finish { call, reusable } => {
                if let Some(c) = pick(&self.active_calls(), call) {
                    let reuse =
                        if reusable { Reuse::Reusable } else { Reuse::Retire(CloseReason::ServerClose) };
                    self.end_exchange(c);
                    self.pool.exchange_finished(now, c, reuse).unwrap();
                }
            }
            Op::ExchangeFail { call, kind, progress, idempotent } => {
                if let Some(c) = pick(&self.active_calls(), call) {
                    let kind = match kind {
                        0 => ExchangeFailureKind::Io {
                            kind: std::io::ErrorKind::ConnectionReset,
                            message: "reset".into(),
                        },
                        1 => ExchangeFailureKind::Timeout,
                        2 => ExchangeFailureKind::RefusedStream,
                        3 => ExchangeFailureKind::GoAwayUnprocessed,
                        4 => ExchangeFailureKind::Misdirected,
                        _ => ExchangeFailureKind::StreamReset { code: 2 },
                    };
                    let progress =
                        [Progress::NothingWritten, Progress::RequestWritten, Progress::ResponseStarted]
                            [progress as usize];
                    let failure = ExchangeFailure {
                        kind,
                        progress,
                        request: RequestFacts { idempotent, body_replayable: true },
                    };
                    let CallModel::Active(conn) = self.calls[&c] else { unreachable!() };
                    self.active.get_mut(&conn).unwrap().remove(&c);
                    match self.pool.exchange_failed(now, c, failure).unwrap() {
                        FailureOutcome::Retrying(_) => {
                            self.calls.insert(c, CallModel::Pending);
                        }
                        FailureOutcome::Failed(_) => {
                            self.calls.insert(c, CallModel::Ended);
                        }
                    }
                }
            }
            Op::PeerClose(i) => {
                let open: Vec<ConnectionId> = self.open.keys().copied().collect();
                if let Some(k) = pick(&open, i) {
                    self.pool.connection_closed(now, k, CloseReason::ServerClose).unwrap();
                }
            }
            Op::Settings { conn, limit } => {
                let open: Vec<ConnectionId> = self.open.keys().copied().collect();
                if let Some(k) = pick(&open, conn) {
                    self.pool.settings(now, k, Some(limit)).unwrap();
                }
            }
            Op::GoAway(i) => {
                let open: Vec<ConnectionId> = self.open.keys().copied().collect();
                if let Some(k) = pick(&open, i) {
                    self.pool.goaway(now, k, GoAway::graceful()).unwrap();
                }
            }
            Op::Advance(ms) => {
                let target = now + Duration::from_millis(ms);
                // Fire every deadline on the way, exactly when due.
                while let Some(t) = self.pool.poll_timeout().filter(|t| *t <= target) {
                    self.now = t.max(self.now);
                    self.pool.handle_timeout(self.now);
                    self.drain()?;
                    prop_assert!(self.pool.poll_timeout().is_none_or(|n| n > self.now), "timer busy loop");
                }
                self.now = target;
            }
            Op::Cancel(i) => {
                let live: Vec<CallId> =
                    self.calls.iter().filter(|(_, s)| **s != CallModel::Ended).map(|(c, _)| *c).collect();
                if let Some(c) = pick(&live, i) {
                    self.end_exchange(c);
                    self.calls.insert(c, CallModel::Ended);
                    self.pool.cancel(now, c);
                }
            }
            Op::EvictAll => self.pool.evict_all(now),
        }
        self.drain()
    }

    /// Winds everything down: attempts fail, exchanges finish, time passes.
    fn wind_down(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..1000 {
            let mut progressed = false;
            for a in
                std::mem::take(&mut self.attempts).into_iter().chain(std::mem::take(&mut self.handshakes))
            {
                let e = ConnectError::from_io(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
                self.pool.handle_failed(self.now, a, e).unwrap();
                progressed = true;
            }
            self.drain()?;
            for c in self.active_calls() {
                self.end_exchange(c);
                self.pool.exchange_finished(self.now, c, Reuse::Reusable).unwrap();
                progressed = true;
                self.drain()?;
            }
            if let Some(t) = self.pool.poll_timeout() {
                self.now = t.max(self.now);
                self.pool.handle_timeout(self.now);
                progressed = true;
                self.drain()?;
            }
            if !progressed {
                return Ok(());
            }
        }
        Err(TestCaseError::fail("did not wind down"))
    }
}

fn config() -> impl Strategy<Value = PoolConfig> {
    (
        prop::option::of(1usize..4),
        prop::option::of(2usize..6),
        1usize..3,
        prop::option::of(1usize..4),
        prop::option::of(100u64..400),
        any::<bool>(),
        prop::option::of(20u64..200),
    )
        .prop_map(|(per, total, idle, idle_total, lifetime, wait, probe)| PoolConfig {
            keep_alive: Duration::from_millis(150),
            max_connections_per_address: per,
            max_connections_total: total,
            max_idle_per_address: idle,
            max_idle_total: idle_total,
            max_lifetime: lifetime.map(Duration::from_millis),
            acquire_timeout: Duration::from_millis(300),
            stream_limit_policy: if wait { StreamLimitPolicy::Wait } else { StreamLimitPolicy::OpenNew },
            probe_interval: probe.map(Duration::from_millis),
            ..PoolConfig::default()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn pool_model(config in config(), ops in prop::collection::vec(op(), 1..80)) {
        let addrs = addresses();
        let mut m = model(config);
        for op in &ops {
            m.apply(op, &addrs)?;
        }
        m.wind_down()?;
        // Every call ended: with a connection (then finished) or a typed error.
        for (call, state) in &m.calls {
            prop_assert_eq!(*state, CallModel::Ended, "{:?} never ended", call);
        }
        let s = m.pool.stats();
        prop_assert_eq!(s.calls, 0);
        prop_assert_eq!(s.totals.waiters, 0);
        prop_assert_eq!(s.totals.connecting, 0);
        prop_assert_eq!(s.totals.in_use, 0);
        prop_assert_eq!(s.totals.open, 0, "keep-alive closes everything eventually");
        prop_assert_eq!(m.pool.poll_timeout(), None);
    }
}

fn model(config: PoolConfig) -> Model {
    Model {
        pool: Pool::new(config),
        now: Instant::ZERO,
        attempts: Vec::new(),
        handshakes: Vec::new(),
        calls: BTreeMap::new(),
        order: Vec::new(),
        open: BTreeMap::new(),
        active: BTreeMap::new(),
        events: 0,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Events off (`Pool::set_events(false)`, what an adapter does when
    /// nobody listens) changes nothing but the events: the same operations
    /// give the same calls, connections, statistics and deadlines, step by
    /// step, and no event is ever queued.
    #[test]
    fn events_off_changes_nothing_else(config in config(), ops in prop::collection::vec(op(), 1..80)) {
        let addrs = addresses();
        let mut on = model(config.clone());
        let mut off = model(config);
        off.pool.set_events(false);
        prop_assert!(!off.pool.events_on());
        for op in &ops {
            on.apply(op, &addrs)?;
            off.apply(op, &addrs)?;
            prop_assert_eq!(on.pool.stats(), off.pool.stats());
            prop_assert_eq!(on.pool.poll_timeout(), off.pool.poll_timeout());
            prop_assert_eq!(&on.calls, &off.calls);
            prop_assert_eq!(&on.open, &off.open);
            prop_assert_eq!(off.events, 0, "an event queued with events off");
        }
        // Not vacuous: the same operations with events on told something.
        if ops.iter().any(|op| matches!(op, Op::Acquire { .. })) {
            prop_assert!(on.events > 0);
        }
        on.wind_down()?;
        off.wind_down()?;
        prop_assert_eq!(on.pool.stats(), off.pool.stats());
        prop_assert_eq!(&on.calls, &off.calls);
    }
}
