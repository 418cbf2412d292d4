//! The gateway bounded as an egress proxy must be: silent local connections
//! closed and the connection cap making room from idle ones, an upstream
//! response timeout (504), a down server tried by the next request, a loop
//! through its own `Via` refused, `Expect: 100-continue` answered locally, a
//! broken request body as 400, an unasked 101 as 502, requests abandoned
//! before their head logged (499), and a listen backlog past 128.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use switchyard_tests::server::{ServerOptions, TestServer};
use switchyard_tokio::gateway::Gateway;
use switchyard_tokio::{AccessRecord, Backoff, HttpVersion, Manager, WarmPolicy};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

type Log = Arc<Mutex<Vec<AccessRecord>>>;

/// `gateway` served on an ephemeral loopback port (from `gateway::bind`);
/// stops when the sender is used or dropped.
fn serve_with(
    rt: &tokio::runtime::Runtime,
    gateway: Gateway,
    log: &Log,
) -> (SocketAddr, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<std::io::Result<()>>) {
    rt.block_on(async {
        let listener = switchyard_tokio::gateway::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let log = Arc::clone(log);
        let served =
            tokio::spawn(gateway.access_log(move |r| log.lock().unwrap().push(r.clone())).serve_until(
                listener,
                async move {
                    let _ = stopped.await;
                },
            ));
        (addr, stop, served)
    })
}

/// A Manager over `url` (HTTP/1.1 upstream, `min` warm connections).
fn manager(rt: &tokio::runtime::Runtime, url: &str, min: usize) -> Manager {
    rt.block_on(async {
        let manager = Manager::builder()
            .server(url, min)
            .client(|b| b.no_proxy().http_version(HttpVersion::Http1Only))
            .build()
            .unwrap();
        if min > 0 {
            tokio::time::timeout(Duration::from_secs(20), manager.ready()).await.unwrap().unwrap();
        }
        manager
    })
}

/// A plain HTTP/1.1 test server, its `host:port`, and a Manager over it (one
/// warm connection).
fn plain_upstream(rt: &tokio::runtime::Runtime) -> (TestServer, String, Manager) {
    let upstream = TestServer::start(ServerOptions::default());
    let host = format!("127.0.0.1:{}", upstream.port());
    let manager = manager(rt, &format!("http://{host}"), 1);
    (upstream, host, manager)
}

/// Stops a gateway from [`serve_with`] and checks it ended cleanly.
fn finish(
    rt: &tokio::runtime::Runtime,
    stop: tokio::sync::oneshot::Sender<()>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
) {
    stop.send(()).unwrap();
    rt.block_on(served).unwrap().unwrap();
}

