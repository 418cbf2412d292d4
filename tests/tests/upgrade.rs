//! Connections handed over: a `101 Switching Protocols` taken over by the
//! caller (`upgrade()`, on tokio and smol), the request that asks for it sent
//! alone on HTTP/1.1, an answer that does not switch refused with a typed
//! error — and the gateway passing a protocol switch (WebSocket-style) through,
//! and opening its `CONNECT` tunnels from the pool (connector hook, route
//! memory) rather than dialling on its own.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use switchyard_tests::certs::TestCa;
use switchyard_tests::server::{ServerOptions, TestServer};
use switchyard_tokio::switchyard_core::Source;
use switchyard_tokio::{Client, ErrorKind, EventLog};

const LO: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// An upstream with a protocol of its own: a request whose `Upgrade` is
/// `echo` (named by `Connection`) gets `101` with `EARLY` written behind the
/// head in the same write, then every byte back until the client closes;
/// `Upgrade: refuse` gets `200 no`; anything else `200 plain`, kept alive.
/// Each request's head is kept, in order.
struct EchoUpstream {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    heads: Arc<Mutex<Vec<String>>>,
}

impl EchoUpstream {
    fn start() -> EchoUpstream {
        let listener = TcpListener::bind((LO, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let (count, kept) = (Arc::clone(&connections), Arc::clone(&heads));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                count.fetch_add(1, Ordering::SeqCst);
                let kept = Arc::clone(&kept);
                std::thread::spawn(move || serve(stream, &kept));
            }
        });
        EchoUpstream { addr, connections, heads }
    }
    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, heads: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        heads.lock().unwrap().push(head.clone());
        let lower = head.to_ascii_lowercase();
        let asks = lower.lines().any(|l| l.starts_with("connection:") && l.contains("upgrade"));
        let protocol = lower.lines().find_map(|l| l.strip_prefix("upgrade:")).map(str::trim);
        match (asks, protocol) {
            (true, Some("echo")) => {
                let _ = out.write_all(
                    b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: echo\r\nX-Echo: 1\r\n\r\nEARLY",
                );
                // Whatever the reader already holds past the head, then the socket's.
                let mut buf = [0u8; 4096];
                loop {
                    let pending = reader.buffer().to_vec();
                    if !pending.is_empty() {
                        reader.consume(pending.len());
                        if out.write_all(&pending).is_err() {
                            return;
                        }
                        continue;
                    }
                    match reader.get_mut().read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if out.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
            }
            (true, Some("refuse")) => {
                let _ = out.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nno");
            }
            _ => {
                let _ = out.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nplain");
            }
        }
    }
}

fn closed_exclusive(log: &EventLog) -> usize {
    log.events()
        .iter()
        .filter(|e| e.name == "connection_closed" && e.detail.contains("exclusive use"))
        .count()
}

/// The echo upstream, a tokio client recording its events, and the URL.
fn echo_and_client() -> (EchoUpstream, EventLog, Client, String) {
    let upstream = EchoUpstream::start();
    let log = EventLog::default();
    let client = Client::builder().event_listener(log.clone()).build().unwrap();
    let url = format!("http://{}/chat", upstream.addr);
    (upstream, log, client, url)
}

/// A GET asking to switch to `protocol` (named by `Connection`).
async fn ask(client: &Client, url: &str, protocol: &'static str) -> switchyard_tokio::Response {
    client.get(url).header("connection", "upgrade").header("upgrade", protocol).send().await.unwrap()
}

