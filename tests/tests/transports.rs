//! Transports as embedders meet them: the connector hook opening a
//! firecracker-style vsock stream (on tokio and on smol), an in-memory pipe
//! as the whole transport, and a per-request Unix socket next to TCP calls
//! (on tokio, smol and std).
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::PathBuf;
use std::time::Duration;

use switchyard_tests::conformance::unix_socket_path;
use switchyard_tests::server::{ServerOptions, TestServer};
use switchyard_tests::transport::VsockBridge;

/// The docs' vsock connector, on tokio: `CONNECT <port>\n`, then `OK …\n`
/// read byte by byte so nothing past the line is taken from the stream.
struct TokioVsock {
    uds: PathBuf,
    port: u32,
}

impl switchyard_tokio::Connect<switchyard_tokio::Connecting> for TokioVsock {
    fn connect(&self, _route: &switchyard_tokio::Route) -> switchyard_tokio::Connecting {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (uds, port) = (self.uds.clone(), self.port);
        Box::pin(async move {
            let mut stream = tokio::net::UnixStream::connect(&uds).await?;
            stream.write_all(format!("CONNECT {port}\n").as_bytes()).await?;
            let mut line = Vec::new();
            loop {
                match stream.read_u8().await? {
                    b'\n' => break,
                    b if line.len() < 64 => line.push(b),
                    _ => return Err(std::io::Error::other("vsock: answer line too long")),
                }
            }
            if !line.starts_with(b"OK ") {
                let got = String::from_utf8_lossy(&line).into_owned();
                return Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    format!("vsock: {got}"),
                ));
            }
            Ok(Box::new(stream) as switchyard_tokio::Io)
        })
    }
    // The bridge reaches the guest by port: no DNS for `guest.vm`.
    fn uses_dns(&self) -> bool {
        false
    }
}

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn a_vsock_connector_on_tokio_carries_pooled_http() {
    let server = TestServer::start(ServerOptions::default());
    let bridge = VsockBridge::start(&unix_socket_path("vsock"), 52, server.addr);
    let client = switchyard_tokio::Client::builder()
        .connector(TokioVsock { uds: bridge.path.clone(), port: 52 })
        .build()
        .unwrap();
    tokio_rt().block_on(async {
        for _ in 0..3 {
            let r = client.get("http://guest.vm/hello").send().await.unwrap();
            assert_eq!(r.text().await.unwrap(), "hello");
        }
        // A guest port nobody listens on: the bridge closes; a typed connect error.
        let refused = switchyard_tokio::Client::builder()
            .connector(TokioVsock { uds: bridge.path.clone(), port: 99 })
            .connect_timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let e = refused.get("http://guest.vm/hello").send().await.unwrap_err();
        assert!(e.is_connect(), "{e}");
    });
    assert_eq!(bridge.handshakes(), ["CONNECT 52", "CONNECT 99"], "one connection for three calls");
    assert_eq!(server.connections(), 1);
}

#[test]
fn tls_and_dns_run_on_top_of_a_connector() {
    use std::sync::{Arc, Mutex};
    let ca = switchyard_tests::certs::TestCa::new();
    let tls = TestServer::start(ServerOptions {
        tls: vec![(vec!["guest.vm".into()], ca.leaf(&["guest.vm"]))],
        ..ServerOptions::default()
    });
    let bridge = VsockBridge::start(&unix_socket_path("vsock-tls"), 443, tls.addr);
    let client = switchyard_tokio::Client::builder()
        .connector(TokioVsock { uds: bridge.path.clone(), port: 443 })
        .add_root_certificate_pem(&ca.cert_pem)
        .build()
        .unwrap();
    // A connector that wraps TCP keeps DNS: it is handed each resolved address.
    let plain = TestServer::start(ServerOptions::default());
    let dialled: Arc<Mutex<Vec<std::net::SocketAddr>>> = Arc::default();
    let seen = Arc::clone(&dialled);
    let named = format!("named.test:{}", plain.port());
    let tcp = switchyard_tokio::Client::builder()
        .resolve(&named, ["127.0.0.1".parse().unwrap()])
        .no_proxy()
        .connector(move |route: &switchyard_tokio::Route| -> switchyard_tokio::Connecting {
            let addr = route.socket_addr();
            seen.lock().unwrap().push(addr);
            Box::pin(async move {
                Ok(Box::new(tokio::net::TcpStream::connect(addr).await?) as switchyard_tokio::Io)
            })
        })
        .build()
        .unwrap();
    tokio_rt().block_on(async {
        let r = client.get("https://guest.vm/hello").send().await.unwrap();
        assert_eq!(r.version(), http::Version::HTTP_2, "ALPN over the connector's stream");
        assert_eq!(r.text().await.unwrap(), "hello");
        let r = tcp.get(format!("http://{named}/hello")).send().await.unwrap();
        assert_eq!(r.text().await.unwrap(), "hello");
    });
    assert_eq!(tls.records()[0].sni.as_deref(), Some("guest.vm"));
    assert_eq!(*dialled.lock().unwrap(), [plain.addr]);
}

