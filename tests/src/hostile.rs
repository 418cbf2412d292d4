//! The hostile-server and careless-caller suite: what a server (or anything on
//! the path) can do to a client beyond plain failure — smuggle a response onto
//! a reused connection, trickle bytes to outlive deadlines, answer before the
//! request body, never make an HTTP/2 connection usable — and what a caller
//! can leak (credentials in the URL). Run for every adapter by
//! [`hostile_suite!`](crate::hostile_suite); each scenario covers cleartext
//! and TLS, and HTTP/2 where the rule applies.

use std::time::Duration;

use switchyard_core::CloseReason;

use crate::certs::TestCa;
use crate::conformance::{Adapter, Config, Failure, Req, Resp, TestClient, Version};
use crate::fault::{Fault, FaultOptions, FaultServer, Reply};
use crate::server::{ServerOptions, TestServer};

const HOST: &str = "hostile.test";

/// A fault server for `HOST` and a matching client config and URL.
struct Setup {
    server: FaultServer,
    config: Config,
    url: String,
}

fn setup(tls: bool, http2: bool, max_concurrent_streams: Option<u32>) -> Setup {
    let ca = TestCa::new();
    let server = FaultServer::start(FaultOptions {
        tls: tls.then(|| ca.leaf(&[HOST])),
        http2,
        max_concurrent_streams,
    });
    let mut config = Config {
        version: if http2 { Version::Http2 } else { Version::Http1 },
        root: tls.then(|| ca.cert.clone()),
        ..Config::default()
    };
    config.hosts.insert(HOST.into(), vec!["127.0.0.1".parse().expect("ip")]);
    let scheme = if tls { "https" } else { "http" };
    let url = format!("{scheme}://{HOST}:{}/", server.port());
    Setup { server, config, url }
}

fn ok(r: Result<Resp, (Failure, String)>, what: &str) -> Resp {
    match r {
        Ok(r) => r,
        Err((kind, msg)) => panic!("{what}: call failed ({kind:?}): {msg}"),
    }
}

fn closed(client: &dyn TestClient, reason: CloseReason) -> u64 {
    client.stats().closed.get(&reason).copied().unwrap_or(0)
}

fn nothing_in_use(client: &dyn TestClient, what: &str) {
    let s = client.stats();
    assert_eq!((s.calls, s.totals.in_use, s.totals.waiters), (0, 0, 0), "{what}: {s:?}");
}

const SMUGGLED: &str = "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nforeign";

/// Bytes after the end of a response — a second, unsolicited response after a
/// length-delimited body, after a chunked body, on a 204, on a HEAD response,
/// or garbage — are never delivered as the next call's response: the
/// connection is closed and the next call gets its own answer on a new one.
pub fn bytes_after_a_response_are_never_a_response(a: &dyn Adapter) {
    let cases: Vec<(&str, http::Method, String)> = vec![
        (
            "after a length-delimited body",
            http::Method::GET,
            format!("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok{SMUGGLED}"),
        ),
        (
            "after a chunked body",
            http::Method::GET,
            format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n{SMUGGLED}"),
        ),
        ("on a 204", http::Method::GET, format!("HTTP/1.1 204 No Content\r\n\r\n{SMUGGLED}")),
        (
            "on a HEAD response",
            http::Method::HEAD,
            format!("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{SMUGGLED}"),
        ),
        (
            "garbage after the body",
            http::Method::GET,
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok\x00garbage".into(),
        ),
    ];
    for tls in [false, true] {
        for (name, method, raw) in &cases {
            let what = format!("{} {name} (tls {tls})", a.name());
            let s = setup(tls, false, None);
            s.server.push([Reply::ok("x").with(Fault::Raw(raw.clone().into_bytes())), Reply::ok("second")]);
            let client = a.client(s.config.clone());
            let first = ok(client.send(Req { method: method.clone(), ..Req::get(&s.url) }), &what);
            assert_ne!(first.body, b"foreign", "{what}");
            let second = ok(client.send(Req::get(&s.url)), &what);
            assert_eq!(second.body, b"second", "{what}: the next call gets its own response");
            assert_eq!(s.server.connections(), 2, "{what}: the first connection was not reused");
            // Seen with the response (closed at once) or later in the socket
            // (the probe before reuse): either way closed, never parsed.
            let seen = closed(client.as_ref(), CloseReason::BytesAfterResponse)
                + closed(client.as_ref(), CloseReason::Unhealthy);
            assert_eq!(seen, 1, "{what}: {:?}", client.stats().closed);
            nothing_in_use(client.as_ref(), &what);
        }
    }
}

