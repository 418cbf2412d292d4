//! Warm connections: a per-Address minimum the pool keeps open by itself, for
//! a Manager of declared servers (BEHAVIOUR §11).
//!
//! [`Pool::warm`] declares an Address with a [`WarmPolicy`]: the pool starts
//! the races for the missing connections at once (each like a call without a
//! caller: the same route planning, DNS, Happy Eyeballs and events, under a call
//! id of its own), and the connections join the pool idle — ordinary pool
//! connections that calls use first. It keeps the minimum as connections close:
//! a server close, a GOAWAY, a lifetime end or a failed probe is replaced at
//! once; the idle timeout does not close connections the minimum needs.
//!
//! Failed connects back off exponentially ([`Backoff`]: 1 s, ×1.6 per failure,
//! ±20 % jitter, at most 120 s), the jitter drawn from
//! [`PoolConfig::seed`](super::PoolConfig::seed), so a test that fixes the seed
//! knows every delay. A success resets the backoff.
//!
//! # A connect is a success only once the connection proves usable
//!
//! A TCP (and TLS) handshake says little: a broken server may accept every
//! connection and close it at once. So a new connection to a declared Address
//! is *on probation* until it proves usable, and only then does it count
//! toward readiness and reset the backoff:
//!
//! - **HTTP/2**: the server's first SETTINGS frame arrived ([`Pool::settings`]).
//! - **HTTP/1.1**: it completed an exchange, or it survived a probe at the end
//!   of [`WarmPolicy::probation`] (the pool asks with [`PoolAction::Probe`]; the
//!   driver reports a healthy socket with [`Pool::probe_passed`]).
//!
//! The backoff resets once a usable connection has also lived through the
//! probation (or completed an exchange). A connection that the server or a
//! failure ends before that — it *died young* — counts as a failed connect:
//! the failure count grows, the next connect waits for the backoff, and its
//! replacement goes through the same backoff. So a server that accepts and
//! closes gets one connect per minimum connection per backoff step, never a
//! storm.
//!
//! Readiness per Address ([`Readiness`], reported by [`Pool::warm_status`] and a
//! [`EventKind::WarmReadiness`] event whenever it changes): `Warming` until the
//! minimum is first met, `Ready` while it is, `Degraded` below it after that (or
//! while connects fail), `Down` when no connection is open and connects have
//! failed for longer than [`WarmPolicy::down_after`], `ShutDown` after
//! [`Pool::stop_warming`]. Only connections that proved usable count as open;
//! those still on probation are reported as [`WarmStatus::proving`].
//!
//! ```
//! use std::time::Duration;
//! # use switchyard_core::{Address, Instant, Pool, PoolAction, PoolConfig, Readiness, Scheme, WarmPolicy};
//!
//! let mut pool = Pool::new(PoolConfig::default());
//! let a = Address::builder(Scheme::Http, "127.0.0.1", 8080).build().unwrap();
//! pool.warm(Instant::ZERO, a.clone(), WarmPolicy { min_connections: 2, ..WarmPolicy::default() }).unwrap();
//! // Two connects, no caller.
//! let connects: Vec<_> = std::iter::from_fn(|| pool.poll_action())
//!     .filter_map(|a| match a { PoolAction::Connect { attempt, .. } => Some(attempt), _ => None })
//!     .collect();
//! assert_eq!(connects.len(), 2);
//! assert_eq!(pool.warm_status(Instant::ZERO, &a).unwrap().readiness, Readiness::Warming);
//! for attempt in connects {
//!     pool.handle_connected(Instant::from_millis(3), attempt).unwrap();
//! }
//! let status = pool.warm_status(Instant::from_millis(3), &a).unwrap();
//! assert_eq!((status.readiness, status.open, status.proving), (Readiness::Warming, 0, 2));
//! assert_eq!(pool.stats().totals.idle, 2, "warm connections wait idle for calls");
//! // At the end of the probation (500 ms) the pool asks for a probe of each;
//! // a healthy socket proves the connection usable.
//! let end = Instant::from_millis(503);
//! assert_eq!(pool.poll_timeout(), Some(end));
//! pool.handle_timeout(end);
//! let probes: Vec<_> = std::iter::from_fn(|| pool.poll_action())
//!     .filter_map(|a| match a { PoolAction::Probe { connection } => Some(connection), _ => None })
//!     .collect();
//! assert_eq!(probes.len(), 2);
//! for connection in probes {
//!     pool.probe_passed(end, connection).unwrap();
//! }
//! let status = pool.warm_status(end, &a).unwrap();
//! assert_eq!((status.readiness, status.open, status.proving), (Readiness::Ready, 2, 0));
//! ```