/// Writes `request` on a new connection and reads the answer until the
/// gateway closes (or 20 s pass).
fn raw(gateway: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(gateway).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn status_of(answer: &str) -> u16 {
    answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

fn get(path: &str, host: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").into_bytes()
}

/// Reads from `s` until the peer closes it; whether it did within 20 s.
fn closed_by_peer(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = [0u8; 64];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn silent_connections_close_and_the_cap_makes_room_for_a_request() {
    let rt = runtime();
    let (_upstream, host, manager) = plain_upstream(&rt);
    let log: Log = Arc::default();
    let gateway = manager.gateway().max_connections(4).idle_timeout(Duration::from_millis(400));
    let (addr, stop, served) = serve_with(&rt, gateway, &log);
    // The cap's worth of connections that never send a byte.
    let mut silent: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(100));
    // A real request still gets in: an idle one is closed to make room.
    let answer = raw(addr, &get("/hello", &host));
    assert_eq!(status_of(&answer), 200, "{answer}");
    assert!(answer.ends_with("hello"), "{answer}");
    // And every silent one is closed by the idle timeout.
    for (i, s) in silent.iter_mut().enumerate() {
        assert!(closed_by_peer(s), "silent connection {i} was never closed");
    }
    // A kept-alive connection between requests is closed the same way.
    let mut kept = TcpStream::connect(addr).unwrap();
    kept.write_all(format!("GET /hello HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes()).unwrap();
    assert!(closed_by_peer(&mut kept), "an idle keep-alive connection was never closed");
    finish(&rt, stop, served);
}

#[test]
fn an_upstream_slower_than_the_response_timeout_is_504_per_server() {
    let rt = runtime();
    let (_upstream, host, manager) = plain_upstream(&rt);
    let url = format!("http://{host}");
    let log: Log = Arc::default();
    // A second: the waits below are 5 s (past it) and 0.1 s (well within,
    // on a loaded machine too).
    let gateway = manager.gateway().response_timeout(Duration::from_secs(1));
    let (addr, stop, served) = serve_with(&rt, gateway, &log);
    let answer = raw(addr, &get("/sleep/5000", &host));
    assert_eq!(status_of(&answer), 504, "{answer}");
    assert!(answer.contains("did not answer within"), "{answer}");
    // Fast answers are untouched.
    assert_eq!(status_of(&raw(addr, &get("/hello", &host))), 200);
    // A body that stalls past the timeout is cut short: the head went out,
    // the body never completes, and the log says so.
    let answer = raw(addr, &get("/slow-body/5000", &host));
    assert_eq!(status_of(&answer), 200, "{answer}");
    assert!(!answer.contains("late") && !answer.ends_with("0\r\n\r\n"), "a cut body looks cut: {answer}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(r) = log.lock().unwrap().iter().find(|r| r.target == "/slow-body/5000") {
            assert!(!r.complete, "{r}");
            break;
        }
        assert!(Instant::now() < deadline, "never logged");
        std::thread::sleep(Duration::from_millis(20));
    }
    // One that pauses for less goes through whole.
    let answer = raw(addr, &get("/slow-body/100", &host));
    assert!(answer.ends_with("4\r\nlate\r\n0\r\n\r\n"), "{answer}");
    finish(&rt, stop, served);

    // The server's own timeout wins over the gateway's.
    let gateway = manager
        .gateway()
        .response_timeout(Duration::from_millis(100))
        .response_timeout_for(&url, Duration::from_secs(20));
    let (addr, stop, served) = serve_with(&rt, gateway, &log);
    assert_eq!(status_of(&raw(addr, &get("/sleep/400", &host))), 200);
    finish(&rt, stop, served);

    // A timeout for a server nobody declared is a configuration error.
    let gateway = manager.gateway().response_timeout_for("http://undeclared.test", Duration::from_secs(1));
    let err = rt
        .block_on(async {
            let listener = switchyard_tokio::gateway::bind("127.0.0.1:0".parse().unwrap()).unwrap();
            gateway.serve(listener).await
        })
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("undeclared.test"), "{err}");
}

#[test]
fn a_down_server_is_tried_by_the_next_request_not_after_its_backoff() {
    let rt = runtime();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let host = format!("127.0.0.1:{port}");
    let manager = rt.block_on(async {
        // A backoff far longer than the test: only a request can find it back.
        let policy = WarmPolicy {
            min_connections: 1,
            down_after: Duration::from_millis(100),
            backoff: Backoff {
                initial: Duration::from_secs(600),
                multiplier: 1.0,
                jitter: 0.0,
                max: Duration::from_secs(600),
            },
            ..WarmPolicy::default()
        };
        Manager::builder()
            .server_with(&format!("http://{host}"), policy)
            .client(|b| b.no_proxy().http_version(HttpVersion::Http1Only))
            .build()
            .unwrap()
    });
    let log: Log = Arc::default();
    let (addr, stop, served) = serve_with(&rt, manager.gateway(), &log);
    // Nothing listens: the Manager reports it down, and a request that tries
    // it is answered 503 with why.
    let deadline = Instant::now() + Duration::from_secs(15);
    let down = loop {
        let answer = raw(addr, &get("/hello", &host));
        if status_of(&answer) == 503 {
            break answer;
        }
        assert_eq!(status_of(&answer), 502, "{answer}");
        assert!(Instant::now() < deadline, "never reported down: {answer}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(down.contains("is down") && down.contains("tried now"), "{down}");
    assert!(down.to_ascii_lowercase().contains("retry-after: "), "{down}");
    // Back: the very next request is served, 600 s of backoff or not.
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let _upstream = TestServer::start_on(listener, ServerOptions::default());
    let back = raw(addr, &get("/hello", &host));
    assert_eq!(status_of(&back), 200, "{back}");
    finish(&rt, stop, served);
}

#[test]
fn a_gateway_declared_as_its_own_upstream_answers_508() {
    let rt = runtime();
    let listener =
        rt.block_on(async { switchyard_tokio::gateway::bind("127.0.0.1:0".parse().unwrap()).unwrap() });
    let addr = listener.local_addr().unwrap();
    let manager = manager(&rt, &format!("http://{addr}"), 0);
    let log: Log = Arc::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = rt.spawn({
        let log = Arc::clone(&log);
        manager.gateway().access_log(move |r| log.lock().unwrap().push(r.clone())).serve_until(
            listener,
            async move {
                let _ = stopped.await;
            },
        )
    });
    let answer = raw(addr, &get("/x", &addr.to_string()));
    assert_eq!(status_of(&answer), 508, "{answer}");
    assert!(answer.contains("a loop"), "{answer}");
    finish(&rt, stop, served);
}

#[test]
fn request_shapes_the_gateway_answers_itself() {
    let rt = runtime();
    let (upstream, host, manager) = plain_upstream(&rt);
    let log: Log = Arc::default();
    let (addr, stop, served) = serve_with(&rt, manager.gateway(), &log);
    let before = upstream.records().len();
    let cases: [(String, u16); 5] = [
        (
            format!(
                "POST /echo HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n0\r\n\r\n"
            ),
            501,
        ),
        (format!("GET /hello HTTP/1.1\r\nHost: {host}\r\nHost: {host}\r\nConnection: close\r\n\r\n"), 400),
        (format!("GET /hello HTTP/1.1\r\nHost: {host}\r\nExpect: teapot\r\nConnection: close\r\n\r\n"), 417),
        // Bad chunking, found while the body goes up: the request's fault.
        (
            format!(
                "POST /echo HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\n"
            ),
            400,
        ),
        (
            format!(
                "GET {} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n",
                switchyard_tokio::gateway::STATUS_PATH
            ),
            200,
        ),
    ];
    for (i, (request, want)) in cases.iter().enumerate() {
        let answer = raw(addr, request.as_bytes());
        assert_eq!(status_of(&answer), *want, "{request:?} -> {answer}");
        if i == 2 {
            // Refused on their heads: nothing went upstream. (A body found
            // broken on its way up was preceded by its head.)
            assert_eq!(upstream.records().len(), before, "a refused request went upstream");
        }
    }
    finish(&rt, stop, served);
}

#[test]
fn expect_100_continue_is_answered_by_the_gateway_and_not_forwarded() {
    let rt = runtime();
    let (_upstream, host, manager) = plain_upstream(&rt);
    let log: Log = Arc::default();
    let (addr, stop, served) = serve_with(&rt, manager.gateway(), &log);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let head = format!(
        "POST /headers HTTP/1.1\r\nHost: {host}\r\nExpect: 100-continue\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).unwrap();
    // The client waits for 100 before its body, as curl does.
    let mut first = [0u8; 25];
    s.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(b"hello").unwrap();
    let mut rest = String::new();
    let _ = s.read_to_string(&mut rest);
    assert_eq!(status_of(&rest), 200, "{rest}");
    assert!(!rest.to_ascii_lowercase().contains("expect"), "Expect went upstream: {rest}");
    finish(&rt, stop, served);
}

#[test]
fn an_unasked_101_from_upstream_is_502() {
    let rt = runtime();
    // An upstream that switches protocols on every request.
    let odd = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = odd.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in odd.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                        let _ = s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: odd\r\nConnection: upgrade\r\n\r\n");
                    }
                }
            });
        }
    });
    let host = format!("127.0.0.1:{port}");
    let manager = manager(&rt, &format!("http://{host}"), 0);
    let log: Log = Arc::default();
    let (addr, stop, served) = serve_with(&rt, manager.gateway(), &log);
    let answer = raw(addr, &get("/", &host));
    assert_eq!(status_of(&answer), 502, "{answer}");
    finish(&rt, stop, served);
}

