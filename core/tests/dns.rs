//! DNS in the pool, on virtual time: answers per address family into the race
//! (RFC 8305 §3), the resolution delay, late families, the cache (TTL, failures,
//! bound), shared lookups, and what the events say.
#![allow(clippy::unwrap_used)]

#[path = "support/pool.rs"]
mod support;

use std::net::IpAddr;
use std::time::Duration;

use support::{http, ms, PoolSim};
use switchyard_core::{
    AcquireOptions, CallId, DnsAnswer, DnsCacheConfig, DnsError, DnsSource, EventKind, Family, PlanConfig,
    PoolConfig, RaceConfig,
};

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

fn answer(sim: &mut PoolSim, t: u64, call: CallId, answer: DnsAnswer) -> Vec<String> {
    let q = *sim.queries[&call].last().unwrap();
    sim.pool.handle_dns_answer(ms(t), q, answer).unwrap();
    sim.drain()
}

fn family(sim: &mut PoolSim, t: u64, call: CallId, f: Family, list: &[&str]) -> Vec<String> {
    answer(sim, t, call, DnsAnswer::family(f, Ok(ips(list))))
}

fn with_plan(plan: PlanConfig) -> PoolConfig {
    PoolConfig { race: RaceConfig { plan, ..RaceConfig::default() }, ..PoolConfig::default() }
}

/// `(name, source)` of each DNS event of `call`, in order.
fn dns_events(sim: &PoolSim, call: CallId) -> Vec<(String, DnsSource)> {
    sim.events
        .iter()
        .filter(|e| e.call == Some(call))
        .filter_map(|e| match e.kind.clone() {
            EventKind::DnsStart { source, .. } => Some(("start".to_owned(), source)),
            EventKind::DnsEnd { family, source, .. } => Some((format!("end {family:?}"), source)),
            EventKind::DnsFailed { source, .. } => Some(("failed".to_owned(), source)),
            _ => None,
        })
        .collect()
}

#[test]
fn aaaa_first_starts_at_once_and_a_late_a_answer_joins_the_race() {
    let mut sim = PoolSim::new(PoolConfig::default());
    let a = http("a.test");
    let c = sim.acquire(0, &a);
    assert_eq!(sim.drain(), ["resolve a.test"]);
    // AAAA first: attempts start at once, no waiting for A.
    assert_eq!(
        family(&mut sim, 5, c, Family::V6, &["fd00::1", "fd00::2"]),
        [format!("connect {c} [fd00::1]:80")]
    );
    // A arrives while [fd00::1] connects: its routes go before the untried IPv6 one.
    assert!(family(&mut sim, 100, c, Family::V4, &["10.0.0.1"]).is_empty(), "the stagger still applies");
    assert_eq!(sim.pool.poll_timeout(), Some(ms(255)));
    assert_eq!(sim.timeout(255), [format!("connect {c} 10.0.0.1:80")]);
    assert_eq!(sim.timeout(505), [format!("connect {c} [fd00::2]:80")]);
    assert_eq!(
        dns_events(&sim, c),
        [
            ("start".to_owned(), DnsSource::Lookup),
            ("end Some(V6)".to_owned(), DnsSource::Lookup),
            ("end Some(V4)".to_owned(), DnsSource::Lookup)
        ]
    );
}

#[test]
fn an_a_answer_first_waits_the_resolution_delay_for_aaaa() {
    let mut sim = PoolSim::new(PoolConfig::default());
    let c = sim.acquire(0, &http("a.test"));
    sim.drain();
    assert!(family(&mut sim, 0, c, Family::V4, &["10.0.0.1", "10.0.0.2"]).is_empty(), "A waits for AAAA");
    assert_eq!(sim.pool.poll_timeout(), Some(ms(50)), "for the 50 ms resolution delay");
    // AAAA within the delay: the two are interleaved, IPv6 first.
    assert_eq!(family(&mut sim, 30, c, Family::V6, &["fd00::1"]), [format!("connect {c} [fd00::1]:80")]);
    assert_eq!(sim.timeout(280), [format!("connect {c} 10.0.0.1:80")]);
    assert_eq!(sim.timeout(530), [format!("connect {c} 10.0.0.2:80")]);
}

