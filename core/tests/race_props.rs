//! Property tests for the connect race: random routes, outcomes and latencies,
//! driven on virtual time. Checked on every run: the race ends (a winner, or an
//! error naming every route), never has two attempts on one route in flight, never
//! starts attempts faster than the stagger except after a failure with nothing in
//! flight, never busy-loops on its timer, pairs every connect_start with one end,
//! and is deterministic.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use proptest::prelude::*;
use switchyard_core::{
    Action, Address, AttemptId, ConnectError, EventKind, Failure, IdAllocator, Instant, Protocol, Race,
    RaceConfig, RaceErrorKind, RaceRequest, RouteDatabase, Scheme, TlsFailure,
};

#[derive(Clone, Copy, Debug)]
enum Tcp {
    Connect(u64),
    Refuse(u64),
    BlackHole,
}

#[derive(Clone, Copy, Debug)]
enum Tls {
    Ok(u64),
    Fail(u64),
    Stall,
}

#[derive(Clone, Debug)]
struct Scenario {
    https: bool,
    routes: Vec<(bool, Tcp, Tls)>, // (is_v6, tcp, tls)
    dns_ms: u64,
    attempt_delay: u64,
    connect_timeout: u64,
    handshake_timeout: u64,
    deadline: Option<u64>,
}

fn tcp() -> impl Strategy<Value = Tcp> {
    prop_oneof![(0u64..3000).prop_map(Tcp::Connect), (0u64..3000).prop_map(Tcp::Refuse), Just(Tcp::BlackHole),]
}

fn tls() -> impl Strategy<Value = Tls> {
    prop_oneof![
        3 => (0u64..2000).prop_map(Tls::Ok),
        1 => (0u64..2000).prop_map(Tls::Fail),
        1 => Just(Tls::Stall),
    ]
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        any::<bool>(),
        prop::collection::vec((any::<bool>(), tcp(), tls()), 1..7),
        0u64..100,
        1u64..400,
        200u64..5000,
        200u64..3000,
        prop::option::weighted(0.2, 100u64..20_000),
    )
        .prop_map(
            |(https, routes, dns_ms, attempt_delay, connect_timeout, handshake_timeout, deadline)| Scenario {
                https,
                routes,
                dns_ms,
                attempt_delay,
                connect_timeout,
                handshake_timeout,
                deadline,
            },
        )
}

#[derive(Debug)]
enum Input {
    Dns(switchyard_core::QueryId),
    Connected(AttemptId),
    Refused(AttemptId),
    Established(AttemptId),
    TlsFailed(AttemptId),
}

struct Outcome {
    transcript: Vec<String>,
    final_action: Action,
}

fn ip_of(i: usize, v6: bool) -> IpAddr {
    let n = u8::try_from(i + 1).unwrap();
    if v6 {
        IpAddr::V6(std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, u16::from(n)))
    } else {
        IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, n))
    }
}