use std::collections::BTreeSet;
use std::time::Duration;

use super::timers::Timer;
use super::{AcquireOptions, Call, Pool, PoolAction};
use crate::address::{Address, Protocol, Proxy};
pub use crate::backoff::Backoff;
pub(super) use crate::backoff::Jitter;
use crate::connection::CloseReason;
use crate::error::{Misuse, RaceError};
use crate::event::EventKind;
use crate::id::{AttemptId, CallId, ConnectionId};
pub use crate::readiness::Readiness;
use crate::route::Route;
use crate::time::Instant;

/// How many warm connections an Address keeps, and how failed connects back off.
#[derive(Clone, PartialEq, Debug)]
pub struct WarmPolicy {
    /// Open connections to keep at least. Default: 1.
    pub min_connections: usize,
    /// HTTP/2: also enough connections to carry this many concurrent streams at
    /// the stream limit the server advertised (HTTP/1.1: this many
    /// connections). Default: 0.
    pub min_streams: u32,
    /// Backoff for failed connects. Default: [`Backoff::default`].
    pub backoff: Backoff,
    /// `Down` once no connection is open and connects have failed for this
    /// long. Default: 30 s.
    pub down_after: Duration,
    /// The proxies to connect through, in order (empty: direct).
    pub proxies: Vec<Proxy>,
    /// How long a new connection is on probation (see the [module
    /// docs](self)): HTTP/1.1 connections are probed at its end, and a
    /// connection the server ends sooner died young, a failed connect.
    /// Default: 500 ms.
    pub probation: Duration,
}

impl Default for WarmPolicy {
    fn default() -> Self {
        WarmPolicy {
            min_connections: 1,
            min_streams: 0,
            backoff: Backoff::default(),
            down_after: Duration::from_secs(30),
            proxies: Vec::new(),
            probation: Duration::from_millis(500),
        }
    }
}

/// A declared Address's state, as [`Pool::warm_status`] reports it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct WarmStatus {
    /// Where it stands.
    pub readiness: Readiness,
    /// Connections the policy wants open now.
    pub wanted: usize,
    /// Open connections taking new exchanges that proved usable (HTTP/2: the
    /// server's SETTINGS arrived; HTTP/1.1: an exchange or a probe passed).
    pub open: usize,
    /// Of those, idle.
    pub idle: usize,
    /// Of those, carrying exchanges.
    pub in_use: usize,
    /// Connections open but still on probation (not yet usable).
    pub proving: usize,
    /// Warm connects in flight.
    pub connecting: usize,
    /// Failed connects (refused, timed out, or connections that died young)
    /// since the last success.
    pub failures: u32,
    /// The last connect failure, in words.
    pub last_error: Option<String>,
    /// When the next connect starts, while backing off.
    pub next_retry: Option<Instant>,
}

/// A connection to a declared Address that has not settled yet: it proves
/// usable, lives through its probation, or dies young.
#[derive(Debug)]
pub(super) struct Probation {
    idx: u64,
    /// The end of its probation.
    due: Instant,
    /// Proved usable (HTTP/2 SETTINGS, or a passing probe).
    usable: bool,
}

impl Probation {
    /// Whether its probation is over at `now`.
    pub(super) fn due_by(&self, now: Instant) -> bool {
        now >= self.due
    }
}

/// Open connections of an Address that take new exchanges.
#[derive(Clone, Copy, Default)]
struct Counts {
    /// Proved usable.
    usable: usize,
    idle: usize,
    in_use: usize,
    /// On probation, not usable yet.
    proving: usize,
}

