//! The connect race, rule by rule (BEHAVIOUR §2–3), with exact virtual times.
//! Addresses are data only (ULA and private ranges); nothing here touches a socket.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use support::{ms, refused, Sim};
use switchyard_core::{
    Action, Address, CancelReason, ConnectError, DnsError, EventKind, Failure, Misuse, PlanConfig, Protocol,
    Proxy, RaceConfig, RaceErrorKind, Route, RouteDatabase, Scheme, TlsFailure,
};

fn https(host: &str) -> Address {
    Address::builder(Scheme::Https, host, 443).build().unwrap()
}
fn http(host: &str) -> Address {
    Address::builder(Scheme::Http, host, 80).build().unwrap()
}

/// Starts an http race on `example.com` and answers its DNS at 0 ms.
fn http_race(ips: &[&str]) -> (Sim, Vec<String>) {
    let (mut sim, out) =
        Sim::start(http("example.com"), vec![], RaceConfig::default(), RouteDatabase::default());
    assert_eq!(out, ["resolve example.com:80"]);
    let out = sim.dns(0, 0, ips);
    (sim, out)
}

#[test]
fn attempts_start_at_0_and_250ms() {
    let (mut sim, out) = http_race(&["fd00::1", "10.0.0.1", "fd00::2"]);
    assert_eq!(out, ["connect 0 [fd00::1]:80"]);
    assert_eq!(sim.timeout(250), ["connect 1 10.0.0.1:80"]);
    assert_eq!(sim.timeout(500), ["connect 2 [fd00::2]:80"]);
    // Nothing left to stagger: the next deadline is the first connect timeout.
    assert_eq!(sim.race.poll_timeout(), Some(ms(10_000)));
}

#[test]
fn failure_with_nothing_in_flight_starts_the_next_attempt_at_once() {
    let (mut sim, _) = http_race(&["fd00::1", "10.0.0.1"]);
    assert_eq!(sim.failed(30, 0, refused()), ["connect 1 10.0.0.1:80"]);
    // The stagger restarts from 30 ms; nothing else to start anyway.
    assert_eq!(sim.race.poll_timeout(), Some(ms(10_030)));
}

#[test]
fn failure_while_another_is_in_flight_keeps_the_250ms_cadence() {
    let (mut sim, _) = http_race(&["fd00::1", "10.0.0.1", "fd00::2", "10.0.0.2"]);
    assert_eq!(sim.timeout(250), ["connect 1 10.0.0.1:80"]);
    // Attempt 0 fails at 300 ms while 1 is in flight: no early start.
    assert!(sim.failed(300, 0, refused()).is_empty());
    assert_eq!(sim.timeout(500), ["connect 2 [fd00::2]:80"]);
}

#[test]
fn winner_at_260ms_cancels_the_others_at_260ms() {
    let (mut sim, _) = http_race(&["fd00::1", "10.0.0.1", "fd00::2"]);
    sim.timeout(250);
    assert_eq!(sim.connected(260, 1), ["cancel 0", "won 1 http/1.1"]);
    assert!(sim.race.is_finished());
    assert_eq!(sim.race.poll_timeout(), None);
    // The loser ran 260 ms >= the attempt delay: recorded, so it goes last next time.
    let black_hole = Route::new(http("example.com"), Proxy::Direct, "[fd00::1]:80".parse().unwrap());
    assert!(sim.db.should_postpone(&black_hole, ms(260)));
    // A late report from the cancelled loser is ignored.
    assert!(sim.connected(270, 0).is_empty());
    assert_eq!(
        sim.event_log(),
        [
            "0 proxy_select_start",
            "0 proxy_select_end [DIRECT]",
            "0 dns_start example.com",
            "0 dns_end 3",
            "0 connect_start 0 example.com at [fd00::1]:80",
            "250 connect_start 1 example.com at 10.0.0.1:80",
            "260 connect_cancelled 0 LostRace",
            "260 connect_end 1 http/1.1",
        ]
    );
}

