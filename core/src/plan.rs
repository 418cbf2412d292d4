//! Route planning: proxies × DNS answers → ordered routes, failed routes last.
//!
//! The [`RoutePlanner`] hands out one [`Route`] at a time. For each proxy in the
//! selector's order it resolves the host to dial (the origin's when direct, the
//! proxy's otherwise; IP literals skip DNS), orders the answer per RFC 8305 §4,
//! and postpones routes the [`RouteDatabase`] remembers as failed. The first proxy
//! that yields a route that is not postponed gives the next selection; when every
//! proxy is used up, the postponed routes are the last selection, in the order
//! they were found. A failed route is tried last, never skipped.
//!
//! DNS is lazy: a proxy's host is looked up only when the routes before it are
//! used up, so a call that connects on its first proxy never resolves the others.

use std::collections::VecDeque;

use crate::hash::FastSet;
use std::net::IpAddr;

use std::time::Duration;

use crate::address::{Address, Host, Proxy};
use crate::dns::DnsAnswer;
pub use crate::dns::Family;
use crate::error::{DnsError, Misuse};
use crate::id::{CallId, QueryId};
use crate::route::{dial_target, routes_for, socks_routes, Route};
use crate::route_db::RouteDatabase;
use crate::time::Instant;

/// Orders resolved addresses per RFC 8305 §4: when both families are present,
/// alternate them starting with `preferred` (v6₀, v4₀, v6₁, v4₁, …), then the rest
/// of the longer list; order inside each family is kept. One family: unchanged.
///
/// > "the client SHOULD then interleave them … alternating between address
/// > families" — [RFC 8305 §4](https://www.rfc-editor.org/rfc/rfc8305#section-4)
///
/// ```
/// # use switchyard_core::{interleave, Family};
/// use std::net::IpAddr;
/// let ip = |s: &str| s.parse::<IpAddr>().unwrap();
/// let (a4, b4, c4, a6, b6) = (ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.3"), ip("fd00::1"), ip("fd00::2"));
/// assert_eq!(interleave(&[a4, b4, c4, a6, b6], Family::V6), [a6, a4, b6, b4, c4]);
/// assert_eq!(interleave(&[a4, b4, c4, a6, b6], Family::V4), [a4, a6, b4, b6, c4]);
/// ```
#[must_use]
pub fn interleave(addrs: &[IpAddr], preferred: Family) -> Vec<IpAddr> {
    let (first, second): (Vec<IpAddr>, Vec<IpAddr>) =
        addrs.iter().partition(|ip| Family::of(ip) == preferred);
    let mut out = Vec::with_capacity(addrs.len());
    let (mut a, mut b) = (first.into_iter(), second.into_iter());
    loop {
        match (a.next(), b.next()) {
            (None, None) => return out,
            (x, y) => out.extend(x.into_iter().chain(y)),
        }
    }
}

/// How routes are ordered.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PlanConfig {
    /// Interleave address families (RFC 8305). When off, DNS order is kept.
    /// Default: on.
    pub fast_fallback: bool,
    /// The family tried first when interleaving. Default: IPv6.
    pub preferred_family: Family,
    /// With answers per family ([`DnsAnswer::family`]): how long the other
    /// family's answer, when it comes first, waits for the preferred family's
    /// before attempts start with it alone (RFC 8305 §3). Default: 50 ms.
    pub resolution_delay: Duration,
}

impl Default for PlanConfig {
    fn default() -> Self {
        PlanConfig {
            fast_fallback: true,
            preferred_family: Family::V6,
            resolution_delay: Duration::from_millis(50),
        }
    }
}

/// What the planner says when asked for the next route.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum PlanStep {
    /// Try this route next.
    Route(Route),
    /// Resolve `host`; answer with [`RoutePlanner::handle_dns`]. Given once per query.
    Resolve {
        /// Quote this in the answer.
        query: QueryId,
        /// The name to resolve (never an IP literal).
        host: Host,
        /// The port the routes will dial, for resolvers that take a service.
        port: u16,
        /// The proxy this lookup is for ([`Proxy::Direct`]: the origin).
        proxy: Proxy,
    },
    /// A lookup is outstanding; no route until it is answered.
    Waiting,
    /// Every route has been handed out.
    Exhausted,
}

/// A DNS answer as the planner used it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DnsOutcome {
    /// The host that was looked up.
    pub host: Host,
    /// The proxy it was for.
    pub proxy: Proxy,
    /// The family this answer was for (`None`: every family).
    pub family: Option<Family>,
    /// The addresses in planning order, or — once the lookup has failed for
    /// every family — why there are none.
    pub result: Result<Vec<IpAddr>, DnsError>,
}