#[test]
fn an_in_memory_pipe_is_a_whole_transport() {
    // The connector hands out one end of a duplex pipe; a hyper server
    // (through the test server's code) serves the other. TLS-free HTTP/1.1.
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let opened = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&opened);
    let connector =
        switchyard_tokio::by_name(move |route: &switchyard_tokio::Route| -> switchyard_tokio::Connecting {
            count.fetch_add(1, Ordering::SeqCst);
            let host = route.address().host().to_string();
            Box::pin(async move {
                let (ours, theirs) = tokio::io::duplex(64 * 1024);
                tokio::spawn(async move {
                    let service =
                        hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                            let host = host.clone();
                            async move {
                                let body = format!("{host}{}", req.uri().path());
                                Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                    http_body_util::Full::new(bytes::Bytes::from(body)),
                                ))
                            }
                        });
                    let io = hyper_util::rt::TokioIo::new(theirs);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
                Ok(Box::new(ours) as switchyard_tokio::Io)
            })
        });
    let client = switchyard_tokio::Client::builder().connector(connector).build().unwrap();
    tokio_rt().block_on(async {
        for path in ["/a", "/b"] {
            let r = client.get(format!("http://pipe.test{path}")).send().await.unwrap();
            assert_eq!(r.text().await.unwrap(), format!("pipe.test{path}"));
        }
    });
    assert_eq!(opened.load(Ordering::SeqCst), 1, "the pipe is pooled like a socket");
}

#[test]
fn a_vsock_connector_on_smol() {
    use tokio_util::compat::FuturesAsyncReadCompatExt;
    let server = TestServer::start(ServerOptions::default());
    let bridge = VsockBridge::start(&unix_socket_path("vsock-smol"), 7, server.addr);
    let uds = bridge.path.clone();
    let connector =
        switchyard_smol::by_name(move |_: &switchyard_smol::Route| -> switchyard_smol::Connecting {
            let uds = uds.clone();
            Box::pin(async move {
                use smol::io::{AsyncReadExt, AsyncWriteExt};
                let mut stream = smol::net::unix::UnixStream::connect(&uds).await?;
                stream.write_all(b"CONNECT 7\n").await?;
                let mut line = Vec::new();
                let mut byte = [0u8; 1];
                while stream.read(&mut byte).await? == 1 && byte[0] != b'\n' {
                    line.push(byte[0]);
                }
                if !line.starts_with(b"OK ") {
                    return Err(std::io::ErrorKind::ConnectionRefused.into());
                }
                Ok(Box::new(stream.compat()) as switchyard_smol::Io)
            })
        });
    let client = switchyard_smol::Client::builder().connector(connector).build().unwrap();
    smol::block_on(async {
        for _ in 0..2 {
            let r = client.get("http://guest.vm/hello").send().await.unwrap();
            assert_eq!(r.text().await.unwrap(), "hello");
        }
    });
    assert_eq!(bridge.handshakes(), ["CONNECT 7"]);
}

