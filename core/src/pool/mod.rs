//! The pool: which connection carries each exchange, and when connections are
//! created, shared, retired and closed.
//!
//! A call asks for a connection with [`Pool::acquire`]. The pool answers, in
//! order: an idle pooled connection for the exact Address (most recently used
//! first); a share of an HTTP/2 connection below its stream limit; after DNS, a
//! coalesced HTTP/2 connection to another host (BEHAVIOUR §5); or a new connection
//! from a route plan and connect race ([`Race`]). While a race runs, a connection
//! that becomes eligible is taken instead; a new HTTP/2 connection that finds an
//! eligible one already pooled is closed as a duplicate.
//!
//! Calls over a connection cap wait, first come first served, and are woken as
//! capacity frees; waiting is bounded by the acquire timeout. Idle connections are
//! closed after the keep-alive, over the idle caps (oldest first), or past their
//! max lifetime — exactly on time through [`Pool::poll_timeout`].
//!
//! # Spending connections wisely
//!
//! - **A connection already paid for is kept.** When a racing call takes a pooled
//!   connection instead, one attempt is not cancelled: the one that has finished
//!   TCP (handshaking), or else the call's only attempt in flight (even still in
//!   TCP connect). It goes on without the call — its `SecureConnectEnd` and
//!   `ConnectEnd` still reported under that call — and its connection joins the
//!   pool idle ([`PoolStats::joined_idle`]), or closes with its own reason over
//!   a cap. When several attempts are still in TCP connect (Happy Eyeballs),
//!   every one is cancelled. A call cancelled by its caller cancels everything.
//! - **One handshake per HTTP/2 origin.** The pool remembers, per Address, the
//!   protocol its last connection negotiated (for the route database's TTL). A
//!   call to an `https` Address whose protocol is unknown or HTTP/2 that finds a
//!   connect for that Address already in flight waits for it
//!   ([`PoolConfig::await_pending_http2`], on by default) instead of racing: an
//!   HTTP/2 result is shared (up to the stream limit); HTTP/1.1 or a failure
//!   sends the waiting calls to their own races at once. The wait is bounded by
//!   that connect's own timeouts, the call's deadline and the acquire timeout.
//! - **One stream until SETTINGS, then the server's limit.** A new HTTP/2
//!   connection carries one stream until the server's first SETTINGS frame
//!   arrives ([`Pool::settings`]); calls that would share it wait for those
//!   SETTINGS (bounded by the handshake timeout: then it is retired as
//!   [`CloseReason::NeverUsable`] and they move on), then share it up to
//!   MAX_CONCURRENT_STREAMS. The pool remembers the limit each Address's last
//!   SETTINGS advertised, so a burst of calls starts as many connects as the
//!   waiting calls need at that limit (64 calls against a limit of 3: 22
//!   connections, at most 3 streams on each), and no stream is ever opened
//!   beyond what the server allowed. A REFUSED_STREAM for a stream opened
//!   beyond the advertised limit (before SETTINGS that then allowed fewer) is
//!   not held against the connection, and its retry, like a retry after
//!   GOAWAY, does not count toward the call's retry cap
//!   ([`PoolConfig::max_free_retries`] bounds them).
//! - **The idle cap follows demand.** Idle connections above the per-Address cap
//!   close only after [`PoolConfig::idle_cap_grace`] (5 s by default) of being
//!   idle: under steady demand a connection is idle for moments between
//!   exchanges and nothing churns; when demand falls, the excess closes. The total
//!   idle cap is a resource bound and applies at once.
//!
//! # Connection lifecycle
//!
//! ```text
//!   race (connecting → handshaking)
//!        │ won
//!        ▼
//!   ready ── idle ⇄ in use (n exchanges, ≤ stream limit)
//!        │ no new exchanges (reason: Connection: close, GOAWAY, failure, …)
//!        ▼
//!   draining ── last exchange ends ──► closed (reason)
//! ```
//!
//! # Driver duties
//!
//! Same as for [`Race`]: feed inputs with `now`, drain [`Pool::poll_action`] and
//! perform each [`PoolAction`], drain [`Pool::poll_event`], call
//! [`Pool::handle_timeout`] at [`Pool::poll_timeout`]. After an exchange, report
//! [`Pool::exchange_finished`] or [`Pool::exchange_failed`]; report what the peer
//! does with [`Pool::connection_closed`], [`Pool::settings`] and [`Pool::goaway`].
//! HTTP/2 drivers must report every SETTINGS frame of the server as it arrives
//! (not only ones that change the limit; [`crate::http2::Session::read`] finds
//! them, and GOAWAY with its last stream id, in the bytes read): a connection
//! whose SETTINGS are never reported carries one stream and is retired after
//! the handshake timeout; when a stream still waits on it, the pool asks for
//! [`PoolAction::Abort`] (end it now: its streams fail and are reported). The
//! same session turns each stream's failure into the [`ExchangeFailure`] to
//! report. Answer
//! [`PoolAction::Probe`] by looking at the idle socket without waiting: a dead
//! one with [`Pool::connection_closed`], a healthy one with
//! [`Pool::probe_passed`] (a new HTTP/1.1 connection to a declared Address
//! proves usable that way; see [`warm`]). Through a proxy, report the tunnel
//! open with [`Pool::handle_tunnelled`] before TLS starts, so the handshake
//! timeout, not the connect timeout, bounds TLS.
//!
//! # Example: a new connection, a reuse, and keep-alive eviction on time
//!
//! ```
//! use switchyard_core::*;
//!
//! let ms = Instant::from_millis;
//! let mut pool = Pool::new(PoolConfig::default()); // keep-alive 90 s
//! let address = Address::from_uri(&"http://127.0.0.1:8080/".parse()?)?.build()?;
//!
//! let call = pool.acquire(ms(0), address.clone(), AcquireOptions::default());
//! // An IP literal skips DNS: the first action dials.
//! let Some(PoolAction::Connect { attempt, .. }) = pool.poll_action() else { panic!() };
//! pool.handle_connected(ms(3), attempt)?;
//! let Some(PoolAction::Established { connection, protocol, .. }) = pool.poll_action() else { panic!() };
//! assert_eq!(protocol, Protocol::Http1);
//! assert_eq!(pool.poll_action(), Some(PoolAction::Acquired { call, connection, source: Source::New }));
//! // ... the driver runs the exchange on the socket ...
//! pool.exchange_finished(ms(10), call, Reuse::Reusable)?;
//!
//! // The next call reuses it: no DNS, no connect.
//! let next = pool.acquire(ms(20), address, AcquireOptions::default());
//! assert_eq!(pool.poll_action(), Some(PoolAction::Acquired { call: next, connection, source: Source::Pooled }));
//! pool.exchange_finished(ms(30), next, Reuse::Reusable)?;
//!
//! // Idle since 30 ms: it closes at exactly 30 ms + 90 s.
//! assert_eq!(pool.poll_timeout(), Some(ms(90_030)));
//! pool.handle_timeout(ms(90_030));
//! assert_eq!(pool.poll_action(), Some(PoolAction::Close { connection, reason: CloseReason::IdleTimeout }));
//! assert_eq!(pool.stats().closed[&CloseReason::IdleTimeout], 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod action;
mod coalesce;
mod config;
mod evict;
mod idle;
mod kept;
mod stats;
mod view;
mod waiters;
pub mod warm;

pub use action::{AcquireError, ExchangeError, FailureOutcome, PoolAction, Source};
pub use config::{AcquireOptions, PoolConfig, StreamLimitPolicy};
pub use stats::{AddressStats, PoolStats};
pub use view::Connection;
pub use warm::{Backoff, Readiness, WarmPolicy, WarmStatus};

pub use crate::retry::{
    decide, may_have_been_sent, ExchangeFailure, ExchangeFailureKind, NoRetry, Progress, RequestFacts,
    RetryContext, RetryDecision, RetryReason,
};
pub use coalesce::{certificate_covers, CertificatePins};

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::hash::FastMap;
use std::net::IpAddr;

use crate::address::{Address, Host, Protocol, Proxy};
use crate::connection::{CloseReason, Reuse, TlsFacts};
use crate::dns::{DnsAnswer, DnsCache, DnsSource, Lookup};
use crate::error::{ConnectError, DnsError, Misuse};
use crate::event::{Event, EventKind};
use crate::http2::GoAway;
use crate::id::{AttemptId, CallId, ConnectionId, IdAllocator, QueryId};
use crate::race::{Action, Race, RaceRequest, Sequence};
use crate::route::{Route, RouteDatabase};
use crate::time::{earliest, Instant};