/// Whether a close for `reason` says something about the server (it, or the
/// network, ended the connection) rather than the pool's or the caller's own
/// choice.
fn server_ended(reason: CloseReason) -> bool {
    matches!(
        reason,
        CloseReason::ServerClose
            | CloseReason::CloseDelimited
            | CloseReason::GoAway
            | CloseReason::Failure
            | CloseReason::RefusedStreams
            | CloseReason::StreamReset
            | CloseReason::Unhealthy
            | CloseReason::NeverUsable
            | CloseReason::BytesAfterResponse
            | CloseReason::ExpectNotHonoured
            | CloseReason::RequestBodyIncomplete
    )
}

/// One declared Address.
#[derive(Debug)]
pub(super) struct Warm {
    pub(super) address: Address,
    policy: WarmPolicy,
    failures: u32,
    next_retry: Option<Instant>,
    last_error: Option<String>,
    /// The minimum was met once.
    met: bool,
    /// Connects have failed since then, without a success.
    failing_since: Option<Instant>,
    /// The readiness (and next retry) last reported.
    reported: Option<(Readiness, Option<Instant>)>,
    pub(super) racing: BTreeSet<CallId>,
    stopped: bool,
}

impl Pool {
    /// Declares `address` warm with `policy` (or changes its policy): the
    /// missing connections start connecting now. See the [module docs](self).
    ///
    /// # Errors
    /// [`Misuse::WarmAboveIdleCap`] when the minimum could not stay idle under
    /// [`PoolConfig::max_idle_per_address`](super::PoolConfig::max_idle_per_address)
    /// or, with every declared Address, under
    /// [`PoolConfig::max_idle_total`](super::PoolConfig::max_idle_total).
    pub fn warm(&mut self, now: Instant, address: Address, policy: WarmPolicy) -> Result<(), Misuse> {
        let others: usize =
            self.warm.values().filter(|w| w.address != address).map(|w| w.policy.min_connections).sum();
        let cap = self.config.max_idle_per_address.min(self.config.max_idle_total.unwrap_or(usize::MAX));
        if policy.min_connections > self.config.max_idle_per_address
            || self.config.max_idle_total.is_some_and(|t| others + policy.min_connections > t)
        {
            return Err(Misuse::WarmAboveIdleCap { wanted: policy.min_connections, cap });
        }
        let idx = match self.warm_of.get(&address) {
            Some(idx) => *idx,
            None => {
                let idx = self.next_warm;
                self.next_warm += 1;
                self.warm_of.insert(address.clone(), idx);
                idx
            }
        };
        let entry = self.warm.entry(idx).or_insert_with(|| Warm {
            address,
            policy: policy.clone(),
            failures: 0,
            next_retry: None,
            last_error: None,
            met: false,
            failing_since: None,
            reported: None,
            racing: BTreeSet::new(),
            stopped: false,
        });
        entry.policy = policy;
        entry.stopped = self.shutdown;
        self.rewarm(now, idx);
        Ok(())
    }

    /// Where a declared Address stands at `now`; `None` for one never declared.
    #[must_use]
    pub fn warm_status(&self, now: Instant, address: &Address) -> Option<WarmStatus> {
        let idx = *self.warm_of.get(address)?;
        let w = &self.warm[&idx];
        let counts = self.counts(address);
        Some(WarmStatus {
            readiness: self.readiness(now, idx),
            wanted: self.wanted(idx),
            open: counts.usable,
            idle: counts.idle,
            in_use: counts.in_use,
            proving: counts.proving,
            connecting: w.racing.len(),
            failures: w.failures,
            last_error: w.last_error.clone(),
            next_retry: w.next_retry.filter(|t| *t > now),
        })
    }

    /// Whether `address` is declared and reported down at `now` (no usable
    /// connection, its connects failing for the policy's `down_after`): the
    /// one question a gateway asks per request, without building a status.
    #[must_use]
    pub fn warm_is_down(&self, now: Instant, address: &Address) -> bool {
        self.warm_of.get(address).is_some_and(|idx| self.readiness(now, *idx) == Readiness::Down)
    }