#[test]
fn a_request_abandoned_before_its_head_is_logged_as_499() {
    let rt = runtime();
    let (upstream, host, manager) = plain_upstream(&rt);
    let log: Log = Arc::default();
    let (addr, stop, served) = serve_with(&rt, manager.gateway(), &log);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&get("/sleep/3000", &host)).unwrap();
    // Gone once the upstream has the request (its head is then pending).
    let deadline = Instant::now() + Duration::from_secs(15);
    while !upstream.records().iter().any(|r| r.path == "/sleep/3000") {
        assert!(Instant::now() < deadline, "the request never reached the upstream");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(15);
    let record = loop {
        if let Some(r) = log.lock().unwrap().iter().find(|r| r.target == "/sleep/3000").cloned() {
            break r;
        }
        assert!(Instant::now() < deadline, "the abandoned request was never logged");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(record.status.as_u16(), 499, "{record}");
    assert!(!record.complete, "{record}");
    finish(&rt, stop, served);
}

#[test]
fn the_listener_takes_a_burst_of_connects_past_128() {
    let rt = runtime();
    // Never accepted: only the backlog holds them.
    let listener =
        rt.block_on(async { switchyard_tokio::gateway::bind("127.0.0.1:0".parse().unwrap()).unwrap() });
    let addr = listener.local_addr().unwrap();
    let held: Vec<TcpStream> = (0..300)
        .map(|i| {
            TcpStream::connect_timeout(&addr, Duration::from_secs(3))
                .unwrap_or_else(|e| panic!("connect {i} did not complete: {e}"))
        })
        .collect();
    assert_eq!(held.len(), 300);
    drop(listener);
}

/// An HTTP/2 upstream over TLS (ALPN h2) for `localhost`, and a Manager
/// declaring it with one warm connection.
fn h2_upstream(
    rt: &tokio::runtime::Runtime,
) -> (switchyard_tests::certs::TestCa, TestServer, String, Manager) {
    let ca = switchyard_tests::certs::TestCa::new();
    let upstream = TestServer::start(ServerOptions {
        tls: vec![(vec!["localhost".into()], ca.leaf(&["localhost"]))],
        http2_only: true,
        ..Default::default()
    });
    let up = format!("localhost:{}", upstream.port());
    let manager = rt.block_on(async {
        let (pem, up) = (ca.cert_pem.clone(), up.clone());
        let lo: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        let manager = Manager::builder()
            .server(&format!("https://{up}"), 1)
            .client(move |b| b.resolve(&up, [lo]).add_root_certificate_pem(&pem).no_proxy())
            .build()
            .unwrap();
        tokio::time::timeout(Duration::from_secs(20), manager.ready()).await.unwrap().unwrap();
        manager
    });
    (ca, upstream, up, manager)
}

/// Local clients that stop reading large downloads do not freeze the shared
/// HTTP/2 upstream connection: each stream holds at most its own window, and
/// a small request on the same connection is answered.
#[test]
fn stalled_local_readers_do_not_freeze_a_shared_http2_upstream() {
    let rt = runtime();
    let (_ca, upstream, up, manager) = h2_upstream(&rt);
    let log: Log = Arc::default();
    let (addr, stop, served) = serve_with(&rt, manager.gateway(), &log);
    // Four 64 MiB downloads nobody reads (past the 32 MiB connection window
    // twice over).
    let stalled: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&get("/bytes/67108864", &up)).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let answer = raw(addr, &get("/hello", &up));
    assert_eq!(status_of(&answer), 200, "{answer}");
    assert!(answer.ends_with("hello"), "{answer}");
    assert_eq!(upstream.connections(), 1, "one upstream connection carried all five");
    drop(stalled);
    finish(&rt, stop, served);
}

