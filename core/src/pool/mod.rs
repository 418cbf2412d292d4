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
//! # Resilience policies
//!
//! - **Rotation** ([`PoolConfig::max_lifetime`], off by default): each
//!   connection's lifetime is moved by up to [`PoolConfig::max_lifetime_jitter`]
//!   (±10 %) of itself, drawn from [`PoolConfig::seed`], so connections opened
//!   together retire apart; a retired HTTP/2 connection opens no new stream and
//!   closes after its last.
//! - **DNS drain** ([`PoolConfig::dns_refresh`], on): see [`refresh`].
//! - **HTTP/2 keep-alive** ([`PoolConfig::ping_interval`], off): a PING every
//!   interval; no PONG within [`PoolConfig::pong_timeout`] retires the
//!   connection [`CloseReason::Unhealthy`] (an idle one closes at once).
//! - **Retry budget** ([`PoolConfig::retry_budget`], 20 % + 10/s over 10 s):
//!   see [`RetryBudget`]; a refused retry fails with
//!   [`NoRetry::RetryBudget`].
//! - **Graceful drain**: [`Pool::shutdown`] refuses new calls and lets
//!   in-flight ones finish; [`Pool::abort_in_use`] ends what HTTP/2 still
//!   carries at the deadline.
//! - **Metrics**: [`Pool::stats_by_address`] (gauges and counters per Address).
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
//! # use switchyard_core::*;
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
//! // ... the embedder runs the exchange on the socket ...
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

mod acquire;
mod action;
mod budget;
mod coalesce;
mod config;
mod connect;
mod eject;
pub(crate) mod evict;
mod exchange;
mod http2;
mod idle;
mod kept;
mod records;
pub mod refresh;
mod stats;
mod timers;
mod view;
mod waiters;
pub mod warm;

pub use action::{AcquireError, CallTimeout, ExchangeError, FailureOutcome, PoolAction, Source};
pub use budget::RetryBudget;
pub use config::{AcquireOptions, PoolConfig, StreamLimitPolicy};
pub use evict::{IDLE_ADDRESSES_KEPT, KNOWN_PROTOCOLS_KEPT};
pub use stats::{AddressCounters, AddressMetrics, AddressStats, PoolStats};
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
use crate::route::Route;
use crate::route_db::RouteDatabase;
use crate::time::{earliest, Instant};
use timers::{Timer, Timers};

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
    /// Recent calls and retries ([`PoolConfig::retry_budget`]).
    budget: budget::Window,
    /// Counters since the Address was first seen ([`Pool::stats_by_address`]).
    counters: stats::AddressCounters,
    /// HTTP/2: the streams one connection carries before its server goes
    /// away, learned from GOAWAYs ([`CloseReason::StreamBudget`]), and until when.
    stream_budget: Option<(u64, Instant)>,
    /// The streams processed on the last connection whose GOAWAY left streams
    /// unprocessed: the same count twice in a row is a budget (a limit the
    /// server keeps, where a reload's GOAWAY lands anywhere).
    last_goaway_processed: Option<u64>,
}

impl AddrState {
    /// The learned stream budget, while it holds.
    fn stream_budget(&self, now: Instant) -> Option<u64> {
        self.stream_budget.filter(|(_, until)| *until > now).map(|(n, _)| n)
    }
}

impl AddrState {
    /// Nothing open, connecting or waiting (its budget may still matter:
    /// see [`Pool::gc_address`]).
    fn is_idle_state(&self) -> bool {
        self.open == 0 && self.racing.is_empty() && self.waiters == 0 && self.kept == 0
    }

