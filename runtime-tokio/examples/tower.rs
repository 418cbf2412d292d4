//! tower and tower-http over a switchyard client: redirects, decompression
//! (which switchyard itself does not do) and a timeout as middleware, against
//! the test suite's loopback server. Run: `cargo run -p switchyard-tokio --example tower`.
#![allow(clippy::print_stdout, clippy::expect_used)]

use std::time::Duration;

use http_body_util::BodyExt;
use switchyard_tests::server::{ServerOptions, TestServer};
use switchyard_tokio::{Body, Client};
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_http::decompression::DecompressionLayer;
use tower_http::follow_redirect::FollowRedirectLayer;
use tower_http::timeout::TimeoutLayer;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // A loopback server that answers /redirect/N (302 chains), /gzip and /sleep/MS.
    let server = TestServer::start(ServerOptions::default());
    let base = format!("http://127.0.0.1:{}", server.port());

    let client = Client::builder().build()?;
    // `client.service()` is a Service of one request type, so `ready()` infers.
    let mut service = ServiceBuilder::new()
        .layer(TimeoutLayer::with_status_code(http::StatusCode::GATEWAY_TIMEOUT, Duration::from_secs(2)))
        .layer(FollowRedirectLayer::new())
        .layer(DecompressionLayer::new())
        .service(client.service());

    for (path, status, expected) in [
        ("/redirect/2", 200, &b"hello"[..]),
        ("/gzip", 200, b"hello, gzip"),
        // Late: TimeoutLayer answers 504 with an empty (Default) body.
        ("/sleep/6000", 504, b""),
    ] {
        let request = http::Request::get(format!("{base}{path}")).body(Body::empty())?;
        let response = service.ready().await?.call(request).await?;
        let got = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        println!("GET {path} -> {got} {:?}", String::from_utf8_lossy(&body));
        assert_eq!((got.as_u16(), &body[..]), (status, expected));
    }
    // Every request, redirects included, rode one pooled connection; the late
    // call's connection was closed when the timeout dropped it.
    let stats = client.stats();
    println!("connections created: {}, reused: {}", stats.created, stats.reused);
    assert_eq!(stats.totals.in_use, 0);
    Ok(())
}
