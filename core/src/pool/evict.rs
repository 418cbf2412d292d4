//! Retiring and closing connections: no-new-exchanges transitions, closes with a
//! reason, idle caps, `evict_all`.

use super::{AddrState, Pool, PoolAction};
use crate::address::Address;
use crate::connection::CloseReason;
use crate::event::EventKind;
use crate::id::ConnectionId;
use crate::time::Instant;

impl Pool {
    /// Closes every idle connection; in-use ones are left alone.
    pub fn evict_all(&mut self, now: Instant) {
        let idle: Vec<ConnectionId> = self.idle_all.iter().map(|(_, id)| *id).collect();
        for id in idle {
            self.close(now, id, CloseReason::EvictAll);
        }
    }

    pub(super) fn enforce_idle_caps(&mut self, now: Instant, address: &Address) {
        loop {
            let over = self.addrs.get(address).and_then(|a| {
                (a.idle.len() > self.config.max_idle_per_address).then(|| a.idle.first().map(|(_, id)| *id))
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
    }

    pub(super) fn close(&mut self, now: Instant, conn: ConnectionId, reason: CloseReason) {
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
        self.actions.push_back(PoolAction::Close { connection: conn, reason });
        self.emit(now, None, EventKind::ConnectionClosed { connection: conn, reason });
        self.gc_address(&c.address);
    }

    pub(super) fn gc_address(&mut self, address: &Address) {
        if self.addrs.get(address).is_some_and(AddrState::is_empty) {
            self.addrs.remove(address);
        }
    }
}