    /// Nothing at all: it can be forgotten (with its counters).
    fn is_empty(&self) -> bool {
        self.is_idle_state() && self.budget.totals() == (0, 0)
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
    /// Boxed: most calls are served from the pool and never race, and the
    /// smaller `Call` moves in and out of the pool's map for every one.
    Racing(Box<Racing>),
    Active {
        connection: ConnectionId,
        /// HTTP/2, a stream opened before the server's SETTINGS arrived: the
        /// streams the connection carried then, this one included. If the
        /// SETTINGS then allowed fewer, a refusal of it is the client's doing.
        early_stream: Option<u32>,
    },
}

/// A call's race for a new connection.
#[derive(Debug)]
struct Racing {
    race: Race,
    timer: Option<Instant>,
    direct_queries: Vec<QueryId>,
    tls: BTreeMap<AttemptId, TlsFacts>,
}

/// What a call's earlier attempts taught it.
#[derive(Debug, Default)]
struct Learned {
    /// Connections it must not be served on again.
    avoid: Vec<ConnectionId>,
    /// Connections that refused this call (REFUSED_STREAM held against them).
    refused_on: Vec<ConnectionId>,
    /// Routes the call was refused on: its next race plans them last.
    avoid_routes: Vec<Route>,
    /// The DNS answers its races used: a retry plans with them, no new lookup.
    answers: Vec<crate::plan::KnownAnswer>,
}

static NOTHING_LEARNED: Learned =
    Learned { avoid: Vec::new(), refused_on: Vec::new(), avoid_routes: Vec::new(), answers: Vec::new() };

/// A call's [`AcquireOptions`] as the pool keeps them: the proxy list (only
/// a race reads it) boxed, and absent when empty, so a call served from the
/// pool moves a smaller `Call` in and out of its map and drops nothing there.
#[derive(Debug)]
struct CallOptions {
    exclusive: bool,
    require_multiplexed: bool,
    deadline: Option<Instant>,
    proxies: Option<Box<(Vec<Proxy>, Option<String>)>>,
}

impl From<AcquireOptions> for CallOptions {
    fn from(options: AcquireOptions) -> CallOptions {
        let AcquireOptions { exclusive, require_multiplexed, deadline, proxies, proxy_reason } = options;
        let proxies =
            (!proxies.is_empty() || proxy_reason.is_some()).then(|| Box::new((proxies, proxy_reason)));
        CallOptions { exclusive, require_multiplexed, deadline, proxies }
    }
}

impl CallOptions {
    /// The proxy selector's answer (empty: none given).
    fn proxies(&self) -> &[Proxy] {
        self.proxies.as_ref().map_or(&[], |p| &p.0)
    }

    /// Why the selector chose them.
    fn proxy_reason(&self) -> Option<&String> {
        self.proxies.as_ref().and_then(|p| p.1.as_ref())
    }
}

#[derive(Debug)]
struct Call {
    address: Address,
    /// Where the next race's ids start, so a retried call never reuses one.
    sequence: Sequence,
    options: CallOptions,
    retries: u32,
    /// Retries that did not count toward `retries` (GOAWAY, early refusals).
    free_retries: u32,
    /// Its place among waiting calls, fixed when it first asked: a retried
    /// call waits ahead of calls that asked after it (a call a server turned
    /// away is served before the newcomers, and gets the next connection's
    /// first streams).
    wait_seq: u64,
    /// What earlier attempts taught it (boxed, absent until the first one
    /// does: most calls are served at once and never need it).
    learned: Option<Box<Learned>>,
    fresh_only: bool,
    /// Its response was a 5xx counted against the route ([`Pool::server_error`]).
    server_error: bool,
    /// Its caller dropped the response; the body drains ([`Pool::draining`]).
    draining: bool,
    state: CallState,
}

impl Call {
    /// A call that has just asked: nothing tried, nothing avoided.
    fn new(address: Address, options: AcquireOptions, wait_seq: u64) -> Call {
        Call {
            address,
            options: options.into(),
            retries: 0,
            free_retries: 0,
            wait_seq,
            learned: None,
            fresh_only: false,
            server_error: false,
            draining: false,
            state: CallState::Pending,
            sequence: Sequence::default(),
        }
    }

    /// What earlier attempts taught the call (nothing yet: all empty).
    fn learned(&self) -> &Learned {
        self.learned.as_deref().unwrap_or(&NOTHING_LEARNED)
    }

