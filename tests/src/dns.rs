//! DNS for the tests: a fault-injecting DNS server on loopback (UDP and TCP;
//! per-type delays, silence, TTLs, NXDOMAIN, query counts), a scripted async
//! resolver with per-family delays, a counting blocking resolver, and the
//! scenarios every adapter runs (the cache, shared lookups) or every async adapter
//! runs (answers per family into the race, hickory against the server).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use switchyard_common::{AsyncResolve, BoxFuture, Resolve, Resolved};
use switchyard_core::Family;

use crate::conformance::{Adapter, Config, Failure, Plugged, Req, Resp};
use crate::server::{ServerOptions, TestServer};

/// What the server answers for one name.
#[derive(Clone, Debug, Default)]
pub struct Zone {
    /// A records.
    pub v4: Vec<IpAddr>,
    /// AAAA records.
    pub v6: Vec<IpAddr>,
    /// Their TTL, seconds.
    pub ttl: u32,
    /// Delay before answering A queries; `None`: at once.
    pub a_delay: Option<Duration>,
    /// Delay before answering AAAA queries.
    pub aaaa_delay: Option<Duration>,
    /// Never answer AAAA queries.
    pub aaaa_silent: bool,
    /// HTTPS records (RFC 9460), answered to HTTPS queries.
    pub https: Vec<hickory_proto::rr::rdata::SVCB>,
}

#[derive(Default)]
struct ServerState {
    zones: BTreeMap<String, Zone>,
    /// Queries seen, per (name, type).
    queries: BTreeMap<(String, RecordType), usize>,
}

/// A DNS server on 127.0.0.1 (UDP and TCP, same port) answering from
/// [`Zone`]s; any other name is NXDOMAIN. Stops when dropped.
pub struct DnsServer {
    addr: SocketAddr,
    state: Arc<Mutex<ServerState>>,
    stop: Arc<AtomicBool>,
}