/// URL credentials become `Authorization: Basic`, never reach `Host`, and never
/// appear in events or error texts; a caller's own `Authorization` wins.
pub fn url_credentials_become_basic_auth(a: &dyn Adapter) {
    let server = TestServer::start(ServerOptions::default());
    let client = a.client(Config::default());
    let port = server.port();
    // base64("ann:p@ss word")
    let url = format!("http://ann:p%40ss%20word@127.0.0.1:{port}/hello");
    ok(client.send(Req::get(&url)), "credentials in the URL");
    let mut own = Req::get(&url);
    own.headers.push(("authorization".into(), "Bearer mine".into()));
    ok(client.send(own), "with the caller's own Authorization");
    let records = server.records();
    assert_eq!(records[0].authority.as_deref(), Some(format!("127.0.0.1:{port}").as_str()));
    assert_eq!(records[0].authorization.as_deref(), Some("Basic YW5uOnBAc3Mgd29yZA=="));
    assert_eq!(records[1].authorization.as_deref(), Some("Bearer mine"));
    // A URL that fails: the password is not in the error.
    let (_, message) = client.send(Req::get("ftp://ann:hunter2@127.0.0.1/")).expect_err("ftp is refused");
    assert!(!message.contains("hunter2"), "{message}");
    for (_, name, detail) in client.events() {
        assert!(
            !detail.contains("p%40ss") && !detail.contains("hunter2") && !detail.contains("ann:"),
            "{name} {detail}"
        );
    }
}

/// Over HTTP/2 the credentials never go into `:authority` (RFC 9113 §8.3.1).
pub fn url_credentials_never_in_authority_http2(a: &dyn Adapter) {
    let ca = TestCa::new();
    let mut options = ServerOptions::default();
    options.tls.push((vec!["a.test".into()], ca.leaf(&["a.test"])));
    let server = TestServer::start(options);
    let mut config = Config { root: Some(ca.cert.clone()), ..Config::default() };
    config.hosts.insert("a.test".into(), vec!["127.0.0.1".parse().expect("ip")]);
    let client = a.client(config);
    let port = server.port();
    let r =
        ok(client.send(Req::get(format!("https://ann:secret@a.test:{port}/hello"))), "h2 with credentials");
    assert_eq!(r.version, http::Version::HTTP_2);
    let records = server.records();
    assert_eq!(records[0].authority.as_deref(), Some(format!("a.test:{port}").as_str()));
    assert_eq!(records[0].authorization.as_deref(), Some("Basic YW5uOnNlY3JldA=="));
    for (_, name, detail) in client.events() {
        assert!(!detail.contains("secret"), "{name} {detail}");
    }
}

/// The call timeout holds while the head is read: a head trickled a few bytes
/// at a time, and an endless stream of `100 Continue`, both end the call.
pub fn call_deadline_holds_while_reading_the_head(a: &dyn Adapter) {
    for tls in [false, true] {
        let what = format!("{} trickled head (tls {tls})", a.name());
        let s = setup(tls, false, None);
        s.server.push([Reply::ok("late").with(Fault::TrickleHead(Duration::from_millis(50)))]);
        let client = a.client(Config { call_timeout: Some(Duration::from_millis(700)), ..s.config.clone() });
        match client.send(Req::get(&s.url)) {
            Err((Failure::Timeout, _)) => {}
            other => panic!("{what}: expected the call timeout, got {other:?}"),
        }
        nothing_in_use(client.as_ref(), &what);

        let what = format!("{} endless 100 Continue (tls {tls})", a.name());
        let s = setup(tls, false, None);
        s.server.push([Reply::ok("never").with(Fault::EndlessInterim)]);
        let client = a.client(Config { call_timeout: Some(Duration::from_secs(2)), ..s.config.clone() });
        match client.send(Req::get(&s.url)) {
            // The interim limit ends it first, typed; the deadline is the backstop.
            Err((Failure::Exchange(true), m)) => assert!(m.contains("informational"), "{what}: {m}"),
            Err((Failure::Timeout, _)) => {}
            other => panic!("{what}: expected a protocol error or the timeout, got {other:?}"),
        }
        nothing_in_use(client.as_ref(), &what);
    }
}

