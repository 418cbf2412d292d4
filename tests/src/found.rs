//! Defects found from outside (issue 28), each tested as a class on every
//! adapter (`found_suite!`): HTTP/1.1 and HTTP/2, cleartext and TLS where it
//! applies.
//!
//! - The connect timeout bounds reaching the origin: TCP and a proxy tunnel
//!   (`CONNECT` or SOCKS5) that never answers; TLS keeps its own bound. Every
//!   attempt timing out is a timeout (`is_timeout`), of the connect phase.
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

/// The connect timeout (300 ms here) bounds a proxy that accepts and never
/// answers its `CONNECT` or SOCKS5 greeting, though the handshake timeout is
/// 30 s: the call fails with the tunnel timeout, a timeout of the connect
/// phase. A TLS server that stalls its handshake fails with the handshake
/// timeout, also a timeout (every attempt timed out).
pub fn connect_timeout_bounds_a_stalled_proxy_and_tls(a: &dyn Adapter) {
    let stalled = silent();
    let mut hosts = std::collections::BTreeMap::new();
    hosts.insert("origin.test".to_owned(), vec!["127.0.0.1".parse().expect("ip")]);
    let base = Config {
        connect_timeout: Duration::from_millis(300),
        handshake_timeout: Duration::from_secs(30),
        call_timeout: Some(Duration::from_secs(60)),
        hosts,
        ..Config::default()
    };
    let port = u32::from(stalled.port);
    let cases = [
        ("CONNECT", Proxy::http("127.0.0.1", port).expect("proxy"), "https://origin.test:443/x"),
        ("SOCKS5", Proxy::socks5("127.0.0.1", port).expect("proxy"), "https://origin.test:443/x"),
        ("SOCKS5 (http origin)", Proxy::socks5("127.0.0.1", port).expect("proxy"), "http://origin.test:80/x"),
        ("SOCKS5h", Proxy::socks5h("127.0.0.1", port).expect("proxy"), "https://origin.test:443/x"),
    ];
    for (what, proxy, url) in cases {
        let what = format!("{} {what}", a.name());
        let client = a.client(Config { proxies: vec![proxy], ..base.clone() });
        match client.send(Req::get(url)) {
            Err((Failure::Timeout, msg)) => {
                assert!(
                    msg.contains("did not open the tunnel within the connect timeout (300ms)"),
                    "{what}: {msg}"
                );
            }
            other => panic!("{what}: expected the tunnel timeout, got {other:?}"),
        }
    }
    // TLS that never answers: the handshake timeout (short here), a timeout.
    let client = a.client(Config { handshake_timeout: Duration::from_millis(300), ..base.clone() });
    match client.send(Req::get(format!("https://origin.test:{}/x", stalled.port))) {
        Err((Failure::Timeout, msg)) => assert!(msg.contains("handshake timed out after 300ms"), "{msg}"),
        other => panic!("{} stalled TLS: expected a timeout, got {other:?}", a.name()),
    }
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
            connect_timeout_bounds_a_stalled_proxy_and_tls, idle_cap_of_zero_http1, idle_cap_of_zero_http2,
            a_prepared_tls_config_is_not_a_coalescing_target, attempt_events_complete_http1,
            attempt_events_complete_http2);
    };
    ($adapter:expr, without_http2) => {
        $crate::found_suite!(@tests $adapter;
            connect_timeout_bounds_a_stalled_proxy_and_tls, idle_cap_of_zero_http1,
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