fn run(s: &Scenario) -> Result<Outcome, TestCaseError> {
    let scheme = if s.https { Scheme::Https } else { Scheme::Http };
    let address = Address::builder(scheme, "example.com", 443).build().unwrap();
    let ips: Vec<IpAddr> = s.routes.iter().enumerate().map(|(i, r)| ip_of(i, r.0)).collect();
    let outcome_of: BTreeMap<SocketAddr, (Tcp, Tls)> =
        s.routes.iter().enumerate().map(|(i, r)| (SocketAddr::new(ip_of(i, r.0), 443), (r.1, r.2))).collect();
    let config = RaceConfig {
        attempt_delay: Duration::from_millis(s.attempt_delay),
        connect_timeout: Duration::from_millis(s.connect_timeout),
        handshake_timeout: Duration::from_millis(s.handshake_timeout),
        ..RaceConfig::default()
    };
    let delay = config.attempt_delay;
    let mut db = RouteDatabase::default();
    let request = RaceRequest {
        call: IdAllocator::default().next_call(),
        address,
        proxies: vec![],
        proxy_reason: None,
        deadline: s.deadline.map(Instant::from_millis),
        first_sequence: Default::default(),
        avoid: Vec::new(),
        known_answers: Vec::new(),
    };
    let mut now = Instant::ZERO;
    let mut race = Race::start(request, config, now, &mut db);

    let mut scheduled: BTreeMap<(Instant, u64), Input> = BTreeMap::new();
    let mut seq = 0u64;
    let mut schedule = |scheduled: &mut BTreeMap<(Instant, u64), Input>, at: Instant, input: Input| {
        seq += 1;
        scheduled.insert((at, seq), input);
    };
    // attempt -> route, for attempts the driver considers live.
    let mut live: BTreeMap<AttemptId, SocketAddr> = BTreeMap::new();
    let mut last_start: Option<Instant> = None;
    let mut transcript = Vec::new();
    let mut final_action = None;
    let mut open_connects: BTreeSet<AttemptId> = BTreeSet::new();

    for _step in 0..10_000 {
        // Drain actions.
        while let Some(action) = race.poll_action() {
            transcript.push(format!("{now:?} {action:?}"));
            prop_assert!(final_action.is_none(), "action after the final one: {action:?}");
            match &action {
                Action::Resolve { query, .. } => {
                    schedule(&mut scheduled, now + Duration::from_millis(s.dns_ms), Input::Dns(*query));
                }
                Action::Connect { attempt, route } => {
                    let sa = route.socket_addr();
                    prop_assert!(
                        !live.values().any(|r| *r == sa),
                        "two attempts in flight for {sa} at {now:?}"
                    );
                    if let Some(prev) = last_start {
                        prop_assert!(
                            now - prev >= delay || live.is_empty(),
                            "attempt at {now:?} only {:?} after the previous with {} in flight",
                            now - prev,
                            live.len()
                        );
                    }
                    last_start = Some(now);
                    live.insert(*attempt, sa);
                    match outcome_of[&sa].0 {
                        Tcp::Connect(ms) => {
                            schedule(
                                &mut scheduled,
                                now + Duration::from_millis(ms),
                                Input::Connected(*attempt),
                            );
                        }
                        Tcp::Refuse(ms) => {
                            schedule(
                                &mut scheduled,
                                now + Duration::from_millis(ms),
                                Input::Refused(*attempt),
                            );
                        }
                        Tcp::BlackHole => {}
                    }
                }
                Action::Handshake { attempt, route } => {
                    prop_assert_eq!(live.len(), 1, "handshake while others are live");
                    match outcome_of[&route.socket_addr()].1 {
                        Tls::Ok(ms) => {
                            schedule(
                                &mut scheduled,
                                now + Duration::from_millis(ms),
                                Input::Established(*attempt),
                            );
                        }
                        Tls::Fail(ms) => {
                            schedule(
                                &mut scheduled,
                                now + Duration::from_millis(ms),
                                Input::TlsFailed(*attempt),
                            );
                        }
                        Tls::Stall => {}
                    }
                }
                Action::Cancel { attempt } => {
                    prop_assert!(live.remove(attempt).is_some(), "cancel of a dead attempt {attempt:?}");
                }
                Action::Won { attempt, .. } => {
                    prop_assert!(live.remove(attempt).is_some());
                    prop_assert!(live.is_empty(), "won with attempts still live");
                    final_action = Some(action.clone());
                }
                Action::Failed(_) => {
                    prop_assert!(live.is_empty(), "failed with attempts still live");
                    final_action = Some(action.clone());
                }
                Action::UsePooled { .. } => prop_assert!(false, "no pool here"),
            }
        }
        while let Some(e) = race.poll_event() {
            match &e.kind {
                EventKind::ConnectStart { attempt, .. } => {
                    prop_assert!(open_connects.insert(*attempt));
                }
                EventKind::ConnectEnd { attempt, .. }
                | EventKind::ConnectFailed { attempt, .. }
                | EventKind::ConnectCancelled { attempt, .. } => {
                    prop_assert!(open_connects.remove(attempt), "second end for {attempt:?}");
                }
                _ => {}
            }
            transcript.push(format!("{:?} {:?}", e.at, e.kind));
        }

        let timer = race.poll_timeout();
        let next_input = scheduled.keys().next().copied();
        let step_time = match (timer, next_input) {
            (None, None) => break,
            (Some(t), None) => t,
            (None, Some((i, _))) => i,
            (Some(t), Some((i, _))) => t.min(i),
        };
        prop_assert!(step_time >= now, "time went backwards");
        now = step_time;
        if next_input.is_some_and(|(i, _)| i == now) {
            let key = next_input.unwrap();
            let input = scheduled.remove(&key).unwrap();
            // Late reports (for cancelled attempts) must be accepted and ignored.
            let r = match input {
                Input::Dns(q) => race.handle_dns(now, q, Ok(ips.clone()), &mut db),
                Input::Connected(a) => race.handle_connected(now, a, &mut db),
                Input::Refused(a) => {
                    live.remove(&a);
                    race.handle_failed(now, a, refused(), &mut db)
                }
                Input::Established(a) => race.handle_established(now, a, Some(Protocol::Http1), &mut db),
                Input::TlsFailed(a) => {
                    live.remove(&a);
                    let e = ConnectError::Tls { kind: TlsFailure::Protocol, message: "alert".into() };
                    race.handle_failed(now, a, e, &mut db)
                }
            };
            prop_assert!(r.is_ok(), "misuse reported for a real id: {r:?}");
        } else {
            race.handle_timeout(now, &mut db);
            // Drain before re-reading the timer: poll_timeout must have moved past now.
            let t = race.poll_timeout();
            prop_assert!(t.is_none_or(|t| t > now), "busy loop: timer {t:?} at {now:?}");
        }
    }
    prop_assert!(race.is_finished(), "race did not end");
    prop_assert!(open_connects.is_empty(), "connect_start without an end: {open_connects:?}");
    prop_assert_eq!(race.poll_timeout(), None);
    let Some(final_action) = final_action else {
        return Err(TestCaseError::fail("no final action"));
    };
    Ok(Outcome { transcript, final_action })
}