#[test]
fn a_vsock_connector_on_std_with_tls_on_top() {
    use std::io::{Read, Write};
    let ca = switchyard_tests::certs::TestCa::new();
    let tls = TestServer::start(ServerOptions {
        tls: vec![(vec!["guest.vm".into()], ca.leaf(&["guest.vm"]))],
        http1_only: true,
        ..ServerOptions::default()
    });
    let bridge = VsockBridge::start(&unix_socket_path("vsock-std"), 443, tls.addr);
    let uds = bridge.path.clone();
    let vsock = switchyard_std::by_name(move |_: &switchyard_std::Route| -> switchyard_std::Connecting {
        let mut s = std::os::unix::net::UnixStream::connect(&uds)?;
        s.write_all(b"CONNECT 443\n")?;
        let (mut line, mut byte) = (Vec::new(), [0u8; 1]);
        while s.read(&mut byte)? == 1 && byte[0] != b'\n' && line.len() < 64 {
            line.push(byte[0]);
        }
        if !line.starts_with(b"OK ") {
            return Err(std::io::ErrorKind::ConnectionRefused.into());
        }
        Ok(s.into())
    });
    let client = switchyard_std::Client::builder()
        .connector(vsock)
        .add_root_certificate_pem(&ca.cert_pem)
        .build()
        .unwrap();
    for _ in 0..3 {
        assert_eq!(client.get("https://guest.vm/hello").send().unwrap().text().unwrap(), "hello");
    }
    assert_eq!(bridge.handshakes(), ["CONNECT 443"], "one pooled connection");
    assert_eq!(tls.records()[0].sni.as_deref(), Some("guest.vm"));
}

#[test]
fn a_request_may_go_to_its_own_unix_socket() {
    let tcp = TestServer::start(ServerOptions::default());
    let path = unix_socket_path("per-request");
    let unix = TestServer::start(ServerOptions { unix: Some(path.clone()), ..ServerOptions::default() });
    let over_tcp = format!("http://127.0.0.1:{}/hello", tcp.port());

    // std
    let client = switchyard_std::Client::builder().no_proxy().build().unwrap();
    for _ in 0..2 {
        let r = client.get("http://sock.test/hello").unix_socket(&path).send().unwrap();
        assert_eq!(r.text().unwrap(), "hello");
        assert_eq!(client.get(over_tcp.as_str()).send().unwrap().text().unwrap(), "hello");
    }
    // tokio
    let client = switchyard_tokio::Client::builder().no_proxy().build().unwrap();
    tokio_rt().block_on(async {
        for _ in 0..2 {
            let r = client.get("http://sock.test/hello").unix_socket(&path).send().await.unwrap();
            assert_eq!(r.text().await.unwrap(), "hello");
            assert_eq!(client.get(over_tcp.as_str()).send().await.unwrap().text().await.unwrap(), "hello");
        }
    });
    // smol
    let client = switchyard_smol::Client::builder().no_proxy().build().unwrap();
    smol::block_on(async {
        for _ in 0..2 {
            let r = client.get("http://sock.test/hello").unix_socket(&path).send().await.unwrap();
            assert_eq!(r.text().await.unwrap(), "hello");
        }
    });
    assert_eq!(unix.connections(), 3, "one pooled Unix-socket connection per client");
    assert_eq!(tcp.connections(), 2, "the TCP calls kept their own connection per client");
    let _ = std::fs::remove_file(path);
}

// A call that has to dial drives its own connect (the attempt is polled by
// the calling future, not spawned): on smol's default runtime the connector's
// future runs on the caller's thread, not on smol's executor thread.
#[test]
fn a_call_that_dials_runs_its_connect_on_its_own_thread() {
    use std::sync::{Arc, Mutex};
    use tokio_util::compat::FuturesAsyncReadCompatExt;
    let server = TestServer::start(ServerOptions::default());
    let polled_on: Arc<Mutex<Vec<std::thread::ThreadId>>> = Arc::default();
    let seen = Arc::clone(&polled_on);
    let client = switchyard_smol::Client::builder()
        .connector(move |route: &switchyard_smol::Route| -> switchyard_smol::Connecting {
            let (addr, seen) = (route.socket_addr(), Arc::clone(&seen));
            Box::pin(async move {
                seen.lock().unwrap().push(std::thread::current().id());
                let tcp = smol::net::TcpStream::connect(addr).await?;
                Ok(Box::new(tcp.compat()) as switchyard_smol::Io)
            })
        })
        .build()
        .unwrap();
    let url = format!("http://127.0.0.1:{}/hello", server.port());
    smol::block_on(async {
        let r = client.get(&url).send().await.unwrap();
        assert_eq!(r.text().await.unwrap(), "hello");
    });
    assert_eq!(*polled_on.lock().unwrap(), [std::thread::current().id()], "polled by the call itself");
    // A pooled call dials nothing.
    smol::block_on(async { client.get(&url).send().await.unwrap().text().await.unwrap() });
    assert_eq!(polled_on.lock().unwrap().len(), 1);
    assert_eq!(client.stats().reused, 1);
    // A name: the lookup is the call's too, and so every connect it leads
    // to (one per address the system resolver gives for `localhost`).
    let named = format!("http://localhost:{}/hello", server.port());
    smol::block_on(async {
        let r = client.get(&named).send().await.unwrap();
        assert_eq!(r.text().await.unwrap(), "hello");
    });
    let stats = client.stats();
    assert_eq!((stats.dns_lookups, stats.created), (1, 2), "{stats:?}");
    let polled = polled_on.lock().unwrap();
    assert!(polled.len() >= 2, "{polled:?}");
    assert!(polled.iter().all(|t| *t == std::thread::current().id()), "{polled:?}");
}

