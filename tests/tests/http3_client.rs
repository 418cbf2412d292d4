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