#[test]
fn after_the_resolution_delay_a_goes_alone_and_a_late_aaaa_joins() {
    let mut sim = PoolSim::new(PoolConfig::default());
    let c = sim.acquire(0, &http("a.test"));
    sim.drain();
    assert!(family(&mut sim, 0, c, Family::V4, &["10.0.0.1", "10.0.0.2"]).is_empty());
    assert_eq!(sim.pool.poll_timeout(), Some(ms(50)), "not before the delay");
    assert_eq!(sim.timeout(50), [format!("connect {c} 10.0.0.1:80")]);
    // AAAA after attempts began: IPv6 goes next, then the untried IPv4 address.
    assert!(family(&mut sim, 120, c, Family::V6, &["fd00::1"]).is_empty());
    assert_eq!(sim.timeout(300), [format!("connect {c} [fd00::1]:80")]);
    assert_eq!(sim.timeout(550), [format!("connect {c} 10.0.0.2:80")]);
}

#[test]
fn the_resolution_delay_is_configurable_and_follows_the_preferred_family() {
    // No delay: A starts at once.
    let mut sim =
        PoolSim::new(with_plan(PlanConfig { resolution_delay: Duration::ZERO, ..PlanConfig::default() }));
    let c = sim.acquire(0, &http("a.test"));
    sim.drain();
    assert_eq!(family(&mut sim, 0, c, Family::V4, &["10.0.0.1"]), [format!("connect {c} 10.0.0.1:80")]);

    // IPv4 preferred: AAAA is the answer that waits, for 20 ms here.
    let plan = PlanConfig {
        preferred_family: Family::V4,
        resolution_delay: Duration::from_millis(20),
        ..PlanConfig::default()
    };
    let mut sim = PoolSim::new(with_plan(plan));
    let c = sim.acquire(0, &http("a.test"));
    sim.drain();
    assert!(family(&mut sim, 0, c, Family::V6, &["fd00::1"]).is_empty());
    assert_eq!(sim.timeout(20), [format!("connect {c} [fd00::1]:80")]);
}

#[test]
fn a_family_that_fails_releases_the_other_at_once_and_both_failing_fail_the_lookup() {
    let mut sim = PoolSim::new(PoolConfig::default());
    let c = sim.acquire(0, &http("a.test"));
    sim.drain();
    assert!(family(&mut sim, 0, c, Family::V4, &["10.0.0.1"]).is_empty());
    // AAAA has no records: no reason to wait for the delay.
    let out = answer(&mut sim, 10, c, DnsAnswer::family(Family::V6, Ok(vec![])));
    assert_eq!(out, [format!("connect {c} 10.0.0.1:80")]);

    let c = sim.acquire(20, &http("b.test"));
    sim.drain();
    let fail = |e: DnsError| DnsAnswer::family(Family::V6, Err(e));
    assert!(answer(&mut sim, 20, c, fail(DnsError::Timeout)).is_empty(), "A may still answer");
    let out = answer(&mut sim, 25, c, DnsAnswer::family(Family::V4, Err(DnsError::NoAddresses)));
    assert_eq!(out.len(), 1);
    assert!(out[0].starts_with(&format!("failed {c}")) && out[0].contains("lookup timed out"), "{out:?}");
    assert_eq!(
        dns_events(&sim, c),
        [("start".to_owned(), DnsSource::Lookup), ("failed".to_owned(), DnsSource::Lookup)]
    );
}

/// Opens a connection for a new call to `host` and keeps it in use, so the
/// next call to the same host must race (and so look the name up).
fn hold_new(sim: &mut PoolSim, t: u64, host: &str) -> (CallId, Vec<String>) {
    let c = sim.acquire(t, &http(host));
    (c, sim.drain())
}