#[derive(Debug, Default)]
struct AddrState {
    idle: idle::IdleList,
    shareable: BTreeSet<ConnectionId>,
    multiplexed: BTreeSet<ConnectionId>,
    racing: BTreeSet<CallId>,
    open: usize,
    in_use: usize,
    waiters: usize,
    /// Attempts kept for the pool after their call took another connection.
    kept: usize,
}

impl AddrState {
    fn is_empty(&self) -> bool {
        self.open == 0 && self.racing.is_empty() && self.waiters == 0 && self.kept == 0
    }
}

#[derive(Debug)]
enum CallState {
    /// Between states (new, or retrying).
    Pending,
    Waiting {
        seq: u64,
        since: Instant,
        deadline: Instant,
    },
    Racing {
        race: Box<Race>,
        timer: Option<Instant>,
        direct_queries: Vec<QueryId>,
        tls: BTreeMap<AttemptId, TlsFacts>,
    },
    Active {
        connection: ConnectionId,
        /// HTTP/2, a stream opened before the server's SETTINGS arrived: the
        /// streams the connection carried then, this one included. If the
        /// SETTINGS then allowed fewer, a refusal of it is the client's doing.
        early_stream: Option<u32>,
    },
}

#[derive(Debug)]
struct Call {
    address: Address,
    /// Where the next race's ids start, so a retried call never reuses one.
    sequence: Sequence,
    options: AcquireOptions,
    retries: u32,
    /// Retries that did not count toward `retries` (GOAWAY, early refusals).
    free_retries: u32,
    /// Its place among waiting calls, fixed when it first asked: a retried
    /// call waits ahead of calls that asked after it (a call a server turned
    /// away is served before the newcomers, and gets the next connection's
    /// first streams).
    wait_seq: u64,
    avoid: Vec<ConnectionId>,
    /// Connections that refused this call (REFUSED_STREAM held against them).
    refused_on: Vec<ConnectionId>,
    /// Routes the call was refused on: its next race plans them last.
    avoid_routes: Vec<Route>,
    /// The DNS answers its races used: a retry plans with them, no new lookup.
    answers: Vec<crate::plan::KnownAnswer>,
    fresh_only: bool,
    state: CallState,
}

impl Call {
    /// A call that has just asked: nothing tried, nothing avoided.
    fn new(address: Address, options: AcquireOptions, wait_seq: u64) -> Call {
        Call {
            address,
            options,
            retries: 0,
            free_retries: 0,
            wait_seq,
            avoid: Vec::new(),
            refused_on: Vec::new(),
            avoid_routes: Vec::new(),
            answers: Vec::new(),
            fresh_only: false,
            state: CallState::Pending,
            sequence: Sequence::default(),
        }
    }

    fn count_retry(&mut self, reason: RetryReason) {
        if reason.is_free() {
            self.free_retries += 1;
        } else {
            self.retries += 1;
        }
    }
}

/// The connection pool. See the [module docs](self).
#[derive(Debug)]
pub struct Pool {
    config: PoolConfig,
    ids: IdAllocator,
    db: RouteDatabase,
    // Lookup only: nothing is emitted in these maps' order.
    conns: FastMap<ConnectionId, Connection>,
    addrs: FastMap<Address, AddrState>,
    coalesce_index: FastMap<IpAddr, BTreeSet<ConnectionId>>,
    // Boxed: a call moves in and out of the map as a pointer, not a struct.
    // Lookup only (`shutdown` sorts what it takes from it).
    calls: FastMap<CallId, Call>,
    idle_all: idle::IdleQueue,
    lifetimes: BTreeSet<(Instant, ConnectionId)>,
    waiters: BTreeMap<u64, CallId>,
    wait_deadlines: BTreeSet<(Instant, CallId)>,
    race_timers: BTreeSet<(Instant, CallId)>,
    /// Attempts kept for the pool (handshaking, or a call's only attempt), and
    /// their deadlines.
    kept: BTreeMap<AttemptId, kept::Kept>,
    kept_deadlines: BTreeSet<(Instant, AttemptId)>,
    /// Attempts past TCP, for counting the ones thrown away.
    handshaking: BTreeSet<AttemptId>,
    /// Attempts and connections whose certificate was not verified: their
    /// events say so (`Event::unverified_tls`), until their last event.
    unverified: Unverified,
    /// Per Address, the protocol its last connection negotiated, until when,
    /// and (HTTP/2) the stream limit its last SETTINGS advertised.
    known_protocol: FastMap<Address, (Protocol, Instant, Option<u32>)>,
    /// HTTP/2 connections not usable yet (no SETTINGS, or a limit of zero), and
    /// when the handshake timeout retires them ([`CloseReason::NeverUsable`]).
    settings_due: BTreeSet<(Instant, ConnectionId)>,
    /// When an over-cap idle connection has been idle for the grace period.
    trim_checks: BTreeSet<(Instant, ConnectionId)>,
    /// When idle HTTP/1.1 connections are next probed.
    next_probe: Option<Instant>,
    /// HTTP/2 connections with a PING out, and when its PONG is due.
    pongs_due: BTreeSet<(Instant, ConnectionId)>,
    next_wait_seq: u64,
    open_total: usize,
    racing_total: usize,
    in_use_total: usize,
    shutdown: bool,
    stats: PoolStats,
    /// DNS answers and lookups in flight, shared by every call.
    dns: DnsCache,
    /// Declared (warm) Addresses, in declaration order, and their index.
    warm: BTreeMap<u64, warm::Warm>,
    warm_of: FastMap<Address, u64>,
    next_warm: u64,
    /// Warm connects in flight (calls without a caller) → their Address.
    warm_calls: BTreeMap<CallId, u64>,
    /// Backoff ends and `Down` deadlines.
    warm_timers: BTreeSet<(Instant, u64)>,
    /// Connections to declared Addresses that have not settled yet, and when
    /// their probation ends.
    probation: BTreeMap<ConnectionId, warm::Probation>,
    probation_due: BTreeSet<(Instant, ConnectionId)>,
    jitter: warm::Jitter,
    actions: VecDeque<PoolAction>,
    events: VecDeque<Event>,
}

