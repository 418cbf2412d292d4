//! Resilience policies seen from outside (issue #34): retry budgets, DNS
//! change drains, HTTP/2 keep-alive PINGs, outlier ejection, graceful
//! shutdown. Each scenario counts what the server saw, never how long
//! anything took.

use std::time::Duration;

use switchyard_core::RetryBudget;

use crate::conformance::{Adapter, Config, Failure, Req, Version};
use crate::fault::{Fault, FaultOptions, FaultServer, Reply};
use crate::net::{RawServer, Step};

/// A fifth of the calls, no floor: the bound the scenarios count against.
fn fifth() -> RetryBudget {
    RetryBudget { ratio: 0.2, min_per_second: 0, window: Duration::from_secs(60) }
}

/// Every call either ends well or fails typed; the budget's refusals say so.
fn tally(results: &[Result<crate::conformance::Resp, (Failure, String)>]) -> (usize, usize) {
    let (mut ok, mut over_budget) = (0, 0);
    for r in results {
        match r {
            Ok(r) => {
                assert_eq!(r.body, b"ok");
                ok += 1;
            }
            Err((Failure::Exchange(_), m)) if m.contains("retry budget exhausted") => over_budget += 1,
            Err((kind, m)) => panic!("not a budget refusal ({kind:?}): {m}"),
        }
    }
    (ok, over_budget)
}

/// HTTP/1.1: a server that answers the first request on each connection and
/// drops every later one unanswered (each reuse fails as a stale
/// connection, which a GET retries on a new one). 64 calls from 8 callers:
/// without a budget every reuse costs a second request; with 20 % and no
/// floor, the server sees at most 64 + 12 requests, and the calls whose
/// retry was refused fail typed.
pub fn retry_budget_bounds_a_retry_storm(a: &dyn Adapter) {
    let script =
        || vec![Step::Respond(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec()), Step::Close];
    let server = RawServer::scripted((0..400).map(|_| script()).collect());
    let url = format!("http://127.0.0.1:{}/", server.addr.port());
    let client =
        a.client(Config { version: Version::Http1, retry_budget: Some(Some(fifth())), ..Config::default() });
    let results = client.send_loops(8, 8, Req::get(url.clone()));
    let (ok, over_budget) = tally(&results);
    assert_eq!(ok + over_budget, 64);
    let stats = client.stats();
    assert!(stats.retries <= 12, "{stats:?}");
    assert_eq!(stats.retries_over_budget as usize, over_budget, "{stats:?}");
    assert!(over_budget > 0, "reuses failed beyond the budget: {stats:?}");
    assert!(server.requests() <= 64 + 12, "the server saw {} requests", server.requests());
    // The same load without a budget: every failed reuse is retried.
    let storm = RawServer::scripted((0..400).map(|_| script()).collect());
    let url = format!("http://127.0.0.1:{}/", storm.addr.port());
    let client = a.client(Config { version: Version::Http1, retry_budget: Some(None), ..Config::default() });
    let (ok, over_budget) = tally(&client.send_loops(8, 8, Req::get(url)));
    assert_eq!((ok, over_budget), (64, 0));
    assert!(storm.requests() > server.requests(), "{} vs {}", storm.requests(), server.requests());
}

/// HTTP/2: a server that refuses every stream (REFUSED_STREAM). Without a
/// budget each call is tried up to three times (twice on one connection,
/// once on another); with 20 % and no floor the server sees at most 64 + 12
/// streams for 64 concurrent calls, and every call ends typed.
pub fn retry_budget_bounds_an_http2_retry_storm(a: &dyn Adapter) {
    let server = FaultServer::start(FaultOptions { http2: true, ..FaultOptions::default() });
    server.push((0..400).map(|_| Reply::ok("x").with(Fault::Reset(0x7))));
    let url = format!("http://127.0.0.1:{}/", server.port());
    let client =
        a.client(Config { version: Version::Http2, retry_budget: Some(Some(fifth())), ..Config::default() });
    let results = client.send_all((0..64).map(|_| Req::get(url.clone())).collect());
    let mut over_budget = 0;
    for r in &results {
        let (kind, message) = r.as_ref().expect_err("every stream is refused");
        assert_eq!(*kind, Failure::Exchange(false), "refused: never processed: {message}");
        if message.contains("retry budget exhausted") {
            over_budget += 1;
        } else {
            assert!(message.contains("refused on two connections"), "{message}");
        }
    }
    let streams = server.records().len();
    assert!(streams <= 64 + 12, "the server saw {streams} streams");
    assert!(over_budget >= 64 - 12, "{over_budget} calls stopped at the budget");
    assert_eq!(client.stats().retries_over_budget as usize, over_budget);
}

