//! Counts and counters, kept incrementally; [`Pool::recount`] and
//! [`Pool::check_invariants`] recompute them from scratch for tests.

use std::collections::BTreeMap;

use super::timers::Timer;
use super::{CallState, Pool};
use crate::address::Address;
use crate::connection::CloseReason;
use crate::hash::FastMap;
use crate::id::ConnectionId;

/// Per-Address counts.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct AddressStats {
    /// Races in progress (each will make at most one connection), and attempts
    /// kept for the pool after their call took another connection.
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

/// Per-Address counters, kept since the pool first saw the Address (an
/// Address with nothing open, connecting or waiting, and no retry budget
/// activity in its window, is forgotten with them: a scraper sees a reset).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct AddressCounters {
    /// Calls made (first asks; retries not counted).
    pub calls: u64,
    /// Connections established.
    pub created: u64,
    /// Connections closed, by reason.
    pub closed: BTreeMap<CloseReason, u64>,
    /// Retries started.
    pub retries: u64,
    /// Retries refused by the retry budget.
    pub retries_over_budget: u64,
    /// Ejections of its routes ([`crate::OutlierPolicy`]).
    pub ejections: u64,
    /// Exchanges its connections carried after their first (pooled or
    /// shared reuse, coalesced calls included).
    pub reused: u64,
}

/// One Address's gauges and counters ([`Pool::stats_by_address`]).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct AddressMetrics {
    /// The Address.
    pub address: Address,
    /// Its gauges now.
    pub gauges: AddressStats,
    /// Its counters.
    pub counters: AddressCounters,
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
    /// TCP connects started (every attempt, including ones later cancelled).
    pub tcp_connects: u64,
    /// TLS handshakes started.
    pub tls_handshakes: u64,
    /// Connections that carried at least one exchange.
    pub used: u64,
    /// Connects thrown away after TCP completed: cancelled while handshaking
    /// (the call was cancelled or timed out) or closed as a duplicate.
    pub wasted: u64,
    /// Connections that joined the pool without a call: their call took a
    /// pooled connection while they were handshaking (counted in `created`).
    pub joined_idle: u64,
    /// DNS queries asked of the resolver ([`PoolAction::Resolve`]).
    ///
    /// [`PoolAction::Resolve`]: crate::PoolAction::Resolve
    pub dns_lookups: u64,
    /// Lookups answered from the DNS cache.
    pub dns_cache_hits: u64,
    /// Lookups that shared another call's query in flight.
    pub dns_shared: u64,
    /// Names looked up again because pooled connections were made from
    /// them and their answers expired ([`crate::pool::refresh`]).
    pub dns_refreshes: u64,
    /// Connections drained because their address left DNS
    /// ([`CloseReason::DnsChanged`]).
    pub dns_drained: u64,
    /// HTTP/2 keep-alive PINGs sent ([`PoolConfig::ping_interval`](crate::PoolConfig::ping_interval)).
    pub keepalive_pings: u64,
    /// Retries started (free ones included; they are never refused).
    pub retries: u64,
    /// Retries refused because their Address's retry budget was spent
    /// ([`NoRetry::RetryBudget`](crate::pool::NoRetry::RetryBudget)).
    pub retries_over_budget: u64,
    /// Routes ejected after failures in a row ([`crate::OutlierPolicy`]).
    pub ejections: u64,
    /// Ejected routes restored: a success after the backoff, or no use of
    /// the route for the backoff's maximum after it.
    pub restorations: u64,
    /// Routes ejected now.
    pub ejected_routes: usize,
}

impl Pool {
    /// Counts per Address (all zero for an Address the pool does not know).
    #[must_use]
    pub fn address_stats(&self, address: &Address) -> AddressStats {
        self.addrs.get(address).map_or_else(AddressStats::default, |a| AddressStats {
            connecting: a.racing.len() + a.kept,
            idle: a.idle.len(),
            in_use: a.in_use,
            open: a.open,
            waiters: a.waiters,
        })
    }

    /// Every Address the pool holds state for, with its gauges and
    /// counters, in the order of their names (`scheme://host:port`, then
    /// the rest of the key): O(Addresses). For metrics
    /// (`http.client.open_connections` by `state`, per server).
    #[must_use]
    pub fn stats_by_address(&self) -> Vec<AddressMetrics> {
        let mut all: Vec<AddressMetrics> = self
            .addrs
            .iter()
            .map(|(address, a)| AddressMetrics {
                address: address.clone(),
                gauges: self.address_stats(address),
                counters: a.counters.clone(),
            })
            .collect();
        // Exchanges after the first on connections still open.
        let mut open_reuse: FastMap<&Address, u64> = FastMap::default();
        for c in self.conns.values() {
            *open_reuse.entry(&c.address).or_default() += c.assigned.saturating_sub(1);
        }
        for m in &mut all {
            m.counters.reused += open_reuse.get(&m.address).copied().unwrap_or(0);
        }
        all.sort_by_cached_key(|m| (m.address.to_string(), format!("{:?}", m.address)));
        all
    }

