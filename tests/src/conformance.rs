//! The conformance suite: scenarios written once against [`Adapter`], run for
//! every runtime adapter by [`conformance_suite!`](crate::conformance_suite).
//! Each asserts behaviour from both sides: the client's result and events, and
//! the server's record of connections and exchanges.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use switchyard_core::{CloseReason, PoolStats};

use crate::certs::{untrusted_leaf, TestCa};
use crate::net::{refused_port, v4_listener_with_hanging_v6, RawServer};
use crate::server::{ServerOptions, TestServer};

/// Which protocols the client may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Version {
    /// ALPN decides for https; HTTP/1.1 for http.
    #[default]
    Auto,
    /// HTTP/1.1 only.
    Http1,
    /// HTTP/2 only (prior knowledge for http).
    Http2,
}

/// Adapter-neutral client settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Happy Eyeballs attempt delay.
    pub attempt_delay: Duration,
    /// Per-attempt connect timeout.
    pub connect_timeout: Duration,
    /// Keep-alive for idle connections.
    pub idle_timeout: Duration,
    /// Connections per host.
    pub max_per_host: Option<usize>,
    /// Protocols.
    pub version: Version,
    /// Wait for an HTTP/2 stream instead of opening another connection.
    pub wait_for_streams: bool,
    /// A hermetic resolver: these names only; any other name fails to resolve.
    pub hosts: BTreeMap<String, Vec<IpAddr>>,
    /// Every request to this Unix-domain socket.
    pub unix_socket: Option<std::path::PathBuf>,
    /// Socket options for TCP connections.
    pub tcp: switchyard_common::transport::TcpOptions,
    /// Extra trusted root (DER).
    pub root: Option<Vec<u8>>,
    /// Bound on each read.
    pub read_timeout: Option<Duration>,
    /// Bound on each write (on HTTP/2, each wait for the server's windows).
    pub write_timeout: Option<Duration>,
    /// Bound on a call until its response head.
    pub head_timeout: Option<Duration>,
    /// Bound on the winner's handshakes.
    pub handshake_timeout: Duration,
    /// Bound on a whole call (a guard against hangs).
    pub call_timeout: Option<Duration>,
    /// Bound on reading a response body.
    pub body_timeout: Option<Duration>,
    /// How long `Expect: 100-continue` waits before sending the body anyway.
    pub expect_continue_timeout: Duration,
    /// Proxies, in order (empty: direct).
    pub proxies: Vec<switchyard_core::Proxy>,
    /// Proxies from these environment variables instead (`ProxyEnv::from_vars`,
    /// as `proxy_from_env` reads them), as a per-URL selector.
    pub proxy_env: Option<Vec<(String, String)>>,
    /// A blocking resolver instead of the hermetic one over `hosts`.
    pub resolver: Option<Plugged<dyn switchyard_common::Resolve>>,
    /// An async resolver instead (async adapters only).
    pub async_resolver: Option<Plugged<dyn switchyard_common::AsyncResolve>>,
    /// The DNS cache's default TTL.
    pub dns_cache_ttl: Option<Duration>,
    /// The DNS cache's size (0: off).
    pub dns_cache_capacity: Option<usize>,
    /// How long an address must be missing from DNS answers before its
    /// connections drain.
    pub dns_drain_grace: Option<Duration>,
    /// RFC 8305's resolution delay.
    pub resolution_delay: Option<Duration>,
    /// Idle connections kept per host.
    pub max_idle_per_host: Option<usize>,
    /// A prepared rustls config (`tls_config`), and whether the test vouches
    /// for its verifier (`tls_config_coalescing`).
    pub tls_config: Option<(Plugged<rustls::ClientConfig>, bool)>,
    /// The retry budget (`None`: the client's default).
    pub retry_budget: Option<Option<switchyard_core::RetryBudget>>,
    /// Connections' max lifetime and its jitter.
    pub max_lifetime: Option<(Duration, f64)>,
    /// HTTP/2 keep-alive PING interval.
    pub ping_interval: Option<Duration>,
    /// Outlier ejection (`None`: the client's default).
    pub outliers: Option<switchyard_core::OutlierPolicy>,
    /// HTTP/2 stream and connection windows (`None`: the client's default).
    pub http2_windows: Option<(u32, u32)>,
}

/// A resolver plugged into a [`Config`] (shown as `..` in its `Debug`).
pub struct Plugged<T: ?Sized>(pub std::sync::Arc<T>);

impl<T: ?Sized> Clone for Plugged<T> {
    fn clone(&self) -> Self {
        Plugged(std::sync::Arc::clone(&self.0))
    }
}

impl<T: ?Sized> std::fmt::Debug for Plugged<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Plugged(..)")
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            attempt_delay: Duration::from_millis(250),
            connect_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(90),
            max_per_host: None,
            version: Version::Auto,
            wait_for_streams: false,
            hosts: BTreeMap::new(),
            root: None,
            read_timeout: None,
            write_timeout: None,
            head_timeout: None,
            handshake_timeout: Duration::from_secs(5),
            call_timeout: Some(Duration::from_secs(20)),
            body_timeout: None,
            expect_continue_timeout: Duration::from_secs(1),
            proxies: Vec::new(),
            proxy_env: None,
            resolver: None,
            async_resolver: None,
            dns_cache_ttl: None,
            dns_cache_capacity: None,
            dns_drain_grace: None,
            unix_socket: None,
            tcp: switchyard_common::transport::TcpOptions::default(),
            resolution_delay: None,
            max_idle_per_host: None,
            tls_config: None,
            retry_budget: None,
            max_lifetime: None,
            ping_interval: None,
            outliers: None,
            http2_windows: None,
        }
    }
}

/// A request.
#[derive(Clone, Debug)]
pub struct Req {
    /// Method.
    pub method: http::Method,
    /// Absolute URL.
    pub url: String,
    /// Body bytes.
    pub body: Vec<u8>,
    /// Send the body as a stream (a reader of unknown length), not a buffer.
    pub streamed: bool,
    /// Exclusive acquisition.
    pub exclusive: bool,
    /// Extra header fields.
    pub headers: Vec<(String, String)>,
}

impl Req {
    /// A GET.
    #[must_use]
    pub fn get(url: impl Into<String>) -> Req {
        Req {
            method: http::Method::GET,
            url: url.into(),
            body: Vec::new(),
            streamed: false,
            exclusive: false,
            headers: Vec::new(),
        }
    }
}

/// A response, fully read.
#[derive(Clone, Debug)]
pub struct Resp {
    /// Status code.
    pub status: u16,
    /// Protocol version.
    pub version: http::Version,
    /// Body.
    pub body: Vec<u8>,
}

/// How a call failed, classified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Malformed URL or configuration.
    InvalidUrl,
    /// DNS gave nothing.
    Dns,
    /// Every connect attempt failed at TCP.
    Connect,
    /// The certificate is not trusted.
    TlsCertificate,
    /// The certificate does not cover the host.
    TlsHostname,
    /// A timeout.
    Timeout,
    /// The exchange failed and was not retried; `true`: the request may have
    /// been sent.
    Exchange(bool),
    /// The response body failed mid-stream.
    Body,
    /// The call was running when the client's shutdown ended it
    /// (`Error::is_shutdown`, not a refusal: that one is `Connect`).
    Shutdown,
    /// Anything else.
    Other,
}

/// One client event: (call, name, detail). Pool-wide events have no call.
pub type EventRow = (Option<u64>, &'static str, String);

/// What each adapter provides to the suite.
pub trait TestClient: Send + Sync {
    /// Sends one request and reads its whole body.
    fn send(&self, req: Req) -> Result<Resp, (Failure, String)>;
    /// Sends `req` and returns once its head arrived: the status, and the
    /// response held with its body unread (dropping it abandons the body).
    fn hold(&self, req: Req) -> Result<(u16, Box<dyn std::any::Any>), (Failure, String)>;
    /// Sends these requests concurrently, results in order.
    fn send_all(&self, reqs: Vec<Req>) -> Vec<Result<Resp, (Failure, String)>>;
    /// `callers` concurrent callers, each sending `req` `each` times one after
    /// the other (steady load). Every result, in no particular order.
    fn send_loops(&self, callers: usize, each: usize, req: Req) -> Vec<Result<Resp, (Failure, String)>> {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..callers)
                .map(|_| s.spawn(|| (0..each).map(|_| self.send(req.clone())).collect::<Vec<_>>()))
                .collect();
            handles.into_iter().flat_map(|h| h.join().expect("caller thread")).collect()
        })
    }
    /// The pool's stats.
    fn stats(&self) -> PoolStats;
    /// Every event so far, in order; calls numbered by the adapter's call ids.
    fn events(&self) -> Vec<EventRow>;
    /// Forgets recorded events.
    fn clear_events(&self);
    /// Closes idle connections.
    fn evict(&self);
    /// Shuts the client down gracefully (`Client::shutdown(grace)`).
    fn shutdown(&self, grace: Duration) -> switchyard_common::ShutdownReport;
    /// How many Addresses the pool tracks (`stats_by_address().len()`).
    fn addresses(&self) -> usize;
}