#[test]
fn a_101_hands_the_connection_over_with_the_bytes_behind_the_head() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rt = runtime();
    let (upstream, log, client, url) = echo_and_client();
    rt.block_on(async {
        // A pooled connection first: an idle HTTP/1.1 connection may carry
        // the upgrade (it is out of the pool from then on).
        let plain = client.get(&url).send().await.unwrap();
        assert_eq!(plain.connection_source(), Some(Source::New));
        assert_eq!(plain.text().await.unwrap(), "plain");
        let response = ask(&client, &url, "echo").await;
        assert_eq!(response.status(), 101);
        assert_eq!(response.connection_source(), Some(Source::Pooled));
        assert_eq!(response.headers()["x-echo"], "1");
        let call = response.call_id().unwrap();
        let mut socket = response.upgrade().unwrap();
        assert_eq!(socket.buffered(), b"EARLY", "the bytes behind the head come first");
        let mut early = [0u8; 5];
        socket.read_exact(&mut early).await.unwrap();
        assert_eq!(&early, b"EARLY");
        for message in [&b"ping"[..], b"a longer message, twice over", &[0u8, 255, 13, 10][..]] {
            socket.write_all(message).await.unwrap();
            let mut back = vec![0u8; message.len()];
            socket.read_exact(&mut back).await.unwrap();
            assert_eq!(back, message);
        }
        // The call ended with the switch; the pool counted the connection closed.
        assert!(log.names_for(call).contains(&"call_end"), "{:?}", log.names_for(call));
        assert_eq!(closed_exclusive(&log), 1, "{:#?}", log.events());
        assert_eq!(client.stats().totals.idle, 0, "the upgraded connection left the pool");
        // Plain requests get a connection of their own, pooled as usual.
        let again = client.get(&url).send().await.unwrap();
        assert_eq!(again.connection_source(), Some(Source::New));
        assert_eq!(again.text().await.unwrap(), "plain");
        let again = client.get(&url).send().await.unwrap();
        assert_eq!(again.connection_source(), Some(Source::Pooled));
        assert_eq!(again.text().await.unwrap(), "plain");
        drop(socket);
    });
    assert_eq!(upstream.connections(), 2);
}

#[test]
fn an_answer_that_does_not_switch_cannot_be_upgraded_and_its_connection_is_not_reused() {
    let rt = runtime();
    let (upstream, _log, client, url) = echo_and_client();
    rt.block_on(async {
        let response = ask(&client, &url, "refuse").await;
        assert_eq!(response.status(), 200);
        let e = response.upgrade().unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Upgrade(_)), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("200 OK") && text.contains("101") && text.contains("/chat"), "{text}");
        // Through the body: the same refusal, in the body's words.
        let response = ask(&client, &url, "refuse").await;
        let e = response.into_body().upgrade().unwrap_err();
        assert!(e.to_string().contains("did not switch protocols"), "{e}");
        // Both connections were the upgrades' own: neither is pooled.
        let plain = client.get(&url).send().await.unwrap();
        assert_eq!(plain.connection_source(), Some(Source::New));
        assert_eq!(plain.text().await.unwrap(), "plain");
    });
    assert_eq!(upstream.connections(), 3);
}

#[test]
fn a_request_that_asks_to_switch_goes_on_http1_even_where_http2_is_spoken() {
    let rt = runtime();
    let ca = TestCa::new();
    let server = TestServer::start(ServerOptions {
        tls: vec![(vec!["localhost".into()], ca.leaf(&["localhost"]))],
        ..Default::default()
    });
    let client = Client::builder()
        .add_root_certificate_pem(&ca.cert_pem)
        .resolve(&format!("localhost:{}", server.port()), [LO])
        .build()
        .unwrap();
    let url = format!("https://localhost:{}/hello", server.port());
    rt.block_on(async {
        let plain = client.get(&url).send().await.unwrap();
        assert_eq!(plain.version(), http::Version::HTTP_2);
        plain.text().await.unwrap();
        let asked = ask(&client, &url, "websocket").await;
        assert_eq!(asked.version(), http::Version::HTTP_11, "Upgrade exists on HTTP/1.1 only");
        assert_eq!(asked.connection_source(), Some(Source::New));
        // The server does not switch: the answer is an ordinary response.
        assert_eq!(asked.status(), 200);
        assert!(matches!(asked.upgrade().unwrap_err().kind(), ErrorKind::Upgrade(_)));
    });
    let versions: Vec<_> = server.records().iter().map(|r| r.version).collect();
    assert_eq!(versions, [http::Version::HTTP_2, http::Version::HTTP_11]);
}

#[test]
fn smol_takes_a_101_over_too() {
    use smol::io::{AsyncReadExt, AsyncWriteExt};
    let upstream = EchoUpstream::start();
    let client = switchyard_smol::Client::new().unwrap();
    let url = format!("http://{}/chat", upstream.addr);
    smol::block_on(async {
        let response =
            client.get(&url).header("connection", "upgrade").header("upgrade", "echo").send().await.unwrap();
        assert_eq!(response.status(), 101);
        let mut socket = switchyard_smol::ResponseExt::upgrade(response).unwrap();
        let mut early = [0u8; 5];
        socket.read_exact(&mut early).await.unwrap();
        assert_eq!(&early, b"EARLY");
        socket.write_all(b"over smol").await.unwrap();
        let mut back = [0u8; 9];
        socket.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"over smol");
    });
}

