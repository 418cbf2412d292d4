//! The gateway's other paths on tokio: CONNECT tunnels to declared servers
//! only, HTTP/2 trailers passed through, the access log's bytes and connection
//! sources, a server stopped and restarted (503 with Retry-After, then 200),
//! shutdown under load losing no request, and real clients (curl, nghttp)
//! through it.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use switchyard_tests::certs::TestCa;
use switchyard_tests::server::{ServerOptions, TestServer};
use switchyard_tests::streams::StreamServer;
use switchyard_tokio::{AccessRecord, Backoff, Client, HttpVersion, Manager, Proxy, WarmPolicy};

const LO: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// A request written by hand on a fresh local connection: the whole answer.
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

type Log = Arc<Mutex<Vec<AccessRecord>>>;

/// A gateway over `manager` on an ephemeral loopback port, logging into `log`;
/// stops when the sender is used or dropped.
fn serve(
    rt: &tokio::runtime::Runtime,
    manager: &Manager,
    log: &Log,
) -> (SocketAddr, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<std::io::Result<()>>) {
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gateway = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let log = Arc::clone(log);
        let served = tokio::spawn(
            manager
                .gateway()
                .shutdown_grace(Duration::from_secs(10))
                .access_log(move |r| log.lock().unwrap().push(r.clone()))
                .serve_until(listener, async move {
                    let _ = stopped.await;
                }),
        );
        (gateway, stop, served)
    })
}

/// A TLS upstream for `localhost`, and a Manager declaring it (1 warm connection).
fn tls_upstream(rt: &tokio::runtime::Runtime) -> (TestCa, TestServer, String, Manager) {
    let ca = TestCa::new();
    let upstream = TestServer::start(ServerOptions {
        tls: vec![(vec!["localhost".into()], ca.leaf(&["localhost"]))],
        ..Default::default()
    });
    let up = format!("localhost:{}", upstream.port());
    let manager = rt.block_on(async {
        let (pem, up) = (ca.cert_pem.clone(), up.clone());
        let manager = Manager::builder()
            .server(&format!("https://{up}"), 1)
            .client(move |b| b.resolve(&up, [LO]).add_root_certificate_pem(&pem).no_proxy())
            .build()
            .unwrap();
        tokio::time::timeout(Duration::from_secs(20), manager.ready()).await.unwrap().unwrap();
        manager
    });
    (ca, upstream, up, manager)
}