impl DnsServer {
    /// Starts a server with these zones.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    #[must_use]
    pub fn start(zones: impl IntoIterator<Item = (String, Zone)>) -> DnsServer {
        let state = Arc::new(Mutex::new(ServerState {
            zones: zones.into_iter().map(|(n, z)| (normalize(&n), z)).collect(),
            queries: BTreeMap::new(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        // One port for both transports.
        let (udp, tcp) = loop {
            let udp = UdpSocket::bind("127.0.0.1:0").expect("udp bind");
            let port = udp.local_addr().expect("addr").port();
            if let Ok(tcp) = TcpListener::bind(("127.0.0.1", port)) {
                break (udp, tcp);
            }
        };
        let addr = udp.local_addr().expect("addr");
        udp.set_read_timeout(Some(Duration::from_millis(50))).expect("timeout");
        tcp.set_nonblocking(true).expect("nonblocking");
        let udp = Arc::new(udp);
        {
            let (state, stop, udp) = (Arc::clone(&state), Arc::clone(&stop), Arc::clone(&udp));
            thread::spawn(move || {
                let mut buf = [0u8; 1500];
                while !stop.load(Ordering::Relaxed) {
                    let Ok((n, peer)) = udp.recv_from(&mut buf) else { continue };
                    let query = buf[..n].to_vec();
                    let (state, udp) = (Arc::clone(&state), Arc::clone(&udp));
                    thread::spawn(move || {
                        if let Some(reply) = answer(&state, &query) {
                            let _ = udp.send_to(&reply, peer);
                        }
                    });
                }
            });
        }
        {
            let (state, stop) = (Arc::clone(&state), Arc::clone(&stop));
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match tcp.accept() {
                        Ok((stream, _)) => {
                            let state = Arc::clone(&state);
                            thread::spawn(move || serve_tcp(&state, stream));
                        }
                        Err(_) => thread::sleep(Duration::from_millis(10)),
                    }
                }
            });
        }
        DnsServer { addr, state, stop }
    }

    /// Where it listens (UDP and TCP).
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queries seen for `name` of type `kind` (`"A"` or `"AAAA"`).
    ///
    /// # Panics
    /// On an unknown type name.
    #[must_use]
    pub fn queries(&self, name: &str, kind: &str) -> usize {
        let kind = match kind {
            "A" => RecordType::A,
            "AAAA" => RecordType::AAAA,
            other => panic!("unknown type {other}"),
        };
        self.state.lock().expect("lock").queries.get(&(normalize(name), kind)).copied().unwrap_or(0)
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn serve_tcp(state: &Mutex<ServerState>, mut stream: TcpStream) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    loop {
        let mut len = [0u8; 2];
        if stream.read_exact(&mut len).is_err() {
            return;
        }
        let mut query = vec![0u8; usize::from(u16::from_be_bytes(len))];
        if stream.read_exact(&mut query).is_err() {
            return;
        }
        let Some(reply) = answer(state, &query) else { return };
        let Ok(n) = u16::try_from(reply.len()) else { return };
        if stream.write_all(&n.to_be_bytes()).and_then(|()| stream.write_all(&reply)).is_err() {
            return;
        }
    }
}

/// The reply to one query (after its zone's delay), or `None` for silence.
fn answer(state: &Mutex<ServerState>, query: &[u8]) -> Option<Vec<u8>> {
    let request = Message::from_vec(query).ok()?;
    let q = request.queries.first()?.clone();
    let name = normalize(&q.name().to_ascii());
    let kind = q.query_type();
    let zone = {
        let mut st = state.lock().expect("lock");
        *st.queries.entry((name.clone(), kind)).or_default() += 1;
        st.zones.get(&name).cloned()
    };
    let mut reply = Message::response(request.metadata.id, request.metadata.op_code);
    reply.metadata.message_type = MessageType::Response;
    reply.metadata.recursion_desired = request.metadata.recursion_desired;
    reply.metadata.recursion_available = true;
    reply.metadata.authoritative = true;
    reply.add_query(q.clone());
    let Some(zone) = zone else {
        reply.metadata.response_code = ResponseCode::NXDomain;
        return reply.to_vec().ok();
    };
    let delay = match kind {
        RecordType::A => zone.a_delay,
        RecordType::AAAA if zone.aaaa_silent => return None,
        RecordType::AAAA => zone.aaaa_delay,
        _ => None,
    };
    if let Some(d) = delay {
        thread::sleep(d);
    }
    let owner = Name::from_ascii(format!("{name}.")).ok()?;
    if kind == RecordType::HTTPS {
        for svcb in &zone.https {
            let data = RData::HTTPS(hickory_proto::rr::rdata::HTTPS(svcb.clone()));
            reply.add_answer(Record::from_rdata(owner.clone(), zone.ttl, data));
        }
        return reply.to_vec().ok();
    }
    let ips = match kind {
        RecordType::A => &zone.v4,
        RecordType::AAAA => &zone.v6,
        _ => return reply.to_vec().ok(),
    };
    for ip in ips {
        let data = match ip {
            IpAddr::V4(v4) => RData::A(A(*v4)),
            IpAddr::V6(v6) => RData::AAAA(AAAA(*v6)),
        };
        reply.add_answer(Record::from_rdata(owner.clone(), zone.ttl, data));
    }
    reply.to_vec().ok()
}

/// One family's scripted answer: its addresses after a delay, or never.
#[derive(Clone, Debug)]
pub struct Script {
    /// The addresses.
    pub addresses: Vec<IpAddr>,
    /// When to answer; `None`: never.
    pub after: Option<Duration>,
}

/// An async resolver that answers per family on a script (each answer from a
/// thread, so it works on any executor) and counts its lookups.
#[derive(Clone)]
pub struct Scripted {
    v6: Script,
    v4: Script,
    /// Lookups per family asked (each family counts once per lookup).
    pub asked: Arc<AtomicUsize>,
    /// Answers that never come: their senders, kept so the lookups pend.
    never: Arc<Mutex<Vec<tokio::sync::oneshot::Sender<Resolved>>>>,
}

impl Scripted {
    /// AAAA per `v6`, A per `v4`, for every name.
    #[must_use]
    pub fn new(v6: Script, v4: Script) -> Scripted {
        Scripted { v6, v4, asked: Arc::new(AtomicUsize::new(0)), never: Arc::default() }
    }
}

impl AsyncResolve for Scripted {
    fn resolve(&self, host: &str, port: u16) -> BoxFuture<std::io::Result<Resolved>> {
        let (a, b) = (
            AsyncResolve::resolve_family(self, host, port, Family::V6),
            AsyncResolve::resolve_family(self, host, port, Family::V4),
        );
        Box::pin(async move {
            let (a, b) = (a.await?, b.await?);
            Ok(Resolved::new(a.addresses.into_iter().chain(b.addresses).collect()))
        })
    }
    fn per_family(&self) -> bool {
        true
    }
    fn resolve_family(
        &self,
        _host: &str,
        _port: u16,
        family: Family,
    ) -> BoxFuture<std::io::Result<Resolved>> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let script = if family == Family::V6 { self.v6.clone() } else { self.v4.clone() };
        let (tx, rx) = tokio::sync::oneshot::channel();
        if let Some(after) = script.after {
            thread::spawn(move || {
                thread::sleep(after);
                let _ = tx.send(Resolved::new(script.addresses));
            });
        } else {
            self.never.lock().expect("lock").push(tx);
        }
        Box::pin(async move { rx.await.map_err(|_| std::io::Error::other("scripted resolver gone")) })
    }
}

/// The same script as a blocking resolver answering per family, as the system
/// resolver does: each family's lookup sleeps for its delay on the thread the
/// client gives it; an answer that never comes holds its thread for
/// [`Scripted::NEVER`] and then fails.
impl Resolve for Scripted {
    fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<IpAddr>> {
        let mut all = Resolve::resolve_family(self, host, port, Family::V6)?;
        all.extend(Resolve::resolve_family(self, host, port, Family::V4)?);
        Ok(all)
    }
    fn per_family(&self) -> bool {
        true
    }
    fn resolve_family(&self, _host: &str, _port: u16, family: Family) -> std::io::Result<Vec<IpAddr>> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let script = if family == Family::V6 { &self.v6 } else { &self.v4 };
        match script.after {
            Some(after) => {
                thread::sleep(after);
                Ok(script.addresses.clone())
            }
            None => {
                thread::sleep(Scripted::NEVER);
                Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "scripted: no answer"))
            }
        }
    }
}