    /// [`Call::learned`], to add to.
    fn learned_mut(&mut self) -> &mut Learned {
        self.learned.get_or_insert_with(Box::default)
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
    /// Every open connection's record, by the slot its id names.
    conns: records::Records,
    /// Each open connection's local address, as the adapter reported it: a
    /// map of its own, so the records acquire and release touch stay small
    /// (measured: 32 more bytes per record cost 3.5 % at 100 000 connections).
    locals: FastMap<ConnectionId, std::net::SocketAddr>,
    addrs: FastMap<Address, AddrState>,
    coalesce_index: FastMap<IpAddr, BTreeSet<ConnectionId>>,
    // Boxed: a call moves in and out of the map as a pointer, not a struct.
    // Lookup only (`shutdown` sorts what it takes from it).
    calls: FastMap<CallId, Call>,
    idle_all: idle::IdleQueue,
    /// Every deadline but idle expiry (the idle queue orders those).
    timers: Timers,
    waiters: BTreeMap<u64, CallId>,
    /// Attempts kept for the pool (handshaking, or a call's only attempt), and
    /// their deadlines.
    kept: BTreeMap<AttemptId, kept::Kept>,
    /// Attempts past TCP, for counting the ones thrown away.
    handshaking: BTreeSet<AttemptId>,
    /// Attempts and connections whose certificate was not verified: their
    /// events say so (`Event::unverified_tls`), until their last event.
    unverified: Unverified,
    /// Per Address, the protocol its last connection negotiated, until when,
    /// and (HTTP/2) the stream limit its last SETTINGS advertised.
    known_protocol: FastMap<Address, (Protocol, Instant, Option<u32>)>,
    /// When idle HTTP/1.1 connections are next probed (armed in `timers`).
    next_probe: Option<Instant>,
    /// When the next DNS refresh round runs (armed in `timers`; see [`refresh`]).
    dns_refresh_at: Option<Instant>,
    next_wait_seq: u64,
    open_total: usize,
    racing_total: usize,
    in_use_total: usize,
    /// When `addrs` grows past this, Addresses with nothing left but an old
    /// budget are forgotten (amortized O(1)).
    addrs_sweep_at: usize,
    /// When `known_protocol` grows past this, expired entries (and past
    /// [`evict::KNOWN_PROTOCOLS_KEPT`], the oldest) are forgotten.
    known_sweep_at: usize,
    /// HTTP/2 connections whose SETTINGS allow zero streams now (calls for
    /// their Address wait rather than dial; see [`Pool::settings`]).
    zero_stream_conns: usize,
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
    /// Connections to declared Addresses that have not settled yet, and when
    /// their probation ends (armed in `timers`).
    probation: BTreeMap<ConnectionId, warm::Probation>,
    jitter: warm::Jitter,
    /// Draws for connections' lifetimes (a stream of its own, so warm
    /// backoff draws do not move with the number of connections opened).
    lifetime_jitter: warm::Jitter,
    actions: VecDeque<PoolAction>,
    events: VecDeque<Event>,
    /// Whether events are queued ([`Pool::set_events`]).
    events_on: bool,
}

impl Pool {
    /// An empty pool.
    #[must_use]
    pub fn new(config: PoolConfig) -> Pool {
        let db = RouteDatabase::new(config.route_ttl)
            .with_outliers(config.outliers, config.seed.rotate_left(16) ^ 0x0E7E_C7ED);
        let dns = DnsCache::new(config.dns_cache);
        let jitter = warm::Jitter::new(config.seed);
        let lifetime_jitter = warm::Jitter::new(config.seed.rotate_left(32) ^ 0x11FE_711E);
        Pool {
            config,
            ids: IdAllocator::default(),
            db,
            conns: records::Records::default(),
            locals: FastMap::default(),
            addrs: FastMap::default(),
            coalesce_index: FastMap::default(),
            calls: FastMap::default(),
            idle_all: idle::IdleQueue::default(),
            waiters: BTreeMap::new(),
            kept: BTreeMap::new(),
            handshaking: BTreeSet::new(),
            unverified: Unverified::default(),
            known_protocol: FastMap::default(),
            next_probe: None,
            dns_refresh_at: None,
            timers: Timers::default(),
            next_wait_seq: 0,
            open_total: 0,
            racing_total: 0,
            in_use_total: 0,
            addrs_sweep_at: 64,
            known_sweep_at: 64,
            zero_stream_conns: 0,
            shutdown: false,
            stats: PoolStats::default(),
            dns,
            warm: BTreeMap::new(),
            warm_of: FastMap::default(),
            next_warm: 0,
            warm_calls: BTreeMap::new(),
            probation: BTreeMap::new(),
            jitter,
            lifetime_jitter,
            actions: VecDeque::new(),
            events: VecDeque::new(),
            events_on: true,
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

    /// Where a call without a connection stands (`None`: it holds one, or
    /// it is unknown): waiting, or its race's stage. An adapter whose own
    /// deadline ends the call names it in the timeout's text.
    #[must_use]
    pub fn connect_stage(&self, call: CallId) -> Option<crate::race::ConnectStage> {
        match &self.calls.get(&call)?.state {
            CallState::Racing(racing) => Some(racing.race.stage()),
            CallState::Active { .. } => None,
            _ => Some(crate::race::ConnectStage::Waiting),
        }
    }

    /// The call's own deadline passed on the embedder's timer (a bound
    /// around the whole call, as an async `timeout` is): the pool says which
    /// phase it was in, and ends the exchange of a call that held a
    /// connection — a timeout whose request may have reached the server
    /// (`request` says what it allows), judged as any other, never retried.
    /// A call still connecting is left for [`Pool::cancel`], with its stage.
    ///
    /// ```
    /// # use switchyard_core::{Address, AcquireOptions, CallTimeout, Instant, Pool, PoolConfig};
    /// # use switchyard_core::pool::RequestFacts;
    /// let mut pool = Pool::new(PoolConfig::default());
    /// let now = Instant::from_millis(0);
    /// let address = Address::from_uri(&"http://example.com/".parse()?)?.build()?;
    /// let call = pool.acquire(now, address, AcquireOptions::default());
    /// let facts = RequestFacts { idempotent: true, body_replayable: true };
    /// // Still resolving the name: the timeout is the connect phase's.
    /// let t = pool.call_timed_out(now, call, facts);
    /// assert!(matches!(t, CallTimeout::Connecting(Some(_))));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn call_timed_out(
        &mut self,
        now: Instant,
        call: CallId,
        request: crate::pool::RequestFacts,
    ) -> CallTimeout {
        match self.calls.get(&call).map(|c| &c.state) {
            Some(CallState::Active { .. }) => {
                let _ = self.exchange_failed(now, call, crate::pool::ExchangeFailure::call_deadline(request));
                CallTimeout::Exchange
            }
            _ => CallTimeout::Connecting(self.connect_stage(call)),
        }
    }

    /// A view of one connection, if it is open.
    #[must_use]
    pub fn connection(&self, id: ConnectionId) -> Option<&Connection> {
        self.conns.get(&id)
    }

    /// The adapter reports `connection`'s local address (its socket's own
    /// end), kept for observers ([`Pool::local_addr`]) until it closes; the
    /// pool decides nothing by it. An unknown connection is ignored.
    pub fn set_local_addr(&mut self, connection: ConnectionId, addr: std::net::SocketAddr) {
        if self.conns.contains_key(&connection) {
            self.locals.insert(connection, addr);
        }
    }

    /// An open connection's local address (the local IP and port of its
    /// socket), when the adapter reported it: curl's `local_ip` and
    /// `local_port`. `None` over a Unix socket, for a stream a connector
    /// hook made, or once it closed.
    #[must_use]
    pub fn local_addr(&self, connection: ConnectionId) -> Option<std::net::SocketAddr> {
        self.locals.get(&connection).copied()
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

    /// Whether the pool queues [`Event`]s for [`Pool::poll_event`] (default:
    /// it does). An embedder with nobody to hand them to (no listener, no
    /// tracing) turns them off, and the pool then queues none: a pooled call
    /// costs about 200 instructions less (building, queueing, polling and
    /// dropping its two events). Actions, counters and statistics are the
    /// same either way. Turning them off drops any still queued.
    ///
    /// ```
    /// # use switchyard_core::{AcquireOptions, Address, Instant, Pool, PoolConfig, Scheme};
    /// let mut pool = Pool::new(PoolConfig::default());
    /// pool.set_events(false);
    /// let address = Address::builder(Scheme::Http, "localhost", 80).build().unwrap();
    /// pool.acquire(Instant::ZERO, address, AcquireOptions::default());
    /// assert!(pool.poll_action().is_some(), "the pool still acts");
    /// assert!(pool.poll_event().is_none(), "but tells nothing");
    /// ```
    pub fn set_events(&mut self, on: bool) {
        self.events_on = on;
        if !on {
            self.events.clear();
        }
    }

    /// Whether events are queued ([`Pool::set_events`]).
    #[must_use]
    pub fn events_on(&self) -> bool {
        self.events_on
    }

    /// The earliest instant at which [`Pool::handle_timeout`] must run: the next
    /// idle expiry, lifetime expiry, waiter deadline or race timer. `None` when
    /// nothing changes until the next input. Early, late or repeated
    /// `handle_timeout` calls are harmless.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let idle = self.idle_all.first().map(|(since, _)| *since + self.config.keep_alive);
        earliest(idle, self.timers.first())
    }

    /// Acts on every deadline `<= now`: idle expiry, then the timer table's
    /// due entries in time order.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.idle_timeouts(now);
        while let Some(timer) = self.timers.pop_due(now) {
            match timer {
                Timer::Lifetime(id) => self.retire(now, id, CloseReason::MaxLifetime),
                Timer::Wait(call) => self.wait_timed_out(now, call),
                Timer::Kept(attempt) => self.kept_timed_out(now, attempt),
                Timer::Trim(id) => {
                    if let Some(address) = self.conns.get(&id).map(|c| c.address.clone()) {
                        self.enforce_idle_caps(now, &address);
                    }
                }
                Timer::Race(call) => self.race_step(now, call),
                Timer::Probe => self.probe_idle(now),
                Timer::Warm(idx) => self.rewarm(now, idx),
                Timer::Probation(conn) => self.probation_ended(now, conn),
                Timer::Pong(id) => self.pong_overdue(now, id),
                Timer::Settings(id) => self.settings_overdue(now, id),
                Timer::DnsRefresh => self.refresh_dns(now),
                Timer::KeepAlive(id) => self.keepalive_due(now, id),
            }
        }
    }