/// A resolver whose answer the test moves.
struct Moving(std::sync::Mutex<Vec<std::net::IpAddr>>);

impl switchyard_common::Resolve for Moving {
    fn resolve(&self, _host: &str, _port: u16) -> std::io::Result<Vec<std::net::IpAddr>> {
        Ok(self.0.lock().expect("answer").clone())
    }
}

/// An HTTP/1.1 keep-alive server on `ip:port` answering `ok` to every
/// request; counts its connections. Port 0: any.
struct KeepAliveServer {
    port: u16,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl KeepAliveServer {
    fn start(ip: &str, port: u16) -> Option<KeepAliveServer> {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind((ip, port)).ok()?;
        let port = listener.local_addr().ok()?.port();
        let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = std::sync::Arc::clone(&connections);
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(mut s) = s else { return };
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while let Ok(n) = s.read(&mut chunk) {
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            buf.drain(..end + 4);
                            if s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        Some(KeepAliveServer { port, connections })
    }

    fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A name moves from 127.0.0.2 to 127.0.0.3 in the resolver: the pooled
/// connection to the old address is drained by the refresh (no call asks)
/// once the grace has passed (here 0.9 s: three TTLs of 300 ms),
/// `DnsChanged`, and the next call connects to the new one.
pub fn dns_change_drains_pooled_connections(a: &dyn Adapter) {
    // The same port on both addresses (retried on another port if taken).
    let (old, new) = (0..20)
        .find_map(|_| {
            let old = KeepAliveServer::start("127.0.0.2", 0)?;
            let new = KeepAliveServer::start("127.0.0.3", old.port)?;
            Some((old, new))
        })
        .expect("one port on 127.0.0.2 and 127.0.0.3");
    let resolver = std::sync::Arc::new(Moving(std::sync::Mutex::new(vec!["127.0.0.2".parse().expect("ip")])));
    let client = a.client(Config {
        version: Version::Http1,
        resolver: Some(crate::conformance::Plugged(resolver.clone())),
        dns_cache_ttl: Some(Duration::from_millis(300)),
        dns_drain_grace: Some(Duration::from_millis(100)),
        ..Config::default()
    });
    let url = format!("http://moving.test:{}/", old.port);
    assert_eq!(client.send(Req::get(url.clone())).expect("the old address").body, b"ok");
    assert_eq!(client.send(Req::get(url.clone())).expect("pooled").body, b"ok");
    assert_eq!((old.connections(), new.connections()), (1, 0));
    *resolver.0.lock().expect("answer") = vec!["127.0.0.3".parse().expect("ip")];
    crate::conformance::eventually("the refresh drains the old connection", Duration::from_secs(10), || {
        client.stats().closed.get(&switchyard_core::CloseReason::DnsChanged) == Some(&1)
    });
    assert!(client.stats().dns_refreshes >= 1);
    assert_eq!(client.send(Req::get(url)).expect("the new address").body, b"ok");
    assert_eq!((old.connections(), new.connections()), (1, 1));
    assert_eq!(client.stats().totals.open, 1);
}

/// A resolver answering each query with the next of its addresses, one at a
/// time (an object store's or a cloud load balancer's DNS); counts queries.
struct Rotating {
    ips: Vec<std::net::IpAddr>,
    asked: std::sync::atomic::AtomicUsize,
}

impl switchyard_common::Resolve for Rotating {
    fn resolve(&self, _host: &str, _port: u16) -> std::io::Result<Vec<std::net::IpAddr>> {
        let n = self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(vec![self.ips[n % self.ips.len()]])
    }
}

/// A name that answers each query with one of four addresses (TTL 300 ms),
/// all of them serving, and a steady client: the refreshes see the
/// connection's address come and go, and the one connection stays — no
/// address is drained while the answers keep naming it (the grace, 60 s by
/// default, is far longer than the run).
pub fn rotating_dns_answers_keep_one_connection(a: &dyn Adapter) {
    let servers = (0..20)
        .find_map(|_| {
            let first = KeepAliveServer::start("127.0.0.2", 0)?;
            let port = first.port;
            let mut all = vec![first];
            for ip in ["127.0.0.3", "127.0.0.4", "127.0.0.5"] {
                all.push(KeepAliveServer::start(ip, port)?);
            }
            Some(all)
        })
        .expect("one port on 127.0.0.2-5");
    let port = servers[0].port;
    let ips = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"].map(|ip| ip.parse().expect("ip")).to_vec();
    let resolver = std::sync::Arc::new(Rotating { ips, asked: std::sync::atomic::AtomicUsize::new(0) });
    let client = a.client(Config {
        version: Version::Http1,
        resolver: Some(crate::conformance::Plugged(resolver.clone())),
        dns_cache_ttl: Some(Duration::from_millis(300)),
        ..Config::default()
    });
    let url = format!("http://rotating.test:{port}/");
    // A steady client: 40 calls, 50 ms apart (the pacing is the load, not
    // a verdict), so several refresh rounds run between them.
    for _ in 0..40 {
        assert_eq!(client.send(Req::get(url.clone())).expect("ok").body, b"ok");
        std::thread::sleep(Duration::from_millis(50));
    }
    let stats = client.stats();
    let connections: usize = servers.iter().map(KeepAliveServer::connections).sum();
    assert!(stats.dns_refreshes >= 1, "the name was looked up again: {stats:?}");
    assert!(resolver.asked.load(std::sync::atomic::Ordering::SeqCst) >= 2);
    assert_eq!(connections, 1, "one connection for the whole run: {stats:?}");
    assert_eq!(stats.dns_drained, 0, "{stats:?}");
}

/// A TCP relay whose existing connections can be frozen: it stops
/// forwarding either way (the peer looks dead, the sockets stay open).
struct Relay {
    port: u16,
    frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Relay {
    fn start(to: u16) -> Relay {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let frozen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&frozen);
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(client) = s else { return };
                let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", to)) else { return };
                // Connections accepted after a freeze are not frozen.
                let frozen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                let watch = (std::sync::Arc::clone(&flag), std::sync::Arc::clone(&frozen));
                let already = flag.load(std::sync::atomic::Ordering::SeqCst);
                std::thread::spawn(move || {
                    if already {
                        return;
                    }
                    while !watch.0.load(std::sync::atomic::Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    watch.1.store(true, std::sync::atomic::Ordering::SeqCst);
                });
                for (mut from, mut to) in [
                    (client.try_clone().expect("clone"), server.try_clone().expect("clone")),
                    (server, client),
                ] {
                    let frozen = std::sync::Arc::clone(&frozen);
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 * 1024];
                        loop {
                            if frozen.load(std::sync::atomic::Ordering::SeqCst) {
                                std::thread::sleep(Duration::from_millis(20));
                                continue;
                            }
                            let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
                            match from.read(&mut buf) {
                                Ok(0) => return,
                                Ok(n) if !frozen.load(std::sync::atomic::Ordering::SeqCst) => {
                                    if to.write_all(&buf[..n]).is_err() {
                                        return;
                                    }
                                }
                                Ok(_) => {}
                                Err(e)
                                    if matches!(
                                        e.kind(),
                                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                                    ) => {}
                                Err(_) => return,
                            }
                        }
                    });
                }
            }
        });
        Relay { port, frozen }
    }
}