/// An adapter under test.
pub trait Adapter {
    /// Its name, for messages.
    fn name(&self) -> &'static str;
    /// A client with these settings.
    fn client(&self, config: Config) -> Box<dyn TestClient>;
}

fn ok(r: Result<Resp, (Failure, String)>) -> Resp {
    match r {
        Ok(r) => r,
        Err((kind, msg)) => panic!("call failed ({kind:?}): {msg}"),
    }
}

pub use crate::dns::{dns_cache, per_family_blocking_resolver};
pub use crate::resilience::{
    dns_change_drains_pooled_connections, dropped_calls_leave_nothing_behind_http1,
    dropped_calls_leave_nothing_behind_http2, http2_keepalive_ping_finds_a_dead_peer,
    many_hosts_keep_bounded_state, retry_budget_bounds_a_retry_storm,
    retry_budget_bounds_an_http2_retry_storm, rotating_dns_answers_keep_one_connection,
    server_errors_eject_a_route, server_errors_eject_an_http2_route, shutdown_ends_http2_calls_as_shutdown,
    shutdown_under_load_loses_no_call,
};

/// Waits (bounded, polling) until `cond` holds; timings never decide the verdict.
pub(crate) fn eventually(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The (connection, exchange) pairs the server recorded.
fn reuse_pattern(server: &TestServer) -> Vec<(usize, usize)> {
    server.records().iter().map(|r| (r.connection, r.exchange)).collect()
}

/// Sequential GETs reuse one connection: exchange 0, 1, 2 on connection 0.
pub fn sequential_reuse(a: &dyn Adapter) {
    let server = TestServer::start(ServerOptions::default());
    let client = a.client(Config::default());
    for _ in 0..3 {
        let r = ok(client.send(Req::get(format!("http://127.0.0.1:{}/hello", server.port()))));
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]));
    }
    assert_eq!(reuse_pattern(&server), [(0, 0), (0, 1), (0, 2)]);
    let s = client.stats();
    assert_eq!((s.created, s.reused), (1, 2));
}

/// `Connection: close` retires the connection: the next call connects again.
pub fn connection_close(a: &dyn Adapter) {
    let server = TestServer::start(ServerOptions::default());
    let client = a.client(Config::default());
    ok(client.send(Req::get(format!("http://127.0.0.1:{}/close", server.port()))));
    ok(client.send(Req::get(format!("http://127.0.0.1:{}/hello", server.port()))));
    assert_eq!(reuse_pattern(&server), [(0, 0), (1, 0)]);
    assert_eq!(client.stats().closed.get(&CloseReason::ServerClose), Some(&1));
}

/// A body delimited by the connection closing is read whole, and the
/// connection is not reused.
pub fn close_delimited_body(a: &dyn Adapter) {
    let raw = RawServer::start(vec![
        b"HTTP/1.1 200 OK\r\n\r\nread until close".to_vec(),
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(),
    ]);
    let client = a.client(Config::default());
    let r = ok(client.send(Req::get(format!("http://{}/", raw.addr))));
    assert_eq!(r.body, b"read until close");
    let r = ok(client.send(Req::get(format!("http://{}/", raw.addr))));
    assert_eq!(r.body, b"ok");
    assert_eq!(client.stats().created, 2);
    assert_eq!(client.stats().closed.get(&CloseReason::CloseDelimited), Some(&1));
}

pub(crate) fn tls_server(ca: &TestCa, names: &[&str], options: ServerOptions) -> TestServer {
    let leaf = ca.leaf(names);
    let mut options = options;
    options.tls.push((names.iter().map(|s| (*s).to_owned()).collect(), leaf));
    TestServer::start(options)
}

pub(crate) fn tls_config(ca: &TestCa, hosts: &[&str]) -> Config {
    let mut c = Config { root: Some(ca.cert.clone()), ..Config::default() };
    for h in hosts {
        c.hosts.insert((*h).to_owned(), vec!["127.0.0.1".parse().expect("ip")]);
    }
    c
}

/// Concurrent calls share one HTTP/2 connection.
pub fn http2_multiplexing(a: &dyn Adapter) {
    let ca = TestCa::new();
    let server = tls_server(&ca, &["a.test"], ServerOptions::default());
    let client = a.client(tls_config(&ca, &["a.test"]));
    let url = format!("https://a.test:{}/sleep/100", server.port());
    // Warm up so the connection exists before the burst.
    ok(client.send(Req::get(format!("https://a.test:{}/hello", server.port()))));
    let results = client.send_all((0..5).map(|_| Req::get(url.clone())).collect());
    for r in results {
        assert_eq!(ok(r).version, http::Version::HTTP_2);
    }
    assert_eq!(server.connections(), 1, "one HTTP/2 connection carries every call");
    assert!(server.records().iter().all(|r| r.version == http::Version::HTTP_2));
}

/// The server allows 2 streams: 3 concurrent calls open a second connection,
/// or wait for a stream under the wait policy.
pub fn http2_stream_limit(a: &dyn Adapter) {
    let ca = TestCa::new();
    for (wait, expected) in [(false, 2), (true, 1)] {
        let server = tls_server(
            &ca,
            &["a.test"],
            ServerOptions { max_concurrent_streams: Some(2), ..Default::default() },
        );
        let mut config = tls_config(&ca, &["a.test"]);
        config.wait_for_streams = wait;
        let client = a.client(config);
        ok(client.send(Req::get(format!("https://a.test:{}/hello", server.port()))));
        let url = format!("https://a.test:{}/sleep/300", server.port());
        for r in client.send_all((0..3).map(|_| Req::get(url.clone())).collect()) {
            ok(r);
        }
        assert_eq!(server.connections(), expected, "wait policy {wait}");
    }
}

/// Two host names coalesce onto one HTTP/2 connection when the IP and the
/// certificate both match — and not when either does not.
pub fn coalescing(a: &dyn Adapter) {
    let ca = TestCa::new();
    let mut options = ServerOptions { also_on: vec!["127.0.0.2".parse().expect("ip")], ..Default::default() };
    let names = ["a.test", "b.test", "c.test"];
    options.tls.push((names.iter().map(|n| (*n).to_owned()).collect(), ca.leaf(&names)));
    options.tls.push((vec!["d.test".into()], ca.leaf(&["d.test"])));
    let server = TestServer::start(options);
    let mut config = tls_config(&ca, &["a.test", "b.test", "d.test"]);
    // c.test: a.test's certificate covers it, but it resolves to another IP.
    config.hosts.insert("c.test".into(), vec!["127.0.0.2".parse().expect("ip")]);
    let client = a.client(config);
    let port = server.port();
    ok(client.send(Req::get(format!("https://a.test:{port}/hello"))));
    ok(client.send(Req::get(format!("https://b.test:{port}/hello"))));
    assert_eq!(server.connections(), 1, "b.test coalesced onto a.test's connection");
    assert_eq!(client.stats().coalesced, 1);
    // Each condition alone must prevent coalescing, and the call must still
    // succeed on a connection of its own.
    // d.test: same IP, but a.test's certificate does not cover it.
    let r = ok(client.send(Req::get(format!("https://d.test:{port}/hello"))));
    assert_eq!(r.body, b"hello");
    assert_eq!(server.connections(), 2, "d.test: the certificate does not cover it: a new connection");
    assert_eq!(client.stats().coalesced, 1, "never on the IP alone");
    // c.test: the certificate covers it, but the IP differs.
    let r = ok(client.send(Req::get(format!("https://c.test:{port}/hello"))));
    assert_eq!(r.body, b"hello");
    assert_eq!(server.connections(), 3, "c.test: another IP: a new connection");
    assert_eq!(client.stats().coalesced, 1, "never on the certificate alone");
    let sni: Vec<Option<String>> = server.records().iter().map(|r| r.sni.clone()).collect();
    assert_eq!(sni.last().cloned().flatten().as_deref(), Some("c.test"), "{sni:?}");
}