    /// Idle connections past the keep-alive close (a warm minimum's stay).
    fn idle_timeouts(&mut self, now: Instant) {
        // Idle expiry, oldest first.
        while let Some(&(since, id)) = self.idle_all.first() {
            if since + self.config.keep_alive > now {
                break;
            }
            if self.warm_protects(id) {
                // A warm minimum's connection: it stays, idle from now (its
                // idle-cap check moves with it).
                self.timers.remove(since + self.config.idle_cap_grace, Timer::Trim(id));
                self.update(id, |c| c.idle_since = Some(now));
                if let Some(address) = self.conns.get(&id).map(|c| c.address.clone()) {
                    self.rearm_trim(&address);
                }
                continue;
            }
            self.close(now, id, CloseReason::IdleTimeout);
        }
    }

    /// A call that waited for capacity past the acquire timeout fails.
    fn wait_timed_out(&mut self, now: Instant, call: CallId) {
        let Some(c) = self.calls.get(&call) else { return };
        if let CallState::Waiting { since, .. } = c.state {
            let address = c.address.clone();
            self.fail_unserved(now, call, AcquireError::Timeout { address, waited: now - since });
        }
    }

    /// A call without a connection (waiting or racing) ends, failed.
    pub(super) fn fail_unserved(&mut self, now: Instant, call: CallId, error: AcquireError) {
        self.end_call_waiting_or_racing(now, call);
        self.calls.remove(&call);
        self.actions.push_back(PoolAction::AcquireFailed { call, error });
    }