#[test]
fn a_black_hole_costs_one_attempt_delay_once() {
    let (mut sim, _) = http_race(&["fd00::1", "10.0.0.1"]);
    sim.timeout(250);
    sim.connected(260, 1);
    // The next call for the same Address, sharing the database, tries IPv4 first.
    let (mut next, out) = Sim::start(http("example.com"), vec![], RaceConfig::default(), sim.db.clone());
    assert_eq!(out, ["resolve example.com:80"]);
    assert_eq!(next.dns(1000, 0, &["fd00::1", "10.0.0.1"]), ["connect 0 10.0.0.1:80"]);
    // A loser cancelled before a whole attempt delay is not recorded.
    let (mut quick, _) =
        Sim::start(http("example.com"), vec![], RaceConfig::default(), RouteDatabase::default());
    quick.dns(0, 0, &["fd00::1", "10.0.0.1"]);
    quick.timeout(250);
    assert_eq!(quick.connected(251, 1), ["cancel 0", "won 1 http/1.1"]);
    let r0 = Route::new(http("example.com"), Proxy::Direct, "[fd00::1]:80".parse().unwrap());
    assert!(quick.db.should_postpone(&r0, ms(251)), "251 ms >= 250 ms counts");
    // With nothing else in flight a failure restarts at once, so a loser can be
    // beaten by a later route after less than the delay: not recorded.
    let (mut short, _) =
        Sim::start(http("example.com"), vec![], RaceConfig::default(), RouteDatabase::default());
    short.dns(0, 0, &["fd00::1", "10.0.0.1", "fd00::2"]);
    short.failed(10, 0, refused()); // starts 10.0.0.1 at 10
    short.timeout(260); // starts fd00::2 at 260
    assert_eq!(short.connected(300, 2), ["cancel 1", "won 2 http/1.1"]);
    let r1 = Route::new(http("example.com"), Proxy::Direct, "10.0.0.1:80".parse().unwrap());
    assert!(short.db.should_postpone(&r1, ms(300)), "in flight 290 ms, started before the winner");
}

#[test]
fn a_later_loser_is_not_blamed() {
    // Attempt 0 wins after attempt 1 started; 1 was in flight only 10 ms.
    let (mut sim, _) = http_race(&["fd00::1", "10.0.0.1"]);
    sim.timeout(250);
    assert_eq!(sim.connected(260, 0), ["cancel 1", "won 0 http/1.1"]);
    assert!(sim.db.is_empty());
}

#[test]
fn interleaves_4a_4b_4c_6a_6b_as_6a_4a_6b_4b_4c() {
    let (mut sim, out) = http_race(&["10.0.0.1", "10.0.0.2", "10.0.0.3", "fd00::1", "fd00::2"]);
    let mut starts = out;
    for t in [250, 500, 750, 1000] {
        starts.extend(sim.timeout(t));
    }
    assert_eq!(
        starts,
        [
            "connect 0 [fd00::1]:80",
            "connect 1 10.0.0.1:80",
            "connect 2 [fd00::2]:80",
            "connect 3 10.0.0.2:80",
            "connect 4 10.0.0.3:80",
        ]
    );
}

#[test]
fn preferred_family_v4_starts_with_ipv4() {
    let mut config = RaceConfig::default();
    config.plan.preferred_family = switchyard_core::Family::V4;
    let (mut sim, _) = Sim::start(http("example.com"), vec![], config, RouteDatabase::default());
    assert_eq!(sim.dns(0, 0, &["fd00::1", "10.0.0.1"]), ["connect 0 10.0.0.1:80"]);
}

#[test]
fn a_single_failed_route_is_still_tried() {
    let mut db = RouteDatabase::default();
    let only = Route::new(http("example.com"), Proxy::Direct, "10.0.0.1:80".parse().unwrap());
    db.failed(&only, ms(0));
    let (mut sim, _) = Sim::start(http("example.com"), vec![], RaceConfig::default(), db);
    assert_eq!(sim.dns(5, 0, &["10.0.0.1"]), ["connect 0 10.0.0.1:80"]);
    assert_eq!(sim.connected(6, 0), ["won 0 http/1.1"]);
    // Success clears the failure.
    assert!(!sim.db.should_postpone(&only, ms(6)));
}

