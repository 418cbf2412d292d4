//! Retiring and closing connections: no-new-exchanges transitions, closes with a
//! reason, idle caps, `evict_all`.

use super::timers::Timer;
use super::{AddrState, CallState, Pool, PoolAction};
use crate::address::Address;
use crate::connection::CloseReason;
use crate::event::EventKind;
use crate::id::{CallId, ConnectionId};
use crate::time::Instant;

/// How many Addresses with nothing open, connecting or waiting the pool
/// keeps for their retry budget windows (and per-Address counters) at most;
/// past it the least recently called are forgotten at the next sweep.
pub const IDLE_ADDRESSES_KEPT: usize = 1024;

/// How many Addresses' negotiated protocols (and HTTP/2 stream limits) the
/// pool remembers at most, each for the route database's TTL.
pub const KNOWN_PROTOCOLS_KEPT: usize = 4096;

impl Pool {
    /// Closes every idle connection, and what would become idle without a
    /// call: connects kept for the pool after their call took another
    /// connection are cancelled (unless a waiting call counts on one), and a
    /// connection whose caller dropped the response while its body drains
    /// ([`Pool::draining`]) closes when the drain ends. Connections carrying
    /// live calls are left alone.
    pub fn evict_all(&mut self, now: Instant) {
        let idle: Vec<ConnectionId> =
            self.idle_all.iter(|k| super::idle_live(&self.conns, k)).map(|(_, id)| *id).collect();
        for id in idle {
            self.close(now, id, CloseReason::EvictAll);
        }
        if !self.kept.is_empty() {
            self.cancel_spare_kept(now);
        }
        let mut draining: Vec<ConnectionId> = self
            .calls
            .values()
            .filter(|c| c.draining)
            .filter_map(|c| match c.state {
                CallState::Active { connection, .. } => Some(connection),
                _ => None,
            })
            .collect();
        draining.sort_unstable();
        for id in draining {
            self.mark_no_new(now, id, CloseReason::EvictAll);
        }
    }

    /// The call's caller dropped its response before the body's end; the
    /// driver drains the rest (bounded) and then reports the exchange
    /// finished. Until then the connection is neither idle nor the caller's:
    /// an eviction meanwhile closes it when the drain ends
    /// ([`Pool::evict_all`]). Unknown calls: no-op.
    pub fn draining(&mut self, _now: Instant, call: CallId) {
        if let Some(c) = self.calls.get_mut(&call) {
            c.draining = true;
        }
    }

