//! DNS answers as the core takes them, and the pool's DNS cache.
//!
//! # Answers, whole or per family
//!
//! The embedder answers a [`PoolAction::Resolve`](crate::PoolAction::Resolve) with
//! [`Pool::handle_dns`](crate::Pool::handle_dns) (every address at once, as
//! `getaddrinfo` gives them) or with [`Pool::handle_dns_answer`](crate::Pool::handle_dns_answer),
//! which also takes one [`DnsAnswer`] per address family — the A and the AAAA query
//! of a resolver that sends them separately, each as it arrives — and the answer's
//! time to live. Per-family answers feed the race as RFC 8305 §3 asks:
//!
//! * the preferred family's answer (AAAA by default) starts attempts at once;
//! * the other family's answer, when it comes first, is held for the resolution
//!   delay ([`PlanConfig::resolution_delay`](crate::PlanConfig::resolution_delay),
//!   50 ms) waiting for the preferred one; if that comes in time the two are
//!   interleaved, otherwise the held addresses are used alone;
//! * a family that answers late joins the running race: its routes are
//!   interleaved with the routes not yet tried, the late family first;
//! * a family that fails or has no addresses does not fail the lookup while the
//!   other one can still answer; the lookup fails when both have failed.
//!
//! > "If a positive A response is received first due to reordering, the client
//! > SHOULD wait a short time for the AAAA response to ensure that preference is
//! > given to IPv6" — [RFC 8305 §3](https://www.rfc-editor.org/rfc/rfc8305#section-3)
//!
//! # The cache
//!
//! The pool keeps the answers it is given, per resolver, name and port
//! ([`DnsCacheConfig`]): positive answers for their time to live (the resolver's,
//! or [`DnsCacheConfig::default_ttl`] when it gives none, as `getaddrinfo` does),
//! failures for [`DnsCacheConfig::negative_ttl`] (a timeout is not cached), at most
//! [`DnsCacheConfig::capacity`] names, the least recently used evicted first. A
//! lookup already in flight for a name is shared: a second call waits for its
//! answer instead of asking again. Every call of the pool — a retry too — uses the
//! cache; the [`DnsSource`] in `DnsStart`, `DnsEnd` and `DnsFailed` says where an
//! answer came from. A route that fails does not evict its answer: the
//! [`RouteDatabase`](crate::RouteDatabase) postpones the route instead.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use crate::address::{Host, ResolverIdentity};
use crate::error::DnsError;
use crate::id::QueryId;
use crate::time::Instant;

/// An IP address family.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum Family {
    /// IPv6 (RFC 8305's default preference).
    #[default]
    V6,
    /// IPv4.
    V4,
}

impl Family {
    /// The family of `ip`.
    #[must_use]
    pub fn of(ip: &IpAddr) -> Family {
        match ip {
            IpAddr::V6(_) => Family::V6,
            IpAddr::V4(_) => Family::V4,
        }
    }
}

/// Where a DNS answer came from, in `DnsStart`, `DnsEnd` and `DnsFailed` events.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum DnsSource {
    /// A query to the resolver, started for this call.
    #[default]
    Lookup,
    /// The pool's cache: no query was sent.
    Cache,
    /// Another call's query for the same name, already in flight, shared.
    Shared,
}

impl DnsSource {
    /// A short word for logs: `lookup`, `cache`, `shared`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            DnsSource::Lookup => "lookup",
            DnsSource::Cache => "cache",
            DnsSource::Shared => "shared",
        }
    }
}

impl fmt::Display for DnsSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One answer to a [`PoolAction::Resolve`](crate::PoolAction::Resolve): every
/// address, or one family's.
///
/// ```
/// use std::time::Duration;
/// # use switchyard_core::{DnsAnswer, Family};
/// // getaddrinfo: every address at once, no time to live.
/// let all = DnsAnswer::all(Ok(vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()]));
/// assert_eq!(all.family, None);
/// // A resolver that sends AAAA and A separately answers twice.
/// let aaaa = DnsAnswer::family(Family::V6, Ok(vec!["::1".parse().unwrap()]))
///     .with_ttl(Duration::from_secs(300));
/// assert_eq!(aaaa.ttl, Some(Duration::from_secs(300)));
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DnsAnswer {
    /// The family this answer is for; `None`: every family (the lookup is
    /// complete with this answer).
    pub family: Option<Family>,
    /// The addresses, in the resolver's order, or why there are none. An empty
    /// list is [`DnsError::NoAddresses`].
    pub result: Result<Vec<IpAddr>, DnsError>,
    /// How long the answer may be cached; `None`: the cache's default.
    pub ttl: Option<Duration>,
}