fn refused() -> ConnectError {
    ConnectError::from_io(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn race_invariants(s in scenario()) {
        let first = run(&s)?;
        let second = run(&s)?;
        prop_assert_eq!(&first.transcript, &second.transcript, "not deterministic");

        // A route that connects and handshakes within its timeouts guarantees a win
        // unless the call deadline ends the race first.
        let winnable = s.routes.iter().any(|(_, t, l)| {
            matches!(t, Tcp::Connect(ms) if *ms < s.connect_timeout)
                && (!s.https || matches!(l, Tls::Ok(ms) if *ms < s.handshake_timeout))
        });
        match &first.final_action {
            Action::Won { route, .. } => {
                let i = s.routes.iter().enumerate()
                    .position(|(i, r)| ip_of(i, r.0) == route.socket_addr().ip()).unwrap();
                prop_assert!(matches!(s.routes[i].1, Tcp::Connect(_)));
            }
            Action::Failed(e) => {
                match e.kind {
                    RaceErrorKind::AllRoutesFailed => {
                        prop_assert!(!winnable, "a winnable race failed: {e}");
                        // The error names every route.
                        let named: BTreeSet<IpAddr> = e.failures.iter().filter_map(|f| match f {
                            Failure::Connect { route, .. } => Some(route.socket_addr().ip()),
                            Failure::Dns { .. } => None,
                        }).collect();
                        let all: BTreeSet<IpAddr> =
                            s.routes.iter().enumerate().map(|(i, r)| ip_of(i, r.0)).collect();
                        prop_assert_eq!(named, all);
                    }
                    RaceErrorKind::CallTimeout => prop_assert!(s.deadline.is_some()),
                    _ => prop_assert!(false, "unknown kind"),
                }
            }
            other => prop_assert!(false, "unexpected final action {other:?}"),
        }
    }
}
