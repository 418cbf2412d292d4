//! The ecosystem surface of the async adapters (issue 18), the same checks on
//! tokio and smol: the request API a reqwest user writes, the response
//! helpers, the body traits (`http_body::Body`, `Stream`, `AsyncRead`; request
//! bodies from any `http_body::Body` or `Stream`), the whole-call timeout,
//! several listeners, the ids in a response's extensions, errors one can
//! match, and a tower-http stack (redirects, decompression) over a client.
//! Every check runs against the suite's loopback server (hyper), which
//! answers `/headers`, `/redirect/N`, `/gzip`, `/slow-body/MS`, `/trailers`.
//! Each function panics with what went wrong.

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use switchyard_async::{Body, Client, ClientBuilder, ErrorKind, EventLog, Runtime, TimeoutPhase};

use crate::server::{ServerOptions, TestServer};

fn base(server: &TestServer) -> String {
    format!("http://127.0.0.1:{}", server.port())
}

/// The request API: URLs as `&str`, `String` or `Uri`; `header` with
/// `HeaderName` constants; `headers`; bearer and basic auth; PATCH and any
/// method; query and JSON; default headers and the default `User-Agent`; a
/// URL without a scheme names the URL.
pub async fn request_api<R: Runtime + Default>() {
    let server = TestServer::start(ServerOptions::default());
    let url = format!("{}/headers", base(&server));
    let mut defaults = http::HeaderMap::new();
    defaults.insert("x-team", http::HeaderValue::from_static("switchyard"));
    let client: Client<R> = ClientBuilder::new().default_headers(defaults).build().expect("client");

    let text = client.get(&url).send().await.expect("GET").text().await.expect("body");
    let ua = format!("user-agent: {}", switchyard_async::DEFAULT_USER_AGENT);
    assert!(text.lines().any(|l| l == ua), "default User-Agent: {text}");
    assert!(text.lines().any(|l| l == "x-team: switchyard"), "default header: {text}");

    let mut more = http::HeaderMap::new();
    more.insert("x-one", http::HeaderValue::from_static("1"));
    let text = client
        .get(url.clone()) // a String
        .header(http::header::USER_AGENT, "mine/1.0")
        .header("x-team", "override")
        .headers(more)
        .bearer_auth("t0ken")
        .send()
        .await
        .expect("GET")
        .text()
        .await
        .expect("body");
    for want in ["user-agent: mine/1.0", "x-team: override", "x-one: 1", "authorization: Bearer t0ken"] {
        assert!(text.lines().any(|l| l == want), "{want:?} in {text}");
    }
    assert_eq!(text.lines().filter(|l| l.starts_with("user-agent:")).count(), 1, "{text}");

    let uri: http::Uri = url.parse().expect("uri");
    let text = client.get(uri).basic_auth("ann", Some("s3cret")).send().await.expect("GET").text().await;
    // base64("ann:s3cret")
    assert!(text.expect("body").contains("authorization: Basic YW5uOnMzY3JldA=="));

    let echo = format!("{}/echo", base(&server));
    let r = client.patch(&echo).body("patched").send().await.expect("PATCH");
    assert_eq!(r.text().await.expect("body"), "patched");
    let r = client.request(http::Method::OPTIONS, &echo).send().await.expect("OPTIONS");
    assert!(r.status().is_success());
    let methods: Vec<String> = server.records().iter().map(|r| r.method.clone()).collect();
    assert!(methods.contains(&"PATCH".to_owned()) && methods.contains(&"OPTIONS".to_owned()), "{methods:?}");

    let r = client.get(format!("{}/q?a=1", base(&server))).query(&[("b", "x y"), ("c", "&")]).send().await;
    assert_eq!(r.expect("GET").text().await.expect("body"), "/q?a=1&b=x+y&c=%26");

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Item {
        name: String,
        n: u32,
    }
    let item = Item { name: "bolt".into(), n: 3 };
    let back: Item = client.post(&echo).json(&item).send().await.expect("POST").json().await.expect("json");
    assert_eq!(back, item);
    let text = client.post(&url).json(&item).send().await.expect("POST").text().await.expect("body");
    assert!(text.contains("content-type: application/json"), "{text}");
    let bad = client.get(format!("{}/hello", base(&server))).send().await.expect("GET").json::<Item>().await;
    let bad = bad.expect_err("not JSON");
    assert!(matches!(bad.kind(), ErrorKind::Decode(_)), "{bad:?}");
    assert!(bad.url().is_some_and(|u| u.ends_with("/hello")), "{bad:?}");

    let e = client.get("example.com/x").send().await.expect_err("no scheme");
    assert!(matches!(e.kind(), ErrorKind::InvalidUrl(_)), "{e:?}");
    assert_eq!(e.to_string(), "invalid URL \"example.com/x\"");
    assert!(format!("{e:#}").contains("has no scheme"), "{e:#}");
    let e = client.get(&url).header("bad name", "v").send().await.expect_err("bad header");
    assert!(matches!(e.kind(), ErrorKind::InvalidRequest(_)), "{e:?}");
    let e = ClientBuilder::<Client<R>>::new().user_agent("a\nb").build().expect_err("bad agent");
    assert!(matches!(e.kind(), ErrorKind::Config(_)), "{e:?}");
    let quiet: Client<R> = ClientBuilder::new().user_agent("").build().expect("client");
    let text = quiet.get(&url).send().await.expect("GET").text().await.expect("body");
    assert!(!text.contains("user-agent"), "{text}");
}

