//! The connect race (Happy Eyeballs, RFC 8305 §5) for one call.
//!
//! Attempts start in route order. A new attempt starts when none is in flight,
//! or when the attempt delay (250 ms by default) has passed since the last start.
//! A failure with nothing else in flight starts the next attempt at once; a
//! failure while others are in flight does not shorten the stagger.
//!
//! Only TCP races. The first attempt to connect wins and every other attempt is
//! cancelled at that instant ([`Action::Cancel`]). The winner alone runs its
//! handshakes (SOCKS5, `CONNECT`, TLS: [`Action::Handshake`]). If they fail, the
//! race goes on: the cancelled losers are retried first, then the remaining
//! routes. Each attempt is bounded by the connect timeout (TCP) and the handshake
//! timeout; the whole race by the call's deadline, if it has one.
//!
//! A pooled connection that becomes eligible mid-race wins instead
//! ([`Race::adopt_pooled`]). When every route has failed the race ends with
//! [`Action::Failed`], whose error lists every failure, first first.
//!
//! # State
//!
//! ```text
//!            start
//!              │   Resolve / Connect actions
//!              ▼
//!   ┌──── Racing: attempts connecting (stagger, timeouts, failures) ────┐
//!   │          │ TCP connected (losers cancelled)                       │
//!   │          ▼                                                        │
//!   │     Handshaking (winner only) ──handshake failed──► Racing        │
//!   │          │ established                                            │
//!   ▼          ▼                                                        ▼
//! Failed      Won                         UsePooled / cancelled / deadline
//! ```
//!
//! > "Starting a new connection attempt does not affect previous attempts, as
//! > multiple connection attempts may occur in parallel. Once one of the connection
//! > attempts succeeds …, all other connections attempts that have not yet succeeded
//! > SHOULD be canceled." — [RFC 8305 §5](https://www.rfc-editor.org/rfc/rfc8305#section-5)

use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::Duration;

use crate::address::{Address, Host, Protocol, Proxy};
use crate::dns::{DnsAnswer, DnsSource};
use crate::error::{ConnectError, DnsError, Failure, Misuse, RaceError, RaceErrorKind};
use crate::event::{CancelReason, Event, EventKind};
use crate::id::{AttemptId, CallId, ConnectionId, QueryId};
use crate::plan::{KnownAnswer, PlanConfig, PlanStep, RoutePlanner};
use crate::route::Route;
use crate::route_db::RouteDatabase;
use crate::time::{earliest, Instant};

/// Timing and ordering knobs of a race. Cheap to copy; share one per client.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RaceConfig {
    /// Time between attempt starts while earlier attempts are still in flight.
    /// Default: 250 ms (RFC 8305 §8's recommendation).
    pub attempt_delay: Duration,
    /// Bound on reaching the origin, per attempt, from its start: the TCP
    /// connect and any proxy tunnel (SOCKS5, `CONNECT`), so a proxy that never
    /// answers fails as [`ConnectError::TunnelTimeout`] (the embedder reports
    /// the tunnel open with [`Race::handle_tunnelled`]). Default: 10 s.
    pub connect_timeout: Duration,
    /// Bound on each handshake after TCP: a proxy tunnel from TCP's end
    /// (whichever of this and the connect timeout ends first bounds the
    /// tunnel), and the winner's TLS handshake from the tunnel's end (or
    /// TCP's, without a proxy). Default: 10 s.
    pub handshake_timeout: Duration,
    /// Route ordering. With `fast_fallback` off, attempts run one at a time.
    pub plan: PlanConfig,
}

/// Where a call that has no connection yet stands: what a deadline that
/// passes now interrupts (a timeout's text names it).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum ConnectStage {
    /// Waiting for a pooled connection, a stream, or another call's connect.
    Waiting,
    /// Resolving the origin's (or the proxy's) name.
    Resolving,
    /// A TCP connect in flight.
    Connecting,
    /// A proxy handshake (HTTP `CONNECT`, SOCKS5) in flight.
    ProxyHandshake,
    /// A TLS handshake in flight.
    TlsHandshake,
}

impl std::fmt::Display for ConnectStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ConnectStage::Waiting => "waiting for a connection",
            ConnectStage::Resolving => "resolving the name",
            ConnectStage::Connecting => "in the TCP connect",
            ConnectStage::ProxyHandshake => "in the proxy handshake",
            ConnectStage::TlsHandshake => "in the TLS handshake",
        })
    }
}

