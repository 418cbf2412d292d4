//! Attempts kept for the pool: a call took a pooled connection while its own
//! attempt had already finished TCP, or was its only attempt in flight. The
//! attempt is not thrown away; it goes on without the call and its connection
//! joins the pool idle. Its events stay complete (BEHAVIOUR §7): its
//! `SecureConnectStart`/`SecureConnectEnd` and its `ConnectEnd` (or
//! `ConnectFailed`) are reported under the call that started it, though that
//! call has moved on.

use super::timers::Timer;
use super::{Call, CallState, Pool, PoolAction};
use crate::address::Address;
use crate::connection::{CloseReason, TlsFacts};
use crate::error::ConnectError;
use crate::event::{CancelReason, EventKind};
use crate::id::{AttemptId, CallId};
use crate::race::negotiated;
use crate::route::Route;
use crate::time::Instant;

/// An attempt whose call no longer needs it.
#[derive(Debug)]
pub(super) struct Kept {
    address: Address,
    route: Route,
    deadline: Instant,
    /// Past TCP.
    handshaking: bool,
    /// Handshaking, its proxy tunnel not open yet: the connect timeout, from
    /// its start, still bounds it, or the handshake timeout from TCP's end
    /// (`tunnel_bound`: the one that ends first).
    tunnelling: bool,
    tunnel_bound: std::time::Duration,
}

impl Pool {
    /// Takes the attempt worth keeping (if any) out of `call`'s race before the
    /// race is ended for a pooled connection, and keeps it for the pool.
    pub(super) fn keep_attempt(&mut self, now: Instant, call: CallId) {
        let taken = match self.calls.get_mut(&call) {
            Some(Call { state: CallState::Racing(racing), .. }) => racing.race.take_for_pool(now),
            _ => None,
        };
        let Some((attempt, route, deadline, handshaking, tunnel)) = taken else { return };
        let address = self.calls[&call].address.clone();
        self.addrs.entry(address.clone()).or_default().kept += 1;
        self.timers.insert(deadline, Timer::Kept(attempt));
        let (tunnelling, tunnel_bound) = (tunnel.is_some(), tunnel.unwrap_or_default());
        self.kept.insert(attempt, Kept { address, route, deadline, handshaking, tunnelling, tunnel_bound });
    }

    /// A kept attempt's TCP connect finished: its handshakes start (SOCKS5,
    /// `CONNECT`, TLS as its route needs), or, with none, it is ready.
    pub(super) fn kept_connected(&mut self, now: Instant, attempt: AttemptId) {
        let Some(k) = self.kept.get_mut(&attempt) else { return };
        if k.handshaking {
            return; // a repeated report
        }
        if !k.route.requires_handshake() {
            let protocol = k.address.cleartext_protocol();
            if let Some(k) = self.unkeep(attempt) {
                self.kept_ready(now, attempt, k, protocol, None);
            }
            return;
        }
        k.handshaking = true;
        // A proxy tunnel stays under the connect timeout (its deadline
        // stands), or the handshake timeout from now if that ends first.
        k.tunnelling = k.route.requires_tunnel() || k.route.requires_socks5();
        let (old, route) = (k.deadline, k.route.clone());
        if k.tunnelling {
            (k.deadline, k.tunnel_bound) = self.config.race.tunnel_deadline(old, now);
        } else {
            k.deadline = now + self.config.race.handshake_timeout;
        }
        let deadline = k.deadline;
        self.timers.remove(old, Timer::Kept(attempt));
        self.timers.insert(deadline, Timer::Kept(attempt));
        self.handshaking.insert(attempt);
        if route.requires_tls() {
            self.stats.tls_handshakes += 1;
            self.emit(now, Some(attempt.call()), EventKind::SecureConnectStart { attempt });
        }
        self.actions.push_back(PoolAction::Handshake { attempt, route });
    }

    /// A kept attempt's proxy tunnel is open: its TLS gets the handshake timeout.
    pub(super) fn kept_tunnelled(&mut self, now: Instant, attempt: AttemptId) {
        let Some(k) = self.kept.get_mut(&attempt) else { return };
        if !k.tunnelling {
            return;
        }
        k.tunnelling = false;
        let old = k.deadline;
        k.deadline = now + self.config.race.handshake_timeout;
        let deadline = k.deadline;
        self.timers.remove(old, Timer::Kept(attempt));
        self.timers.insert(deadline, Timer::Kept(attempt));
    }

    fn unkeep(&mut self, attempt: AttemptId) -> Option<Kept> {
        let k = self.kept.remove(&attempt)?;
        self.timers.remove(k.deadline, Timer::Kept(attempt));
        if let Some(a) = self.addrs.get_mut(&k.address) {
            a.kept -= 1;
        }
        Some(k)
    }