/// Response helpers, `error_for_status`, and the call's ids in the
/// response's extensions matching what a listener heard, under concurrency.
pub async fn response_helpers<R: Runtime + Default>() {
    let server = TestServer::start(ServerOptions::default());
    let (one, two) = (EventLog::default(), EventLog::default());
    let client: Client<R> =
        ClientBuilder::new().event_listener(one.clone()).event_listener(two.clone()).build().expect("client");
    let b = client.get(format!("{}/bytes/5", base(&server))).send().await.expect("GET").bytes().await;
    assert_eq!(b.expect("body"), Bytes::from_static(b"xxxxx"));

    let missing = format!("{}/status/404", base(&server));
    let r = client.get(&missing).send().await.expect("a 404 is a response");
    let e = r.error_for_status().expect_err("404");
    assert!(e.is_status() && e.status_code() == Some(http::StatusCode::NOT_FOUND), "{e:?}");
    assert_eq!(e.to_string(), format!("HTTP status 404 Not Found from {missing}"));
    let ok = client.get(format!("{}/hello", base(&server))).send().await.expect("GET");
    assert_eq!(ok.error_for_status().expect("200").text().await.expect("body"), "hello");

    // Concurrent calls: each response's CallId is the one whose events name its URL.
    let calls = (0..8).map(|i| {
        let client = client.clone();
        let url = format!("{}/call/{i}", base(&server));
        async move {
            let r = client.get(&url).send().await.expect("GET");
            let (call, conn) = (r.call_id().expect("call id"), r.connection_id().expect("connection id"));
            let _ = r.bytes().await.expect("body");
            (url, call, conn)
        }
    });
    let mut done = Vec::new();
    for c in calls.collect::<Vec<_>>() {
        done.push(c.await);
    }
    for log in [&one, &two] {
        let events = log.events();
        for (url, call, conn) in &done {
            let start = events
                .iter()
                .find(|e| e.name == "call_start" && e.call == Some(*call))
                .unwrap_or_else(|| panic!("{call} has a call_start"));
            assert!(start.detail.ends_with(url.as_str()), "{call}: {} vs {url}", start.detail);
            let acquired = events
                .iter()
                .find(|e| e.name == "connection_acquired" && e.call == Some(*call))
                .unwrap_or_else(|| panic!("{call} acquired a connection"));
            assert!(acquired.detail.starts_with(&conn.to_string()), "{}: {conn}", acquired.detail);
            assert!(events.iter().any(|e| e.name == "call_end" && e.call == Some(*call)));
        }
    }
    assert_eq!(one.events().len(), two.events().len(), "both listeners heard every event");
}

/// A test body that yields its chunks, then fails if told to.
struct Chunks {
    parts: Vec<&'static str>,
    fail: bool,
}

impl futures_core::Stream for Chunks {
    type Item = Result<&'static str, std::io::Error>;
    fn poll_next(
        mut self: Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        std::task::Poll::Ready(if self.parts.is_empty() {
            self.fail.then(|| Err(std::io::Error::other("disk on fire")))
        } else {
            Some(Ok(self.parts.remove(0)))
        })
    }
}

/// A server speaking only HTTP/2 (prior knowledge) or only HTTP/1.1, and a
/// client that speaks only the same.
fn one_protocol<R: Runtime + Default>(h2: bool) -> (TestServer, Client<R>) {
    let server = TestServer::start(ServerOptions { http2_only: h2, http1_only: !h2, ..Default::default() });
    let version =
        if h2 { switchyard_async::HttpVersion::Http2Only } else { switchyard_async::HttpVersion::Http1Only };
    let client: Client<R> = ClientBuilder::new().http_version(version).build().expect("client");
    (server, client)
}