    /// The declared Addresses, in declaration order.
    #[must_use]
    pub fn warm_addresses(&self) -> Vec<Address> {
        self.warm.values().map(|w| w.address.clone()).collect()
    }

    /// Stops warming every declared Address: no new warm connect starts, those
    /// in flight are cancelled, and the idle timeout applies again to every
    /// connection. Readiness becomes `ShutDown`. Connections stay open for
    /// calls ([`Pool::shutdown`] closes them). Idempotent.
    pub fn stop_warming(&mut self, now: Instant) {
        let all: Vec<u64> = self.warm.keys().copied().collect();
        for idx in all {
            let racing: Vec<CallId> = {
                let w = self.warm.get_mut(&idx).expect("present");
                w.stopped = true;
                w.next_retry = None;
                std::mem::take(&mut w.racing).into_iter().collect()
            };
            for call in racing {
                self.warm_calls.remove(&call);
                self.end_call_waiting_or_racing(now, call);
                if let Some(c) = self.calls.remove(&call) {
                    self.gc_address(&c.address);
                }
            }
            self.report(now, idx);
        }
        self.probation.clear();
        self.timers.retain(|t| !matches!(t, Timer::Warm(_) | Timer::Probation(_)));
    }

    /// Whether `call` is a warm connect (no caller).
    pub(super) fn is_warm_call(&self, call: CallId) -> bool {
        self.warm_calls.contains_key(&call)
    }

    /// Open connections of `address` that take new exchanges, usable or on
    /// probation.
    fn counts(&self, address: &Address) -> Counts {
        let mut counts = Counts::default();
        // After failures, a usable connection on probation counts only once
        // it settles: a server whose connections die young is not ready
        // for a moment each time one says SETTINGS.
        let failing = self.warm_of.get(address).is_some_and(|i| self.warm[i].failures > 0);
        // Lookup only: a count does not depend on the map's order.
        for c in self.conns.values().filter(|c| c.address == *address && c.no_new.is_none()) {
            if self.probation.get(&c.id).is_some_and(|p| !p.usable || failing) {
                counts.proving += 1;
                continue;
            }
            counts.usable += 1;
            if c.in_flight == 0 {
                counts.idle += 1;
            } else {
                counts.in_use += 1;
            }
        }
        counts
    }