/// At most five interim responses per exchange; a sixth is a protocol error.
pub fn interim_responses_are_limited(a: &dyn Adapter) {
    let interim = "HTTP/1.1 103 Early Hints\r\nlink: </a.css>\r\n\r\n";
    let done = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    for tls in [false, true] {
        // Each answer holds its connection open: one client and server per case.
        let s = setup(tls, false, None);
        s.server.push([Reply::ok("x").with(Fault::Raw(format!("{}{done}", interim.repeat(5)).into_bytes()))]);
        let client = a.client(s.config.clone());
        assert_eq!(ok(client.send(Req::get(&s.url)), "five interim").body, b"ok");
        let s = setup(tls, false, None);
        s.server.push([Reply::ok("x").with(Fault::Raw(format!("{}{done}", interim.repeat(6)).into_bytes()))]);
        let client = a.client(s.config.clone());
        match client.send(Req::get(&s.url)) {
            Err((Failure::Exchange(true), m)) => assert!(m.contains("more than 5 informational"), "{m}"),
            other => panic!("six interim responses: {other:?}"),
        }
        nothing_in_use(client.as_ref(), "interim");
    }
}

/// A server that answers before reading the request body (413, 401, …) gets
/// its answer to the caller: the upload stops, the connection is retired. Both
/// when the server then waits without reading and when it closes at once.
pub fn an_early_final_response_wins(a: &dyn Adapter) {
    // Larger than every socket buffer on the path, so the upload blocks.
    let big = 16 << 20;
    for tls in [false, true] {
        for (fault, name) in
            [(Fault::AnswerBeforeBody, "then waits"), (Fault::AnswerBeforeBodyThenClose, "then closes")]
        {
            let what = format!("{} 413 before the body, {name} (tls {tls})", a.name());
            let s = setup(tls, false, None);
            s.server.push([Reply { status: 413, body: b"too large".to_vec(), fault }, Reply::ok("next")]);
            let client = a.client(Config { call_timeout: Some(Duration::from_secs(20)), ..s.config.clone() });
            let post = Req { method: http::Method::POST, body: vec![b'u'; big], ..Req::get(&s.url) };
            let r = ok(client.send(post), &what);
            assert_eq!((r.status, r.body.as_slice()), (413, &b"too large"[..]), "{what}");
            // The connection is not reused: the next call opens another.
            assert_eq!(ok(client.send(Req::get(&s.url)), &what).body, b"next");
            assert_eq!(s.server.connections(), 2, "{what}");
            nothing_in_use(client.as_ref(), &what);
        }
    }
}

/// The body timeout bounds a slow body on every adapter, HTTP/1.1 and HTTP/2.
fn body_timeout_on(a: &dyn Adapter, http2: bool) {
    for tls in [false, true] {
        let what = format!("{} slow body (tls {tls}, h2 {http2})", a.name());
        let s = setup(tls, http2, None);
        let slow = Reply {
            status: 200,
            body: vec![b'b'; 100],
            fault: Fault::Throttle(1, Duration::from_millis(50)),
        };
        s.server.push([slow, Reply::ok("after")]);
        let client = a.client(Config { body_timeout: Some(Duration::from_millis(400)), ..s.config.clone() });
        match client.send(Req::get(&s.url)) {
            Err((Failure::Timeout, m)) => assert!(m.contains("timed out"), "{what}: {m}"),
            other => panic!("{what}: expected the body timeout, got {other:?}"),
        }
        // The client is still usable, and nothing is left in use.
        assert_eq!(ok(client.send(Req::get(&s.url)), &what).body, b"after");
        nothing_in_use(client.as_ref(), &what);
    }
}

/// The body timeout over HTTP/1.1.
pub fn body_timeout_bounds_a_slow_body(a: &dyn Adapter) {
    body_timeout_on(a, false);
}

/// The body timeout over HTTP/2.
pub fn body_timeout_bounds_a_slow_body_http2(a: &dyn Adapter) {
    body_timeout_on(a, true);
}