/// A streamed request body with a `Content-Length` the caller set goes out
/// with that length (not chunked), on HTTP/1.1 and HTTP/2; a stream that ends
/// short of it or runs past it is a typed error naming both numbers, and the
/// connection it broke is not reused.
pub async fn sized_streams<R: Runtime + Default>() {
    for h2 in [false, true] {
        let (server, client) = one_protocol::<R>(h2);
        let b = base(&server);
        let sized = |len: &str, parts: Vec<&'static str>| {
            client
                .post(format!("{b}/echo"))
                .header("content-length", len)
                .body(Body::from_stream(Chunks { parts, fail: false }))
        };
        let r = sized("4", vec!["ab", "cd"]).send().await.expect("a sized stream");
        assert_eq!(r.text().await.expect("echo"), "abcd", "h2={h2}");
        let r = client
            .post(format!("{b}/headers"))
            .header("content-length", "4")
            .body(Body::from_stream(Chunks { parts: vec!["ab", "cd"], fail: false }))
            .send()
            .await
            .expect("headers");
        let seen = r.text().await.expect("headers");
        assert!(seen.contains("content-length: 4") && !seen.contains("transfer-encoding"), "h2={h2}: {seen}");

        for (len, parts, says) in
            [("10", vec!["ab", "cd"], "4 of 10"), ("2", vec!["ab", "cd"], "longer than")]
        {
            let created = client.stats().created;
            let e = match sized(len, parts).send().await {
                Err(e) => e,
                Ok(r) => r.text().await.expect_err("the length does not hold"),
            };
            let text = format!("{e:#}");
            assert!(!e.is_timeout(), "h2={h2}, length {len}: {text}");
            assert!(text.contains(says), "h2={h2}, length {len}: says what is wrong: {text}");
            assert!(matches!(e.kind(), ErrorKind::InvalidRequest(_)), "h2={h2}, length {len}: {e:?}");
            let r = client.get(format!("{b}/hello")).send().await.expect("the client goes on");
            assert_eq!(r.text().await.expect("hello"), "hello");
            if !h2 {
                assert_eq!(
                    client.stats().created,
                    created + 1,
                    "the broken connection was not reused: {text}"
                );
            }
        }
        // Readers: with a length, sent with it and held to it; without, chunked
        // (HTTP/1.1); tokio's and futures' AsyncRead alike.
        let reader = |body: Body| client.post(format!("{b}/headers")).body(body).send();
        for body in
            [Body::from_reader(&b"abcd"[..], Some(4)), Body::from_futures_reader(&b"abcd"[..], Some(4))]
        {
            assert_eq!(body.len(), Some(4));
            let seen = reader(body).await.expect("sized reader").text().await.expect("headers");
            assert!(
                seen.contains("content-length: 4") && !seen.contains("transfer-encoding"),
                "h2={h2}: {seen}"
            );
        }
        let seen = reader(Body::from_reader(&b"abcd"[..], None))
            .await
            .expect("reader")
            .text()
            .await
            .expect("headers");
        assert!(!seen.contains("content-length"), "h2={h2}: {seen}");
        assert_eq!(seen.contains("transfer-encoding: chunked"), !h2, "h2={h2}: {seen}");
        let r = client.post(format!("{b}/echo")).body(Body::from_reader(&b"abcd"[..], Some(4))).send();
        assert_eq!(r.await.expect("echo").text().await.expect("echo"), "abcd", "h2={h2}");
        for (body, says) in [
            (Body::from_reader(&b"ab"[..], Some(10)), "2 of 10"),
            (Body::from_futures_reader(&b"abcdef"[..], Some(3)), "longer than"),
        ] {
            let e = match client.post(format!("{b}/echo")).body(body).send().await {
                Err(e) => e,
                Ok(r) => r.text().await.expect_err("the length does not hold"),
            };
            assert!(matches!(e.kind(), ErrorKind::InvalidRequest(_)), "h2={h2}: {e:?}");
            assert!(format!("{e:#}").contains(says), "h2={h2}: {e:#}");
        }
        // An http_body::Body with an exact size hint keeps its length.
        let full = Body::wrap(http_body_util::Full::new(Bytes::from_static(b"abcd")));
        assert_eq!(full.len(), Some(4));
        let seen = reader(full).await.expect("full").text().await.expect("headers");
        assert!(seen.contains("content-length: 4"), "h2={h2}: {seen}");
        let s = client.stats();
        assert_eq!((s.calls, s.totals.in_use), (0, 0), "h2={h2}: {s:?}");
    }
}