impl Scripted {
    /// How long a blocking lookup scripted never to answer holds its thread.
    pub const NEVER: Duration = Duration::from_secs(2);
}

/// A blocking resolver over fixed answers that counts lookups per name and may
/// sleep first (to make lookups overlap).
#[derive(Clone, Default)]
pub struct Counting {
    answers: BTreeMap<String, Vec<IpAddr>>,
    delay: Duration,
    counts: Arc<Mutex<BTreeMap<String, usize>>>,
}

impl Counting {
    /// Answers `answers`; any other name is "no such host".
    #[must_use]
    pub fn new(answers: BTreeMap<String, Vec<IpAddr>>, delay: Duration) -> Counting {
        Counting { answers, delay, counts: Arc::default() }
    }

    /// Lookups of `name` so far.
    ///
    /// # Panics
    /// When the lock is poisoned.
    #[must_use]
    pub fn count(&self, name: &str) -> usize {
        self.counts.lock().expect("lock").get(name).copied().unwrap_or(0)
    }
}

impl Resolve for Counting {
    fn resolve(&self, host: &str, _port: u16) -> std::io::Result<Vec<IpAddr>> {
        *self.counts.lock().expect("lock").entry(host.to_owned()).or_default() += 1;
        thread::sleep(self.delay);
        self.answers
            .get(host)
            .cloned()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, format!("no such host {host}")))
    }
}

fn ok(r: Result<Resp, (Failure, String)>) -> Resp {
    match r {
        Ok(r) => r,
        Err((kind, msg)) => panic!("call failed ({kind:?}): {msg}"),
    }
}

fn loopback() -> Vec<IpAddr> {
    vec!["127.0.0.1".parse().expect("ip")]
}

/// The DNS steps of the recorded events: `(name, detail)`.
fn dns_steps(events: &[crate::conformance::EventRow]) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|(_, n, _)| n.starts_with("dns_") || n.starts_with("connect_"))
        .map(|(_, n, d)| ((*n).to_owned(), d.clone()))
        .collect()
}