/// HTTP/2 keep-alive: an idle connection whose peer stops answering (a
/// relay that freezes it) is found by its PING within `ping_interval +
/// ping_timeout` and closed `Unhealthy`; the next call opens a new one.
pub fn http2_keepalive_ping_finds_a_dead_peer(a: &dyn Adapter) {
    let server = FaultServer::start(FaultOptions { http2: true, ..FaultOptions::default() });
    let relay = Relay::start(server.port());
    let client = a.client(Config {
        version: Version::Http2,
        ping_interval: Some(Duration::from_secs(10)),
        ..Config::default()
    });
    let url = format!("http://127.0.0.1:{}/", relay.port);
    assert_eq!(client.send(Req::get(url.clone())).expect("first").body, b"ok");
    relay.frozen.store(true, std::sync::atomic::Ordering::SeqCst);
    // Interval (10 s) + timeout (1 s), with room for a slow machine.
    crate::conformance::eventually("the missed PONG closes the connection", Duration::from_secs(20), || {
        client.stats().closed.get(&switchyard_core::CloseReason::Unhealthy) == Some(&1)
    });
    assert!(client.stats().keepalive_pings >= 1);
    assert_eq!(client.send(Req::get(url)).expect("on a new connection").body, b"ok");
    assert_eq!(server.connections(), 2);
}