#[test]
fn proxies_a_b_with_a_failed_route_try_b_first() {
    let a = Proxy::http("10.1.0.1", 3128).unwrap();
    let b = Proxy::http("10.2.0.1", 3128).unwrap();
    let mut db = RouteDatabase::default();
    db.failed(&Route::new(https("example.com"), a.clone(), "10.1.0.1:3128".parse().unwrap()), ms(0));
    let (mut sim, out) = Sim::start(https("example.com"), vec![a, b], RaceConfig::default(), db);
    assert_eq!(out, ["connect 0 10.2.0.1:3128"]);
    assert_eq!(sim.failed(40, 0, refused()), ["connect 1 10.1.0.1:3128"]);
    assert_eq!(sim.connected(50, 1), ["handshake 1"]);
    assert_eq!(sim.established(90, 1, Some(Protocol::Http1)), ["won 1 http/1.1"]);
    let log = sim.event_log();
    assert_eq!(log[1], "0 proxy_select_end [http://10.1.0.1:3128, http://10.2.0.1:3128]");
    assert_eq!(log[2], "0 connect_start 0 example.com:443 via proxy 10.2.0.1:3128");
}

#[test]
fn proxy_dns_failure_is_reported_and_planning_continues() {
    let named = Proxy::http("proxy.internal", 3128).unwrap();
    let (mut sim, out) = Sim::start(
        http("example.com"),
        vec![named, Proxy::Direct],
        RaceConfig::default(),
        RouteDatabase::default(),
    );
    assert_eq!(out, ["resolve proxy.internal:3128"]);
    assert_eq!(
        sim.dns_err(20, 0, DnsError::Failed { message: "NXDOMAIN".into() }),
        ["resolve example.com:80"]
    );
    assert_eq!(sim.dns(30, 1, &["10.0.0.1"]), ["connect 0 10.0.0.1:80"]);
    assert!(sim.event_log().contains(&"20 dns_failed proxy.internal: lookup failed: NXDOMAIN".to_owned()));
    assert_eq!(sim.connected(31, 0), ["won 0 http/1.1"]);
}

#[test]
fn empty_dns_answer_is_an_error_naming_the_host() {
    let (mut sim, _) =
        Sim::start(http("example.com"), vec![], RaceConfig::default(), RouteDatabase::default());
    let out = sim.dns(7, 0, &[]);
    assert_eq!(out, ["failed: could not connect to http://example.com:80: dns example.com: no addresses"]);
    match sim.finished {
        Some(Action::Failed(ref e)) => {
            assert_eq!(e.kind, RaceErrorKind::AllRoutesFailed);
            assert!(matches!(e.failures[..], [Failure::Dns { error: DnsError::NoAddresses, .. }]));
        }
        ref other => panic!("{other:?}"),
    }
}

#[test]
fn ip_literal_skips_dns() {
    let (mut sim, out) =
        Sim::start(http("127.0.0.1"), vec![], RaceConfig::default(), RouteDatabase::default());
    assert_eq!(out, ["connect 0 127.0.0.1:80"]);
    assert_eq!(sim.connected(1, 0), ["won 0 http/1.1"]);
    assert!(!sim.event_log().iter().any(|e| e.contains("dns")));
}

#[test]
fn tls_runs_only_for_the_winner_and_events_nest() {
    let (mut sim, out) =
        Sim::start(https("example.com"), vec![], RaceConfig::default(), RouteDatabase::default());
    assert_eq!(out, ["resolve example.com:443"]);
    sim.dns(0, 0, &["fd00::1", "10.0.0.1"]);
    sim.timeout(250);
    assert_eq!(sim.connected(260, 1), ["cancel 0", "handshake 1"]);
    // No new attempt while the winner handshakes, even past the stagger.
    assert_eq!(sim.race.poll_timeout(), Some(ms(10_260)));
    assert_eq!(sim.established(300, 1, Some(Protocol::Http2)), ["won 1 h2"]);
    assert_eq!(
        sim.event_log()[4..],
        [
            "0 connect_start 0 example.com at [fd00::1]:443",
            "250 connect_start 1 example.com at 10.0.0.1:443",
            "260 connect_cancelled 0 LostRace",
            "260 secure_connect_start 1",
            "300 secure_connect_end 1 h2",
            "300 connect_end 1 h2",
        ]
    );
}