    /// Connections the policy wants open now.
    fn wanted(&self, idx: u64) -> usize {
        let w = &self.warm[&idx];
        let p = &w.policy;
        let mut want = p.min_connections;
        if p.min_streams > 0 {
            let per_connection = match self.known_protocol.get(&w.address) {
                Some((protocol, _, limit)) if protocol.is_multiplexed() => {
                    limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX)).max(1)
                }
                Some(_) => 1,
                // Not connected yet: one connection first; its protocol and
                // SETTINGS then say how many carry the streams.
                None => usize::MAX,
            };
            want = want.max(usize::try_from(p.min_streams).unwrap_or(usize::MAX).div_ceil(per_connection));
        }
        want
    }

    fn readiness(&self, now: Instant, idx: u64) -> Readiness {
        let w = &self.warm[&idx];
        if w.stopped {
            return Readiness::ShutDown;
        }
        let open = self.counts(&w.address).usable;
        if open >= self.wanted(idx) && w.failures == 0 {
            return Readiness::Ready;
        }
        if open == 0 && w.failing_since.is_some_and(|since| now >= since + w.policy.down_after) {
            return Readiness::Down;
        }
        if open >= self.wanted(idx) {
            return Readiness::Ready;
        }
        if w.met || w.failures > 0 {
            Readiness::Degraded
        } else {
            Readiness::Warming
        }
    }

    /// Emits `WarmReadiness` when the readiness changed.
    fn report(&mut self, now: Instant, idx: u64) {
        let readiness = self.readiness(now, idx);
        let wanted = self.wanted(idx);
        let open = self.counts(&self.warm[&idx].address).usable;
        let w = self.warm.get_mut(&idx).expect("present");
        if readiness == Readiness::Ready {
            w.met = true;
        }
        let next_retry = w.next_retry.filter(|t| *t > now);
        if w.reported == Some((readiness, next_retry)) {
            return;
        }
        w.reported = Some((readiness, next_retry));
        let kind = EventKind::WarmReadiness {
            address: w.address.clone(),
            readiness,
            open,
            wanted,
            last_error: w.last_error.clone(),
            next_retry: w.next_retry.filter(|t| *t > now),
        };
        self.emit(now, None, kind);
    }

    /// Starts the warm connects `idx` is missing, unless it is backing off.
    pub(super) fn rewarm(&mut self, now: Instant, idx: u64) {
        loop {
            let Some(w) = self.warm.get(&idx) else { return };
            if w.stopped || self.shutdown || w.next_retry.is_some_and(|t| t > now) {
                break;
            }
            let address = w.address.clone();
            let counts = self.counts(&address);
            // Connections on probation count: they may yet prove usable.
            let open = counts.usable + counts.proving;
            if open + w.racing.len() >= self.wanted(idx) || !self.has_capacity(&address) {
                break;
            }
            let proxies = w.policy.proxies.clone();
            let id = self.ids.next_call();
            let wait_seq = self.next_wait_seq;
            self.next_wait_seq += 1;
            let mut call =
                Call::new(address, AcquireOptions { proxies, ..AcquireOptions::default() }, wait_seq);
            // Its own connection: never coalesced, never a pooled one.
            call.fresh_only = true;
            self.calls.insert(id, call);
            self.warm_calls.insert(id, idx);
            self.warm.get_mut(&idx).expect("present").racing.insert(id);
            self.start_race(now, id);
        }
        self.report(now, idx);
    }

    /// Re-warms the Address of a connection that closed or stopped taking
    /// exchanges.
    pub(super) fn rewarm_address(&mut self, now: Instant, address: &Address) {
        if let Some(idx) = self.warm_of.get(address).copied() {
            self.rewarm(now, idx);
        }
    }

    /// Whether the idle timeout must spare `conn`: its Address is declared and
    /// has no more open connections than it wants.
    pub(super) fn warm_protects(&self, conn: ConnectionId) -> bool {
        let Some(c) = self.conns.get(&conn) else { return false };
        let Some(idx) = self.warm_of.get(&c.address) else { return false };
        if self.warm[idx].stopped {
            return false;
        }
        let counts = self.counts(&c.address);
        counts.usable + counts.proving <= self.wanted(*idx)
    }

    /// A connection to `address` opened: while the Address is declared, it is
    /// on probation until it settles.
    pub(super) fn warm_opened(&mut self, now: Instant, conn: ConnectionId, address: &Address) {
        let Some(&idx) = self.warm_of.get(address) else { return };
        let w = &self.warm[&idx];
        if w.stopped {
            return;
        }
        let due = now + w.policy.probation;
        self.probation.insert(conn, Probation { idx, due, usable: false });
        self.timers.insert(due, Timer::Probation(conn));
    }

    /// The connection proved usable (HTTP/2 SETTINGS, a passing probe): it
    /// counts as open; it settles if its probation is over.
    pub(super) fn warm_usable(&mut self, now: Instant, conn: ConnectionId) {
        let Some(p) = self.probation.get_mut(&conn) else { return };
        p.usable = true;
        let (idx, due) = (p.idx, p.due);
        if now >= due {
            self.warm_settle(now, conn);
        } else {
            self.report(now, idx);
        }
    }

    /// The connection completed an exchange: the server serves. It settles.
    pub(super) fn warm_served(&mut self, now: Instant, conn: ConnectionId) {
        if self.probation.contains_key(&conn) {
            self.warm_settle(now, conn);
        }
    }

    /// The connection proved usable and outlived its probation (or served):
    /// a successful connect, which resets the backoff.
    fn warm_settle(&mut self, now: Instant, conn: ConnectionId) {
        let Some(p) = self.probation.remove(&conn) else { return };
        self.timers.remove(p.due, Timer::Probation(conn));
        let Some(w) = self.warm.get_mut(&p.idx) else { return };
        w.failures = 0;
        w.next_retry = None;
        w.failing_since = None;
        w.last_error = None;
        // Backing off no more: the missing connections start now.
        self.rewarm(now, p.idx);
    }

    /// The connection takes no new exchanges: if it was still on probation and
    /// the server (or a failure) ended it, it died young — a failed connect.
    pub(super) fn warm_ended(&mut self, now: Instant, conn: ConnectionId, reason: CloseReason) {
        let Some(p) = self.probation.remove(&conn) else { return };
        self.timers.remove(p.due, Timer::Probation(conn));
        if !server_ended(reason) {
            return;
        }
        let Some(c) = self.conns.get(&conn) else { return };
        let age = (now - c.created).as_millis();
        let state = if p.usable { "after its SETTINGS" } else { "before it was usable" };
        let error = format!("{conn} to {} ended ({reason}) {age} ms after connecting, {state}", c.route);
        self.warm_backoff(now, p.idx, error);
    }

    /// A probation ends: a usable connection settles; an idle HTTP/1.1
    /// connection is probed (its verdict decides); others wait for their
    /// SETTINGS or their exchange.
    pub(super) fn probation_ended(&mut self, now: Instant, conn: ConnectionId) {
        let Some(p) = self.probation.get(&conn) else { return };
        if p.usable {
            self.warm_settle(now, conn);
        } else if self.conns.get(&conn).is_some_and(|c| !c.multiplexed() && c.is_idle()) {
            self.actions.push_back(PoolAction::Probe { connection: conn });
        }
    }

    /// A warm connect won its race: the connection joins the pool idle (on
    /// probation).
    pub(super) fn warm_won(
        &mut self,
        now: Instant,
        call_id: CallId,
        attempt: AttemptId,
        route: Route,
        protocol: Protocol,
        tls: Option<crate::connection::TlsFacts>,
    ) {
        self.stop_race(now, call_id);
        let address = self.calls.remove(&call_id).expect("warm call").address;
        let idx = self.warm_calls.remove(&call_id).expect("warm call");
        let id = self.open_connection(now, attempt, &address, route, protocol, tls);
        self.index(id);
        self.enforce_idle_caps(now, &address);
        // Not a success yet: the backoff resets when the connection settles.
        self.warm.get_mut(&idx).expect("present").racing.remove(&call_id);
        // Calls waiting for the Address take it.
        self.rebalance(now, &address);
        self.rewarm(now, idx);
    }

    /// A warm connect failed: back off, then try again.
    pub(super) fn warm_failed(&mut self, now: Instant, call_id: CallId, error: &RaceError) {
        self.stop_race(now, call_id);
        let address = self.calls.remove(&call_id).map(|c| c.address);
        let Some(idx) = self.warm_calls.remove(&call_id) else { return };
        self.warm.get_mut(&idx).expect("present").racing.remove(&call_id);
        if let Some(address) = address {
            self.gc_address(&address);
            self.rebalance(now, &address);
        }
        self.warm_backoff(now, idx, error.to_string());
    }

    /// A connect to `idx` failed (or a connection died young): count the
    /// failure, back off, and report.
    fn warm_backoff(&mut self, now: Instant, idx: u64, error: String) {
        let draw = self.jitter.unit();
        let w = self.warm.get_mut(&idx).expect("present");
        w.last_error = Some(error);
        // Connects that fail together count once.
        if w.next_retry.is_none_or(|t| t <= now) {
            w.failures += 1;
            let delay = w.policy.backoff.delay(w.failures, draw);
            w.next_retry = Some(now + delay);
            self.timers.insert(now + delay, Timer::Warm(idx));
        }
        let since = *w.failing_since.get_or_insert(now);
        let down_at = since + w.policy.down_after;
        if down_at > now {
            self.timers.insert(down_at, Timer::Warm(idx));
        }
        self.report(now, idx);
    }
}