/// The response body as `http_body::Body` (collect with trailers), as a
/// `Stream`, as an `AsyncRead`; request bodies from an `http_body::Body` and
/// a `Stream`, and a failing request body as a typed error, on HTTP/1.1 and
/// HTTP/2 (prior knowledge).
pub async fn body_traits<R: Runtime + Default>() {
    for h2 in [false, true] {
        let (server, client) = one_protocol::<R>(h2);
        let b = base(&server);

        let r = client.get(format!("{b}/trailers")).send().await.expect("GET");
        let collected = r.into_body().collect().await.expect("collect");
        let trailers = collected.trailers().cloned();
        assert_eq!(collected.to_bytes(), Bytes::from_static(b"with trailers"), "h2={h2}");
        if h2 {
            // hyper sends trailers on HTTP/2; on HTTP/1.1 only when asked (TE: trailers).
            assert_eq!(
                trailers.as_ref().and_then(|t| t.get("x-checksum")).map(|v| v.as_bytes()),
                Some(&b"abc"[..])
            );
        }

        let mut r = client.get(format!("{b}/bytes/70000")).send().await.expect("GET");
        let mut total = 0;
        while let Some(chunk) =
            std::future::poll_fn(|cx| futures_core::Stream::poll_next(Pin::new(r.body_mut()), cx)).await
        {
            total += chunk.expect("chunk").len();
        }
        assert_eq!(total, 70000, "Stream, h2={h2}");

        let r = client.get(format!("{b}/bytes/50000")).send().await.expect("GET");
        let mut reader = r.into_body().into_reader();
        let mut out = Vec::new();
        tokio::io::copy(&mut reader, &mut out).await.expect("copy");
        assert_eq!(out.len(), 50000, "AsyncRead, h2={h2}");

        let body = Body::wrap(http_body_util::Full::new(Bytes::from_static(b"from a Full")));
        let r = client.post(format!("{b}/echo")).body(body).send().await.expect("POST");
        assert_eq!(r.text().await.expect("echo"), "from a Full");
        let body = Body::from_stream(Chunks { parts: vec!["str", "ea", "m"], fail: false });
        let r = client.post(format!("{b}/echo")).body(body).send().await.expect("POST");
        assert_eq!(r.text().await.expect("echo"), "stream");

        let body = Body::from_stream(Chunks { parts: vec!["half"], fail: true });
        let e = client.post(format!("{b}/echo")).body(body).send().await.expect_err("the body fails");
        assert!(format!("{e:#}").contains("disk on fire"), "h2={h2}: {e:#}");
        assert!(matches!(e.kind(), ErrorKind::InvalidRequest(_)), "h2={h2}: {e:?}");
        // The client is still fine, and nothing is left in use.
        let r = client.get(format!("{b}/hello")).send().await.expect("after a failed body");
        assert_eq!(r.text().await.expect("body"), "hello");
        let s = client.stats();
        assert_eq!((s.calls, s.totals.in_use), (0, 0), "h2={h2}: {s:?}");
    }
}

/// The call timeout covers the body; the head timeout only the head; each
/// timeout says its phase and URL.
pub async fn timeouts<R: Runtime + Default>() {
    let server = TestServer::start(ServerOptions::default());
    let b = base(&server);
    let client: Client<R> = ClientBuilder::new().timeout(Duration::from_millis(300)).build().expect("client");
    // The head comes at once, the body after 1.5 s: the call's timeout ends it.
    let r = client.get(format!("{b}/slow-body/1500")).send().await.expect("the head is in time");
    let e = r.text().await.expect_err("the body is late");
    assert!(e.is_timeout() && e.is_body(), "{e:?}");
    // Every timeout is a Timeout of its phase, whatever the phase.
    assert!(matches!(e.kind(), ErrorKind::Timeout(TimeoutPhase::ResponseBody)), "{e:?}");
    assert_eq!(format!("{:?}", e.kind()), "Timeout(ResponseBody)");
    assert_eq!(e.timeout_phase(), Some(TimeoutPhase::ResponseBody), "{e:?}");
    let e = client.get(format!("{b}/sleep/1500")).send().await.expect_err("the head is late");
    assert_eq!(e.timeout_phase(), Some(TimeoutPhase::ResponseHead), "{e:?}");
    assert_eq!(e.to_string(), format!("timed out waiting for the response head from {b}/sleep/1500"));

    // Only the head bounded: a slow body is fine.
    let client: Client<R> =
        ClientBuilder::new().head_timeout(Duration::from_millis(300)).build().expect("client");
    let r = client.get(format!("{b}/slow-body/600")).send().await.expect("head");
    assert_eq!(r.text().await.expect("late but unbounded"), "late");
    let e = client.get(format!("{b}/sleep/1500")).send().await.expect_err("head");
    assert_eq!(e.timeout_phase(), Some(TimeoutPhase::ResponseHead), "{e:?}");
    // Per request: the whole call.
    let r = client.get(format!("{b}/slow-body/1500")).timeout(Duration::from_millis(300)).send().await;
    let e = r.expect("head").text().await.expect_err("per-request timeout covers the body");
    assert_eq!(e.timeout_phase(), Some(TimeoutPhase::ResponseBody), "{e:?}");
    assert!(matches!(e.kind(), ErrorKind::Timeout(TimeoutPhase::ResponseBody)), "{e:?}");
}