impl Pool {
    /// An empty pool.
    #[must_use]
    pub fn new(config: PoolConfig) -> Pool {
        let db = RouteDatabase::new(config.route_ttl);
        let dns = DnsCache::new(config.dns_cache);
        let jitter = warm::Jitter::new(config.seed);
        Pool {
            config,
            ids: IdAllocator::default(),
            db,
            conns: FastMap::default(),
            addrs: FastMap::default(),
            coalesce_index: FastMap::default(),
            calls: FastMap::default(),
            idle_all: idle::IdleQueue::default(),
            lifetimes: BTreeSet::new(),
            waiters: BTreeMap::new(),
            wait_deadlines: BTreeSet::new(),
            race_timers: BTreeSet::new(),
            kept: BTreeMap::new(),
            kept_deadlines: BTreeSet::new(),
            handshaking: BTreeSet::new(),
            unverified: Unverified::default(),
            known_protocol: FastMap::default(),
            settings_due: BTreeSet::new(),
            trim_checks: BTreeSet::new(),
            next_probe: None,
            pongs_due: BTreeSet::new(),
            next_wait_seq: 0,
            open_total: 0,
            racing_total: 0,
            in_use_total: 0,
            shutdown: false,
            stats: PoolStats::default(),
            dns,
            warm: BTreeMap::new(),
            warm_of: FastMap::default(),
            next_warm: 0,
            warm_calls: BTreeMap::new(),
            warm_timers: BTreeSet::new(),
            probation: BTreeMap::new(),
            probation_due: BTreeSet::new(),
            jitter,
            actions: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// The route database (routes that failed recently).
    #[must_use]
    pub fn route_database(&self) -> &RouteDatabase {
        &self.db
    }

    /// A view of one connection, if it is open.
    #[must_use]
    pub fn connection(&self, id: ConnectionId) -> Option<&Connection> {
        self.conns.get(&id)
    }

    /// The connection a call holds, if it holds one.
    #[must_use]
    pub fn call_connection(&self, call: CallId) -> Option<ConnectionId> {
        match self.calls.get(&call)?.state {
            CallState::Active { connection, .. } => Some(connection),
            _ => None,
        }
    }

    /// The next instruction.
    pub fn poll_action(&mut self) -> Option<PoolAction> {
        self.actions.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The earliest instant at which [`Pool::handle_timeout`] must run: the next
    /// idle expiry, lifetime expiry, waiter deadline or race timer. `None` when
    /// nothing changes until the next input. Early, late or repeated
    /// `handle_timeout` calls are harmless.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let idle = self.idle_all.first().map(|(since, _)| *since + self.config.keep_alive);
        let mut t = earliest(idle, self.lifetimes.first().map(|(t, _)| *t));
        t = earliest(t, self.wait_deadlines.first().map(|(t, _)| *t));
        t = earliest(t, self.kept_deadlines.first().map(|(t, _)| *t));
        t = earliest(t, self.trim_checks.first().map(|(t, _)| *t));
        t = earliest(t, self.next_probe);
        t = earliest(t, self.pongs_due.first().map(|(t, _)| *t));
        t = earliest(t, self.settings_due.first().map(|(t, _)| *t));
        t = earliest(t, self.warm_deadline());
        earliest(t, self.race_timers.first().map(|(t, _)| *t))
    }

    // ------------------------------------------------------------------ inputs

    /// A call asks for a connection to `address`. Answered later by
    /// [`PoolAction::Acquired`] or [`PoolAction::AcquireFailed`] for the returned id
    /// (possibly already queued when this returns).
    pub fn acquire(&mut self, now: Instant, address: Address, options: AcquireOptions) -> CallId {
        let id = self.ids.next_call();
        let wait_seq = self.next_wait_seq;
        self.next_wait_seq += 1;
        if self.shutdown {
            self.actions.push_back(PoolAction::AcquireFailed { call: id, error: AcquireError::Shutdown });
            return id;
        }
        self.calls.insert(id, Call::new(address, options, wait_seq));
        self.dispatch(now, id);
        id
    }

    /// The call gives up. A waiter leaves the queue; a race is cancelled; a call
    /// holding a connection releases it (an HTTP/1 connection mid-exchange is
    /// retired: its framing position is unknown). Unknown or ended calls: no-op.
    pub fn cancel(&mut self, now: Instant, call: CallId) {
        let Some(c) = self.calls.get(&call) else {
            return;
        };
        match &c.state {
            CallState::Active { connection, .. } => {
                let multiplexed = self.conns.get(connection).is_some_and(Connection::multiplexed);
                let reuse =
                    if multiplexed { Reuse::Reusable } else { Reuse::Retire(CloseReason::UnreadBody) };
                let _ = self.exchange_finished(now, call, reuse);
            }
            _ => {
                let address = c.address.clone();
                self.end_call_waiting_or_racing(now, call);
                self.calls.remove(&call);
                self.rebalance(now, &address);
            }
        }
    }

    /// Feeds a DNS answer: every address at once, as `getaddrinfo` gives them
    /// (cached for [`DnsCacheConfig::default_ttl`]). For an origin lookup, a
    /// coalescable HTTP/2 connection among the answers ends the race at once
    /// (BEHAVIOUR §5).
    ///
    /// [`DnsCacheConfig::default_ttl`]: crate::DnsCacheConfig::default_ttl
    pub fn handle_dns(
        &mut self,
        now: Instant,
        query: QueryId,
        answer: Result<Vec<IpAddr>, DnsError>,
    ) -> Result<(), Misuse> {
        self.handle_dns_answer(now, query, DnsAnswer::all(answer))
    }

    /// Feeds a DNS answer, whole or for one address family, with its time to
    /// live (see [`crate::dns`]). Every call sharing the lookup gets it; the
    /// complete answer is cached.
    pub fn handle_dns_answer(
        &mut self,
        now: Instant,
        query: QueryId,
        answer: DnsAnswer,
    ) -> Result<(), Misuse> {
        let answer = answer.normalized();
        if let Some(followers) = self.dns.answered(query, &answer, now) {
            // The leader's call may have ended: the followers still get it.
            let _ = self.deliver_dns(now, query, answer.clone(), DnsSource::Lookup);
            for follower in followers {
                let _ = self.deliver_dns(now, follower, answer.clone(), DnsSource::Shared);
            }
            return Ok(());
        }
        self.deliver_dns(now, query, answer, DnsSource::Lookup)
    }

    /// Clears the DNS cache (lookups in flight are unaffected).
    pub fn clear_dns_cache(&mut self) {
        self.dns.clear();
    }

    /// Names in the DNS cache.
    #[must_use]
    pub fn dns_cache_len(&self) -> usize {
        self.dns.len()
    }

    /// Passes one answer to the race of `query`'s call.
    fn deliver_dns(
        &mut self,
        now: Instant,
        query: QueryId,
        answer: DnsAnswer,
        source: DnsSource,
    ) -> Result<(), Misuse> {
        let call_id = query.call();
        let Some(call) = self.calls.get(&call_id) else {
            return self.stale_call(call_id, Misuse::UnknownQuery(query));
        };
        let CallState::Racing { direct_queries, .. } = &call.state else {
            return Ok(()); // the race ended: a late answer
        };
        if let Ok(ips) = &answer.result {
            if direct_queries.contains(&query) && !call.options.exclusive && !call.fresh_only {
                let address = call.address.clone();
                if let Some(conn) = self.find_coalescable(&address, ips, &call.avoid) {
                    let addresses = ips.clone();
                    let host = address.host().clone();
                    let family = answer.family;
                    self.emit(
                        now,
                        Some(call_id),
                        EventKind::DnsEnd { query, host, addresses, family, source },
                    );
                    self.stop_race(now, call_id);
                    self.assign(now, call_id, conn, Source::Coalesced);
                    // Calls that waited for this race's result may go now.
                    self.rebalance(now, &address);
                    return Ok(());
                }
            }
        }
        let Some(Call { state: CallState::Racing { race, .. }, .. }) = self.calls.get_mut(&call_id) else {
            return Ok(());
        };
        race.handle_dns_answer(now, query, answer, source, &mut self.db)?;
        self.pump_race(now, call_id);
        Ok(())
    }

    /// TCP connected for `attempt`.
    pub fn handle_connected(&mut self, now: Instant, attempt: AttemptId) -> Result<(), Misuse> {
        if self.kept.contains_key(&attempt) {
            self.kept_connected(now, attempt);
            return Ok(());
        }
        self.with_race(now, attempt, |race, db| race.handle_connected(now, attempt, db))
    }

    /// The attempt's proxy tunnel (SOCKS5, or `CONNECT` for an https origin)
    /// is open; its TLS, if any, starts now. The connect timeout covers TCP
    /// and the tunnel; from here the handshake timeout bounds TLS (see
    /// [`Race::handle_tunnelled`]).
    pub fn handle_tunnelled(&mut self, now: Instant, attempt: AttemptId) -> Result<(), Misuse> {
        if self.kept.contains_key(&attempt) {
            self.kept_tunnelled(now, attempt);
            return Ok(());
        }
        self.with_race(now, attempt, |race, _| race.handle_tunnelled(now, attempt))
    }

    /// The winner's handshakes finished; `alpn` is the negotiated protocol and `tls`
    /// the verified certificate's facts (for coalescing), when TLS ran.
    pub fn handle_established(
        &mut self,
        now: Instant,
        attempt: AttemptId,
        alpn: Option<Protocol>,
        tls: Option<TlsFacts>,
    ) -> Result<(), Misuse> {
        if tls.as_ref().is_some_and(|t| t.unverified) {
            self.unverified.attempts.insert(attempt);
        }
        if self.kept.contains_key(&attempt) {
            self.kept_established(now, attempt, alpn, tls);
            return Ok(());
        }
        if let Some(Call { state: CallState::Racing { tls: facts, .. }, .. }) =
            self.calls.get_mut(&attempt.call())
        {
            if let Some(t) = tls {
                facts.insert(attempt, t);
            }
        }
        self.with_race(now, attempt, |race, db| race.handle_established(now, attempt, alpn, db))
    }

    /// `attempt` failed.
    pub fn handle_failed(
        &mut self,
        now: Instant,
        attempt: AttemptId,
        error: ConnectError,
    ) -> Result<(), Misuse> {
        if self.kept.contains_key(&attempt) {
            self.kept_failed(now, attempt, error);
            return Ok(());
        }
        if matches!(error, ConnectError::Exhausted { .. }) && self.make_room(now, attempt) {
            return Ok(());
        }
        self.with_race(now, attempt, |race, db| race.handle_failed(now, attempt, error, db))
    }

    /// Out of file descriptors: close the least recently used idle connection
    /// (any Address) and connect `attempt`'s route again. `false` when there is
    /// no idle connection to close or the attempt is no longer connecting; each
    /// retry closes one connection, so the retries are bounded by the idle count.
    fn make_room(&mut self, now: Instant, attempt: AttemptId) -> bool {
        let Some(&(_, victim)) = self.idle_all.first() else { return false };
        let route = match self.calls.get(&attempt.call()) {
            Some(Call { state: CallState::Racing { race, .. }, .. }) => {
                race.connecting_route(attempt).cloned()
            }
            _ => None,
        };
        let Some(route) = route else { return false };
        self.close(now, victim, CloseReason::Evicted);
        self.stats.tcp_connects += 1;
        self.actions.push_back(PoolAction::Connect { attempt, route });
        true
    }

    /// Acts on every deadline `<= now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        // Idle expiry, oldest first.
        while let Some(&(since, id)) = self.idle_all.first() {
            if since + self.config.keep_alive > now {
                break;
            }
            if self.warm_protects(id) {
                // A warm minimum's connection: it stays, idle from now (its
                // idle-cap check moves with it).
                self.trim_checks.remove(&(since + self.config.idle_cap_grace, id));
                self.update(id, |c| c.idle_since = Some(now));
                if let Some(address) = self.conns.get(&id).map(|c| c.address.clone()) {
                    self.rearm_trim(&address);
                }
                continue;
            }
            self.close(now, id, CloseReason::IdleTimeout);
        }
        while let Some(&(at, id)) = self.lifetimes.first() {
            if at > now {
                break;
            }
            self.lifetimes.remove(&(at, id));
            self.retire(now, id, CloseReason::MaxLifetime);
        }
        while let Some(&(at, call)) = self.wait_deadlines.first() {
            if at > now {
                break;
            }
            self.wait_deadlines.remove(&(at, call));
            if let Some(c) = self.calls.get(&call) {
                if let CallState::Waiting { since, .. } = c.state {
                    let address = c.address.clone();
                    self.end_call_waiting_or_racing(now, call);
                    self.calls.remove(&call);
                    self.actions.push_back(PoolAction::AcquireFailed {
                        call,
                        error: AcquireError::Timeout { address, waited: now - since },
                    });
                }
            }
        }
        self.kept_timeouts(now);
        while let Some(&(at, id)) = self.trim_checks.first() {
            if at > now {
                break;
            }
            self.trim_checks.remove(&(at, id));
            if let Some(address) = self.conns.get(&id).map(|c| c.address.clone()) {
                self.enforce_idle_caps(now, &address);
            }
        }
        while let Some(&(at, call)) = self.race_timers.first() {
            if at > now {
                break;
            }
            self.race_timers.remove(&(at, call));
            if let Some(Call { state: CallState::Racing { race, timer, .. }, .. }) = self.calls.get_mut(&call)
            {
                *timer = None;
                race.handle_timeout(now, &mut self.db);
                self.pump_race(now, call);
            }
        }
        self.probe_idle(now);
        self.warm_timeouts(now);
        self.probation_timeouts(now);
        while let Some(&(at, id)) = self.pongs_due.first() {
            if at > now {
                break;
            }
            self.pongs_due.remove(&(at, id));
            if self.conns.contains_key(&id) {
                self.retire(now, id, CloseReason::Unhealthy);
            }
        }
        while let Some(&(at, id)) = self.settings_due.first() {
            if at > now {
                break;
            }
            self.settings_due.remove(&(at, id));
            if let Some((address, busy)) = self.conns.get(&id).map(|c| (c.address.clone(), c.in_flight > 0)) {
                // Calls that waited for its SETTINGS go elsewhere; a stream on
                // it cannot finish, so the driver ends it now.
                self.retire(now, id, CloseReason::NeverUsable);
                if busy {
                    let reason = CloseReason::NeverUsable;
                    self.actions.push_back(PoolAction::Abort { connection: id, reason });
                }
                self.rebalance(now, &address);
            }
        }
    }

    /// Asks the driver to probe every idle HTTP/1.1 connection when the probe
    /// interval has passed (oldest idle first), and re-arms while any remain.
    fn probe_idle(&mut self, now: Instant) {
        let (Some(at), Some(every)) = (self.next_probe, self.config.probe_interval) else { return };
        if at > now {
            return;
        }
        self.next_probe = None;
        let idle: Vec<ConnectionId> = self
            .idle_all
            .iter(|k| idle_live(&self.conns, k))
            .map(|&(_, id)| id)
            .filter(|id| self.conns.get(id).is_some_and(|c| !c.multiplexed()))
            .collect();
        if !idle.is_empty() {
            self.next_probe = Some(now + every);
        }
        for connection in idle {
            self.actions.push_back(PoolAction::Probe { connection });
        }
    }

    /// The call's exchange ended. `reuse` says whether its connection may carry
    /// another. The call is over.
    pub fn exchange_finished(&mut self, now: Instant, call: CallId, reuse: Reuse) -> Result<(), Misuse> {
        // One lookup on the common path; a misuse puts the call back.
        let c = self.calls.remove(&call).ok_or(Misuse::NoExchange(call))?;
        let CallState::Active { connection, .. } = c.state else {
            self.calls.insert(call, c);
            return Err(Misuse::NoExchange(call));
        };
        self.release(now, call, connection, reuse, true);
        Ok(())
    }

    /// The call's exchange failed. The pool updates the connection (failed route,
    /// REFUSED_STREAM count, no-coalescing after 421, no new exchanges after a
    /// failure) and decides: retry (a new [`PoolAction::Acquired`] follows for the
    /// same call) or fail with an error that says whether the request may have been
    /// sent.
    pub fn exchange_failed(
        &mut self,
        now: Instant,
        call: CallId,
        failure: ExchangeFailure,
    ) -> Result<FailureOutcome, Misuse> {
        use ExchangeFailureKind as K;
        let conn_id = self.active_connection(call)?;
        let mut failure = failure;
        if self.conns[&conn_id].multiplexed()
            && !self.conns[&conn_id].settings
            && matches!(failure.kind, K::Io { .. } | K::Protocol { .. })
        {
            // The connection failed before the server's first SETTINGS: it never
            // answered as an HTTP/2 server (an HTTP/1.1 server given prior
            // knowledge answers with a 400, or closes). The first stream goes
            // out right after the handshake, so whether it had been written when
            // the failure surfaced is only timing: one classification for it, a
            // protocol error, not retried, "may have been sent" (the safe claim).
            let message = format!(
                "the server did not answer as an HTTP/2 server (no SETTINGS frame before: {})",
                failure.kind
            );
            failure.kind = K::Protocol { message };
            failure.progress = Progress::RequestWritten;
        }
        let (reused, refusals, route, multiplexed) = {
            let c = &self.conns[&conn_id];
            (c.completed > 0, c.refusals, c.route.clone(), c.multiplexed())
        };
        let (retries, free_retries, early_stream) = {
            let c = &self.calls[&call];
            let early = match c.state {
                CallState::Active { early_stream, .. } => early_stream,
                _ => None,
            };
            (c.retries, c.free_retries, early)
        };
        // Opened before SETTINGS, beyond the limit those SETTINGS then set.
        let beyond_limit = early_stream.is_some_and(|n| {
            let c = &self.conns[&conn_id];
            c.settings && n > c.stream_limit
        });
        let refused_elsewhere = self.calls[&call].refused_on.iter().any(|c| *c != conn_id);
        let ctx = RetryContext {
            reused,
            refusals_before: refusals,
            refused_elsewhere,
            beyond_limit,
            retries,
            max_retries: self.config.max_retries,
            free_retries,
            max_free_retries: self.config.max_free_retries,
        };
        let mut decision = decide(&failure, &ctx);
        // A retry that cannot finish before the call's deadline is not started.
        let deadline_passed = self.calls[&call].options.deadline.is_some_and(|d| now >= d);
        if deadline_passed && !matches!(decision, RetryDecision::Fail { .. }) {
            decision = RetryDecision::Fail {
                why: NoRetry::DeadlinePassed,
                may_have_been_sent: may_have_been_sent(&failure),
            };
        }
        // What the failure says about the connection.
        let retire = match &failure.kind {
            K::Io { .. } | K::Protocol { .. } => {
                if !reused {
                    // Never completed an exchange: the route is suspect.
                    self.db.failed(&route, now);
                }
                Some(CloseReason::Failure)
            }
            K::Timeout => {
                if !reused {
                    // A connection that never completed an exchange and timed
                    // out: its route is as suspect as after an I/O failure.
                    self.db.failed(&route, now);
                }
                // HTTP/2: the PING decides about the connection (stream_stalled).
                (!multiplexed).then_some(CloseReason::Failure)
            }
            // A stream opened before the server's SETTINGS: not the server's fault.
            K::RefusedStream if beyond_limit => None,
            K::RefusedStream => {
                self.update(conn_id, |c| c.refusals += 1);
                let c = self.calls.get_mut(&call).expect("call exists");
                if !c.refused_on.contains(&conn_id) {
                    c.refused_on.push(conn_id);
                }
                // Refused twice here: the call's next race tries other routes first.
                if refusals >= 1 && !c.avoid_routes.contains(&route) {
                    c.avoid_routes.push(route.clone());
                }
                (refusals >= 1).then_some(CloseReason::RefusedStreams)
            }
            K::StreamReset { .. } => Some(CloseReason::StreamReset),
            K::GoAwayUnprocessed => Some(CloseReason::GoAway),
            K::Misdirected => {
                self.update(conn_id, |c| c.no_coalescing = true);
                None
            }
        };
        self.emit(now, Some(call), EventKind::RetryDecision { connection: conn_id, decision });
        let reuse = retire.map_or(Reuse::Reusable, Reuse::Retire);
        match decision {
            RetryDecision::Fail { why, may_have_been_sent } => {
                self.calls.remove(&call);
                self.release(now, call, conn_id, reuse, false);
                Ok(FailureOutcome::Failed(ExchangeError {
                    kind: failure.kind,
                    may_have_been_sent,
                    why,
                    connection: conn_id,
                    route,
                    retries,
                }))
            }
            RetryDecision::SameConnection(reason) => {
                self.release(now, call, conn_id, reuse, false);
                let c = self.calls.get_mut(&call).expect("call exists");
                c.count_retry(reason);
                c.state = CallState::Pending;
                let still_usable =
                    self.conns.get(&conn_id).is_some_and(|c| c.usable() && c.in_flight < c.limit());
                if still_usable {
                    // Still a coalesced share when the connection was made for
                    // another Address (the 421 rule reads it).
                    let coalesced = self.calls[&call].address != self.conns[&conn_id].address;
                    let source = if coalesced { Source::Coalesced } else { Source::Shared };
                    self.assign(now, call, conn_id, source);
                } else {
                    if !reason.is_free() {
                        self.calls.get_mut(&call).expect("call exists").avoid.push(conn_id);
                    }
                    self.dispatch(now, call);
                }
                Ok(FailureOutcome::Retrying(reason))
            }
            RetryDecision::NewConnection { reason, fresh } => {
                self.release(now, call, conn_id, reuse, false);
                let c = self.calls.get_mut(&call).expect("call exists");
                c.count_retry(reason);
                c.avoid.push(conn_id);
                c.fresh_only |= fresh;
                c.state = CallState::Pending;
                self.dispatch(now, call);
                Ok(FailureOutcome::Retrying(reason))
            }
        }
    }

    /// The peer closed the connection, or it failed or proved unhealthy. It takes no
    /// new exchanges and closes as soon as none is in flight (exchanges on it should
    /// be reported failed).
    pub fn connection_closed(
        &mut self,
        now: Instant,
        connection: ConnectionId,
        reason: CloseReason,
    ) -> Result<(), Misuse> {
        self.known(connection)?;
        let address = self.conns[&connection].address.clone();
        self.retire(now, connection, reason);
        // Calls waiting for its SETTINGS (or a stream) go elsewhere.
        self.rebalance(now, &address);
        Ok(())
    }

    /// HTTP/2 SETTINGS from the server (not an acknowledgement), with its
    /// MAX_CONCURRENT_STREAMS when the frame carried one (`None`: unchanged;
    /// unlimited if the first SETTINGS set none).
    ///
    /// Until the first SETTINGS arrive a connection carries one stream, and
    /// calls that would share it wait for them (up to the handshake timeout,
    /// then it is retired as [`CloseReason::NeverUsable`]); from then on it
    /// carries up to the limit. A higher limit may wake waiters at once; a lower
    /// one stops new streams until enough finish (BEHAVIOUR §4).
    pub fn settings(
        &mut self,
        now: Instant,
        connection: ConnectionId,
        max_concurrent_streams: Option<u32>,
    ) -> Result<(), Misuse> {
        self.known(connection)?;
        if !self.conns[&connection].multiplexed() {
            return Ok(());
        }
        self.update(connection, |c| {
            c.settings = true;
            if let Some(limit) = max_concurrent_streams {
                c.stream_limit = limit;
            }
        });
        let (address, limit, created) = {
            let c = &self.conns[&connection];
            (c.address.clone(), c.stream_limit, c.created)
        };
        if limit > 0 {
            self.settings_due.remove(&(created + self.config.race.handshake_timeout, connection));
        }
        if let Some(known) = self.known_protocol.get_mut(&address) {
            known.2 = Some(limit);
        }
        if limit > 0 && !self.probation.is_empty() {
            self.warm_usable(now, connection);
        }
        self.rebalance(now, &address);
        // A warm minimum in streams may need more connections at this limit.
        self.rewarm_address(now, &address);
        Ok(())
    }

    /// A stream's read on this HTTP/2 connection timed out: the peer may have
    /// stalled. The pool sends one PING ([`PoolAction::Ping`]) unless one is
    /// out already; no PONG within [`PoolConfig::pong_timeout`] marks the
    /// connection unhealthy, so a stalled peer stops receiving calls
    /// (BEHAVIOUR §4). Ignored for HTTP/1.1 connections (the read timeout
    /// retires those).
    pub fn stream_stalled(&mut self, now: Instant, connection: ConnectionId) -> Result<(), Misuse> {
        self.known(connection)?;
        let outstanding = self.pongs_due.iter().any(|(_, id)| *id == connection);
        if self.conns[&connection].multiplexed() && !outstanding {
            self.pongs_due.insert((now + self.config.pong_timeout, connection));
            self.actions.push_back(PoolAction::Ping { connection });
        }
        Ok(())
    }

    /// An idle HTTP/1.1 connection's probe ([`PoolAction::Probe`]) found its
    /// socket healthy: no EOF, no stray bytes. (A dead one is reported with
    /// [`Pool::connection_closed`].) A new connection to a declared Address
    /// proves usable this way at the end of its probation
    /// ([`warm`]); for others it changes nothing.
    pub fn probe_passed(&mut self, now: Instant, connection: ConnectionId) -> Result<(), Misuse> {
        self.known(connection)?;
        if self.probation.get(&connection).is_some_and(|p| p.due_by(now)) {
            self.warm_usable(now, connection);
        }
        Ok(())
    }

    /// The PONG for the connection's PING arrived: it is alive.
    pub fn pong(&mut self, _now: Instant, connection: ConnectionId) -> Result<(), Misuse> {
        self.known(connection)?;
        self.pongs_due.retain(|(_, id)| *id != connection);
        Ok(())
    }

    /// HTTP/2 GOAWAY, with its last stream id and error code
    /// ([`crate::http2::Session::read`] reports it as read): no new exchanges
    /// from this moment; closes once in-flight streams end. Streams above its
    /// last stream id, reported failed as
    /// [`ExchangeFailureKind::GoAwayUnprocessed`] (the
    /// [`Session`](crate::http2::Session::stream_failed) decides), are retried
    /// elsewhere without counting toward the call's retry cap (BEHAVIOUR §6).
    /// The connection remembers it ([`Connection::goaway`]); a later one may
    /// only lower the last stream id.
    pub fn goaway(&mut self, now: Instant, connection: ConnectionId, goaway: GoAway) -> Result<(), Misuse> {
        self.known(connection)?;
        self.update(connection, |c| {
            let last =
                c.goaway.map_or(goaway.last_stream_id, |g| g.last_stream_id.min(goaway.last_stream_id));
            c.goaway = Some(GoAway { last_stream_id: last, error_code: goaway.error_code });
        });
        self.connection_closed(now, connection, CloseReason::GoAway)
    }

    /// Refuses new calls, fails waiting and connecting calls with
    /// [`AcquireError::Shutdown`], closes idle connections and lets in-use ones
    /// finish (then closes them). Idempotent.
    pub fn shutdown(&mut self, now: Instant) {
        self.stop_warming(now);
        self.shutdown = true;
        let mut pending: Vec<CallId> = self
            .calls
            .iter()
            .filter(|(_, c)| !matches!(c.state, CallState::Active { .. }))
            .map(|(id, _)| *id)
            .collect();
        // In the order the calls were made, not the map's.
        pending.sort_unstable();
        for call in pending {
            self.end_call_waiting_or_racing(now, call);
            self.calls.remove(&call);
            self.actions.push_back(PoolAction::AcquireFailed { call, error: AcquireError::Shutdown });
        }
        self.cancel_kept(now);
        let mut open: Vec<ConnectionId> = self.conns.keys().copied().collect();
        open.sort_unstable();
        for id in open {
            self.retire(now, id, CloseReason::Shutdown);
        }
    }

    // --------------------------------------------------------------- internals

    fn emit(&mut self, at: Instant, call: Option<CallId>, kind: EventKind) {
        let unverified_tls = self.unverified.mark(&kind);
        self.events.push_back(Event { at, call, kind, unverified_tls });
    }

    fn stale_call(&self, call: CallId, misuse: Misuse) -> Result<(), Misuse> {
        if self.ids.has_issued_call(call) {
            Ok(())
        } else {
            Err(misuse)
        }
    }

    fn known(&self, connection: ConnectionId) -> Result<(), Misuse> {
        if self.conns.contains_key(&connection) {
            return Ok(());
        }
        if self.ids.has_issued_connection(connection) {
            Err(Misuse::ClosedConnection(connection))
        } else {
            Err(Misuse::UnknownConnection(connection))
        }
    }

    fn active_connection(&self, call: CallId) -> Result<ConnectionId, Misuse> {
        match self.calls.get(&call).map(|c| &c.state) {
            Some(CallState::Active { connection, .. }) => Ok(*connection),
            _ => Err(Misuse::NoExchange(call)),
        }
    }

    fn with_race(
        &mut self,
        now: Instant,
        attempt: AttemptId,
        f: impl FnOnce(&mut Race, &mut RouteDatabase) -> Result<(), Misuse>,
    ) -> Result<(), Misuse> {
        let call_id = attempt.call();
        match self.calls.get_mut(&call_id) {
            Some(Call { state: CallState::Racing { race, .. }, .. }) => {
                f(race, &mut self.db)?;
                self.pump_race(now, call_id);
                Ok(())
            }
            // The race ended (won, pooled, cancelled): a late report, ignored.
            Some(_) => Ok(()),
            None => self.stale_call(call_id, Misuse::UnknownAttempt(attempt)),
        }
    }

    /// Removes a connection from every index (before changing it).
    fn unindex(&mut self, id: ConnectionId) {
        let Some(c) = self.conns.get(&id) else { return };
        let a = self.addrs.get_mut(&c.address).expect("address state exists for open connections");
        if let Some(since) = c.idle_since {
            if a.idle.remove(&(since, id)) {
                // `id` still looks idle to `idle_live`: the queue forgets it
                // by its count now, and by its absence once it is closed.
                self.idle_all.remove(&(since, id), |k| idle_live(&self.conns, k));
            }
        }
        a.shareable.remove(&id);
        a.multiplexed.remove(&id);
        if c.in_flight > 0 {
            a.in_use -= 1;
            self.in_use_total -= 1;
        }
        let ip = c.route.socket_addr().ip();
        if let Some(set) = self.coalesce_index.get_mut(&ip) {
            set.remove(&id);
            if set.is_empty() {
                self.coalesce_index.remove(&ip);
            }
        }
    }

    /// Adds a connection to the indices its state calls for (after changing it).
    fn index(&mut self, id: ConnectionId) {
        let Some(c) = self.conns.get(&id) else { return };
        let a = self.addrs.get_mut(&c.address).expect("address state exists for open connections");
        if c.is_idle() {
            let since = c.idle_since.expect("idle connections have idle_since");
            if a.idle.insert((since, id)) {
                self.idle_all.insert((since, id), |k| idle_live(&self.conns, k));
            }
            if !c.multiplexed() && self.next_probe.is_none() {
                self.next_probe = self.config.probe_interval.map(|every| since + every);
            }
        }
        if c.shareable() {
            a.shareable.insert(id);
        }
        if c.multiplexed() && c.usable() {
            a.multiplexed.insert(id);
        }
        if c.in_flight > 0 {
            a.in_use += 1;
            self.in_use_total += 1;
        }
        if c.coalescable() {
            self.coalesce_index.entry(c.route.socket_addr().ip()).or_default().insert(id);
        }
    }

    /// Changes a connection and moves it between the indices its change
    /// affects (only those: an acquire or a release touches the idle sets and
    /// the in-use counts, nothing else). The same result as
    /// [`Pool::unindex`], the change, then [`Pool::index`].
    ///
    /// Returns the Address's idle count when the connection joined or left
    /// its idle set (`None` otherwise), so a release knows whether any cap
    /// can be exceeded without another lookup.
    fn update(&mut self, id: ConnectionId, f: impl FnOnce(&mut Connection)) -> Option<usize> {
        let c = self.conns.get_mut(&id)?;
        let before = IndexKeys::of(c);
        f(c);
        let after = IndexKeys::of(c);
        if before == after {
            return None;
        }
        let mut idle_count = None;
        let a = self.addrs.get_mut(&c.address).expect("address state exists for open connections");
        if before.idle != after.idle {
            let left = before.idle.filter(|since| a.idle.remove(&(*since, id)));
            let joined = after.idle.filter(|since| a.idle.insert((*since, id)));
            if let Some(since) = after.idle {
                if !c.multiplexed() && self.next_probe.is_none() {
                    self.next_probe = self.config.probe_interval.map(|every| since + every);
                }
            }
            // The connection has changed: `idle_live` answers for its new state.
            let conns = &self.conns;
            if let Some(since) = left {
                self.idle_all.remove(&(since, id), |k| idle_live(conns, k));
            }
            if let Some(since) = joined {
                self.idle_all.insert((since, id), |k| idle_live(conns, k));
            }
            idle_count = Some(a.idle.len());
        }
        if before.shareable != after.shareable {
            if after.shareable {
                a.shareable.insert(id);
            } else {
                a.shareable.remove(&id);
            }
        }
        if before.multiplexed != after.multiplexed {
            if after.multiplexed {
                a.multiplexed.insert(id);
            } else {
                a.multiplexed.remove(&id);
            }
        }
        match (before.in_use, after.in_use) {
            (false, true) => {
                a.in_use += 1;
                self.in_use_total += 1;
            }
            (true, false) => {
                a.in_use -= 1;
                self.in_use_total -= 1;
            }
            _ => {}
        }
        if before.coalesce != after.coalesce {
            if let Some(ip) = before.coalesce {
                if let Some(set) = self.coalesce_index.get_mut(&ip) {
                    set.remove(&id);
                    if set.is_empty() {
                        self.coalesce_index.remove(&ip);
                    }
                }
            }
            if let Some(ip) = after.coalesce {
                self.coalesce_index.entry(ip).or_default().insert(id);
            }
        }
        idle_count
    }

    fn find_pooled(&self, call_id: CallId) -> Option<(ConnectionId, Source)> {
        let call = &self.calls[&call_id];
        if call.fresh_only {
            return None;
        }
        let a = self.addrs.get(&call.address)?;
        let idle = a.idle.newest_where(|id| {
            let c = &self.conns[&id];
            // An HTTP/2 peer may allow zero streams (SETTINGS), idle or not.
            c.limit() > 0
                && !call.avoid.contains(&id)
                && (!call.options.require_multiplexed || c.multiplexed())
        });
        if let Some(id) = idle {
            return Some((id, Source::Pooled));
        }
        if call.options.exclusive {
            return None;
        }
        a.shareable.iter().find(|id| !call.avoid.contains(id)).map(|id| (*id, Source::Shared))
    }

    /// An IP-literal origin needs no DNS, so its "answer" is the literal: an
    /// HTTP/2 connection to that IP whose certificate covers it (an
    /// IP-address SAN) serves the call, coalesced (BEHAVIOUR §5).
    fn find_coalescable_literal(&self, call_id: CallId) -> Option<(ConnectionId, Source)> {
        let call = &self.calls[&call_id];
        let Host::Ip(ip) = call.address.host() else { return None };
        if call.options.exclusive || call.fresh_only {
            return None;
        }
        self.find_coalescable(&call.address, &[*ip], &call.avoid).map(|c| (c, Source::Coalesced))
    }

    fn find_coalescable(
        &self,
        address: &Address,
        ips: &[IpAddr],
        avoid: &[ConnectionId],
    ) -> Option<ConnectionId> {
        if !address.is_https() || address.proxy().is_some_and(|p| *p != Proxy::Direct) {
            return None;
        }
        for ip in ips {
            let Some(candidates) = self.coalesce_index.get(ip) else {
                continue;
            };
            for id in candidates {
                let c = &self.conns[id];
                let facts = c.tls.as_ref().expect("coalescable connections have TLS facts");
                if avoid.contains(id)
                    || !c.address.equal_except_host(address)
                    || c.in_flight >= c.limit()
                    || !coalesce::ip_matches(ips, c.route.socket_addr().ip())
                    || !certificate_covers(facts, address.host())
                    || !self.config.pins.check(address.host(), facts)
                {
                    continue;
                }
                return Some(*id);
            }
        }
        None
    }

    fn assign(&mut self, now: Instant, call_id: CallId, conn: ConnectionId, source: Source) {
        let exclusive = self.calls[&call_id].options.exclusive;
        let (mut first_use, mut exchange, mut was_idle, mut early_stream) = (false, 0, None, None);
        self.update(conn, |c| {
            was_idle = c.idle_since;
            early_stream = (c.multiplexed() && !c.settings).then_some(c.in_flight + 1);
            c.in_flight += 1;
            c.idle_since = None;
            first_use = !std::mem::replace(&mut c.used, true);
            exchange = c.assigned;
            c.assigned += 1;
        });
        if first_use {
            self.stats.used += 1;
        }
        // No longer idle: its trim check (the oldest over the cap has one)
        // passes to the next oldest.
        if was_idle.is_some_and(|since| self.trim_checks.remove(&(since + self.config.idle_cap_grace, conn)))
        {
            if let Some(address) = self.conns.get(&conn).map(|c| c.address.clone()) {
                self.rearm_trim(&address);
            }
        }
        if exclusive {
            self.mark_no_new(now, conn, CloseReason::Exclusive);
        }
        match source {
            Source::Pooled | Source::Shared => self.stats.reused += 1,
            Source::Coalesced => self.stats.coalesced += 1,
            Source::New => {}
        }
        self.calls.get_mut(&call_id).expect("call exists").state =
            CallState::Active { connection: conn, early_stream };
        self.emit(now, Some(call_id), EventKind::ConnectionAcquired { connection: conn, source, exchange });
        self.actions.push_back(PoolAction::Acquired { call: call_id, connection: conn, source });
    }

    fn start_race(&mut self, now: Instant, call_id: CallId) {
        let call = self.calls.get_mut(&call_id).expect("call exists");
        let request = RaceRequest {
            call: call_id,
            address: call.address.clone(),
            proxies: call.options.proxies.clone(),
            proxy_reason: call.options.proxy_reason.clone(),
            deadline: call.options.deadline,
            first_sequence: call.sequence,
            avoid: call.avoid_routes.clone(),
            known_answers: call.answers.clone(),
        };
        let race = Race::start(request, self.config.race, now, &mut self.db);
        call.state = CallState::Racing {
            race: Box::new(race),
            timer: None,
            direct_queries: Vec::new(),
            tls: BTreeMap::new(),
        };
        let address = call.address.clone();
        self.addrs.entry(address).or_default().racing.insert(call_id);
        self.racing_total += 1;
        self.pump_race(now, call_id);
    }

    /// Moves a race's actions and events into the pool's queues, handles its end,
    /// and re-arms its timer.
    fn pump_race(&mut self, now: Instant, call_id: CallId) {
        let mut finished = None;
        // Answers known at once (cached, or parts of a shared lookup), fed after.
        let mut answers: Vec<(QueryId, DnsAnswer, DnsSource)> = Vec::new();
        {
            let Some(Call { state: CallState::Racing { race, timer, direct_queries, .. }, address, .. }) =
                self.calls.get_mut(&call_id)
            else {
                return;
            };
            let resolver = address.resolver_identity();
            // Actions first: a lookup the cache answers, or another call's query
            // in flight, changes what its DnsStart event says.
            let mut sources: Vec<(QueryId, DnsSource)> = Vec::new();
            while let Some(action) = race.poll_action() {
                match action {
                    Action::Resolve { query, host, port, proxy } => {
                        if proxy == Proxy::Direct {
                            direct_queries.push(query);
                        }
                        let key = (resolver, host.clone(), port);
                        match self.dns.lookup(key, query, now) {
                            Lookup::Miss => {
                                self.stats.dns_lookups += 1;
                                self.actions.push_back(PoolAction::Resolve {
                                    query,
                                    host,
                                    port,
                                    proxy: Box::new(proxy),
                                });
                            }
                            Lookup::Cached(result) => {
                                self.stats.dns_cache_hits += 1;
                                sources.push((query, DnsSource::Cache));
                                answers.push((query, DnsAnswer::all(result), DnsSource::Cache));
                            }
                            Lookup::InFlight(parts) => {
                                self.stats.dns_shared += 1;
                                sources.push((query, DnsSource::Shared));
                                answers.extend(parts.into_iter().map(|p| (query, p, DnsSource::Shared)));
                            }
                        }
                    }
                    Action::Connect { attempt, route } => {
                        self.stats.tcp_connects += 1;
                        self.actions.push_back(PoolAction::Connect { attempt, route })
                    }
                    Action::Handshake { attempt, route } => {
                        if route.requires_tls() {
                            self.stats.tls_handshakes += 1;
                        }
                        self.handshaking.insert(attempt);
                        self.actions.push_back(PoolAction::Handshake { attempt, route });
                    }
                    Action::Cancel { attempt } => {
                        self.actions.push_back(PoolAction::CancelAttempt { attempt })
                    }
                    other => finished = Some(other),
                }
            }
            while let Some(mut e) = race.poll_event() {
                count_attempt_end(&mut self.stats, &mut self.handshaking, &e);
                e.unverified_tls = self.unverified.mark(&e.kind);
                if let EventKind::DnsStart { query, source, .. } = &mut e.kind {
                    if let Some((_, s)) = sources.iter().find(|(q, _)| q == query) {
                        *source = *s;
                    }
                }
                self.events.push_back(e);
            }
            if let Some(t) = timer.take() {
                self.race_timers.remove(&(t, call_id));
            }
            if finished.is_none() {
                *timer = race.poll_timeout();
                if let Some(t) = *timer {
                    self.race_timers.insert((t, call_id));
                }
            }
        }
        match finished {
            Some(Action::Won { attempt, route, protocol }) if self.is_warm_call(call_id) => {
                let tls = match &mut self.calls.get_mut(&call_id).expect("call exists").state {
                    CallState::Racing { tls, .. } => tls.remove(&attempt),
                    _ => None,
                };
                let tls = tls.filter(|_| protocol == Protocol::Http2);
                self.warm_won(now, call_id, attempt, route, protocol, tls);
            }
            Some(Action::Failed(error)) if self.is_warm_call(call_id) => {
                self.warm_failed(now, call_id, &error)
            }
            Some(Action::Won { attempt, route, protocol }) => {
                self.on_won(now, call_id, attempt, route, protocol)
            }
            Some(Action::Failed(error)) => {
                let address = self.calls[&call_id].address.clone();
                self.stop_race(now, call_id);
                self.calls.remove(&call_id);
                self.actions.push_back(PoolAction::AcquireFailed {
                    call: call_id,
                    error: AcquireError::Connect(error),
                });
                self.rebalance(now, &address);
            }
            _ => {
                for (query, answer, source) in answers {
                    let _ = self.deliver_dns(now, query, answer, source);
                }
            }
        }
    }

    /// Forgets a call's race (already finished or to be cancelled), draining its
    /// cancellations, and frees its connecting slot.
    fn stop_race(&mut self, now: Instant, call_id: CallId) {
        let Some(call) = self.calls.get_mut(&call_id) else {
            return;
        };
        let CallState::Racing { race, timer, .. } = &mut call.state else {
            return;
        };
        race.cancel(now);
        let sequence = race.sequence_end();
        let answers = race.answers().to_vec();
        while let Some(mut e) = race.poll_event() {
            count_attempt_end(&mut self.stats, &mut self.handshaking, &e);
            e.unverified_tls = self.unverified.mark(&e.kind);
            self.events.push_back(e);
        }
        while let Some(action) = race.poll_action() {
            if let Action::Cancel { attempt } = action {
                self.actions.push_back(PoolAction::CancelAttempt { attempt });
            }
        }
        if let Some(t) = timer.take() {
            self.race_timers.remove(&(t, call_id));
        }
        call.state = CallState::Pending;
        call.sequence = sequence;
        call.answers = answers;
        let address = call.address.clone();
        if let Some(a) = self.addrs.get_mut(&address) {
            a.racing.remove(&call_id);
        }
        self.racing_total -= 1;
        self.gc_address(&address);
    }

    fn on_won(
        &mut self,
        now: Instant,
        call_id: CallId,
        attempt: AttemptId,
        route: Route,
        protocol: Protocol,
    ) {
        let tls = match &mut self.calls.get_mut(&call_id).expect("call exists").state {
            CallState::Racing { tls, .. } => tls.remove(&attempt),
            _ => None,
        };
        self.stop_race(now, call_id);
        let address = self.calls[&call_id].address.clone();
        let tls = tls.filter(|_| protocol == Protocol::Http2);
        let id = self.open_connection(now, attempt, &address, route, protocol, tls);
        // Post-connect de-duplication (the new connection is not indexed yet, so it
        // cannot find itself): an eligible multiplexed connection that appeared
        // meanwhile serves the call, and the new one is closed.
        if protocol.is_multiplexed() {
            let existing =
                self.find_pooled(call_id).filter(|(c, _)| self.conns[c].multiplexed()).or_else(|| {
                    let call = &self.calls[&call_id];
                    let ip = self.conns[&id].route.socket_addr().ip();
                    (!call.options.exclusive && !call.fresh_only)
                        .then(|| self.find_coalescable(&address, &[ip], &call.avoid))
                        .flatten()
                        .map(|c| (c, Source::Coalesced))
                });
            // Only a duplicate if the other has room for this call and every
            // call waiting for the Address; otherwise (a low stream limit under
            // load) the new connection is needed and serves the call.
            let demand = 1 + self.addrs.get(&address).map_or(0, |a| a.waiters);
            let existing = existing.filter(|(other, _)| {
                let c = &self.conns[other];
                c.limit().saturating_sub(c.in_flight) as usize >= demand
            });
            if let Some((other, source)) = existing {
                self.stats.wasted += 1;
                self.close(now, id, CloseReason::Duplicate);
                self.assign(now, call_id, other, source);
                self.rebalance(now, &address);
                return;
            }
        }
        self.index(id);
        self.assign(now, call_id, id, Source::New);
        self.rebalance(now, &address);
    }

    /// A connection is ready: records it, counts it, remembers the protocol its
    /// Address negotiated, and tells the driver. Not yet indexed (not idle).
    fn open_connection(
        &mut self,
        now: Instant,
        attempt: AttemptId,
        address: &Address,
        route: Route,
        protocol: Protocol,
        tls: Option<TlsFacts>,
    ) -> ConnectionId {
        let id = self.ids.next_connection();
        if tls.as_ref().is_some_and(|t| t.unverified) {
            self.unverified.connections.insert(id);
        }
        let lifetime_deadline = self.config.max_lifetime.map(|d| now + d);
        let conn = Connection {
            id,
            address: address.clone(),
            route,
            protocol,
            created: now,
            in_flight: 0,
            stream_limit: if protocol.is_multiplexed() { u32::MAX } else { 1 },
            settings: !protocol.is_multiplexed(),
            idle_since: Some(now),
            no_new: None,
            no_coalescing: false,
            refusals: 0,
            completed: 0,
            used: false,
            assigned: 0,
            tls,
            lifetime_deadline,
            goaway: None,
        };
        self.conns.insert(id, conn);
        if !self.warm.is_empty() {
            self.warm_opened(now, id, address);
        }
        self.addrs.entry(address.clone()).or_default().open += 1;
        self.open_total += 1;
        self.stats.created += 1;
        if let Some(t) = lifetime_deadline {
            self.lifetimes.insert((t, id));
        }
        if protocol.is_multiplexed() {
            self.settings_due.insert((now + self.config.race.handshake_timeout, id));
        }
        let limit = self.known_protocol.get(address).and_then(|k| k.2).filter(|_| protocol.is_multiplexed());
        self.known_protocol.insert(address.clone(), (protocol, now + self.config.route_ttl, limit));
        if self.known_protocol.len() > 64 + 2 * self.addrs.len() {
            // Forget what has expired (amortized: only when the map has grown).
            self.known_protocol.retain(|_, (_, until, _)| *until > now);
        }
        self.actions.push_back(PoolAction::Established { attempt, connection: id, protocol });
        id
    }

    /// An exchange on `conn` ended (the call already moved on or ended).
    fn release(&mut self, now: Instant, call: CallId, conn: ConnectionId, reuse: Reuse, completed: bool) {
        let idle_here = self.update(conn, |c| {
            c.in_flight -= 1;
            if completed {
                c.completed += 1;
            }
            if c.in_flight == 0 {
                c.idle_since = Some(now);
            }
        });
        if completed && !self.probation.is_empty() {
            self.warm_served(now, conn);
        }
        // A connection that will carry no new exchanges says so first, then the
        // release, then (if nothing else is in flight) its close.
        if let Reuse::Retire(reason) = reuse {
            self.mark_no_new(now, conn, reason);
        }
        self.emit(now, Some(call), EventKind::ConnectionReleased { connection: conn });
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let address = c.address.clone();
        if let Some(reason) = c.no_new {
            if c.in_flight == 0 {
                self.close(now, conn, reason);
            }
        } else if c.in_flight == 0
            && (idle_here.is_some_and(|n| n > self.config.max_idle_per_address)
                || self.config.max_idle_total.is_some())
        {
            self.enforce_idle_caps(now, &address);
        }
        self.rebalance(now, &address);
    }
}

/// Whether an entry of the pool's idle queue is live: its connection is open
/// and idle, since that instant.
fn idle_live(conns: &FastMap<ConnectionId, Connection>, &(since, id): &idle::IdleKey) -> bool {
    conns.get(&id).is_some_and(|c| c.is_idle() && c.idle_since == Some(since))
}

/// Counts an attempt that had finished TCP and was then thrown away (cancelled
/// by its race), and forgets attempts whose race is done with them.
fn count_attempt_end(stats: &mut PoolStats, handshaking: &mut BTreeSet<AttemptId>, e: &Event) {
    match &e.kind {
        EventKind::ConnectCancelled { attempt, .. } if handshaking.remove(attempt) => stats.wasted += 1,
        EventKind::ConnectFailed { attempt, .. }
        | EventKind::ConnectEnd { attempt, .. }
        | EventKind::AttemptKeptForPool { attempt, .. } => {
            handshaking.remove(attempt);
        }
        _ => {}
    }
}

/// The attempts and connections whose TLS certificate was not verified.
#[derive(Debug, Default)]
struct Unverified {
    attempts: BTreeSet<AttemptId>,
    connections: BTreeSet<ConnectionId>,
}

impl Unverified {
    /// Whether an event with this kind concerns an unverified attempt or
    /// connection; forgets them at their last event (so the sets stay small).
    fn mark(&mut self, kind: &EventKind) -> bool {
        if self.attempts.is_empty() && self.connections.is_empty() {
            return false;
        }
        if let Some(a) = kind.attempt() {
            let last = matches!(
                kind,
                EventKind::ConnectEnd { .. }
                    | EventKind::ConnectFailed { .. }
                    | EventKind::ConnectCancelled { .. }
            );
            return if last { self.attempts.remove(&a) } else { self.attempts.contains(&a) };
        }
        if let Some(c) = kind.connection() {
            return if matches!(kind, EventKind::ConnectionClosed { .. }) {
                self.connections.remove(&c)
            } else {
                self.connections.contains(&c)
            };
        }
        false
    }
}

/// Where a connection sits in the pool's indices ([`Pool::index`]).
#[derive(PartialEq, Eq, Clone, Copy)]
struct IndexKeys {
    /// In the idle sets, since then.
    idle: Option<Instant>,
    shareable: bool,
    /// In the multiplexed set (multiplexed and usable).
    multiplexed: bool,
    /// Counted in use.
    in_use: bool,
    /// In the coalescing index, under this IP.
    coalesce: Option<IpAddr>,
}

impl IndexKeys {
    fn of(c: &Connection) -> IndexKeys {
        IndexKeys {
            idle: c.is_idle().then(|| c.idle_since.expect("idle connections have idle_since")),
            shareable: c.shareable(),
            multiplexed: c.multiplexed() && c.usable(),
            in_use: c.in_flight > 0,
            coalesce: c.coalescable().then(|| c.route.socket_addr().ip()),
        }
    }
}
