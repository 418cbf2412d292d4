//! The Manager's gateway on tokio: local clients in plain HTTP (absolute form as
//! through `HTTP_PROXY`, origin form by `Host`, HTTP/2 prior knowledge) carried
//! over the declared HTTPS/HTTP/2 server's warm connections; undeclared hosts and
//! smuggling shapes refused before anything goes upstream; failures as statuses;
//! a graceful shutdown that lets the request in flight finish.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use switchyard_tests::certs::TestCa;
use switchyard_tests::server::{ServerOptions, TestServer};
use switchyard_tokio::{AccessRecord, Client, HttpVersion, Manager, Proxy};

const LO: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

/// A request written by hand on a fresh local connection (the PHP pattern):
/// the whole answer, as text.
fn raw(gateway: SocketAddr, request: &str) -> String {
    let mut s = std::net::TcpStream::connect(gateway).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn status_of(answer: &str) -> u16 {
    answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

#[test]
fn the_gateway_hooks_local_requests_up_to_the_declared_servers() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let ca = TestCa::new();
    let upstream = TestServer::start(ServerOptions {
        tls: vec![(vec!["localhost".into()], ca.leaf(&["localhost"]))],
        ..Default::default()
    });
    let up = format!("localhost:{}", upstream.port());
    // A port nothing listens on: held until the gateway has its own port (so
    // the system cannot give the gateway this one), then closed.
    let closing = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = closing.local_addr().unwrap();
    let log: Arc<Mutex<Vec<AccessRecord>>> = Arc::default();

    let (gateway, stop, served) = rt.block_on(async {
        let pem = ca.cert_pem.clone();
        let up = up.clone();
        let manager = Manager::builder()
            .server(&format!("https://{up}"), 1)
            .server(&format!("http://{closed}"), 0)
            .client(move |b| b.resolve(&up, [LO]).add_root_certificate_pem(&pem).no_proxy())
            .build()
            .unwrap();
        manager.connection("localhost").unwrap();
        tokio::time::timeout(Duration::from_secs(20), manager.ready()).await.unwrap().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gateway = listener.local_addr().unwrap();
        drop(closing);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let log = Arc::clone(&log);
        let served = tokio::spawn(
            manager.gateway().access_log(move |r| log.lock().unwrap().push(r.clone())).serve_until(
                listener,
                async move {
                    let _ = stopped.await;
                },
            ),
        );
        (gateway, stop, served)
    });

    // 1. Absolute form through the gateway as a proxy: an http:// URL for the
    //    https:// server goes out over TLS (the upstream only speaks TLS).
    rt.block_on(async {
        let client =
            Client::builder().proxy(Proxy::all(format!("http://{gateway}")).unwrap()).build().unwrap();
        let r = client.get(format!("http://{up}/hello")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert!(
            r.headers()["via"].to_str().unwrap().starts_with("2 switchyard-"),
            "the upstream hop was HTTP/2 over TLS: {:?}",
            r.headers()["via"]
        );
        assert_eq!(r.text().await.unwrap(), "hello");
        // A streamed upload and its echo, 4 MiB each way.
        let big = vec![b'z'; 4 << 20];
        let r = client.post(format!("http://{up}/echo")).body(big.clone()).send().await.unwrap();
        assert_eq!(r.bytes().await.unwrap().len(), big.len());
    });

    // 2. Origin form by Host, each request on a new local connection: the
    //    upstream sees only the Manager's warm connection.
    let before = upstream.connections();
    for _ in 0..30 {
        let answer = raw(gateway, &format!("GET /hello HTTP/1.1\r\nHost: {up}\r\nConnection: close\r\n\r\n"));
        assert_eq!(status_of(&answer), 200, "{answer}");
        assert!(answer.ends_with("hello"), "{answer}");
    }
    assert_eq!(upstream.connections(), before, "30 local connections, no new upstream connection");

    // 3. Hop-by-hop fields stay on the local hop; Via is added.
    let answer = raw(
        gateway,
        &format!(
            "GET /headers HTTP/1.1\r\nHost: {up}\r\nConnection: close, x-local-hop\r\nx-local-hop: 1\r\n\
             Keep-Alive: timeout=5\r\nProxy-Authorization: Basic c2VjcmV0\r\nx-kept: yes\r\n\r\n"
        ),
    );
    assert_eq!(status_of(&answer), 200, "{answer}");
    let seen = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    assert!(seen.contains("x-kept: yes") && seen.contains("via: 1.1 switchyard-"), "{seen}");
    for gone in ["x-local-hop", "keep-alive", "proxy-authorization"] {
        assert!(!seen.contains(gone), "{gone} was forwarded: {seen}");
    }

    // 4. Never an open proxy: an undeclared host is 403 naming it, never dialled.
    let records = upstream.records().len();
    let answer = raw(
        gateway,
        "GET http://elsewhere.test/x HTTP/1.1\r\nHost: elsewhere.test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&answer), 403, "{answer}");
    assert!(answer.contains("elsewhere.test is not a server"), "{answer}");
    // The status page, on the gateway's own address.
    let answer = raw(
        gateway,
        &format!("GET /.switchyard/status HTTP/1.1\r\nHost: {gateway}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(status_of(&answer), 200, "{answer}");
    assert!(answer.contains(&format!("https://{up} ready (1/1 open)")), "{answer}");
    // 5. Smuggling shapes are refused before anything goes upstream.
    for smuggle in [
        format!("POST /echo HTTP/1.1\r\nHost: {up}\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"),
        format!("POST /echo HTTP/1.1\r\nHost: {up}\r\nContent-Length: 5, 6\r\n\r\nhello!"),
        format!("GET /hello HTTP/1.1\r\nHost: {up}\r\nx-bad\x01name: 1\r\n\r\n"),
    ] {
        let answer = raw(gateway, &smuggle);
        assert_eq!(status_of(&answer), 400, "{smuggle:?} → {answer}");
    }
    assert_eq!(upstream.records().len(), records, "nothing refused reached the upstream");
    // Transfer-Encoding with Content-Length: hyper's server drops the length
    // (RFC 9112 §6.3: Transfer-Encoding overrides it; an intermediary that
    // forwards must remove it), reads the body as chunked, and the gateway
    // re-frames what it forwards: the upstream sees the chunked body (empty
    // here), never the 5 bytes the length claimed.
    let answer = raw(
        gateway,
        &format!(
            "POST /echo HTTP/1.1\r\nHost: {up}\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\
             Connection: close\r\n\r\n0\r\n\r\n"
        ),
    );
    assert_eq!(status_of(&answer), 200, "{answer}");
    assert!(answer.ends_with("\r\n\r\n"), "an empty echo: {answer:?}");

    // 6. HTTP/2 prior knowledge from the local client; the gateway's own port in
    //    the authority means the host.
    rt.block_on(async {
        let h2 = Client::builder()
            .http_version(HttpVersion::Http2Only)
            .resolve(&format!("localhost:{}", gateway.port()), [LO])
            .no_proxy()
            .build()
            .unwrap();
        let r = h2.get(format!("http://localhost:{}/hello", gateway.port())).send().await.unwrap();
        assert_eq!((r.status().as_u16(), r.version()), (200, http::Version::HTTP_2));
        assert_eq!(r.text().await.unwrap(), "hello");
    });

    // 7. No connection to a declared server: 502 or 503 (once it is down), the
    //    error in words.
    let answer = raw(gateway, &format!("GET /x HTTP/1.1\r\nHost: {closed}\r\nConnection: close\r\n\r\n"));
    assert!(matches!(status_of(&answer), 502 | 503), "{answer}");
    assert!(answer.contains("gateway: "), "{answer}");

    // 8. Shutdown lets the request in flight finish, then serve_until returns.
    rt.block_on(async {
        let client =
            Client::builder().proxy(Proxy::all(format!("http://{gateway}")).unwrap()).build().unwrap();
        let slow = tokio::spawn(async move {
            let r = client.get(format!("http://{up}/sleep/300")).send().await.unwrap();
            (r.status(), r.text().await.unwrap())
        });
        while !upstream.records().iter().any(|r| r.path == "/sleep/300") {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        stop.send(()).unwrap();
        let (status, body) = slow.await.unwrap();
        assert_eq!((status.as_u16(), body.as_str()), (200, "slept"));
        tokio::time::timeout(Duration::from_secs(15), served).await.unwrap().unwrap().unwrap();
    });
    assert!(std::net::TcpStream::connect(gateway).is_err(), "no longer accepting");

    // The access log has a line per request, with the upstream connection.
    let log = log.lock().unwrap();
    let ok = log.iter().find(|r| r.status == 200 && r.connection.is_some()).expect("a forwarded request");
    assert!(ok.to_json().contains("\"status\":200"), "{}", ok.to_json());
    assert!(log
        .iter()
        .any(|r| r.status == 403 && r.refused.as_deref().is_some_and(|w| w.contains("elsewhere"))));
}