    /// The idle caps. Per Address: the oldest idle connections above the cap
    /// close once idle for the grace period (a check is scheduled for the
    /// others), so steady demand never churns; a cap of zero closes a
    /// released connection at once. In total: at once.
    pub(super) fn enforce_idle_caps(&mut self, now: Instant, address: &Address) {
        let grace = self.config.idle_cap_grace;
        loop {
            let over = self.addrs.get(address).and_then(|a| {
                (a.idle.len() > self.config.max_idle_per_address).then(|| a.idle.first().copied()).flatten()
            });
            let Some((since, id)) = over else { break };
            // A cap of zero keeps none: no grace (BEHAVIOUR §4).
            if since + grace > now && self.config.max_idle_per_address > 0 {
                self.timers.insert(since + grace, Timer::Trim(id));
                break;
            }
            self.close(now, id, CloseReason::OverIdleCap);
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

    /// The oldest idle connection of an Address left the idle set: if the
    /// Address is still over its idle cap, the new oldest gets the trim check.
    pub(super) fn rearm_trim(&mut self, address: &Address) {
        let Some(a) = self.addrs.get(address) else { return };
        if a.idle.len() > self.config.max_idle_per_address {
            if let Some(&(since, id)) = a.idle.first() {
                self.timers.insert(since + self.config.idle_cap_grace, Timer::Trim(id));
            }
        }
    }

    /// One-way transition to no-new-exchanges, with its event once; closes at once
    /// when idle.
    pub(super) fn retire(&mut self, now: Instant, conn: ConnectionId, reason: CloseReason) {
        self.mark_no_new(now, conn, reason);
        if let Some(c) = self.conns.get(&conn) {
            if c.in_flight == 0 {
                let reason = c.no_new.unwrap_or(reason);
                self.close(now, conn, reason);
            }
        }
    }

    pub(super) fn mark_no_new(&mut self, now: Instant, conn: ConnectionId, reason: CloseReason) {
        if self.conns.get(&conn).is_none_or(|c| c.no_new.is_some()) {
            return;
        }
        self.update(conn, |c| c.no_new = Some(reason));
        self.emit(now, None, EventKind::NoNewExchanges { connection: conn, reason });
        if !self.probation.is_empty() {
            // A connection on probation that the server ended died young.
            self.warm_ended(now, conn, reason);
        }
        // A warm minimum replaces it at once.
        if let Some(address) = self.conns.get(&conn).map(|c| c.address.clone()) {
            self.rewarm_address(now, &address);
        }
    }

    pub(super) fn close(&mut self, now: Instant, conn: ConnectionId, reason: CloseReason) {
        self.unindex(conn);
        self.locals.remove(&conn);
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        debug_assert_eq!(c.in_flight, 0, "closing a connection in use");
        if c.allows_no_stream() {
            self.zero_stream_conns -= 1;
        }
        self.timers.cancel_pong(conn);
        if !self.probation.is_empty() {
            // Closed by the pool's own choice (idle, caps, duplicate): not the
            // server's doing.
            self.warm_ended(now, conn, reason);
        }
        if c.multiplexed() {
            self.timers.remove(c.created + self.config.race.handshake_timeout, Timer::Settings(conn));
        }
        if let Some(since) = c.idle_since {
            self.timers.remove(since + self.config.idle_cap_grace, Timer::Trim(conn));
            self.rearm_trim(&c.address);
        }
        if let Some(t) = c.lifetime_deadline {
            self.timers.remove(t, Timer::Lifetime(conn));
        }
        if let Some(a) = self.addrs.get_mut(&c.address) {
            a.open -= 1;
            *a.counters.closed.entry(reason).or_default() += 1;
            a.counters.reused += c.assigned.saturating_sub(1);
        }
        self.open_total -= 1;
        *self.stats.closed.entry(reason).or_default() += 1;
        self.actions.push_back(PoolAction::Close { connection: conn, reason });
        self.emit(now, None, EventKind::ConnectionClosed { connection: conn, reason });
        self.gc_address(&c.address);
        self.rewarm_address(now, &c.address);
    }

    /// Forgets the Addresses that have nothing open, connecting or waiting
    /// and whose retry budget window holds nothing any more; of the idle
    /// ones whose window still counts, at most [`IDLE_ADDRESSES_KEPT`] (the
    /// most recently called) are kept. Runs when the map has doubled since
    /// the last sweep, so it holds at most 64 + 2 × (Addresses with something
    /// open, connecting or waiting + [`IDLE_ADDRESSES_KEPT`]) entries.
    pub(super) fn sweep_addresses(&mut self, now: Instant) {
        let budget = self.config.retry_budget.unwrap_or_default();
        self.addrs.retain(|_, a| !a.is_idle_state() || a.budget.recent(now, &budget));
        let idle = self.addrs.values().filter(|a| a.is_idle_state()).count();
        if idle > IDLE_ADDRESSES_KEPT {
            // The most recently called stay (ties at the cut go).
            let mut newest: Vec<u64> =
                self.addrs.values().filter(|a| a.is_idle_state()).map(|a| a.budget.newest()).collect();
            newest.sort_unstable();
            let cut = newest[idle - IDLE_ADDRESSES_KEPT];
            self.addrs.retain(|_, a| !a.is_idle_state() || a.budget.newest() > cut);
        }
        self.addrs_sweep_at = 64 + 2 * self.addrs.len();
    }

    pub(super) fn gc_address(&mut self, address: &Address) {
        if self.addrs.get(address).is_some_and(AddrState::is_empty) {
            self.addrs.remove(address);
        }
    }
}
