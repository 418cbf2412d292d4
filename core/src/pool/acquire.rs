//! How a call asks for a connection and stops asking: an idle pooled one, a
//! share of an HTTP/2 connection, a coalesced one, or a race; and cancellation.

use super::*;

/// The calls map keeps at least this capacity when it shrinks.
const CALLS_KEPT_CAPACITY: usize = 1024;

impl Pool {
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
        if self.addrs.len() >= self.addrs_sweep_at {
            self.sweep_addresses(now);
        }
        // After a burst, a map sized for it scatters the few calls left over
        // a table of megabytes: a cache miss at every lookup (measured: a
        // third of an acquire + release after 100 000 calls at once).
        if self.calls.capacity() > CALLS_KEPT_CAPACITY && self.calls.len() * 8 < self.calls.capacity() {
            self.calls.shrink_to(self.calls.len() * 2);
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

    pub(super) fn find_pooled(&self, call_id: CallId) -> Option<(ConnectionId, Source)> {
        let call = &self.calls[&call_id];
        if call.fresh_only {
            return None;
        }
        let a = self.addrs.get(&call.address)?;
        let idle = a.idle.newest_where(|id| {
            let c = &self.conns[&id];
            // An HTTP/2 peer may allow zero streams (SETTINGS), idle or not.
            c.limit() > 0
                && !call.learned().avoid.contains(&id)
                && (!call.options.require_multiplexed || c.multiplexed())
        });
        if let Some(id) = idle {
            return Some((id, Source::Pooled));
        }
        if call.options.exclusive {
            return None;
        }
        a.shareable.iter().find(|id| !call.learned().avoid.contains(id)).map(|id| (*id, Source::Shared))
    }

    /// An IP-literal origin needs no DNS, so its "answer" is the literal: an
    /// HTTP/2 connection to that IP whose certificate covers it (an
    /// IP-address SAN) serves the call, coalesced (BEHAVIOUR §5).
    pub(super) fn find_coalescable_literal(&self, call_id: CallId) -> Option<(ConnectionId, Source)> {
        let call = &self.calls[&call_id];
        let Host::Ip(ip) = call.address.host() else { return None };
        if call.options.exclusive || call.fresh_only {
            return None;
        }
        self.find_coalescable(&call.address, &[*ip], &call.learned().avoid).map(|c| (c, Source::Coalesced))
    }

    pub(super) fn find_coalescable(
        &self,
        address: &Address,
        ips: &[IpAddr],
        avoid: &[ConnectionId],
    ) -> Option<ConnectionId> {
        if !address.is_https() || address.is_tunnel() || address.proxy().is_some_and(|p| *p != Proxy::Direct)
        {
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

    pub(super) fn assign(&mut self, now: Instant, call_id: CallId, conn: ConnectionId, source: Source) {
        let exclusive = self.calls[&call_id].options.exclusive;
        let (mut first_use, mut exchange, mut was_idle, mut early_stream) = (false, 0, None, None);
        let mut multiplexed = false;
        self.update(conn, |c| {
            multiplexed = c.multiplexed();
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
        if was_idle
            .is_some_and(|since| self.timers.remove(since + self.config.idle_cap_grace, Timer::Trim(conn)))
        {
            if let Some(address) = self.conns.get(&conn).map(|c| c.address.clone()) {
                self.rearm_trim(&address);
            }
        }
        if exclusive {
            self.mark_no_new(now, conn, CloseReason::Exclusive);
        } else if multiplexed && self.stream_budget_of(now, conn).is_some_and(|budget| exchange + 1 >= budget)
        {
            // Its last stream by the server's limit: the next call goes
            // to another connection, never to one the server would turn away.
            self.mark_no_new(now, conn, CloseReason::StreamBudget);
        }
        match source {
            Source::Pooled | Source::Shared => self.stats.reused += 1,
            Source::Coalesced => self.stats.coalesced += 1,
            Source::New => {}
        }
        self.calls.get_mut(&call_id).expect("call exists").state =
            CallState::Active { connection: conn, early_stream };
        self.emit_passing(now, Some(call_id), || EventKind::ConnectionAcquired {
            connection: conn,
            source,
            exchange,
        });
        self.actions.push_back(PoolAction::Acquired { call: call_id, connection: conn, source });
    }

    /// The learned stream budget of `conn`'s Address (HTTP/2), while it holds.
    pub(super) fn stream_budget_of(&self, now: Instant, conn: ConnectionId) -> Option<u64> {
        let c = self.conns.get(&conn)?;
        self.addrs.get(&c.address)?.stream_budget(now)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::address::Scheme;
    use crate::connection::Reuse;

    /// 5 000 calls at once, then one at a time: the calls map is resized for
    /// the few left, not kept at the burst's size (where every lookup would
    /// miss the cache).
    #[test]
    fn the_calls_map_shrinks_after_a_burst() {
        let address = Address::builder(Scheme::Http, "127.0.0.1", 80).build().expect("address");
        let mut pool = Pool::new(PoolConfig { max_idle_per_address: usize::MAX, ..PoolConfig::default() });
        let now = Instant::ZERO;
        let mut calls = Vec::new();
        for _ in 0..5_000 {
            let call = pool.acquire(now, address.clone(), AcquireOptions::default());
            let attempt = std::iter::from_fn(|| pool.poll_action())
                .find_map(|a| match a {
                    PoolAction::Connect { attempt, .. } => Some(attempt),
                    _ => None,
                })
                .expect("a connect");
            pool.handle_connected(now, attempt).expect("connected");
            calls.push(call);
        }
        assert!(pool.calls.capacity() >= 5_000);
        for call in calls {
            pool.exchange_finished(now, call, Reuse::Reusable).expect("released");
        }
        while pool.poll_action().is_some() {}
        let later = now + Duration::from_millis(1);
        let call = pool.acquire(later, address.clone(), AcquireOptions::default());
        let served =
            std::iter::from_fn(|| pool.poll_action()).any(|a| matches!(a, PoolAction::Acquired { .. }));
        assert!(served, "served from the pool");
        assert!(pool.calls.capacity() <= CALLS_KEPT_CAPACITY, "capacity {}", pool.calls.capacity());
        pool.exchange_finished(later, call, Reuse::Reusable).expect("released");
        pool.check_invariants().unwrap();
    }
}