/// IP-address SANs count for coalescing (issue 19): a certificate covering
/// `127.0.0.1` lets `https://127.0.0.1/` coalesce onto a.test's connection
/// to that address; a certificate that does not cover the IP makes the call
/// open its own connection (which the server answers with a certificate for
/// the IP).
pub fn coalescing_onto_an_ip_san(a: &dyn Adapter) {
    let ca = TestCa::new();
    let mut options = ServerOptions::default();
    options.tls.push((vec!["a.test".into()], ca.leaf(&["a.test", "127.0.0.1"])));
    let server = TestServer::start(options);
    let client = a.client(tls_config(&ca, &["a.test"]));
    let port = server.port();
    ok(client.send(Req::get(format!("https://a.test:{port}/hello"))));
    assert_eq!(ok(client.send(Req::get(format!("https://127.0.0.1:{port}/hello")))).body, b"hello");
    assert_eq!(server.connections(), 1, "127.0.0.1 coalesced onto a.test's connection");
    assert_eq!(client.stats().coalesced, 1);

    // Without the IP in a.test's certificate: a connection of its own (no SNI:
    // the server's first certificate, which covers the IP).
    let mut options = ServerOptions::default();
    options.tls.push((vec!["127.0.0.1".into()], ca.leaf(&["127.0.0.1"])));
    options.tls.push((vec!["a.test".into()], ca.leaf(&["a.test"])));
    let server = TestServer::start(options);
    let client = a.client(tls_config(&ca, &["a.test"]));
    let port = server.port();
    ok(client.send(Req::get(format!("https://a.test:{port}/hello"))));
    assert_eq!(ok(client.send(Req::get(format!("https://127.0.0.1:{port}/hello")))).body, b"hello");
    assert_eq!(server.connections(), 2, "a.test's certificate does not cover the IP");
    assert_eq!(client.stats().coalesced, 0);
}

/// A `421 Misdirected Request` on a coalesced HTTP/2 connection: the call is
/// retried once on a fresh connection of its own host (the server sees a second
/// connection, with that host's SNI); a 421 there is the caller's answer.
pub fn misdirected_on_a_coalesced_connection(a: &dyn Adapter) {
    let ca = TestCa::new();
    let mut options = ServerOptions::default();
    options.tls.push((vec!["a.test".into(), "b.test".into()], ca.leaf(&["a.test", "b.test"])));
    let server = TestServer::start(options);
    let client = a.client(tls_config(&ca, &["a.test", "b.test"]));
    let port = server.port();
    ok(client.send(Req::get(format!("https://a.test:{port}/hello"))));
    let r = ok(client.send(Req::get(format!("https://b.test:{port}/status/421"))));
    assert_eq!(r.status, 421, "the fresh connection's answer is returned");
    assert_eq!(client.stats().coalesced, 1, "b.test first rode a.test's connection");
    assert_eq!(server.connections(), 2, "then one of its own");
    let records = server.records();
    assert_eq!(records.len(), 3);
    assert_eq!((records[1].connection, records[2].connection), (0, 1));
    assert_eq!(records[2].sni.as_deref(), Some("b.test"));
}

/// HTTP/2 with prior knowledge to a server that speaks only HTTP/1.1: every
/// call fails the same way, whatever the timing (the server's answer or its
/// close read before or after the stream's HEADERS were queued): a protocol
/// error saying the server did not answer as HTTP/2, "may have been sent",
/// not retried (BEHAVIOUR §6: "not processed" needs proof).
pub fn prior_knowledge_to_an_http1_server_fails_one_way(a: &dyn Adapter) {
    let server = TestServer::start(ServerOptions { http1_only: true, ..ServerOptions::default() });
    let client = a.client(Config { version: Version::Http2, ..Config::default() });
    let url = format!("http://127.0.0.1:{}/hello", server.port());
    for i in 0..20 {
        let (kind, message) = client.send(Req::get(url.clone())).expect_err("not an HTTP/2 server");
        assert_eq!(kind, Failure::Exchange(true), "call {i}: {message}");
        assert!(message.contains("did not answer as an HTTP/2 server"), "call {i}: {message}");
        assert!(message.contains("may have been sent"), "call {i}: {message}");
    }
    assert_eq!(client.stats().calls, 0);
}

/// The first route never answers: the call succeeds on the second route after
/// the attempt delay, and the event log shows the race; the next connection
/// tries the working route first.
pub fn happy_eyeballs_hanging_first_route(a: &dyn Adapter) {
    // Every CI machine of this kind has an IPv6 loopback; a machine without one
    // cannot run this scenario at all, which must fail loudly rather than pass.
    let (v4, _hanging) = v4_listener_with_hanging_v6().expect("an IPv6 loopback whose backlog can be filled");
    let server = TestServer::start_on(v4, ServerOptions::default());
    let mut config = Config { attempt_delay: Duration::from_millis(100), ..Config::default() };
    config
        .hosts
        .insert("dual.test".into(), vec!["::1".parse().expect("ip"), "127.0.0.1".parse().expect("ip")]);
    let client = a.client(config);
    let url = format!("http://dual.test:{}/hello", server.port());
    ok(client.send(Req::get(url.clone())));
    let names: Vec<(&str, String)> = client.events().into_iter().map(|(_, n, d)| (n, d)).collect();
    let connects: Vec<&(&str, String)> = names.iter().filter(|(n, _)| n.starts_with("connect_")).collect();
    assert!(connects[0].0 == "connect_start" && connects[0].1.contains("[::1]"), "{connects:?}");
    assert!(connects[1].0 == "connect_start" && connects[1].1.contains("127.0.0.1"), "{connects:?}");
    assert!(connects.iter().any(|(n, d)| *n == "connect_cancelled" && d.contains("[::1]")), "{connects:?}");
    assert!(connects.iter().any(|(n, d)| *n == "connect_end" && d.contains("127.0.0.1")), "{connects:?}");
    // The black hole is remembered: a new connection tries IPv4 first.
    client.evict();
    client.clear_events();
    ok(client.send(Req::get(url)));
    let first = client.events().into_iter().find(|(_, n, _)| *n == "connect_start").expect("a connect");
    assert!(first.2.contains("127.0.0.1"), "postponed route still first: {first:?}");
}

/// A refused first route: the second starts at once, without waiting the delay.
pub fn refused_first_route(a: &dyn Adapter) {
    let server = TestServer::start(ServerOptions::default());
    // Nothing listens on [::1]:P (the server is v4 only).
    let mut config = Config { attempt_delay: Duration::from_secs(30), ..Config::default() };
    config
        .hosts
        .insert("dual.test".into(), vec!["::1".parse().expect("ip"), "127.0.0.1".parse().expect("ip")]);
    let client = a.client(config);
    let start = Instant::now();
    ok(client.send(Req::get(format!("http://dual.test:{}/hello", server.port()))));
    // With a 30 s delay, only the at-once rule explains finishing at all.
    assert!(start.elapsed() < Duration::from_secs(20));
    let seq: Vec<&'static str> =
        client.events().into_iter().map(|(_, n, _)| n).filter(|n| n.starts_with("connect_")).collect();
    assert_eq!(seq, ["connect_start", "connect_failed", "connect_start", "connect_end"]);
}

/// Idle connections are closed after the keep-alive.
pub fn idle_eviction(a: &dyn Adapter) {
    let server = TestServer::start(ServerOptions::default());
    let client = a.client(Config { idle_timeout: Duration::from_millis(200), ..Config::default() });
    ok(client.send(Req::get(format!("http://127.0.0.1:{}/hello", server.port()))));
    eventually("idle connection closed", Duration::from_secs(10), || client.stats().totals.open == 0);
    assert_eq!(client.stats().closed.get(&CloseReason::IdleTimeout), Some(&1));
}

/// A per-host cap of 2: 10 concurrent calls all succeed over at most 2
/// connections.
pub fn per_host_cap(a: &dyn Adapter) {
    let server = TestServer::start(ServerOptions::default());
    let client = a.client(Config { max_per_host: Some(2), ..Config::default() });
    let url = format!("http://127.0.0.1:{}/sleep/50", server.port());
    for r in client.send_all((0..10).map(|_| Req::get(url.clone())).collect()) {
        ok(r);
    }
    assert!(server.connections() <= 2, "{} connections", server.connections());
    assert_eq!(server.records().len(), 10);
    let s = client.stats();
    assert_eq!((s.totals.waiters, s.totals.in_use), (0, 0));
}

/// An exclusive call's connection is never shared or reused.
pub fn exclusive_acquisition(a: &dyn Adapter) {
    let server = TestServer::start(ServerOptions::default());
    let client = a.client(Config::default());
    let url = format!("http://127.0.0.1:{}/hello", server.port());
    ok(client.send(Req { exclusive: true, ..Req::get(url.clone()) }));
    ok(client.send(Req::get(url)));
    assert_eq!(reuse_pattern(&server), [(0, 0), (1, 0)]);
    assert_eq!(client.stats().closed.get(&CloseReason::Exclusive), Some(&1));
}

/// A POST on a pooled (or shared) connection: its events, in order.
const POOLED_POST: [&str; 12] = [
    "call_start",
    "connection_acquired",
    "request_headers_start",
    "request_headers_end",
    "request_body_start",
    "request_body_end",
    "response_headers_start",
    "response_headers_end",
    "response_body_start",
    "response_body_end",
    "connection_released",
    "call_end",
];

