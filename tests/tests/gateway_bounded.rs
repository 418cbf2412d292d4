//! 256 MiB each way through the gateway in bounded memory: bodies stream with
//! back-pressure (local client ↔ gateway ↔ upstream), nothing is buffered whole.
//! Alone in its binary, so the process's peak memory is this test's.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use http_body_util::BodyExt;
use switchyard_tests::streams::{Generated, StreamServer};
use switchyard_tokio::{Body, Client, HttpVersion, Manager, Proxy};

const SIZE: u64 = 256 << 20;

/// The process's peak resident memory so far, in bytes (Linux `VmHWM`).
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

#[test]
fn bodies_of_256_mib_both_ways_stream_in_bounded_memory() {
    for upstream_version in [HttpVersion::Http1Only, HttpVersion::Http2Only] {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let upstream = StreamServer::start();
        let up = upstream.addr;
        rt.block_on(async {
            let manager = Manager::builder()
                .server(&format!("http://{up}"), 1)
                .client(move |b| b.http_version(upstream_version).no_proxy())
                .build()
                .unwrap();
            tokio::time::timeout(Duration::from_secs(20), manager.ready()).await.unwrap().unwrap();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let gateway = listener.local_addr().unwrap();
            let served = tokio::spawn(manager.gateway().serve(listener));
            let local =
                Client::builder().proxy(Proxy::all(format!("http://{gateway}")).unwrap()).build().unwrap();
            // Warm every path once, then measure the peak from here.
            let r = local.post(format!("http://{up}/sink")).body(Body::wrap(Generated::new(1 << 20))).send().await.unwrap();
            assert_eq!(r.text().await.unwrap(), (1u64 << 20).to_string());
            let base = peak_rss();

            let r = local.post(format!("http://{up}/sink")).body(Body::wrap(Generated::new(SIZE))).send().await.unwrap();
            assert_eq!(r.text().await.unwrap(), SIZE.to_string(), "{upstream_version:?}: the upload arrived whole");
            let after_upload = peak_rss().saturating_sub(base);
            let mut r = local.get(format!("http://{up}/source/{SIZE}")).send().await.unwrap();
            let mut got = 0u64;
            while let Some(frame) = r.body_mut().frame().await {
                got += frame.unwrap().into_data().map_or(0, |d| d.len() as u64);
            }
            assert_eq!(got, SIZE, "{upstream_version:?}: the download arrived whole");

            let grown = peak_rss().saturating_sub(base);
            assert!(
                grown < 64 << 20,
                "{upstream_version:?}: peak memory grew by {} MiB for 2 × 256 MiB through the gateway ({} MiB after the upload)",
                grown >> 20,
                after_upload >> 20
            );
            served.abort();
        });
    }
}