/// Every adapter: the pool's DNS cache serves later calls (no lookup, events
/// say "from cache"), failures are cached briefly, concurrent calls share one
/// lookup, and the time to live ends a cached answer.
pub fn dns_cache(a: &dyn Adapter) {
    let server = TestServer::start(ServerOptions::default());
    let names: BTreeMap<String, Vec<IpAddr>> =
        [("cached.test".to_owned(), loopback()), ("burst.test".to_owned(), loopback())].into();
    let resolver = Counting::new(names.clone(), Duration::ZERO);
    let config = Config { resolver: Some(Plugged(Arc::new(resolver.clone()))), ..Config::default() };
    let client = a.client(config);
    let url = format!("http://cached.test:{}/hello", server.port());
    for i in 0..3 {
        client.evict(); // a new connection each time: the race needs DNS
        client.clear_events();
        ok(client.send(Req::get(url.clone())));
        let steps = dns_steps(&client.events());
        let start = steps.iter().find(|(n, _)| n == "dns_start").expect("a dns_start");
        if i == 0 {
            assert!(!start.1.contains("(from cache)"), "the first call looks up: {steps:?}");
        } else {
            assert!(start.1.contains("(from cache)"), "call {i}: {steps:?}");
            let end = steps.iter().find(|(n, _)| n == "dns_end").expect("a dns_end");
            assert!(end.1.contains("127.0.0.1") && end.1.contains("(from cache)"), "{steps:?}");
        }
    }
    assert_eq!(resolver.count("cached.test"), 1, "three calls, one lookup");
    let stats = client.stats();
    assert_eq!((stats.dns_lookups, stats.dns_cache_hits), (1, 2));

    // A name that does not resolve: the second call fails from the cache.
    let nx = format!("http://missing.test:{}/hello", server.port());
    for _ in 0..2 {
        let (kind, msg) = client.send(Req::get(nx.clone())).expect_err("no such host");
        assert_eq!(kind, Failure::Dns, "{msg}");
        assert!(msg.contains("missing.test"), "{msg}");
    }
    assert_eq!(resolver.count("missing.test"), 1, "the failure is cached (5 s)");

    // Concurrent calls share one lookup in flight, cache or no cache.
    let slow = Counting::new(names.clone(), Duration::from_millis(300));
    let config = Config {
        resolver: Some(Plugged(Arc::new(slow.clone()))),
        dns_cache_capacity: Some(0),
        ..Config::default()
    };
    let client = a.client(config);
    let burst = format!("http://burst.test:{}/hello", server.port());
    for r in client.send_all(vec![Req::get(burst.clone()); 4]) {
        ok(r);
    }
    assert_eq!(slow.count("burst.test"), 1, "four concurrent calls, one lookup");
    assert_eq!(client.stats().dns_shared, 3);
    let sources: Vec<String> =
        client.events().into_iter().filter(|(_, n, _)| *n == "dns_start").map(|(_, _, d)| d).collect();
    assert_eq!(sources.iter().filter(|d| d.contains("(shared lookup)")).count(), 3, "{sources:?}");
    // With the cache off, a later call looks up again (once every burst
    // connection is back and no connect of the burst is still going: one
    // released, or a kept attempt joining the pool, after the eviction would be
    // reused).
    crate::conformance::eventually("the burst's connections settled", Duration::from_secs(5), || {
        let totals = client.stats().totals;
        totals.in_use == 0 && totals.connecting == 0
    });
    client.evict();
    ok(client.send(Req::get(burst)));
    assert_eq!(slow.count("burst.test"), 2);

    // The time to live ends a cached answer.
    let short = Counting::new(names, Duration::ZERO);
    let config = Config {
        resolver: Some(Plugged(Arc::new(short.clone()))),
        dns_cache_ttl: Some(Duration::from_millis(300)),
        ..Config::default()
    };
    let client = a.client(config);
    ok(client.send(Req::get(url.clone())));
    client.evict();
    ok(client.send(Req::get(url.clone())));
    assert_eq!(short.count("cached.test"), 1);
    thread::sleep(Duration::from_millis(400));
    client.evict();
    ok(client.send(Req::get(url)));
    assert_eq!(short.count("cached.test"), 2, "asked again once the TTL passed");
}

/// Async adapters: with a resolver that answers per family, AAAA starts
/// attempts at once and a later A answer joins the running race.
pub fn aaaa_first_then_a_joins_the_race(a: &dyn Adapter) {
    aaaa_first_then_a_joins(a, Plug::Async);
}

/// Every adapter, with a blocking resolver that answers per family (as the
/// default system resolver does: two lookups on two threads): the same two
/// rules as with an async one — AAAA first starts IPv6 and a later A joins;
/// A first waits for AAAA up to the resolution delay, and no longer.
pub fn per_family_blocking_resolver(a: &dyn Adapter) {
    aaaa_first_then_a_joins(a, Plug::Blocking);
    a_first_waits_for_aaaa(a, Plug::Blocking);

    // The default resolver itself: "localhost" through getaddrinfo, asked as
    // A and AAAA separately (whatever the hosts file gives for AAAA).
    let server = TestServer::start(ServerOptions::default());
    let system: Arc<dyn Resolve> = Arc::new(switchyard_common::SystemResolver);
    let client = a.client(Config { resolver: Some(Plugged(system)), ..Config::default() });
    ok(client.send(Req::get(format!("http://localhost:{}/hello", server.port()))));
    let steps = dns_steps(&client.events());
    assert!(
        steps.iter().any(|(n, d)| n == "dns_end" && d.contains("(A)") && d.contains("127.0.0.1")),
        "the system resolver answered A on its own: {steps:?}"
    );
}

