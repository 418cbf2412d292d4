//! Defects found from outside (issue 28), each tested as a class on every
//! adapter (`found_suite!`): HTTP/1.1 and HTTP/2, cleartext and TLS where it
//! applies.
//!
//! - Every timeout setting ends the call in the phase it bounds, typed
//!   (`is_timeout`) and named in its text (issue 53's matrix: DNS, TCP, proxy
//!   `CONNECT`, SOCKS5 greeting and reply, TLS, head, body; direct and through
//!   each proxy kind).
//! - An idle cap of zero keeps no connection.
//! - A prepared `tls_config` is never a coalescing target unless vouched for.
//! - Every attempt's events are complete under load over TLS, kept attempts
//!   included.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use switchyard_core::{CloseReason, Proxy};

use crate::certs::TestCa;
use crate::conformance::{Adapter, Config, EventRow, Failure, Plugged, Req, Resp, Version};
use crate::server::{ServerOptions, TestServer};

fn ok(r: Result<Resp, (Failure, String)>, what: &str) -> Resp {
    match r {
        Ok(r) => r,
        Err((kind, msg)) => panic!("{what}: call failed ({kind:?}): {msg}"),
    }
}

/// A listener that accepts connections and never says a word (kept open
/// while it lives): a proxy that never answers, a TLS server that stalls.
struct Silent {
    port: u16,
    _held: Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

fn silent() -> Silent {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let held = Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = Arc::clone(&held);
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            keep.lock().expect("lock").push(s);
        }
    });
    Silent { port, _held: held }
}

/// A listener that answers each connection's first `read` bytes with
/// `reply`, then says nothing more (a SOCKS5 proxy that takes the greeting
/// and never answers the CONNECT request).
fn half_answering(read: usize, reply: &'static [u8]) -> Silent {
    use std::io::{Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let held = Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = Arc::clone(&held);
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let mut buf = vec![0u8; read];
            if s.read_exact(&mut buf).is_ok() && s.write_all(reply).is_ok() {
                keep.lock().expect("lock").push(s);
            }
        }
    });
    Silent { port, _held: held }
}

/// Which way a case reaches its origin.
#[derive(Clone, Copy, Debug)]
enum Via {
    Direct,
    HttpProxy,
    Socks5,
}

const SHORT: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(30);