#[test]
fn tls_failure_continues_the_race_retrying_cancelled_losers_first() {
    let (mut sim, _) =
        Sim::start(https("example.com"), vec![], RaceConfig::default(), RouteDatabase::default());
    sim.dns(0, 0, &["fd00::1", "10.0.0.1", "fd00::2"]);
    sim.timeout(250);
    assert_eq!(sim.connected(260, 1), ["cancel 0", "handshake 1"]);
    let tls = ConnectError::Tls { kind: TlsFailure::Protocol, message: "handshake alert".into() };
    // The cancelled loser (fd00::1) is retried before the untried fd00::2.
    assert_eq!(sim.failed(280, 1, tls), ["connect 2 [fd00::1]:443"]);
    assert_eq!(sim.timeout(530), ["connect 3 [fd00::2]:443"]);
    assert_eq!(sim.connected(540, 3), ["cancel 2", "handshake 3"]);
    assert_eq!(sim.established(560, 3, None), ["won 3 http/1.1"]);
    // The TLS-failed route was never retried.
    assert_eq!(support::by_route(&sim)["10.0.0.1:443"], 1);
}

#[test]
fn connect_timeout_bounds_each_attempt() {
    let config = RaceConfig { connect_timeout: Duration::from_millis(1000), ..RaceConfig::default() };
    let (mut sim, _) = Sim::start(http("example.com"), vec![], config, RouteDatabase::default());
    sim.dns(0, 0, &["fd00::1", "10.0.0.1"]);
    assert_eq!(sim.timeout(250), ["connect 1 10.0.0.1:80"]);
    assert_eq!(sim.timeout(1000), ["cancel 0"]);
    match sim.events.iter().rev().find(|e| matches!(e.kind, EventKind::ConnectFailed { .. })) {
        Some(e) => assert!(matches!(
            e.kind,
            EventKind::ConnectFailed { error: ConnectError::ConnectTimeout { .. }, .. }
        )),
        None => panic!("no connect_failed"),
    }
    let out = sim.timeout(1250);
    assert_eq!(out[0], "cancel 1");
    assert_eq!(
        out[1],
        "failed: could not connect to http://example.com:80: 2 failures; \
         1) example.com at [fd00::1]:80: connect timed out after 1s; \
         2) example.com at 10.0.0.1:80: connect timed out after 1s"
    );
}

#[test]
fn handshake_timeout_fails_the_route_and_the_race_goes_on() {
    let config = RaceConfig { handshake_timeout: Duration::from_millis(500), ..RaceConfig::default() };
    let (mut sim, _) = Sim::start(https("example.com"), vec![], config, RouteDatabase::default());
    sim.dns(0, 0, &["10.0.0.1", "10.0.0.2"]);
    assert_eq!(sim.connected(10, 0), ["handshake 0"]);
    assert_eq!(sim.timeout(510), ["cancel 0", "connect 1 10.0.0.2:443"]);
}

#[test]
fn all_failures_are_aggregated_in_order() {
    let (mut sim, _) = http_race(&["fd00::1", "10.0.0.1"]);
    sim.timeout(250);
    sim.failed(300, 1, refused());
    let out =
        sim.failed(400, 0, ConnectError::from_io(&std::io::Error::from(std::io::ErrorKind::HostUnreachable)));
    assert_eq!(out.len(), 1);
    let Some(Action::Failed(e)) = &sim.finished else { panic!("not failed") };
    let routes: Vec<String> = e
        .failures
        .iter()
        .map(|f| match f {
            Failure::Connect { route, .. } => route.to_string(),
            Failure::Dns { host, .. } => host.to_string(),
        })
        .collect();
    assert_eq!(routes, ["example.com at 10.0.0.1:80", "example.com at [fd00::1]:80"]);
    assert!(e.is_retryable());
}