/// Event order for a fresh call and a pooled call (BEHAVIOUR §7).
pub fn event_order(a: &dyn Adapter) {
    let server = TestServer::start(ServerOptions::default());
    let mut config = Config::default();
    config.hosts.insert("local.test".into(), vec!["127.0.0.1".parse().expect("ip")]);
    let client = a.client(config);
    let url = format!("http://local.test:{}/hello", server.port());
    ok(client.send(Req::get(url.clone())));
    let names = |client: &dyn TestClient| -> Vec<&'static str> {
        client.events().into_iter().filter(|e| e.0.is_some()).map(|e| e.1).collect()
    };
    assert_eq!(
        names(client.as_ref()),
        [
            "call_start",
            "proxy_select_start",
            "proxy_select_end",
            "dns_start",
            "dns_end",
            "connect_start",
            "connect_end",
            "connection_acquired",
            "request_headers_start",
            "request_headers_end",
            "response_headers_start",
            "response_headers_end",
            "response_body_start",
            "response_body_end",
            "connection_released",
            "call_end",
        ]
    );
    let acquired: Vec<String> =
        client.events().into_iter().filter(|e| e.1 == "connection_acquired").map(|e| e.2).collect();
    assert!(acquired[0].ends_with("exchange=0"), "a new connection's first exchange: {acquired:?}");
    client.clear_events();
    // A pooled connection, a request with a body.
    let post = Req { method: http::Method::POST, body: b"ping".to_vec(), ..Req::get(url.clone()) };
    ok(client.send(post));
    assert_eq!(names(client.as_ref()), POOLED_POST);
    let acquired: Vec<String> =
        client.events().into_iter().filter(|e| e.1 == "connection_acquired").map(|e| e.2).collect();
    assert!(acquired[0].ends_with("exchange=1"), "the connection's second exchange: {acquired:?}");
    // A connection that will carry nothing more says so before its release,
    // then closes.
    client.clear_events();
    let close = Req { headers: vec![("connection".into(), "close".into())], ..Req::get(url) };
    ok(client.send(close));
    let lifecycle: Vec<&'static str> = client
        .events()
        .into_iter()
        .map(|e| e.1)
        .filter(|n| ["no_new_exchanges", "connection_released", "connection_closed"].contains(n))
        .collect();
    assert_eq!(lifecycle, ["no_new_exchanges", "connection_released", "connection_closed"]);
}

/// The same order over HTTP/2 and TLS (a GET, then a POST on the shared
/// connection).
pub fn event_order_http2(a: &dyn Adapter) {
    let ca = TestCa::new();
    let server = tls_server(&ca, &["a.test"], ServerOptions::default());
    let client = a.client(Config { version: Version::Http2, ..tls_config(&ca, &["a.test"]) });
    let url = format!("https://a.test:{}/hello", server.port());
    let names = |client: &dyn TestClient| -> Vec<&'static str> {
        client.events().into_iter().filter(|e| e.0.is_some()).map(|e| e.1).collect()
    };
    let r = ok(client.send(Req::get(url.clone())));
    assert_eq!(r.version, http::Version::HTTP_2);
    assert_eq!(
        names(client.as_ref()),
        [
            "call_start",
            "proxy_select_start",
            "proxy_select_end",
            "dns_start",
            "dns_end",
            "connect_start",
            "secure_connect_start",
            "secure_connect_end",
            "connect_end",
            "connection_acquired",
            "request_headers_start",
            "request_headers_end",
            "response_headers_start",
            "response_headers_end",
            "response_body_start",
            "response_body_end",
            "connection_released",
            "call_end",
        ]
    );
    client.clear_events();
    let post = Req { method: http::Method::POST, body: b"ping".to_vec(), ..Req::get(url) };
    ok(client.send(post));
    assert_eq!(names(client.as_ref()), POOLED_POST);
}

/// Every event of a call has reached the listener when `send` returns (up to
/// the response head) and when the body's end is handed out (the rest), even
/// when another thread (a connect attempt's, a connection task's) made them:
/// 30 fresh clients, each call's timeline complete at once.
pub fn events_are_heard_before_send_returns(a: &dyn Adapter) {
    let server = TestServer::start(ServerOptions::default());
    let url = format!("http://127.0.0.1:{}/hello", server.port());
    for i in 0..30 {
        let client = a.client(Config::default());
        ok(client.send(Req::get(url.clone())));
        let names: Vec<&'static str> = client.events().into_iter().map(|e| e.1).collect();
        for expected in
            ["connect_start", "connect_end", "response_headers_end", "response_body_end", "call_end"]
        {
            assert!(names.contains(&expected), "run {i}: {expected} missing from {names:?}");
        }
        assert_eq!(names.last(), Some(&"call_end"), "run {i}: {names:?}");
    }
}

/// Bad input ends in a typed error: malformed URL, unknown host, refused port,
/// untrusted certificate, certificate for another name.
pub fn bad_input(a: &dyn Adapter) {
    let ca = TestCa::new();
    let client = a.client(tls_config(&ca, &["a.test", "other.test"]));
    let kind = |r: Result<Resp, (Failure, String)>| r.err().map(|e| e.0);
    assert_eq!(kind(client.send(Req::get("ftp://a.test/"))), Some(Failure::InvalidUrl));
    assert_eq!(kind(client.send(Req::get("http://a.test:99999/"))), Some(Failure::InvalidUrl));
    assert_eq!(kind(client.send(Req::get("http://nowhere.test/"))), Some(Failure::Dns));
    assert_eq!(
        kind(client.send(Req::get(format!("http://127.0.0.1:{}/", refused_port())))),
        Some(Failure::Connect)
    );
    let mut untrusted = ServerOptions::default();
    untrusted.tls.push((vec!["a.test".into()], untrusted_leaf(&["a.test"])));
    let server = TestServer::start(untrusted);
    assert_eq!(
        kind(client.send(Req::get(format!("https://a.test:{}/", server.port())))),
        Some(Failure::TlsCertificate)
    );
    let wrong = tls_server(&ca, &["elsewhere.test"], ServerOptions::default());
    assert_eq!(
        kind(client.send(Req::get(format!("https://other.test:{}/", wrong.port())))),
        Some(Failure::TlsHostname)
    );
    // Nothing leaked by the failures.
    let s = client.stats();
    assert_eq!((s.calls, s.totals.in_use, s.totals.connecting), (0, 0, 0));
}

fn ok_response(body: &str) -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

/// A pooled connection the server dropped as the next request arrived: the GET
/// is retried on a fresh connection, once, with the stale-connection reason.
pub fn stale_connection_retries_a_get(a: &dyn Adapter) {
    use crate::net::Step;
    let raw = RawServer::scripted(vec![
        vec![Step::Respond(ok_response("first")), Step::Close],
        vec![Step::Respond(ok_response("second"))],
    ]);
    let client = a.client(Config::default());
    let url = format!("http://{}/", raw.addr);
    assert_eq!(ok(client.send(Req::get(url.clone()))).body, b"first");
    assert_eq!(ok(client.send(Req::get(url))).body, b"second");
    let retries: Vec<String> =
        client.events().into_iter().filter(|e| e.1 == "retry_decision").map(|e| e.2).collect();
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert!(retries[0].contains("StaleConnection"), "{retries:?}");
    assert_eq!(client.stats().created, 2);
}

/// The same stale connection under a POST: the request may have been
/// processed, so it is never replayed; the error says it may have been sent.
pub fn stale_connection_never_replays_a_post(a: &dyn Adapter) {
    use crate::net::Step;
    let raw = RawServer::scripted(vec![vec![Step::Respond(ok_response("first")), Step::Close]]);
    let client = a.client(Config::default());
    let url = format!("http://{}/", raw.addr);
    ok(client.send(Req::get(url.clone())));
    let post = Req { method: http::Method::POST, body: b"once".to_vec(), ..Req::get(url) };
    let err = client.send(post).expect_err("a POST on a dead connection fails");
    assert_eq!(err.0, Failure::Exchange(true), "{err:?}");
    let s = client.stats();
    assert_eq!((s.calls, s.totals.in_use, s.created), (0, 0, 1), "{s:?}");
}

/// A server that closed an idle connection (after its response) costs the
/// next call nothing: it succeeds on a new connection, sent once.
pub fn server_closed_idle_connection(a: &dyn Adapter) {
    let raw = RawServer::start(vec![
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst".to_vec(),
        b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond".to_vec(),
    ]);
    let client = a.client(Config::default());
    let url = format!("http://{}/", raw.addr);
    assert_eq!(ok(client.send(Req::get(url.clone()))).body, b"first");
    // The server closes the connection after its first answer. Whether the
    // client learns of it before the next call (watcher, probe) or only when
    // that call fails before any byte is answered, the call must succeed on a
    // new connection: the pause only makes the first path the usual one.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(ok(client.send(Req::get(url))).body, b"second");
    assert_eq!(client.stats().created, 2);
    let s = client.stats();
    assert_eq!((s.calls, s.totals.in_use), (0, 0), "{s:?}");
}