/// The timeout matrix: every timeout setting × every phase it bounds × the
/// ways to the origin (direct, an HTTP proxy, SOCKS5). One setting is short
/// (300 ms), every other long (30 s, the call 60 s), so the error's text
/// says which ran out: each case ends as a timeout (`is_timeout`) whose text
/// names the phase and the short bound.
///
/// | setting | phases |
/// |---|---|
/// | `connect_timeout` | TCP connect (a hanging route), proxy `CONNECT`, SOCKS5 greeting, SOCKS5 reply |
/// | `handshake_timeout` | proxy `CONNECT`, SOCKS5 greeting and reply (from TCP's end), TLS (direct and through each proxy) |
/// | `timeout` (the call) | DNS, TCP connect, proxy `CONNECT`, SOCKS5, TLS, response head, body |
/// | `read_timeout` | response head, body |
/// | `body_timeout` | body |
pub fn timeouts_end_in_their_phase(a: &dyn Adapter) {
    use crate::fault::{Fault, FaultOptions, FaultServer, Reply};
    let mut hosts = std::collections::BTreeMap::new();
    hosts.insert("origin.test".to_owned(), vec!["127.0.0.1".parse().expect("ip")]);
    let base = Config {
        connect_timeout: LONG,
        handshake_timeout: LONG,
        call_timeout: Some(Duration::from_secs(60)),
        hosts,
        ..Config::default()
    };
    let silent_proxy = silent();
    let socks_greeted = half_answering(3, &[5, 0]);
    let stalled_tls = silent();
    let proxy_to = |via: Via, origin: std::net::IpAddr| -> (Vec<Proxy>, Option<crate::proxy::TestProxy>) {
        let mut map = std::collections::BTreeMap::new();
        map.insert("origin.test".to_owned(), origin);
        match via {
            Via::Direct => (Vec::new(), None),
            Via::HttpProxy => {
                let p = crate::proxy::TestProxy::http(map);
                (vec![Proxy::http("127.0.0.1", u32::from(p.addr.port())).expect("proxy")], Some(p))
            }
            Via::Socks5 => {
                let p = crate::proxy::TestProxy::socks5(map);
                (vec![Proxy::socks5h("127.0.0.1", u32::from(p.addr.port())).expect("proxy")], Some(p))
            }
        }
    };
    // A call's deadline before it has a connection names how far it got,
    // when the pool still knew (the core's timer and the adapter's may end
    // it at the same instant; then the text says "connecting" only).
    let stages = [
        "waiting for a connection",
        "resolving the name",
        "in the TCP connect",
        "in the proxy handshake",
        "in the TLS handshake",
    ];
    let stage_right = |msg: &str, stage: &str| msg.contains(stage) || !stages.iter().any(|s| msg.contains(s));
    let expect = |what: &str, config: Config, url: String, words: &[&str]| {
        let what = format!("{} {what}", a.name());
        let client = a.client(config);
        match client.send(Req::get(url)) {
            Err((Failure::Timeout, msg)) => {
                for w in words {
                    let named = if stages.contains(w) { stage_right(&msg, w) } else { msg.contains(w) };
                    assert!(named, "{what}: {msg:?} does not say {w:?}");
                }
            }
            other => panic!("{what}: expected a timeout, got {other:?}"),
        }
    };
    let tunnel = "did not open the tunnel within 300ms";
    let stalled_proxies = [
        ("CONNECT", Proxy::http("127.0.0.1", u32::from(silent_proxy.port)).expect("proxy"), "https"),
        ("SOCKS5 greeting", Proxy::socks5("127.0.0.1", u32::from(silent_proxy.port)).expect("proxy"), "http"),
        (
            "SOCKS5h greeting",
            Proxy::socks5h("127.0.0.1", u32::from(silent_proxy.port)).expect("proxy"),
            "https",
        ),
        ("SOCKS5 reply", Proxy::socks5h("127.0.0.1", u32::from(socks_greeted.port)).expect("proxy"), "http"),
    ];

    // connect_timeout: TCP connect to a hanging route (IPv6 loopback with a
    // full backlog), direct and to a proxy there.
    if let Some((v4, hanging)) = crate::net::v4_listener_with_hanging_v6() {
        let port = v4.local_addr().expect("addr").port();
        let mut config = Config { connect_timeout: SHORT, ..base.clone() };
        config.hosts.insert("hang.test".into(), vec!["::1".parse().expect("ip")]);
        expect(
            "TCP connect (direct)",
            config.clone(),
            format!("http://hang.test:{port}/"),
            &["connect timed out after 300ms"],
        );
        for proxy in [Proxy::http("[::1]", u32::from(port)), Proxy::socks5("[::1]", u32::from(port))] {
            let c = Config { proxies: vec![proxy.expect("proxy")], ..config.clone() };
            expect(
                "TCP connect (to the proxy)",
                c,
                "http://origin.test:80/".into(),
                &["connect timed out after 300ms"],
            );
        }
        // The call's deadline in TCP connect.
        let c = Config { call_timeout: Some(SHORT), ..base.clone() };
        let mut c = c;
        c.hosts.insert("hang.test".into(), vec!["::1".parse().expect("ip")]);
        expect(
            "TCP connect (call timeout)",
            c,
            format!("http://hang.test:{port}/"),
            &["timed out", "connecting to"],
        );
        drop((v4, hanging));
    }
    // connect_timeout and handshake_timeout each bound a proxy handshake that
    // never finishes; so does the call's deadline.
    for (what, proxy, scheme) in &stalled_proxies {
        let url = format!("{scheme}://origin.test/x");
        let c = Config { connect_timeout: SHORT, proxies: vec![proxy.clone()], ..base.clone() };
        expect(&format!("{what} (connect timeout)"), c, url.clone(), &[tunnel, "proxy handshake"]);
        let c = Config { handshake_timeout: SHORT, proxies: vec![proxy.clone()], ..base.clone() };
        expect(&format!("{what} (handshake timeout)"), c, url.clone(), &[tunnel, "proxy handshake"]);
        let c = Config { call_timeout: Some(SHORT), proxies: vec![proxy.clone()], ..base.clone() };
        expect(
            &format!("{what} (call timeout)"),
            c,
            url,
            &["timed out connecting to", "in the proxy handshake"],
        );
    }
    // TLS that never answers: the handshake timeout, and the call's; direct
    // and through each proxy.
    for via in [Via::Direct, Via::HttpProxy, Via::Socks5] {
        let (proxies, _proxy) = proxy_to(via, "127.0.0.1".parse().expect("ip"));
        let url = format!("https://origin.test:{}/x", stalled_tls.port);
        let c = Config { handshake_timeout: SHORT, proxies: proxies.clone(), ..base.clone() };
        expect(
            &format!("TLS {via:?} (handshake timeout)"),
            c,
            url.clone(),
            &["TLS handshake timed out after 300ms"],
        );
        let c = Config { call_timeout: Some(SHORT), proxies, ..base.clone() };
        expect(
            &format!("TLS {via:?} (call timeout)"),
            c,
            url,
            &["timed out connecting to", "in the TLS handshake"],
        );
    }
    // The response head and body, cleartext and TLS, HTTP/1.1 and HTTP/2,
    // direct and through each proxy (HTTP/2 through the tunnels): the call's
    // timeout, the head timeout, the read timeout, and (body) the body
    // timeout. On HTTP/2 the stream's deadlines are the core's (a stream
    // timer), not the adapter's.
    for (tls, http2) in [(false, false), (true, false), (false, true), (true, true)] {
        let ca = TestCa::new();
        let server = FaultServer::start(FaultOptions {
            tls: tls.then(|| ca.leaf(&["origin.test"])),
            http2,
            max_concurrent_streams: None,
        });
        let scheme = if tls { "https" } else { "http" };
        let url = format!("{scheme}://origin.test:{}/x", server.port());
        let version = if http2 { Version::Http2 } else { Version::Http1 };
        let vias: &[Via] = match (http2, tls) {
            (false, _) => &[Via::Direct, Via::HttpProxy, Via::Socks5],
            (true, true) => &[Via::Direct, Via::HttpProxy],
            (true, false) => &[Via::Direct, Via::Socks5],
        };
        for &via in vias {
            let (proxies, _proxy) = proxy_to(via, "127.0.0.1".parse().expect("ip"));
            let with = |c: Config| Config {
                proxies: proxies.clone(),
                root: tls.then(|| ca.cert.clone()),
                version,
                ..c
            };
            let head = ["timed out", "response head"];
            let body = ["timed out", "response body"];
            let cases: [(&str, Config, Fault, &[&str]); 6] = [
                (
                    "head (head timeout)",
                    Config { head_timeout: Some(SHORT), ..base.clone() },
                    Fault::NoResponse,
                    &head,
                ),
                (
                    "head (call timeout)",
                    Config { call_timeout: Some(SHORT), ..base.clone() },
                    Fault::NoResponse,
                    &head,
                ),
                (
                    "head (read timeout)",
                    Config { read_timeout: Some(SHORT), ..base.clone() },
                    Fault::NoResponse,
                    &head,
                ),
                (
                    "body (call timeout)",
                    Config { call_timeout: Some(SHORT), ..base.clone() },
                    Fault::BodyDelay(LONG),
                    &body,
                ),
                (
                    "body (read timeout)",
                    Config { read_timeout: Some(SHORT), ..base.clone() },
                    Fault::BodyDelay(LONG),
                    &body,
                ),
                (
                    "body (body timeout)",
                    Config { body_timeout: Some(SHORT), ..base.clone() },
                    Fault::BodyDelay(LONG),
                    &body,
                ),
            ];
            for (what, config, fault, words) in cases {
                server.push([Reply::ok("body").with(fault)]);
                expect(&format!("{what} {via:?} tls {tls} h2 {http2}"), with(config), url.clone(), words);
            }
        }
        if http2 {
            // An upload the server's windows never take (it stopped reading):
            // each wait for room is bounded by the write timeout, as each
            // wait for the socket is on HTTP/1.1.
            server.push([Reply::ok("body").with(Fault::StallConnection)]);
            let config = Config {
                write_timeout: Some(SHORT),
                root: tls.then(|| ca.cert.clone()),
                version,
                ..base.clone()
            };
            let what = format!("{} upload (write timeout) tls {tls}", a.name());
            let mut req = Req::get(url.clone());
            req.method = http::Method::POST;
            req.body = vec![b'u'; 1 << 20];
            req.streamed = true;
            match a.client(config).send(req) {
                Err((Failure::Timeout, msg)) => assert!(msg.contains("timed out"), "{what}: {msg:?}"),
                other => panic!("{what}: expected a timeout, got {other:?}"),
            }
        }
    }
    // DNS that never answers in time: the call's deadline.
    struct Slow;
    impl switchyard_common::Resolve for Slow {
        fn resolve(&self, _host: &str, _port: u16) -> std::io::Result<Vec<std::net::IpAddr>> {
            std::thread::sleep(Duration::from_secs(2));
            Err(std::io::Error::other("no answer"))
        }
    }
    let c = Config { call_timeout: Some(SHORT), resolver: Some(Plugged(Arc::new(Slow))), ..base.clone() };
    expect(
        "DNS (call timeout)",
        c,
        "http://slow.test/x".into(),
        &["timed out connecting to", "resolving the name"],
    );
}