#[test]
fn certificate_failures_are_not_retryable() {
    let (mut sim, _) =
        Sim::start(https("example.com"), vec![], RaceConfig::default(), RouteDatabase::default());
    sim.dns(0, 0, &["10.0.0.1"]);
    sim.connected(1, 0);
    let cert = ConnectError::Tls { kind: TlsFailure::Hostname, message: "not valid for example.com".into() };
    let out = sim.failed(2, 0, cert);
    assert_eq!(
        out,
        ["failed: could not connect to https://example.com:443: example.com at 10.0.0.1:443: \
          certificate does not cover the host: not valid for example.com"]
    );
    let Some(Action::Failed(e)) = &sim.finished else { panic!() };
    assert!(!e.is_retryable());
}

#[test]
fn a_pooled_connection_arriving_mid_race_wins() {
    let (mut sim, _) = http_race(&["fd00::1", "10.0.0.1"]);
    sim.timeout(250);
    let conn = sim.next_connection();
    assert!(sim.race.adopt_pooled(ms(255), conn));
    assert_eq!(sim.drain(), ["cancel 0", "cancel 1", "pooled conn#1"]);
    assert!(!sim.race.adopt_pooled(ms(256), conn), "only once");
    // Cancelled for the pool: not blamed on the routes.
    assert!(sim.db.is_empty());
    assert!(sim.connected(260, 1).is_empty());
}

#[test]
fn call_deadline_ends_the_race_with_a_timeout_error() {
    let (mut sim, out) = Sim::start_with_deadline(
        http("example.com"),
        vec![],
        RaceConfig::default(),
        RouteDatabase::default(),
        Some(ms(400)),
    );
    assert_eq!(out, ["resolve example.com:80"]);
    sim.dns(0, 0, &["fd00::1", "10.0.0.1"]);
    sim.timeout(250);
    let out = sim.timeout(400);
    assert_eq!(
        out,
        [
            "cancel 0",
            "cancel 1",
            "failed: call timed out connecting to http://example.com:80 (in the TCP connect)"
        ]
    );
    let Some(Action::Failed(e)) = &sim.finished else { panic!() };
    assert!(!e.is_retryable());
    assert!(sim
        .events
        .iter()
        .any(|e| matches!(e.kind, EventKind::ConnectCancelled { reason: CancelReason::CallTimeout, .. })));
}

#[test]
fn cancel_closes_every_attempt_and_ignores_late_reports() {
    let (mut sim, _) = http_race(&["fd00::1", "10.0.0.1"]);
    sim.timeout(250);
    sim.race.cancel(ms(260));
    assert_eq!(sim.drain(), ["cancel 0", "cancel 1"]);
    sim.race.cancel(ms(261));
    assert!(sim.drain().is_empty());
    assert!(sim.failed(270, 0, refused()).is_empty());
    assert_eq!(sim.race.poll_timeout(), None);
    assert!(sim.finished.is_none());
}

#[test]
fn driver_misuse_is_typed_and_harmless() {
    let (mut sim, _) = http_race(&["10.0.0.1"]);
    let ours = sim.attempts[0];
    // A handshake result for an attempt never asked to handshake: misuse, and
    // nothing changes.
    let before = sim.race.poll_timeout();
    assert_eq!(
        sim.race.handle_established(ms(2), ours, None, &mut sim.db),
        Err(Misuse::NotHandshaking(ours))
    );
    assert_eq!(sim.race.poll_timeout(), before);
    assert!(sim.drain().is_empty());
    // A repeated TCP report for the winner is ignored.
    assert_eq!(sim.connected(3, 0), ["won 0 http/1.1"]);
    assert!(sim.connected(4, 0).is_empty());
}