/// The idle sweep is the core's (`PoolAction::Probe` every second), on every
/// adapter: a connection the server closes while it sits idle is seen closed,
/// and counted, with no call to stumble on it.
pub fn idle_sweep_sees_a_server_close(a: &dyn Adapter) {
    let raw = RawServer::start(vec![b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst".to_vec()]);
    let client = a.client(Config::default());
    assert_eq!(ok(client.send(Req::get(format!("http://{}/", raw.addr)))).body, b"first");
    eventually("the sweep to see the server's close", Duration::from_secs(5), || {
        client.stats().closed.get(&CloseReason::ServerClose) == Some(&1)
    });
    let s = client.stats();
    assert_eq!((s.totals.open, s.totals.idle, s.created), (0, 0, 1), "{s:?}");
}

/// The call's timeout ends a call whose server stalls, and frees everything.
pub fn call_timeout(a: &dyn Adapter) {
    let server = TestServer::start(ServerOptions::default());
    let client = a.client(Config { call_timeout: Some(Duration::from_millis(200)), ..Config::default() });
    // The server answers after 5 s; only the call's timeout can make this a Timeout.
    let err = client.send(Req::get(format!("http://127.0.0.1:{}/sleep/5000", server.port())));
    assert_eq!(err.as_ref().map_err(|e| e.0).err(), Some(Failure::Timeout), "{err:?}");
    let s = client.stats();
    assert_eq!((s.totals.in_use, s.calls, s.totals.connecting), (0, 0, 0), "{s:?}");
}

/// HEAD and 204 responses have no body: the connection is released at once
/// and reused; a 100 KB POST body round-trips.
pub fn bodiless_responses_and_large_bodies(a: &dyn Adapter) {
    let server = TestServer::start(ServerOptions::default());
    let client = a.client(Config::default());
    let base = format!("http://127.0.0.1:{}", server.port());
    let head = ok(client.send(Req { method: http::Method::HEAD, ..Req::get(format!("{base}/bytes/100")) }));
    assert!(head.body.is_empty());
    assert_eq!(ok(client.send(Req::get(format!("{base}/status/204")))).status, 204);
    let payload: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let echoed = ok(client.send(Req {
        method: http::Method::POST,
        body: payload.clone(),
        ..Req::get(format!("{base}/echo"))
    }));
    assert!(echoed.body == payload, "the echoed body differs");
    assert_eq!(server.connections(), 1, "every call reused the one connection");
}

fn proxy_origins(ca: &TestCa) -> (TestServer, TestServer) {
    let mut options = ServerOptions::default();
    options.tls.push((vec!["origin.test".into()], ca.leaf(&["origin.test"])));
    (TestServer::start(options), TestServer::start(ServerOptions::default()))
}

fn proxy_hosts() -> BTreeMap<String, IpAddr> {
    BTreeMap::from([("origin.test".to_owned(), "127.0.0.1".parse().expect("ip"))])
}

/// Through an HTTP proxy: `CONNECT` to the origin's name for https,
/// absolute-form forwarding for http; the client never resolves the origin.
pub fn http_proxy(a: &dyn Adapter) {
    use crate::proxy::TestProxy;
    let ca = TestCa::new();
    let (tls_origin, plain_origin) = proxy_origins(&ca);
    let proxy = TestProxy::http(proxy_hosts());
    let config = Config {
        root: Some(ca.cert.clone()),
        proxies: vec![switchyard_core::Proxy::http("127.0.0.1", u32::from(proxy.addr.port())).expect("proxy")],
        ..Config::default()
    };
    let client = a.client(config);
    for url in [
        format!("https://origin.test:{}/hello", tls_origin.port()),
        format!("http://origin.test:{}/hello", plain_origin.port()),
    ] {
        assert_eq!(ok(client.send(Req::get(url.clone()))).body, b"hello", "{url}");
    }
    let targets = proxy.targets();
    assert_eq!(
        targets[0],
        format!("origin.test:{}", tls_origin.port()),
        "a CONNECT tunnel to the origin's name"
    );
    assert_eq!(
        targets[1],
        format!("forward origin.test:{}", plain_origin.port()),
        "absolute-form forwarding"
    );
    assert_eq!(tls_origin.records()[0].sni.as_deref(), Some("origin.test"));
}

/// Proxies [P1, P2] for the route-memory tests: P1 accepts connections and
/// never reads or answers (its streams are held until the returned receiver
/// is dropped), P2 is a working HTTP proxy to the plain origin returned.
fn silent_then_working_proxy(
) -> (crate::proxy::TestProxy, TestServer, std::sync::mpsc::Receiver<std::net::TcpStream>, Config) {
    let ca = TestCa::new();
    let (_tls_origin, plain_origin) = proxy_origins(&ca);
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent_port = silent.local_addr().expect("addr").port();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in silent.incoming().flatten() {
            if held_tx.send(stream).is_err() {
                return;
            }
        }
    });
    let p2 = crate::proxy::TestProxy::http(proxy_hosts());
    let proxy = |port: u16| switchyard_core::Proxy::http("127.0.0.1", u32::from(port)).expect("proxy");
    let config = Config { proxies: vec![proxy(silent_port), proxy(p2.addr.port())], ..Config::default() };
    (p2, plain_origin, held_rx, config)
}

/// A read timeout marks the route (BEHAVIOUR §6): with proxies [P1, P2], P1
/// accepting connections and never answering, the first call times out, and
/// the next one starts with P2 (its first connect), not with P1 again.
pub fn a_timeout_marks_the_route(a: &dyn Adapter) {
    let (p2, plain_origin, held_rx, config) = silent_then_working_proxy();
    let config = Config { read_timeout: Some(Duration::from_millis(300)), ..config };
    let client = a.client(config);
    let url = format!("http://origin.test:{}/hello", plain_origin.port());
    let (kind, message) = client.send(Req::get(url.clone())).expect_err("P1 never answers");
    assert_eq!(kind, Failure::Timeout, "{message}");
    client.clear_events();
    assert_eq!(ok(client.send(Req::get(url))).body, b"hello");
    let first_connect = client.events().into_iter().find(|e| e.1 == "connect_start").map(|e| e.2);
    let first = first_connect.expect("the second call connects");
    assert!(first.contains(&format!(":{}", p2.addr.port())), "the second call starts with P2: {first}");
    assert_eq!(p2.targets(), [format!("forward origin.test:{}", plain_origin.port())]);
    drop(held_rx);
}

/// The call's deadline passing mid-exchange is a failure the pool hears
/// (BEHAVIOUR §6), as a read timeout is: with proxies [P1, P2], P1 accepting
/// connections and never answering, the first call times out waiting for its
/// head, its connection through P1 is closed (not kept as if the call had only
/// been cancelled), and the next call starts with P2.
pub fn a_call_deadline_marks_the_route(a: &dyn Adapter) {
    let (p2, plain_origin, held_rx, config) = silent_then_working_proxy();
    let config = Config { call_timeout: Some(Duration::from_millis(300)), ..config };
    let client = a.client(config);
    let url = format!("http://origin.test:{}/hello", plain_origin.port());
    let (kind, message) = client.send(Req::get(url.clone())).expect_err("P1 never answers");
    assert_eq!(kind, Failure::Timeout, "{message}");
    let events = client.events();
    let decided = events.iter().find(|e| e.1 == "retry_decision").map(|e| e.2.clone());
    assert!(decided.is_some(), "the pool heard the failure: {events:?}");
    let s = client.stats();
    assert_eq!(s.closed.get(&CloseReason::Failure), Some(&1), "its connection is closed as failed: {s:?}");
    assert_eq!(s.closed.get(&CloseReason::UnreadBody), None, "not judged as a cancelled call: {s:?}");
    client.clear_events();
    assert_eq!(ok(client.send(Req::get(url))).body, b"hello");
    let first_connect = client.events().into_iter().find(|e| e.1 == "connect_start").map(|e| e.2);
    let first = first_connect.expect("the second call connects");
    assert!(first.contains(&format!(":{}", p2.addr.port())), "the second call starts with P2: {first}");
    drop(held_rx);
}

/// The same over HTTP/2: the call's deadline passing on a stream is a
/// failure the pool hears, and the connection stays (a slow stream is not a
/// dead connection; the PING decides about that): the next call shares it.
pub fn a_call_deadline_on_http2_keeps_the_connection(a: &dyn Adapter) {
    let ca = TestCa::new();
    let server = tls_server(&ca, &["a.test"], ServerOptions::default());
    let config = Config {
        version: Version::Http2,
        call_timeout: Some(Duration::from_millis(300)),
        ..tls_config(&ca, &["a.test"])
    };
    let client = a.client(config);
    let base = format!("https://a.test:{}", server.port());
    let (kind, message) = client.send(Req::get(format!("{base}/sleep/5000"))).expect_err("the stream stalls");
    assert_eq!(kind, Failure::Timeout, "{message}");
    let events = client.events();
    assert!(events.iter().any(|e| e.1 == "retry_decision"), "the pool heard the failure: {events:?}");
    let r = ok(client.send(Req::get(format!("{base}/hello"))));
    assert_eq!((r.version, r.body.as_slice()), (http::Version::HTTP_2, &b"hello"[..]));
    let s = client.stats();
    assert_eq!((s.created, s.reused), (1, 1), "the next call shares the connection: {s:?}");
    assert!(s.closed.is_empty(), "nothing closed: {s:?}");
}