    /// A kept attempt's handshakes finished: its connection joins the pool idle
    /// (closed as a duplicate when an HTTP/2 connection for the Address already
    /// exists; over a cap, closed with that reason), and waiting calls may take it.
    pub(super) fn kept_established(
        &mut self,
        now: Instant,
        attempt: AttemptId,
        alpn: Option<crate::address::Protocol>,
        tls: Option<TlsFacts>,
    ) {
        let Some(k) = self.unkeep(attempt) else { return };
        let protocol = negotiated(&k.address, &k.route, alpn);
        if !k.address.protocols().contains(&protocol) {
            // The embedder holds the established socket: it must close it.
            self.kept_failed_with(now, attempt, k, ConnectError::ProtocolNotAllowed { protocol }, true);
            return;
        }
        if k.route.requires_tls() {
            self.emit(now, Some(attempt.call()), EventKind::SecureConnectEnd { attempt, protocol });
        }
        let tls = tls.filter(|_| protocol.is_coalescable());
        self.kept_ready(now, attempt, k, protocol, tls);
    }

    /// A kept attempt is a connection: it joins the pool idle (closed as a
    /// duplicate when an HTTP/2 connection for the Address already exists; over a
    /// cap, closed with that reason), and waiting calls may take it.
    fn kept_ready(
        &mut self,
        now: Instant,
        attempt: AttemptId,
        k: Kept,
        protocol: crate::address::Protocol,
        tls: Option<TlsFacts>,
    ) {
        self.db.connected(&k.route);
        self.handshaking.remove(&attempt);
        let route = k.route.clone();
        let id = self.open_connection(now, attempt, &k.address, k.route, protocol, tls);
        self.emit(now, Some(attempt.call()), EventKind::ConnectEnd { attempt, route, protocol });
        self.stats.joined_idle += 1;
        let duplicate = protocol.is_multiplexed()
            && self.addrs.get(&k.address).is_some_and(|a| a.multiplexed.iter().any(|c| *c != id));
        if duplicate {
            self.stats.wasted += 1;
            self.close(now, id, CloseReason::Duplicate);
        } else {
            self.index(id);
            self.enforce_idle_caps(now, &k.address);
        }
        self.rebalance(now, &k.address);
    }

    /// A kept attempt failed (the embedder closed its socket): the route is
    /// recorded as failed; nothing waits on it.
    pub(super) fn kept_failed(&mut self, now: Instant, attempt: AttemptId, error: ConnectError) {
        if let Some(k) = self.unkeep(attempt) {
            self.kept_failed_with(now, attempt, k, error, false);
        }
    }

    fn kept_failed_with(
        &mut self,
        now: Instant,
        attempt: AttemptId,
        k: Kept,
        error: ConnectError,
        cancel: bool,
    ) {
        self.handshaking.remove(&attempt);
        self.db.failed(&k.route, now);
        self.apply_outliers(now);
        self.emit(now, Some(attempt.call()), EventKind::ConnectFailed { attempt, route: k.route, error });
        if cancel {
            self.actions.push_back(PoolAction::CancelAttempt { attempt });
        }
        let address = k.address;
        self.gc_address(&address);
        // Capacity it held for the Address is free again.
        self.rebalance(now, &address);
    }

    /// A kept attempt is past its deadline: it fails as a connect, tunnel or
    /// handshake timeout.
    pub(super) fn kept_timed_out(&mut self, now: Instant, attempt: AttemptId) {
        if let Some(k) = self.unkeep(attempt) {
            let error = if !k.handshaking {
                ConnectError::ConnectTimeout { after: self.config.race.connect_timeout }
            } else if k.tunnelling {
                ConnectError::TunnelTimeout { after: k.tunnel_bound }
            } else {
                ConnectError::HandshakeTimeout { after: self.config.race.handshake_timeout }
            };
            // Still running in the embedder: it is cancelled.
            self.kept_failed_with(now, attempt, k, error, true);
        }
    }

    /// Shutdown: every kept attempt is cancelled.
    pub(super) fn cancel_kept(&mut self, now: Instant) {
        let all: Vec<AttemptId> = self.kept.keys().copied().collect();
        self.cancel_kept_attempts(now, all);
    }

    /// Eviction: kept attempts that would join the pool idle (no waiting
    /// call counts on them) are cancelled.
    pub(super) fn cancel_spare_kept(&mut self, now: Instant) {
        let spare: Vec<AttemptId> = self
            .kept
            .iter()
            .filter(|(_, k)| self.addrs.get(&k.address).is_none_or(|a| a.waiters == 0))
            .map(|(id, _)| *id)
            .collect();
        self.cancel_kept_attempts(now, spare);
    }

    fn cancel_kept_attempts(&mut self, now: Instant, attempts: Vec<AttemptId>) {
        for attempt in attempts {
            if let Some(k) = self.unkeep(attempt) {
                self.handshaking.remove(&attempt);
                self.emit(
                    now,
                    None,
                    EventKind::ConnectCancelled {
                        attempt,
                        route: k.route,
                        reason: CancelReason::CallCancelled,
                    },
                );
                self.actions.push_back(PoolAction::CancelAttempt { attempt });
                self.gc_address(&k.address);
            }
        }
    }
}