impl RaceConfig {
    /// A proxy tunnel's deadline for an attempt started at `started` whose TCP
    /// connect ended at `now`, and the timeout that sets it: the connect
    /// timeout from the start or the handshake timeout from now, whichever
    /// ends first.
    #[must_use]
    pub(crate) fn tunnel_deadline(&self, started_deadline: Instant, now: Instant) -> (Instant, Duration) {
        let by_handshake = now + self.handshake_timeout;
        if by_handshake < started_deadline {
            (by_handshake, self.handshake_timeout)
        } else {
            (started_deadline, self.connect_timeout)
        }
    }
}

impl Default for RaceConfig {
    fn default() -> Self {
        RaceConfig {
            attempt_delay: Duration::from_millis(250),
            connect_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            plan: PlanConfig::default(),
        }
    }
}

/// What a race is asked to do: the call, its Address, the proxy selector's answer
/// and the call's deadline.
#[derive(Clone, Debug)]
pub struct RaceRequest {
    /// The call this race connects for; its ids embed it.
    pub call: CallId,
    /// Where to connect.
    pub address: Address,
    /// The proxy selector's answer, in order; ignored when the Address names a
    /// proxy; empty means direct.
    pub proxies: Vec<Proxy>,
    /// Why the selector chose them, in words (`"no_proxy matches example.com"`),
    /// reported in [`EventKind::ProxySelectEnd`]. Default: none.
    pub proxy_reason: Option<String>,
    /// When the whole call gives up, if ever.
    pub deadline: Option<Instant>,
    /// Where this race's attempt and query numbering starts. A call that races
    /// again (a retry) passes the previous race's [`Race::sequence_end`], so no id
    /// is ever reused within a call. Default: from zero.
    pub first_sequence: Sequence,
    /// Routes to try last (the call was refused there; see
    /// [`RoutePlanner::avoiding`]). Default: none.
    pub avoid: Vec<Route>,
    /// DNS answers the call already has, used instead of resolving again (a
    /// retry passes the previous race's [`Race::answers`]; no DNS events for
    /// them). Default: none.
    pub known_answers: Vec<KnownAnswer>,
}

impl RaceRequest {
    /// A request for `call` to `address`: direct, no deadline, ids from zero,
    /// nothing avoided or known.
    #[must_use]
    pub fn new(call: CallId, address: Address) -> RaceRequest {
        RaceRequest {
            call,
            address,
            proxies: Vec::new(),
            proxy_reason: None,
            deadline: None,
            first_sequence: Sequence::default(),
            avoid: Vec::new(),
            known_answers: Vec::new(),
        }
    }
}

/// The next attempt and query numbers of a call (see [`RaceRequest::first_sequence`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Sequence {
    /// The next attempt number.
    pub attempts: u32,
    /// The next DNS query number.
    pub queries: u32,
}