/// Errors one can match: connect (refused), DNS, TLS; `Display` is one layer,
/// `source()` the cause, not repeated; `{:#}` the whole chain; `Debug` short.
pub async fn errors<R: Runtime + Default>() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let client: Client<R> = ClientBuilder::new().build().expect("client");
    let url = format!("http://127.0.0.1:{port}/x");
    let e = client.get(&url).send().await.expect_err("refused");
    assert!(e.is_connect() && !e.is_dns() && !e.is_tls() && !e.is_timeout(), "{e:?}");
    assert!(e.is_refused() && !e.is_reset(), "a refused connect is recognisable: {e:?}");
    assert_eq!(format!("{:?}", e.kind()), r#"Connect("connect refused")"#);
    assert_eq!(e.url(), Some(url.as_str()));
    assert_eq!(e.to_string(), format!("no connection to {url}"));
    let source = std::error::Error::source(&e).expect("a source").to_string();
    assert!(!e.to_string().contains(&source), "Display repeats its source: {e} / {source}");
    assert_eq!(format!("{e:#}"), format!("{e}: {source}"));
    assert!(format!("{e:?}").len() < 400, "Debug is short: {e:?}");

    let no_dns: Client<R> = ClientBuilder::new()
        .resolver(crate::adapter::Hermetic(std::collections::BTreeMap::new()))
        .build()
        .expect("client");
    let e = no_dns.get("http://nowhere.test/").send().await.expect_err("no such host");
    assert!(e.is_dns() && e.is_connect(), "{e:?}");

    let tls = TestServer::start(ServerOptions {
        tls: vec![(vec!["localhost".into()], crate::certs::untrusted_leaf(&["localhost"]))],
        ..Default::default()
    });
    let client: Client<R> = ClientBuilder::new()
        .resolve(&format!("localhost:{}", tls.port()), ["127.0.0.1".parse().expect("ip")])
        .build()
        .expect("client");
    let e = client.get(format!("https://localhost:{}/", tls.port())).send().await.expect_err("untrusted");
    assert!(e.is_tls() && e.is_connect(), "{e:?}");
    assert_eq!(e.tls_failure(), Some(switchyard_core::TlsFailure::Certificate), "{e:?}");
    let chain = format!("{e:#}");
    for raw in ["UnknownIssuer", "DnsName(", "Fail {", "BadEncoding"] {
        assert!(!chain.contains(raw), "a raw Rust name in {chain}");
    }
}