/// An HTTP/2 server and client over h2c, then over TLS, with `config`'s
/// other settings: the server, its base URL, the client's config.
fn http2_origin(ca: &TestCa, tls: bool, config: Config) -> (TestServer, String, Config) {
    if tls {
        let server = tls_server(ca, &["a.test"], ServerOptions::default());
        let base = format!("https://a.test:{}", server.port());
        let c = tls_config(ca, &["a.test"]);
        (server, base, Config { version: Version::Http2, root: c.root, hosts: c.hosts, ..config })
    } else {
        let server = TestServer::start(ServerOptions::default());
        let base = format!("http://127.0.0.1:{}", server.port());
        (server, base, Config { version: Version::Http2, ..config })
    }
}

/// A response body nobody reads holds only its own stream's window, never
/// the connection's: with windows of 256 KiB per stream and 512 KiB per
/// connection, three 1 MiB bodies left unread would hold the whole
/// connection window twice over, yet a fourth call on the same connection
/// gets its answer (over h2c and TLS).
pub fn stalled_readers_do_not_stall_http2(a: &dyn Adapter) {
    let ca = TestCa::new();
    for tls in [false, true] {
        let base_config = Config { http2_windows: Some((256 * 1024, 512 * 1024)), ..Config::default() };
        let (server, base, config) = http2_origin(&ca, tls, base_config);
        let client = a.client(config);
        let mut held = Vec::new();
        for _ in 0..3 {
            let (status, body) =
                client.hold(Req::get(format!("{base}/bytes/1048576"))).expect("the head arrives");
            assert_eq!(status, 200, "tls {tls}");
            held.push(body);
        }
        let r = ok(client.send(Req::get(format!("{base}/hello"))));
        assert_eq!((r.version, r.body.as_slice()), (http::Version::HTTP_2, &b"hello"[..]), "tls {tls}");
        assert_eq!(server.connections(), 1, "tls {tls}: one connection carried all four calls");
        drop(held);
    }
}

/// Uploads larger than the server's windows, streamed (a reader of unknown
/// length) and buffered, go out as the windows open and come back whole
/// (`/echo`, 4 MiB each way, over h2c and TLS); a streamed upload that ends
/// before its first byte still ends its request.
pub fn uploads_larger_than_the_windows_http2(a: &dyn Adapter) {
    let ca = TestCa::new();
    for tls in [false, true] {
        let (server, base, config) = http2_origin(&ca, tls, Config::default());
        let client = a.client(config);
        let payload: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
        for streamed in [true, false] {
            let upload = Req {
                method: http::Method::POST,
                body: payload.clone(),
                streamed,
                ..Req::get(format!("{base}/echo"))
            };
            let r = ok(client.send(upload));
            assert_eq!(r.version, http::Version::HTTP_2);
            assert!(
                r.body == payload,
                "tls {tls}, streamed {streamed}: the echo differs ({} bytes)",
                r.body.len()
            );
        }
        // A stream that ends before its first byte: the request still ends.
        let empty = Req { method: http::Method::POST, streamed: true, ..Req::get(format!("{base}/echo")) };
        assert_eq!(ok(client.send(empty)).body, b"", "tls {tls}: an empty streamed upload");
        assert_eq!(server.connections(), 1, "tls {tls}");
    }
}

/// An HTTP/2 server that answers an upload before reading it (413, 401,
/// 403) and ends its side: that answer is the caller's response — not a
/// failed upload — and the connection carries the next call (h2c and TLS).
pub fn an_early_answer_wins_http2(a: &dyn Adapter) {
    let ca = TestCa::new();
    for tls in [false, true] {
        let (server, base, config) = http2_origin(&ca, tls, Config::default());
        let client = a.client(config);
        for status in [413u16, 401, 403] {
            let upload = Req {
                method: http::Method::POST,
                body: vec![b'u'; 4 << 20],
                ..Req::get(format!("{base}/early/{status}"))
            };
            let r = ok(client.send(upload));
            assert_eq!(r.status, status, "tls {tls}");
            assert_eq!(r.body, b"refused before reading", "tls {tls}");
        }
        assert_eq!(ok(client.send(Req::get(format!("{base}/hello")))).body, b"hello", "tls {tls}");
        assert_eq!(server.connections(), 1, "tls {tls}: the connection stayed");
    }
}

/// Through a SOCKS5 proxy. `socks5h://`: the proxy resolves the origin's
/// name; an origin it cannot reach is a typed proxy error naming it.
/// `socks5://`: the client resolves the name (its resolver, not the proxy's)
/// and asks for one address per attempt — an address the proxy cannot reach
/// moves the race to the next one; a name the client cannot resolve is a DNS
/// error and the proxy never hears of it.
pub fn socks5_proxy(a: &dyn Adapter) {
    use crate::proxy::TestProxy;
    let ca = TestCa::new();
    let (tls_origin, plain_origin) = proxy_origins(&ca);

    let proxy = TestProxy::socks5(BTreeMap::new()); // resolves nothing itself
    let local = switchyard_core::Proxy::socks5("127.0.0.1", u32::from(proxy.addr.port())).expect("proxy");
    let both: Vec<IpAddr> = vec!["::1".parse().expect("ip"), "127.0.0.1".parse().expect("ip")];
    let config = Config {
        root: Some(ca.cert.clone()),
        proxies: vec![local],
        hosts: BTreeMap::from([("origin.test".to_owned(), both)]),
        ..Config::default()
    };
    let client = a.client(config);
    for url in [
        format!("http://origin.test:{}/hello", plain_origin.port()),
        format!("https://origin.test:{}/hello", tls_origin.port()),
    ] {
        assert_eq!(ok(client.send(Req::get(url.clone()))).body, b"hello", "{url}");
    }
    // The origins listen on IPv4 only: [::1] through the proxy was refused
    // first (IPv6 goes first), then 127.0.0.1 carried each call.
    assert_eq!(
        proxy.targets(),
        [format!("127.0.0.1:{}", plain_origin.port()), format!("127.0.0.1:{}", tls_origin.port())]
    );
    let events = client.events();
    assert!(
        events.iter().any(|(_, n, d)| n.contains("failed") && d.contains("at ::1 via proxy")),
        "the [::1] attempt went through the proxy and failed: {events:?}"
    );
    // Only [::1] known: the proxy's refusal names the address it was asked for.
    let only_v6 = BTreeMap::from([("origin.test".to_owned(), vec!["::1".parse().expect("ip")])]);
    let proxies =
        vec![switchyard_core::Proxy::socks5("127.0.0.1", u32::from(proxy.addr.port())).expect("proxy")];
    let v6_client = a.client(Config { proxies, hosts: only_v6, ..Config::default() });
    let (_, msg) = v6_client
        .send(Req::get(format!("http://origin.test:{}/hello", plain_origin.port())))
        .expect_err("the proxy cannot reach [::1]");
    let asked = format!("could not reach [::1]:{} (origin.test)", plain_origin.port());
    assert!(msg.contains(&asked), "{msg}");
    let (kind, msg) = client.send(Req::get("http://nowhere.test:80/")).expect_err("not resolvable here");
    assert_eq!(kind, Failure::Dns, "{msg}");
    assert_eq!(proxy.targets().len(), 2, "the proxy never heard of nowhere.test");

    let proxy = TestProxy::socks5(proxy_hosts());
    let config = Config {
        root: Some(ca.cert.clone()),
        proxies: vec![
            switchyard_core::Proxy::socks5h("127.0.0.1", u32::from(proxy.addr.port())).expect("proxy")
        ],
        ..Config::default()
    };
    let client = a.client(config);
    for url in [
        format!("http://origin.test:{}/hello", plain_origin.port()),
        format!("https://origin.test:{}/hello", tls_origin.port()),
    ] {
        assert_eq!(ok(client.send(Req::get(url.clone()))).body, b"hello", "{url}");
    }
    let err = client.send(Req::get("http://nowhere.test:80/")).expect_err("unreachable origin");
    assert!(err.1.contains("SOCKS5 proxy could not reach nowhere.test:80"), "{err:?}");
    assert_eq!(
        proxy.targets(),
        [format!("origin.test:{}", plain_origin.port()), format!("origin.test:{}", tls_origin.port())]
    );
}

/// Nothing secret in a client's events or in an error text.
fn no_secret(client: &dyn TestClient, secret: &str, texts: &[&str]) {
    for e in client.events() {
        assert!(!e.2.contains(secret), "an event shows a proxy credential: {e:?}");
    }
    for t in texts {
        assert!(!t.contains(secret), "an error shows a proxy credential: {t}");
    }
}