/// Graceful shutdown under load: 16 calls, 4 connections allowed. The 4 in
/// flight finish; the 12 waiting for capacity fail typed ("shut down"), as
/// does any call made after; no connection is left open. With a grace
/// shorter than the calls, the report counts the calls still running (an
/// HTTP/1.1 exchange is not interrupted: they still end well).
pub fn shutdown_under_load_loses_no_call(a: &dyn Adapter) {
    use crate::server::{ServerOptions, TestServer};
    let server = TestServer::start(ServerOptions::default());
    let client = a.client(Config { max_per_host: Some(4), version: Version::Http1, ..Config::default() });
    let url = format!("http://127.0.0.1:{}/sleep/300", server.port());
    let results = std::thread::scope(|s| {
        let load = s.spawn(|| client.send_all((0..16).map(|_| Req::get(url.clone())).collect()));
        crate::conformance::eventually("four calls in flight", Duration::from_secs(10), || {
            let t = client.stats().totals;
            t.in_use == 4 && t.waiters == 12
        });
        let report = client.shutdown(Duration::from_secs(10));
        assert!(report.is_clean(), "{report}");
        load.join().expect("load")
    });
    let (mut ok, mut refused) = (0, 0);
    for r in results {
        match r {
            Ok(r) => {
                assert_eq!(r.body, b"slept");
                ok += 1;
            }
            Err((Failure::Connect, m)) if m.contains("shut down") => refused += 1,
            Err((kind, m)) => panic!("neither finished nor refused typed ({kind:?}): {m}"),
        }
    }
    assert_eq!((ok, refused), (4, 12));
    let (kind, m) = client.send(Req::get(url)).expect_err("refused after shutdown");
    assert!(kind == Failure::Connect && m.contains("shut down"), "{m}");
    assert_eq!(client.stats().totals.open, 0, "every connection closed");
    assert_eq!(server.records().len(), 4, "the refused calls never reached the server");
    // A grace shorter than the calls: they are reported, and still finish.
    let client = a.client(Config { version: Version::Http1, ..Config::default() });
    let url = format!("http://127.0.0.1:{}/sleep/1500", server.port());
    let results = std::thread::scope(|s| {
        let load = s.spawn(|| client.send_all((0..2).map(|_| Req::get(url.clone())).collect()));
        crate::conformance::eventually("two calls in flight", Duration::from_secs(10), || {
            client.stats().totals.in_use == 2
        });
        let report = client.shutdown(Duration::from_millis(100));
        assert_eq!(report.in_flight, 2, "{report}");
        load.join().expect("load")
    });
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(client.stats().totals.open, 0);
}

/// A grace shorter than the calls, over HTTP/2 (cleartext and TLS, ALPN):
/// the calls still running when it ends fail as ended by the shutdown
/// (`is_shutdown`, not a reset), whether they waited for the head or were
/// reading the body, and they are not retried; the route is not marked
/// failed (the next client's first call goes straight through), and no
/// connection is left open.
pub fn shutdown_ends_http2_calls_as_shutdown(a: &dyn Adapter) {
    use crate::server::{ServerOptions, TestServer};
    for tls in [false, true] {
        let ca = crate::certs::TestCa::new();
        let (server, base) = if tls {
            (crate::conformance::tls_server(&ca, &["a.test"], ServerOptions::default()), "https://a.test")
        } else {
            (
                TestServer::start(ServerOptions { http2_only: true, ..ServerOptions::default() }),
                "http://127.0.0.1",
            )
        };
        let config =
            || Config { version: Version::Http2, ..crate::conformance::tls_config(&ca, &["a.test"]) };
        let client = a.client(config());
        let head = format!("{base}:{}/sleep/5000", server.port());
        let body = format!("{base}:{}/slow-body/5000", server.port());
        let results = std::thread::scope(|s| {
            let load = s.spawn(|| client.send_all(vec![Req::get(head.clone()), Req::get(body.clone())]));
            crate::conformance::eventually("two streams in flight", Duration::from_secs(10), || {
                client.stats().calls == 2 && server.records().len() == 2
            });
            let report = client.shutdown(Duration::from_millis(100));
            assert_eq!((report.in_flight, report.aborted), (2, 1), "tls {tls}: {report}");
            load.join().expect("load")
        });
        for r in results {
            match r {
                Err((Failure::Shutdown, m)) => assert!(m.contains("shutdown"), "tls {tls}: {m}"),
                other => panic!("tls {tls}: not ended as a shutdown: {other:?}"),
            }
        }
        crate::conformance::eventually("the connection closed", Duration::from_secs(10), || {
            client.stats().totals.open == 0
        });
        assert_eq!(server.records().len(), 2, "tls {tls}: nothing retried");
        let (kind, m) = client.send(Req::get(head.clone())).expect_err("refused after shutdown");
        assert!(kind == Failure::Connect && m.contains("shut down"), "{m}");
        // Nothing against the route: a new client's call is answered.
        let fresh = a.client(config());
        let hello = format!("{base}:{}/hello", server.port());
        assert_eq!(fresh.send(Req::get(hello)).expect("answered").body, b"hello", "tls {tls}");
    }
}

