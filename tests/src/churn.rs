//! Connections spent wisely under load: steady callers reuse what they opened,
//! a burst to a new HTTP/2 origin makes one connection, and the idle cap does
//! not churn under steady demand. Asserted from the server's own counts of TCP
//! connections and TLS handshakes, and from the pool's counters. Run for every
//! adapter by [`churn_suite!`](crate::churn_suite).

use switchyard_core::CloseReason;

use crate::certs::TestCa;
use crate::conformance::{Adapter, Config, Req};
use crate::server::{ServerOptions, TestServer};

fn tls_server(ca: &TestCa, options: ServerOptions) -> TestServer {
    let mut options = options;
    options.tls.push((vec!["a.test".into()], ca.leaf(&["a.test"])));
    TestServer::start(options)
}

fn tls_config(ca: &TestCa) -> Config {
    let mut c = Config { root: Some(ca.cert.clone()), ..Config::default() };
    c.hosts.insert("a.test".into(), vec!["127.0.0.1".parse().expect("ip")]);
    c
}

/// 16 callers × 200 sequential requests over TLS with HTTP/1.1: the server
/// sees at most 16 TCP connections and exactly one TLS handshake per
/// connection; no connect is thrown away after TCP.
pub fn steady_tls_http1_callers_reuse_their_connections(a: &dyn Adapter) {
    let ca = TestCa::new();
    let server = tls_server(&ca, ServerOptions { http1_only: true, ..ServerOptions::default() });
    let client = a.client(tls_config(&ca));
    let url = format!("https://a.test:{}/hello", server.port());
    let results = client.send_loops(16, 200, Req::get(url));
    assert_eq!(results.len(), 3200);
    for r in results {
        assert_eq!(r.expect("every call succeeds").body, b"hello");
    }
    let s = client.stats();
    assert!(server.connections() <= 16, "{} TCP connections for 16 callers; {s:?}", server.connections());
    assert_eq!(server.handshakes(), server.connections(), "one handshake per connection");
    assert_eq!(s.tcp_connects as usize, server.connections(), "{s:?}");
    assert_eq!(s.wasted, 0, "{s:?}");
}

/// When a response body has been read to its end, the connection is already
/// back in the pool: the next call finds it idle and reuses it — cleartext and
/// TLS, HTTP/1.1 and (where the adapter has it) HTTP/2.
fn released_when_the_body_ends(a: &dyn Adapter, versions: &[crate::conformance::Version]) {
    let ca = TestCa::new();
    for &version in versions {
        for tls in [false, true] {
            let what = format!("{} {version:?} tls {tls}", a.name());
            let server = if tls {
                tls_server(&ca, ServerOptions::default())
            } else {
                TestServer::start(ServerOptions::default())
            };
            let mut config = if tls { tls_config(&ca) } else { Config::default() };
            config.version = version;
            let client = a.client(config);
            let url = if tls {
                format!("https://a.test:{}/bytes/100000", server.port())
            } else {
                format!("http://127.0.0.1:{}/bytes/100000", server.port())
            };
            for i in 0..5 {
                let r = client.send(Req::get(&url)).unwrap_or_else(|e| panic!("{what}: {e:?}"));
                assert_eq!(r.body.len(), 100_000);
                let s = client.stats();
                assert_eq!(
                    (s.totals.in_use, s.totals.idle),
                    (0, 1),
                    "{what}, call {i}: released at the body's end"
                );
            }
            assert_eq!(server.connections(), 1, "{what}");
        }
    }
}

/// The release rule on an adapter with HTTP/2.
pub fn released_when_the_body_ends_http1_and_http2(a: &dyn Adapter) {
    use crate::conformance::Version;
    released_when_the_body_ends(a, &[Version::Http1, Version::Http2]);
}

/// The release rule on an HTTP/1.1-only adapter.
pub fn released_when_the_body_ends_http1(a: &dyn Adapter) {
    released_when_the_body_ends(a, &[crate::conformance::Version::Http1]);
}

/// 64 concurrent first calls to a new HTTP/2 origin over TLS: one TCP
/// connection, one handshake, every call on it.
pub fn a_burst_to_a_new_http2_origin_makes_one_connection(a: &dyn Adapter) {
    let ca = TestCa::new();
    let server = tls_server(&ca, ServerOptions::default());
    let client = a.client(tls_config(&ca));
    let url = format!("https://a.test:{}/sleep/50", server.port());
    for r in client.send_all((0..64).map(|_| Req::get(url.clone())).collect()) {
        assert_eq!(r.expect("every call succeeds").version, http::Version::HTTP_2);
    }
    let s = client.stats();
    assert_eq!((server.connections(), server.handshakes()), (1, 1), "{s:?}");
    assert_eq!((s.tcp_connects, s.tls_handshakes, s.created), (1, 1, 1), "{s:?}");
}

/// 64 steady callers with default settings (idle cap 32 per host): no
/// connection is closed for the idle cap during the run.
pub fn steady_demand_above_the_idle_cap_does_not_churn(a: &dyn Adapter) {
    let server = TestServer::start(ServerOptions { http1_only: true, ..ServerOptions::default() });
    let client = a.client(Config::default());
    let url = format!("http://127.0.0.1:{}/hello", server.port());
    for r in client.send_loops(64, 50, Req::get(url)) {
        r.expect("every call succeeds");
    }
    let s = client.stats();
    assert_eq!(s.closed.get(&CloseReason::OverIdleCap), None, "{s:?}");
    assert!(server.connections() <= 64, "{} connections for 64 callers; {s:?}", server.connections());
}

/// The churn suite for an adapter: `churn_suite!(MyAdapter)`, or
/// `churn_suite!(MyAdapter, without_http2)`.
#[macro_export]
macro_rules! churn_suite {
    ($adapter:expr) => {
        $crate::churn_suite!(@tests $adapter;
            steady_tls_http1_callers_reuse_their_connections,
            a_burst_to_a_new_http2_origin_makes_one_connection,
            steady_demand_above_the_idle_cap_does_not_churn,
            released_when_the_body_ends_http1_and_http2);
    };
    ($adapter:expr, without_http2) => {
        $crate::churn_suite!(@tests $adapter;
            steady_tls_http1_callers_reuse_their_connections,
            steady_demand_above_the_idle_cap_does_not_churn,
            released_when_the_body_ends_http1);
        #[test]
        #[ignore = "skipped: this adapter has no HTTP/2"]
        fn a_burst_to_a_new_http2_origin_makes_one_connection() {
            $crate::churn::a_burst_to_a_new_http2_origin_makes_one_connection(&$adapter);
        }
    };
    (@tests $adapter:expr; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                $crate::churn::$name(&$adapter);
            }
        )*
    };
}
