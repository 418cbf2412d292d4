//! The route database: routes that failed recently, and (with the
//! outliers beside it, [`crate::outlier`]) routes ejected after failures in
//! a row. The planner asks it which routes go last.

use std::time::Duration;

use crate::dns::Family;
use crate::h3_race::{QuicBackoff, QuicMemory};
use crate::hash::FastMap;
use crate::outlier::{OutlierChange, OutlierPolicy, Outliers};
use crate::route::Route;
use crate::time::Instant;

/// Routes that failed recently, and routes ejected after failures in a row
/// ([`crate::OutlierPolicy`]). They are tried last, never skipped.
///
/// Records TCP-connect and handshake failures and timeouts, and attempts that were
/// cancelled after running at least the attempt delay because a later route won
/// (a black hole rarely fails; it just never answers). An entry is forgotten after
/// the TTL (default 10 minutes) or on the next success of that route. The table is
/// bounded: past `capacity` entries, expired ones are dropped, then the oldest.
///
/// ```
/// # use switchyard_core::{Address, Instant, Proxy, Route, RouteDatabase, Scheme};
/// use std::time::Duration;
/// let a = Address::builder(Scheme::Http, "example.com", 80).build().unwrap();
/// let route = Route::new(a, Proxy::Direct, "127.0.0.1:80".parse().unwrap());
/// let mut db = RouteDatabase::new(Duration::from_secs(600));
/// db.failed(&route, Instant::from_millis(0));
/// assert!(db.should_postpone(&route, Instant::from_millis(599_999)));
/// assert!(!db.should_postpone(&route, Instant::from_millis(600_000)));
/// db.failed(&route, Instant::from_millis(1));
/// db.connected(&route);
/// assert!(!db.should_postpone(&route, Instant::from_millis(2)));
/// ```
#[derive(Debug, Clone)]
pub struct RouteDatabase {
    ttl: Duration,
    capacity: usize,
    // Lookup only; nothing is emitted in this map's order.
    failed: FastMap<Route, Instant>,
    outliers: Outliers,
    /// Per address family, whether QUIC failed there lately: its QUIC
    /// routes go last until its backoff ends ([`QuicMemory`]).
    quic: QuicMemory,
    quic_backoff: QuicBackoff,
}

impl Default for RouteDatabase {
    fn default() -> Self {
        RouteDatabase::new(RouteDatabase::DEFAULT_TTL)
    }
}

impl RouteDatabase {
    /// How long a failure postpones a route by default: 10 minutes.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(600);
    /// How many failed routes are remembered by default.
    pub const DEFAULT_CAPACITY: usize = 4096;

    /// An empty database whose entries expire after `ttl`.
    #[must_use]
    pub fn new(ttl: Duration) -> RouteDatabase {
        RouteDatabase {
            ttl,
            capacity: Self::DEFAULT_CAPACITY,
            failed: FastMap::default(),
            outliers: Outliers::new(OutlierPolicy::off(), 0),
            quic: QuicMemory::default(),
            quic_backoff: QuicBackoff::default(),
        }
    }

    /// Ejects routes by `policy` (off by default here; the pool turns it on
    /// from [`crate::PoolConfig::outliers`]); `seed` drives the backoff's jitter.
    #[must_use]
    pub fn with_outliers(mut self, policy: OutlierPolicy, seed: u64) -> RouteDatabase {
        self.outliers = Outliers::new(policy, seed);
        self
    }

    /// The ejection policy.
    #[must_use]
    pub fn outlier_policy(&self) -> &OutlierPolicy {
        &self.outliers.policy
    }

    /// Sets how many entries are kept at most (minimum 1). Default: 4096.
    #[must_use]
    pub fn with_capacity(mut self, capacity: usize) -> RouteDatabase {
        self.capacity = capacity.max(1);
        self
    }

    /// Records that `route` failed at `now`. A QUIC route's failure also
    /// marks its address family as one where QUIC fails: every QUIC route of
    /// that family goes last for 5 minutes, doubling with each failure in a
    /// row up to a day, until QUIC connects there again.
    pub fn failed(&mut self, route: &Route, now: Instant) {
        if route.is_quic() {
            self.quic.failed(Family::of(&route.socket_addr().ip()), now, &self.quic_backoff);
        }
        if !self.failed.contains_key(route) && self.failed.len() >= self.capacity {
            self.make_room(now);
        }
        self.failed.insert(route.clone(), now);
        self.outliers.failed(route, now, self.capacity);
    }