#[test]
fn answers_are_cached_for_their_ttl_by_every_call() {
    let mut sim = PoolSim::new(PoolConfig::default());
    let (c1, out) = hold_new(&mut sim, 0, "a.test");
    assert_eq!(out, ["resolve a.test"]);
    let ttl = DnsAnswer::all(Ok(ips(&["127.0.0.1"]))).with_ttl(Duration::from_secs(30));
    assert_eq!(answer(&mut sim, 0, c1, ttl), [format!("connect {c1} 127.0.0.1:80")]);
    sim.connected(1, c1);
    // A second call within the TTL: no lookup.
    let (c2, out) = hold_new(&mut sim, 29_999, "a.test");
    assert_eq!(out, [format!("connect {c2} 127.0.0.1:80")]);
    assert_eq!(
        dns_events(&sim, c2),
        [("start".to_owned(), DnsSource::Cache), ("end None".to_owned(), DnsSource::Cache)]
    );
    sim.connected(30_000, c2);
    // At the TTL: asked again.
    let (c3, out) = hold_new(&mut sim, 30_000, "a.test");
    assert_eq!(out, ["resolve a.test"]);
    // Without a TTL (getaddrinfo), the default: 60 s.
    sim.dns(30_000, c3, &["127.0.0.1"]);
    sim.connected(30_001, c3);
    let (c4, out) = hold_new(&mut sim, 89_999, "a.test");
    assert_eq!(out, [format!("connect {c4} 127.0.0.1:80")]);
    sim.connected(90_000, c4);
    let (_, out) = hold_new(&mut sim, 90_000, "a.test");
    assert_eq!(out, ["resolve a.test"]);
    let s = sim.pool.stats();
    assert_eq!((s.dns_lookups, s.dns_cache_hits, s.dns_shared), (3, 2, 0));
}

#[test]
fn failures_are_cached_briefly_and_timeouts_not_at_all() {
    let config = PoolConfig {
        dns_cache: DnsCacheConfig { negative_ttl: Duration::from_secs(2), ..DnsCacheConfig::default() },
        ..PoolConfig::default()
    };
    let mut sim = PoolSim::new(config);
    let (c1, _) = hold_new(&mut sim, 0, "nx.test");
    let nx = DnsAnswer::all(Err(DnsError::Failed { message: "NXDOMAIN".into() }));
    assert!(answer(&mut sim, 0, c1, nx)[0].starts_with(&format!("failed {c1}")));
    let (c2, out) = hold_new(&mut sim, 1_999, "nx.test");
    assert_eq!(out.len(), 1);
    assert!(out[0].starts_with(&format!("failed {c2}")) && out[0].contains("NXDOMAIN"), "{out:?}");
    assert_eq!(
        dns_events(&sim, c2),
        [("start".to_owned(), DnsSource::Cache), ("failed".to_owned(), DnsSource::Cache)]
    );
    let (c3, out) = hold_new(&mut sim, 2_000, "nx.test");
    assert_eq!(out, ["resolve nx.test"]);
    // A timeout is asked again by the next call.
    answer(&mut sim, 2_000, c3, DnsAnswer::all(Err(DnsError::Timeout)));
    let (_, out) = hold_new(&mut sim, 2_001, "nx.test");
    assert_eq!(out, ["resolve nx.test"]);
}

