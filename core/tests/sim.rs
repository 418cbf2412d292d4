//! Deterministic whole-core simulation: the pool, its races and the route
//! database driven by a simulated network and clock, from a seed. Time jumps to
//! the next deadline or event, so a simulated hour costs milliseconds.
//!
//! The world: host names with DNS answers (IPv4/IPv6 mixes, failures, latency)
//! over a small shared set of server IPs (so HTTP/2 coalescing happens), each IP
//! with a behaviour (connects after a latency, refuses, black-holes; TLS passes
//! or fails), servers that close idle connections (noticed, or silently, making
//! stale connections), reset exchanges, HTTP/2 stream limits and GOAWAY.
//! Some https hosts offer HTTP/3 beside TCP: their races carry a QUIC route and
//! a TCP route per address, each IP with a UDP behaviour of its own (answers
//! after a latency, ICMP unreachable, or silence); the checker holds QUIC
//! routes to direct routes of such hosts and to the postponement order (the
//! route database's per-family QUIC memory included). Their connections run
//! the HTTP/2 driver's frames: the pool's decisions do not depend on the
//! framing, only on the connection being multiplexed.
//!
//! HTTP/1.1 exchanges run through the core's connection driver (`http1::Conn`,
//! `http1::Driver`) against a simulated server: requests written in random
//! pieces, responses (chunked, or with `Connection: close`) read in random
//! pieces, stale connections probed before reuse (their close seen, or not yet),
//! resets as an EOF before any response byte; the driver's keep-alive decision
//! and failure classification are what the pool hears, and are checked.
//!
//! HTTP/2 connections run through the core's connection driver
//! (`http2::Driver`) with real frames: the server's SETTINGS, GOAWAY, response
//! HEADERS and DATA, and RST_STREAM reach the driver as bytes in random pieces,
//! and what it reports goes to the pool, judged by the core's session
//! (`http2::Session`). The server refuses streams (REFUSED_STREAM), resets
//! them before or during the response, answers GOAWAY with a last stream id
//! below streams still in flight (which the driver then fails as
//! unprocessed), closes connections silently (every stream on it fails), or
//! never makes a connection usable (no SETTINGS, or a limit of zero: the
//! pool's timer ends it). The verdicts are what the pool hears, and are
//! checked: a request the server processed is never replayed unless
//! idempotent, a connection a stream was reset on mid-body takes no new
//! streams, an ended connection's streams all fail.
//!
//! After every step the checker asserts the pool's invariants; per call: every
//! acquisition ends by the call's deadline; the race keeps its stagger; routes
//! that failed are tried after the others on the next call; at the end every
//! call has ended and nothing is left open, waiting, connecting or in flight.
//!
//! Replay one seed: `SWITCHYARD_SIM_SEED=<seed> cargo test -p switchyard-core --test sim`.
//! Change the count: `SWITCHYARD_SIM_SCENARIOS=<n>` (default 100 000, what CI runs).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use switchyard_core::http1::{self, Event as H1Event, Failure as H1Failure, Peek};
use switchyard_core::http2::{self, Peer, Report, Session, StreamError};
use switchyard_core::pool::{ExchangeFailure, ExchangeFailureKind, Progress, RequestFacts};
use switchyard_core::{
    AcquireOptions, Address, AttemptId, CallId, CloseReason, ConnectError, ConnectionId, DnsError,
    FailureOutcome, Instant, Pool, PoolAction, PoolConfig, Protocol, Proxy, QueryId, Reuse, Route, Scheme,
    TlsFacts, TlsFailure,
};

/// SplitMix64: small, seeded, deterministic.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[derive(Clone, Copy, Debug)]
enum Tcp {
    Connect(u64),
    Refuse(u64),
    BlackHole,
}

#[derive(Clone, Debug)]
struct Ip {
    tcp: Tcp,
    /// QUIC on the same IP (hosts that offer HTTP/3): the first datagram
    /// back after a latency, ICMP unreachable, or silence (UDP dropped).
    udp: Tcp,
    tls_ok: bool,
    tls_ms: u64,
}

#[derive(Clone, Debug)]
struct Host {
    address: Address,
    dns: Result<Vec<IpAddr>, ()>,
    dns_ms: u64,
    h2: bool,
}

#[derive(Clone, Debug)]
struct Server {
    idle_close_ms: Option<u64>,
    stale_percent: u64,
    reset_percent: u64,
    close_percent: u64,
    stream_limit: Option<u32>,
    goaway_after: Option<u32>,
    /// HTTP/2: streams refused (REFUSED_STREAM).
    refuse_percent: u64,
    /// HTTP/2: streams reset during the response body.
    body_reset_percent: u64,
    /// HTTP/2: connections whose server never makes them usable (no
    /// SETTINGS, or a stream limit of zero).
    unusable_percent: u64,
    /// Answers that are 5xx (counted by an ejection policy that opts in).
    error_percent: u64,
}

#[derive(Clone, Debug)]
struct CallSpec {
    at: u64,
    host: usize,
    idempotent: bool,
    exclusive: bool,
    timeout_ms: u64,
    exchange_ms: u64,
}

#[derive(Debug)]
enum Ev {
    Arrive(usize),
    Dns(QueryId, Result<Vec<IpAddr>, DnsError>),
    Tcp(AttemptId, bool),
    Tls(AttemptId, bool, Protocol),
    Settings(ConnectionId, Option<u32>),
    /// The server's GOAWAY.
    GoAway(ConnectionId),
    ExchangeDone(CallId, ConnectionId),
    IdleClose(ConnectionId, u64),
}

#[derive(Debug, Default)]
struct SimConn {
    protocol: Option<Protocol>,
    exchanges: u32,
    idle_generation: u64,
    stale: bool,
    goaway_sent: bool,
    /// HTTP/2: the server's SETTINGS reached the pool.
    settings_delivered: bool,
    /// HTTP/2: the core's session and driver, the streams in flight (call →
    /// id), the streams whose head arrived, and the GOAWAY's last stream id
    /// once sent.
    session: Option<Session>,
    h2: Option<http2::Driver>,
    streams: BTreeMap<CallId, u32>,
    heads: BTreeSet<u32>,
    goaway_last: Option<u32>,
    /// The highest stream id the server answered.
    max_done: u32,
    /// HTTP/1.1: the core's view of the idle connection (read buffer,
    /// history), and the driver of the exchange it carries.
    h1: Option<http1::Conn>,
    driver: Option<(CallId, http1::Driver)>,
}