#[derive(Clone, Debug)]
struct Pending {
    query: QueryId,
    proxy: Proxy,
    host: Host,
    port: u16,
    /// Family answers received so far (per-family lookups only).
    parts: Vec<(Family, Result<Vec<IpAddr>, DnsError>)>,
    /// The other family's addresses, waiting until this instant for the
    /// preferred family's (RFC 8305 §3's resolution delay).
    held: Option<(Vec<IpAddr>, Instant)>,
    /// Whether some of this lookup's routes were planned already.
    released: bool,
    /// A `socks5://` proxy's own name, resolved before the origin's: its
    /// answer plans no routes, the origin's lookup comes next.
    proxy_first: bool,
}

/// A DNS answer a call already has: a retry plans with it instead of resolving
/// again (see [`RoutePlanner::with_answers`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KnownAnswer {
    /// The name that was resolved.
    pub host: Host,
    /// The port it was resolved for.
    pub port: u16,
    /// The addresses, as the resolver gave them.
    pub addresses: Vec<IpAddr>,
}

/// Plans the routes for one call. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct RoutePlanner {
    call: CallId,
    address: Address,
    proxies: Vec<Proxy>,
    next_proxy: usize,
    config: PlanConfig,
    current: VecDeque<Route>,
    postponed: Vec<Route>,
    postponed_released: bool,
    pending: Option<Pending>,
    announced: bool,
    next_query: u32,
    // Lookup only: routes already handed out or queued, so none is planned twice.
    seen: FastSet<Route>,
    /// Routes to plan last, after every other (the call was refused there).
    avoid: Vec<Route>,
    /// Answers known before planning, and every answer received since.
    answers: Vec<KnownAnswer>,
}

impl RoutePlanner {
    /// Plans routes to `address`. When the Address has an explicit proxy, that is
    /// the only one used; otherwise `proxies` is the selector's answer, in order
    /// (an empty answer means direct).
    #[must_use]
    pub fn new(call: CallId, address: Address, proxies: Vec<Proxy>, config: PlanConfig) -> Self {
        let mut proxies = match address.proxy() {
            // A Unix socket is reached directly: no proxy, no DNS.
            _ if address.skips_dns() => vec![Proxy::Direct],
            Some(explicit) => vec![explicit.clone()],
            None => proxies,
        };
        if proxies.is_empty() {
            proxies.push(Proxy::Direct);
        }
        let mut unique: Vec<Proxy> = Vec::with_capacity(proxies.len());
        for p in proxies {
            if !unique.contains(&p) {
                unique.push(p);
            }
        }
        RoutePlanner {
            call,
            address,
            proxies: unique,
            next_proxy: 0,
            config,
            current: VecDeque::new(),
            postponed: Vec::new(),
            postponed_released: false,
            pending: None,
            announced: false,
            next_query: 0,
            seen: FastSet::default(),
            avoid: Vec::new(),
            answers: Vec::new(),
        }
    }

    /// Plans `avoid` last, after every other route, as if the route database
    /// remembered them as failed (a call that was refused on a route moves to
    /// another one when one exists).
    #[must_use]
    pub fn avoiding(mut self, avoid: Vec<Route>) -> Self {
        self.avoid = avoid;
        self
    }

    /// Uses these answers instead of resolving their names again (a retry
    /// keeps its call's DNS answers): no [`PlanStep::Resolve`] for them.
    #[must_use]
    pub fn with_answers(mut self, answers: Vec<KnownAnswer>) -> Self {
        self.answers = answers;
        self
    }

    /// Every DNS answer this plan used: the known ones and the ones received.
    #[must_use]
    pub fn answers(&self) -> &[KnownAnswer] {
        &self.answers
    }

    /// Numbers this planner's DNS queries from `first` (for a call that plans
    /// again, so query ids are never reused).
    #[must_use]
    pub fn starting_queries_at(mut self, first: u32) -> Self {
        self.next_query = first;
        self
    }

    /// The number the next query would get.
    #[must_use]
    pub fn next_query_number(&self) -> u32 {
        self.next_query
    }

    /// The proxies that will be tried, in order.
    #[must_use]
    pub fn proxies(&self) -> &[Proxy] {
        &self.proxies
    }

    /// The Address being planned for.
    #[must_use]
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// Whether a route is ready to hand out without waiting for DNS.
    #[must_use]
    pub fn has_ready_route(&self) -> bool {
        !self.current.is_empty()
    }

