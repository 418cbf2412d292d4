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

mod coalesce;
mod retry;

pub use coalesce::{certificate_covers, CertificatePins};
pub use retry::{
    decide, ExchangeFailure, ExchangeFailureKind, NoRetry, Progress, RequestFacts, RetryDecision,
    RetryReason,
};

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use crate::address::{Address, Host, Protocol, Proxy};
use crate::connection::{CloseReason, Reuse, TlsFacts};
use crate::error::{ConnectError, DnsError, Misuse, RaceError};
use crate::event::{Event, EventKind};
use crate::id::{AttemptId, CallId, ConnectionId, IdAllocator, QueryId};
use crate::race::{Action, Race, RaceConfig, RaceRequest};
use crate::route::{Route, RouteDatabase};
use crate::time::{earliest, Instant};

/// What to do when every HTTP/2 connection to an Address is at its stream limit.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum StreamLimitPolicy {
    /// Open another connection (OkHttp, Go). Default.
    #[default]
    OpenNew,
    /// Wait for a stream to free (hyper; RFC 9113's SHOULD).
    Wait,
}

/// The pool's knobs. Every default is stated on its field.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// The connect race's timing. Default: [`RaceConfig::default`].
    pub race: RaceConfig,
    /// Idle connections older than this are closed. Default: 90 s.
    pub keep_alive: Duration,
    /// Connections older than this take no new exchanges. Default: none.
    pub max_lifetime: Option<Duration>,
    /// Open plus connecting connections per Address. Default: unlimited.
    pub max_connections_per_address: Option<usize>,
    /// Open plus connecting connections in total. Default: unlimited.
    pub max_connections_total: Option<usize>,
    /// Idle connections kept per Address. Default: 32.
    pub max_idle_per_address: usize,
    /// Idle connections kept in total. Default: unlimited.
    pub max_idle_total: Option<usize>,
    /// How long a call may wait for capacity. Default: 30 s.
    pub acquire_timeout: Duration,
    /// HTTP/2 at its stream limit. Default: open another connection.
    pub stream_limit_policy: StreamLimitPolicy,
    /// How long a failed route stays postponed. Default: 10 min.
    pub route_ttl: Duration,
    /// Retries per call. Default: 3.
    pub max_retries: u32,
    /// Public-key pins, checked before coalescing. Default: none.
    pub pins: CertificatePins,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            race: RaceConfig::default(),
            keep_alive: Duration::from_secs(90),
            max_lifetime: None,
            max_connections_per_address: None,
            max_connections_total: None,
            max_idle_per_address: 32,
            max_idle_total: None,
            acquire_timeout: Duration::from_secs(30),
            stream_limit_policy: StreamLimitPolicy::OpenNew,
            route_ttl: RouteDatabase::DEFAULT_TTL,
            max_retries: 3,
            pins: CertificatePins::default(),
        }
    }
}

/// What a call asks for.
#[derive(Clone, Debug, Default)]
pub struct AcquireOptions {
    /// A connection no one else will use (upgrades, `CONNECT`, WebSocket). It is
    /// marked no-new-exchanges when handed out.
    pub exclusive: bool,
    /// Only a multiplexed (HTTP/2) connection will do.
    pub require_multiplexed: bool,
    /// The call's own deadline; bounds waiting and connecting.
    pub deadline: Option<Instant>,
    /// The proxy selector's answer for this call (see [`RaceRequest::proxies`]).
    pub proxies: Vec<Proxy>,
}

/// Where an acquired connection came from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Source {
    /// An idle pooled connection.
    Pooled,
    /// A share of an HTTP/2 connection already carrying exchanges.
    Shared,
    /// An HTTP/2 connection to another host, coalesced.
    Coalesced,
    /// Newly connected by this call's race.
    New,
}

impl Source {
    /// Whether the connection existed before this call.
    #[must_use]
    pub fn is_reused(self) -> bool {
        self != Source::New
    }
}

/// Why an acquisition failed.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum AcquireError {
    /// The call waited for capacity longer than the acquire timeout or its deadline.
    Timeout {
        /// The Address it waited for.
        address: Address,
        /// How long it waited.
        waited: Duration,
    },
    /// The pool is shut down.
    Shutdown,
    /// Connecting failed: every route, or the call's deadline.
    Connect(RaceError),
}

impl fmt::Display for AcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcquireError::Timeout { address, waited } => {
                write!(
                    f,
                    "timed out after {waited:?} waiting for a connection to {address}"
                )
            }
            AcquireError::Shutdown => f.write_str("the connection pool is shut down"),
            AcquireError::Connect(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl std::error::Error for AcquireError {}

/// An exchange failed and will not be retried.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ExchangeError {
    /// What failed.
    pub kind: ExchangeFailureKind,
    /// Whether the server may have received and processed the request.
    pub may_have_been_sent: bool,
    /// Why it was not retried.
    pub why: NoRetry,
    /// The connection it failed on.
    pub connection: ConnectionId,
    /// That connection's route.
    pub route: Route,
    /// Retries the call had made.
    pub retries: u32,
}

impl fmt::Display for ExchangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {} ({})", self.kind, self.route, self.connection)?;
        if self.may_have_been_sent {
            f.write_str("; the request may have been sent")?;
        } else {
            f.write_str("; the request was not processed")?;
        }
        write!(f, "; not retried: {}", self.why)
    }
}

impl std::error::Error for ExchangeError {}

