//! The gateway on smol (no tokio runtime): the same hook-up as on tokio —
//! absolute form as through `HTTP_PROXY`, HTTP/2 prior knowledge on the local
//! hop, CONNECT tunnels, 403 for the undeclared — and 100 concurrent local
//! clients each on a new connection (the PHP pattern) riding the one warm
//! HTTPS/HTTP/2 upstream connection.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use switchyard_smol::{AccessRecord, Client, HttpVersion, Manager, Proxy};
use switchyard_tests::certs::TestCa;
use switchyard_tests::server::{ServerOptions, TestServer};

const LO: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

fn raw(gateway: SocketAddr, request: &str) -> String {
    let mut s = std::net::TcpStream::connect(gateway).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn the_gateway_serves_on_smol() {
    let ca = TestCa::new();
    let upstream = TestServer::start(ServerOptions {
        tls: vec![(vec!["localhost".into()], ca.leaf(&["localhost"]))],
        ..Default::default()
    });
    let up = format!("localhost:{}", upstream.port());
    let log: Arc<Mutex<Vec<AccessRecord>>> = Arc::default();
    let (pem, up2) = (ca.cert_pem.clone(), up.clone());
    let manager = Manager::builder()
        .server(&format!("https://{up}"), 1)
        .client(move |b| b.resolve(&up2, [LO]).add_root_certificate_pem(&pem).no_proxy())
        .build()
        .unwrap();
    smol::block_on(async { manager.ready().await }).unwrap();
    let listener = smol::block_on(smol::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let gateway = listener.local_addr().unwrap();
    let (stop, stopped) = smol::channel::bounded::<()>(1);
    let l = Arc::clone(&log);
    let served =
        smol::spawn(manager.gateway().access_log(move |r| l.lock().unwrap().push(r.clone())).serve_until(
            listener,
            async move {
                let _ = stopped.recv().await;
            },
        ));
    let before = upstream.connections();

    smol::block_on(async {
        // Absolute form; the upstream hop is HTTP/2 over TLS.
        let client =
            Client::builder().proxy(Proxy::all(format!("http://{gateway}")).unwrap()).build().unwrap();
        let r = client.get(format!("http://{up}/hello")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200);
        assert!(
            r.headers()["via"].to_str().unwrap().starts_with("2 switchyard-"),
            "{:?}",
            r.headers()["via"]
        );
        assert_eq!(r.text().await.unwrap(), "hello");
        // HTTP/2 prior knowledge on the local hop.
        let h2 = Client::builder()
            .http_version(HttpVersion::Http2Only)
            .proxy(Proxy::all(format!("http://{gateway}")).unwrap())
            .build()
            .unwrap();
        let r = h2.post(format!("http://{up}/echo")).body(vec![b'q'; 1 << 20]).send().await.unwrap();
        assert_eq!(r.version(), http::Version::HTTP_2);
        assert_eq!(r.bytes().await.unwrap().len(), 1 << 20);
    });
    assert_eq!(upstream.connections(), before, "only the warm connection upstream");

    // 100 concurrent local clients, a new connection each.
    let clients: Vec<_> = (0..100)
        .map(|i| {
            let up = up.clone();
            std::thread::spawn(move || {
                raw(gateway, &format!("GET /bytes/{i} HTTP/1.1\r\nHost: {up}\r\nConnection: close\r\n\r\n"))
            })
        })
        .collect();
    for (i, client) in clients.into_iter().enumerate() {
        let answer = client.join().unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with(&format!("\r\n\r\n{}", "x".repeat(i))), "{answer}");
    }
    assert_eq!(upstream.connections(), before, "100 local connections, still one upstream connection");

    // A CONNECT tunnel to the declared server: TLS end to end.
    smol::block_on(async {
        let tunnelled = Client::builder()
            .proxy(Proxy::all(format!("http://{gateway}")).unwrap())
            .add_root_certificate_pem(&ca.cert_pem)
            .resolve(&up, [LO])
            .build()
            .unwrap();
        let r = tunnelled.get(format!("https://{up}/hello")).send().await.unwrap();
        assert_eq!(r.text().await.unwrap(), "hello");
    });
    assert_eq!(upstream.connections(), before + 1, "the tunnel's own connection");
    // Undeclared: 403 naming the host.
    let answer = raw(
        gateway,
        "GET http://elsewhere.test/ HTTP/1.1\r\nHost: elsewhere.test\r\nConnection: close\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 403") && answer.contains("elsewhere.test"), "{answer}");

    smol::block_on(async {
        stop.send(()).await.unwrap();
        served.await.unwrap();
    });
    assert!(std::net::TcpStream::connect(gateway).is_err(), "no longer accepting");
    let log = log.lock().unwrap();
    assert!(log.iter().filter(|r| r.status == 200 && r.complete).count() >= 102, "{}", log.len());
}

/// The egress bounds on smol too: the backlog past 128 (`gateway::bind`),
/// silent connections closed by the sweeper, room made at the cap, and 504
/// past the response timeout.
#[test]
fn the_gateways_bounds_hold_on_smol() {
    let upstream = TestServer::start(ServerOptions { http1_only: true, ..Default::default() });
    let host = format!("127.0.0.1:{}", upstream.port());
    let manager = Manager::builder()
        .server(&format!("http://{host}"), 1)
        .client(|b| b.no_proxy().http_version(HttpVersion::Http1Only))
        .build()
        .unwrap();
    smol::block_on(async { manager.ready().await }).unwrap();
    let listener = switchyard_smol::gateway::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let gateway = listener.local_addr().unwrap();
    let (stop, stopped) = smol::channel::bounded::<()>(1);
    let served = smol::spawn(
        manager
            .gateway()
            .max_connections(4)
            .idle_timeout(Duration::from_millis(400))
            .response_timeout(Duration::from_millis(300))
            .serve_until(listener, async move {
                let _ = stopped.recv().await;
            }),
    );
    let mut silent: Vec<std::net::TcpStream> =
        (0..4).map(|_| std::net::TcpStream::connect(gateway).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(100));
    let get = |path: &str| {
        raw(gateway, &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"))
    };
    let answer = get("/hello");
    assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("hello"), "{answer}");
    let answer = get("/sleep/5000");
    assert!(answer.starts_with("HTTP/1.1 504"), "{answer}");
    for (i, s) in silent.iter_mut().enumerate() {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = [0u8; 16];
        let closed = match s.read(&mut buf) {
            Ok(n) => n == 0,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        };
        assert!(closed, "silent connection {i} was not closed");
    }
    stop.send_blocking(()).unwrap();
    smol::block_on(served).unwrap();
}