/// `max_idle_per_host(0)` keeps nothing: each released connection closes at
/// once (over the idle cap), and the next call connects anew.
fn idle_cap_of_zero(a: &dyn Adapter, http2: bool) {
    for tls in [false, true] {
        let what = format!("{} idle cap 0 (tls {tls}, h2 {http2})", a.name());
        let ca = TestCa::new();
        let mut options = ServerOptions::default();
        if tls {
            options.tls.push((vec!["a.test".into()], ca.leaf(&["a.test"])));
        }
        let server = TestServer::start(options);
        let mut config = Config {
            max_idle_per_host: Some(0),
            version: if http2 { Version::Http2 } else { Version::Http1 },
            root: tls.then(|| ca.cert.clone()),
            ..Config::default()
        };
        config.hosts.insert("a.test".into(), vec!["127.0.0.1".parse().expect("ip")]);
        let client = a.client(config);
        let scheme = if tls { "https" } else { "http" };
        let url = format!("{scheme}://a.test:{}/hello", server.port());
        for _ in 0..2 {
            assert_eq!(ok(client.send(Req::get(url.clone())), &what).body, b"hello");
        }
        assert_eq!(server.connections(), 2, "{what}: nothing was kept to reuse");
        let s = client.stats();
        assert_eq!((s.reused, s.totals.idle), (0, 0), "{what}: {s:?}");
        assert_eq!(s.closed.get(&CloseReason::OverIdleCap), Some(&2), "{what}: {s:?}");
    }
}

