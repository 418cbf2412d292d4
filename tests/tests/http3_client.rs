//! HTTP/3 through the client API (`HttpVersion::Http3Only`): QUIC connections
//! planned, raced, pooled and shared by the pool like HTTP/2's, pumped over
//! the runtime's UDP sockets (tokio and smol), against real servers on
//! loopback — aioquic (PyPI) and ngtcp2's gtlsserver (Debian). Each test
//! starts its own server.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use switchyard_tests::h3::H3Server;
use switchyard_tokio::{Client, HttpVersion};

fn client(server: &H3Server) -> Client {
    Client::builder()
        .http_version(HttpVersion::Http3Only)
        .tls_config(server.tls())
        .timeout(Duration::from_secs(20))
        .build()
        .expect("a client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_over_http3_and_the_next_one_on_the_same_connection() {
    let Some(server) = H3Server::aioquic() else { return };
    let client = client(&server);
    let base = format!("https://localhost:{}", server.port);
    let first = client.get(format!("{base}/hello?x=1")).send().await.expect("a GET over HTTP/3");
    assert_eq!(first.status(), 200);
    assert_eq!(first.version(), http::Version::HTTP_3);
    assert_eq!(first.headers()["x-path"], "/hello?x=1");
    let carrier = *first.extensions().get::<switchyard_common::Carrier>().expect("the carrier");
    assert_eq!(first.text().await.expect("the body"), "hello");
    let second = client.get(format!("{base}/bytes/10")).send().await.expect("a second GET");
    let again = *second.extensions().get::<switchyard_common::Carrier>().expect("the carrier");
    assert_eq!(second.bytes().await.expect("the body").as_ref(), b"xxxxxxxxxx");
    assert_eq!(again.connection, carrier.connection, "the QUIC connection was pooled and reused");
    let stats = client.stats();
    assert_eq!(stats.created, 1, "one connection: {stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_share_one_connection_past_the_servers_stream_limit() {
    let big: Vec<u8> = (0..(2u32 << 20)).map(|i| (i % 251) as u8).collect();
    let small = b"small file".to_vec();
    let files: [(&str, &[u8]); 2] = [("big", &big), ("small", &small)];
    // Two streams at a time: the other calls wait for QUIC's stream credit.
    let Some(server) = H3Server::ngtcp2(&["--max-streams-bidi=2"], &files) else { return };
    let client = client(&server);
    let base = format!("https://localhost:{}", server.port);
    let calls = (0..8).map(|i| {
        let client = client.clone();
        let url = format!("{base}/{}", if i % 2 == 0 { "big" } else { "small" });
        tokio::spawn(async move {
            let response = client.get(url).send().await.expect("a GET");
            assert_eq!(response.status(), 200);
            response.bytes().await.expect("the body")
        })
    });
    let bodies: Vec<_> = futures_util_join(calls.collect()).await;
    for (i, body) in bodies.iter().enumerate() {
        let want: &[u8] = if i % 2 == 0 { &big } else { &small };
        assert!(body.as_ref() == want, "call {i}: {} bytes, byte for byte", body.len());
    }
    let stats = client.stats();
    assert_eq!(stats.created, 1, "every call on one QUIC connection: {stats:?}");
}

async fn futures_util_join<T: Send + 'static>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.expect("the task"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_whole_and_streamed_come_back_echoed() {
    let Some(server) = H3Server::aioquic() else { return };
    let client = client(&server);
    let url = format!("https://localhost:{}/echo", server.port);
    let whole: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    let response = client.post(&url).body(whole.clone()).send().await.expect("a POST");
    assert_eq!(response.headers()["x-received"], "300000");
    assert_eq!(response.bytes().await.expect("the echo").as_ref(), &whole[..]);
    // Streamed in 64 parts of 16 KiB, length unknown beforehand: QUIC's flow
    // control paces the sender.
    let (tx, body) = switchyard_tokio::Body::channel();
    let parts = whole.clone();
    let feeder = tokio::spawn(async move {
        for chunk in parts.chunks(16 * 1024).chain(std::iter::once(&[7u8; 1024][..])) {
            tx.send(bytes::Bytes::copy_from_slice(chunk)).await.expect("the call takes the part");
        }
    });
    let response = client.post(&url).body(body).send().await.expect("a streamed POST");
    feeder.await.expect("the feeder");
    let echoed = response.bytes().await.expect("the echo");
    assert_eq!(echoed.len(), whole.len() + 1024);
    assert_eq!(&echoed[..whole.len()], &whole[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goaway_sends_the_requests_it_left_unprocessed_to_a_new_connection() {
    let Some(server) = H3Server::aioquic() else { return };
    let client = client(&server);
    let base = format!("https://localhost:{}", server.port);
    // The server's GOAWAY takes the stream after /goaway's and no later one;
    // every call must still succeed, a POST among them (never processed, so
    // replaying it is safe).
    let first = client.get(format!("{base}/hello")).send().await.expect("the connection");
    let going = first.extensions().get::<switchyard_common::Carrier>().expect("the carrier").connection;
    first.text().await.expect("the body");
    // One task polls the calls in order, so /goaway's stream is opened
    // first and the others right after it (those past the next one are
    // unprocessed when the GOAWAY comes, however the machine runs them).
    let calls = (0..6).map(|i| {
        let (client, base) = (client.clone(), base.clone());
        async move {
            let response = match i {
                0 => client.get(format!("{base}/goaway")).send().await,
                5 => client.post(format!("{base}/echo")).body("posted").send().await,
                _ => client.get(format!("{base}/bytes/{i}")).send().await,
            };
            let response = response.unwrap_or_else(|e| panic!("call {i}: {e}"));
            (i, response.status(), response.bytes().await.expect("the body"))
        }
    });
    for (i, status, body) in join_all(calls.collect()).await {
        assert_eq!(status, 200, "call {i}");
        let want: &[u8] = match i {
            0 => b"last",
            5 => b"posted",
            n => &b"xxxxx"[..n],
        };
        assert_eq!(body.as_ref(), want, "call {i}");
    }
    // The connection that is going away takes no new call.
    let after = client.get(format!("{base}/hello")).send().await.expect("a call after the GOAWAY");
    let carrier = after.extensions().get::<switchyard_common::Carrier>().expect("the carrier").connection;
    assert_ne!(carrier, going, "a new connection after the GOAWAY");
}

/// Polls every future in `all` until each is done, in order on every turn
/// (one task: the order in which they start is the order given).
async fn join_all<F: std::future::Future>(all: Vec<F>) -> Vec<F::Output> {
    let mut all: Vec<_> = all.into_iter().map(|f| (Box::pin(f), None)).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, out) in &mut all {
            if out.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *out = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    all.into_iter().map(|(_, out)| out.expect("done")).collect()
}

/// An error with its causes, for assertions on what it says.
fn told(e: &switchyard_tokio::Error) -> String {
    let mut text = format!("{e}");
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_closing_the_connection_sends_the_next_call_to_a_new_one() {
    let Some(server) = H3Server::aioquic() else { return };
    let client = client(&server);
    let base = format!("https://localhost:{}", server.port);
    let warm = client.get(format!("{base}/hello")).send().await.expect("a first call");
    warm.text().await.expect("the body");
    // aioquic closes at once, dropping the answer it had queued: the call
    // fails, and it is not retried — the GET reached the server, and the
    // rules retry a written request only on a reused connection whose
    // failure proves nothing was processed... which here it cannot prove.
    let closing = client.get(format!("{base}/close")).send().await;
    if let Err(e) = &closing {
        assert!(told(e).contains("close asked"), "{}", told(e));
    }
    // The next call must not fail for the closed connection.
    let next = client.get(format!("{base}/bytes/3")).send().await.expect("a call after the close");
    assert_eq!(next.bytes().await.expect("the body").as_ref(), b"xxx");
    let stats = client.stats();
    assert!(stats.created >= 2, "a new connection after the close: {stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_is_a_tls_error() {
    let Some(server) = H3Server::aioquic() else { return };
    let client = Client::builder().http_version(HttpVersion::Http3Only).build().expect("a client");
    let e = client
        .get(format!("https://localhost:{}/hello", server.port))
        .send()
        .await
        .expect_err("the test CA is not trusted");
    assert!(e.is_tls() && e.is_connect(), "{}", told(&e));
    assert!(told(&e).contains("QUIC"), "{}", told(&e));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_on_the_udp_port_fails_the_connect_at_once() {
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let client = Client::builder()
        .http_version(HttpVersion::Http3Only)
        .connect_timeout(Duration::from_secs(30))
        .build()
        .expect("a client");
    let e = client.get(format!("https://127.0.0.1:{port}/")).send().await.expect_err("no server");
    // Refused by the system (ICMP port unreachable), not timed out.
    assert!(e.is_connect() && !e.is_timeout(), "{}", told(&e));
    assert!(told(&e).contains("nothing answers QUIC"), "{}", told(&e));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_udp_port_ends_in_the_connect_timeout() {
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let client = Client::builder()
        .http_version(HttpVersion::Http3Only)
        .connect_timeout(Duration::from_millis(300))
        .build()
        .expect("a client");
    let e = client.get(format!("https://127.0.0.1:{port}/")).send().await.expect_err("no answer");
    assert!(e.is_connect() && e.is_timeout(), "{e}");
    drop(silent);
}

#[tokio::test]
async fn http3_where_it_cannot_run_is_a_typed_error() {
    let client = Client::builder().http_version(HttpVersion::Http3Only).build().expect("a client");
    let e = client.get("http://127.0.0.1:1/").send().await.expect_err("cleartext");
    assert!(told(&e).contains("HTTP/3") && told(&e).contains("needs https"), "{}", told(&e));
    let proxied = Client::builder()
        .http_version(HttpVersion::Http3Only)
        .proxy(switchyard_tokio::Proxy::all("http://127.0.0.1:9").unwrap())
        .connect_timeout(Duration::from_secs(5))
        .build()
        .expect("a client");
    let e = proxied.get("https://127.0.0.1:1/").send().await.expect_err("QUIC through a proxy");
    assert!(told(&e).contains("cannot go through proxy"), "{}", told(&e));
}

#[test]
fn smol_fetches_over_http3_too() {
    let Some(server) = H3Server::aioquic() else { return };
    smol::block_on(async {
        let client = switchyard_smol::Client::builder()
            .http_version(switchyard_smol::HttpVersion::Http3Only)
            .tls_config(server.tls())
            .build()
            .expect("a client");
        let base = format!("https://localhost:{}", server.port);
        for n in [10usize, 3 << 20] {
            let response = client.get(format!("{base}/bytes/{n}")).send().await.expect("a GET over HTTP/3");
            assert_eq!(response.version(), http::Version::HTTP_3);
            let body = response.bytes().await.expect("the body");
            assert_eq!(body.len(), n);
            assert!(body.iter().all(|&b| b == b'x'));
        }
        assert_eq!(client.stats().created, 1);
    });
}

// ---------------------------------------------------------------------------
// `HttpVersion::Http3`: QUIC raced with TCP, per address.

use switchyard_tests::server::{ServerOptions, TestServer};
use switchyard_tokio::EventLog;

/// A TLS server (HTTP/2 and HTTP/1.1) on TCP `port` of 127.0.0.1 for `name`,
/// its certificate from `server`'s CA.
fn tcp_beside(server: &H3Server, name: &str, port: u16) -> Option<TestServer> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).ok()?;
    let mut options = ServerOptions::default();
    options.tls.push((vec![name.into()], server.leaf(&[name])));
    Some(TestServer::start_on(listener, options))
}

fn racing_client(ca: Vec<u8>, port: u16, log: &EventLog, delay: Duration) -> Client {
    Client::builder()
        .http_version(HttpVersion::Http3)
        .add_root_certificate(ca)
        .resolve(&format!("localhost:{port}"), ["127.0.0.1".parse().unwrap()])
        .attempt_delay(delay)
        .event_listener(log.clone())
        .timeout(Duration::from_secs(20))
        .build()
        .expect("a client")
}

/// Each race's attempts in start order, as `quic` or `tcp`.
fn attempts(log: &EventLog) -> Vec<&'static str> {
    log.events()
        .iter()
        .filter(|e| e.name == "connect_start")
        .map(|e| if e.detail.ends_with("over QUIC") { "quic" } else { "tcp" })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_wins_the_race_where_the_server_answers_udp() {
    let Some(h3) = H3Server::aioquic() else { return };
    let Some(tcp) = tcp_beside(&h3, "localhost", h3.port) else { return };
    let log = EventLog::default();
    // A TCP start far away: the race is QUIC's whatever the machine's load.
    let client = racing_client(h3.ca_cert(), h3.port, &log, Duration::from_secs(5));
    let response = client.get(format!("https://localhost:{}/hello", h3.port)).send().await.expect("a GET");
    assert_eq!(response.version(), http::Version::HTTP_3);
    assert_eq!(response.text().await.expect("the body"), "hello");
    assert_eq!(attempts(&log), ["quic"], "TCP never started");
    assert_eq!(tcp.connections(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_black_holed_falls_back_to_tcp_and_is_remembered() {
    let Some(h3) = H3Server::aioquic() else { return };
    // A TCP server on a port whose UDP side is a socket that never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let silent = std::net::UdpSocket::bind(("127.0.0.1", port)).expect("the UDP side of the port");
    let mut options = ServerOptions::default();
    options.tls.push((vec!["localhost".into()], h3.leaf(&["localhost"])));
    let tcp = TestServer::start_on(listener, options);
    let log = EventLog::default();
    let client = racing_client(h3.ca_cert(), port, &log, Duration::from_millis(250));
    let url = format!("https://localhost:{port}/hello");
    let first = client.get(&url).send().await.expect("TCP carries the call");
    assert_eq!(first.version(), http::Version::HTTP_2);
    first.text().await.expect("the body");
    assert_eq!(attempts(&log), ["quic", "tcp"], "QUIC first, TCP one attempt delay later");
    // A new connection: QUIC's silence is remembered for IPv4, so TCP goes
    // first (QUIC is only tried after it, should TCP fail).
    client.evict_idle();
    let second = client.get(&url).send().await.expect("a second call");
    assert_eq!(second.version(), http::Version::HTTP_2);
    assert_eq!(attempts(&log), ["quic", "tcp", "tcp"], "straight to TCP");
    assert_eq!(tcp.connections(), 2);
    drop(silent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alt_svc_learned_over_http2_moves_the_next_connection_to_http3() {
    let Some(h3) = H3Server::aioquic() else { return };
    let Some(_tcp) = tcp_beside(&h3, "localhost", h3.port) else { return };
    let log = EventLog::default();
    let client = Client::builder()
        .add_root_certificate(h3.ca_cert())
        .resolve(&format!("localhost:{}", h3.port), ["127.0.0.1".parse().unwrap()])
        .attempt_delay(Duration::from_secs(5)) // QUIC's race, whatever the load
        .event_listener(log.clone())
        .timeout(Duration::from_secs(20))
        .build()
        .expect("a client (HttpVersion::Auto)");
    let base = format!("https://localhost:{}", h3.port);
    // No Alt-Svc yet: TCP, HTTP/2.
    let first = client.get(format!("{base}/hello")).send().await.expect("a first call");
    assert_eq!(first.version(), http::Version::HTTP_2);
    first.text().await.expect("the body");
    // The server advertises HTTP/3 on the same port; the pooled HTTP/2
    // connection still carries the next call to the same Address...
    let advertised = client.get(format!("{base}/alt-svc/{}", h3.port)).send().await.expect("Alt-Svc");
    assert_eq!(advertised.version(), http::Version::HTTP_2);
    advertised.text().await.expect("the body");
    // ...and the next call is for an Address that offers HTTP/3: QUIC wins.
    let next = client.get(format!("{base}/hello")).send().await.expect("a call after Alt-Svc");
    assert_eq!(next.version(), http::Version::HTTP_3, "{:?}", attempts(&log));
    assert_eq!(next.text().await.expect("the body"), "hello");
    assert_eq!(attempts(&log), ["tcp", "quic"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_record_moves_the_next_connection_to_http3() {
    use hickory_proto::rr::rdata::svcb::{Alpn, SvcParamKey, SvcParamValue, SVCB};
    use switchyard_tests::dns::{DnsServer, Zone};

    let Some(h3) = H3Server::aioquic() else { return };
    let Some(_tcp) = tcp_beside(&h3, "h3.test", h3.port) else { return };
    // h3.test is an A record and, for its port (RFC 9460 §9.1's
    // `_PORT._https` name), an HTTPS record offering h3 there.
    let svcb = SVCB::new(
        1,
        hickory_proto::rr::Name::root(),
        vec![
            (SvcParamKey::Alpn, SvcParamValue::Alpn(Alpn(vec!["h3".to_owned()]))),
            (SvcParamKey::Port, SvcParamValue::Port(h3.port)),
        ],
    );
    let dns = DnsServer::start([
        ("h3.test".to_owned(), Zone { v4: vec!["127.0.0.1".parse().unwrap()], ttl: 300, ..Zone::default() }),
        (format!("_{}._https.h3.test", h3.port), Zone { https: vec![svcb], ttl: 300, ..Zone::default() }),
    ]);
    let log = EventLog::default();
    let client = Client::builder()
        .add_root_certificate(h3.ca_cert())
        .async_resolver(switchyard_tokio::HickoryResolver::with_servers(&[dns.addr()]).expect("a resolver"))
        .attempt_delay(Duration::from_secs(5))
        .event_listener(log.clone())
        .timeout(Duration::from_secs(20))
        .build()
        .expect("a client (HttpVersion::Auto)");
    let url = format!("https://h3.test:{}/hello", h3.port);
    // The first call does not wait for the HTTPS query: TCP carries it.
    let first = client.get(&url).send().await.expect("a first call");
    assert_eq!(first.version(), http::Version::HTTP_2);
    first.text().await.expect("the body");
    // Once the answer is in, a new connection races QUIC, which wins.
    let mut version = http::Version::HTTP_2;
    for _ in 0..500 {
        client.evict_idle();
        let next = client.get(&url).send().await.expect("a call");
        version = next.version();
        next.text().await.expect("the body");
        if version == http::Version::HTTP_3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(version, http::Version::HTTP_3, "{:?}", attempts(&log));
    assert_eq!(attempts(&log).last(), Some(&"quic"));
}