    /// Whether [`RoutePlanner::next`] would hand out a route or a lookup now, rather
    /// than [`PlanStep::Waiting`] or [`PlanStep::Exhausted`]. (A lookup's answer may
    /// still turn out to hold only postponed routes.)
    #[must_use]
    pub fn can_advance(&self) -> bool {
        if !self.current.is_empty() {
            return true;
        }
        match &self.pending {
            Some(_) => !self.announced,
            None => {
                self.next_proxy < self.proxies.len()
                    || (!self.postponed_released && !self.postponed.is_empty())
            }
        }
    }

    /// Whether a lookup is outstanding.
    #[must_use]
    pub fn is_waiting(&self) -> bool {
        self.pending.is_some()
    }

    /// The next step: a route, a lookup to perform, waiting, or exhausted.
    /// `db` decides which routes are postponed, as of `now`.
    pub fn next(&mut self, now: Instant, db: &RouteDatabase) -> PlanStep {
        loop {
            if let Some(route) = self.current.pop_front() {
                return PlanStep::Route(route);
            }
            if let Some(p) = &self.pending {
                if self.announced {
                    return PlanStep::Waiting;
                }
                self.announced = true;
                return PlanStep::Resolve {
                    query: p.query,
                    host: p.host.clone(),
                    port: p.port,
                    proxy: p.proxy.clone(),
                };
            }
            if let Some(proxy) = self.proxies.get(self.next_proxy).cloned() {
                self.next_proxy += 1;
                if self.address.skips_dns() {
                    // One route (a socket path, or a connector's by-name
                    // stream); its socket address is a placeholder.
                    let any = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);
                    self.select(&proxy, &[any], self.address.port(), now, db);
                    continue;
                }
                let (host, port) = if proxy.resolves_origin_locally() {
                    // `socks5://`: the proxy's own name first (when it is
                    // one), then the origin's, whose addresses make the routes.
                    let (phost, pport) = proxy.endpoint().expect("a SOCKS5 proxy has an endpoint");
                    if phost.ip().is_none() && self.known(phost, pport).is_none() {
                        self.next_proxy -= 1; // back to this proxy once it is known
                        self.start_lookup(phost.clone(), pport, proxy, true);
                        continue;
                    }
                    (self.address.host(), self.address.port())
                } else {
                    dial_target(&self.address, &proxy)
                };
                match host.ip() {
                    Some(ip) => self.select(&proxy, &[ip], port, now, db),
                    None => {
                        if let Some(ips) = self.known(host, port).map(<[IpAddr]>::to_vec) {
                            let ordered = self.order(ips);
                            self.select(&proxy, &ordered, port, now, db);
                            continue;
                        }
                        self.start_lookup(host.clone(), port, proxy, false);
                    }
                }
                continue;
            }
            if !self.postponed_released && !self.postponed.is_empty() {
                self.postponed_released = true;
                self.current.extend(self.postponed.drain(..));
                continue;
            }
            return PlanStep::Exhausted;
        }
    }

    /// The addresses this plan knows for `host:port`.
    fn known(&self, host: &Host, port: u16) -> Option<&[IpAddr]> {
        self.answers.iter().find(|k| k.host == *host && k.port == port).map(|k| k.addresses.as_slice())
    }

    fn start_lookup(&mut self, host: Host, port: u16, proxy: Proxy, proxy_first: bool) {
        let query = QueryId::new(self.call, self.next_query);
        self.next_query += 1;
        self.pending = Some(Pending {
            query,
            host,
            port,
            proxy,
            parts: Vec::new(),
            held: None,
            released: false,
            proxy_first,
        });
        self.announced = false;
    }

    /// A `socks5://` proxy's own name answered (whole, or its last family):
    /// kept for the origin's routes, or — none — the proxy is skipped.
    fn proxy_known(&mut self, pending: &Pending, ips: Vec<IpAddr>) {
        if ips.is_empty() {
            self.next_proxy += 1;
        } else {
            self.remember(pending, ips);
        }
    }

    /// Feeds the answer to a [`PlanStep::Resolve`]: every address at once. Returns
    /// how the answer was used, or `None` for a duplicate answer (ignored). An empty
    /// answer becomes [`DnsError::NoAddresses`]; a failed lookup moves planning to
    /// the next proxy.
    pub fn handle_dns(
        &mut self,
        query: QueryId,
        answer: Result<Vec<IpAddr>, DnsError>,
        now: Instant,
        db: &RouteDatabase,
    ) -> Result<Option<DnsOutcome>, Misuse> {
        self.handle_dns_answer(query, DnsAnswer::all(answer), now, db)
    }

    /// Feeds an answer to a [`PlanStep::Resolve`], whole or for one family (see
    /// [`crate::dns`]). Returns how it was used: the family's addresses in
    /// planning order, or the lookup's error once every family has failed.
    /// `None`: nothing to report — a duplicate, or one family failing while the
    /// other may still answer.
    pub fn handle_dns_answer(
        &mut self,
        query: QueryId,
        answer: DnsAnswer,
        now: Instant,
        db: &RouteDatabase,
    ) -> Result<Option<DnsOutcome>, Misuse> {
        if query.call() != self.call || query >= QueryId::new(self.call, self.next_query) {
            return Err(Misuse::UnknownQuery(query));
        }
        let Some(pending) = self.pending.as_mut().filter(|p| p.query == query) else {
            return Ok(None);
        };
        let answer = answer.normalized();
        let family = answer.family;
        if pending.proxy_first {
            return Ok(self.proxy_answer(answer));
        }
        let Some(f) = family else {
            // The whole answer: the lookup is complete.
            let pending = self.pending.take().expect("checked");
            let result = match answer.result {
                Ok(ips) => {
                    self.remember(&pending, ips.clone());
                    let ordered = self.order(ips);
                    self.select(&pending.proxy, &ordered, pending.port, now, db);
                    Ok(ordered)
                }
                Err(e) => Err(e),
            };
            return Ok(Some(DnsOutcome { host: pending.host, proxy: pending.proxy, family, result }));
        };
        if pending.parts.iter().any(|(g, _)| *g == f) {
            return Ok(None); // a repeated family answer
        }
        pending.parts.push((f, answer.result.clone()));
        let complete = pending.parts.len() == 2;
        let (host, proxy, port) = (pending.host.clone(), pending.proxy.clone(), pending.port);
        let preferred = f == self.config.preferred_family;
        let outcome = match answer.result {
            Ok(ips) => {
                let ordered = self.order(ips.clone());
                let pending = self.pending.as_mut().expect("checked");
                if complete || preferred || self.config.resolution_delay.is_zero() {
                    // Any held addresses join these now.
                    let held = pending.held.take().map(|(h, _)| h).unwrap_or_default();
                    let late = pending.released;
                    pending.released = true;
                    let mut all = held;
                    all.extend(ordered.iter().copied());
                    let all = self.order(all);
                    if late {
                        self.merge_late(&proxy, &all, port, now, db);
                    } else {
                        self.select(&proxy, &all, port, now, db);
                    }
                } else {
                    // The other family came first: wait for the preferred one.
                    pending.held = Some((ordered.clone(), now + self.config.resolution_delay));
                }
                Some(DnsOutcome { host: host.clone(), proxy: proxy.clone(), family, result: Ok(ordered) })
            }
            Err(_) => {
                // This family has nothing; held addresses need not wait for it.
                let pending = self.pending.as_mut().expect("checked");
                if let Some((held, _)) = pending.held.take() {
                    pending.released = true;
                    self.select(&proxy, &held, port, now, db);
                }
                None
            }
        };
        if complete {
            let pending = self.pending.take().expect("checked");
            let mut ips = Vec::new();
            let mut error = None;
            for (_, r) in &pending.parts {
                match r {
                    Ok(v) => ips.extend(v.iter().copied()),
                    Err(e) => {
                        error = Some(match error {
                            None | Some(DnsError::NoAddresses) => e.clone(),
                            Some(kept) => kept,
                        })
                    }
                }
            }
            if ips.is_empty() {
                let error = error.unwrap_or(DnsError::NoAddresses);
                return Ok(Some(DnsOutcome { host, proxy, family, result: Err(error) }));
            }
            self.remember(&pending, ips);
        }
        Ok(outcome)
    }

    /// An answer for a `socks5://` proxy's own name: no routes yet (the
    /// origin's lookup follows), no resolution delay; complete once whole or
    /// once both families answered.
    fn proxy_answer(&mut self, answer: DnsAnswer) -> Option<DnsOutcome> {
        let pending = self.pending.as_mut().expect("checked by the caller");
        let outcome = |p: &Pending, result| DnsOutcome {
            host: p.host.clone(),
            proxy: p.proxy.clone(),
            family: answer.family,
            result,
        };
        let Some(f) = answer.family else {
            let pending = self.pending.take().expect("checked");
            let ips = answer.result.clone().unwrap_or_default();
            self.proxy_known(&pending, ips);
            return Some(outcome(&pending, answer.result.map(|ips| self.order(ips))));
        };
        if pending.parts.iter().any(|(g, _)| *g == f) {
            return None;
        }
        pending.parts.push((f, answer.result.clone()));
        if pending.parts.len() < 2 {
            return answer.result.is_ok().then(|| outcome(pending, answer.result.clone()));
        }
        let pending = self.pending.take().expect("checked");
        let ips: Vec<IpAddr> =
            pending.parts.iter().filter_map(|(_, r)| r.as_ref().ok()).flatten().copied().collect();
        let error = pending
            .parts
            .iter()
            .filter_map(|(_, r)| r.clone().err())
            .find(|e| *e != DnsError::NoAddresses)
            .unwrap_or(DnsError::NoAddresses);
        let complete_empty = ips.is_empty();
        let ordered = self.order(ips);
        self.proxy_known(&pending, ordered);
        if complete_empty {
            Some(outcome(&pending, Err(error)))
        } else {
            // This family's own addresses, or nothing to report for a family
            // that failed while the other answered.
            answer.result.is_ok().then(|| outcome(&pending, answer.result.clone()))
        }
    }

    /// When held addresses stop waiting for the preferred family.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.pending.as_ref().and_then(|p| p.held.as_ref()).map(|(_, until)| *until)
    }

    /// Releases held addresses whose resolution delay is over at `now`.
    pub fn handle_timeout(&mut self, now: Instant, db: &RouteDatabase) {
        let Some(pending) = self.pending.as_mut() else { return };
        if pending.held.as_ref().is_none_or(|(_, until)| *until > now) {
            return;
        }
        let (held, _) = pending.held.take().expect("checked");
        pending.released = true;
        let (proxy, port) = (pending.proxy.clone(), pending.port);
        self.select(&proxy, &held, port, now, db);
    }

    fn remember(&mut self, pending: &Pending, ips: Vec<IpAddr>) {
        let known = KnownAnswer { host: pending.host.clone(), port: pending.port, addresses: ips };
        self.answers.retain(|k| !(k.host == known.host && k.port == known.port));
        self.answers.push(known);
    }

    /// A family that answered after attempts began: its routes are interleaved
    /// with the routes not tried yet, its own first (the race has been trying
    /// the other family).
    fn merge_late(&mut self, proxy: &Proxy, ips: &[IpAddr], port: u16, now: Instant, db: &RouteDatabase) {
        let waiting: Vec<Route> = self.current.drain(..).collect();
        self.select(proxy, ips, port, now, db);
        let late: Vec<Route> = self.current.drain(..).collect();
        let (mut a, mut b) = (late.into_iter(), waiting.into_iter());
        loop {
            match (a.next(), b.next()) {
                (None, None) => break,
                (x, y) => self.current.extend(x.into_iter().chain(y)),
            }
        }
    }

    /// Puts a route back at the front (a cancelled loser to retry first).
    pub(crate) fn push_front(&mut self, routes: impl DoubleEndedIterator<Item = Route>) {
        for r in routes.rev() {
            self.current.push_front(r);
        }
    }

    /// RFC 8305 §4 ordering of one answer (interleaved families), unless fast
    /// fallback is off.
    fn order(&self, ips: Vec<IpAddr>) -> Vec<IpAddr> {
        if self.config.fast_fallback {
            interleave(&ips, self.config.preferred_family)
        } else {
            ips
        }
    }

    fn select(&mut self, proxy: &Proxy, ips: &[IpAddr], port: u16, now: Instant, db: &RouteDatabase) {
        let routes = if proxy.resolves_origin_locally() {
            // `ips` are the origin's; the proxy's are a literal or known.
            let (phost, pport) = proxy.endpoint().expect("a SOCKS5 proxy has an endpoint");
            let proxy_ips = match phost.ip() {
                Some(ip) => vec![ip],
                None => self.known(phost, pport).map(<[IpAddr]>::to_vec).unwrap_or_default(),
            };
            socks_routes(&self.address, proxy, &proxy_ips, ips)
        } else {
            routes_for(&self.address, proxy, ips, port)
        };
        for route in routes {
            if !self.seen.insert(route.clone()) {
                continue;
            }
            // Postponement applies after interleaving, so the postponed list keeps
            // discovery order.
            if db.should_postpone(&route, now) || self.avoid.contains(&route) {
                self.postponed.push(route);
            } else {
                self.current.push_back(route);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Scheme;
    use crate::id::IdAllocator;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn planner(proxies: Vec<Proxy>) -> RoutePlanner {
        let a = Address::builder(Scheme::Https, "example.com", 443).build().unwrap();
        RoutePlanner::new(IdAllocator::default().next_call(), a, proxies, PlanConfig::default())
    }

    fn drain(p: &mut RoutePlanner, db: &RouteDatabase) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            match p.next(Instant::ZERO, db) {
                PlanStep::Route(r) => out.push(r.socket_addr().to_string()),
                other => {
                    out.push(format!("{other:?}").split_whitespace().next().unwrap().to_owned());
                    return out;
                }
            }
        }
    }

    fn resolve(p: &mut RoutePlanner, db: &RouteDatabase) -> QueryId {
        match p.next(Instant::ZERO, db) {
            PlanStep::Resolve { query, .. } => query,
            other => panic!("expected Resolve, got {other:?}"),
        }
    }

    #[test]
    fn rfc8305_interleaving() {
        let v = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "fd00::1", "fd00::2"].map(ip);
        assert_eq!(interleave(&v, Family::V6), [v[3], v[0], v[4], v[1], v[2]]);
        // One family only: order kept.
        assert_eq!(interleave(&v[..3], Family::V6), v[..3]);
        assert_eq!(interleave(&[], Family::V6), Vec::<IpAddr>::new());
    }

    #[test]
    fn direct_resolves_origin_then_yields_interleaved_routes() {
        let db = RouteDatabase::default();
        let mut p = planner(vec![]);
        assert_eq!(p.proxies(), &[Proxy::Direct]);
        let q = match p.next(Instant::ZERO, &db) {
            PlanStep::Resolve { query, host, port, .. } => {
                assert_eq!(host, Host::Domain("example.com".into()));
                assert_eq!(port, 443);
                query
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(p.next(Instant::ZERO, &db), PlanStep::Waiting);
        let out =
            p.handle_dns(q, Ok(vec![ip("10.0.0.1"), ip("fd00::1")]), Instant::ZERO, &db).unwrap().unwrap();
        assert_eq!(out.result, Ok(vec![ip("fd00::1"), ip("10.0.0.1")]));
        assert_eq!(drain(&mut p, &db), ["[fd00::1]:443", "10.0.0.1:443", "Exhausted"]);
        // A duplicate answer is ignored, an invented id is misuse.
        assert_eq!(p.handle_dns(q, Ok(vec![]), Instant::ZERO, &db), Ok(None));
        let bogus = QueryId::new(q.call(), 9);
        assert_eq!(p.handle_dns(bogus, Ok(vec![]), Instant::ZERO, &db), Err(Misuse::UnknownQuery(bogus)));
    }

    #[test]
    fn failed_routes_are_postponed_to_the_end_never_skipped() {
        let mut db = RouteDatabase::default();
        let mut p = planner(vec![]);
        let q = resolve(&mut p, &db);
        let a = p.address().clone();
        let failed = Route::new(a, Proxy::Direct, "[fd00::1]:443".parse().unwrap());
        db.failed(&failed, Instant::ZERO);
        p.handle_dns(q, Ok(vec![ip("fd00::1"), ip("10.0.0.1"), ip("fd00::2")]), Instant::ZERO, &db).unwrap();
        assert_eq!(drain(&mut p, &db), ["10.0.0.1:443", "[fd00::2]:443", "[fd00::1]:443", "Exhausted"]);
    }

    #[test]
    fn a_single_failed_route_is_still_tried() {
        let mut db = RouteDatabase::default();
        let mut p = planner(vec![]);
        let q = resolve(&mut p, &db);
        let only = Route::new(p.address().clone(), Proxy::Direct, "10.0.0.1:443".parse().unwrap());
        db.failed(&only, Instant::ZERO);
        p.handle_dns(q, Ok(vec![ip("10.0.0.1")]), Instant::ZERO, &db).unwrap();
        assert_eq!(drain(&mut p, &db), ["10.0.0.1:443", "Exhausted"]);
    }

    #[test]
    fn proxy_with_failed_route_gives_way_to_the_next_proxy() {
        // Proxies [A, B], A's only route failed: B's route first, then A's.
        let a = Proxy::http("10.1.0.1", 3128).unwrap();
        let b = Proxy::http("10.2.0.1", 3128).unwrap();
        let mut p = planner(vec![a.clone(), b]);
        let mut db = RouteDatabase::default();
        let failed = Route::new(p.address().clone(), a, "10.1.0.1:3128".parse().unwrap());
        db.failed(&failed, Instant::ZERO);
        assert_eq!(drain(&mut p, &db), ["10.2.0.1:3128", "10.1.0.1:3128", "Exhausted"]);
    }

    #[test]
    fn dns_failure_moves_to_the_next_proxy_and_empty_answer_is_an_error() {
        let named = Proxy::socks5("proxy.example", 1080).unwrap();
        let mut p = planner(vec![named.clone(), Proxy::Direct]);
        let db = RouteDatabase::default();
        let q1 = resolve(&mut p, &db);
        let out = p.handle_dns(q1, Ok(vec![]), Instant::ZERO, &db).unwrap().unwrap();
        assert_eq!(out.host, Host::Domain("proxy.example".into()));
        assert_eq!(out.proxy, named);
        assert_eq!(out.result, Err(DnsError::NoAddresses));
        let q2 = resolve(&mut p, &db);
        assert_ne!(q1, q2);
        let out = p.handle_dns(q2, Err(DnsError::Timeout), Instant::ZERO, &db).unwrap().unwrap();
        assert_eq!(out.host, Host::Domain("example.com".into()));
        assert_eq!(p.next(Instant::ZERO, &db), PlanStep::Exhausted);
    }

    /// Routes as `socket -> target` (target `name` when the proxy gets the name).
    fn drain_targets(p: &mut RoutePlanner, db: &RouteDatabase) -> Vec<String> {
        let mut out = Vec::new();
        while let PlanStep::Route(r) = p.next(Instant::ZERO, db) {
            out.push(format!(
                "{} -> {}",
                r.socket_addr(),
                r.target().map_or("name".into(), |t| t.to_string())
            ));
        }
        out
    }

    #[test]
    fn socks5_resolves_the_origin_locally_one_address_per_route() {
        let db = RouteDatabase::default();
        let mut p = planner(vec![Proxy::socks5("10.9.0.1", 1080).unwrap()]);
        let q = match p.next(Instant::ZERO, &db) {
            PlanStep::Resolve { query, host, port, proxy } => {
                assert_eq!((host, port), (Host::Domain("example.com".into()), 443), "the origin's name");
                assert!(proxy.resolves_origin_locally());
                query
            }
            other => panic!("{other:?}"),
        };
        // Per family: AAAA first, then A joins.
        let v6 = DnsAnswer::family(Family::V6, Ok(vec![ip("fd00::1")]));
        p.handle_dns_answer(q, v6, Instant::ZERO, &db).unwrap();
        match p.next(Instant::ZERO, &db) {
            PlanStep::Route(r) => assert_eq!(r.target(), Some(ip("fd00::1")), "AAAA starts at once"),
            other => panic!("{other:?}"),
        }
        let v4 = DnsAnswer::family(Family::V4, Ok(vec![ip("10.0.0.1"), ip("10.0.0.2")]));
        p.handle_dns_answer(q, v4, Instant::ZERO, &db).unwrap();
        assert_eq!(drain_targets(&mut p, &db), ["10.9.0.1:1080 -> 10.0.0.1", "10.9.0.1:1080 -> 10.0.0.2"]);
        // A failed target is postponed like any route.
        let mut db = RouteDatabase::default();
        let mut p = planner(vec![Proxy::socks5("10.9.0.1", 1080).unwrap()]);
        let q = resolve(&mut p, &db);
        let failed =
            Route::new(p.address().clone(), p.proxies()[0].clone(), "10.9.0.1:1080".parse().unwrap())
                .with_target(ip("10.0.0.1"));
        db.failed(&failed, Instant::ZERO);
        p.handle_dns(q, Ok(vec![ip("10.0.0.1"), ip("10.0.0.2")]), Instant::ZERO, &db).unwrap();
        assert_eq!(drain_targets(&mut p, &db), ["10.9.0.1:1080 -> 10.0.0.2", "10.9.0.1:1080 -> 10.0.0.1"]);
    }

    #[test]
    fn socks5_with_a_named_proxy_resolves_the_proxy_then_the_origin() {
        let db = RouteDatabase::default();
        let socks = Proxy::socks5("socks.internal", 1080).unwrap();
        let mut p = planner(vec![socks.clone(), Proxy::Direct]);
        let hosts = |p: &mut RoutePlanner| match p.next(Instant::ZERO, &db) {
            PlanStep::Resolve { query, host, .. } => (query, host.to_string()),
            other => panic!("{other:?}"),
        };
        let (q1, h1) = hosts(&mut p);
        assert_eq!(h1, "socks.internal");
        assert_eq!(p.next(Instant::ZERO, &db), PlanStep::Waiting);
        // Per family, no resolution delay for the proxy's own name.
        let a = DnsAnswer::family(Family::V4, Ok(vec![ip("10.9.0.1")]));
        let out = p.handle_dns_answer(q1, a, Instant::ZERO, &db).unwrap().unwrap();
        assert_eq!(out.result, Ok(vec![ip("10.9.0.1")]));
        assert_eq!(p.next(Instant::ZERO, &db), PlanStep::Waiting, "AAAA still to come");
        let aaaa = DnsAnswer::family(Family::V6, Err(DnsError::NoAddresses));
        assert_eq!(p.handle_dns_answer(q1, aaaa, Instant::ZERO, &db), Ok(None));
        let (q2, h2) = hosts(&mut p);
        assert_eq!(h2, "example.com");
        p.handle_dns(q2, Ok(vec![ip("10.0.0.7")]), Instant::ZERO, &db).unwrap();
        assert_eq!(drain_targets(&mut p, &db), ["10.9.0.1:1080 -> 10.0.0.7", "10.0.0.7:443 -> name"]);
        assert_eq!(p.next(Instant::ZERO, &db), PlanStep::Exhausted);

        // The proxy's name fails: on to the next proxy, the origin resolved once for it.
        let mut p = planner(vec![socks, Proxy::Direct]);
        let (q1, _) = hosts(&mut p);
        let out = p.handle_dns(q1, Err(DnsError::Timeout), Instant::ZERO, &db).unwrap().unwrap();
        assert_eq!(out.result, Err(DnsError::Timeout));
        let (q2, h2) = hosts(&mut p);
        assert_eq!(h2, "example.com");
        p.handle_dns(q2, Ok(vec![ip("10.0.0.7")]), Instant::ZERO, &db).unwrap();
        assert_eq!(drain_targets(&mut p, &db), ["10.0.0.7:443 -> name"]);
    }

    #[test]
    fn socks5h_gives_the_proxy_the_name() {
        let db = RouteDatabase::default();
        let mut p = planner(vec![Proxy::socks5h("10.9.0.1", 1080).unwrap()]);
        assert_eq!(drain_targets(&mut p, &db), ["10.9.0.1:1080 -> name"], "no lookup at all");
        // An IP-literal origin through socks5:// needs no lookup either.
        let a = Address::builder(Scheme::Http, "10.0.0.3", 80).build().unwrap();
        let socks = Proxy::socks5("10.9.0.1", 1080).unwrap();
        let mut p =
            RoutePlanner::new(IdAllocator::default().next_call(), a, vec![socks], PlanConfig::default());
        assert_eq!(drain_targets(&mut p, &db), ["10.9.0.1:1080 -> 10.0.0.3"]);
    }

    #[test]
    fn ip_literal_skips_dns_and_explicit_proxy_wins() {
        let a = Address::builder(Scheme::Http, "127.0.0.1", 8080).build().unwrap();
        let mut p = RoutePlanner::new(IdAllocator::default().next_call(), a, vec![], PlanConfig::default());
        let db = RouteDatabase::default();
        assert_eq!(drain(&mut p, &db), ["127.0.0.1:8080", "Exhausted"]);

        let explicit = Proxy::http("10.9.9.9", 8080).unwrap();
        let a = Address::builder(Scheme::Http, "example.com", 80).proxy(explicit.clone()).build().unwrap();
        let p = RoutePlanner::new(
            IdAllocator::default().next_call(),
            a,
            vec![Proxy::Direct],
            PlanConfig::default(),
        );
        assert_eq!(p.proxies(), &[explicit]);
    }

    #[test]
    fn duplicate_answers_give_one_route_and_no_fast_fallback_keeps_order() {
        let a = Address::builder(Scheme::Https, "example.com", 443).build().unwrap();
        let cfg = PlanConfig { fast_fallback: false, ..PlanConfig::default() };
        let mut p = RoutePlanner::new(IdAllocator::default().next_call(), a, vec![], cfg);
        let db = RouteDatabase::default();
        let q = resolve(&mut p, &db);
        p.handle_dns(q, Ok(vec![ip("10.0.0.1"), ip("fd00::1"), ip("10.0.0.1")]), Instant::ZERO, &db).unwrap();
        assert_eq!(drain(&mut p, &db), ["10.0.0.1:443", "[fd00::1]:443", "Exhausted"]);
    }
}