/// How a scenario plugs its scripted resolver in.
#[derive(Clone, Copy)]
enum Plug {
    Async,
    Blocking,
}

impl Plug {
    fn config(self, scripted: Scripted) -> Config {
        match self {
            Plug::Async => Config { async_resolver: Some(Plugged(Arc::new(scripted))), ..Config::default() },
            Plug::Blocking => Config { resolver: Some(Plugged(Arc::new(scripted))), ..Config::default() },
        }
    }
}

fn aaaa_first_then_a_joins(a: &dyn Adapter, plug: Plug) {
    // The server is IPv4 only: [::1] is refused, and the call lives on the A
    // answer that comes later.
    let server = TestServer::start(ServerOptions::default());
    let scripted = Scripted::new(
        Script { addresses: vec!["::1".parse().expect("ip")], after: Some(Duration::ZERO) },
        Script { addresses: loopback(), after: Some(Duration::from_millis(300)) },
    );
    let client = a.client(plug.config(scripted));
    ok(client.send(Req::get(format!("http://dual.test:{}/hello", server.port()))));
    let steps = dns_steps(&client.events());
    let at = |pred: &dyn Fn(&(String, String)) -> bool| steps.iter().position(pred).unwrap_or(usize::MAX);
    let aaaa = at(&|(n, d)| n == "dns_end" && d.contains("(AAAA)"));
    let v6_connect = at(&|(n, d)| n == "connect_start" && d.contains("[::1]"));
    let a_end = at(&|(n, d)| n == "dns_end" && d.contains("(A)"));
    let v4_connect = at(&|(n, d)| n == "connect_start" && d.contains("127.0.0.1"));
    let v4_end = at(&|(n, d)| n == "connect_end" && d.contains("127.0.0.1"));
    assert!(aaaa < v6_connect && v6_connect < a_end, "IPv6 went before the A answer: {steps:?}");
    assert!(a_end < v4_connect && v4_connect < v4_end, "the late A answer joined the race: {steps:?}");
}

/// Async adapters: an A answer that comes first waits (up to the resolution
/// delay) for AAAA, so IPv6 still goes first; past the delay IPv4 goes alone,
/// even when AAAA never answers.
pub fn a_first_waits_for_aaaa_up_to_the_resolution_delay(a: &dyn Adapter) {
    a_first_waits_for_aaaa(a, Plug::Async);
}

fn a_first_waits_for_aaaa(a: &dyn Adapter, plug: Plug) {
    let server = TestServer::start(ServerOptions::default());
    let url = format!("http://dual.test:{}/hello", server.port());
    // AAAA 100 ms after A, within a 3 s delay: IPv6 first.
    let scripted = Scripted::new(
        Script { addresses: vec!["::1".parse().expect("ip")], after: Some(Duration::from_millis(100)) },
        Script { addresses: loopback(), after: Some(Duration::ZERO) },
    );
    let config = Config { resolution_delay: Some(Duration::from_secs(3)), ..plug.config(scripted) };
    let client = a.client(config);
    ok(client.send(Req::get(url.clone())));
    let steps = dns_steps(&client.events());
    let first = steps.iter().find(|(n, _)| n == "connect_start").expect("a connect");
    assert!(first.1.contains("[::1]"), "A waited for AAAA: {steps:?}");
    let a_end = steps.iter().position(|(n, d)| n == "dns_end" && d.contains("(A)")).expect("A answered");
    let aaaa_end =
        steps.iter().position(|(n, d)| n == "dns_end" && d.contains("(AAAA)")).expect("AAAA answered");
    assert!(a_end < aaaa_end, "A came first: {steps:?}");

    // AAAA never answers; past a 100 ms delay the call goes over IPv4.
    let scripted = Scripted::new(
        Script { addresses: vec!["::1".parse().expect("ip")], after: None },
        Script { addresses: loopback(), after: Some(Duration::ZERO) },
    );
    let config = Config { resolution_delay: Some(Duration::from_millis(100)), ..plug.config(scripted) };
    let client = a.client(config);
    ok(client.send(Req::get(url)));
    let steps = dns_steps(&client.events());
    assert!(!steps.iter().any(|(_, d)| d.contains("(AAAA)")), "{steps:?}");
    let first = steps.iter().find(|(n, _)| n == "connect_start").expect("a connect");
    assert!(first.1.contains("127.0.0.1"), "{steps:?}");
}