/// Proxy credentials (issue 19): Basic `Proxy-Authorization` on `CONNECT`
/// (https) and on absolute-form requests (http), from a proxy URL read from
/// the environment; a proxy asking for credentials the client does not have,
/// or refusing the ones it has, is a typed error naming the proxy — on
/// `CONNECT` and on absolute form alike; credentials never show in events or
/// errors.
pub fn proxy_credentials(a: &dyn Adapter) {
    use crate::proxy::TestProxy;
    let ca = TestCa::new();
    let (tls_origin, plain_origin) = proxy_origins(&ca);
    let proxy = TestProxy::http_with_auth(proxy_hosts(), "ann", "s3cr3t-pw");
    let port = proxy.addr.port();
    let env = |userinfo: &str| {
        let url = format!("http://{userinfo}127.0.0.1:{port}");
        Some(vec![("http_proxy".to_owned(), url.clone()), ("https_proxy".to_owned(), url)])
    };
    let urls = [
        format!("https://origin.test:{}/hello", tls_origin.port()),
        format!("http://origin.test:{}/hello", plain_origin.port()),
    ];
    let client = a.client(Config {
        root: Some(ca.cert.clone()),
        proxy_env: env("ann:s3cr3t-pw@"),
        ..Config::default()
    });
    for url in &urls {
        assert_eq!(ok(client.send(Req::get(url.clone()))).body, b"hello", "{url}");
    }
    let basic = switchyard_core::ProxyCredentials::new("ann", "s3cr3t-pw").basic();
    assert_eq!(
        proxy.offered(),
        [basic.clone(), basic.clone()],
        "CONNECT, then absolute form, with Basic credentials"
    );
    no_secret(&*client, "s3cr3t-pw", &[]);
    no_secret(&*client, &basic, &[]);

    for (userinfo, refused) in [("", false), ("ann:wrong-pw@", true)] {
        let client =
            a.client(Config { root: Some(ca.cert.clone()), proxy_env: env(userinfo), ..Config::default() });
        for url in &urls {
            let (kind, text) = client.send(Req::get(url.clone())).expect_err("the proxy wants credentials");
            let want = if refused { "refused the credentials" } else { "requires authentication" };
            assert!(
                text.contains(want) && text.contains(&format!("http://127.0.0.1:{port}")),
                "{url}: {text}"
            );
            assert_ne!(kind, Failure::Exchange(true), "{text}");
            no_secret(&*client, "wrong-pw", &[&text]);
        }
    }
}

/// SOCKS5 with username/password (RFC 1929): accepted with the right ones; a
/// typed error naming the proxy without them or with wrong ones.
pub fn socks5_credentials(a: &dyn Adapter) {
    use crate::proxy::TestProxy;
    let ca = TestCa::new();
    let (tls_origin, plain_origin) = proxy_origins(&ca);
    let proxy = TestProxy::socks5_with_auth(proxy_hosts(), "bob", "hunter2-pw");
    let at = |creds: Option<(&str, &str)>| {
        let p = switchyard_core::Proxy::socks5h("127.0.0.1", u32::from(proxy.addr.port())).expect("proxy");
        match creds {
            Some((u, pw)) => p.with_credentials(switchyard_core::ProxyCredentials::new(u, pw)),
            None => p,
        }
    };
    let client = a.client(Config {
        root: Some(ca.cert.clone()),
        proxies: vec![at(Some(("bob", "hunter2-pw")))],
        ..Config::default()
    });
    for url in [
        format!("http://origin.test:{}/hello", plain_origin.port()),
        format!("https://origin.test:{}/hello", tls_origin.port()),
    ] {
        assert_eq!(ok(client.send(Req::get(url.clone()))).body, b"hello", "{url}");
    }
    assert_eq!(proxy.offered(), ["bob:hunter2-pw", "bob:hunter2-pw"]);
    no_secret(&*client, "hunter2-pw", &[]);
    for (creds, want) in
        [(None, "requires authentication"), (Some(("bob", "nope-pw")), "refused the credentials")]
    {
        let client = a.client(Config { proxies: vec![at(creds)], ..Config::default() });
        let url = format!("http://origin.test:{}/hello", plain_origin.port());
        let (kind, text) = client.send(Req::get(url)).expect_err("refused");
        assert_eq!(kind, Failure::Connect, "{text}");
        assert!(text.contains(want) && text.contains("socks5h://127.0.0.1"), "{text}");
        no_secret(&*client, "nope-pw", &[&text]);
    }
}

/// Proxies from the environment, per URL (issue 19): `no_proxy` sends its
/// hosts direct while others go through the proxy; a selector's list falls
/// back to the next proxy when the first cannot be reached.
pub fn proxies_from_the_environment(a: &dyn Adapter) {
    use crate::proxy::TestProxy;
    let ca = TestCa::new();
    let (_tls_origin, plain_origin) = proxy_origins(&ca);
    let proxy = TestProxy::http(proxy_hosts());
    let mut hosts = Config::default().hosts;
    hosts.insert("direct.test".into(), vec!["127.0.0.1".parse().expect("ip")]);
    let vars = vec![
        ("http_proxy".to_owned(), format!("127.0.0.1:{}", proxy.addr.port())),
        ("no_proxy".to_owned(), "direct.test, 10.0.0.0/8".to_owned()),
    ];
    let client = a.client(Config { hosts, proxy_env: Some(vars), ..Config::default() });
    assert_eq!(
        ok(client.send(Req::get(format!("http://direct.test:{}/hello", plain_origin.port())))).body,
        b"hello"
    );
    assert!(proxy.targets().is_empty(), "no_proxy: direct");
    assert_eq!(
        ok(client.send(Req::get(format!("http://origin.test:{}/hello", plain_origin.port())))).body,
        b"hello"
    );
    assert_eq!(
        proxy.targets(),
        [format!("forward origin.test:{}", plain_origin.port())],
        "others: the proxy"
    );
    // Each call's events say which proxy was chosen, and why.
    let reasons: Vec<String> =
        client.events().into_iter().filter(|(_, n, _)| *n == "proxy_select_end").map(|(_, _, d)| d).collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(
        reasons[0].starts_with("DIRECT") && reasons[0].ends_with("(no_proxy matches direct.test)"),
        "{reasons:?}"
    );
    assert!(reasons[1].contains(&format!("127.0.0.1:{}", proxy.addr.port())), "{reasons:?}");
    assert!(reasons[1].ends_with("(from http_proxy)"), "{reasons:?}");

    // Fallback: the first proxy's port is closed; the second carries the call.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead = closed.local_addr().expect("addr").port();
    drop(closed);
    let p2 = TestProxy::http(proxy_hosts());
    let vars = vec![("http_proxy".to_owned(), format!("http://127.0.0.1:{dead}"))];
    let mut config = Config { proxy_env: Some(vars), ..Config::default() };
    // The environment names one proxy; a list with a fallback is a selector's
    // (or `proxies`) job: both go through the same route planner.
    config.proxy_env = None;
    config.proxies = vec![
        switchyard_core::Proxy::http("127.0.0.1", u32::from(dead)).expect("proxy"),
        switchyard_core::Proxy::http("127.0.0.1", u32::from(p2.addr.port())).expect("proxy"),
    ];
    let client = a.client(config);
    assert_eq!(
        ok(client.send(Req::get(format!("http://origin.test:{}/hello", plain_origin.port())))).body,
        b"hello"
    );
    assert_eq!(p2.targets().len(), 1, "the second proxy carried it");
}

/// A fresh path for a Unix-domain socket in the temporary directory (short:
/// `sun_path` holds about 100 bytes).
#[must_use]
pub fn unix_socket_path(tag: &str) -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    std::env::temp_dir().join(format!("sy-{}-{tag}-{n}.sock", std::process::id()))
}

/// Every adapter: a client whose `unix_socket` is set sends every request to
/// that socket — no DNS (the hermetic resolver knows no name), no proxy (a
/// dead one is configured) — with the URL's host in `Host`, pooled (two calls,
/// one connection; events name the path); `https://` runs TLS over the socket
/// with the URL's host as SNI; a path with nothing listening is a connect
/// error naming the path.
pub fn unix_socket(a: &dyn Adapter) {
    let path = unix_socket_path("plain");
    let server = TestServer::start(ServerOptions { unix: Some(path.clone()), ..ServerOptions::default() });
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_port = dead.local_addr().expect("addr").port();
    drop(dead);
    let client = a.client(Config {
        unix_socket: Some(path.clone()),
        proxies: vec![switchyard_core::Proxy::http("127.0.0.1", u32::from(dead_port)).expect("proxy")],
        ..Config::default()
    });
    for _ in 0..2 {
        let r = ok(client.send(Req::get("http://docker.test/hello")));
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]));
    }
    assert_eq!(server.connections(), 1, "two calls on one pooled Unix-socket connection");
    let records = server.records();
    assert_eq!(records[0].authority.as_deref(), Some("docker.test"), "the URL's host goes in Host");
    let events = client.events();
    assert!(
        events
            .iter()
            .any(|(_, n, d)| *n == "connect_start" && d.contains(&format!("via unix:{}", path.display()))),
        "{events:?}"
    );
    assert!(!events.iter().any(|(_, n, _)| n.starts_with("dns_")), "no DNS for a Unix socket: {events:?}");

    // TLS over the socket, SNI from the URL.
    let ca = TestCa::new();
    let tls_path = unix_socket_path("tls");
    let mut options = ServerOptions { unix: Some(tls_path.clone()), ..ServerOptions::default() };
    options.tls.push((vec!["sidecar.test".into()], ca.leaf(&["sidecar.test"])));
    let tls = TestServer::start(options);
    let client = a.client(Config {
        unix_socket: Some(tls_path.clone()),
        root: Some(ca.cert.clone()),
        ..Config::default()
    });
    assert_eq!(ok(client.send(Req::get("https://sidecar.test/hello"))).body, b"hello");
    assert_eq!(tls.records()[0].sni.as_deref(), Some("sidecar.test"));

    // Nothing listening there.
    let missing = unix_socket_path("missing");
    let client = a.client(Config { unix_socket: Some(missing.clone()), ..Config::default() });
    let (kind, msg) = client.send(Req::get("http://docker.test/hello")).expect_err("no socket");
    assert_eq!(kind, Failure::Connect, "{msg}");
    assert!(msg.contains(&missing.display().to_string()), "the error names the path: {msg}");
    for p in [path, tls_path] {
        let _ = std::fs::remove_file(p);
    }
}