/// An instruction for the embedder. Each is given once.
#[must_use]
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Action {
    /// Resolve `host`; answer with [`Race::handle_dns`].
    Resolve {
        /// Quote this in the answer.
        query: QueryId,
        /// The name (never an IP literal).
        host: Host,
        /// The port the routes will dial.
        port: u16,
        /// Whose host this is: [`Proxy::Direct`] for the origin, else the proxy.
        proxy: Proxy,
    },
    /// Open a TCP connection to `route.socket_addr()`; answer with
    /// [`Race::handle_connected`] or [`Race::handle_failed`].
    Connect {
        /// Quote this in the answer.
        attempt: AttemptId,
        /// What to dial.
        route: Route,
    },
    /// Run the handshakes the route requires on the connected socket — SOCKS5
    /// ([`Route::requires_socks5`]), then `CONNECT` ([`Route::requires_tunnel`]),
    /// then TLS ([`Route::requires_tls`]) — and answer with
    /// [`Race::handle_established`] or [`Race::handle_failed`].
    Handshake {
        /// Quote this in the answer.
        attempt: AttemptId,
        /// The route, for what to do.
        route: Route,
    },
    /// Close this attempt's socket at once. Nothing more is expected about it; a
    /// late report is ignored.
    Cancel {
        /// The abandoned attempt.
        attempt: AttemptId,
    },
    /// The race is won: this attempt's connection is ready and speaks `protocol`.
    Won {
        /// The winning attempt.
        attempt: AttemptId,
        /// Its route.
        route: Route,
        /// The protocol it speaks.
        protocol: Protocol,
    },
    /// The race ended with the pooled connection passed to [`Race::adopt_pooled`].
    UsePooled {
        /// The pooled connection.
        connection: ConnectionId,
    },
    /// The race ended without a connection.
    Failed(RaceError),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stage {
    Connecting,
    Handshaking,
}

#[derive(Clone, Debug)]
struct Attempt {
    id: AttemptId,
    route: Route,
    started: Instant,
    stage: Stage,
    /// Handshaking, its proxy tunnel (SOCKS5 or `CONNECT`) not open yet: the
    /// connect timeout, from the attempt's start, still bounds it (or the
    /// handshake timeout from TCP's end, if that ends first).
    tunnelling: bool,
    deadline: Instant,
    /// The timeout setting `deadline` came from (for the error's text).
    bound: Duration,
}

/// The protocol a connection on `route` speaks after its handshakes: ALPN's
/// choice over TLS (none means HTTP/1.1), else the Address's cleartext protocol.
/// The caller checks it against the Address's allowed protocols.
#[must_use]
pub fn negotiated(address: &Address, route: &Route, alpn: Option<Protocol>) -> Protocol {
    if route.requires_tls() {
        alpn.unwrap_or(Protocol::Http1)
    } else {
        address.cleartext_protocol()
    }
}

/// Connects one call: plans routes and races attempts. See the [module docs](self).
///
/// Inputs take `now` and the shared [`RouteDatabase`] (read for postponement,
/// written with failures and successes). Outputs are polled. Every input is safe in
/// any order: a late report for a cancelled attempt is ignored, an id this race
/// never issued is a [`Misuse`] and changes nothing.
#[derive(Debug)]
pub struct Race {
    call: CallId,
    address: Address,
    config: RaceConfig,
    deadline: Option<Instant>,
    planner: RoutePlanner,
    /// In start order. At most one is handshaking, and then none is connecting.
    attempts: Vec<Attempt>,
    next_attempt: u32,
    last_start: Option<Instant>,
    /// Losers cancelled by the current winner, retried first if its handshake fails.
    deferred: Vec<Route>,
    failures: Vec<Failure>,
    finished: bool,
    actions: VecDeque<Action>,
    events: VecDeque<Event>,
}

impl Race {
    /// Starts a race at `now`: emits the proxy selection events and the first
    /// [`Action::Resolve`] or [`Action::Connect`].
    pub fn start(request: RaceRequest, config: RaceConfig, now: Instant, db: &mut RouteDatabase) -> Race {
        let RaceRequest {
            call,
            address,
            proxies,
            proxy_reason,
            deadline,
            first_sequence,
            avoid,
            known_answers,
        } = request;
        let planner = RoutePlanner::new(call, address.clone(), proxies, config.plan)
            .starting_queries_at(first_sequence.queries)
            .avoiding(avoid)
            .with_answers(known_answers);
        let mut race = Race {
            call,
            address: address.clone(),
            config,
            deadline,
            planner,
            attempts: Vec::new(),
            next_attempt: first_sequence.attempts,
            last_start: None,
            deferred: Vec::new(),
            failures: Vec::new(),
            finished: false,
            actions: VecDeque::new(),
            events: VecDeque::new(),
        };
        race.emit(now, EventKind::ProxySelectStart { address });
        let proxies = race.planner.proxies().to_vec();
        let reason = match (race.address.proxy(), proxy_reason) {
            (Some(_), _) => Some("the Address names its proxy".to_owned()),
            (None, reason) => reason,
        };
        race.emit(now, EventKind::ProxySelectEnd { proxies, reason });
        race.advance(now, db);
        race
    }

    /// The call this race connects for.
    #[must_use]
    pub fn call(&self) -> CallId {
        self.call
    }

    /// The DNS answers this race used (known at its start, or received): a
    /// retry of the call passes them on ([`RaceRequest::known_answers`]).
    #[must_use]
    pub fn answers(&self) -> &[KnownAnswer] {
        self.planner.answers()
    }

    /// The Address being connected.
    #[must_use]
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// Whether the race has ended (won, failed, pooled, cancelled). A finished
    /// race may still hold actions and events to drain.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The numbers the next race for this call must start from.
    #[must_use]
    pub fn sequence_end(&self) -> Sequence {
        Sequence { attempts: self.next_attempt, queries: self.planner.next_query_number() }
    }

    /// Attempts in flight (connecting or handshaking), for stats and tests.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.attempts.len()
    }

    /// The failures so far, first first.
    #[must_use]
    pub fn failures(&self) -> &[Failure] {
        &self.failures
    }

    /// The next instruction, most urgent first (cancellations before new work).
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The next event, in the order things happened.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The earliest instant at which [`Race::handle_timeout`] must run, or `None`
    /// when nothing changes until the next input.
    ///
    /// Read it after draining actions. Calling `handle_timeout` early, late or twice
    /// is harmless: it acts only on deadlines `<= now`, and after it runs with
    /// `now >= poll_timeout()` the timeout has moved past `now` (no busy loop).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.finished {
            return None;
        }
        let mut next = earliest(self.deadline, self.planner.poll_timeout());
        for a in &self.attempts {
            next = earliest(next, Some(a.deadline));
        }
        if self.stagger_pending() {
            if let Some(last) = self.last_start {
                next = earliest(next, Some(last + self.config.attempt_delay));
            }
        }
        next
    }

    /// Acts on every deadline `<= now`: attempt timeouts, the stagger, the call's
    /// deadline.
    pub fn handle_timeout(&mut self, now: Instant, db: &mut RouteDatabase) {
        self.advance(now, db);
    }

    /// Feeds the answer to [`Action::Resolve`]: every address at once. An empty
    /// answer is a [`DnsError::NoAddresses`] failure; any failure moves on to the
    /// next proxy.
    pub fn handle_dns(
        &mut self,
        now: Instant,
        query: QueryId,
        answer: Result<Vec<IpAddr>, DnsError>,
        db: &mut RouteDatabase,
    ) -> Result<(), Misuse> {
        self.handle_dns_answer(now, query, DnsAnswer::all(answer), DnsSource::Lookup, db)
    }

    /// Feeds an answer to [`Action::Resolve`], whole or for one family (see
    /// [`crate::dns`]: the preferred family starts attempts at once, the other
    /// waits up to the resolution delay for it, a late family joins the running
    /// race). `source` is reported in the `DnsEnd` / `DnsFailed` event.
    pub fn handle_dns_answer(
        &mut self,
        now: Instant,
        query: QueryId,
        answer: DnsAnswer,
        source: DnsSource,
        db: &mut RouteDatabase,
    ) -> Result<(), Misuse> {
        if self.finished {
            // Validate the id, then ignore: the race no longer needs routes.
            return self.check_query(query);
        }
        // Even with nothing to report, a failed family may have released the
        // other family's held addresses.
        if let Some(outcome) = self.planner.handle_dns_answer(query, answer, now, db)? {
            let host = outcome.host;
            let family = outcome.family;
            match outcome.result {
                Ok(addresses) => self.emit(now, EventKind::DnsEnd { query, host, addresses, family, source }),
                Err(error) => {
                    self.failures.push(Failure::Dns { query, host: host.clone(), error: error.clone() });
                    self.emit(now, EventKind::DnsFailed { query, host, error, source });
                }
            }
        }
        self.advance(now, db);
        Ok(())
    }

    /// The TCP connect of `attempt` succeeded. It wins the race: every other
    /// attempt is cancelled now, and the winner either handshakes or is ready.
    pub fn handle_connected(
        &mut self,
        now: Instant,
        attempt: AttemptId,
        db: &mut RouteDatabase,
    ) -> Result<(), Misuse> {
        let Some(index) = self.find(attempt)? else {
            return Ok(());
        };
        if self.attempts[index].stage != Stage::Connecting {
            return Ok(()); // a repeated report
        }
        let winner_started = self.attempts[index].started;
        let losers: Vec<Attempt> = self.attempts.iter().filter(|a| a.id != attempt).cloned().collect();
        self.attempts.retain(|a| a.id == attempt);
        self.deferred.clear();
        for loser in losers {
            // A black hole rarely fails; it just never answers. An attempt that ran
            // for a whole attempt delay and was beaten by a later one counts as failed.
            if loser.started < winner_started && now - loser.started >= self.config.attempt_delay {
                db.failed(&loser.route, now);
            }
            self.cancel_attempt(now, &loser, CancelReason::LostRace);
            self.deferred.push(loser.route);
        }
        let route = self.attempts[0].route.clone();
        if route.requires_handshake() {
            let winner = &mut self.attempts[0];
            winner.stage = Stage::Handshaking;
            // The connect timeout covers reaching the origin: TCP and any
            // proxy tunnel. TLS has its own bound, from the tunnel's end.
            winner.tunnelling = route.requires_tunnel() || route.requires_socks5();
            (winner.deadline, winner.bound) = if winner.tunnelling {
                self.config.tunnel_deadline(winner.started + self.config.connect_timeout, now)
            } else {
                (now + self.config.handshake_timeout, self.config.handshake_timeout)
            };
            self.actions.push_back(Action::Handshake { attempt, route: route.clone() });
            if route.requires_tls() {
                self.emit(now, EventKind::SecureConnectStart { attempt });
            }
        } else {
            let protocol = self.address.cleartext_protocol();
            self.win(now, protocol, db);
        }
        Ok(())
    }

    /// The winner's handshakes finished. `alpn` is the protocol ALPN selected, if
    /// any (TLS without ALPN means HTTP/1.1). A protocol the Address does not allow
    /// fails the route and the race goes on.
    pub fn handle_established(
        &mut self,
        now: Instant,
        attempt: AttemptId,
        alpn: Option<Protocol>,
        db: &mut RouteDatabase,
    ) -> Result<(), Misuse> {
        let Some(index) = self.find(attempt)? else {
            return Ok(());
        };
        if self.attempts[index].stage != Stage::Handshaking {
            return Err(Misuse::NotHandshaking(attempt));
        }
        let protocol = negotiated(&self.address, &self.attempts[index].route, alpn);
        if !self.address.protocols().contains(&protocol) {
            self.fail_attempt(now, index, ConnectError::ProtocolNotAllowed { protocol }, db);
            self.advance(now, db);
            return Ok(());
        }
        if self.attempts[index].route.requires_tls() {
            self.emit(now, EventKind::SecureConnectEnd { attempt, protocol });
        }
        self.win(now, protocol, db);
        Ok(())
    }

    /// `attempt` failed (TCP connect, proxy handshake or TLS). The embedder closes its
    /// socket itself; the route is recorded as failed and the race goes on.
    pub fn handle_failed(
        &mut self,
        now: Instant,
        attempt: AttemptId,
        error: ConnectError,
        db: &mut RouteDatabase,
    ) -> Result<(), Misuse> {
        let Some(index) = self.find(attempt)? else {
            return Ok(());
        };
        self.fail_attempt(now, index, error, db);
        self.advance(now, db);
        Ok(())
    }

    /// How far the race has got: a handshake in flight, else a TCP connect,
    /// else a lookup (or nothing started yet: waiting).
    #[must_use]
    pub fn stage(&self) -> ConnectStage {
        if let Some(a) = self.attempts.iter().find(|a| a.stage == Stage::Handshaking) {
            return if a.tunnelling { ConnectStage::ProxyHandshake } else { ConnectStage::TlsHandshake };
        }
        if !self.attempts.is_empty() {
            ConnectStage::Connecting
        } else if self.planner.is_waiting() {
            ConnectStage::Resolving
        } else {
            ConnectStage::Waiting
        }
    }

    /// The winner's proxy tunnel (SOCKS5, or `CONNECT` for an https origin) is
    /// open: its TLS handshake, if any, starts now, bounded by the handshake
    /// timeout (until now the connect timeout bounded it). Drivers report it
    /// between the tunnel and TLS; one that does not leaves the connect timeout
    /// bounding TLS through a proxy too. Harmless when repeated or late.
    pub fn handle_tunnelled(&mut self, now: Instant, attempt: AttemptId) -> Result<(), Misuse> {
        let Some(index) = self.find(attempt)? else {
            return Ok(());
        };
        let a = &mut self.attempts[index];
        if a.stage == Stage::Handshaking && a.tunnelling {
            a.tunnelling = false;
            a.deadline = now + self.config.handshake_timeout;
            a.bound = self.config.handshake_timeout;
        }
        Ok(())
    }

    /// The route of `attempt` while it is still in TCP connect (`None` once it
    /// handshakes, failed, or was cancelled). The pool uses it to connect the same
    /// route again after making room for a socket.
    #[must_use]
    pub fn connecting_route(&self, attempt: AttemptId) -> Option<&Route> {
        self.attempts.iter().find(|a| a.id == attempt && a.stage == Stage::Connecting).map(|a| &a.route)
    }

    /// Before [`Race::adopt_pooled`]: takes out the attempt worth keeping, so it
    /// is not cancelled with the others — a connection already (being) paid for
    /// is not thrown away: the attempt that finished TCP and is handshaking, or
    /// else the only attempt in flight. With several attempts still connecting
    /// (Happy Eyeballs) none is kept. The caller (the pool) owns it from here:
    /// the returned route, its current deadline, whether it is handshaking and,
    /// while its proxy tunnel is still opening, the timeout that bounds the
    /// tunnel; and the embedder's later reports for it. Emits
    /// [`EventKind::AttemptKeptForPool`].
    pub fn take_for_pool(
        &mut self,
        now: Instant,
    ) -> Option<(AttemptId, Route, Instant, bool, Option<Duration>)> {
        if self.finished {
            return None;
        }
        let index = match self.attempts.iter().position(|a| a.stage == Stage::Handshaking) {
            Some(i) => i,
            None if self.attempts.len() == 1 => 0,
            None => return None,
        };
        let a = self.attempts.remove(index);
        self.emit(now, EventKind::AttemptKeptForPool { attempt: a.id, route: a.route.clone() });
        Some((a.id, a.route, a.deadline, a.stage == Stage::Handshaking, a.tunnelling.then_some(a.bound)))
    }

    /// A pooled connection became eligible for this call while it was racing: the
    /// call takes it, every attempt is cancelled, and the race ends with
    /// [`Action::UsePooled`]. Returns `false` (and changes nothing) when the race had
    /// already ended, in which case the connection stays in the pool.
    pub fn adopt_pooled(&mut self, now: Instant, connection: ConnectionId) -> bool {
        if self.finished {
            return false;
        }
        self.cancel_all(now, CancelReason::Pooled);
        self.emit(now, EventKind::PooledConnectionTaken { connection });
        self.actions.push_back(Action::UsePooled { connection });
        true
    }

    /// The call no longer wants a connection: every attempt is cancelled and the
    /// race ends without a final action. Idempotent.
    pub fn cancel(&mut self, now: Instant) {
        if !self.finished {
            self.cancel_all(now, CancelReason::CallCancelled);
        }
    }

    // ---- internals ----

    fn emit(&mut self, at: Instant, kind: EventKind) {
        self.events.push_back(Event { at, call: Some(self.call), kind, unverified_tls: false });
    }

    fn check_query(&self, query: QueryId) -> Result<(), Misuse> {
        if query.call() == self.call {
            Ok(())
        } else {
            Err(Misuse::UnknownQuery(query))
        }
    }

    /// `Ok(Some(index))` for a live attempt, `Ok(None)` for one this race issued and
    /// has since dropped (late report), `Err` for an id it never issued.
    fn find(&self, attempt: AttemptId) -> Result<Option<usize>, Misuse> {
        if attempt.call() != self.call || attempt >= AttemptId::new(self.call, self.next_attempt) {
            return Err(Misuse::UnknownAttempt(attempt));
        }
        Ok(self.attempts.iter().position(|a| a.id == attempt))
    }

    /// Whether the stagger timer matters: attempts are connecting and more routes
    /// may start once it fires.
    fn stagger_pending(&self) -> bool {
        self.config.plan.fast_fallback
            && !self.attempts.is_empty()
            && self.attempts.iter().all(|a| a.stage == Stage::Connecting)
            && (self.planner.has_ready_route() || self.planner.can_advance())
    }

    fn advance(&mut self, now: Instant, db: &mut RouteDatabase) {
        if self.finished {
            return;
        }
        if self.deadline.is_some_and(|d| d <= now) {
            let stage = self.stage();
            self.cancel_all(now, CancelReason::CallTimeout);
            self.finish_failed(RaceErrorKind::CallTimeout);
            if let Some(Action::Failed(e)) = self.actions.back_mut() {
                e.stage = Some(stage);
            }
            return;
        }
        // Held DNS answers whose resolution delay is over.
        self.planner.handle_timeout(now, db);
        // Attempt timeouts, in start order.
        while let Some(index) = self.attempts.iter().position(|a| a.deadline <= now) {
            let a = &self.attempts[index];
            let error = match a.stage {
                Stage::Connecting => ConnectError::ConnectTimeout { after: self.config.connect_timeout },
                Stage::Handshaking if a.tunnelling => ConnectError::TunnelTimeout { after: a.bound },
                Stage::Handshaking => ConnectError::HandshakeTimeout { after: self.config.handshake_timeout },
            };
            let id = a.id;
            self.actions.push_back(Action::Cancel { attempt: id });
            self.fail_attempt(now, index, error, db);
        }
        self.start_due_attempts(now, db);
    }

    fn start_due_attempts(&mut self, now: Instant, db: &mut RouteDatabase) {
        loop {
            if self.attempts.iter().any(|a| a.stage == Stage::Handshaking) {
                return;
            }
            let stagger_elapsed = self.config.plan.fast_fallback
                && self.last_start.is_some_and(|last| now >= last + self.config.attempt_delay);
            if !(self.attempts.is_empty() || stagger_elapsed) {
                return;
            }
            match self.planner.next(now, db) {
                PlanStep::Route(route) => {
                    db.attempting(&route, now);
                    self.start_attempt(now, route)
                }
                PlanStep::Resolve { query, host, port, proxy } => {
                    let source = DnsSource::Lookup;
                    self.emit(now, EventKind::DnsStart { query, host: host.clone(), source });
                    self.actions.push_back(Action::Resolve { query, host, port, proxy });
                    return;
                }
                PlanStep::Waiting => return,
                PlanStep::Exhausted => {
                    if self.attempts.is_empty() {
                        self.finish_failed(RaceErrorKind::AllRoutesFailed);
                    }
                    return;
                }
            }
        }
    }

    fn start_attempt(&mut self, now: Instant, route: Route) {
        let id = AttemptId::new(self.call, self.next_attempt);
        self.next_attempt += 1;
        self.last_start = Some(now);
        self.attempts.push(Attempt {
            id,
            route: route.clone(),
            started: now,
            stage: Stage::Connecting,
            tunnelling: false,
            deadline: now + self.config.connect_timeout,
            bound: self.config.connect_timeout,
        });
        self.emit(now, EventKind::ConnectStart { attempt: id, route: route.clone() });
        self.actions.push_back(Action::Connect { attempt: id, route });
    }

    fn fail_attempt(&mut self, now: Instant, index: usize, error: ConnectError, db: &mut RouteDatabase) {
        let a = self.attempts.remove(index);
        db.failed(&a.route, now);
        if a.stage == Stage::Handshaking {
            // The TCP race is open again: retry the losers it cancelled first.
            let deferred = std::mem::take(&mut self.deferred);
            self.planner.push_front(deferred.into_iter());
        }
        self.failures.push(Failure::Connect { attempt: a.id, route: a.route.clone(), error: error.clone() });
        self.emit(now, EventKind::ConnectFailed { attempt: a.id, route: a.route, error });
    }

    fn cancel_attempt(&mut self, now: Instant, a: &Attempt, reason: CancelReason) {
        self.actions.push_back(Action::Cancel { attempt: a.id });
        self.emit(now, EventKind::ConnectCancelled { attempt: a.id, route: a.route.clone(), reason });
    }

    fn cancel_all(&mut self, now: Instant, reason: CancelReason) {
        for a in std::mem::take(&mut self.attempts) {
            self.cancel_attempt(now, &a, reason);
        }
        self.deferred.clear();
        self.finished = true;
    }

    fn win(&mut self, now: Instant, protocol: Protocol, db: &mut RouteDatabase) {
        let winner = self.attempts.remove(0);
        debug_assert!(self.attempts.is_empty());
        db.connected(&winner.route);
        self.deferred.clear();
        self.finished = true;
        self.emit(now, EventKind::ConnectEnd { attempt: winner.id, route: winner.route.clone(), protocol });
        self.actions.push_back(Action::Won { attempt: winner.id, route: winner.route, protocol });
    }

    fn finish_failed(&mut self, kind: RaceErrorKind) {
        self.finished = true;
        self.actions.push_back(Action::Failed(RaceError {
            kind,
            address: self.address.clone(),
            failures: self.failures.clone(),
            stage: None,
        }));
    }
}