/// Async adapters with hickory: queries go to our DNS server, A and AAAA
/// separately; the TTL it gives is the cache's; NXDOMAIN is a DNS failure naming
/// the host; a slow AAAA does not hold up IPv4 beyond the resolution delay.
pub fn hickory_against_a_dns_server(
    a: &dyn Adapter,
    hickory: &dyn Fn(SocketAddr) -> Plugged<dyn AsyncResolve>,
) {
    let server = TestServer::start(ServerOptions::default());
    let zones = [
        ("fast.test".to_owned(), Zone { v4: loopback(), ttl: 1, ..Zone::default() }),
        (
            "slow6.test".to_owned(),
            Zone {
                v4: loopback(),
                v6: vec!["::1".parse().expect("ip")],
                ttl: 60,
                aaaa_silent: true,
                ..Zone::default()
            },
        ),
    ];
    let dns = DnsServer::start(zones);
    let config = Config { async_resolver: Some(hickory(dns.addr())), ..Config::default() };
    let client = a.client(config);
    let url = format!("http://fast.test:{}/hello", server.port());
    ok(client.send(Req::get(url.clone())));
    crate::conformance::eventually("A and AAAA asked", Duration::from_secs(10), || {
        (dns.queries("fast.test", "A"), dns.queries("fast.test", "AAAA")) == (1, 1)
    });
    // Within the 1 s TTL: from the cache.
    client.evict();
    client.clear_events();
    ok(client.send(Req::get(url.clone())));
    assert_eq!(dns.queries("fast.test", "A"), 1);
    assert!(
        client.events().iter().any(|(_, n, d)| *n == "dns_start" && d.contains("(from cache)")),
        "{:?}",
        client.events()
    );
    // Past it: asked again.
    thread::sleep(Duration::from_millis(1200));
    client.evict();
    ok(client.send(Req::get(url)));
    assert_eq!(dns.queries("fast.test", "A"), 2, "the server's TTL (1 s) ended the cached answer");

    // NXDOMAIN: a typed DNS failure naming the host.
    let (kind, msg) =
        client.send(Req::get(format!("http://nowhere.test:{}/hello", server.port()))).expect_err("NXDOMAIN");
    assert_eq!(kind, Failure::Dns, "{msg}");
    assert!(msg.contains("nowhere.test") && msg.contains("NXDOMAIN"), "{msg}");

    // AAAA never answers: after the 50 ms resolution delay IPv4 goes alone.
    client.clear_events();
    ok(client.send(Req::get(format!("http://slow6.test:{}/hello", server.port()))));
    let steps = dns_steps(&client.events());
    assert!(steps.iter().any(|(n, d)| n == "dns_end" && d.contains("(A)")), "{steps:?}");
    assert!(!steps.iter().any(|(n, d)| n == "dns_end" && d.contains("(AAAA)")), "{steps:?}");
}

/// Lists the DNS scenarios for an async adapter: `dns_suite!(Adapter, |addr|
/// hickory resolver for addr)`.
#[macro_export]
macro_rules! dns_suite {
    ($adapter:expr, $hickory:expr) => {
        #[test]
        fn aaaa_first_then_a_joins_the_race() {
            $crate::dns::aaaa_first_then_a_joins_the_race(&$adapter);
        }
        #[test]
        fn a_first_waits_for_aaaa_up_to_the_resolution_delay() {
            $crate::dns::a_first_waits_for_aaaa_up_to_the_resolution_delay(&$adapter);
        }
        #[test]
        fn hickory_against_a_dns_server() {
            $crate::dns::hickory_against_a_dns_server(&$adapter, &|addr| {
                $crate::conformance::Plugged($hickory(addr))
            });
        }
        #[test]
        fn hickory_against_dnsmasq() {
            $crate::interop::hickory_against_dnsmasq(&$adapter, &|addr| {
                $crate::conformance::Plugged($hickory(addr))
            });
        }
    };
}