// ---------------------------------------------------------------------------
// The gateway.

type Log = Arc<Mutex<Vec<switchyard_tokio::AccessRecord>>>;

fn serve_gateway(
    rt: &tokio::runtime::Runtime,
    manager: &switchyard_tokio::Manager,
    log: &Log,
) -> (SocketAddr, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<std::io::Result<()>>) {
    rt.block_on(async {
        let listener = switchyard_tokio::gateway::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let log = Arc::clone(log);
        let served = tokio::spawn(
            manager
                .gateway()
                .shutdown_grace(Duration::from_secs(5))
                .access_log(move |r| log.lock().unwrap().push(r.clone()))
                .serve_until(listener, async move {
                    let _ = stopped.await;
                }),
        );
        (addr, stop, served)
    })
}

/// Reads a response head (to its blank line) byte by byte, leaving what
/// follows on the socket.
fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

#[test]
fn the_gateway_passes_a_protocol_switch_through() {
    let rt = runtime();
    let upstream = EchoUpstream::start();
    let server = format!("http://{}", upstream.addr);
    let manager = switchyard_tokio::Manager::builder().server(&server, 0).build().unwrap();
    let log: Log = Arc::default();
    let (gateway, stop, served) = serve_gateway(&rt, &manager, &log);
    let mut s = TcpStream::connect(gateway).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {server}/chat HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n",
        upstream.addr
    )
    .unwrap();
    let head = read_head(&mut s);
    let lower = head.to_ascii_lowercase();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        lower.contains("\r\nupgrade: echo\r\n") && lower.contains("\r\nconnection: upgrade\r\n"),
        "{head}"
    );
    assert!(lower.contains("\r\nx-echo: 1\r\n") && lower.contains("\r\nvia: 1.1 "), "{head}");
    let mut early = [0u8; 5];
    s.read_exact(&mut early).unwrap();
    assert_eq!(&early, b"EARLY", "the upstream's first bytes behind its 101 reach the client");
    for message in [&b"hello through the gateway"[..], &[0u8; 70_000][..]] {
        s.write_all(message).unwrap();
        let mut back = vec![1u8; message.len()];
        s.read_exact(&mut back).unwrap();
        assert_eq!(back, message);
    }
    // The upstream saw the switch asked for, and the gateway's Via.
    let asked =
        upstream.heads().into_iter().find(|h| h.to_ascii_lowercase().contains("upgrade: echo")).unwrap();
    assert!(asked.to_ascii_lowercase().contains("connection: upgrade"), "{asked}");
    assert!(asked.to_ascii_lowercase().contains("via: 1.1 "), "{asked}");
    drop(s);
    // `Upgrade` that `Connection` does not name is an ordinary hop-by-hop
    // field: removed, the request answered as any other.
    let mut s = TcpStream::connect(gateway).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {server}/plain HTTP/1.1\r\nHost: {}\r\nUpgrade: echo\r\n\r\n", upstream.addr).unwrap();
    let head = read_head(&mut s);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut body = [0u8; 5];
    s.read_exact(&mut body).unwrap();
    assert_eq!(&body, b"plain");
    let plain = upstream.heads().into_iter().find(|h| h.contains("/plain")).unwrap();
    assert!(!plain.to_ascii_lowercase().contains("upgrade"), "{plain}");
    let switched = log.lock().unwrap().iter().find(|r| r.status == 101).cloned();
    assert!(switched.is_some(), "{:?}", log.lock().unwrap());
    stop.send(()).unwrap();
    rt.block_on(served).unwrap().unwrap();
}