#[derive(Debug)]
struct SimCall {
    spec: usize,
    deadline: Instant,
    acquiring_since: Option<Instant>,
    holding: Option<ConnectionId>,
    ended: bool,
    attempts_in_flight: BTreeSet<AttemptId>,
    last_connect: Option<Instant>,
    /// The routes (IP, QUIC or not) the database postponed when DNS answered.
    postponed: Option<(BTreeSet<(IpAddr, bool)>, bool)>,
    /// IPs of connections that refused this call's streams: a retry after
    /// two refusals on one plans that route last (the pool's avoided
    /// routes), so they are not "fresh" for the check.
    refused_ips: BTreeSet<IpAddr>,
}

struct World {
    rng: Rng,
    config: PoolConfig,
    ips: BTreeMap<IpAddr, Ip>,
    hosts: Vec<Host>,
    server: Server,
    calls: Vec<CallSpec>,
}

fn world(seed: u64) -> World {
    let mut rng = Rng(seed);
    let mut ips = BTreeMap::new();
    for i in 0..rng.range(1, 4) {
        let ip: IpAddr = if rng.chance(50) {
            format!("fd00::{}", i + 1).parse().unwrap()
        } else {
            format!("10.0.0.{}", i + 1).parse().unwrap()
        };
        let tcp = match rng.below(10) {
            0..=5 => Tcp::Connect(rng.range(1, 400)),
            6..=7 => Tcp::Refuse(rng.range(1, 100)),
            _ => Tcp::BlackHole,
        };
        let udp = match rng.below(10) {
            0..=4 => Tcp::Connect(rng.range(1, 400)),
            5..=6 => Tcp::Refuse(rng.range(1, 100)),
            _ => Tcp::BlackHole,
        };
        ips.insert(ip, Ip { tcp, udp, tls_ok: rng.chance(90), tls_ms: rng.range(1, 200) });
    }
    let pool_ips: Vec<IpAddr> = ips.keys().copied().collect();
    let https = rng.chance(60);
    let mut hosts = Vec::new();
    for h in 0..rng.range(1, 3) {
        let scheme = if https { Scheme::Https } else { Scheme::Http };
        let h2 = https && rng.chance(60);
        // Some https hosts offer HTTP/3 beside TCP: a QUIC route and a TCP
        // route per address in one race.
        let h3 = https && rng.chance(35);
        let mut protocols = vec![Protocol::Http1];
        if h2 {
            protocols.insert(0, Protocol::Http2);
        }
        if h3 {
            protocols.insert(0, Protocol::Http3);
        }
        let address = Address::builder(scheme, &format!("h{h}.sim.test"), 443)
            .protocols(if https { protocols } else { vec![Protocol::Http1] })
            .build()
            .unwrap();
        let dns = if rng.chance(8) {
            Err(())
        } else {
            let mut answer: Vec<IpAddr> = pool_ips.iter().copied().filter(|_| rng.chance(70)).collect();
            if answer.is_empty() {
                answer.push(pool_ips[0]);
            }
            Ok(answer)
        };
        hosts.push(Host { address, dns, dns_ms: rng.range(0, 50), h2 });
    }
    let server = Server {
        idle_close_ms: rng.chance(50).then(|| rng.range(50, 3000)),
        stale_percent: rng.range(0, 40),
        reset_percent: rng.range(0, 15),
        close_percent: rng.range(0, 20),
        stream_limit: rng.chance(50).then(|| u32::try_from(rng.range(1, 4)).unwrap()),
        goaway_after: rng.chance(30).then(|| u32::try_from(rng.range(1, 5)).unwrap()),
        refuse_percent: if rng.chance(30) { rng.range(1, 30) } else { 0 },
        body_reset_percent: if rng.chance(30) { rng.range(1, 20) } else { 0 },
        unusable_percent: if rng.chance(15) { rng.range(5, 60) } else { 0 },
        error_percent: if rng.chance(30) { rng.range(5, 80) } else { 0 },
    };
    let mut config = PoolConfig {
        keep_alive: Duration::from_millis(rng.range(100, 5000)),
        max_connections_per_address: rng.chance(50).then(|| usize::try_from(rng.range(1, 4)).unwrap()),
        max_connections_total: rng.chance(30).then(|| usize::try_from(rng.range(1, 6)).unwrap()),
        max_idle_per_address: usize::try_from(rng.range(1, 4)).unwrap(),
        acquire_timeout: Duration::from_millis(rng.range(200, 5000)),
        max_lifetime: rng.chance(20).then(|| Duration::from_millis(rng.range(200, 5000))),
        // The resilience policies, each on in some seeds.
        ping_interval: rng.chance(20).then(|| Duration::from_millis(rng.range(200, 3000))),
        retry_budget: if rng.chance(30) {
            Some(switchyard_core::RetryBudget {
                ratio: 0.1,
                min_per_second: u32::try_from(rng.range(0, 3)).unwrap(),
                window: Duration::from_secs(2),
            })
        } else {
            Some(switchyard_core::RetryBudget::default())
        },
        // Outlier ejection: off, the default, or quick to eject and to
        // come back (and counting 5xx answers in some).
        outliers: match rng.below(3) {
            0 => switchyard_core::OutlierPolicy::off(),
            1 => switchyard_core::OutlierPolicy::default(),
            _ => switchyard_core::OutlierPolicy {
                consecutive_failures: u32::try_from(rng.range(1, 4)).unwrap(),
                server_errors: rng.chance(50),
                backoff: switchyard_core::Backoff {
                    initial: Duration::from_millis(rng.range(100, 2000)),
                    multiplier: 2.0,
                    jitter: 0.2,
                    max: Duration::from_secs(10),
                },
            },
        },
        ..PoolConfig::default()
    };
    // DNS refresh is on by default and needs answers to expire: short TTLs
    // (100 ms – 2 s) in some seeds, so refreshes, drains and re-resolved
    // races happen mid-scenario.
    if rng.chance(30) {
        config.dns_cache.default_ttl = Duration::from_millis(rng.range(100, 2000));
    }
    if let Ok(ms) = std::env::var("SIM_SHORT_TTL") {
        config.dns_cache.default_ttl = Duration::from_millis(ms.parse().unwrap());
    }
    config.race.attempt_delay = Duration::from_millis(rng.range(50, 300));
    config.race.connect_timeout = Duration::from_millis(rng.range(300, 3000));
    config.race.handshake_timeout = Duration::from_millis(rng.range(300, 3000));
    let mut calls = Vec::new();
    let mut t = 0;
    for _ in 0..rng.range(1, 25) {
        t += rng.range(0, 400);
        calls.push(CallSpec {
            at: t,
            host: usize::try_from(rng.below(hosts.len() as u64)).unwrap(),
            idempotent: rng.chance(70),
            exclusive: rng.chance(5),
            timeout_ms: rng.range(500, 10_000),
            exchange_ms: rng.range(1, 500),
        });
    }
    World { rng, config, ips, hosts, server, calls }
}

