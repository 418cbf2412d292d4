//! Outlier ejection per route: a route whose connects or exchanges keep
//! failing is ejected for a backoff, then half-open (one attempt tries it),
//! and restored by a success.
//!
//! The streak counts, per route, connect failures, failures of an exchange
//! on a connection that never completed one, failures after the response
//! had started or a timeout on a reused connection, and, when the caller
//! opts in, 5xx answers. A completed exchange resets it. A reused
//! connection that fails before any response byte is the ordinary stale
//! keep-alive race, not the route's fault: it does not count.
//!
//! Ejected routes go last in planning, like the routes that failed
//! recently: never skipped, so a host whose every route is ejected still
//! gets a try. While a route is ejected, its pooled connections take no new
//! exchange when the Address has somewhere else to go.

use std::time::Duration;

use crate::backoff::{Backoff, Jitter};
use crate::hash::FastMap;
use crate::route::Route;
use crate::time::Instant;

/// When routes are ejected, and for how long.
///
/// ```
/// # use switchyard_core::OutlierPolicy;
/// let p = OutlierPolicy::default();
/// assert_eq!(p.consecutive_failures, 5);
/// assert!(!p.server_errors);
/// assert_eq!(p.backoff.delay(1, 0.0).as_secs(), 10);
/// ```
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct OutlierPolicy {
    /// Failures in a row that eject a route. Default: 5 (Envoy's
    /// `consecutive_5xx` and `consecutive_gateway_failure`); 0 turns
    /// ejection off.
    pub consecutive_failures: u32,
    /// Whether a 5xx answer counts as a failure (reported with
    /// [`crate::Pool::server_error`]). Default: off; the status is the
    /// application's, and one failing endpoint would eject a healthy server.
    pub server_errors: bool,
    /// How long an ejection lasts, growing with each ejection in a row (the
    /// Manager's backoff shape). Default: 10 s, ×2, ±20 % jitter, at most
    /// 300 s.
    pub backoff: Backoff,
}

impl Default for OutlierPolicy {
    fn default() -> Self {
        OutlierPolicy {
            consecutive_failures: 5,
            server_errors: false,
            backoff: Backoff {
                initial: Duration::from_secs(10),
                multiplier: 2.0,
                jitter: 0.2,
                max: Duration::from_secs(300),
            },
        }
    }
}

impl OutlierPolicy {
    /// No ejection.
    #[must_use]
    pub fn off() -> OutlierPolicy {
        OutlierPolicy { consecutive_failures: 0, ..OutlierPolicy::default() }
    }
}

/// A route that was ejected or restored, for the pool to act on.
#[derive(Clone, PartialEq, Debug)]
pub(crate) enum OutlierChange {
    Ejected { route: Route, failures: u32, backoff: Duration },
    Restored { route: Route },
}

#[derive(Clone, Copy, Debug)]
struct Outlier {
    /// Failures in a row.
    streak: u32,
    /// Ejections in a row (0: not ejected).
    ejections: u32,
    /// While ejected: the end of the backoff (or of a half-open trial).
    until: Instant,
    /// A half-open attempt was started.
    trial: bool,
    last: Instant,
}

/// The per-route streaks and ejections. Lookup only; nothing is emitted in
/// the map's order.
#[derive(Clone, Debug)]
pub(crate) struct Outliers {
    pub(crate) policy: OutlierPolicy,
    routes: FastMap<Route, Outlier>,
    ejected: usize,
    jitter: Jitter,
    changes: Vec<OutlierChange>,
    /// When stale streaks are next forgotten (see [`Outliers::succeeded`]).
    prune_at: Instant,
}

impl Outliers {
    pub(crate) fn new(policy: OutlierPolicy, seed: u64) -> Outliers {
        Outliers {
            policy,
            routes: FastMap::default(),
            ejected: 0,
            jitter: Jitter::new(seed),
            changes: Vec::new(),
            prune_at: Instant::ZERO,
        }
    }

    /// Whether any route has a streak or is ejected (the common case: none,
    /// and a completed exchange costs one branch).
    #[inline]
    pub(crate) fn any(&self) -> bool {
        !self.routes.is_empty()
    }

    /// Routes ejected now (half-open included).
    pub(crate) fn ejected(&self) -> usize {
        self.ejected
    }