/// What [`Pool::exchange_failed`] decided.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum FailureOutcome {
    /// The call goes on: a new [`PoolAction::Acquired`] (or failure) follows.
    Retrying(RetryReason),
    /// The call is over.
    Failed(ExchangeError),
}

/// An instruction for the driver.
#[must_use]
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum PoolAction {
    /// Resolve `host`; answer with [`Pool::handle_dns`].
    Resolve {
        /// Quote this in the answer.
        query: QueryId,
        /// The name.
        host: Host,
        /// The port routes will dial.
        port: u16,
        /// Whose host: [`Proxy::Direct`] for the origin.
        proxy: Proxy,
    },
    /// Open TCP to the route; answer with [`Pool::handle_connected`] or [`Pool::handle_failed`].
    Connect {
        /// Quote this.
        attempt: AttemptId,
        /// What to dial.
        route: Route,
    },
    /// Run the route's handshakes; answer with [`Pool::handle_established`] or [`Pool::handle_failed`].
    Handshake {
        /// Quote this.
        attempt: AttemptId,
        /// The route.
        route: Route,
    },
    /// Close this attempt's socket now.
    CancelAttempt {
        /// The abandoned attempt.
        attempt: AttemptId,
    },
    /// The attempt's socket is now this connection; keep it under this id and
    /// speak `protocol` on it.
    Established {
        /// The winning attempt.
        attempt: AttemptId,
        /// Its new id.
        connection: ConnectionId,
        /// The protocol negotiated (or known in advance).
        protocol: Protocol,
    },
    /// The call may run one exchange on this connection.
    Acquired {
        /// The call.
        call: CallId,
        /// The connection.
        connection: ConnectionId,
        /// Where it came from.
        source: Source,
    },
    /// The call gets no connection.
    AcquireFailed {
        /// The call.
        call: CallId,
        /// Why.
        error: AcquireError,
    },
    /// Close this connection's socket.
    Close {
        /// The connection.
        connection: ConnectionId,
        /// Why.
        reason: CloseReason,
    },
}

/// A read-only view of one connection.
#[derive(Clone, Debug)]
pub struct Connection {
    id: ConnectionId,
    address: Address,
    route: Route,
    protocol: Protocol,
    created: Instant,
    in_flight: u32,
    stream_limit: u32,
    idle_since: Option<Instant>,
    no_new: Option<CloseReason>,
    no_coalescing: bool,
    refusals: u32,
    completed: u64,
    tls: Option<TlsFacts>,
    lifetime_deadline: Option<Instant>,
}

impl Connection {
    /// Its id.
    #[must_use]
    pub fn id(&self) -> ConnectionId {
        self.id
    }
    /// The Address it was made for.
    #[must_use]
    pub fn address(&self) -> &Address {
        &self.address
    }
    /// Its route.
    #[must_use]
    pub fn route(&self) -> &Route {
        &self.route
    }
    /// The protocol it speaks.
    #[must_use]
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }
    /// When it was established.
    #[must_use]
    pub fn created(&self) -> Instant {
        self.created
    }
    /// Exchanges it carries now.
    #[must_use]
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }
    /// Most exchanges it may carry at once (1 for HTTP/1; the peer's
    /// MAX_CONCURRENT_STREAMS for HTTP/2, unlimited until SETTINGS arrive).
    #[must_use]
    pub fn stream_limit(&self) -> u32 {
        self.stream_limit
    }
    /// Since when it is idle, if it is.
    #[must_use]
    pub fn idle_since(&self) -> Option<Instant> {
        self.idle_since
    }
    /// Why it takes no new exchanges, if it does not.
    #[must_use]
    pub fn no_new_exchanges(&self) -> Option<CloseReason> {
        self.no_new
    }
    /// Whether a 421 forbade coalescing onto it.
    #[must_use]
    pub fn is_no_coalescing(&self) -> bool {
        self.no_coalescing
    }
    /// Exchanges it completed.
    #[must_use]
    pub fn completed_exchanges(&self) -> u64 {
        self.completed
    }
    fn multiplexed(&self) -> bool {
        self.protocol.is_multiplexed()
    }
    fn usable(&self) -> bool {
        self.no_new.is_none()
    }
    fn is_idle(&self) -> bool {
        self.usable() && self.in_flight == 0
    }
    fn shareable(&self) -> bool {
        self.usable()
            && self.multiplexed()
            && self.in_flight > 0
            && self.in_flight < self.stream_limit
    }
    fn coalescable(&self) -> bool {
        self.usable()
            && self.protocol == Protocol::Http2
            && !self.no_coalescing
            && self.tls.is_some()
            && *self.route.proxy() == Proxy::Direct
    }
}

/// Per-Address counts.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct AddressStats {
    /// Races in progress (each will make at most one connection).
    pub connecting: usize,
    /// Open connections with no exchange and accepting new ones.
    pub idle: usize,
    /// Connections carrying at least one exchange.
    pub in_use: usize,
    /// Open connections (idle, in use, or draining).
    pub open: usize,
    /// Calls waiting for capacity.
    pub waiters: usize,
}

/// Pool-wide counts and counters.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct PoolStats {
    /// Totals of [`AddressStats`] over every Address.
    pub totals: AddressStats,
    /// Calls not yet ended.
    pub calls: usize,
    /// Connections established.
    pub created: u64,
    /// Acquisitions served by an existing connection (pooled or shared).
    pub reused: u64,
    /// Acquisitions served by coalescing.
    pub coalesced: u64,
    /// Connections closed, by reason.
    pub closed: BTreeMap<CloseReason, u64>,
}