/// What happened across scenarios, to prove the generator reaches every path.
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    calls: u64,
    acquired: u64,
    acquire_failed: u64,
    retries: u64,
    stale: u64,
    goaways: u64,
    coalesced: u64,
    races_lost: u64,
    /// HTTP/1.1 exchanges the connection driver ran to a response.
    h1_exchanges: u64,
    /// Stale connections the driver's probe caught before writing.
    probe_caught: u64,
    /// HTTP/2 streams the server refused.
    refused: u64,
    /// HTTP/2 streams above a GOAWAY's last stream id, failed unprocessed.
    unprocessed: u64,
    /// HTTP/2 streams reset during the response body.
    body_resets: u64,
    /// HTTP/2 connections the pool ended as never usable with a stream on them.
    aborted: u64,
    /// Answers that were 5xx.
    server_errors: u64,
    /// Routes ejected (outlier ejection).
    ejections: u64,
    /// QUIC attempts started, and QUIC connections the race established.
    quic_attempts: u64,
    h3_connections: u64,
    /// QUIC attempts cancelled while UDP was silent (another attempt won,
    /// or the call ended).
    silent_quic_cancelled: u64,
}

struct Sim {
    w: World,
    counters: Counters,
    pool: Pool,
    now: Instant,
    queue: BTreeMap<(Instant, u64), Ev>,
    seq: u64,
    /// Each attempt's IP, and whether it is a QUIC attempt.
    attempts: BTreeMap<AttemptId, (IpAddr, bool)>,
    conns: BTreeMap<ConnectionId, SimConn>,
    calls: BTreeMap<CallId, SimCall>,
    trace: u64,
    steps: u64,
}

/// An HTTP/2 frame on stream 0 (RFC 9113 §4.1).
fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
    frame_on(kind, flags, 0, payload)
}