/// An HTTP/2 upstream that answers an upload before reading it (413, 401,
/// 403) and ends its side: the local client gets that answer, not a 502.
#[test]
fn an_http2_upstreams_early_answer_reaches_the_local_client() {
    let rt = runtime();
    let (_ca, _upstream, up, manager) = h2_upstream(&rt);
    let log: Log = Arc::default();
    let (addr, stop, served) = serve_with(&rt, manager.gateway(), &log);
    for status in [413u16, 401, 403] {
        let mut request = format!(
            "POST /early/{status} HTTP/1.1\r\nHost: {up}\r\nContent-Length: 1000000\r\nConnection: close\r\n\r\n"
        )
        .into_bytes();
        request.extend(std::iter::repeat_n(b'u', 1_000_000));
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        // The upload may be cut short by the answer: write what the gateway takes.
        let writer = {
            let mut s = s.try_clone().unwrap();
            std::thread::spawn(move || {
                let _ = s.write_all(&request);
            })
        };
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer).into_owned();
        assert_eq!(status_of(&answer), status, "{answer}");
        assert!(answer.ends_with("refused before reading"), "{answer}");
        drop(s);
        let _ = writer.join();
    }
    finish(&rt, stop, served);
}

/// The GOAWAY churn through the gateway: nginx over TLS as the
/// upstream with `keepalive_requests 5` and a reload every 250 ms, 128 local
/// callers × 40 GETs through the gateway: every request is answered 200.
#[test]
fn goaway_churn_behind_the_gateway_loses_no_request() {
    use switchyard_tests::interop::{Nginx, NginxOptions};
    let options = NginxOptions { keepalive_requests: Some(5), ..NginxOptions::default() };
    let Some(nginx) = Nginx::start(options) else { return };
    let nginx = Arc::new(nginx);
    let rt = runtime();
    let up = format!("localhost:{}", nginx.tls_port);
    let manager = rt.block_on(async {
        let (pem, up) = (nginx.ca.cert_pem.clone(), up.clone());
        let lo: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        let manager = Manager::builder()
            .server(&format!("https://{up}"), 1)
            .client(move |b| b.resolve(&up, [lo]).add_root_certificate_pem(&pem).no_proxy())
            .build()
            .unwrap();
        tokio::time::timeout(Duration::from_secs(20), manager.ready()).await.unwrap().unwrap();
        manager
    });
    let log: Log = Arc::default();
    let (addr, stop, served) = serve_with(&rt, manager.gateway(), &log);
    let stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reloader = {
        let (nginx, stopping) = (Arc::clone(&nginx), Arc::clone(&stopping));
        std::thread::spawn(move || {
            while !stopping.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(250));
                nginx.reload();
            }
        })
    };
    let statuses: Vec<u16> = rt.block_on(async {
        let client = switchyard_tokio::Client::builder()
            .proxy(switchyard_tokio::Proxy::http(format!("http://{addr}")).unwrap())
            .build()
            .unwrap();
        let tasks: Vec<_> = (0..128)
            .map(|_| {
                let (client, url) = (client.clone(), format!("http://{up}/hello"));
                tokio::spawn(async move {
                    let mut out = Vec::new();
                    for _ in 0..40 {
                        out.push(match client.get(&url).send().await {
                            Ok(r) => r.status().as_u16(),
                            Err(_) => 0,
                        });
                    }
                    out
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all
    });
    stopping.store(true, std::sync::atomic::Ordering::Relaxed);
    reloader.join().unwrap();
    let failed = statuses.iter().filter(|s| **s != 200).count();
    assert_eq!(failed, 0, "{failed} of {} failed; statuses: {:?}", statuses.len(), {
        let mut seen: Vec<u16> = statuses.clone();
        seen.sort_unstable();
        seen.dedup();
        seen
    });
    finish(&rt, stop, served);
}