/// tower and tower-http over a client: `FollowRedirect` and `Decompression`
/// layers from `ServiceBuilder`, against the loopback server.
pub async fn tower_stack<R: Runtime + Default>() {
    use tower::{Service, ServiceBuilder, ServiceExt};
    let server = TestServer::start(ServerOptions::default());
    let client: Client<R> = ClientBuilder::new().build().expect("client");
    let mut service = ServiceBuilder::new()
        .layer(tower_http::follow_redirect::FollowRedirectLayer::new())
        .layer(tower_http::decompression::DecompressionLayer::new())
        .service(client.clone());
    let get = |path: &str| {
        http::Request::get(format!("{}{path}", base(&server))).body(Body::empty()).expect("request")
    };
    let r = ServiceExt::<http::Request<Body>>::ready(&mut service)
        .await
        .expect("ready")
        .call(get("/redirect/2"))
        .await;
    let r = r.expect("redirects");
    assert_eq!(r.status(), http::StatusCode::OK);
    assert_eq!(r.into_body().collect().await.expect("body").to_bytes(), Bytes::from_static(b"hello"));
    let r =
        ServiceExt::<http::Request<Body>>::ready(&mut service).await.expect("ready").call(get("/gzip")).await;
    let r = r.expect("gzip");
    assert!(r.headers().get("content-encoding").is_none(), "decompressed");
    assert_eq!(r.into_body().collect().await.expect("body").to_bytes(), Bytes::from_static(b"hello, gzip"));
    let paths: Vec<String> = server.records().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/redirect/2", "/redirect/1", "/redirect/0", "/hello", "/gzip"]);
    // The pooled connection carried them all.
    assert_eq!(client.stats().created, 1, "{:?}", client.stats());

    // tower-http's TimeoutLayer (outermost): a late answer becomes a 504 with
    // the response body's Default, and the abandoned call gives its connection up.
    let mut service = ServiceBuilder::new()
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            http::StatusCode::GATEWAY_TIMEOUT,
            std::time::Duration::from_secs(1),
        ))
        .layer(tower_http::follow_redirect::FollowRedirectLayer::new())
        .service(client.clone());
    let r = ServiceExt::<http::Request<Body>>::ready(&mut service)
        .await
        .expect("ready")
        .call(get("/sleep/6000"))
        .await
        .expect("timeout layer");
    assert_eq!(r.status(), http::StatusCode::GATEWAY_TIMEOUT);
    assert!(r.into_body().collect().await.expect("body").to_bytes().is_empty());
    assert_eq!(client.stats().totals.in_use, 0, "{:?}", client.stats());
}

/// Runs `f` with a tokio runtime entered: tower-http's `TimeoutLayer` sleeps on
/// tokio's timer, so on smol (or async-std) a tokio runtime must be entered around
/// the calls that use it (one worker thread drives the timer). switchyard's own
/// timeouts (`timeout`, `read_timeout`, …) need nothing of the kind.
pub fn with_tokio_timer<T>(f: impl FnOnce() -> T) -> T {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_time().build().expect("tokio");
    let _entered = rt.enter();
    f()
}

/// TLS inputs: a root from PEM; a prepared `rustls::ClientConfig` (ALPN still
/// set by the client: HTTP/2 is negotiated); combining it with roots is a
/// configuration error; a bad PEM says "root certificate"; and
/// `danger_accept_invalid_certificates` reaches an untrusted server, with
/// every event of that connection saying the certificate was not verified.
pub async fn tls_inputs<R: Runtime + Default>() {
    let ca = crate::certs::TestCa::new();
    let server = TestServer::start(ServerOptions {
        tls: vec![(vec!["localhost".into()], ca.leaf(&["localhost"]))],
        ..Default::default()
    });
    let authority = format!("localhost:{}", server.port());
    let url = format!("https://{authority}/hello");
    let lo: std::net::IpAddr = "127.0.0.1".parse().expect("ip");

    let client: Client<R> = ClientBuilder::new()
        .resolve(&authority, [lo])
        .add_root_certificate_pem(&ca.cert_pem)
        .build()
        .expect("client");
    let r = client.get(&url).send().await.expect("trusted through a PEM root");
    assert_eq!(r.text().await.expect("body"), "hello");

    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from(ca.cert.clone())).expect("root");
    let prepared = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let client: Client<R> =
        ClientBuilder::new().resolve(&authority, [lo]).tls_config(prepared.clone()).build().expect("client");
    let r = client.get(&url).send().await.expect("a prepared rustls config");
    assert_eq!(r.version(), http::Version::HTTP_2, "ALPN is still the client's");
    let e = ClientBuilder::<Client<R>>::new()
        .tls_config(prepared)
        .add_root_certificate_pem(&ca.cert_pem)
        .build()
        .expect_err("both");
    assert!(matches!(e.kind(), ErrorKind::Config(w) if w.contains("tls_config")), "{e:?}");
    for bad in ["no pem here", "-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n"] {
        let e = ClientBuilder::<Client<R>>::new().add_root_certificate_pem(bad).build().expect_err("bad PEM");
        assert!(e.to_string().contains("root certificate"), "{e}");
    }
    let e = ClientBuilder::<Client<R>>::new()
        .add_root_certificate(b"junk".to_vec())
        .build()
        .expect_err("bad DER");
    assert!(e.to_string().contains("root certificate") && !e.to_string().contains("BadEncoding"), "{e}");

    let untrusted = TestServer::start(ServerOptions {
        tls: vec![(vec!["localhost".into()], crate::certs::untrusted_leaf(&["localhost"]))],
        ..Default::default()
    });
    let authority = format!("localhost:{}", untrusted.port());
    let log = EventLog::default();
    let client: Client<R> = ClientBuilder::new()
        .resolve(&authority, [lo])
        .event_listener(log.clone())
        .danger_accept_invalid_certificates(true)
        .build()
        .expect("client");
    let r = client.get(format!("https://{authority}/hello")).send().await.expect("accepted, unverified");
    assert_eq!(r.text().await.expect("body"), "hello");
    let events = log.events();
    for name in ["secure_connect_end", "connect_end", "connection_acquired", "connection_released"] {
        let e = events.iter().find(|e| e.name == name).unwrap_or_else(|| panic!("{name} in {events:?}"));
        assert!(e.detail.ends_with("[certificate NOT verified]"), "{name}: {}", e.detail);
    }
    assert!(!events.iter().any(|e| e.name == "dns_start" && e.detail.contains("NOT verified")));
}