// What a call leaves unfinished goes on without it. A call answered by
// another connection (one released while its own connect was under way)
// hands its attempt to the runtime, and the connection joins the pool. A
// call dropped mid-connect ends its attempt with it (the pool's rule for a
// call that goes away): nothing is left open or connecting.
/// Waits (up to 5 s) until the client's statistics satisfy `done`.
async fn settle(client: &switchyard_tokio::Client, done: impl Fn(&switchyard_tokio::PoolStats) -> bool) {
    for _ in 0..500 {
        if done(&client.stats()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn an_attempt_outlives_the_call_that_no_longer_needs_it() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let server = TestServer::start(ServerOptions::default());
    let dials = Arc::new(AtomicUsize::new(0));
    // The second dial waits for this gate, opened by the test once that
    // dial's call has been answered by another connection; the third never
    // connects (its call is dropped). No timing decides the order.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (counted, gated) = (Arc::clone(&dials), Arc::clone(&gate));
    let client = switchyard_tokio::Client::builder()
        .connector(move |route: &switchyard_tokio::Route| -> switchyard_tokio::Connecting {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            let (addr, gate) = (route.socket_addr(), Arc::clone(&gated));
            Box::pin(async move {
                match n {
                    0 => {}
                    1 => drop(gate.acquire().await),
                    _ => std::future::pending::<()>().await,
                }
                Ok(Box::new(tokio::net::TcpStream::connect(addr).await?) as switchyard_tokio::Io)
            })
        })
        .build()
        .unwrap();
    let base = format!("http://127.0.0.1:{}", server.port());
    let until = |what: &'static str, done: &dyn Fn(&switchyard_tokio::PoolStats) -> bool| {
        let stats = client.stats();
        assert!(done(&stats), "{what}: {stats:?}");
    };
    tokio_rt().block_on(async {
        // B holds the only connection for 200 ms; A dials meanwhile (held at
        // the gate) and is answered by B's connection when B is done.
        let slow = tokio::spawn({
            let (client, url) = (client.clone(), format!("{base}/sleep/200"));
            async move { client.get(&url).send().await.unwrap().text().await.unwrap() }
        });
        while client.stats().totals.in_use == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let r = client.get(format!("{base}/hello")).send().await.unwrap();
        assert_eq!(r.text().await.unwrap(), "hello");
        slow.await.unwrap();
        until("A was answered by B's connection, its own still connecting", &|s| {
            (s.totals.connecting, s.created, s.reused) == (1, 1, 1)
        });
        // A's connect goes on without its call and joins the pool.
        gate.add_permits(1);
        settle(&client, |s| s.totals.idle == 2).await;
        until("A's own connection joined the pool", &|s| {
            (s.totals.idle, s.joined_idle, s.created, s.reused) == (2, 1, 2, 1)
        });
        assert_eq!(dials.load(Ordering::SeqCst), 2);

        // Dropped mid-connect, on a new host (nothing pooled for it).
        let other = client.get(format!("http://localhost:{}/hello", server.port())).send();
        assert!(tokio::time::timeout(Duration::from_millis(50), other).await.is_err());
        settle(&client, |s| s.totals.connecting == 0 && s.calls == 0).await;
        until("the dropped call's attempt ended with it", &|s| {
            (s.totals.connecting, s.totals.open, s.calls, s.created) == (0, 2, 0, 2)
        });
        assert_eq!(dials.load(Ordering::SeqCst), 3);
    });
}