/// HTTP/1.1: an idle cap of zero.
pub fn idle_cap_of_zero_http1(a: &dyn Adapter) {
    idle_cap_of_zero(a, false);
}

/// HTTP/2: an idle cap of zero.
pub fn idle_cap_of_zero_http2(a: &dyn Adapter) {
    idle_cap_of_zero(a, true);
}

/// A prepared rustls config's verifier is the caller's: its HTTP/2
/// connections are never coalescing targets (two hosts the certificate
/// covers, at one IP, get a connection each), unless the caller vouches for
/// it (`tls_config_coalescing`: one connection, coalesced).
pub fn a_prepared_tls_config_is_not_a_coalescing_target(a: &dyn Adapter) {
    for vouched in [false, true] {
        let what = format!("{} tls_config (vouched {vouched})", a.name());
        let ca = TestCa::new();
        let mut options = ServerOptions::default();
        options.tls.push((vec!["a.test".into(), "b.test".into()], ca.leaf(&["a.test", "b.test"])));
        let server = TestServer::start(options);
        let mut roots = rustls::RootCertStore::empty();
        roots.add(rustls::pki_types::CertificateDer::from(ca.cert.clone())).expect("root");
        let prepared =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
        let mut config =
            Config { tls_config: Some((Plugged(Arc::new(prepared)), vouched)), ..Config::default() };
        for h in ["a.test", "b.test"] {
            config.hosts.insert(h.into(), vec!["127.0.0.1".parse().expect("ip")]);
        }
        let client = a.client(config);
        for host in ["a.test", "b.test"] {
            let r = ok(client.send(Req::get(format!("https://{host}:{}/hello", server.port()))), &what);
            assert_eq!((r.body.as_slice(), r.version), (&b"hello"[..], http::Version::HTTP_2), "{what}");
        }
        let (connections, coalesced) = if vouched { (1, 1) } else { (2, 0) };
        assert_eq!(server.connections(), connections, "{what}");
        assert_eq!(client.stats().coalesced, coalesced, "{what}");
    }
}