#[test]
fn connect_tunnels_reach_declared_servers_only_and_are_logged() {
    let rt = runtime();
    let (ca, upstream, up, manager) = tls_upstream(&rt);
    let log: Log = Arc::default();
    let (gateway, stop, served) = serve(&rt, &manager, &log);
    let handshakes = upstream.handshakes();
    rt.block_on(async {
        // https:// through the gateway as a proxy: the client CONNECTs, then
        // speaks TLS to the upstream end to end.
        let client = Client::builder()
            .proxy(Proxy::all(format!("http://{gateway}")).unwrap())
            .add_root_certificate_pem(&ca.cert_pem)
            .resolve(&up, [LO])
            .http_version(HttpVersion::Http1Only)
            .build()
            .unwrap();
        let r = client.get(format!("https://{up}/hello")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.headers().get("via").is_none(), "a tunnel's bytes are the client's own");
        assert_eq!(r.text().await.unwrap(), "hello");
        drop(client); // closes the tunnel
    });
    assert_eq!(upstream.handshakes(), handshakes + 1, "the TLS handshake went through the tunnel");
    // Another port of a declared host, or any other host: 403, never dialled.
    let connections = upstream.connections();
    for target in ["localhost:1", "elsewhere.test:443", "127.0.0.1:22"] {
        let answer = raw(gateway, &format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"));
        assert_eq!(status_of(&answer), 403, "{target}: {answer}");
        assert!(answer.contains("not a server this gateway tunnels to"), "{answer}");
    }
    assert_eq!(upstream.connections(), connections, "refused tunnels dialled nothing");
    // The tunnel's record comes when it closes: its bytes each way.
    let deadline = Instant::now() + Duration::from_secs(10);
    let tunnel = loop {
        if let Some(r) =
            log.lock().unwrap().iter().find(|r| r.method == http::Method::CONNECT && r.status == 200)
        {
            break r.clone();
        }
        assert!(Instant::now() < deadline, "no tunnel record");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(tunnel.request_bytes > 100 && tunnel.response_bytes > 100, "{tunnel:?}");
    assert!(tunnel.complete && tunnel.to_json().contains("\"source\":\"new\""), "{}", tunnel.to_json());
    stop.send(()).unwrap();
    rt.block_on(served).unwrap().unwrap();
}

#[test]
fn the_access_log_counts_bytes_and_says_how_the_connection_was_found() {
    let rt = runtime();
    let (_ca, _upstream, up, manager) = tls_upstream(&rt);
    let log: Log = Arc::default();
    let (gateway, stop, served) = serve(&rt, &manager, &log);
    let answer =
        raw(gateway, &format!("GET /bytes/5000 HTTP/1.1\r\nHost: {up}\r\nConnection: close\r\n\r\n"));
    assert_eq!(status_of(&answer), 200, "{answer}");
    let answer = raw(
        gateway,
        &format!(
            "POST /echo HTTP/1.1\r\nHost: {up}\r\nContent-Length: 7\r\nConnection: close\r\n\r\npayload"
        ),
    );
    assert!(answer.ends_with("payload"), "{answer}");
    stop.send(()).unwrap();
    rt.block_on(served).unwrap().unwrap();
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 2, "{log:?}");
    let (bytes, echo) = (&log[0], &log[1]);
    assert_eq!((bytes.response_bytes, bytes.request_bytes, bytes.complete), (5000, 0, true), "{bytes:?}");
    assert_eq!((echo.response_bytes, echo.request_bytes), (7, 7), "{echo:?}");
    // The Manager's warm connection carried both: HTTP/2 over TLS, so a share.
    for r in [bytes, echo] {
        assert!(r.connection.is_some() && r.total_time >= r.head_time, "{r:?}");
        assert!(
            r.to_json().contains("\"source\":\"shared\"") || r.to_json().contains("\"source\":\"pooled\""),
            "{}",
            r.to_json()
        );
        assert!(r.to_string().contains("conn "), "{r}");
    }
}

#[test]
fn http2_trailers_pass_through_the_gateway() {
    let rt = runtime();
    let upstream = StreamServer::start();
    let up = upstream.addr;
    let manager = rt.block_on(async {
        let manager = Manager::builder()
            .server(&format!("http://{up}"), 1)
            .client(|b| b.http_version(HttpVersion::Http2Only).no_proxy())
            .build()
            .unwrap();
        tokio::time::timeout(Duration::from_secs(20), manager.ready()).await.unwrap().unwrap();
        manager
    });
    let log: Log = Arc::default();
    let (gateway, stop, served) = serve(&rt, &manager, &log);
    rt.block_on(async {
        let local = Client::builder()
            .http_version(HttpVersion::Http2Only)
            .proxy(Proxy::all(format!("http://{gateway}")).unwrap())
            .build()
            .unwrap();
        let mut r = local.get(format!("http://{up}/trailers")).send().await.unwrap();
        assert_eq!((r.status().as_u16(), r.version()), (200, http::Version::HTTP_2));
        let mut data = Vec::new();
        let mut trailers = None;
        while let Some(frame) = r.body_mut().frame().await {
            match frame.unwrap().into_data() {
                Ok(d) => data.extend_from_slice(&d),
                Err(frame) => trailers = frame.into_trailers().ok(),
            }
        }
        assert_eq!(data, b"abc");
        let trailers = trailers.expect("the upstream's trailers reached the local client");
        assert_eq!(trailers["x-checksum"], "42");
    });
    stop.send(()).unwrap();
    rt.block_on(served).unwrap().unwrap();
}

#[test]
fn a_server_stopped_is_503_with_retry_after_and_200_once_it_is_back() {
    let rt = runtime();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut upstream = Some(TestServer::start_on(listener, ServerOptions::default()));
    let manager = rt.block_on(async {
        let policy = WarmPolicy {
            min_connections: 1,
            down_after: Duration::from_millis(200),
            backoff: Backoff {
                initial: Duration::from_millis(50),
                multiplier: 1.5,
                jitter: 0.0,
                max: Duration::from_millis(300),
            },
            ..WarmPolicy::default()
        };
        let manager = Manager::builder()
            .server_with(&format!("http://127.0.0.1:{port}"), policy)
            .client(|b| b.no_proxy().http_version(HttpVersion::Http1Only))
            .build()
            .unwrap();
        tokio::time::timeout(Duration::from_secs(20), manager.ready()).await.unwrap().unwrap();
        manager
    });
    let log: Log = Arc::default();
    let (gateway, stop, served) = serve(&rt, &manager, &log);
    let get = || {
        raw(gateway, &format!("GET /hello HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"))
    };
    assert_eq!(status_of(&get()), 200);
    drop(upstream.take()); // stopped: its connections close, re-warming fails
    let until = |wanted: u16| {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let answer = get();
            if status_of(&answer) == wanted {
                return answer;
            }
            assert!(matches!(status_of(&answer), 200 | 502 | 503), "{answer}");
            assert!(Instant::now() < deadline, "never {wanted}; last: {answer}");
            std::thread::sleep(Duration::from_millis(25));
        }
    };
    let down = until(503);
    assert!(down.to_ascii_lowercase().contains("retry-after: "), "{down}");
    assert!(down.contains("is down"), "{down}");
    // Back on the same port: the Manager's backoff finds it, requests flow again.
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let _upstream = TestServer::start_on(listener, ServerOptions::default());
    let back = until(200);
    assert!(back.ends_with("hello"), "{back}");
    stop.send(()).unwrap();
    rt.block_on(served).unwrap().unwrap();
}