    /// Records that an exchange on a connection of `route` failed in a way
    /// that is the route's (see [`crate::OutlierPolicy`]): it counts toward
    /// the route's ejection, and does not postpone it by itself.
    pub fn exchange_failed(&mut self, route: &Route, now: Instant) {
        self.outliers.failed(route, now, self.capacity);
    }

    /// Records that an exchange on `route` completed: its failure streak
    /// ends, and an ejected route whose half-open trial runs is restored.
    #[inline]
    pub fn exchange_succeeded(&mut self, route: &Route, now: Instant) {
        if self.outliers.any() {
            self.outliers.succeeded(route, now);
        }
    }

    /// Records that an attempt starts on `route`: an ejected route past its
    /// backoff gets its half-open trial.
    #[inline]
    pub fn attempting(&mut self, route: &Route, now: Instant) {
        if self.outliers.ejected() > 0 {
            self.outliers.attempting(route, now);
        }
    }

    /// Whether any route has a failure streak or is ejected.
    #[inline]
    pub(crate) fn tracks_failures(&self) -> bool {
        self.outliers.any()
    }

    /// Whether `route` is ejected (its backoff runs, or it is half-open).
    #[must_use]
    pub fn is_ejected(&self, route: &Route) -> bool {
        self.outliers.is_ejected(route)
    }

    /// How many routes are ejected.
    #[must_use]
    pub fn ejected(&self) -> usize {
        self.outliers.ejected()
    }

    /// The ejections and restorations since the last call.
    pub(crate) fn take_outlier_changes(&mut self) -> Option<Vec<OutlierChange>> {
        self.outliers.changed().then(|| self.outliers.take_changes())
    }

    /// Records that `route` connected: its failure, if any, is forgotten.
    pub fn connected(&mut self, route: &Route) {
        if route.is_quic() {
            self.quic.succeeded(Family::of(&route.socket_addr().ip()));
        }
        self.failed.remove(route);
    }

    /// Whether `route` failed less than the TTL before `now`, or is ejected
    /// and its backoff (or half-open trial) has not ended.
    #[must_use]
    pub fn should_postpone(&self, route: &Route, now: Instant) -> bool {
        self.failed.get(route).is_some_and(|&at| now < at.saturating_add(self.ttl))
            || self.outliers.postpones(route, now)
            || (route.is_quic() && !self.quic.usable(Family::of(&route.socket_addr().ip()), now))
    }

    /// Number of remembered failures, expired ones included until pruned.
    #[must_use]
    pub fn len(&self) -> usize {
        self.failed.len()
    }

    /// Whether nothing is remembered.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.failed.is_empty()
    }

    /// Forgets every entry that expired by `now`.
    pub fn prune(&mut self, now: Instant) {
        let ttl = self.ttl;
        self.failed.retain(|_, at| now < at.saturating_add(ttl));
        self.outliers.prune(now);
    }

    fn make_room(&mut self, now: Instant) {
        self.prune(now);
        while self.failed.len() >= self.capacity {
            // Oldest first; ties broken by route order so the outcome is deterministic.
            let oldest = self
                .failed
                .iter()
                .min_by(|a, b| a.1.cmp(b.1).then_with(|| a.0.cmp(b.0)))
                .map(|(r, _)| r.clone());
            match oldest {
                Some(r) => {
                    self.failed.remove(&r);
                }
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Proxy;
    use crate::route::tests::route;

    #[test]
    fn database_ttl_success_and_capacity() {
        let r1 = route("a.example", 443, Proxy::Direct, "1.1.1.1:443");
        let r2 = route("a.example", 443, Proxy::Direct, "1.1.1.2:443");
        let r3 = route("a.example", 443, Proxy::Direct, "1.1.1.3:443");
        let mut db = RouteDatabase::new(Duration::from_millis(100)).with_capacity(2);
        db.failed(&r1, Instant::from_millis(0));
        db.failed(&r2, Instant::from_millis(10));
        assert!(db.should_postpone(&r1, Instant::from_millis(99)));
        assert!(!db.should_postpone(&r1, Instant::from_millis(100)));
        // Full: r1 (oldest) makes room for r3.
        db.failed(&r3, Instant::from_millis(20));
        assert_eq!(db.len(), 2);
        assert!(!db.should_postpone(&r1, Instant::from_millis(20)));
        assert!(db.should_postpone(&r2, Instant::from_millis(20)));
        db.connected(&r2);
        assert!(!db.should_postpone(&r2, Instant::from_millis(20)));
        db.prune(Instant::from_millis(500));
        assert!(db.is_empty());
    }
}