/// The events of every connect attempt are complete: as many
/// `secure_connect_end` as `secure_connect_start`, and a `connect_end` for
/// every `connect_start` (one route, nothing fails), whoever was left to hear
/// them — under TLS load where racing calls take pooled connections and keep
/// their attempts for the pool (BEHAVIOUR §7).
fn attempt_events_complete(a: &dyn Adapter, http2: bool) {
    let what = format!("{} attempt events (h2 {http2})", a.name());
    let ca = TestCa::new();
    let mut options = ServerOptions::default();
    options.tls.push((vec!["a.test".into()], ca.leaf(&["a.test"])));
    let server = TestServer::start(options);
    let mut config = Config {
        version: if http2 { Version::Http2 } else { Version::Http1 },
        root: Some(ca.cert.clone()),
        ..Config::default()
    };
    config.hosts.insert("a.test".into(), vec!["127.0.0.1".parse().expect("ip")]);
    let client = a.client(config);
    let url = format!("https://a.test:{}/hello", server.port());
    for r in client.send_loops(16, 25, Req::get(url)) {
        assert_eq!(ok(r, &what).body, b"hello");
    }
    // The last attempts may still be finishing for the pool: bounded wait.
    let limit = std::time::Instant::now() + Duration::from_secs(10);
    while client.stats().totals.connecting > 0 {
        assert!(std::time::Instant::now() < limit, "{what}: {:?}", client.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
    let events = client.events();
    let count = |name: &str| events.iter().filter(|(_, n, _)| *n == name).count();
    let failed = count("connect_failed") + count("connect_cancelled");
    assert_eq!(failed, 0, "{what}: one route, nothing fails: {events:?}");
    let kept: Vec<&EventRow> = events.iter().filter(|(_, n, _)| *n == "attempt_kept_for_pool").collect();
    assert_eq!(count("secure_connect_start"), count("secure_connect_end"), "{what} (kept: {})", kept.len());
    assert_eq!(count("connect_start"), count("connect_end"), "{what} (kept: {})", kept.len());
    assert!(count("connect_start") >= 1, "{what}");
    assert!(events.iter().all(|(call, n, _)| !n.starts_with("secure_connect") || call.is_some()), "{what}");
}

/// HTTP/1.1 over TLS: attempt events are complete.
pub fn attempt_events_complete_http1(a: &dyn Adapter) {
    attempt_events_complete(a, false);
}

/// HTTP/2 over TLS: attempt events are complete.
pub fn attempt_events_complete_http2(a: &dyn Adapter) {
    attempt_events_complete(a, true);
}

/// Lists the scenarios for an adapter: `found_suite!(MyAdapter)`, or
/// `found_suite!(MyAdapter, without_http2)` (HTTP/2 cases listed as ignored).
#[macro_export]
macro_rules! found_suite {
    ($adapter:expr) => {
        $crate::found_suite!(@tests $adapter;
            timeouts_end_in_their_phase, idle_cap_of_zero_http1, idle_cap_of_zero_http2,
            a_prepared_tls_config_is_not_a_coalescing_target, attempt_events_complete_http1,
            attempt_events_complete_http2);
    };
    ($adapter:expr, without_http2) => {
        $crate::found_suite!(@tests $adapter;
            timeouts_end_in_their_phase, idle_cap_of_zero_http1,
            attempt_events_complete_http1);
        $crate::found_suite!(@skipped $adapter;
            idle_cap_of_zero_http2, a_prepared_tls_config_is_not_a_coalescing_target,
            attempt_events_complete_http2);
    };
    (@tests $adapter:expr; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                $crate::found::$name(&$adapter);
            }
        )*
    };
    (@skipped $adapter:expr; $($name:ident),*) => {
        $(
            #[test]
            #[ignore = "skipped: this adapter has no HTTP/2"]
            fn $name() {
                $crate::found::$name(&$adapter);
            }
        )*
    };
}