/// A first line that is not HTTP/1.x fails the exchange at once, typed, even
/// though the server keeps the connection open and sends no blank line.
pub fn not_http_fails_at_once(a: &dyn Adapter) {
    for tls in [false, true] {
        let s = setup(tls, false, None);
        s.server.push([Reply::ok("x").with(Fault::Raw(b"SSH-2.0-OpenSSH_9.6\r\n".to_vec()))]);
        let client = a.client(s.config.clone());
        match client.send(Req::get(&s.url)) {
            Err((Failure::Exchange(true), m)) => assert!(m.contains("not an HTTP/1.x response"), "{m}"),
            other => panic!("not HTTP (tls {tls}): {other:?}"),
        }
        nothing_in_use(client.as_ref(), "not HTTP");
    }
}

/// An HTTP/2 server whose stream limit is zero and stays zero: one call's
/// connection is the only one opened (its retries and the calls beside it
/// wait for that connection rather than dial again), the call fails typed
/// naming the server's setting when the never-usable timer (the handshake
/// timeout) fires, or sooner as a timeout when its own deadline is shorter;
/// every such connection is retired as never usable, none kept idle.
pub fn http2_never_usable_is_retired(a: &dyn Adapter) {
    for tls in [false, true] {
        let what = format!("{} MAX_CONCURRENT_STREAMS 0 (tls {tls})", a.name());
        let s = setup(tls, true, Some(0));
        let config = Config { handshake_timeout: Duration::from_millis(300), ..s.config.clone() };
        let client = a.client(config);
        let results = client.send_all(vec![Req::get(&s.url), Req::get(&s.url), Req::get(&s.url)]);
        let mut on_the_connection = 0;
        for r in results {
            match r {
                // Waited for a stream the server never allowed.
                Err((Failure::Connect, msg)) if msg.contains("MAX_CONCURRENT_STREAMS 0") => {}
                // The connection's first stream, handed to it before its
                // SETTINGS arrived and never answered (the HTTP/2
                // implementation holds it back, or the server ignores it).
                Err((Failure::Exchange(_), msg)) if msg.contains("MAX_CONCURRENT_STREAMS 0") => {
                    on_the_connection += 1;
                }
                other => panic!("{what}: expected a typed failure naming the setting, got {other:?}"),
            }
        }
        assert!(on_the_connection <= 1, "{what}: only the first stream was on the connection");
        assert_eq!(s.server.connections(), 1, "{what}: one connection per never-usable period");
        // Bounded wait for the retirement (an event, not a timing verdict).
        let limit = std::time::Instant::now() + Duration::from_secs(10);
        while client.stats().totals.open > 0 {
            assert!(std::time::Instant::now() < limit, "{what}: still open: {:?}", client.stats());
            std::thread::sleep(Duration::from_millis(10));
        }
        let stats = client.stats();
        assert!(stats.closed.get(&CloseReason::NeverUsable).is_some_and(|n| *n >= 1), "{what}: {stats:?}");
        assert_eq!(
            stats.closed.values().sum::<u64>(),
            stats.closed[&CloseReason::NeverUsable],
            "{what}: {stats:?}"
        );
        nothing_in_use(client.as_ref(), &what);

        // The call's own deadline, shorter than the never-usable period: a
        // timeout, still one connection.
        let config = Config {
            handshake_timeout: Duration::from_secs(30),
            call_timeout: Some(Duration::from_millis(300)),
            ..s.config.clone()
        };
        let before = s.server.connections();
        let client = a.client(config);
        match client.send(Req::get(&s.url)) {
            Err((Failure::Timeout, _)) => {}
            other => panic!("{what}: expected the call's timeout, got {other:?}"),
        }
        assert_eq!(s.server.connections() - before, 1, "{what}: one connection until the call's deadline");
    }
}

/// Response header blocks are bounded by the head limit (64 KiB) on HTTP/1.1
/// and HTTP/2 alike: a 100 KiB header field fails the call, typed.
fn header_blocks_are_bounded(a: &dyn Adapter, http2: bool) {
    for tls in [false, true] {
        let what = format!("{} 100 KiB header (tls {tls}, h2 {http2})", a.name());
        let s = setup(tls, http2, None);
        s.server.push([
            Reply::ok("x").with(Fault::HugeHeader(100 * 1024)),
            Reply::ok("x").with(Fault::HugeHeader(100 * 1024)),
        ]);
        let client = a.client(s.config.clone());
        match client.send(Req::get(&s.url)) {
            Err((Failure::Exchange(_), _)) => {}
            other => panic!("{what}: expected a typed failure, got {other:?}"),
        }
        nothing_in_use(client.as_ref(), &what);
    }
}

