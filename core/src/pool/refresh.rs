//! DNS refresh and drain: names that pooled connections were made from are
//! looked up again as their cached answers expire (no call waits for it),
//! and a connection whose IP address the answers have stopped giving takes
//! no new exchanges ([`CloseReason::DnsChanged`]) and closes once idle, so
//! calls move to the addresses DNS gives now (a blue/green switch, a
//! scaled-in instance, a failover record).
//!
//! Absence must be sustained: every completed lookup of the name (a
//! refresh, or a call's own) that gives a connection's address marks it
//! seen, and a lookup that does not drains it only once nothing has named
//! it for the grace period — the longer of [`PoolConfig::dns_drain_grace`]
//! (60 s) and three times the answer's time to live. Names that answer each
//! query with a few of many addresses (object stores, CDNs, cloud load
//! balancers) keep naming every address that serves, so their connections
//! stay; and a lookup made for one call does not close a connection another
//! call can use on the strength of one answer.
//!
//! Bounded: a refresh round runs at most once per second
//! ([`REFRESH_GAP`]) and asks at most [`REFRESH_BATCH`] names; a name is
//! asked again only once its answer has expired (its time to live, or the
//! cache's default of 60 s). Only direct connections count (a proxy resolves
//! for itself), and only for the address families the new answer has: an
//! answer without IPv6 addresses says nothing about an IPv6 connection.

use super::*;
use crate::dns::CacheKey;

/// The least time between two refresh rounds.
pub const REFRESH_GAP: std::time::Duration = std::time::Duration::from_secs(1);
/// The most names one refresh round asks for.
pub const REFRESH_BATCH: usize = 16;

/// The DNS cache key a connection's route came from: direct connections to
/// a named host only.
fn dns_key(c: &Connection) -> Option<CacheKey> {
    if c.address.skips_dns()
        || !matches!(c.address.host(), Host::Domain(_))
        || *c.route.proxy() != Proxy::Direct
    {
        return None;
    }
    Some((c.address.resolver_identity(), c.address.host().clone(), c.address.port()))
}

impl Pool {
    /// A lookup completed with these addresses: connections made from the
    /// same name to an address among them are seen again; ones to an address
    /// no answer has given for the grace period drain (families the answer
    /// has only).
    pub(super) fn drain_moved(&mut self, now: Instant, key: &CacheKey, ips: &[IpAddr]) {
        if self.open_total == 0 {
            return;
        }
        let (v4, v6) = (ips.iter().any(IpAddr::is_ipv4), ips.iter().any(IpAddr::is_ipv6));
        let ttl =
            self.dns.expires_at(key).map_or(std::time::Duration::ZERO, |t| t.saturating_duration_since(now));
        let grace = self.config.dns_drain_grace.max(ttl.saturating_mul(3));
        let mut moved: Vec<ConnectionId> = Vec::new();
        for c in self.conns.values_mut() {
            if c.no_new.is_some() || dns_key(c).as_ref() != Some(key) {
                continue;
            }
            let ip = c.route.socket_addr().ip();
            if ips.contains(&ip) {
                c.dns_seen = now;
            } else if (if ip.is_ipv4() { v4 } else { v6 })
                && now.saturating_duration_since(c.dns_seen) >= grace
            {
                moved.push(c.id);
            }
        }
        moved.sort_unstable();
        for id in moved {
            self.stats.dns_drained += 1;
            self.retire(now, id, CloseReason::DnsChanged);
        }
    }

    /// A new connection from a DNS answer: its name will be looked up again
    /// when the answer expires (arms the refresh round if it is not armed).
    pub(super) fn watch_dns(&mut self, now: Instant, id: ConnectionId) {
        if !self.config.dns_refresh || self.dns_refresh_at.is_some() || self.config.dns_cache.capacity == 0 {
            return;
        }
        let Some(key) = self.conns.get(&id).and_then(dns_key) else { return };
        let due = self.dns.expires_at(&key).unwrap_or(now).max(now + REFRESH_GAP);
        self.dns_refresh_at = Some(due);
        self.timers.insert(due, Timer::DnsRefresh);
    }

    /// A refresh round: every name with a connection that still takes
    /// exchanges and whose answer has expired is asked again (up to
    /// [`REFRESH_BATCH`]); the next round is due when the earliest answer
    /// still fresh expires, and never sooner than [`REFRESH_GAP`].
    pub(super) fn refresh_dns(&mut self, now: Instant) {
        self.dns_refresh_at = None;
        if !self.config.dns_refresh || self.shutdown {
            return;
        }
        let keys: BTreeSet<CacheKey> =
            self.conns.values().filter(|c| c.no_new.is_none()).filter_map(dns_key).collect();
        if keys.is_empty() {
            return;
        }
        let mut next: Option<Instant> = None;
        let mut asked = 0;
        for key in keys {
            match self.dns.expires_at(&key) {
                Some(t) if t > now => next = earliest(next, Some(t)),
                _ if self.dns.in_flight(&key) => {}
                _ if asked >= REFRESH_BATCH => next = Some(now),
                _ => {
                    // A query of no call: its answer is cached, drains, and
                    // goes to any call that shares it meanwhile.
                    let query = QueryId::new(self.ids.next_call(), 0);
                    if let Lookup::Miss = self.dns.lookup(key.clone(), query, now) {
                        asked += 1;
                        self.stats.dns_refreshes += 1;
                        let (_, host, port) = key;
                        self.actions.push_back(PoolAction::Resolve {
                            query,
                            host,
                            port,
                            proxy: Box::new(Proxy::Direct),
                        });
                    }
                }
            }
        }
        let due = next.unwrap_or(now).max(now + REFRESH_GAP);
        self.dns_refresh_at = Some(due);
        self.timers.insert(due, Timer::DnsRefresh);
    }
}