    /// A race's timer is due: it takes its next step.
    fn race_step(&mut self, now: Instant, call: CallId) {
        if let Some(Call { state: CallState::Racing(racing), .. }) = self.calls.get_mut(&call) {
            racing.timer = None;
            racing.race.handle_timeout(now, &mut self.db);
            self.pump_race(now, call);
        }
    }

    /// Asks the embedder to probe every idle HTTP/1.1 connection when the probe
    /// interval has passed (oldest idle first), and re-arms while any remain.
    fn probe_idle(&mut self, now: Instant) {
        self.next_probe = None;
        let Some(every) = self.config.probe_interval else { return };
        let idle: Vec<ConnectionId> = self
            .idle_all
            .iter(|k| idle_live(&self.conns, k))
            .map(|&(_, id)| id)
            .filter(|id| self.conns.get(id).is_some_and(|c| !c.multiplexed()))
            .collect();
        if !idle.is_empty() {
            self.next_probe = Some(now + every);
            self.timers.insert(now + every, Timer::Probe);
        }
        for connection in idle {
            self.actions.push_back(PoolAction::Probe { connection });
        }
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
            self.fail_unserved(now, call, AcquireError::Shutdown);
        }
        self.cancel_kept(now);
        let mut open: Vec<ConnectionId> = self.conns.keys().copied().collect();
        open.sort_unstable();
        for id in open {
            self.retire(now, id, CloseReason::Shutdown);
        }
    }