    /// How many connections carry an exchange now (HTTP/1.1 leased, HTTP/2
    /// with a stream open): more than one means calls run concurrently.
    #[must_use]
    pub fn in_use(&self) -> usize {
        self.in_use_total
    }

    /// Pool-wide counts and counters, kept incrementally (O(1)).
    #[must_use]
    pub fn stats(&self) -> PoolStats {
        let mut s = self.stats.clone();
        s.totals = AddressStats {
            connecting: self.racing_total + self.kept.len(),
            idle: self.idle_all.len(),
            in_use: self.in_use_total,
            open: self.open_total,
            waiters: self.waiters.len(),
        };
        s.calls = self.calls.len();
        s.ejected_routes = self.db.ejected();
        s
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
                CallState::Racing(_) => t.connecting += 1,
                CallState::Waiting { .. } => t.waiters += 1,
                _ => {}
            }
        }
        t.connecting += self.kept.len();
        s.totals = t;
        s.calls = self.calls.len();
        s.ejected_routes = self.db.ejected();
        s
    }

    /// Checks the pool's internal invariants, for tests: every index agrees with
    /// the records, no HTTP/1 connection carries two exchanges, no HTTP/2 connection
    /// carries more than its limit, no cap is exceeded, every active call's
    /// connection is open. Returns the first violation.
    pub fn check_invariants(&self) -> Result<(), String> {
        if self.stats() != self.recount() {
            return Err(format!("stats {:?} != recount {:?}", self.stats(), self.recount()));
        }
        let zero = self.conns.values().filter(|c| c.allows_no_stream()).count();
        if zero != self.zero_stream_conns {
            return Err(format!("{zero} zero-stream connections, counted {}", self.zero_stream_conns));
        }
        // The per-host maps' bounds (documented on the constants): the
        // Address map is swept each time it doubles (declared Addresses may
        // join between sweeps).
        if self.addrs.len() > self.addrs_sweep_at + 1 + self.warm.len() {
            return Err(format!(
                "{} Addresses tracked, sweep due at {}",
                self.addrs.len(),
                self.addrs_sweep_at
            ));
        }
        if self.known_protocol.len() > 64 + 2 * super::evict::KNOWN_PROTOCOLS_KEPT + 1 {
            return Err(format!("{} known protocols: past the bound", self.known_protocol.len()));
        }
        if self.dns.len() > self.config.dns_cache.capacity {
            return Err(format!("{} DNS answers cached: past the capacity", self.dns.len()));
        }
        let mut active: BTreeMap<ConnectionId, u32> = BTreeMap::new();
        for (id, c) in &self.calls {
            if let CallState::Active { connection, .. } = c.state {
                let Some(conn) = self.conns.get(&connection) else {
                    return Err(format!("{id} holds closed {connection}"));
                };
                if conn.address != c.address && !conn.address.equal_except_host(&c.address) {
                    return Err(format!("{id} holds {connection} for another Address"));
                }
                *active.entry(connection).or_default() += 1;
            }
        }
        self.conns.check()?;
        for c in self.conns.values() {
            let id = &c.id;
            let n = active.get(id).copied().unwrap_or(0);
            if n != c.in_flight {
                return Err(format!("{id}: in_flight {} but {n} active calls", c.in_flight));
            }
            if !c.multiplexed() && c.in_flight > 1 {
                return Err(format!("{id}: HTTP/1 with {} exchanges", c.in_flight));
            }
            let a = &self.addrs[&c.address];
            let idle_key = c.idle_since.map(|s| (s, *id));
            let indexed_idle = idle_key.is_some_and(|k| {
                a.idle.contains(&k) && self.idle_all.contains(&k, |k| super::idle_live(&self.conns, k))
            });
            if c.is_idle() != indexed_idle {
                return Err(format!("{id}: idle index disagrees"));
            }
            if c.shareable() != a.shareable.contains(id) {
                return Err(format!("{id}: shareable index disagrees"));
            }
        }
        self.idle_all.check(|k| super::idle_live(&self.conns, k))?;
        for (address, a) in &self.addrs {
            if let Some(max) = self.config.max_connections_per_address {
                if a.open + a.racing.len() + a.kept > max {
                    return Err(format!(
                        "{address}: {} open + {} connecting > {max}",
                        a.open,
                        a.racing.len() + a.kept
                    ));
                }
            }
            // Idle above the per-Address cap is allowed for the grace period only.
            let grace = self.config.idle_cap_grace;
            if a.idle.len() > self.config.max_idle_per_address {
                // The oldest has a check scheduled; each check handles the next.
                let (since, id) = a.idle.first().copied().expect("over the cap: not empty");
                if !self.timers.contains(since + grace, Timer::Trim(id)) {
                    return Err(format!("{address}: {id} idle over the cap without a trim check"));
                }
            }
        }
        if let Some(max) = self.config.max_connections_total {
            let connecting = self.racing_total + self.kept.len();
            if self.open_total + connecting > max {
                return Err(format!("{} open + {connecting} connecting > {max}", self.open_total));
            }
        }
        if let Some(max) = self.config.max_idle_total {
            if self.idle_all.len() > max {
                return Err("over the total idle cap".into());
            }
        }
        Ok(())
    }
}
