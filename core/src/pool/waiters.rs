//! Serving calls: from the pool, by starting a race, or by queueing them first
//! come first served until capacity frees (a connection closes, an exchange ends,
//! a race ends, SETTINGS raise a stream limit).

use super::timers::Timer;
use super::{Call, CallState, Pool, StreamLimitPolicy};
use crate::address::Address;
use crate::address::Protocol;
use crate::connection::CloseReason;
use crate::id::{CallId, ConnectionId};
use crate::time::Instant;

impl Pool {
    /// Serves a call now (pooled, shared, or a new race) or queues it.
    pub(super) fn dispatch(&mut self, now: Instant, call_id: CallId) {
        // The calls already waiting for this Address that asked before this one.
        let ahead = {
            let c = &self.calls[&call_id];
            let first_ask = c.retries == 0 && c.free_retries == 0;
            let all = match self.addrs.get_mut(&c.address) {
                Some(a) if !first_ask => a.waiters,
                None if !first_ask => 0,
                found => {
                    // A call's first ask: counted, and deposited into its
                    // Address's retry budget.
                    let a = match found {
                        Some(a) => a,
                        None => self.addrs.entry(c.address.clone()).or_default(),
                    };
                    a.counters.calls += 1;
                    if let Some(budget) = self.config.retry_budget.as_ref() {
                        a.budget.deposit(now, budget);
                    }
                    a.waiters
                }
            };
            if self.waiters.last_key_value().is_none_or(|(last, _)| *last < c.wait_seq) {
                all // a new call: every waiting call asked before it
            } else {
                // A retry (rare): count the ones that asked before it.
                self.waiters
                    .range(..c.wait_seq)
                    .filter(|(_, w)| self.calls.get(w).is_some_and(|w| w.address == c.address))
                    .count()
            }
        };
        if !self.try_serve(now, call_id, ahead) {
            let (address, deadline, seq) = {
                let c = &self.calls[&call_id];
                let wait = now + self.config.acquire_timeout;
                (c.address.clone(), c.options.deadline.map_or(wait, |d| d.min(wait)), c.wait_seq)
            };
            self.waiters.insert(seq, call_id);
            self.timers.insert(deadline, Timer::Wait(call_id));
            self.addrs.entry(address).or_default().waiters += 1;
            self.calls.get_mut(&call_id).expect("call exists").state =
                CallState::Waiting { seq, since: now, deadline };
        }
    }