/// HTTP/1.1 heads: the limit holds.
pub fn header_blocks_are_bounded_http1(a: &dyn Adapter) {
    header_blocks_are_bounded(a, false);
}

/// HTTP/2 header blocks: h2's own default (16 MiB) is not used.
pub fn header_blocks_are_bounded_http2(a: &dyn Adapter) {
    header_blocks_are_bounded(a, true);
}

/// Trailers are bounded by the head limit (64 KiB) on HTTP/1.1 and HTTP/2,
/// cleartext and TLS: 95 KiB of trailer fields — many small ones, or one
/// large one — fail the body with an error naming the limit (never fields
/// cut silently); trailers under it arrive whole and the call succeeds.
fn trailers_are_bounded(a: &dyn Adapter, http2: bool) {
    for tls in [false, true] {
        for (fields, size, over) in [(95, 1000, true), (1, 95 * 1024, true), (3, 100, false)] {
            let what =
                format!("{} {fields} trailer fields of {size} bytes (tls {tls}, h2 {http2})", a.name());
            let s = setup(tls, http2, None);
            s.server.push([Reply::ok("with trailers").with(Fault::Trailers(fields, size))]);
            let client = a.client(s.config.clone());
            let result = client.send(Req::get(&s.url));
            if over {
                match result {
                    Err((Failure::Body, msg)) => {
                        assert!(msg.contains("trailer section larger than 65536 bytes"), "{what}: {msg}");
                    }
                    other => panic!("{what}: expected a body error naming the limit, got {other:?}"),
                }
            } else {
                assert_eq!(ok(result, &what).body, b"with trailers", "{what}");
            }
            nothing_in_use(client.as_ref(), &what);
        }
    }
}

/// HTTP/1.1 trailer sections: the head limit holds.
pub fn trailers_are_bounded_http1(a: &dyn Adapter) {
    trailers_are_bounded(a, false);
}

/// HTTP/2 trailers: the head limit holds (`h2` alone would cut them silently).
pub fn trailers_are_bounded_http2(a: &dyn Adapter) {
    trailers_are_bounded(a, true);
}

/// Runs the hostile suite for an adapter: `hostile_suite!(MyAdapter)`, or
/// `hostile_suite!(MyAdapter, without_http2)` (HTTP/2 cases listed as ignored).
#[macro_export]
macro_rules! hostile_suite {
    ($adapter:expr) => {
        $crate::hostile_suite!(@tests $adapter;
            bytes_after_a_response_are_never_a_response, url_credentials_become_basic_auth,
            call_deadline_holds_while_reading_the_head, interim_responses_are_limited,
            an_early_final_response_wins, body_timeout_bounds_a_slow_body, not_http_fails_at_once,
            header_blocks_are_bounded_http1, trailers_are_bounded_http1,
            url_credentials_never_in_authority_http2, body_timeout_bounds_a_slow_body_http2,
            http2_never_usable_is_retired, header_blocks_are_bounded_http2, trailers_are_bounded_http2);
    };
    ($adapter:expr, without_http2) => {
        $crate::hostile_suite!(@tests $adapter;
            bytes_after_a_response_are_never_a_response, url_credentials_become_basic_auth,
            call_deadline_holds_while_reading_the_head, interim_responses_are_limited,
            an_early_final_response_wins, body_timeout_bounds_a_slow_body, not_http_fails_at_once,
            header_blocks_are_bounded_http1, trailers_are_bounded_http1);
        $crate::hostile_suite!(@skipped $adapter;
            url_credentials_never_in_authority_http2, body_timeout_bounds_a_slow_body_http2,
            http2_never_usable_is_retired, header_blocks_are_bounded_http2, trailers_are_bounded_http2);
    };
    (@tests $adapter:expr; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                $crate::hostile::$name(&$adapter);
            }
        )*
    };
    (@skipped $adapter:expr; $($name:ident),*) => {
        $(
            #[test]
            #[ignore = "skipped: this adapter has no HTTP/2"]
            fn $name() {
                $crate::hostile::$name(&$adapter);
            }
        )*
    };
}
