//! A transcript driver for the pool: virtual milliseconds, actions rendered as
//! short strings. Addresses are data only.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::net::IpAddr;

use switchyard_core::{
    AcquireOptions, Address, AttemptId, CallId, ConnectionId, Event, Instant, Pool, PoolAction, PoolConfig,
    Protocol, QueryId, Scheme, TlsFacts,
};

pub fn ms(t: u64) -> Instant {
    Instant::from_millis(t)
}

pub fn http(host: &str) -> Address {
    Address::builder(Scheme::Http, host, 80).build().unwrap()
}
pub fn https(host: &str) -> Address {
    Address::builder(Scheme::Https, host, 443).build().unwrap()
}
pub fn h2c(host: &str) -> Address {
    Address::builder(Scheme::Http, host, 80).protocols([Protocol::H2PriorKnowledge]).build().unwrap()
}

pub fn tls(names: &[&str]) -> TlsFacts {
    TlsFacts { dns_names: names.iter().map(|s| (*s).to_owned()).collect(), ..TlsFacts::default() }
}

pub struct PoolSim {
    pub pool: Pool,
    /// The last attempt started by each call, the last query asked by each call.
    pub attempts: BTreeMap<CallId, Vec<AttemptId>>,
    pub queries: BTreeMap<CallId, Vec<QueryId>>,
    /// Connection each call holds, per the actions seen.
    pub held: BTreeMap<CallId, ConnectionId>,
    pub events: Vec<Event>,
    /// Connections established, in order (closed ones too).
    pub established: Vec<ConnectionId>,
}

impl PoolSim {
    pub fn new(config: PoolConfig) -> PoolSim {
        PoolSim {
            pool: Pool::new(config),
            attempts: BTreeMap::new(),
            queries: BTreeMap::new(),
            held: BTreeMap::new(),
            events: Vec::new(),
            established: Vec::new(),
        }
    }

    pub fn drain(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(a) = self.pool.poll_action() {
            out.push(match a {
                PoolAction::Resolve { query, host, .. } => {
                    self.queries.entry(query.call()).or_default().push(query);
                    format!("resolve {host}")
                }
                PoolAction::Connect { attempt, route } => {
                    self.attempts.entry(attempt.call()).or_default().push(attempt);
                    format!("connect {} {}", attempt.call(), route.socket_addr())
                }
                PoolAction::Handshake { attempt, .. } => format!("handshake {}", attempt.call()),
                PoolAction::CancelAttempt { attempt } => format!("cancel-attempt {attempt}"),
                PoolAction::Established { connection, .. } => {
                    self.established.push(connection);
                    format!("established {connection}")
                }
                PoolAction::Acquired { call, connection, source } => {
                    self.held.insert(call, connection);
                    format!("acquired {call} {connection} {source:?}")
                }
                PoolAction::AcquireFailed { call, error } => format!("failed {call}: {error}"),
                PoolAction::Close { connection, reason } => format!("close {connection} {reason}"),
                PoolAction::Probe { connection } => format!("probe {connection}"),
                PoolAction::Ping { connection } => format!("ping {connection}"),
                PoolAction::Abort { connection, reason } => format!("abort {connection} {reason}"),
            });
        }
        while let Some(e) = self.pool.poll_event() {
            self.events.push(e);
        }
        self.pool.check_invariants().unwrap();
        out
    }

    pub fn acquire(&mut self, t: u64, address: &Address) -> CallId {
        self.acquire_with(t, address, AcquireOptions::default())
    }

    pub fn acquire_with(&mut self, t: u64, address: &Address, options: AcquireOptions) -> CallId {
        self.pool.acquire(ms(t), address.clone(), options)
    }

    pub fn last_attempt(&self, call: CallId) -> AttemptId {
        *self.attempts[&call].last().unwrap()
    }

    pub fn connected(&mut self, t: u64, call: CallId) -> Vec<String> {
        let a = self.last_attempt(call);
        self.pool.handle_connected(ms(t), a).unwrap();
        self.drain()
    }

    pub fn established(
        &mut self,
        t: u64,
        call: CallId,
        alpn: Option<Protocol>,
        facts: Option<TlsFacts>,
    ) -> Vec<String> {
        let a = self.last_attempt(call);
        self.pool.handle_established(ms(t), a, alpn, facts).unwrap();
        self.drain()
    }

    pub fn dns(&mut self, t: u64, call: CallId, ips: &[&str]) -> Vec<String> {
        let q = *self.queries[&call].last().unwrap();
        let ips: Vec<IpAddr> = ips.iter().map(|s| s.parse().unwrap()).collect();
        self.pool.handle_dns(ms(t), q, Ok(ips)).unwrap();
        self.drain()
    }

    /// Acquires and connects a new connection to an IP-literal cleartext
    /// Address. An HTTP/2 connection also gets the server's SETTINGS (no
    /// stream limit), so it is ready to share.
    pub fn open(&mut self, t: u64, address: &Address) -> (CallId, ConnectionId) {
        let call = self.acquire(t, address);
        let out = self.drain();
        assert!(out[0].starts_with("connect"), "{out:?}");
        let out = self.connected(t, call);
        assert!(out.iter().any(|s| s.starts_with("acquired")), "{out:?}");
        let k = self.held[&call];
        if self.pool.connection(k).unwrap().protocol().is_multiplexed() {
            assert_eq!(self.settings(t, k, None), Vec::<String>::new());
        }
        (call, k)
    }

    /// The server's SETTINGS arrive on `k`.
    pub fn settings(&mut self, t: u64, k: ConnectionId, max_concurrent_streams: Option<u32>) -> Vec<String> {
        self.pool.settings(ms(t), k, max_concurrent_streams).unwrap();
        self.drain()
    }

    pub fn finish(&mut self, t: u64, call: CallId) -> Vec<String> {
        self.pool.exchange_finished(ms(t), call, switchyard_core::Reuse::Reusable).unwrap();
        self.drain()
    }

    /// Runs the pool's timeouts at `t`, whatever its next deadline.
    pub fn timeout_to(&mut self, t: u64) -> Vec<String> {
        self.pool.handle_timeout(ms(t));
        self.drain()
    }

    /// Established connections still open.
    pub fn open_connections(&self) -> Vec<ConnectionId> {
        self.established.iter().copied().filter(|k| self.pool.connection(*k).is_some()).collect()
    }

    pub fn timeout(&mut self, t: u64) -> Vec<String> {
        assert_eq!(self.pool.poll_timeout(), Some(ms(t)), "next deadline");
        self.pool.handle_timeout(ms(t));
        self.drain()
    }

    pub fn event_names(&self) -> Vec<String> {
        self.events
            .iter()
            .map(|e| {
                let k = format!("{:?}", e.kind);
                k.split([' ', '{']).next().unwrap().to_owned()
            })
            .collect()
    }
}