    /// Tries to serve a pending call without queueing it. Returns whether it was
    /// served (acquired, or a race started). `ahead`: calls for the same
    /// Address queued before this one and still waiting.
    pub(super) fn try_serve(&mut self, now: Instant, call_id: CallId, ahead: usize) -> bool {
        if let Some((conn, source)) =
            self.find_pooled(call_id).or_else(|| self.find_coalescable_literal(call_id))
        {
            self.assign(now, call_id, conn, source);
            return true;
        }
        let (address, exclusive, fresh) = {
            let c = &self.calls[&call_id];
            (c.address.clone(), c.options.exclusive, c.fresh_only)
        };
        if self.zero_stream_conns > 0
            && !exclusive
            && !fresh
            && self.zero_stream_connection(&address).is_some()
        {
            // The server's SETTINGS allow no stream on a connection still in
            // its never-usable period: another connection would be turned
            // away the same way. Wait for that connection's timer (or
            // SETTINGS that raise the limit).
            return false;
        }
        if self.config.stream_limit_policy == StreamLimitPolicy::Wait
            && !exclusive
            && !fresh
            && self.addrs.get(&address).is_some_and(|a| !a.multiplexed.is_empty())
        {
            // Every usable HTTP/2 connection is at its limit: wait for a stream.
            return false;
        }
        if !exclusive && !fresh && self.addrs.get(&address).is_some_and(|a| a.kept > a.waiters) {
            // An attempt kept for the pool will be idle soon and no other
            // waiting call has claimed it: wait for it rather than connect again.
            return false;
        }
        if !exclusive && !fresh && self.expected_streams(now, &address) > ahead as u64 {
            // One handshake per HTTP/2 origin, and no connection the streams
            // coming soon will cover: a connect in flight, or a connection
            // waiting for its SETTINGS, will have a stream for this call once
            // the calls ahead of it have theirs. Wait for it rather than race.
            return false;
        }
        if !self.has_capacity(&address) {
            // Idle connections this call cannot use (it needs a fresh one, an
            // HTTP/2 one, or it is another Address's) must not hold the capacity
            // it waits for: close the oldest such idle connection instead of
            // letting the call wait until its timeout.
            if !self.per_address_room(&address) {
                let oldest = self.addrs.get(&address).and_then(|a| a.idle.first().map(|(_, id)| *id));
                if let Some(victim) = oldest {
                    self.close(now, victim, CloseReason::Evicted);
                }
            }
            if self.per_address_room(&address) && self.total_full() {
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

    /// Streams calls for `address` can expect soon without a new connect: the
    /// room connections still waiting for their SETTINGS will have, and (one
    /// handshake per HTTP/2 origin) the room of connects in flight. Each counts
    /// the stream limit the Address's last SETTINGS advertised; unknown or
    /// unlimited, one such connection is expected to serve every waiting call.
    fn expected_streams(&self, now: Instant, address: &Address) -> u64 {
        let Some(a) = self.addrs.get(address) else { return 0 };
        let per_connection = self.known_protocol.get(address).and_then(|k| k.2).map_or(u64::MAX, u64::from);
        // A new connection carries no more than the server's budget.
        let per_connection = a.stream_budget(now).map_or(per_connection, |b| per_connection.min(b));
        let mut streams = 0u64;
        for id in &a.multiplexed {
            let c = &self.conns[id];
            if !c.settings {
                streams = streams.saturating_add(per_connection.saturating_sub(u64::from(c.in_flight)));
            }
        }
        if self.await_pending_connect(now, address) {
            // A racing call takes one stream of its connection itself.
            let racing = (a.racing.len() as u64).saturating_mul(per_connection.saturating_sub(1));
            let kept = (a.kept as u64).saturating_mul(per_connection);
            streams = streams.saturating_add(racing).saturating_add(kept);
        }
        streams
    }

    /// An HTTP/2 connection to `address` whose SETTINGS allow zero streams and
    /// that is still in its never-usable period (its timer retires it).
    fn zero_stream_connection(&self, address: &Address) -> Option<ConnectionId> {
        let a = self.addrs.get(address)?;
        a.multiplexed.iter().copied().find(|id| {
            let c = &self.conns[id];
            c.settings && c.stream_limit == 0 && c.usable()
        })
    }

    /// Whether a call for `address` should wait for a connect already in flight
    /// (a race, or an attempt kept for the pool) rather than start its own: the
    /// Address speaks HTTP/2 with prior knowledge, or is `https` and may speak
    /// HTTP/2 and its last connection did not negotiate HTTP/1.1 (or that is
    /// forgotten).
    fn await_pending_connect(&self, now: Instant, address: &Address) -> bool {
        let prior_knowledge = address.protocols().contains(&Protocol::H2PriorKnowledge);
        let may_negotiate = address.is_https() && address.protocols().contains(&Protocol::Http2);
        if !self.config.await_pending_http2 || !(prior_knowledge || may_negotiate || address.is_quic()) {
            return false;
        }
        let known_http1 = self
            .known_protocol
            .get(address)
            .is_some_and(|(p, until, _)| *p == Protocol::Http1 && *until > now);
        if known_http1 {
            return false;
        }
        self.addrs.get(address).is_some_and(|a| !a.racing.is_empty() || a.kept > 0)
    }

    pub(super) fn per_address_room(&self, address: &Address) -> bool {
        let Some(max) = self.config.max_connections_per_address else {
            return true;
        };
        self.addrs.get(address).map_or(0, |a| a.open + a.racing.len() + a.kept) < max
    }

    /// Whether the total cap is reached: [`PoolConfig::max_connections_total`],
    /// and in any case [`MAX_SLOTS`](crate::id::MAX_SLOTS), the records a pool
    /// can hold.
    pub(super) fn total_full(&self) -> bool {
        let max =
            self.config.max_connections_total.map_or(crate::id::MAX_SLOTS, |m| m.min(crate::id::MAX_SLOTS));
        self.open_total + self.racing_total + self.kept.len() >= max
    }

    pub(super) fn has_capacity(&self, address: &Address) -> bool {
        self.per_address_room(address) && !self.total_full()
    }

    /// Capacity may have freed: serve waiters first come first served, then offer
    /// eligible pooled connections to calls racing for `address`.
    pub(super) fn rebalance(&mut self, now: Instant, address: &Address) {
        // The common case (a release with nobody waiting or racing): nothing to do.
        if self.waiters.is_empty()
            && (self.racing_total == 0 || self.addrs.get(address).is_none_or(|a| a.racing.is_empty()))
        {
            return;
        }
        let queued: Vec<(u64, CallId)> = self.waiters.iter().map(|(s, c)| (*s, *c)).collect();
        // Per Address, the waiters seen so far that stay queued (FIFO order).
        let mut still_waiting: Vec<(Address, usize)> = Vec::new();
        for (seq, call_id) in queued {
            if self.waiters.is_empty() {
                break;
            }
            let Some(c) = self.calls.get(&call_id) else {
                continue;
            };
            let CallState::Waiting { deadline, since, .. } = c.state else {
                continue;
            };
            let waiter_address = c.address.clone();
            // Leave the queue tentatively (so `waiters` counts the others); back
            // in place if still blocked.
            self.calls.get_mut(&call_id).expect("call exists").state = CallState::Pending;
            if let Some(a) = self.addrs.get_mut(&waiter_address) {
                a.waiters -= 1;
            }
            let slot = still_waiting.iter().position(|(a, _)| *a == waiter_address);
            let ahead = slot.map_or(0, |i| still_waiting[i].1);
            if self.try_serve(now, call_id, ahead) {
                self.waiters.remove(&seq);
                self.timers.remove(deadline, Timer::Wait(call_id));
                self.gc_address(&waiter_address);
            } else {
                match slot {
                    Some(i) => still_waiting[i].1 += 1,
                    None => still_waiting.push((waiter_address.clone(), 1)),
                }
                self.addrs.entry(waiter_address).or_default().waiters += 1;
                self.calls.get_mut(&call_id).expect("call exists").state =
                    CallState::Waiting { seq, since, deadline };
            }
        }
        let racing: Vec<CallId> =
            self.addrs.get(address).map(|a| a.racing.iter().copied().collect()).unwrap_or_default();
        let mut ended_races = false;
        for call_id in racing {
            if self.is_warm_call(call_id) {
                continue; // a warm connect makes its own connection
            }
            let Some((conn, source)) = self.find_pooled(call_id) else {
                continue;
            };
            // Its attempt is not thrown away: it joins the pool.
            self.keep_attempt(now, call_id);
            if let Some(Call { state: CallState::Racing(racing), .. }) = self.calls.get_mut(&call_id) {
                let _ = racing.race.adopt_pooled(now, conn);
            }
            self.stop_race(now, call_id);
            self.assign(now, call_id, conn, source);
            ended_races = true;
        }
        // A race ended: calls that waited for it (one handshake per HTTP/2
        // origin) may race themselves now.
        if ended_races && self.addrs.get(address).is_some_and(|a| a.waiters > 0) {
            self.rebalance(now, address);
        }
    }

    pub(super) fn end_call_waiting_or_racing(&mut self, now: Instant, call_id: CallId) {
        let Some(call) = self.calls.get(&call_id) else {
            return;
        };
        match call.state {
            CallState::Waiting { seq, deadline, .. } => {
                let address = call.address.clone();
                self.waiters.remove(&seq);
                self.timers.remove(deadline, Timer::Wait(call_id));
                if let Some(a) = self.addrs.get_mut(&address) {
                    a.waiters -= 1;
                }
                self.gc_address(&address);
                self.calls.get_mut(&call_id).expect("call exists").state = CallState::Pending;
            }
            CallState::Racing(_) => self.stop_race(now, call_id),
            _ => {}
        }
    }
}