    /// Whether `route` is ejected and its backoff (or trial) has not ended.
    pub(crate) fn postpones(&self, route: &Route, now: Instant) -> bool {
        self.ejected > 0 && self.routes.get(route).is_some_and(|o| o.ejections > 0 && now < o.until)
    }

    /// Whether `route` is ejected (half-open included).
    pub(crate) fn is_ejected(&self, route: &Route) -> bool {
        self.ejected > 0 && self.routes.get(route).is_some_and(|o| o.ejections > 0)
    }

    /// One failure of `route`.
    pub(crate) fn failed(&mut self, route: &Route, now: Instant, capacity: usize) {
        let n = self.policy.consecutive_failures;
        if n == 0 {
            return;
        }
        if !self.routes.contains_key(route) && self.routes.len() >= capacity {
            self.prune(now);
            if self.routes.len() >= capacity {
                return;
            }
        }
        let o = self.routes.entry(route.clone()).or_insert(Outlier {
            streak: 0,
            ejections: 0,
            until: now,
            trial: false,
            last: now,
        });
        o.streak = o.streak.saturating_add(1);
        o.last = now;
        let eject = if o.ejections == 0 {
            o.streak >= n
        } else {
            // Already ejected: a failure in the half-open state (or of its
            // trial) ejects again, for longer; during the backoff it is
            // only counted.
            now >= o.until || o.trial
        };
        if !eject {
            return;
        }
        if o.ejections == 0 {
            self.ejected += 1;
        }
        o.ejections = o.ejections.saturating_add(1);
        o.trial = false;
        let (failures, ejections) = (o.streak, o.ejections);
        let backoff = self.policy.backoff.delay(ejections, self.jitter.unit());
        let o = self.routes.get_mut(route).expect("just inserted");
        o.until = now.saturating_add(backoff);
        self.changes.push(OutlierChange::Ejected { route: route.clone(), failures, backoff });
    }

    /// An exchange on `route` completed: the streak ends; an ejected route
    /// past its backoff (half-open, whether a new attempt or a pooled
    /// connection carried the exchange) is restored. A success during the
    /// backoff changes nothing: an older connection's exchange may well
    /// finish while the route is failing.
    ///
    /// Now and then (once per backoff maximum) it also forgets stale
    /// streaks, so a route that failed once and is no longer used does not
    /// keep every completed exchange looking its route up.
    pub(crate) fn succeeded(&mut self, route: &Route, now: Instant) {
        if now >= self.prune_at {
            self.prune(now);
            self.prune_at = now.saturating_add(self.keep());
        }
        let Some(o) = self.routes.get(route) else { return };
        if o.ejections > 0 && !o.trial && now < o.until {
            return;
        }
        if o.ejections > 0 {
            self.ejected -= 1;
            self.changes.push(OutlierChange::Restored { route: route.clone() });
        }
        self.routes.remove(route);
    }

    /// An attempt starts on `route`: past its backoff, an ejected route is
    /// half-open and this attempt is its trial; until the trial's outcome
    /// (or another backoff's length without one) other calls plan it last.
    pub(crate) fn attempting(&mut self, route: &Route, now: Instant) {
        if self.ejected == 0 {
            return;
        }
        let Some(o) = self.routes.get_mut(route) else { return };
        if o.ejections == 0 || now < o.until {
            return;
        }
        o.trial = true;
        let backoff = self.policy.backoff.delay(o.ejections, 0.0);
        o.until = now.saturating_add(backoff);
    }

    /// The ejections and restorations since the last call.
    pub(crate) fn take_changes(&mut self) -> Vec<OutlierChange> {
        std::mem::take(&mut self.changes)
    }

    /// Whether changes wait to be taken.
    #[inline]
    pub(crate) fn changed(&self) -> bool {
        !self.changes.is_empty()
    }