#[test]
fn concurrent_calls_share_one_lookup_even_when_its_call_is_cancelled() {
    let mut sim = PoolSim::new(PoolConfig::default());
    let (leader, out) = hold_new(&mut sim, 0, "a.test");
    assert_eq!(out, ["resolve a.test"]);
    let (second, out) = hold_new(&mut sim, 1, "a.test");
    assert!(out.is_empty(), "no second query: {out:?}");
    // The AAAA part reaches both.
    let out = family(&mut sim, 2, leader, Family::V6, &["fd00::1"]);
    assert_eq!(out, [format!("connect {leader} [fd00::1]:80"), format!("connect {second} [fd00::1]:80")]);
    // A call joining now gets the part already received, at once.
    let (third, out) = hold_new(&mut sim, 3, "a.test");
    assert_eq!(out, [format!("connect {third} [fd00::1]:80")]);
    // The leader's call goes away; the A answer still reaches the others.
    sim.pool.cancel(ms(4), leader);
    sim.drain();
    let q = *sim.queries[&leader].last().unwrap();
    sim.pool.handle_dns_answer(ms(100), q, DnsAnswer::family(Family::V4, Ok(ips(&["10.0.0.1"])))).unwrap();
    assert!(sim.drain().is_empty());
    let out = sim.timeout(252);
    assert_eq!(out, [format!("connect {second} 10.0.0.1:80")]);
    assert_eq!(sim.timeout(253), [format!("connect {third} 10.0.0.1:80")]);
    assert_eq!(
        dns_events(&sim, second),
        [
            ("start".to_owned(), DnsSource::Shared),
            ("end Some(V6)".to_owned(), DnsSource::Shared),
            ("end Some(V4)".to_owned(), DnsSource::Shared)
        ]
    );
    // And the whole answer is cached.
    let (fourth, out) = hold_new(&mut sim, 300, "a.test");
    assert_eq!(out, [format!("connect {fourth} [fd00::1]:80")]);
    let s = sim.pool.stats();
    assert_eq!((s.dns_lookups, s.dns_shared, s.dns_cache_hits), (1, 2, 1));
}

#[test]
fn the_cache_is_bounded_least_recently_used_first_and_can_be_cleared() {
    let config = PoolConfig {
        dns_cache: DnsCacheConfig { capacity: 2, ..DnsCacheConfig::default() },
        ..PoolConfig::default()
    };
    let mut sim = PoolSim::new(config);
    for (t, host) in [(0, "a.test"), (1, "b.test")] {
        let (c, _) = hold_new(&mut sim, t, host);
        sim.dns(t, c, &["127.0.0.1"]);
    }
    // a.test used again: b.test is now the least recently used.
    let (_, out) = hold_new(&mut sim, 2, "a.test");
    assert!(out[0].starts_with("connect"), "{out:?}");
    let (c, _) = hold_new(&mut sim, 3, "c.test");
    sim.dns(3, c, &["127.0.0.1"]);
    assert_eq!(sim.pool.dns_cache_len(), 2);
    assert!(hold_new(&mut sim, 4, "a.test").1[0].starts_with("connect"));
    assert_eq!(hold_new(&mut sim, 5, "b.test").1, ["resolve b.test"]);
    sim.pool.clear_dns_cache();
    assert_eq!(sim.pool.dns_cache_len(), 0);
    assert_eq!(hold_new(&mut sim, 6, "a.test").1, ["resolve a.test"]);
}