#[test]
fn ids_from_another_call_are_misuse() {
    use switchyard_core::{IdAllocator, Race, RaceRequest};
    let mut ids = IdAllocator::default();
    let mut db = RouteDatabase::default();
    let request = |call| RaceRequest {
        call,
        address: http("127.0.0.1"),
        proxies: vec![],
        proxy_reason: None,
        deadline: None,
        first_sequence: Default::default(),
        avoid: Vec::new(),
        known_answers: Vec::new(),
    };
    let mut a = Race::start(request(ids.next_call()), RaceConfig::default(), ms(0), &mut db);
    let mut b = Race::start(request(ids.next_call()), RaceConfig::default(), ms(0), &mut db);
    let Some(Action::Connect { attempt: b0, .. }) = b.poll_action() else { panic!() };
    assert_eq!(a.handle_connected(ms(1), b0, &mut db), Err(Misuse::UnknownAttempt(b0)));
    assert_eq!(a.in_flight(), 1);
    assert!(matches!(a.poll_action(), Some(Action::Connect { .. })));
    assert_eq!(a.poll_action(), None);
}

#[test]
fn an_unknown_attempt_id_is_misuse() {
    let (mut sim, _) = http_race(&["10.0.0.1"]);
    // Attempt ids beyond what this race issued.
    let (mut bigger, _) = http_race(&["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
    bigger.timeout(250);
    let unissued = bigger.attempts[1];
    assert_eq!(
        sim.race.handle_failed(ms(3), unissued, refused(), &mut sim.db),
        Err(Misuse::UnknownAttempt(unissued))
    );
    assert_eq!(sim.race.in_flight(), 1);
}

#[test]
fn negotiated_protocol_must_be_allowed() {
    let a = Address::builder(Scheme::Https, "example.com", 443).protocols([Protocol::Http2]).build().unwrap();
    let (mut sim, _) = Sim::start(a, vec![], RaceConfig::default(), RouteDatabase::default());
    sim.dns(0, 0, &["10.0.0.1", "10.0.0.2"]);
    sim.connected(1, 0);
    // No ALPN means HTTP/1.1, which this Address does not allow.
    assert_eq!(sim.established(2, 0, None), ["connect 1 10.0.0.2:443"]);
    sim.connected(3, 1);
    assert_eq!(sim.established(4, 1, Some(Protocol::Http2)), ["won 1 h2"]);
}

#[test]
fn h2_prior_knowledge_wins_without_handshake() {
    let a = Address::builder(Scheme::Http, "example.com", 8080)
        .protocols([Protocol::H2PriorKnowledge])
        .build()
        .unwrap();
    let (mut sim, _) = Sim::start(a, vec![], RaceConfig::default(), RouteDatabase::default());
    sim.dns(0, 0, &["10.0.0.1"]);
    assert_eq!(sim.connected(1, 0), ["won 0 h2c (prior knowledge)"]);
}

#[test]
fn socks5_plain_http_handshakes_without_tls_events() {
    let socks = Proxy::socks5h("10.5.0.1", 1080).unwrap();
    let (mut sim, out) =
        Sim::start(http("example.com"), vec![socks], RaceConfig::default(), RouteDatabase::default());
    // The origin is not resolved: the proxy does that.
    assert_eq!(out, ["connect 0 10.5.0.1:1080"]);
    assert_eq!(sim.connected(5, 0), ["handshake 0"]);
    assert_eq!(sim.established(9, 0, None), ["won 0 http/1.1"]);
    assert!(!sim.event_log().iter().any(|e| e.contains("secure")));
}

#[test]
fn without_fast_fallback_attempts_are_sequential_in_dns_order() {
    let config = RaceConfig {
        plan: PlanConfig { fast_fallback: false, ..PlanConfig::default() },
        ..RaceConfig::default()
    };
    let (mut sim, _) = Sim::start(http("example.com"), vec![], config, RouteDatabase::default());
    assert_eq!(sim.dns(0, 0, &["10.0.0.1", "fd00::1"]), ["connect 0 10.0.0.1:80"]);
    // No stagger timer: only the connect timeout.
    assert_eq!(sim.race.poll_timeout(), Some(ms(10_000)));
    assert_eq!(sim.failed(700, 0, refused()), ["connect 1 [fd00::1]:80"]);
}

#[test]
fn lazy_dns_for_the_next_proxy_happens_at_the_stagger() {
    let a = Proxy::http("10.1.0.1", 3128).unwrap();
    let b = Proxy::http("proxy-b.internal", 3128).unwrap();
    let (mut sim, out) =
        Sim::start(http("example.com"), vec![a, b], RaceConfig::default(), RouteDatabase::default());
    assert_eq!(out, ["connect 0 10.1.0.1:3128"]);
    assert_eq!(sim.timeout(250), ["resolve proxy-b.internal:3128"]);
    // Waiting for DNS arms no stagger timer (no busy loop).
    assert_eq!(sim.race.poll_timeout(), Some(ms(10_000)));
    assert_eq!(sim.dns(300, 0, &["10.2.0.1"]), ["connect 1 10.2.0.1:3128"]);
}

// ---------------------------------------------------------------------------
// HTTP/3 beside TCP: QUIC and TCP routes per address, one race.

fn h3_beside_tcp() -> Address {
    Address::builder(Scheme::Https, "example.com", 443)
        .protocols([Protocol::Http2, Protocol::Http1, Protocol::Http3])
        .http3_port(8443)
        .build()
        .unwrap()
}

#[test]
fn quic_goes_first_on_its_port_and_tcp_follows_one_attempt_delay_later() {
    let (mut sim, out) = Sim::start(h3_beside_tcp(), vec![], RaceConfig::default(), RouteDatabase::default());
    assert_eq!(out, ["resolve example.com:443"]);
    let out = sim.dns(0, 0, &["10.0.0.1", "fd00::1"]);
    assert_eq!(out, ["connect 0 [fd00::1]:8443 quic"], "QUIC first, on the advertised port");
    assert_eq!(sim.timeout(250), ["connect 1 [fd00::1]:443"], "then TCP to the same address");
    assert_eq!(sim.timeout(500), ["connect 2 10.0.0.1:8443 quic"]);
}

#[test]
fn tcp_winning_while_quic_is_silent_marks_quic_failed_for_the_family() {
    let (mut sim, _) = Sim::start(h3_beside_tcp(), vec![], RaceConfig::default(), RouteDatabase::default());
    sim.dns(0, 0, &["10.0.0.1"]);
    sim.timeout(250);
    // TCP connects at 300 ms; QUIC, started 300 ms before, never heard back.
    assert_eq!(sim.connected(300, 1), ["cancel 0", "handshake 1"]);
    let quic_elsewhere = Route::quic(h3_beside_tcp(), "10.0.0.9:8443".parse().unwrap());
    assert!(sim.db.should_postpone(&quic_elsewhere, ms(300)), "every IPv4 QUIC route goes last");
    let quic_v6 = Route::quic(h3_beside_tcp(), "[fd00::9]:8443".parse().unwrap());
    assert!(!sim.db.should_postpone(&quic_v6, ms(300)), "IPv6 is another network path");
    let tcp = Route::new(h3_beside_tcp(), Proxy::Direct, "10.0.0.9:443".parse().unwrap());
    assert!(!sim.db.should_postpone(&tcp, ms(300)));
    // Five minutes later QUIC is tried again.
    assert!(!sim.db.should_postpone(&quic_elsewhere, ms(300 + 300_000)));
}

#[test]
fn quic_connecting_first_wins_and_its_handshake_says_h3() {
    let (mut sim, _) = Sim::start(h3_beside_tcp(), vec![], RaceConfig::default(), RouteDatabase::default());
    sim.dns(0, 0, &["10.0.0.1"]);
    assert_eq!(sim.connected(20, 0), ["handshake 0"]);
    assert_eq!(sim.established(40, 0, Some(Protocol::Http3)), ["won 0 h3"]);
}

#[test]
fn through_a_proxy_only_tcp_routes_are_planned() {
    let proxy = Proxy::http("10.9.0.1", 3128).unwrap();
    let (mut sim, out) =
        Sim::start(h3_beside_tcp(), vec![proxy], RaceConfig::default(), RouteDatabase::default());
    let _ = &mut sim;
    assert_eq!(out, ["connect 0 10.9.0.1:3128"], "a TCP route, never QUIC through the proxy");
    let after = sim.timeout(10_000);
    assert!(after.iter().all(|step| !step.contains("quic")), "no QUIC route after it: {after:?}");
    assert!(after.iter().any(|step| step.starts_with("failed")), "{after:?}");
}