/// What a `tracing` subscriber saw: spans (name, target, fields as recorded)
/// and events (target, level, fields, the span they are in).
#[derive(Default)]
struct Seen {
    spans: std::sync::Mutex<Vec<(String, String, FieldList)>>,
    events: std::sync::Mutex<Vec<SeenEvent>>,
    /// Each span's metadata, by id - 1 (for `current_span`).
    metadata: std::sync::Mutex<Vec<&'static tracing::Metadata<'static>>>,
    /// Each thread's entered spans, innermost last.
    entered: std::sync::Mutex<std::collections::BTreeMap<String, Vec<u64>>>,
}

/// An event: target, level, fields, and the span it is in (explicit parent,
/// or the thread's current span).
type SeenEvent = (String, tracing::Level, FieldList, Option<u64>);

/// Recorded fields: name, value.
type FieldList = Vec<(String, String)>;

struct Fields(Vec<(String, String)>);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.push((field.name().to_owned(), value.to_owned()));
    }
}

struct Recorder(std::sync::Arc<Seen>, &'static str);

fn thread_key() -> String {
    format!("{:?}", std::thread::current().id())
}

impl tracing::Subscriber for Recorder {
    /// Only the adapter's own target, as `RUST_LOG=switchyard_tokio=debug`
    /// asks: what the check sees is what such a filter shows.
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target() == self.1
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut f = Fields(Vec::new());
        span.record(&mut f);
        let mut spans = self.0.spans.lock().expect("lock");
        spans.push((span.metadata().name().to_owned(), span.metadata().target().to_owned(), f.0));
        self.0.metadata.lock().expect("lock").push(span.metadata());
        tracing::span::Id::from_u64(spans.len() as u64)
    }
    fn record(&self, id: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut f = Fields(Vec::new());
        values.record(&mut f);
        if let Some(s) =
            self.0.spans.lock().expect("lock").get_mut(usize::try_from(id.into_u64()).unwrap_or(0) - 1)
        {
            s.2.extend(f.0);
        }
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut f = Fields(Vec::new());
        event.record(&mut f);
        let parent = match event.parent() {
            Some(id) => Some(id.into_u64()),
            None if event.is_contextual() => {
                self.0.entered.lock().expect("lock").get(&thread_key()).and_then(|s| s.last().copied())
            }
            None => None,
        };
        let level = *event.metadata().level();
        self.0.events.lock().expect("lock").push((event.metadata().target().to_owned(), level, f.0, parent));
    }
    fn current_span(&self) -> tracing_core::span::Current {
        let top = self.0.entered.lock().expect("lock").get(&thread_key()).and_then(|s| s.last().copied());
        let metadata = top.and_then(|id| {
            let index = usize::try_from(id).ok()?.checked_sub(1)?;
            Some((id, *self.0.metadata.lock().expect("lock").get(index)?))
        });
        match metadata {
            Some((id, m)) => tracing_core::span::Current::new(tracing::span::Id::from_u64(id), m),
            None => tracing_core::span::Current::none(),
        }
    }
    fn enter(&self, id: &tracing::span::Id) {
        self.0.entered.lock().expect("lock").entry(thread_key()).or_default().push(id.into_u64());
    }
    fn exit(&self, id: &tracing::span::Id) {
        if let Some(stack) = self.0.entered.lock().expect("lock").get_mut(&thread_key()) {
            if let Some(at) = stack.iter().rposition(|s| *s == id.into_u64()) {
                stack.remove(at);
            }
        }
    }
}