impl DnsAnswer {
    /// Every address at once (the lookup is complete).
    #[must_use]
    pub fn all(result: Result<Vec<IpAddr>, DnsError>) -> DnsAnswer {
        DnsAnswer { family: None, result, ttl: None }
    }

    /// One family's answer; the lookup completes when both families have answered.
    /// Addresses of the other family in `result` are ignored.
    #[must_use]
    pub fn family(family: Family, result: Result<Vec<IpAddr>, DnsError>) -> DnsAnswer {
        DnsAnswer { family: Some(family), result, ttl: None }
    }

    /// With the resolver's time to live.
    #[must_use]
    pub fn with_ttl(mut self, ttl: Duration) -> DnsAnswer {
        self.ttl = Some(ttl);
        self
    }

    /// The answer with only its family's addresses, an empty list as
    /// [`DnsError::NoAddresses`].
    pub(crate) fn normalized(mut self) -> DnsAnswer {
        if let (Some(family), Ok(ips)) = (self.family, &mut self.result) {
            ips.retain(|ip| Family::of(ip) == family);
        }
        if matches!(&self.result, Ok(ips) if ips.is_empty()) {
            self.result = Err(DnsError::NoAddresses);
        }
        self
    }
}

/// How the pool caches DNS answers. See the [module docs](self).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct DnsCacheConfig {
    /// How long an answer without a time to live (the system resolver's) is
    /// kept. Default: 60 s.
    pub default_ttl: Duration,
    /// The longest any positive answer is kept, whatever its time to live.
    /// Default: 1 h.
    pub max_ttl: Duration,
    /// How long a failed lookup (no addresses, NXDOMAIN, a resolver error; not a
    /// timeout) is kept, so a name that does not resolve is not asked again on
    /// every call. Default: 5 s.
    pub negative_ttl: Duration,
    /// Names kept at most; past it the least recently used is evicted. `0`
    /// turns caching off (in-flight lookups are still shared). Default: 256.
    pub capacity: usize,
}

impl Default for DnsCacheConfig {
    fn default() -> Self {
        DnsCacheConfig {
            default_ttl: Duration::from_secs(60),
            max_ttl: Duration::from_secs(3600),
            negative_ttl: Duration::from_secs(5),
            capacity: 256,
        }
    }
}

/// What the cache is keyed by: a resolver, a name and the port it was resolved for.
pub(crate) type CacheKey = (ResolverIdentity, Host, u16);

#[derive(Clone, Debug)]
struct Entry {
    result: Result<Vec<IpAddr>, DnsError>,
    expires: Instant,
    used: u64,
}

/// A lookup in flight: the query sent to the resolver, the calls sharing it, and
/// the family answers received so far (replayed to a call that joins late).
#[derive(Clone, Debug)]
pub(crate) struct InFlight {
    pub(crate) key: CacheKey,
    pub(crate) followers: Vec<QueryId>,
    pub(crate) parts: Vec<DnsAnswer>,
}

/// What the cache says about a name.
pub(crate) enum Lookup {
    /// A fresh cached answer.
    Cached(Result<Vec<IpAddr>, DnsError>),
    /// A query for it is in flight; these family answers have arrived already.
    InFlight(Vec<DnsAnswer>),
    /// Nothing: send a query.
    Miss,
}

/// The pool's DNS cache and its in-flight lookups. Deterministic: ordered maps
/// only, eviction by a use counter.
#[derive(Debug, Default)]
pub(crate) struct DnsCache {
    config: DnsCacheConfig,
    entries: BTreeMap<CacheKey, Entry>,
    /// Use order, oldest first: the counter of the last use → key.
    lru: BTreeMap<u64, CacheKey>,
    tick: u64,
    /// Leader query → lookup.
    inflight: BTreeMap<QueryId, InFlight>,
    /// Key → leader query.
    inflight_keys: BTreeMap<CacheKey, QueryId>,
    /// The addresses of the last lookup that completed with any, until the
    /// pool takes them (to drain connections to addresses that left DNS).
    completed: Option<(CacheKey, Vec<IpAddr>)>,
}