#[test]
fn a_failed_route_keeps_its_answer_and_is_postponed() {
    let mut sim = PoolSim::new(PoolConfig::default());
    let (c1, _) = hold_new(&mut sim, 0, "a.test");
    sim.dns(0, c1, &["10.0.0.1", "10.0.0.2"]);
    let a1 = sim.last_attempt(c1);
    let refused =
        switchyard_core::ConnectError::from_io(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
    sim.pool.handle_failed(ms(1), a1, refused).unwrap();
    sim.drain();
    // The next call has the cached answer; the failed route goes last.
    let (c2, out) = hold_new(&mut sim, 10, "a.test");
    assert_eq!(out, [format!("connect {c2} 10.0.0.2:80")]);
}

#[test]
fn an_exclusive_call_and_one_to_another_port_look_up_separately() {
    let mut sim = PoolSim::new(PoolConfig::default());
    let (c1, _) = hold_new(&mut sim, 0, "a.test");
    sim.dns(0, c1, &["127.0.0.1"]);
    // The cache key includes the port the routes dial.
    let other_port =
        switchyard_core::Address::builder(switchyard_core::Scheme::Http, "a.test", 8080).build().unwrap();
    sim.acquire(1, &other_port);
    assert_eq!(sim.drain(), ["resolve a.test"]);
    // An exclusive call uses the cache like any other.
    let c3 =
        sim.acquire_with(2, &http("a.test"), AcquireOptions { exclusive: true, ..AcquireOptions::default() });
    assert_eq!(sim.drain(), [format!("connect {c3} 127.0.0.1:80")]);
}

mod planner_props {
    use std::collections::BTreeSet;
    use std::net::IpAddr;
    use std::time::Duration;

    use proptest::prelude::*;
    use switchyard_core::{
        Address, DnsAnswer, Family, IdAllocator, Instant, PlanConfig, PlanStep, RouteDatabase, RoutePlanner,
        Scheme,
    };

    fn v6(i: u8) -> IpAddr {
        format!("fd00::{}", u16::from(i) + 1).parse().unwrap()
    }
    fn v4(i: u8) -> IpAddr {
        format!("10.0.0.{}", u16::from(i) + 1).parse().unwrap()
    }

    proptest! {
        /// Whatever the order and timing of the A and AAAA answers: every
        /// address is planned exactly once; nothing is planned before the
        /// preferred family answers or the resolution delay ends; and when AAAA
        /// comes within the delay of A, the first route is IPv6.
        #[test]
        fn every_address_once_and_ipv6_first_within_the_delay(
            n6 in 0u8..4, n4 in 0u8..4, t6 in 0u64..200, t4 in 0u64..200, delay in 0u64..100,
        ) {
            let address = Address::builder(Scheme::Http, "a.test", 80).build().unwrap();
            let plan = PlanConfig { resolution_delay: Duration::from_millis(delay), ..PlanConfig::default() };
            let mut p = RoutePlanner::new(IdAllocator::default().next_call(), address, vec![], plan);
            let db = RouteDatabase::default();
            let PlanStep::Resolve { query, .. } = p.next(Instant::ZERO, &db) else { panic!("a lookup first") };
            let six: Vec<IpAddr> = (0..n6).map(v6).collect();
            let four: Vec<IpAddr> = (0..n4).map(v4).collect();
            let mut inputs = vec![(t6, Family::V6, six.clone()), (t4, Family::V4, four.clone())];
            inputs.sort_by_key(|(t, f, _)| (*t, *f == Family::V4));
            let mut planned: Vec<(u64, IpAddr)> = Vec::new();
            let mut now = 0;
            let mut pending = inputs.into_iter().peekable();
            loop {
                // The next input or planner deadline, whichever is first.
                let deadline = p.poll_timeout().map(|i| (i - Instant::ZERO).as_millis() as u64);
                let next_input = pending.peek().map(|(t, _, _)| *t);
                let step = match (deadline, next_input) {
                    (Some(d), Some(i)) => d.min(i),
                    (Some(d), None) => d,
                    (None, Some(i)) => i,
                    (None, None) => break,
                };
                now = now.max(step);
                let at = Instant::from_millis(now);
                if next_input == Some(step) {
                    let (_, f, ips) = pending.next().unwrap();
                    p.handle_dns_answer(query, DnsAnswer::family(f, Ok(ips)), at, &db).unwrap();
                }
                p.handle_timeout(at, &db);
                while let PlanStep::Route(r) = p.next(at, &db) {
                    planned.push((now, r.socket_addr().ip()));
                }
            }
            let got: Vec<IpAddr> = planned.iter().map(|(_, ip)| *ip).collect();
            let unique: BTreeSet<IpAddr> = got.iter().copied().collect();
            prop_assert_eq!(unique.len(), got.len(), "an address planned twice: {:?}", got);
            let want: BTreeSet<IpAddr> = six.iter().chain(&four).copied().collect();
            prop_assert_eq!(&unique, &want);
            if let Some((first_at, first)) = planned.first() {
                let earliest = if n6 > 0 { t6.min(t4 + delay) } else { t4.max(t6).min(t4 + delay) };
                prop_assert!(*first_at >= earliest.min(t6.max(t4)), "planned at {} before {}", first_at, earliest);
                if n6 > 0 && t6 <= t4 + delay {
                    prop_assert!(first.is_ipv6(), "AAAA within the delay: IPv6 first, got {:?}", got);
                }
            }
        }
    }
}