#[test]
fn shutdown_under_load_loses_no_request() {
    let rt = runtime();
    let (_ca, upstream, up, manager) = tls_upstream(&rt);
    let log: Log = Arc::default();
    let (gateway, stop, served) = serve(&rt, &manager, &log);
    // 40 local clients, each on its own connection (the PHP pattern), all in
    // flight when shutdown begins.
    let clients: Vec<_> = (0..40)
        .map(|_| {
            let up = up.clone();
            std::thread::spawn(move || {
                raw(gateway, &format!("GET /sleep/400 HTTP/1.1\r\nHost: {up}\r\nConnection: close\r\n\r\n"))
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while upstream.records().iter().filter(|r| r.path == "/sleep/400").count() < 40 {
        assert!(Instant::now() < deadline, "not every request reached the upstream");
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.send(()).unwrap();
    for client in clients {
        let answer = client.join().unwrap();
        assert_eq!(status_of(&answer), 200, "{answer}");
        assert!(answer.ends_with("slept"), "{answer}");
    }
    rt.block_on(served).unwrap().unwrap();
    assert!(std::net::TcpStream::connect(gateway).is_err(), "no longer accepting");
    assert_eq!(log.lock().unwrap().iter().filter(|r| r.status == 200 && r.complete).count(), 40);
}

/// curl and nghttp as the local clients (the interop suite's rule: missing
/// tools skip with a notice, and fail with `SWITCHYARD_INTEROP=require`).
#[test]
fn curl_and_nghttp_through_the_gateway() {
    let Some(curl) = switchyard_tests::interop::need("curl", "curl") else { return };
    let rt = runtime();
    let (ca, upstream, up, manager) = tls_upstream(&rt);
    let log: Log = Arc::default();
    let (gateway, stop, served) = serve(&rt, &manager, &log);
    let dir = std::env::temp_dir().join(format!("switchyard-gateway-curl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, &ca.cert_pem).unwrap();
    let body_file = dir.join("body");
    std::fs::write(&body_file, vec![b'b'; 100_000]).unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(&curl).args(["-sS", "--max-time", "20"]).args(args).output().unwrap();
        assert!(out.status.success(), "curl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let before = upstream.connections();
    // As HTTP_PROXY: absolute form, the upstream reached over TLS.
    assert_eq!(run(&["-x", &format!("http://{gateway}"), &format!("http://{up}/hello")]).0, "hello");
    // By Host, as a reverse proxy.
    assert_eq!(run(&["-H", &format!("Host: {up}"), &format!("http://{gateway}/hello")]).0, "hello");
    // HTTP/2 with prior knowledge on the local hop.
    let (out, err) = run(&[
        "-v",
        "--http2-prior-knowledge",
        "-H",
        &format!("Host: {up}"),
        &format!("http://{gateway}/hello"),
    ]);
    assert_eq!(out, "hello");
    assert!(err.contains("HTTP/2 200"), "{err}");
    // Expect: 100-continue is answered before the body is sent.
    let (out, err) = run(&[
        "-v",
        "-H",
        "Expect: 100-continue",
        "--data-binary",
        &format!("@{}", body_file.display()),
        "-x",
        &format!("http://{gateway}"),
        &format!("http://{up}/echo"),
    ]);
    assert_eq!(out.len(), 100_000);
    assert!(err.contains("HTTP/1.1 100 Continue"), "{err}");
    // https:// through the gateway: a CONNECT tunnel, TLS end to end.
    let (out, _) = run(&[
        "--cacert",
        &ca_file.to_string_lossy(),
        "--resolve",
        &format!("{up}:127.0.0.1"),
        "-x",
        &format!("http://{gateway}"),
        &format!("https://{up}/hello"),
    ]);
    assert_eq!(out, "hello");
    assert_eq!(upstream.connections(), before + 1, "only the tunnel opened a connection upstream");
    // An undeclared host through curl: 403 naming it.
    let out = Command::new(&curl)
        .args([
            "-s",
            "-o",
            "-",
            "-w",
            "%{http_code}",
            "-x",
            &format!("http://{gateway}"),
            "http://elsewhere.test/",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.ends_with("403") && text.contains("elsewhere.test"), "{text}");

    if let Some(nghttp) = switchyard_tests::interop::need("nghttp", "nghttp2-client") {
        let out = Command::new(nghttp)
            .args(["-v", "-H", &format!(":authority: {up}"), &format!("http://{gateway}/hello")])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "nghttp: {stdout} {}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains(":status: 200") && stdout.contains("hello["), "{stdout}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    stop.send(()).unwrap();
    rt.block_on(served).unwrap().unwrap();
}

/// nginx as the upstream (TLS, HTTP/2 by ALPN), curl and nghttp as local
/// clients each opening a new connection per request: nginx's own log shows
/// every forwarded request on the Manager's one warm HTTP/2 connection.
#[test]
fn nginx_upstream_with_curl_and_nghttp_clients() {
    use switchyard_tests::interop::{need, Nginx, NginxOptions};
    let Some(nginx) = Nginx::start(NginxOptions::default()) else { return };
    let Some(curl) = need("curl", "curl") else { return };
    let rt = runtime();
    let up = format!("localhost:{}", nginx.tls_port);
    let manager = rt.block_on(async {
        let (pem, up) = (nginx.ca.cert_pem.clone(), up.clone());
        let manager = Manager::builder()
            .server(&format!("https://{up}"), 1)
            .client(move |b| b.resolve(&up, [LO]).add_root_certificate_pem(&pem).no_proxy())
            .build()
            .unwrap();
        tokio::time::timeout(Duration::from_secs(20), manager.ready()).await.unwrap().unwrap();
        manager
    });
    let log: Log = Arc::default();
    let (gateway, stop, served) = serve(&rt, &manager, &log);
    let proxy = format!("http://{gateway}");
    let curls: Vec<_> = (0..20)
        .map(|_| {
            let (curl, proxy, url) = (curl.clone(), proxy.clone(), format!("http://{up}/hello"));
            std::thread::spawn(move || {
                Command::new(curl).args(["-sS", "--max-time", "20", "-x", &proxy, &url]).output().unwrap()
            })
        })
        .collect();
    for c in curls {
        let out = c.join().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hello", "{}", String::from_utf8_lossy(&out.stderr));
    }
    let big = Command::new(&curl)
        .args(["-sS", "--max-time", "20", "-H", &format!("Host: {up}"), &format!("http://{gateway}/big")])
        .output()
        .unwrap();
    assert_eq!(big.stdout.len(), 1 << 20, "{}", String::from_utf8_lossy(&big.stderr));
    let mut hits = 21;
    if let Some(nghttp) = need("nghttp", "nghttp2-client") {
        let out = Command::new(nghttp)
            .args(["-H", &format!(":authority: {up}"), &format!("http://{gateway}/hello")])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hello", "{}", String::from_utf8_lossy(&out.stderr));
        hits += 1;
    }
    let seen = nginx.hits(hits);
    assert_eq!(seen.len(), hits, "{seen:?}");
    let connections: std::collections::BTreeSet<u64> = seen.iter().map(|h| h.connection).collect();
    assert_eq!(connections.len(), 1, "every request on the one warm connection: {seen:?}");
    assert!(seen.iter().all(|h| h.protocol == "HTTP/2.0" && h.status == 200), "{seen:?}");
    stop.send(()).unwrap();
    rt.block_on(served).unwrap().unwrap();
}