#[test]
fn the_gateways_tunnels_come_from_the_pool() {
    let rt = runtime();
    let upstream = EchoUpstream::start();
    let port = upstream.addr.port();
    // Two addresses for the name: the first refuses (nothing listens on
    // 127.0.0.2 at that port), the second is the upstream.
    let seen: Arc<Mutex<Vec<SocketAddr>>> = Arc::default();
    let connector = {
        let seen = Arc::clone(&seen);
        move |route: &switchyard_tokio::Route| -> switchyard_tokio::Connecting {
            let addr = route.socket_addr();
            seen.lock().unwrap().push(addr);
            Box::pin(async move {
                let stream = tokio::net::TcpStream::connect(addr).await?;
                Ok(Box::new(stream) as switchyard_tokio::Io)
            })
        }
    };
    let name = format!("tunnel.test:{port}");
    let manager = {
        let name = name.clone();
        switchyard_tokio::Manager::builder()
            .server(&format!("http://{name}"), 0)
            .client(move |b| {
                b.resolve(&name, [IpAddr::from([127, 0, 0, 2]), LO]).connector(connector).no_proxy()
            })
            .build()
            .unwrap()
    };
    let log: Log = Arc::default();
    let (gateway, stop, served) = serve_gateway(&rt, &manager, &log);
    let through = |expect_routes: &[SocketAddr]| {
        seen.lock().unwrap().clear();
        let mut s = TcpStream::connect(gateway).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "CONNECT {name} HTTP/1.1\r\nHost: {name}\r\n\r\n").unwrap();
        let head = read_head(&mut s);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        // The tunnel's bytes are the client's own: a request to the upstream.
        write!(s, "GET /in-the-tunnel HTTP/1.1\r\nHost: {name}\r\n\r\n").unwrap();
        let head = read_head(&mut s);
        assert!(head.starts_with("HTTP/1.1 200") && !head.to_ascii_lowercase().contains("via:"), "{head}");
        let mut body = [0u8; 5];
        s.read_exact(&mut body).unwrap();
        assert_eq!(&body, b"plain");
        assert_eq!(*seen.lock().unwrap(), expect_routes, "the connector hook dialled these routes");
    };
    let dead = SocketAddr::from(([127, 0, 0, 2], port));
    // First: the refused route, then the next (the pool's race).
    through(&[dead, upstream.addr]);
    // Then: the refused route is remembered and tried last — the live one
    // answers first.
    through(&[upstream.addr]);
    assert!(upstream.heads().iter().filter(|h| h.contains("/in-the-tunnel")).count() == 2);
    // The manager's pool keeps no tunnel connection.
    assert_eq!(manager.client().stats().totals.idle, 0);
    stop.send(()).unwrap();
    rt.block_on(served).unwrap().unwrap();
}

#[test]
fn the_gateways_tunnels_go_through_the_clients_proxies() {
    use switchyard_tests::proxy::TestProxy;
    let rt = runtime();
    let upstream = EchoUpstream::start();
    let port = upstream.addr.port();
    let name = format!("far.test:{port}");
    for socks in [false, true] {
        let hosts = std::collections::BTreeMap::from([("far.test".to_owned(), LO)]);
        let proxy = if socks { TestProxy::socks5(hosts) } else { TestProxy::http(hosts) };
        let scheme = if socks { "socks5h" } else { "http" };
        let proxy_url = format!("{scheme}://{}", proxy.addr);
        let manager = switchyard_tokio::Manager::builder()
            .server(&format!("http://{name}"), 0)
            .client(move |b| b.proxy(switchyard_tokio::Proxy::all(&proxy_url).unwrap()))
            .build()
            .unwrap();
        let log: Log = Arc::default();
        let (gateway, stop, served) = serve_gateway(&rt, &manager, &log);
        let mut s = TcpStream::connect(gateway).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "CONNECT {name} HTTP/1.1\r\nHost: {name}\r\n\r\n").unwrap();
        let head = read_head(&mut s);
        assert!(head.starts_with("HTTP/1.1 200"), "{scheme}: {head}");
        write!(s, "GET /via-{scheme} HTTP/1.1\r\nHost: {name}\r\n\r\n").unwrap();
        let head = read_head(&mut s);
        assert!(head.starts_with("HTTP/1.1 200"), "{scheme}: {head}");
        let mut body = [0u8; 5];
        s.read_exact(&mut body).unwrap();
        assert_eq!(&body, b"plain");
        // The proxy opened a tunnel to the server (not an absolute-form
        // request: the bytes in it are the client's own).
        assert_eq!(proxy.targets(), std::slice::from_ref(&name), "{scheme}");
        let seen = upstream.heads();
        let request = seen.iter().find(|h| h.contains(&format!("/via-{scheme}"))).unwrap();
        assert!(request.starts_with(&format!("GET /via-{scheme} HTTP/1.1")), "{request}");
        drop(s);
        stop.send(()).unwrap();
        rt.block_on(served).unwrap().unwrap();
    }
}