#[derive(Debug, Default)]
struct AddrState {
    idle: BTreeSet<(Instant, ConnectionId)>,
    shareable: BTreeSet<ConnectionId>,
    multiplexed: BTreeSet<ConnectionId>,
    racing: BTreeSet<CallId>,
    open: usize,
    in_use: usize,
    waiters: usize,
}

impl AddrState {
    fn is_empty(&self) -> bool {
        self.open == 0 && self.racing.is_empty() && self.waiters == 0
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
    },
}

#[derive(Debug)]
struct Call {
    address: Address,
    options: AcquireOptions,
    retries: u32,
    avoid: Vec<ConnectionId>,
    fresh_only: bool,
    state: CallState,
}

/// The connection pool. See the [module docs](self).
#[derive(Debug)]
pub struct Pool {
    config: PoolConfig,
    ids: IdAllocator,
    db: RouteDatabase,
    // Lookup only: nothing is emitted in these maps' order.
    conns: HashMap<ConnectionId, Connection>,
    addrs: HashMap<Address, AddrState>,
    coalesce_index: HashMap<IpAddr, BTreeSet<ConnectionId>>,
    calls: BTreeMap<CallId, Call>,
    idle_all: BTreeSet<(Instant, ConnectionId)>,
    lifetimes: BTreeSet<(Instant, ConnectionId)>,
    waiters: BTreeMap<u64, CallId>,
    wait_deadlines: BTreeSet<(Instant, CallId)>,
    race_timers: BTreeSet<(Instant, CallId)>,
    next_wait_seq: u64,
    open_total: usize,
    racing_total: usize,
    in_use_total: usize,
    shutdown: bool,
    stats: PoolStats,
    actions: VecDeque<PoolAction>,
    events: VecDeque<Event>,
}

