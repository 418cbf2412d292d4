//! A transcript driver for races: virtual time in milliseconds, actions rendered as
//! short strings so tests read like the spec. Addresses here are data only; the core
//! never connects anywhere.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::net::IpAddr;

use switchyard_core::{
    Action, Address, AttemptId, ConnectError, DnsError, Event, IdAllocator, Instant, Protocol, Proxy,
    QueryId, Race, RaceConfig, RaceRequest, RouteDatabase,
};

pub fn ms(t: u64) -> Instant {
    Instant::from_millis(t)
}

pub fn refused() -> ConnectError {
    ConnectError::from_io(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
}

pub struct Sim {
    pub race: Race,
    pub db: RouteDatabase,
    /// Attempts numbered in the order their Connect actions appeared.
    pub attempts: Vec<AttemptId>,
    pub queries: Vec<QueryId>,
    pub finished: Option<Action>,
    pub events: Vec<Event>,
    ids: IdAllocator,
}

impl Sim {
    pub fn start(
        address: Address,
        proxies: Vec<Proxy>,
        config: RaceConfig,
        db: RouteDatabase,
    ) -> (Sim, Vec<String>) {
        Self::start_with_deadline(address, proxies, config, db, None)
    }

    pub fn start_with_deadline(
        address: Address,
        proxies: Vec<Proxy>,
        config: RaceConfig,
        mut db: RouteDatabase,
        deadline: Option<Instant>,
    ) -> (Sim, Vec<String>) {
        let mut ids = IdAllocator::default();
        let request = RaceRequest {
            call: ids.next_call(),
            address,
            proxies,
            proxy_reason: None,
            deadline,
            first_sequence: Default::default(),
            avoid: Vec::new(),
            known_answers: Vec::new(),
        };
        let race = Race::start(request, config, ms(0), &mut db);
        let mut sim = Sim {
            race,
            db,
            attempts: Vec::new(),
            queries: Vec::new(),
            finished: None,
            events: Vec::new(),
            ids,
        };
        let out = sim.drain();
        (sim, out)
    }

    /// Drains actions, rendering each; remembers ids by number.
    pub fn drain(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(action) = self.race.poll_action() {
            out.push(self.render(&action));
            if matches!(action, Action::Won { .. } | Action::Failed(_) | Action::UsePooled { .. }) {
                assert!(self.finished.is_none(), "two final actions");
                self.finished = Some(action);
            }
        }
        while let Some(e) = self.race.poll_event() {
            self.events.push(e);
        }
        out
    }

    fn n(&self, id: AttemptId) -> usize {
        self.attempts.iter().position(|a| *a == id).expect("known attempt")
    }

    fn render(&mut self, action: &Action) -> String {
        match action {
            Action::Resolve { query, host, port, .. } => {
                self.queries.push(*query);
                format!("resolve {host}:{port}")
            }
            Action::Connect { attempt, route } => {
                self.attempts.push(*attempt);
                let quic = if route.is_quic() { " quic" } else { "" };
                format!("connect {} {}{quic}", self.attempts.len() - 1, route.socket_addr())
            }
            Action::Handshake { attempt, .. } => format!("handshake {}", self.n(*attempt)),
            Action::Cancel { attempt } => format!("cancel {}", self.n(*attempt)),
            Action::Won { attempt, protocol, .. } => format!("won {} {protocol}", self.n(*attempt)),
            Action::UsePooled { connection } => format!("pooled {connection}"),
            Action::Failed(e) => format!("failed: {e}"),
        }
    }

    pub fn dns(&mut self, t: u64, query: usize, ips: &[&str]) -> Vec<String> {
        let ips: Vec<IpAddr> = ips.iter().map(|s| s.parse().expect("ip")).collect();
        self.race.handle_dns(ms(t), self.queries[query], Ok(ips), &mut self.db).expect("no misuse");
        self.drain()
    }

    pub fn dns_err(&mut self, t: u64, query: usize, e: DnsError) -> Vec<String> {
        self.race.handle_dns(ms(t), self.queries[query], Err(e), &mut self.db).expect("no misuse");
        self.drain()
    }

    pub fn connected(&mut self, t: u64, n: usize) -> Vec<String> {
        self.race.handle_connected(ms(t), self.attempts[n], &mut self.db).expect("no misuse");
        self.drain()
    }

    pub fn established(&mut self, t: u64, n: usize, alpn: Option<Protocol>) -> Vec<String> {
        self.race.handle_established(ms(t), self.attempts[n], alpn, &mut self.db).expect("no misuse");
        self.drain()
    }

    pub fn failed(&mut self, t: u64, n: usize, e: ConnectError) -> Vec<String> {
        self.race.handle_failed(ms(t), self.attempts[n], e, &mut self.db).expect("no misuse");
        self.drain()
    }

    /// Asserts the next deadline is exactly `t`, then fires it.
    pub fn timeout(&mut self, t: u64) -> Vec<String> {
        assert_eq!(self.race.poll_timeout(), Some(ms(t)), "next deadline");
        self.race.handle_timeout(ms(t), &mut self.db);
        self.drain()
    }

    pub fn next_connection(&mut self) -> switchyard_core::ConnectionId {
        self.ids.next_connection()
    }

    /// Events rendered as `ms kind`, attempt numbers as in actions.
    pub fn event_log(&self) -> Vec<String> {
        use switchyard_core::EventKind as K;
        let n = |id: &AttemptId| self.attempts.iter().position(|a| a == id).unwrap_or(usize::MAX);
        self.events
            .iter()
            .map(|e| {
                let t = e.at.elapsed_since_origin().as_millis();
                let what = match &e.kind {
                    K::ProxySelectStart { .. } => "proxy_select_start".to_owned(),
                    K::ProxySelectEnd { proxies, .. } => format!(
                        "proxy_select_end [{}]",
                        proxies.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
                    ),
                    K::DnsStart { host, .. } => format!("dns_start {host}"),
                    K::DnsEnd { addresses, .. } => format!("dns_end {}", addresses.len()),
                    K::DnsFailed { host, error, .. } => format!("dns_failed {host}: {error}"),
                    K::ConnectStart { attempt, route } => {
                        format!("connect_start {} {route}", n(attempt))
                    }
                    K::SecureConnectStart { attempt } => {
                        format!("secure_connect_start {}", n(attempt))
                    }
                    K::SecureConnectEnd { attempt, protocol } => {
                        format!("secure_connect_end {} {protocol}", n(attempt))
                    }
                    K::ConnectEnd { attempt, protocol, .. } => {
                        format!("connect_end {} {protocol}", n(attempt))
                    }
                    K::ConnectFailed { attempt, error, .. } => {
                        format!("connect_failed {} {error}", n(attempt))
                    }
                    K::ConnectCancelled { attempt, reason, .. } => {
                        format!("connect_cancelled {} {reason:?}", n(attempt))
                    }
                    K::PooledConnectionTaken { connection } => format!("pooled_taken {connection}"),
                    K::AttemptKeptForPool { attempt, .. } => format!("kept_for_pool {attempt}"),
                    other => format!("{other:?}"),
                };
                format!("{t} {what}")
            })
            .collect()
    }
}

/// Counts of attempts by route, for assertions on the database.
pub fn by_route(sim: &Sim) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for e in &sim.events {
        if let switchyard_core::EventKind::ConnectStart { route, .. } = &e.kind {
            *m.entry(route.socket_addr().to_string()).or_default() += 1;
        }
    }
    m
}