/// An HTTP/2 frame on `stream`.
fn frame_on(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend(stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn ms(t: u64) -> Duration {
    Duration::from_millis(t)
}

impl Sim {
    fn at(&mut self, delay: Duration, ev: Ev) {
        self.seq += 1;
        self.queue.insert((self.now + delay, self.seq), ev);
    }

    fn mix(&mut self, v: u64) {
        self.trace = self.trace.rotate_left(5) ^ v.wrapping_mul(0x100_0000_01B3);
    }

    fn host_of(&self, call: CallId) -> &Host {
        &self.w.hosts[self.w.calls[self.calls[&call].spec].host]
    }

    fn drain(&mut self) -> Result<(), String> {
        while let Some(action) = self.pool.poll_action() {
            self.mix(self.now.elapsed_since_origin().as_nanos() as u64);
            self.perform(action)?;
        }
        while let Some(e) = self.pool.poll_event() {
            // An attempt kept for the pool no longer belongs to its call's race.
            if let switchyard_core::EventKind::AttemptKeptForPool { attempt, .. } = e.kind {
                if let Some(c) = self.calls.get_mut(&attempt.call()) {
                    c.attempts_in_flight.remove(&attempt);
                }
            }
        }
        self.pool.check_invariants()
    }

    fn perform(&mut self, action: PoolAction) -> Result<(), String> {
        match action {
            PoolAction::Resolve { query, host, .. } => {
                // A refresh lookup belongs to no call: found by its name.
                let host = match self.calls.get(&query.call()) {
                    Some(_) => self.host_of(query.call()).clone(),
                    None => {
                        let name = host;
                        let found = self.w.hosts.iter().find(|h| *h.address.host() == name);
                        found.ok_or_else(|| format!("a refresh of unknown {name}"))?.clone()
                    }
                };
                let answer = host.dns.clone().map_err(|()| DnsError::Failed { message: "SERVFAIL".into() });
                self.at(ms(host.dns_ms), Ev::Dns(query, answer));
            }
            PoolAction::Connect { attempt, route } => {
                let ip = route.socket_addr().ip();
                let quic = route.is_quic();
                if quic && (*route.proxy() != Proxy::Direct || !route.address().offers_http3()) {
                    return Err(format!("{attempt}: a QUIC route where none may be: {route}"));
                }
                let delay = self.w.config.race.attempt_delay;
                let c = self.calls.get_mut(&attempt.call()).unwrap();
                // The race keeps its stagger unless nothing is in flight.
                if let Some(last) = c.last_connect {
                    if !c.attempts_in_flight.is_empty() && self.now - last < delay {
                        return Err(format!(
                            "{attempt} started {:?} after the previous with attempts in flight",
                            self.now - last
                        ));
                    }
                }
                // Postponed routes go last: the first attempt after DNS is a fresh one.
                if let Some((postponed, some_fresh)) = c.postponed.take() {
                    if some_fresh && postponed.contains(&(ip, quic)) {
                        return Err(format!("{attempt} tried postponed {route} before a fresh route"));
                    }
                }
                c.last_connect = Some(self.now);
                c.attempts_in_flight.insert(attempt);
                self.attempts.insert(attempt, (ip, quic));
                self.counters.quic_attempts += u64::from(quic);
                let spec = &self.w.ips[&ip];
                match if quic { spec.udp } else { spec.tcp } {
                    Tcp::Connect(t) => self.at(ms(t), Ev::Tcp(attempt, true)),
                    Tcp::Refuse(t) => self.at(ms(t), Ev::Tcp(attempt, false)),
                    Tcp::BlackHole => {}
                }
            }
            PoolAction::Handshake { attempt, .. } => {
                let (ip, quic) = self.attempts[&attempt];
                let spec = &self.w.ips[&ip];
                let alpn = if quic {
                    Protocol::Http3
                } else if self.host_of(attempt.call()).h2 {
                    Protocol::Http2
                } else {
                    Protocol::Http1
                };
                let (ok, t) = (spec.tls_ok, spec.tls_ms);
                self.at(ms(t), Ev::Tls(attempt, ok, alpn));
            }
            PoolAction::CancelAttempt { attempt } => {
                self.counters.races_lost += 1;
                let silent =
                    |(ip, quic): &(IpAddr, bool)| *quic && matches!(self.w.ips[ip].udp, Tcp::BlackHole);
                self.counters.silent_quic_cancelled +=
                    u64::from(self.attempts.get(&attempt).is_some_and(silent));
                self.attempts.remove(&attempt);
                if let Some(c) = self.calls.get_mut(&attempt.call()) {
                    c.attempts_in_flight.remove(&attempt);
                }
            }
            PoolAction::Probe { connection } | PoolAction::Ping { connection } => {
                if !self.conns.contains_key(&connection) {
                    return Err(format!("probe or ping of unknown {connection}"));
                }
            }
            PoolAction::Abort { connection, reason } => self.abort(connection, reason)?,
            PoolAction::Established { attempt, connection, protocol } => {
                self.counters.h3_connections += u64::from(protocol == Protocol::Http3);
                self.attempts.remove(&attempt);
                if let Some(c) = self.calls.get_mut(&attempt.call()) {
                    c.attempts_in_flight.remove(&attempt);
                }
                let h1 =
                    (protocol == Protocol::Http1).then(|| http1::Conn::new(http1::DriverConfig::default()));
                self.conns.insert(connection, SimConn { protocol: Some(protocol), h1, ..SimConn::default() });
                if protocol.is_multiplexed() {
                    let c = self.conns.get_mut(&connection).unwrap();
                    c.session = Some(Session::new(64 * 1024));
                    c.h2 = Some(http2::Driver::new(http2::DriverConfig::default()));
                    // Every usable HTTP/2 server opens with SETTINGS; some set
                    // a limit. Some never make the connection usable.
                    let limit = self.w.server.stream_limit;
                    if !self.w.rng.chance(self.w.server.unusable_percent) {
                        self.at(ms(1), Ev::Settings(connection, limit));
                    } else if self.w.rng.chance(50) {
                        self.at(ms(1), Ev::Settings(connection, Some(0)));
                    }
                }
            }
            PoolAction::Acquired { call, connection, source } => {
                self.counters.acquired += 1;
                if source == switchyard_core::Source::Coalesced {
                    self.counters.coalesced += 1;
                }
                let c = self.calls.get_mut(&call).ok_or("acquired for an unknown call")?;
                if c.ended || c.holding.is_some() {
                    return Err(format!("{call} acquired while ended or holding"));
                }
                if let Some(since) = c.acquiring_since.take() {
                    if since <= c.deadline && self.now > c.deadline {
                        return Err(format!(
                            "{call} acquired at {:?}, past its deadline {:?}",
                            self.now, c.deadline
                        ));
                    }
                }
                c.holding = Some(connection);
                // A DNS answer's postponed routes belong to the race it fed;
                // that race is over.
                c.postponed = None;
                let t = self.w.calls[c.spec].exchange_ms;
                // The server's view: no stream beyond what it allowed, and one
                // stream only before its SETTINGS (BEHAVIOUR §4).
                let streams = self.pool.connection(connection).map_or(0, |k| k.in_flight());
                let delivered = self.conns.get(&connection).is_some_and(|k| k.settings_delivered);
                let multiplexed = self
                    .conns
                    .get(&connection)
                    .and_then(|k| k.protocol)
                    .is_some_and(Protocol::is_multiplexed);
                if multiplexed {
                    let allowed = if delivered { self.w.server.stream_limit.unwrap_or(u32::MAX) } else { 1 };
                    if streams > allowed {
                        return Err(format!("{connection}: {streams} streams, the server allowed {allowed}"));
                    }
                    let k = self.conns.get_mut(&connection).unwrap();
                    if let Some(last) = k.goaway_last {
                        return Err(format!(
                            "{call} opened a stream on {connection} after its GOAWAY ({last})"
                        ));
                    }
                    let (parts, ()) = http::Request::get("https://sim.test/").body(()).unwrap().into_parts();
                    let driver = k.h2.as_mut().ok_or("HTTP/2 without a driver")?;
                    let stream = driver
                        .open(&parts, true)
                        .map_err(|e| format!("{call}: open on {connection}: {e:?}"))?;
                    // The client's bytes (preface, SETTINGS, HEADERS) go out
                    // in pieces.
                    while let Some(out) = driver.poll_transmit() {
                        let n = (self.w.rng.range(1, 64) as usize).min(out.len());
                        driver.handle_written(n);
                    }
                    k.streams.insert(call, stream);
                }
                if self.start_h1(call, connection)? {
                    self.at(ms(t), Ev::ExchangeDone(call, connection));
                }
            }
            PoolAction::AcquireFailed { call, .. } => {
                self.counters.acquire_failed += 1;
                let c = self.calls.get_mut(&call).ok_or("failed for an unknown call")?;
                if let Some(since) = c.acquiring_since.take() {
                    if since <= c.deadline && self.now > c.deadline {
                        return Err(format!(
                            "{call} failed at {:?}, past its deadline {:?}",
                            self.now, c.deadline
                        ));
                    }
                }
                c.ended = true;
            }
            PoolAction::Close { connection, .. } => {
                self.conns.remove(&connection).ok_or_else(|| format!("{connection} closed twice"))?;
            }
        }
        Ok(())
    }

    fn facts(&self, call: CallId) -> RequestFacts {
        let idempotent = self.w.calls[self.calls[&call].spec].idempotent;
        RequestFacts { idempotent, body_replayable: true }
    }

    /// An exchange failed: the pool decides (retry or fail).
    fn failed(&mut self, call: CallId, failure: ExchangeFailure) -> Result<(), String> {
        self.calls.get_mut(&call).unwrap().holding = None;
        match self.pool.exchange_failed(self.now, call, failure).map_err(|e| e.to_string())? {
            FailureOutcome::Retrying(_) => {
                self.counters.retries += 1;
                self.calls.get_mut(&call).unwrap().acquiring_since = Some(self.now);
            }
            FailureOutcome::Failed(_) => self.calls.get_mut(&call).unwrap().ended = true,
        }
        Ok(())
    }

    /// HTTP/1.1: the call's exchange runs through the core's connection driver.
    /// A reused connection is probed first: one the server closed while idle is
    /// seen (EOF) half the time; otherwise its close arrives only after the
    /// request is written. `Ok(false)`: the exchange already ended.
    fn start_h1(&mut self, call: CallId, connection: ConnectionId) -> Result<bool, String> {
        let Some(sc) = self.conns.get_mut(&connection) else { return Ok(true) };
        let Some(conn) = sc.h1.take() else { return Ok(true) };
        let seen = sc.stale && self.w.rng.chance(50);
        let facts = self.facts(call);
        if conn.needs_probe() {
            if let Err(reason) = conn.check(if seen { Peek::Eof } else { Peek::Quiet }) {
                if reason != CloseReason::ServerClose {
                    return Err(format!("{connection}: probe verdict {reason}"));
                }
                self.counters.probe_caught += 1;
                let e = std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "closed while idle");
                let failure = ExchangeFailure {
                    kind: ExchangeFailureKind::from_io(&e),
                    progress: Progress::NothingWritten,
                    request: facts,
                };
                self.failed(call, failure)?;
                return Ok(false);
            }
        }
        let (parts, ()) = http::Request::get("http://sim.test/").body(()).unwrap().into_parts();
        let request = http1::Request::new(&parts, http1::TargetForm::Origin, http1::RequestBody::None);
        let mut driver = conn.start(self.now, request).map_err(|r| r.error.to_string())?;
        // The socket takes the request in pieces.
        while let Some(out) = driver.poll_transmit() {
            let n = (self.w.rng.range(1, 64) as usize).min(out.len());
            driver.handle_written(self.now, n);
        }
        match driver.poll_event() {
            Some(H1Event::HeadersSent) => {}
            other => return Err(format!("{call}: expected HeadersSent, got {other:?}")),
        }
        self.conns.get_mut(&connection).unwrap().driver = Some((call, driver));
        Ok(true)
    }

    /// HTTP/1.1: the server's answer reaches the driver, split at random; the
    /// driver's verdict (keep-alive, or how far a failure got) goes to the pool.
    fn finish_h1(&mut self, call: CallId, connection: ConnectionId, broken: bool) -> Result<(), String> {
        let (held, mut driver) = self.conns.get_mut(&connection).unwrap().driver.take().unwrap();
        if held != call {
            return Err(format!("{connection} carries {held}, not {call}"));
        }
        let close = self.w.rng.chance(self.w.server.close_percent);
        let response: &[u8] = match (broken, close) {
            (true, _) => b"",
            (false, true) => b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
            (false, false) => b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        };
        let mut at = 0;
        while at < response.len() {
            let n = (self.w.rng.range(1, 16) as usize).min(response.len() - at);
            driver.handle_read(self.now, &response[at..at + n]);
            at += n;
        }
        if broken {
            driver.handle_eof(self.now);
        }
        let mut end = None;
        while let Some(e) = driver.poll_event() {
            match e {
                H1Event::Done(_) | H1Event::Failed(_) => end = Some(e),
                H1Event::Head(_) | H1Event::Data(_) | H1Event::Trailers(_) => {}
                other => return Err(format!("{call}: unexpected {other:?}")),
            }
        }
        match end {
            Some(H1Event::Failed(H1Failure::Exchange { kind, progress })) => {
                if progress != Progress::RequestWritten {
                    return Err(format!(
                        "{call}: a close before any byte is 'request written', not {progress:?}"
                    ));
                }
                let facts = self.facts(call);
                self.failed(call, ExchangeFailure { kind, progress, request: facts })
            }
            Some(H1Event::Done(reuse)) => {
                self.counters.h1_exchanges += 1;
                let expected = if close { Reuse::Retire(CloseReason::ServerClose) } else { Reuse::Reusable };
                if reuse != expected {
                    return Err(format!("{call}: the driver said {reuse:?}, expected {expected:?}"));
                }
                let reuse = match driver.finish() {
                    Ok(conn) => {
                        self.conns.get_mut(&connection).unwrap().h1 = Some(conn);
                        Reuse::Reusable
                    }
                    Err(reason) => Reuse::Retire(reason),
                };
                self.complete(call, connection, reuse)
            }
            other => Err(format!("{call}: the driver ended with {other:?}")),
        }
    }

    fn exchange_done(&mut self, call: CallId, connection: ConnectionId) -> Result<(), String> {
        if self.conns.get(&connection).is_some_and(|c| c.driver.is_some()) {
            let stale = self.conns[&connection].stale;
            let broken = stale || self.w.rng.chance(self.w.server.reset_percent);
            return self.finish_h1(call, connection, broken);
        }
        let Some(k) = self.conns.get_mut(&connection) else {
            return self.complete(call, connection, Reuse::Reusable);
        };
        let Some(stream) = k.streams.remove(&call) else {
            return Err(format!("{call} finished on {connection} without a stream"));
        };
        // HTTP/2: the server decides the stream's fate and says it in frames;
        // the driver reads them and the session judges what it reports.
        let stale = k.stale;
        k.max_done = k.max_done.max(stream);
        k.streams.insert(call, stream);
        let rng = &mut self.w.rng;
        let server = self.w.server.clone();
        let ip = self.pool.connection(connection).map(|c| c.route().socket_addr().ip());
        if stale {
            // Closed without the client noticing: the connection's streams fail.
            return self.server_gone(connection);
        }
        let head = |end: bool| {
            let mut block = bytes::BytesMut::new();
            http2::hpack::Encoder.field(&mut block, ":status", b"200");
            frame_on(1, 0x4 | u8::from(end), stream, &block)
        };
        let bytes = if rng.chance(server.refuse_percent) {
            self.counters.refused += 1;
            if let (Some(ip), Some(c)) = (ip, self.calls.get_mut(&call)) {
                c.refused_ips.insert(ip);
            }
            frame_on(3, 0, stream, &http2::session::code::REFUSED_STREAM.to_be_bytes())
        } else if rng.chance(server.reset_percent) {
            frame_on(3, 0, stream, &2u32.to_be_bytes())
        } else if rng.chance(server.body_reset_percent) {
            // The head arrives; the body is cut by a reset.
            self.counters.body_resets += 1;
            let mut b = head(false);
            b.extend(frame_on(0, 0, stream, b"par"));
            b.extend(frame_on(3, 0, stream, &2u32.to_be_bytes()));
            b
        } else {
            let mut b = head(false);
            b.extend(frame_on(0, 1, stream, b"ok"));
            b
        };
        self.server_bytes(connection, &bytes)
    }

    /// The server's bytes reach the connection's driver in random pieces; what
    /// it reports goes to the pool (SETTINGS, GOAWAY), and each stream's end
    /// or failure to its call, with the session's verdict.
    fn server_bytes(&mut self, connection: ConnectionId, bytes: &[u8]) -> Result<(), String> {
        let Some(k) = self.conns.get_mut(&connection) else { return Ok(()) };
        let driver = k.h2.as_mut().ok_or_else(|| format!("{connection}: frames on HTTP/1.1"))?;
        let mut rest = bytes;
        while !rest.is_empty() {
            let n = (self.w.rng.range(1, 16) as usize).min(rest.len());
            driver.handle_read(&rest[..n]);
            rest = &rest[n..];
        }
        self.h2_events(connection)
    }

    /// The connection died under its streams (a silent close, or the pool's
    /// abort): the driver fails every stream on it.
    fn server_gone(&mut self, connection: ConnectionId) -> Result<(), String> {
        let Some(k) = self.conns.get_mut(&connection) else { return Ok(()) };
        k.h2.as_mut()
            .ok_or_else(|| format!("{connection}: not HTTP/2"))?
            .handle_read_error("connection reset");
        self.h2_events(connection)
    }

    fn h2_events(&mut self, connection: ConnectionId) -> Result<(), String> {
        loop {
            let Some(k) = self.conns.get_mut(&connection) else { return Ok(()) };
            let Some(event) = k.h2.as_mut().and_then(http2::Driver::poll_event) else { return Ok(()) };
            let call_of =
                |k: &SimConn, stream: u32| k.streams.iter().find(|(_, s)| **s == stream).map(|(c, _)| *c);
            match event {
                http2::Event::Settings { max_concurrent_streams } => {
                    let session = k.session.as_mut().unwrap();
                    let _ = session.heard(Report::Settings { max_concurrent_streams });
                    k.settings_delivered = true;
                    if self.pool.connection(connection).is_some() {
                        self.pool
                            .settings(self.now, connection, max_concurrent_streams)
                            .map_err(|e| e.to_string())?;
                    }
                }
                http2::Event::GoAway(g) => {
                    let _ = k.session.as_mut().unwrap().heard(Report::GoAway(g));
                    if self.pool.connection(connection).is_some() {
                        self.pool.goaway(self.now, connection, g).map_err(|e| e.to_string())?;
                    }
                }
                http2::Event::Head { stream, .. } => {
                    k.heads.insert(stream);
                }
                http2::Event::Data { stream, data } => {
                    k.h2.as_mut().unwrap().release(stream, data.len());
                }
                http2::Event::Trailers { .. } | http2::Event::Pong | http2::Event::Closed(_) => {}
                http2::Event::End { stream } => {
                    let call =
                        call_of(k, stream).ok_or_else(|| format!("{connection}: end of unknown {stream}"))?;
                    k.streams.remove(&call);
                    k.h2.as_mut().unwrap().close_stream(stream);
                    self.complete(call, connection, Reuse::Reusable)?;
                }
                http2::Event::Failed { stream, error } => {
                    let Some(call) = call_of(k, stream) else { continue };
                    k.streams.remove(&call);
                    k.h2.as_mut().unwrap().close_stream(stream);
                    let facts = self.facts(call);
                    let k = &self.conns[&connection];
                    let session = k.session.as_ref().unwrap();
                    if k.heads.contains(&stream) {
                        // Mid-body: the session says whether the connection goes on.
                        let reuse = session.body_failed(&error);
                        if matches!(error, StreamError::Reset { by: Peer::Server, code } if code != http2::session::code::CANCEL)
                            && reuse != Reuse::Retire(CloseReason::StreamReset)
                        {
                            return Err(format!("{connection}: a reset mid-body left it reusable"));
                        }
                        self.complete(call, connection, reuse)?;
                        if reuse != Reuse::Reusable
                            && self
                                .pool
                                .connection(connection)
                                .is_some_and(|c| c.no_new_exchanges().is_none())
                        {
                            return Err(format!("{connection} takes new streams after a reset mid-body"));
                        }
                        continue;
                    }
                    // What the simulated server did with the request: a
                    // refusal or a GOAWAY above the stream leaves it
                    // unprocessed; anything else may have processed it.
                    let processed = !matches!(
                        error,
                        StreamError::GoAway { by: Peer::Server, .. }
                            | StreamError::Reset {
                                code: http2::session::code::REFUSED_STREAM,
                                by: Peer::Server
                            }
                    ) && session.ending() != Some(CloseReason::NeverUsable);
                    if matches!(error, StreamError::GoAway { by: Peer::Server, .. }) {
                        self.counters.unprocessed += 1;
                    }
                    let failure =
                        session.stream_failed(Some(stream), &error, Progress::RequestWritten, facts);
                    let aborted = std::io::ErrorKind::ConnectionAborted;
                    if session.ending() == Some(CloseReason::NeverUsable)
                        && !matches!(failure.kind, ExchangeFailureKind::Io { kind, .. } if kind == aborted)
                    {
                        return Err(format!("{call}: never-usable verdict {:?}", failure.kind));
                    }
                    self.h2_failed(call, failure, processed)?;
                }
            }
        }
    }

    /// An HTTP/2 stream failed with the session's verdict; `processed`: the
    /// simulated server did act on the request. A processed request that is
    /// not idempotent is never sent again.
    fn h2_failed(&mut self, call: CallId, failure: ExchangeFailure, processed: bool) -> Result<(), String> {
        let kind = failure.kind.clone();
        let unprocessed_verdict =
            matches!(kind, ExchangeFailureKind::GoAwayUnprocessed | ExchangeFailureKind::RefusedStream);
        if processed && unprocessed_verdict {
            return Err(format!("{call}: a processed request judged unprocessed ({kind})"));
        }
        let idempotent = failure.request.idempotent;
        self.calls.get_mut(&call).unwrap().holding = None;
        match self.pool.exchange_failed(self.now, call, failure).map_err(|e| e.to_string())? {
            FailureOutcome::Retrying(reason) => {
                if processed && !idempotent {
                    return Err(format!("{call}: a processed POST is replayed ({kind}, {reason:?})"));
                }
                self.counters.retries += 1;
                self.calls.get_mut(&call).unwrap().acquiring_since = Some(self.now);
            }
            FailureOutcome::Failed(e) => {
                if processed && !e.may_have_been_sent {
                    return Err(format!("{call}: a processed request failed as never sent ({kind})"));
                }
                self.calls.get_mut(&call).unwrap().ended = true;
            }
        }
        Ok(())
    }

    /// The pool ends an HTTP/2 connection now: every stream on it fails, as
    /// the session judges after hearing why.
    fn abort(&mut self, connection: ConnectionId, reason: CloseReason) -> Result<(), String> {
        if reason != CloseReason::NeverUsable {
            return Err(format!("{connection} aborted as {reason}"));
        }
        let k = self.conns.get_mut(&connection).ok_or_else(|| format!("abort of unknown {connection}"))?;
        let session = k.session.as_mut().ok_or_else(|| format!("{connection}: abort of HTTP/1.1"))?;
        session.end(reason);
        if k.streams.is_empty() {
            return Err(format!("{connection} aborted with no stream in flight"));
        }
        self.counters.aborted += 1;
        // The server never made the connection usable: it processed nothing;
        // the session names why (checked in h2_failed's caller: never-usable
        // verdicts are I/O aborts).
        let calls: Vec<CallId> = k.streams.keys().copied().collect();
        self.server_gone(connection)?;
        for call in calls {
            if self.calls[&call].holding == Some(connection) {
                return Err(format!("{call} still holds aborted {connection}"));
            }
        }
        Ok(())
    }

    /// The exchange ended with a response: the pool gets the connection back.
    fn complete(&mut self, call: CallId, connection: ConnectionId, reuse: Reuse) -> Result<(), String> {
        self.calls.get_mut(&call).unwrap().holding = None;
        let (protocol, exchanges) = match self.conns.get_mut(&connection) {
            Some(c) => {
                c.exchanges += 1;
                (c.protocol, c.exchanges)
            }
            None => (None, 0),
        };
        if self.w.rng.chance(self.w.server.error_percent) {
            self.counters.server_errors += 1;
            self.pool.server_error(self.now, call).map_err(|e| e.to_string())?;
        }
        self.pool.exchange_finished(self.now, call, reuse).map_err(|e| e.to_string())?;
        self.calls.get_mut(&call).unwrap().ended = true;
        // HTTP/2 servers that send GOAWAY after a few exchanges.
        if protocol.is_some_and(Protocol::is_multiplexed) {
            if let Some(limit) = self.w.server.goaway_after {
                let c = self.conns.get_mut(&connection);
                if let Some(c) = c {
                    if exchanges >= limit && !c.goaway_sent && self.pool.connection(connection).is_some() {
                        c.goaway_sent = true;
                        self.counters.goaways += 1;
                        let delay = ms(self.w.rng.range(0, 5));
                        self.at(delay, Ev::GoAway(connection));
                    }
                }
            }
        }
        // A server that closes idle connections.
        let idle = self.pool.connection(connection).is_some_and(|c| c.in_flight() == 0);
        if let (true, Some(t)) = (idle, self.w.server.idle_close_ms) {
            let generation = {
                let c = self.conns.get_mut(&connection).unwrap();
                c.idle_generation += 1;
                c.idle_generation
            };
            self.at(ms(t), Ev::IdleClose(connection, generation));
        }
        Ok(())
    }

    fn step(&mut self, ev: Ev) -> Result<(), String> {
        let now = self.now;
        match ev {
            Ev::Arrive(i) => {
                let spec = self.w.calls[i].clone();
                let deadline = now + ms(spec.timeout_ms);
                let address = self.w.hosts[spec.host].address.clone();
                let options = AcquireOptions {
                    exclusive: spec.exclusive,
                    deadline: Some(deadline),
                    ..AcquireOptions::default()
                };
                let id = self.pool.acquire(now, address, options);
                self.calls.insert(
                    id,
                    SimCall {
                        spec: i,
                        deadline,
                        acquiring_since: Some(now),
                        holding: None,
                        ended: false,
                        attempts_in_flight: BTreeSet::new(),
                        last_connect: None,
                        postponed: None,
                        refused_ips: BTreeSet::new(),
                    },
                );
            }
            Ev::Dns(q, answer) => {
                // Remember which of the answer's routes the database postpones now.
                // (An answer reaching a call that already holds a connection
                // feeds no race of its.)
                if let (Ok(ips), Some(c)) =
                    (&answer, self.calls.get(&q.call()).filter(|c| c.holding.is_none()))
                {
                    let address = self.w.hosts[self.w.calls[c.spec].host].address.clone();
                    let db = self.pool.route_database();
                    let h3 = address.offers_http3();
                    let routes: Vec<(IpAddr, bool)> = ips
                        .iter()
                        .flat_map(|ip| [(*ip, true), (*ip, false)])
                        .filter(|(_, quic)| h3 || !quic)
                        .collect();
                    let route = |(ip, quic): (IpAddr, bool)| {
                        let at = SocketAddr::new(ip, 443);
                        if quic {
                            Route::quic(address.clone(), at)
                        } else {
                            Route::new(address.clone(), Proxy::Direct, at)
                        }
                    };
                    let postponed: BTreeSet<(IpAddr, bool)> =
                        routes.iter().copied().filter(|r| db.should_postpone(&route(*r), now)).collect();
                    let some_fresh =
                        routes.iter().any(|r| !postponed.contains(r) && !c.refused_ips.contains(&r.0));
                    self.calls.get_mut(&q.call()).unwrap().postponed = Some((postponed, some_fresh));
                }
                self.pool.handle_dns(now, q, answer).map_err(|e| e.to_string())?;
            }
            Ev::Tcp(a, ok) => {
                // Reports for cancelled attempts are delivered too: the pool must ignore them.
                if let Some(c) = self.calls.get_mut(&a.call()) {
                    if !ok {
                        c.attempts_in_flight.remove(&a);
                    }
                }
                let r = if ok {
                    self.pool.handle_connected(now, a)
                } else {
                    self.attempts.remove(&a);
                    let e =
                        ConnectError::from_io(&std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
                    self.pool.handle_failed(now, a, e)
                };
                r.map_err(|e| e.to_string())?;
            }
            Ev::Tls(a, ok, alpn) => {
                let r = if ok {
                    let facts = TlsFacts { dns_names: vec!["*.sim.test".into()], ..TlsFacts::default() };
                    self.pool.handle_established(now, a, Some(alpn), Some(facts))
                } else {
                    if self.attempts.remove(&a).is_some() {
                        if let Some(c) = self.calls.get_mut(&a.call()) {
                            c.attempts_in_flight.remove(&a);
                        }
                    }
                    let e = ConnectError::Tls { kind: TlsFailure::Protocol, message: "alert".into() };
                    self.pool.handle_failed(now, a, e)
                };
                // A handshake result for an attempt cancelled meanwhile is ignored.
                r.map_err(|e| e.to_string())?;
            }
            Ev::Settings(c, limit) => {
                // SETTINGS: MAX_CONCURRENT_STREAMS when the server sets one,
                // and an INITIAL_WINDOW_SIZE entry either way.
                let mut payload = vec![0, 4, 0, 1, 0, 0];
                if let Some(limit) = limit {
                    payload.extend([0, 3]);
                    payload.extend(limit.to_be_bytes());
                }
                self.server_bytes(c, &frame(4, 0, &payload))?;
            }
            Ev::GoAway(c) => {
                // The last stream it will process: at least every one it
                // answered, sometimes below streams still in flight (those
                // then fail unprocessed).
                let Some(k) = self.conns.get_mut(&c) else { return self.drain() };
                let highest = k.streams.values().copied().max().unwrap_or(0).max(k.max_done);
                let last = self.w.rng.range(u64::from(k.max_done), u64::from(highest.max(k.max_done)));
                let last = u32::try_from(last).unwrap();
                k.goaway_last = Some(last);
                let mut payload = last.to_be_bytes().to_vec();
                payload.extend(0u32.to_be_bytes());
                self.server_bytes(c, &frame(7, 0, &payload))?;
            }
            // A stream the pool's abort already failed is over.
            Ev::ExchangeDone(call, c) if self.calls[&call].holding != Some(c) => {}
            Ev::ExchangeDone(call, c) => self.exchange_done(call, c)?,
            Ev::IdleClose(c, generation) => {
                let idle = self.pool.connection(c).is_some_and(|k| k.in_flight() == 0);
                let current = self.conns.get(&c).is_some_and(|k| k.idle_generation == generation);
                if idle && current {
                    if self.w.rng.chance(self.w.server.stale_percent) {
                        // Closed without the client noticing: the next exchange fails.
                        self.conns.get_mut(&c).unwrap().stale = true;
                        self.counters.stale += 1;
                    } else {
                        self.pool
                            .connection_closed(now, c, CloseReason::ServerClose)
                            .map_err(|e| e.to_string())?;
                    }
                }
            }
        }
        self.drain()
    }

    fn run(seed: u64) -> Result<u64, String> {
        Sim::run_counted(seed).map(|(trace, _)| trace)
    }

    fn run_counted(seed: u64) -> Result<(u64, Counters), String> {
        let w = world(seed);
        let pool = Pool::new(w.config.clone());
        let mut sim = Sim {
            pool,
            now: Instant::ZERO,
            queue: BTreeMap::new(),
            seq: 0,
            attempts: BTreeMap::new(),
            conns: BTreeMap::new(),
            calls: BTreeMap::new(),
            trace: seed,
            steps: 0,
            counters: Counters::default(),
            w,
        };
        sim.counters.calls = sim.w.calls.len() as u64;
        for i in 0..sim.w.calls.len() {
            let at = ms(sim.w.calls[i].at);
            sim.seq += 1;
            sim.queue.insert((Instant::ZERO + at, sim.seq), Ev::Arrive(i));
        }
        loop {
            sim.steps += 1;
            if sim.steps > 200_000 {
                return Err("no progress after 200 000 steps (livelock?)".into());
            }
            let timer = sim.pool.poll_timeout();
            let next = sim.queue.keys().next().copied();
            match (timer, next) {
                (None, None) => break,
                (Some(t), Some((e, _))) if t < e => {
                    sim.now = t.max(sim.now);
                    sim.pool.handle_timeout(sim.now);
                    sim.drain()?;
                }
                (Some(t), None) => {
                    sim.now = t.max(sim.now);
                    sim.pool.handle_timeout(sim.now);
                    sim.drain()?;
                    if sim.pool.poll_timeout().is_some_and(|n| n <= sim.now) {
                        return Err("timer busy loop".into());
                    }
                }
                (_, Some(key)) => {
                    let ev = sim.queue.remove(&key).unwrap();
                    sim.now = key.0.max(sim.now);
                    sim.step(ev)?;
                }
            }
        }
        // Everything ended, nothing leaked.
        if let Some((id, _)) = sim.calls.iter().find(|(_, c)| !c.ended) {
            return Err(format!("{id} never ended"));
        }
        let s = sim.pool.stats();
        if s.calls != 0 || s.totals.open != 0 || s.totals.waiters != 0 || s.totals.connecting != 0 {
            return Err(format!("leaked at the end: {s:?}"));
        }
        if s.restorations > s.ejections || s.ejected_routes as u64 > s.ejections - s.restorations {
            return Err(format!("ejections do not add up: {s:?}"));
        }
        sim.counters.ejections += s.ejections;
        if !sim.attempts.is_empty() || !sim.conns.is_empty() {
            return Err(format!(
                "driver ledger not empty: {} attempts, {} connections",
                sim.attempts.len(),
                sim.conns.len()
            ));
        }
        Ok((sim.trace ^ sim.steps, sim.counters))
    }
}

#[test]
fn seeded_scenarios() {
    if let Ok(seed) = std::env::var("SWITCHYARD_SIM_SEED") {
        let seed: u64 = seed.parse().expect("SWITCHYARD_SIM_SEED is a number");
        if let Err(e) = Sim::run(seed) {
            panic!("seed {seed}: {e}");
        }
        return;
    }
    let count: u64 =
        std::env::var("SWITCHYARD_SIM_SCENARIOS").ok().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let started = std::time::Instant::now();
    let mut total = Counters::default();
    for seed in 0..count {
        match Sim::run_counted(seed) {
            Ok((trace, c)) => {
                total.calls += c.calls;
                total.acquired += c.acquired;
                total.acquire_failed += c.acquire_failed;
                total.retries += c.retries;
                total.stale += c.stale;
                total.goaways += c.goaways;
                total.coalesced += c.coalesced;
                total.races_lost += c.races_lost;
                total.h1_exchanges += c.h1_exchanges;
                total.probe_caught += c.probe_caught;
                total.refused += c.refused;
                total.unprocessed += c.unprocessed;
                total.body_resets += c.body_resets;
                total.aborted += c.aborted;
                total.server_errors += c.server_errors;
                total.ejections += c.ejections;
                total.quic_attempts += c.quic_attempts;
                total.h3_connections += c.h3_connections;
                total.silent_quic_cancelled += c.silent_quic_cancelled;
                // Same seed, same run.
                if seed % 97 == 0 {
                    assert_eq!(Sim::run(seed), Ok(trace), "seed {seed} is not deterministic");
                }
            }
            Err(e) => panic!(
                "seed {seed}: {e}\nreplay: SWITCHYARD_SIM_SEED={seed} cargo test -p switchyard-core --test sim"
            ),
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!("{count} scenarios in {secs:.2} s ({:.0} scenarios/s): {total:?}", count as f64 / secs);
    if count >= 1000 {
        // The generator must reach every path it claims to.
        let t = total;
        for (what, n) in [
            ("acquisitions", t.acquired),
            ("failed acquisitions", t.acquire_failed),
            ("retries", t.retries),
            ("stale connections", t.stale),
            ("HTTP/1.1 exchanges through the driver", t.h1_exchanges),
            ("stale connections caught by the driver's probe", t.probe_caught),
            ("GOAWAYs", t.goaways),
            ("coalesced calls", t.coalesced),
            ("cancelled attempts", t.races_lost),
            ("HTTP/2 streams refused", t.refused),
            ("HTTP/2 streams above GOAWAY's last stream id", t.unprocessed),
            ("HTTP/2 streams reset mid-body", t.body_resets),
            ("HTTP/2 connections ended as never usable with a stream on them", t.aborted),
            ("5xx answers", t.server_errors),
            ("route ejections", t.ejections),
            ("QUIC attempts", t.quic_attempts),
            ("HTTP/3 connections", t.h3_connections),
            ("silent QUIC attempts cancelled", t.silent_quic_cancelled),
        ] {
            assert!(n > 0, "no {what} in {count} scenarios");
        }
    }
}