impl Pool {
    /// An empty pool.
    #[must_use]
    pub fn new(config: PoolConfig) -> Pool {
        let db = RouteDatabase::new(config.route_ttl);
        Pool {
            config,
            ids: IdAllocator::default(),
            db,
            conns: HashMap::new(),
            addrs: HashMap::new(),
            coalesce_index: HashMap::new(),
            calls: BTreeMap::new(),
            idle_all: BTreeSet::new(),
            lifetimes: BTreeSet::new(),
            waiters: BTreeMap::new(),
            wait_deadlines: BTreeSet::new(),
            race_timers: BTreeSet::new(),
            next_wait_seq: 0,
            open_total: 0,
            racing_total: 0,
            in_use_total: 0,
            shutdown: false,
            stats: PoolStats::default(),
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
            CallState::Active { connection } => Some(connection),
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
        let idle = self
            .idle_all
            .first()
            .map(|(since, _)| *since + self.config.keep_alive);
        let mut t = earliest(idle, self.lifetimes.first().map(|(t, _)| *t));
        t = earliest(t, self.wait_deadlines.first().map(|(t, _)| *t));
        earliest(t, self.race_timers.first().map(|(t, _)| *t))
    }

    /// Counts per Address (all zero for an Address the pool does not know).
    #[must_use]
    pub fn address_stats(&self, address: &Address) -> AddressStats {
        self.addrs
            .get(address)
            .map_or_else(AddressStats::default, |a| AddressStats {
                connecting: a.racing.len(),
                idle: a.idle.len(),
                in_use: a.in_use,
                open: a.open,
                waiters: a.waiters,
            })
    }

    /// Pool-wide counts and counters, kept incrementally (O(1)).
    #[must_use]
    pub fn stats(&self) -> PoolStats {
        let mut s = self.stats.clone();
        s.totals = AddressStats {
            connecting: self.racing_total,
            idle: self.idle_all.len(),
            in_use: self.in_use_total,
            open: self.open_total,
            waiters: self.waiters.len(),
        };
        s.calls = self.calls.len();
        s
    }

    // ------------------------------------------------------------------ inputs

    /// A call asks for a connection to `address`. Answered later by
    /// [`PoolAction::Acquired`] or [`PoolAction::AcquireFailed`] for the returned id
    /// (possibly already queued when this returns).
    pub fn acquire(&mut self, now: Instant, address: Address, options: AcquireOptions) -> CallId {
        let id = self.ids.next_call();
        if self.shutdown {
            self.actions.push_back(PoolAction::AcquireFailed {
                call: id,
                error: AcquireError::Shutdown,
            });
            return id;
        }
        self.calls.insert(
            id,
            Call {
                address,
                options,
                retries: 0,
                avoid: Vec::new(),
                fresh_only: false,
                state: CallState::Pending,
            },
        );
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
            CallState::Active { connection } => {
                let multiplexed = self
                    .conns
                    .get(connection)
                    .is_some_and(Connection::multiplexed);
                let reuse = if multiplexed {
                    Reuse::Reusable
                } else {
                    Reuse::Retire(CloseReason::UnreadBody)
                };
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

    /// Feeds a DNS answer. For an origin lookup, a coalescable HTTP/2 connection
    /// among the answers ends the race at once (BEHAVIOUR §5).
    pub fn handle_dns(
        &mut self,
        now: Instant,
        query: QueryId,
        answer: Result<Vec<IpAddr>, DnsError>,
    ) -> Result<(), Misuse> {
        let call_id = query.call();
        let Some(call) = self.calls.get(&call_id) else {
            return self.stale_call(call_id, Misuse::UnknownQuery(query));
        };
        let CallState::Racing { direct_queries, .. } = &call.state else {
            return Ok(()); // the race ended: a late answer
        };
        if let Ok(ips) = &answer {
            if direct_queries.contains(&query) && !call.options.exclusive && !call.fresh_only {
                let address = call.address.clone();
                if let Some(conn) = self.find_coalescable(&address, ips, &call.avoid) {
                    let addresses = ips.clone();
                    self.emit(
                        now,
                        Some(call_id),
                        EventKind::DnsEnd {
                            query,
                            host: address.host().clone(),
                            addresses,
                        },
                    );
                    self.stop_race(now, call_id);
                    self.assign(now, call_id, conn, Source::Coalesced);
                    return Ok(());
                }
            }
        }
        let Some(Call {
            state: CallState::Racing { race, .. },
            ..
        }) = self.calls.get_mut(&call_id)
        else {
            return Ok(());
        };
        race.handle_dns(now, query, answer, &mut self.db)?;
        self.pump_race(now, call_id);
        Ok(())
    }

    /// TCP connected for `attempt`.
    pub fn handle_connected(&mut self, now: Instant, attempt: AttemptId) -> Result<(), Misuse> {
        self.with_race(now, attempt, |race, db| {
            race.handle_connected(now, attempt, db)
        })
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
        if let Some(Call {
            state: CallState::Racing { tls: facts, .. },
            ..
        }) = self.calls.get_mut(&attempt.call())
        {
            if let Some(t) = tls {
                facts.insert(attempt, t);
            }
        }
        self.with_race(now, attempt, |race, db| {
            race.handle_established(now, attempt, alpn, db)
        })
    }

    /// `attempt` failed.
    pub fn handle_failed(
        &mut self,
        now: Instant,
        attempt: AttemptId,
        error: ConnectError,
    ) -> Result<(), Misuse> {
        self.with_race(now, attempt, |race, db| {
            race.handle_failed(now, attempt, error, db)
        })
    }

    /// Acts on every deadline `<= now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        // Idle expiry, oldest first.
        while let Some(&(since, id)) = self.idle_all.first() {
            if since + self.config.keep_alive > now {
                break;
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
                        error: AcquireError::Timeout {
                            address,
                            waited: now - since,
                        },
                    });
                }
            }
        }
        while let Some(&(at, call)) = self.race_timers.first() {
            if at > now {
                break;
            }
            self.race_timers.remove(&(at, call));
            if let Some(Call {
                state: CallState::Racing { race, timer, .. },
                ..
            }) = self.calls.get_mut(&call)
            {
                *timer = None;
                race.handle_timeout(now, &mut self.db);
                self.pump_race(now, call);
            }
        }
    }

    /// The call's exchange ended. `reuse` says whether its connection may carry
    /// another. The call is over.
    pub fn exchange_finished(
        &mut self,
        now: Instant,
        call: CallId,
        reuse: Reuse,
    ) -> Result<(), Misuse> {
        let conn = self.active_connection(call)?;
        self.calls.remove(&call);
        self.release(now, call, conn, reuse, true);
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
        let (reused, refusals, route, multiplexed) = {
            let c = &self.conns[&conn_id];
            (
                c.completed > 0,
                c.refusals,
                c.route.clone(),
                c.multiplexed(),
            )
        };
        let retries = self.calls[&call].retries;
        let decision = decide(&failure, reused, refusals, retries, self.config.max_retries);
        // What the failure says about the connection.
        let retire = match &failure.kind {
            K::Io { .. } | K::Protocol { .. } => {
                if !reused {
                    // Never completed an exchange: the route is suspect.
                    self.db.failed(&route, now);
                }
                Some(CloseReason::Failure)
            }
            K::Timeout if !multiplexed => Some(CloseReason::Failure),
            K::Timeout => None,
            K::RefusedStream => {
                self.update(conn_id, |c| c.refusals += 1);
                (refusals >= 1).then_some(CloseReason::RefusedStreams)
            }
            K::StreamReset { .. } => Some(CloseReason::StreamReset),
            K::GoAwayUnprocessed => Some(CloseReason::GoAway),
            K::Misdirected => {
                self.update(conn_id, |c| c.no_coalescing = true);
                None
            }
        };
        self.emit(
            now,
            Some(call),
            EventKind::RetryDecision {
                connection: conn_id,
                decision,
            },
        );
        let reuse = retire.map_or(Reuse::Reusable, Reuse::Retire);
        match decision {
            RetryDecision::Fail {
                why,
                may_have_been_sent,
            } => {
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
                c.retries += 1;
                c.state = CallState::Pending;
                let still_usable = self
                    .conns
                    .get(&conn_id)
                    .is_some_and(|c| c.usable() && c.in_flight < c.stream_limit);
                if still_usable {
                    self.assign(now, call, conn_id, Source::Shared);
                } else {
                    self.calls
                        .get_mut(&call)
                        .expect("call exists")
                        .avoid
                        .push(conn_id);
                    self.dispatch(now, call);
                }
                Ok(FailureOutcome::Retrying(reason))
            }
            RetryDecision::NewConnection { reason, fresh } => {
                self.release(now, call, conn_id, reuse, false);
                let c = self.calls.get_mut(&call).expect("call exists");
                c.retries += 1;
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
        self.retire(now, connection, reason);
        Ok(())
    }

    /// HTTP/2 SETTINGS: the peer's MAX_CONCURRENT_STREAMS. A higher limit may wake
    /// waiters at once; a lower one stops new streams until enough finish.
    pub fn settings(
        &mut self,
        now: Instant,
        connection: ConnectionId,
        max_concurrent_streams: u32,
    ) -> Result<(), Misuse> {
        self.known(connection)?;
        if !self.conns[&connection].multiplexed() {
            return Ok(());
        }
        self.update(connection, |c| c.stream_limit = max_concurrent_streams);
        let address = self.conns[&connection].address.clone();
        self.rebalance(now, &address);
        Ok(())
    }

    /// HTTP/2 GOAWAY: no new exchanges; closes once in-flight streams end.
    pub fn goaway(&mut self, now: Instant, connection: ConnectionId) -> Result<(), Misuse> {
        self.known(connection)?;
        self.retire(now, connection, CloseReason::GoAway);
        Ok(())
    }

    /// Closes every idle connection; in-use ones are left alone.
    pub fn evict_all(&mut self, now: Instant) {
        let idle: Vec<ConnectionId> = self.idle_all.iter().map(|(_, id)| *id).collect();
        for id in idle {
            self.close(now, id, CloseReason::EvictAll);
        }
    }

    /// Refuses new calls, fails waiting and connecting calls with
    /// [`AcquireError::Shutdown`], closes idle connections and lets in-use ones
    /// finish (then closes them). Idempotent.
    pub fn shutdown(&mut self, now: Instant) {
        self.shutdown = true;
        let pending: Vec<CallId> = self
            .calls
            .iter()
            .filter(|(_, c)| !matches!(c.state, CallState::Active { .. }))
            .map(|(id, _)| *id)
            .collect();
        for call in pending {
            self.end_call_waiting_or_racing(now, call);
            self.calls.remove(&call);
            self.actions.push_back(PoolAction::AcquireFailed {
                call,
                error: AcquireError::Shutdown,
            });
        }
        let mut open: Vec<ConnectionId> = self.conns.keys().copied().collect();
        open.sort_unstable();
        for id in open {
            self.retire(now, id, CloseReason::Shutdown);
        }
    }

    /// Recounts every statistic from the raw records, for tests and debugging:
    /// equals [`Pool::stats`] unless the pool is corrupt. O(connections + calls).
    #[must_use]
    pub fn recount(&self) -> PoolStats {
        let mut s = self.stats.clone();
        let mut t = AddressStats::default();
        for c in self.conns.values() {
            t.open += 1;
            if c.is_idle() {
                t.idle += 1;
            }
            if c.in_flight > 0 {
                t.in_use += 1;
            }
        }
        for c in self.calls.values() {
            match c.state {
                CallState::Racing { .. } => t.connecting += 1,
                CallState::Waiting { .. } => t.waiters += 1,
                _ => {}
            }
        }
        s.totals = t;
        s.calls = self.calls.len();
        s
    }

    /// Checks the pool's internal invariants, for tests: every index agrees with
    /// the records, no HTTP/1 connection carries two exchanges, no HTTP/2 connection
    /// carries more than its limit, no cap is exceeded, every active call's
    /// connection is open. Returns the first violation.
    pub fn check_invariants(&self) -> Result<(), String> {
        if self.stats() != self.recount() {
            return Err(format!(
                "stats {:?} != recount {:?}",
                self.stats(),
                self.recount()
            ));
        }
        let mut active: BTreeMap<ConnectionId, u32> = BTreeMap::new();
        for (id, c) in &self.calls {
            if let CallState::Active { connection } = c.state {
                let Some(conn) = self.conns.get(&connection) else {
                    return Err(format!("{id} holds closed {connection}"));
                };
                if conn.address != c.address && !conn.address.equal_except_host(&c.address) {
                    return Err(format!("{id} holds {connection} for another Address"));
                }
                *active.entry(connection).or_default() += 1;
            }
        }
        for (id, c) in &self.conns {
            let n = active.get(id).copied().unwrap_or(0);
            if n != c.in_flight {
                return Err(format!(
                    "{id}: in_flight {} but {n} active calls",
                    c.in_flight
                ));
            }
            if !c.multiplexed() && c.in_flight > 1 {
                return Err(format!("{id}: HTTP/1 with {} exchanges", c.in_flight));
            }
            let a = &self.addrs[&c.address];
            let idle_key = c.idle_since.map(|s| (s, *id));
            let indexed_idle =
                idle_key.is_some_and(|k| a.idle.contains(&k) && self.idle_all.contains(&k));
            if c.is_idle() != indexed_idle {
                return Err(format!("{id}: idle index disagrees"));
            }
            if c.shareable() != a.shareable.contains(id) {
                return Err(format!("{id}: shareable index disagrees"));
            }
        }
        for (address, a) in &self.addrs {
            if let Some(max) = self.config.max_connections_per_address {
                if a.open + a.racing.len() > max {
                    return Err(format!(
                        "{address}: {} open + {} connecting > {max}",
                        a.open,
                        a.racing.len()
                    ));
                }
            }
            if a.idle.len() > self.config.max_idle_per_address {
                return Err(format!("{address}: {} idle > cap", a.idle.len()));
            }
        }
        if let Some(max) = self.config.max_connections_total {
            if self.open_total + self.racing_total > max {
                return Err(format!(
                    "{} open + {} connecting > {max}",
                    self.open_total, self.racing_total
                ));
            }
        }
        if let Some(max) = self.config.max_idle_total {
            if self.idle_all.len() > max {
                return Err("over the total idle cap".into());
            }
        }
        Ok(())
    }

    // --------------------------------------------------------------- internals

    fn emit(&mut self, at: Instant, call: Option<CallId>, kind: EventKind) {
        self.events.push_back(Event { at, call, kind });
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
            Some(CallState::Active { connection }) => Ok(*connection),
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
            Some(Call {
                state: CallState::Racing { race, .. },
                ..
            }) => {
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
        let a = self
            .addrs
            .get_mut(&c.address)
            .expect("address state exists for open connections");
        if let Some(since) = c.idle_since {
            a.idle.remove(&(since, id));
            self.idle_all.remove(&(since, id));
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
        let a = self
            .addrs
            .get_mut(&c.address)
            .expect("address state exists for open connections");
        if c.is_idle() {
            let since = c.idle_since.expect("idle connections have idle_since");
            a.idle.insert((since, id));
            self.idle_all.insert((since, id));
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
            self.coalesce_index
                .entry(c.route.socket_addr().ip())
                .or_default()
                .insert(id);
        }
    }

    fn update(&mut self, id: ConnectionId, f: impl FnOnce(&mut Connection)) {
        self.unindex(id);
        if let Some(c) = self.conns.get_mut(&id) {
            f(c);
        }
        self.index(id);
    }

    /// Serves a call now (pooled, shared, or a new race) or queues it.
    fn dispatch(&mut self, now: Instant, call_id: CallId) {
        if !self.try_serve(now, call_id) {
            let (address, deadline) = {
                let c = &self.calls[&call_id];
                let wait = now + self.config.acquire_timeout;
                (
                    c.address.clone(),
                    c.options.deadline.map_or(wait, |d| d.min(wait)),
                )
            };
            let seq = self.next_wait_seq;
            self.next_wait_seq += 1;
            self.waiters.insert(seq, call_id);
            self.wait_deadlines.insert((deadline, call_id));
            self.addrs.entry(address).or_default().waiters += 1;
            self.calls.get_mut(&call_id).expect("call exists").state = CallState::Waiting {
                seq,
                since: now,
                deadline,
            };
        }
    }

    /// Tries to serve a pending call without queueing it. Returns whether it was
    /// served (acquired, or a race started).
    fn try_serve(&mut self, now: Instant, call_id: CallId) -> bool {
        if let Some((conn, source)) = self.find_pooled(call_id) {
            self.assign(now, call_id, conn, source);
            return true;
        }
        let (address, exclusive, fresh) = {
            let c = &self.calls[&call_id];
            (c.address.clone(), c.options.exclusive, c.fresh_only)
        };
        if self.config.stream_limit_policy == StreamLimitPolicy::Wait
            && !exclusive
            && !fresh
            && self
                .addrs
                .get(&address)
                .is_some_and(|a| !a.multiplexed.is_empty())
        {
            // Every usable HTTP/2 connection is at its limit: wait for a stream.
            return false;
        }
        if !self.has_capacity(&address) {
            let per_address_ok = self.per_address_room(&address);
            // Blocked only by the total cap: make room by closing the oldest idle
            // connection of another Address.
            if per_address_ok && self.total_full() {
                if let Some(&(_, victim)) = self.idle_all.first() {
                    self.close(now, victim, CloseReason::Evicted);
                }
            }
            if !self.has_capacity(&address) {
                return false;
            }
        }
        self.start_race(now, call_id);
        true
    }

    fn per_address_room(&self, address: &Address) -> bool {
        let Some(max) = self.config.max_connections_per_address else {
            return true;
        };
        self.addrs
            .get(address)
            .map_or(0, |a| a.open + a.racing.len())
            < max
    }

    fn total_full(&self) -> bool {
        self.config
            .max_connections_total
            .is_some_and(|max| self.open_total + self.racing_total >= max)
    }

    fn has_capacity(&self, address: &Address) -> bool {
        self.per_address_room(address) && !self.total_full()
    }

    fn find_pooled(&self, call_id: CallId) -> Option<(ConnectionId, Source)> {
        let call = &self.calls[&call_id];
        if call.fresh_only {
            return None;
        }
        let a = self.addrs.get(&call.address)?;
        let idle = a.idle.iter().rev().map(|(_, id)| *id).find(|id| {
            let c = &self.conns[id];
            // An HTTP/2 peer may allow zero streams (SETTINGS), idle or not.
            c.stream_limit > 0
                && !call.avoid.contains(id)
                && (!call.options.require_multiplexed || c.multiplexed())
        });
        if let Some(id) = idle {
            return Some((id, Source::Pooled));
        }
        if call.options.exclusive {
            return None;
        }
        a.shareable
            .iter()
            .find(|id| !call.avoid.contains(id))
            .map(|id| (*id, Source::Shared))
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
                let facts = c
                    .tls
                    .as_ref()
                    .expect("coalescable connections have TLS facts");
                if avoid.contains(id)
                    || !c.address.equal_except_host(address)
                    || c.in_flight >= c.stream_limit
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
        self.update(conn, |c| {
            c.in_flight += 1;
            c.idle_since = None;
        });
        if exclusive {
            self.mark_no_new(now, conn, CloseReason::Exclusive);
        }
        match source {
            Source::Pooled | Source::Shared => self.stats.reused += 1,
            Source::Coalesced => self.stats.coalesced += 1,
            Source::New => {}
        }
        self.calls.get_mut(&call_id).expect("call exists").state =
            CallState::Active { connection: conn };
        self.emit(
            now,
            Some(call_id),
            EventKind::ConnectionAcquired {
                connection: conn,
                source,
            },
        );
        self.actions.push_back(PoolAction::Acquired {
            call: call_id,
            connection: conn,
            source,
        });
    }

    fn start_race(&mut self, now: Instant, call_id: CallId) {
        let call = self.calls.get_mut(&call_id).expect("call exists");
        let request = RaceRequest {
            call: call_id,
            address: call.address.clone(),
            proxies: call.options.proxies.clone(),
            deadline: call.options.deadline,
        };
        let race = Race::start(request, self.config.race, now, &mut self.db);
        call.state = CallState::Racing {
            race: Box::new(race),
            timer: None,
            direct_queries: Vec::new(),
            tls: BTreeMap::new(),
        };
        let address = call.address.clone();
        self.addrs
            .entry(address)
            .or_default()
            .racing
            .insert(call_id);
        self.racing_total += 1;
        self.pump_race(now, call_id);
    }

    /// Moves a race's actions and events into the pool's queues, handles its end,
    /// and re-arms its timer.
    fn pump_race(&mut self, now: Instant, call_id: CallId) {
        let mut finished = None;
        {
            let Some(Call {
                state:
                    CallState::Racing {
                        race,
                        timer,
                        direct_queries,
                        ..
                    },
                ..
            }) = self.calls.get_mut(&call_id)
            else {
                return;
            };
            while let Some(e) = race.poll_event() {
                self.events.push_back(e);
            }
            while let Some(action) = race.poll_action() {
                match action {
                    Action::Resolve {
                        query,
                        host,
                        port,
                        proxy,
                    } => {
                        if proxy == Proxy::Direct {
                            direct_queries.push(query);
                        }
                        self.actions.push_back(PoolAction::Resolve {
                            query,
                            host,
                            port,
                            proxy,
                        });
                    }
                    Action::Connect { attempt, route } => self
                        .actions
                        .push_back(PoolAction::Connect { attempt, route }),
                    Action::Handshake { attempt, route } => {
                        self.actions
                            .push_back(PoolAction::Handshake { attempt, route });
                    }
                    Action::Cancel { attempt } => self
                        .actions
                        .push_back(PoolAction::CancelAttempt { attempt }),
                    other => finished = Some(other),
                }
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
            Some(Action::Won {
                attempt,
                route,
                protocol,
            }) => self.on_won(now, call_id, attempt, route, protocol),
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
            _ => {}
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
        while let Some(e) = race.poll_event() {
            self.events.push_back(e);
        }
        while let Some(action) = race.poll_action() {
            if let Action::Cancel { attempt } = action {
                self.actions
                    .push_back(PoolAction::CancelAttempt { attempt });
            }
        }
        if let Some(t) = timer.take() {
            self.race_timers.remove(&(t, call_id));
        }
        call.state = CallState::Pending;
        let address = call.address.clone();
        if let Some(a) = self.addrs.get_mut(&address) {
            a.racing.remove(&call_id);
        }
        self.racing_total -= 1;
        self.gc_address(&address);
    }

    fn end_call_waiting_or_racing(&mut self, now: Instant, call_id: CallId) {
        let Some(call) = self.calls.get(&call_id) else {
            return;
        };
        match call.state {
            CallState::Waiting { seq, deadline, .. } => {
                let address = call.address.clone();
                self.waiters.remove(&seq);
                self.wait_deadlines.remove(&(deadline, call_id));
                if let Some(a) = self.addrs.get_mut(&address) {
                    a.waiters -= 1;
                }
                self.gc_address(&address);
                self.calls.get_mut(&call_id).expect("call exists").state = CallState::Pending;
            }
            CallState::Racing { .. } => self.stop_race(now, call_id),
            _ => {}
        }
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
        let id = self.ids.next_connection();
        let address = self.calls[&call_id].address.clone();
        let lifetime_deadline = self.config.max_lifetime.map(|d| now + d);
        let conn = Connection {
            id,
            address: address.clone(),
            route,
            protocol,
            created: now,
            in_flight: 0,
            stream_limit: if protocol.is_multiplexed() {
                u32::MAX
            } else {
                1
            },
            idle_since: Some(now),
            no_new: None,
            no_coalescing: false,
            refusals: 0,
            completed: 0,
            tls: tls.filter(|_| protocol == Protocol::Http2),
            lifetime_deadline,
        };
        self.conns.insert(id, conn);
        self.addrs.entry(address.clone()).or_default().open += 1;
        self.open_total += 1;
        self.stats.created += 1;
        if let Some(t) = lifetime_deadline {
            self.lifetimes.insert((t, id));
        }
        self.actions.push_back(PoolAction::Established {
            attempt,
            connection: id,
            protocol,
        });
        // Post-connect de-duplication (the new connection is not indexed yet, so it
        // cannot find itself): an eligible multiplexed connection that appeared
        // meanwhile serves the call, and the new one is closed.
        if protocol.is_multiplexed() {
            let existing = self
                .find_pooled(call_id)
                .filter(|(c, _)| self.conns[c].multiplexed())
                .or_else(|| {
                    let call = &self.calls[&call_id];
                    let ip = self.conns[&id].route.socket_addr().ip();
                    (!call.options.exclusive && !call.fresh_only)
                        .then(|| self.find_coalescable(&address, &[ip], &call.avoid))
                        .flatten()
                        .map(|c| (c, Source::Coalesced))
                });
            if let Some((other, source)) = existing {
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

    /// An exchange on `conn` ended (the call already moved on or ended).
    fn release(
        &mut self,
        now: Instant,
        call: CallId,
        conn: ConnectionId,
        reuse: Reuse,
        completed: bool,
    ) {
        self.update(conn, |c| {
            c.in_flight -= 1;
            if completed {
                c.completed += 1;
            }
            if c.in_flight == 0 {
                c.idle_since = Some(now);
            }
        });
        self.emit(
            now,
            Some(call),
            EventKind::ConnectionReleased { connection: conn },
        );
        if let Reuse::Retire(reason) = reuse {
            self.mark_no_new(now, conn, reason);
        }
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let address = c.address.clone();
        if let Some(reason) = c.no_new {
            if c.in_flight == 0 {
                self.close(now, conn, reason);
            }
        } else if c.in_flight == 0 {
            self.enforce_idle_caps(now, &address);
        }
        self.rebalance(now, &address);
    }

    fn enforce_idle_caps(&mut self, now: Instant, address: &Address) {
        loop {
            let over = self.addrs.get(address).and_then(|a| {
                (a.idle.len() > self.config.max_idle_per_address)
                    .then(|| a.idle.first().map(|(_, id)| *id))
            });
            match over.flatten() {
                Some(id) => self.close(now, id, CloseReason::OverIdleCap),
                None => break,
            }
        }
        if let Some(max) = self.config.max_idle_total {
            while self.idle_all.len() > max {
                let Some(&(_, id)) = self.idle_all.first() else {
                    break;
                };
                self.close(now, id, CloseReason::OverIdleCap);
            }
        }
    }

    /// One-way transition to no-new-exchanges, with its event once; closes at once
    /// when idle.
    fn retire(&mut self, now: Instant, conn: ConnectionId, reason: CloseReason) {
        self.mark_no_new(now, conn, reason);
        if let Some(c) = self.conns.get(&conn) {
            if c.in_flight == 0 {
                let reason = c.no_new.unwrap_or(reason);
                self.close(now, conn, reason);
            }
        }
    }

    fn mark_no_new(&mut self, now: Instant, conn: ConnectionId, reason: CloseReason) {
        if self.conns.get(&conn).is_none_or(|c| c.no_new.is_some()) {
            return;
        }
        self.update(conn, |c| c.no_new = Some(reason));
        self.emit(
            now,
            None,
            EventKind::NoNewExchanges {
                connection: conn,
                reason,
            },
        );
    }

    fn close(&mut self, now: Instant, conn: ConnectionId, reason: CloseReason) {
        self.unindex(conn);
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        debug_assert_eq!(c.in_flight, 0, "closing a connection in use");
        if let Some(t) = c.lifetime_deadline {
            self.lifetimes.remove(&(t, conn));
        }
        if let Some(a) = self.addrs.get_mut(&c.address) {
            a.open -= 1;
        }
        self.open_total -= 1;
        *self.stats.closed.entry(reason).or_default() += 1;
        self.actions.push_back(PoolAction::Close {
            connection: conn,
            reason,
        });
        self.emit(
            now,
            None,
            EventKind::ConnectionClosed {
                connection: conn,
                reason,
            },
        );
        self.gc_address(&c.address);
    }

    fn gc_address(&mut self, address: &Address) {
        if self.addrs.get(address).is_some_and(AddrState::is_empty) {
            self.addrs.remove(address);
        }
    }

    /// Capacity may have freed: serve waiters first come first served, then offer
    /// eligible pooled connections to calls racing for `address`.
    fn rebalance(&mut self, now: Instant, address: &Address) {
        let queued: Vec<(u64, CallId)> = self.waiters.iter().map(|(s, c)| (*s, *c)).collect();
        for (seq, call_id) in queued {
            if self.waiters.is_empty() {
                break;
            }
            let Some(c) = self.calls.get(&call_id) else {
                continue;
            };
            let CallState::Waiting {
                deadline, since, ..
            } = c.state
            else {
                continue;
            };
            let waiter_address = c.address.clone();
            // Leave the queue tentatively; back in place if still blocked.
            self.calls.get_mut(&call_id).expect("call exists").state = CallState::Pending;
            if self.try_serve(now, call_id) {
                self.waiters.remove(&seq);
                self.wait_deadlines.remove(&(deadline, call_id));
                if let Some(a) = self.addrs.get_mut(&waiter_address) {
                    a.waiters -= 1;
                }
                self.gc_address(&waiter_address);
            } else {
                self.calls.get_mut(&call_id).expect("call exists").state = CallState::Waiting {
                    seq,
                    since,
                    deadline,
                };
            }
        }
        let racing: Vec<CallId> = self
            .addrs
            .get(address)
            .map(|a| a.racing.iter().copied().collect())
            .unwrap_or_default();
        for call_id in racing {
            let Some((conn, source)) = self.find_pooled(call_id) else {
                continue;
            };
            if let Some(Call {
                state: CallState::Racing { race, .. },
                ..
            }) = self.calls.get_mut(&call_id)
            {
                let _ = race.adopt_pooled(now, conn);
            }
            self.stop_race(now, call_id);
            self.assign(now, call_id, conn, source);
        }
    }
}