    /// The end of a graceful shutdown's grace: every HTTP/2 connection still
    /// carrying streams is ended now ([`PoolAction::Abort`], reason
    /// [`CloseReason::Shutdown`]): its streams fail and are reported.
    /// HTTP/1.1 exchanges belong to their calls' sockets and are not
    /// interrupted; their connections close when they end. Returns how many
    /// connections were ended.
    pub fn abort_in_use(&mut self, now: Instant) -> usize {
        self.shutdown(now);
        let mut busy: Vec<ConnectionId> =
            self.conns.values().filter(|c| c.multiplexed() && c.in_flight > 0).map(|c| c.id).collect();
        busy.sort_unstable();
        for &connection in &busy {
            self.actions.push_back(PoolAction::Abort { connection, reason: CloseReason::Shutdown });
        }
        busy.len()
    }

    // --------------------------------------------------------------- internals

    /// [`Pool::emit`] for an event that ends nothing the pool tracks per
    /// attempt or connection (so [`Unverified`] need not see it): with
    /// events off it is not even built.
    fn emit_passing(&mut self, at: Instant, call: Option<CallId>, kind: impl FnOnce() -> EventKind) {
        if self.events_on {
            self.emit(at, call, kind());
        }
    }

    fn emit(&mut self, at: Instant, call: Option<CallId>, kind: EventKind) {
        let unverified_tls = self.unverified.mark(&kind);
        if self.events_on {
            self.events.push_back(Event { at, call, kind, unverified_tls });
        }
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
                if let Some(every) = self.config.probe_interval {
                    self.next_probe = Some(since + every);
                    self.timers.insert(since + every, Timer::Probe);
                }
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
                    if let Some(every) = self.config.probe_interval {
                        self.next_probe = Some(since + every);
                        self.timers.insert(since + every, Timer::Probe);
                    }
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
}

/// Whether an entry of the pool's idle queue is live: its connection is open
/// and idle, since that instant.
fn idle_live(conns: &records::Records, &(since, id): &idle::IdleKey) -> bool {
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