/// HTTP/2 adapters: prior knowledge over a Unix socket multiplexes calls on
/// one connection.
pub fn unix_socket_http2(a: &dyn Adapter) {
    let path = unix_socket_path("h2c");
    let server = TestServer::start(ServerOptions {
        unix: Some(path.clone()),
        http2_only: true,
        ..ServerOptions::default()
    });
    let client =
        a.client(Config { unix_socket: Some(path.clone()), version: Version::Http2, ..Config::default() });
    for r in client.send_all(vec![Req::get("http://h2.test/hello"); 4]) {
        let r = ok(r);
        assert_eq!((r.version, r.body.as_slice()), (http::Version::HTTP_2, &b"hello"[..]));
    }
    assert_eq!(server.connections(), 1, "four calls, one HTTP/2 connection over the socket");
    let _ = std::fs::remove_file(path);
}

/// Every adapter: `local_address` binds each connection's source address
/// (the server sees 127.0.0.2); a route of the other family fails as a
/// typed connect error naming both addresses; `interface` binds to `lo`
/// (as root; otherwise the refusal names the interface) and an unknown
/// interface fails naming it; TCP keep-alive leaves calls working.
pub fn socket_options(a: &dyn Adapter) {
    use switchyard_common::transport::{TcpKeepalive, TcpOptions};
    let lo2: IpAddr = "127.0.0.2".parse().expect("ip");
    let server = crate::transport::PeerRecorder::start("127.0.0.1".parse().expect("ip"));
    let url = format!("http://127.0.0.1:{}/", server.addr.port());
    let keepalive = TcpKeepalive {
        idle: Duration::from_secs(30),
        interval: Some(Duration::from_secs(5)),
        retries: Some(3),
    };
    let client = a.client(Config {
        tcp: TcpOptions { local_address: Some(lo2), keepalive: Some(keepalive), ..TcpOptions::default() },
        ..Config::default()
    });
    assert_eq!(ok(client.send(Req::get(url.clone()))).body, b"ok");
    let peers = server.peers();
    assert_eq!(peers.len(), 1);
    assert_eq!(peers[0].ip(), lo2, "the connection came from the local address");

    let v6 = std::net::TcpListener::bind("[::1]:0");
    if let Ok(v6) = v6 {
        let target = format!("http://[::1]:{}/", v6.local_addr().expect("addr").port());
        let (kind, msg) = client.send(Req::get(target)).expect_err("IPv4 source, IPv6 destination");
        assert_eq!(kind, Failure::Connect, "{msg}");
        assert!(msg.contains("local address 127.0.0.2") && msg.contains("another address family"), "{msg}");
    }

    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let on = |name: &str| {
        let tcp = TcpOptions { interface: Some(name.into()), ..TcpOptions::default() };
        a.client(Config { tcp, ..Config::default() }).send(Req::get(url.clone()))
    };
    match on("lo") {
        Ok(r) => assert!(root && r.body == b"ok", "bound to lo"),
        Err((kind, msg)) => {
            assert!(!root, "root may bind to lo: {msg}");
            assert!(kind == Failure::Connect && msg.contains("interface \"lo\""), "{msg}");
        }
    }
    let (kind, msg) = on("nope0").expect_err("no such interface");
    assert_eq!(kind, Failure::Connect, "{msg}");
    assert!(msg.contains("interface \"nope0\""), "{msg}");
}

/// Instantiates every scenario as a `#[test]` for an adapter expression.
#[macro_export]
macro_rules! conformance_suite {
    ($adapter:expr) => {
        $crate::conformance_suite!(@tests $adapter;
            sequential_reuse, connection_close, close_delimited_body, http2_multiplexing,
            http2_stream_limit, coalescing, happy_eyeballs_hanging_first_route, refused_first_route,
            idle_eviction, per_host_cap, exclusive_acquisition, event_order, bad_input,
            stale_connection_retries_a_get, stale_connection_never_replays_a_post,
            server_closed_idle_connection, idle_sweep_sees_a_server_close, call_timeout,
            bodiless_responses_and_large_bodies, http_proxy, socks5_proxy,
            misdirected_on_a_coalesced_connection, prior_knowledge_to_an_http1_server_fails_one_way,
            events_are_heard_before_send_returns, a_timeout_marks_the_route, a_call_deadline_marks_the_route, event_order_http2,
            a_call_deadline_on_http2_keeps_the_connection,
            proxy_credentials, socks5_credentials, proxies_from_the_environment, coalescing_onto_an_ip_san,
            dns_cache, per_family_blocking_resolver, unix_socket, unix_socket_http2, socket_options,
            retry_budget_bounds_a_retry_storm, retry_budget_bounds_an_http2_retry_storm,
            dns_change_drains_pooled_connections, rotating_dns_answers_keep_one_connection,
            dropped_calls_leave_nothing_behind_http1, dropped_calls_leave_nothing_behind_http2,
            many_hosts_keep_bounded_state, http2_keepalive_ping_finds_a_dead_peer,
            shutdown_under_load_loses_no_call, server_errors_eject_a_route, server_errors_eject_an_http2_route,
            stalled_readers_do_not_stall_http2, an_early_answer_wins_http2,
            uploads_larger_than_the_windows_http2, shutdown_ends_http2_calls_as_shutdown);
    };
    // An adapter without HTTP/2: its scenarios are listed as ignored, with the reason.
    ($adapter:expr, without_http2) => {
        $crate::conformance_suite!(@tests $adapter;
            sequential_reuse, connection_close, close_delimited_body,
            happy_eyeballs_hanging_first_route, refused_first_route,
            idle_eviction, per_host_cap, exclusive_acquisition, event_order, bad_input,
            stale_connection_retries_a_get, stale_connection_never_replays_a_post,
            server_closed_idle_connection, idle_sweep_sees_a_server_close, call_timeout,
            bodiless_responses_and_large_bodies, http_proxy, socks5_proxy,
            events_are_heard_before_send_returns, a_timeout_marks_the_route, a_call_deadline_marks_the_route,
            proxy_credentials, socks5_credentials, proxies_from_the_environment, dns_cache,
            per_family_blocking_resolver, unix_socket, socket_options, retry_budget_bounds_a_retry_storm,
            dns_change_drains_pooled_connections, rotating_dns_answers_keep_one_connection,
            dropped_calls_leave_nothing_behind_http1, many_hosts_keep_bounded_state,
            shutdown_under_load_loses_no_call,
            server_errors_eject_a_route);
        $crate::conformance_suite!(@skipped $adapter; http2_multiplexing, http2_stream_limit, coalescing,
            coalescing_onto_an_ip_san,
            misdirected_on_a_coalesced_connection, prior_knowledge_to_an_http1_server_fails_one_way,
            event_order_http2, a_call_deadline_on_http2_keeps_the_connection, unix_socket_http2,
            retry_budget_bounds_an_http2_retry_storm, http2_keepalive_ping_finds_a_dead_peer,
            server_errors_eject_an_http2_route, dropped_calls_leave_nothing_behind_http2,
            stalled_readers_do_not_stall_http2, an_early_answer_wins_http2,
            uploads_larger_than_the_windows_http2, shutdown_ends_http2_calls_as_shutdown);
    };
    (@tests $adapter:expr; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                $crate::conformance::$name(&$adapter);
            }
        )*
    };
    (@skipped $adapter:expr; $($name:ident),*) => {
        $(
            #[test]
            #[ignore = "skipped: this adapter has no HTTP/2 (coalescing is HTTP/2 only)"]
            fn $name() {
                $crate::conformance::$name(&$adapter);
            }
        )*
    };
}