impl DnsCache {
    pub(crate) fn new(config: DnsCacheConfig) -> DnsCache {
        DnsCache { config, ..DnsCache::default() }
    }

    /// Names cached (fresh or not yet swept).
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.lru.clear();
    }

    /// Looks `key` up at `now`; a `Miss` registers `query` as the lookup's
    /// leader, an `InFlight` registers it as a follower.
    pub(crate) fn lookup(&mut self, key: CacheKey, query: QueryId, now: Instant) -> Lookup {
        if let Some(entry) = self.entries.get_mut(&key) {
            if now < entry.expires {
                self.lru.remove(&entry.used);
                self.tick += 1;
                entry.used = self.tick;
                self.lru.insert(self.tick, key);
                return Lookup::Cached(entry.result.clone());
            }
            let used = entry.used;
            self.entries.remove(&key);
            self.lru.remove(&used);
        }
        if let Some(leader) = self.inflight_keys.get(&key) {
            let flight = self.inflight.get_mut(leader).expect("inflight maps agree");
            flight.followers.push(query);
            return Lookup::InFlight(flight.parts.clone());
        }
        self.inflight_keys.insert(key.clone(), query);
        self.inflight.insert(query, InFlight { key, followers: Vec::new(), parts: Vec::new() });
        Lookup::Miss
    }

    /// The addresses of the lookup that just completed, if it gave any.
    pub(crate) fn take_completed(&mut self) -> Option<(CacheKey, Vec<IpAddr>)> {
        self.completed.take()
    }

    /// When `key`'s cached answer expires (`None`: not cached).
    pub(crate) fn expires_at(&self, key: &CacheKey) -> Option<Instant> {
        self.entries.get(key).map(|e| e.expires)
    }

    /// The addresses `key`'s cached answer gives (fresh or not yet swept).
    pub(crate) fn ips(&self, key: &CacheKey) -> Option<&[IpAddr]> {
        self.entries.get(key).and_then(|e| e.result.as_deref().ok())
    }

    /// Whether a lookup for `key` is in flight.
    pub(crate) fn in_flight(&self, key: &CacheKey) -> bool {
        self.inflight_keys.contains_key(key)
    }

    /// Whether `query` leads a lookup in flight.
    #[cfg(test)]
    pub(crate) fn is_leader(&self, query: QueryId) -> bool {
        self.inflight.contains_key(&query)
    }

    /// Records an answer to the leader `query`: returns the followers to pass it
    /// to, and caches the whole answer once the lookup is complete. `None` when
    /// `query` leads no lookup.
    pub(crate) fn answered(
        &mut self,
        query: QueryId,
        answer: &DnsAnswer,
        now: Instant,
    ) -> Option<Vec<QueryId>> {
        let flight = self.inflight.get_mut(&query)?;
        if let Some(family) = answer.family {
            if flight.parts.iter().any(|p| p.family == Some(family)) {
                return Some(Vec::new()); // a repeated family answer
            }
        }
        flight.parts.push(answer.clone());
        let followers = flight.followers.clone();
        let complete = answer.family.is_none()
            || (flight.parts.iter().any(|p| p.family == Some(Family::V6))
                && flight.parts.iter().any(|p| p.family == Some(Family::V4)));
        if complete {
            let flight = self.inflight.remove(&query).expect("present");
            self.inflight_keys.remove(&flight.key);
            let ips: Vec<IpAddr> =
                flight.parts.iter().filter_map(|p| p.result.as_ref().ok()).flatten().copied().collect();
            self.completed = (!ips.is_empty()).then(|| (flight.key.clone(), ips));
            if let Some((result, ttl)) = self.combine(&flight.parts) {
                self.insert(flight.key, result, now + ttl);
            }
        }
        Some(followers)
    }

    /// The whole answer of a complete lookup and how long to keep it; `None`
    /// when it must not be cached (a timeout, a zero time to live).
    fn combine(&self, parts: &[DnsAnswer]) -> Option<(Result<Vec<IpAddr>, DnsError>, Duration)> {
        let c = &self.config;
        let mut addresses = Vec::new();
        let mut ttl: Option<Duration> = None;
        let mut error: Option<DnsError> = None;
        let mut family_failed = false;
        // The preferred order inside the cache is the resolver's; v6 parts first
        // when they came per family (the planner orders them anyway).
        let mut ordered: Vec<&DnsAnswer> = parts.iter().collect();
        ordered.sort_by_key(|p| p.family.map(|f| f != Family::V6));
        for part in ordered {
            match &part.result {
                Ok(ips) => {
                    addresses.extend(ips.iter().copied());
                    let t = part.ttl.unwrap_or(c.default_ttl);
                    ttl = Some(ttl.map_or(t, |old| old.min(t)));
                }
                Err(e) => {
                    if !matches!(e, DnsError::NoAddresses) {
                        family_failed = true;
                    }
                    error = Some(match (error, e) {
                        (None, e) | (Some(DnsError::NoAddresses), e) => e.clone(),
                        (Some(kept), _) => kept,
                    });
                }
            }
        }
        let (result, keep) = if addresses.is_empty() {
            let error = error.unwrap_or(DnsError::NoAddresses);
            if error == DnsError::Timeout {
                return None;
            }
            (Err(error), c.negative_ttl)
        } else {
            let mut keep = ttl.unwrap_or(c.default_ttl).min(c.max_ttl);
            if family_failed {
                // One family failed for a reason other than "none": keep the
                // other's answer no longer than a failure, so the failed family
                // is asked again soon.
                keep = keep.min(c.negative_ttl);
            }
            (Ok(addresses), keep)
        };
        (self.config.capacity > 0 && !keep.is_zero()).then_some((result, keep))
    }

    fn insert(&mut self, key: CacheKey, result: Result<Vec<IpAddr>, DnsError>, expires: Instant) {
        if let Some(old) = self.entries.remove(&key) {
            self.lru.remove(&old.used);
        }
        while self.entries.len() >= self.config.capacity {
            let Some((_, oldest)) = self.lru.pop_first() else { break };
            self.entries.remove(&oldest);
        }
        self.tick += 1;
        self.lru.insert(self.tick, key.clone());
        self.entries.insert(key, Entry { result, expires, used: self.tick });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::IdAllocator;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn key(name: &str) -> CacheKey {
        (ResolverIdentity(0), Host::Domain(name.into()), 443)
    }

    #[test]
    fn lookups_share_and_complete_per_family() {
        let mut ids = IdAllocator::default();
        let (c1, c2) = (ids.next_call(), ids.next_call());
        let (q1, q2) = (QueryId::new(c1, 0), QueryId::new(c2, 0));
        let mut cache = DnsCache::new(DnsCacheConfig::default());
        let t0 = Instant::ZERO;
        assert!(matches!(cache.lookup(key("a.test"), q1, t0), Lookup::Miss));
        let aaaa = DnsAnswer::family(Family::V6, Ok(vec![ip("fd00::1")])).with_ttl(Duration::from_secs(30));
        assert_eq!(cache.answered(q1, &aaaa, t0), Some(vec![]));
        // A second call joins and is given the part already received.
        match cache.lookup(key("a.test"), q2, t0) {
            Lookup::InFlight(parts) => assert_eq!(parts, vec![aaaa.clone()]),
            _ => panic!("expected to join"),
        }
        let a = DnsAnswer::family(Family::V4, Ok(vec![ip("10.0.0.1")])).with_ttl(Duration::from_secs(90));
        assert_eq!(cache.answered(q1, &a, t0), Some(vec![q2]));
        assert!(!cache.is_leader(q1));
        // Cached for the shorter TTL, v6 first.
        let q3 = QueryId::new(c1, 1);
        match cache.lookup(key("a.test"), q3, t0 + Duration::from_secs(29)) {
            Lookup::Cached(Ok(ips)) => assert_eq!(ips, vec![ip("fd00::1"), ip("10.0.0.1")]),
            _ => panic!("expected a cached answer"),
        }
        assert!(matches!(cache.lookup(key("a.test"), q3, t0 + Duration::from_secs(30)), Lookup::Miss));
    }

    #[test]
    fn negative_answers_timeouts_and_partial_failures() {
        let mut ids = IdAllocator::default();
        let call = ids.next_call();
        let q = |n| QueryId::new(call, n);
        let config = DnsCacheConfig::default();
        let mut cache = DnsCache::new(config);
        let t0 = Instant::ZERO;
        // NXDOMAIN: kept for the negative TTL.
        let _ = cache.lookup(key("nx.test"), q(0), t0);
        let nx = DnsAnswer::all(Err(DnsError::Failed { message: "NXDOMAIN".into() }));
        cache.answered(q(0), &nx, t0);
        assert!(matches!(
            cache.lookup(key("nx.test"), q(1), t0 + config.negative_ttl / 2),
            Lookup::Cached(Err(_))
        ));
        assert!(matches!(cache.lookup(key("nx.test"), q(2), t0 + config.negative_ttl), Lookup::Miss));
        // A timeout is not cached.
        let _ = cache.lookup(key("slow.test"), q(3), t0);
        cache.answered(q(3), &DnsAnswer::all(Err(DnsError::Timeout)), t0);
        assert!(matches!(cache.lookup(key("slow.test"), q(4), t0), Lookup::Miss));
        // AAAA failed with an error, A answered: A kept only for the negative TTL.
        let _ = cache.lookup(key("half.test"), q(5), t0);
        cache.answered(q(5), &DnsAnswer::family(Family::V6, Err(DnsError::Timeout)), t0);
        cache.answered(q(5), &DnsAnswer::family(Family::V4, Ok(vec![ip("10.0.0.1")])), t0);
        assert!(matches!(
            cache.lookup(key("half.test"), q(6), t0 + config.negative_ttl / 2),
            Lookup::Cached(Ok(_))
        ));
        assert!(matches!(cache.lookup(key("half.test"), q(7), t0 + config.negative_ttl), Lookup::Miss));
        // AAAA had no records (a normal answer): A kept for the default TTL.
        let _ = cache.lookup(key("v4.test"), q(8), t0);
        cache.answered(q(8), &DnsAnswer::family(Family::V6, Err(DnsError::NoAddresses)), t0);
        cache.answered(q(8), &DnsAnswer::family(Family::V4, Ok(vec![ip("10.0.0.1")])), t0);
        let later = t0 + (config.default_ttl - Duration::from_millis(1));
        assert!(matches!(cache.lookup(key("v4.test"), q(9), later), Lookup::Cached(Ok(_))));
        // A TTL above the cap is capped.
        let _ = cache.lookup(key("long.test"), q(10), t0);
        let long = DnsAnswer::all(Ok(vec![ip("10.0.0.2")])).with_ttl(Duration::from_secs(86_400));
        cache.answered(q(10), &long, t0);
        assert!(matches!(cache.lookup(key("long.test"), q(11), t0 + config.max_ttl), Lookup::Miss));
    }

    #[test]
    fn bounded_least_recently_used_first_and_off_at_zero() {
        let mut ids = IdAllocator::default();
        let call = ids.next_call();
        let mut n = 0;
        let mut q = || {
            n += 1;
            QueryId::new(call, n)
        };
        let mut cache = DnsCache::new(DnsCacheConfig { capacity: 2, ..DnsCacheConfig::default() });
        let t0 = Instant::ZERO;
        for name in ["a.test", "b.test"] {
            let query = q();
            let _ = cache.lookup(key(name), query, t0);
            cache.answered(query, &DnsAnswer::all(Ok(vec![ip("10.0.0.1")])), t0);
        }
        // Using a.test makes b.test the least recently used.
        assert!(matches!(cache.lookup(key("a.test"), q(), t0), Lookup::Cached(_)));
        let query = q();
        let _ = cache.lookup(key("c.test"), query, t0);
        cache.answered(query, &DnsAnswer::all(Ok(vec![ip("10.0.0.3")])), t0);
        assert_eq!(cache.len(), 2);
        assert!(matches!(cache.lookup(key("a.test"), q(), t0), Lookup::Cached(_)));
        assert!(matches!(cache.lookup(key("b.test"), q(), t0), Lookup::Miss));

        let mut off = DnsCache::new(DnsCacheConfig { capacity: 0, ..DnsCacheConfig::default() });
        let query = q();
        let _ = off.lookup(key("a.test"), query, t0);
        off.answered(query, &DnsAnswer::all(Ok(vec![ip("10.0.0.1")])), t0);
        assert_eq!(off.len(), 0);
    }
}
