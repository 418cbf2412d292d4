//! Outlier ejection in the pool: the route database counts each route's
//! failures in a row and ejects it ([`crate::OutlierPolicy`]); the pool
//! reports it ([`EventKind::RouteEjected`], stats), stops giving the
//! route's pooled connections new exchanges when the Address has another
//! route to go to ([`CloseReason::RouteEjected`]), and feeds it the
//! outcomes of exchanges: completions, the route's failures, and 5xx
//! answers when the policy counts them ([`Pool::server_error`]).

use super::*;
use crate::outlier::OutlierChange;

impl Pool {
    /// The call's response was a 5xx. With
    /// [`OutlierPolicy::server_errors`](crate::OutlierPolicy::server_errors)
    /// on, it counts as a failure of the connection's route (and the
    /// exchange's end does not count as a success); otherwise nothing
    /// happens. Drivers call it only for a status of 500 or more.
    pub fn server_error(&mut self, now: Instant, call: CallId) -> Result<(), Misuse> {
        let conn = self.active_connection(call)?;
        if !self.db.outlier_policy().server_errors {
            return Ok(());
        }
        let c = self.calls.get_mut(&call).expect("an active call exists");
        if std::mem::replace(&mut c.server_error, true) {
            return Ok(());
        }
        let route = self.conns[&conn].route.clone();
        self.db.exchange_failed(&route, now);
        self.apply_outliers(now);
        Ok(())
    }

    /// Acts on the ejections and restorations the route database made.
    pub(super) fn apply_outliers(&mut self, now: Instant) {
        let Some(changes) = self.db.take_outlier_changes() else { return };
        for change in changes {
            match change {
                OutlierChange::Ejected { route, failures, backoff } => {
                    self.stats.ejections += 1;
                    if let Some(a) = self.addrs.get_mut(route.address()) {
                        a.counters.ejections += 1;
                    }
                    self.emit(now, None, EventKind::RouteEjected { route: route.clone(), failures, backoff });
                    if self.has_other_route(&route) {
                        let mut ids: Vec<ConnectionId> = self
                            .conns
                            .values()
                            .filter(|c| c.no_new.is_none() && c.route == route)
                            .map(|c| c.id)
                            .collect();
                        ids.sort_unstable();
                        for id in ids {
                            self.retire(now, id, CloseReason::RouteEjected);
                        }
                    }
                }
                OutlierChange::Restored { route } => {
                    self.stats.restorations += 1;
                    self.emit(now, None, EventKind::RouteRestored { route });
                }
            }
        }
    }

    /// Whether the route's Address can go elsewhere: an open connection on
    /// a route not ejected, or (direct, by name) a cached DNS answer with
    /// an address whose route is not ejected. With nowhere else to go, an
    /// ejected route's connections keep working: ejection never leaves a
    /// host with nothing.
    fn has_other_route(&self, route: &Route) -> bool {
        let address = route.address();
        let connected = self.conns.values().any(|c| {
            &c.address == address && c.route != *route && c.no_new.is_none() && !self.db.is_ejected(&c.route)
        });
        if connected {
            return true;
        }
        if *route.proxy() != Proxy::Direct
            || address.skips_dns()
            || !matches!(address.host(), Host::Domain(_))
        {
            return false;
        }
        let key = (address.resolver_identity(), address.host().clone(), address.port());
        let port = route.socket_addr().port();
        self.dns.ips(&key).is_some_and(|ips| {
            ips.iter().any(|ip| {
                *ip != route.socket_addr().ip()
                    && !self.db.is_ejected(&Route::new(
                        address.clone(),
                        Proxy::Direct,
                        std::net::SocketAddr::new(*ip, port),
                    ))
            })
        })
    }
}