#[test]
fn silent_tunnels_and_switched_connections_close_after_the_idle_timeout() {
    let rt = runtime();
    let upstream = EchoUpstream::start();
    let server = format!("http://{}", upstream.addr);
    let manager = switchyard_tokio::Manager::builder().server(&server, 0).build().unwrap();
    let (gateway, stop, served) = rt.block_on(async {
        let listener = switchyard_tokio::gateway::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(
            manager
                .gateway()
                .idle_timeout(Duration::from_millis(300))
                .shutdown_grace(Duration::from_secs(2))
                .serve_until(listener, async move {
                    let _ = stopped.await;
                }),
        );
        (addr, stop, served)
    });
    let authority = upstream.addr.to_string();
    let open = |switch: bool| {
        let mut s = TcpStream::connect(gateway).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        if switch {
            write!(s, "GET {server}/chat HTTP/1.1\r\nHost: {authority}\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n")
                .unwrap();
            assert!(read_head(&mut s).starts_with("HTTP/1.1 101"));
            let mut early = [0u8; 5];
            s.read_exact(&mut early).unwrap();
        } else {
            write!(s, "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").unwrap();
            assert!(read_head(&mut s).starts_with("HTTP/1.1 200"));
            // Raw bytes to the echo upstream's HTTP side: one request.
            write!(s, "GET / HTTP/1.1\r\nHost: {authority}\r\n\r\n").unwrap();
            assert!(read_head(&mut s).starts_with("HTTP/1.1 200"));
            let mut body = [0u8; 5];
            s.read_exact(&mut body).unwrap();
        }
        s
    };
    for switch in [false, true] {
        // Busy: a byte each way every 100 ms for 1.2 s (four idle periods) keeps it open.
        let mut busy = open(switch);
        if switch {
            for _ in 0..12 {
                busy.write_all(b"x").unwrap();
                let mut back = [0u8; 1];
                busy.read_exact(&mut back).unwrap();
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        // Silent: closed by the gateway (end of stream or a reset), not left
        // open until the client's own read timeout gives up.
        let mut silent = open(switch);
        let mut byte = [0u8; 1];
        let read = silent.read(&mut byte);
        let closed = match &read {
            Ok(n) => *n == 0,
            Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
        };
        assert!(closed, "switch {switch}: {read:?}");
        drop(busy);
    }
    stop.send(()).unwrap();
    rt.block_on(served).unwrap().unwrap();
}

#[test]
fn the_blocking_client_takes_a_101_over_too() {
    let upstream = EchoUpstream::start();
    let log = EventLog::default();
    let client = switchyard_std::Client::builder().event_listener(log.clone()).build().unwrap();
    let url = format!("http://{}/chat", upstream.addr);
    let response = client.get(&url).header("connection", "upgrade").header("upgrade", "echo").send().unwrap();
    assert_eq!(response.status(), 101);
    let mut socket = response.upgrade().unwrap();
    assert_eq!(socket.buffered(), b"EARLY");
    socket.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut early = [0u8; 5];
    socket.read_exact(&mut early).unwrap();
    assert_eq!(&early, b"EARLY");
    socket.write_all(b"blocking echo").unwrap();
    let mut back = [0u8; 13];
    socket.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"blocking echo");
    assert_eq!(closed_exclusive(&log), 1, "{:#?}", log.events());
    // Not a switch: a typed refusal, and that connection is not pooled.
    let refused =
        client.get(&url).header("connection", "upgrade").header("upgrade", "refuse").send().unwrap();
    let e = refused.upgrade().unwrap_err();
    assert!(
        matches!(e.kind(), switchyard_std::ErrorKind::Upgrade(_)) && e.to_string().contains("200 OK"),
        "{e}"
    );
    let plain = client.get(&url).send().unwrap();
    assert_eq!(plain.connection_source(), Some(Source::New));
    assert_eq!(plain.text().unwrap(), "plain");
    drop(socket);
    assert_eq!(upstream.connections(), 3);
}