/// Two fault servers on one port of 127.0.0.2 (answers 503 to everything)
/// and 127.0.0.3 (answers `ok`), one name for both.
fn failing_and_healthy(http2: bool) -> (FaultServer, FaultServer) {
    let options = FaultOptions { http2, ..FaultOptions::default() };
    let (bad, good) = (0..20)
        .find_map(|_| {
            let bad = FaultServer::start_on(([127, 0, 0, 2], 0).into(), options.clone()).ok()?;
            let good = FaultServer::start_on(([127, 0, 0, 3], bad.port()).into(), options.clone()).ok()?;
            Some((bad, good))
        })
        .expect("one port on 127.0.0.2 and 127.0.0.3");
    bad.push((0..40).map(|_| Reply { status: 503, body: b"down".to_vec(), fault: Fault::None }));
    (bad, good)
}

/// Outlier ejection on 5xx answers (opt-in): a name with two addresses,
/// the first answering 503 to everything on one pooled connection. With
/// the policy counting 5xx, the fifth 503 in a row ejects that route: its
/// connection takes no new call (`RouteEjected`) and the next calls go to
/// the healthy address. By default the 503s are the application's answer
/// and every call stays on the first address.
fn server_errors_eject(a: &dyn Adapter, version: Version) {
    let http2 = version == Version::Http2;
    let config = |outliers| {
        let mut hosts = std::collections::BTreeMap::new();
        hosts.insert(
            "pair.test".to_owned(),
            vec!["127.0.0.2".parse().expect("ip"), "127.0.0.3".parse().expect("ip")],
        );
        Config { version, hosts, outliers, ..Config::default() }
    };
    let statuses = |client: &dyn crate::conformance::TestClient, port: u16| -> Vec<u16> {
        let url = format!("http://pair.test:{port}/");
        (0..10)
            .map(|_| client.send(Req::get(url.clone())).map_err(|(_, m)| m).expect("an answer").status)
            .collect()
    };
    let (bad, good) = failing_and_healthy(http2);
    let counting = switchyard_core::OutlierPolicy { server_errors: true, ..Default::default() };
    let client = a.client(config(Some(counting)));
    let seen = statuses(&*client, bad.port());
    assert_eq!(seen, [503, 503, 503, 503, 503, 200, 200, 200, 200, 200]);
    assert_eq!((bad.records().len(), good.records().len()), (5, 5), "five 503s, then the healthy address");
    assert_eq!((bad.connections(), good.connections()), (1, 1));
    let stats = client.stats();
    assert_eq!((stats.ejections, stats.ejected_routes), (1, 1), "{stats:?}");
    crate::conformance::eventually("the ejected route's connection closes", Duration::from_secs(10), || {
        client.stats().closed.get(&switchyard_core::CloseReason::RouteEjected) == Some(&1)
    });
    // The default: 5xx answers are not the route's failures.
    let (bad, good) = failing_and_healthy(http2);
    let client = a.client(config(None));
    assert_eq!(statuses(&*client, bad.port()), [503; 10]);
    assert_eq!((bad.records().len(), good.records().len()), (10, 0));
    assert_eq!(client.stats().ejections, 0);
}

/// Outlier ejection on 5xx answers (`server_errors_eject`) over HTTP/1.1.
pub fn server_errors_eject_a_route(a: &dyn Adapter) {
    server_errors_eject(a, Version::Http1);
}

/// Outlier ejection on 5xx answers (`server_errors_eject`) over HTTP/2
/// (prior knowledge): the ejected
/// connection opens no new stream.
pub fn server_errors_eject_an_http2_route(a: &dyn Adapter) {
    server_errors_eject(a, Version::Http2);
}

