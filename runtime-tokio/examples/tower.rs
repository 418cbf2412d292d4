//! tower and tower-http over a switchyard client: redirects and decompression
//! (which switchyard itself does not do) as middleware, against the test
//! suite's loopback server. Run: `cargo run -p switchyard-tokio --example tower`.
#![allow(clippy::print_stdout, clippy::expect_used)]

use http_body_util::BodyExt;
use switchyard_tests::server::{ServerOptions, TestServer};
use switchyard_tokio::{Body, Client};
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_http::decompression::DecompressionLayer;
use tower_http::follow_redirect::FollowRedirectLayer;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // A loopback server that answers /redirect/N (302 chains) and /gzip.
    let server = TestServer::start(ServerOptions::default());
    let base = format!("http://127.0.0.1:{}", server.port());

    let client = Client::builder().build()?;
    let mut service = ServiceBuilder::new()
        .layer(FollowRedirectLayer::new())
        .layer(DecompressionLayer::new())
        .service(client.clone());

    for path in ["/redirect/2", "/gzip"] {
        let request = http::Request::get(format!("{base}{path}")).body(Body::empty())?;
        let response = ServiceExt::<http::Request<Body>>::ready(&mut service).await?.call(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        println!("GET {path} -> {status} {:?}", String::from_utf8_lossy(&body));
        let expected: &[u8] = if path == "/gzip" { b"hello, gzip" } else { b"hello" };
        assert_eq!(&body[..], expected);
    }
    // Every request, redirects included, rode one pooled connection.
    let stats = client.stats();
    println!("connections created: {}, reused: {}", stats.created, stats.reused);
    assert_eq!(stats.created, 1);
    Ok(())
}