/// One `tracing` span per call under the adapter's crate name, with the
/// method, the URI without its userinfo, the call id (from the call's start,
/// so a failed call has it too) and the status; every core event of the call
/// (DNS, connects, the connection acquired and released) is logged inside the
/// call's span, whichever task delivers it; a failure is a `warn` event with
/// the whole error chain. `send` makes one call and says its status, or how it
/// failed.
pub async fn tracing_spans(target: &'static str, send: impl AsyncFn(String) -> Result<u16, String>) {
    let server = TestServer::start(ServerOptions::default());
    let seen = std::sync::Arc::new(Seen::default());
    let _guard = tracing::subscriber::set_default(Recorder(std::sync::Arc::clone(&seen), target));
    // Other tests in this process may have registered the same callsites
    // with no subscriber interested; ask every callsite again.
    tracing::callsite::rebuild_interest_cache();
    // `localhost`: a DNS lookup (the system's), and on most machines an IPv6
    // attempt that is refused (the server listens on 127.0.0.1 only).
    let url = format!("http://ann:secret@localhost:{}/hello", server.port());
    assert_eq!(send(url).await, Ok(200));
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let refused = format!("http://127.0.0.1:{}/x", closed.local_addr().expect("addr").port());
    drop(closed);
    let failure = send(refused.clone()).await.expect_err("nothing listens there");

    let spans = seen.spans.lock().expect("lock");
    let calls: Vec<(u64, &FieldList)> = spans
        .iter()
        .enumerate()
        .filter(|(_, (name, t, _))| name == "call" && t == target)
        .map(|(i, (_, _, f))| (i as u64 + 1, f))
        .collect();
    let [(ok_span, fields), (failed_span, failed_fields)] = calls[..] else {
        panic!("two `call` spans under {target}: {:?}", *spans)
    };
    let get = |fields: &FieldList, k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(get(fields, "method").as_deref(), Some("GET"));
    assert_eq!(get(fields, "uri"), Some(format!("http://localhost:{}/hello", server.port())), "no userinfo");
    assert_eq!(get(fields, "status").as_deref(), Some("200"));
    assert!(get(fields, "call").is_some_and(|c| !c.is_empty()), "{fields:?}");
    // Recorded once: a formatter that appends records would print it twice.
    let calls_recorded = |f: &FieldList| f.iter().filter(|(k, v)| k == "call" && !v.is_empty()).count();
    assert_eq!(calls_recorded(fields), 1, "the call id recorded once: {fields:?}");
    assert!(
        get(failed_fields, "call").is_some_and(|c| !c.is_empty()),
        "a failed call has its id: {failed_fields:?}"
    );
    assert!(!format!("{:?}", *spans).contains("secret"));

    let events = seen.events.lock().expect("lock");
    let named = |name: &str| -> Vec<&SeenEvent> {
        events
            .iter()
            .filter(|(t, _, f, _)| t == target && f.iter().any(|(k, v)| k == "event" && v == name))
            .collect()
    };
    for name in
        ["dns_start", "dns_end", "connect_start", "connect_end", "connection_acquired", "connection_released"]
    {
        let found = named(name);
        assert!(!found.is_empty(), "a {name} event: {:?}", *events);
        assert!(
            found.iter().filter(|e| e.3 == Some(ok_span) || e.3 == Some(failed_span)).count() == found.len(),
            "every {name} is inside a call's span: {found:?}"
        );
    }
    for e in named("connect_failed") {
        assert!(
            e.3 == Some(ok_span) || e.3 == Some(failed_span),
            "connect_failed inside its call's span: {e:?}"
        );
    }
    assert!(
        events
            .iter()
            .any(|(t, _, f, p)| t == target && *p == Some(ok_span) && f.iter().any(|(_, v)| v == "call end")),
        "{:?}",
        *events
    );
    let warned: Vec<&SeenEvent> = events
        .iter()
        .filter(|(t, level, f, p)| {
            // Under the adapter's own target, as its span: a filter on the
            // adapter's crate name (RUST_LOG=switchyard_tokio=debug) shows it.
            t == target
                && *level == tracing::Level::WARN
                && *p == Some(failed_span)
                && f.iter().any(|(k, v)| k == "error" && v.contains(&refused) && v.contains("refused"))
        })
        .collect();
    assert_eq!(warned.len(), 1, "the failure at WARN with its chain, in its span ({failure}): {:?}", *events);
}

/// Runs a future that never waits (a blocking adapter's calls inside an async
/// check) to its end.
///
/// # Panics
/// When the future waits.
pub fn ready<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("the future waited"),
    }
}