/// Calls ended mid-flight by their deadline — waiting, connecting, reading
/// the head, or mid-body (the body then dropped, drained in the background)
/// — three rounds of 200, then `evict`: every connection settles and closes;
/// none is left open and idle after the drains end (an eviction covers a
/// connection whose drain was still running, and connects kept for the
/// pool). HTTP/1.1, cleartext and TLS; HTTP/2 on adapters that speak it.
fn dropped_calls_leave_nothing_behind(a: &dyn Adapter, http2: bool) {
    use crate::certs::TestCa;
    use crate::fault::{Fault, FaultOptions, FaultServer, Reply};
    for tls in [false, true] {
        let what = format!("{} dropped calls (tls {tls}, h2 {http2})", a.name());
        let ca = TestCa::new();
        let server = FaultServer::start(FaultOptions {
            tls: tls.then(|| ca.leaf(&["drop.test"])),
            http2,
            max_concurrent_streams: None,
        });
        let mut config = Config {
            version: if http2 { Version::Http2 } else { Version::Http1 },
            root: tls.then(|| ca.cert.clone()),
            call_timeout: Some(Duration::from_millis(60)),
            ..Config::default()
        };
        config.hosts.insert("drop.test".into(), vec!["127.0.0.1".parse().expect("ip")]);
        let client = a.client(config);
        let scheme = if tls { "https" } else { "http" };
        let url = format!("{scheme}://drop.test:{}/x", server.port());
        let body = "b".repeat(8 * 1024);
        let mut ended = 0;
        for round in 0..3 {
            // Bodies of 8 KiB in 1 KiB chunks, 0-30 ms apart: some calls end
            // before their deadline, most during the body.
            server.push((0..200).map(|i| {
                Reply::ok(&body).with(Fault::Throttle(1024, Duration::from_millis((i + round * 7) % 31)))
            }));
            let results = client.send_all((0..200).map(|_| Req::get(url.clone())).collect());
            ended += results.iter().filter(|r| matches!(r, Err((Failure::Timeout, _)))).count();
        }
        crate::conformance::eventually(&format!("{what}: every call ended"), Duration::from_secs(20), || {
            client.stats().calls == 0
        });
        client.evict();
        crate::conformance::eventually(
            &format!("{what}: nothing left open"),
            Duration::from_secs(20),
            || {
                let t = client.stats().totals;
                (t.open, t.connecting) == (0, 0)
            },
        );
        assert!(ended > 0, "{what}: some calls were ended mid-flight");
    }
}

/// HTTP/1.1: dropped calls leave nothing behind after an eviction.
pub fn dropped_calls_leave_nothing_behind_http1(a: &dyn Adapter) {
    dropped_calls_leave_nothing_behind(a, false);
}

/// HTTP/2: dropped calls leave nothing behind after an eviction.
pub fn dropped_calls_leave_nothing_behind_http2(a: &dyn Adapter) {
    dropped_calls_leave_nothing_behind(a, true);
}

/// Every name resolves to 127.0.0.1.
struct Everything;

impl switchyard_common::Resolve for Everything {
    fn resolve(&self, _host: &str, _port: u16) -> std::io::Result<Vec<std::net::IpAddr>> {
        Ok(vec!["127.0.0.1".parse().expect("ip")])
    }
}

/// 3,000 calls, each to a host name of its own that resolves and refuses
/// (a crawler's or a webhook sender's traffic): every call fails typed, and
/// the Addresses the pool tracks stay within the documented bound, 64 + 2 ×
/// (busy + `IDLE_ADDRESSES_KEPT`) — nothing is busy once the calls ended —
/// however many hosts came before (`tests/examples/hosts.rs` shows resident
/// memory flat over 100,000 hosts).
pub fn many_hosts_keep_bounded_state(a: &dyn Adapter) {
    let port = crate::net::refused_port();
    let client = a.client(Config {
        version: Version::Http1,
        resolver: Some(crate::conformance::Plugged(std::sync::Arc::new(Everything))),
        ..Config::default()
    });
    // One call at a time: at most one Address busy when a sweep runs.
    let bound = 64 + 2 * (1 + switchyard_core::pool::IDLE_ADDRESSES_KEPT);
    let mut most = 0;
    for i in 0..3_000 {
        match client.send(Req::get(format!("http://h{i}.many.test:{port}/"))) {
            Err((Failure::Connect, _)) => {}
            other => panic!("{}: h{i}: expected a refused connect, got {other:?}", a.name()),
        }
        most = most.max(client.addresses());
    }
    assert!(most <= bound, "{}: {most} Addresses tracked at most, bound {bound}", a.name());
    assert_eq!(client.stats().calls, 0);
}