    /// Forgets streaks older than a backoff's maximum that never ejected,
    /// and ejections whose backoff ended that long ago.
    /// An ejection forgotten this way (nobody tried the route for that
    /// long) is reported as a restoration.
    pub(crate) fn prune(&mut self, now: Instant) {
        let keep = self.keep();
        let mut ejected = 0;
        let mut forgotten = Vec::new();
        self.routes.retain(|route, o| {
            let live = if o.ejections > 0 {
                now < o.until.saturating_add(keep)
            } else {
                now < o.last.saturating_add(keep)
            };
            if o.ejections > 0 {
                if live {
                    ejected += 1;
                } else {
                    forgotten.push(route.clone());
                }
            }
            live
        });
        // The map's order must not reach the events.
        forgotten.sort_unstable();
        self.changes.extend(forgotten.into_iter().map(|route| OutlierChange::Restored { route }));
        self.ejected = ejected;
    }

    fn keep(&self) -> Duration {
        self.policy.backoff.max.max(Duration::from_secs(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::{Address, Proxy, Scheme};

    fn route(ip: &str) -> Route {
        let a = Address::builder(Scheme::Http, "a.example", 80).build().unwrap();
        Route::new(a, Proxy::Direct, format!("{ip}:80").parse().unwrap())
    }

    fn policy() -> OutlierPolicy {
        OutlierPolicy {
            consecutive_failures: 3,
            server_errors: false,
            backoff: Backoff {
                initial: Duration::from_secs(10),
                multiplier: 2.0,
                jitter: 0.0,
                max: Duration::from_secs(300),
            },
        }
    }

    fn at(s: u64) -> Instant {
        Instant::from_millis(s * 1000)
    }

    #[test]
    fn a_streak_ejects_backs_off_and_a_trial_success_restores() {
        let r = route("10.0.0.1");
        let mut o = Outliers::new(policy(), 1);
        o.failed(&r, at(0), 16);
        o.failed(&r, at(0), 16);
        assert!(!o.is_ejected(&r), "two of three");
        o.failed(&r, at(1), 16);
        assert!(o.postpones(&r, at(1)) && o.postpones(&r, at(10)));
        assert!(!o.postpones(&r, at(11)), "half-open after 10 s");
        assert_eq!(
            o.take_changes(),
            vec![OutlierChange::Ejected { route: r.clone(), failures: 3, backoff: Duration::from_secs(10) }]
        );
        // An old connection's success during the backoff changes nothing.
        o.succeeded(&r, at(5));
        assert!(o.is_ejected(&r));
        o.attempting(&r, at(12));
        assert!(o.postpones(&r, at(13)), "the trial holds others back");
        o.succeeded(&r, at(12));
        assert!(!o.is_ejected(&r) && !o.any());
        assert_eq!(o.take_changes(), vec![OutlierChange::Restored { route: r }]);
    }

    #[test]
    fn a_failed_trial_ejects_for_longer_and_a_success_ends_a_streak() {
        let r = route("10.0.0.1");
        let mut o = Outliers::new(policy(), 1);
        for _ in 0..3 {
            o.failed(&r, at(0), 16);
        }
        o.failed(&r, at(5), 16);
        assert_eq!(o.take_changes().len(), 1, "counted during the backoff, not ejected again");
        o.attempting(&r, at(10));
        o.failed(&r, at(11), 16);
        assert!(o.postpones(&r, at(30)) && !o.postpones(&r, at(31)), "20 s the second time");
        assert!(
            matches!(o.take_changes()[..], [OutlierChange::Ejected { backoff, .. }] if backoff == Duration::from_secs(20))
        );
        let other = route("10.0.0.2");
        o.failed(&other, at(0), 16);
        o.failed(&other, at(0), 16);
        o.succeeded(&other, at(0));
        o.failed(&other, at(0), 16);
        assert!(!o.is_ejected(&other), "the streak restarted");
        assert_eq!(o.ejected(), 1);
    }

    #[test]
    fn off_and_bounded() {
        let r = route("10.0.0.1");
        let mut o = Outliers::new(OutlierPolicy::off(), 1);
        for _ in 0..10 {
            o.failed(&r, at(0), 16);
        }
        assert!(!o.any());
        let mut o = Outliers::new(policy(), 1);
        o.failed(&route("10.0.0.1"), at(0), 1);
        o.failed(&route("10.0.0.2"), at(0), 1);
        assert!(!o.routes.contains_key(&route("10.0.0.2")), "full: not tracked");
        o.failed(&route("10.0.0.2"), at(400), 1);
        assert!(o.routes.contains_key(&route("10.0.0.2")), "the stale streak was pruned");
    }
}
