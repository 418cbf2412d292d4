//! Downloading a body into a writer or a file, on every adapter: `copy_to`
//! (tokio writers), `copy_to_futures` (futures-io writers), `save_to` (a file
//! by its path, any runtime), std's `copy_to` and `save_to`. Checked: the
//! bytes (a patterned body of several MiB, over HTTP/1.1 and HTTP/2), the
//! count returned, the connection back in the pool; a file that cannot be
//! created and a writer that fails are `BodyError::Sink` naming where; a
//! body cut short by the server is the body's error, and the file keeps what
//! arrived.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use switchyard_tests::fault::{Fault, FaultOptions, FaultServer, Reply};
use switchyard_tests::server::{ServerOptions, TestServer};

/// 3 MiB + 17 bytes that are not all alike (a misplaced or repeated batch shows).
fn pattern() -> Vec<u8> {
    (0..(3 << 20) + 17).map(|i: usize| (i % 251) as u8 ^ ((i >> 12) as u8)).collect()
}

fn dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("switchyard-download-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A writer that takes `room` bytes, then fails.
struct Full {
    room: usize,
}

impl std::io::Write for Full {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.room == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                "no space left on the test device",
            ));
        }
        let n = buf.len().min(self.room);
        self.room -= n;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl tokio::io::AsyncWrite for Full {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::task::Poll::Ready(std::io::Write::write(&mut *self, buf))
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

fn servers() -> [(TestServer, &'static str); 2] {
    [
        (TestServer::start(ServerOptions { http1_only: true, ..ServerOptions::default() }), "HTTP/1.1"),
        (TestServer::start(ServerOptions { http2_only: true, ..ServerOptions::default() }), "HTTP/2"),
    ]
}

fn sink_error_names(e: &switchyard_common::Error, what: &str) {
    assert!(e.is_body(), "{what}: {e:?}");
    assert!(!e.is_reset(), "{what}: the connection was fine: {e:?}");
    assert!(
        matches!(e.kind(), switchyard_common::ErrorKind::Body(switchyard_common::BodyError::Sink(_))),
        "{what}: {e:?}"
    );
}

/// The same checks for the async adapters (their clients share an API, not a trait).
macro_rules! async_checks {
    ($adapter:ident, $block_on:expr, $file:expr) => {{
        let body = pattern();
        let d = dir(stringify!($adapter));
        for (server, proto) in servers() {
            let http2 = proto == "HTTP/2";
            let client = $adapter::Client::builder()
                .no_proxy()
                .http_version(if http2 {
                    $adapter::HttpVersion::Http2Only
                } else {
                    $adapter::HttpVersion::Http1Only
                })
                .build()
                .unwrap();
            let url = format!("http://127.0.0.1:{}/echo", server.port());
            let what = format!("{} {proto}", stringify!($adapter));
            $block_on(async {
                // save_to: a file by its path.
                let path = d.join("saved.bin");
                let mut r = client.post(&url).body(body.clone()).send().await.unwrap();
                assert_eq!(r.save_to(&path).await.unwrap(), body.len() as u64, "{what}");
                assert!(std::fs::read(&path).unwrap() == body, "{what}: save_to's bytes");
                // copy_to a tokio writer (a Vec), and the runtime's own file.
                let mut r = client.post(&url).body(body.clone()).send().await.unwrap();
                let mut out = Vec::new();
                assert_eq!(r.copy_to(&mut out).await.unwrap(), body.len() as u64, "{what}");
                assert!(out == body, "{what}: copy_to's bytes");
                let path = d.join("copied.bin");
                let mut r = client.post(&url).body(body.clone()).send().await.unwrap();
                let n = $file(&mut r, path.clone()).await;
                assert_eq!(n, body.len() as u64, "{what}");
                assert!(std::fs::read(&path).unwrap() == body, "{what}: into the runtime's file");
                assert_eq!(client.stats().totals.in_use, 0, "{what}: every connection went back");
                // A file that cannot be created: the body's Sink error, naming the path.
                let missing = d.join("no-such-dir").join("x.bin");
                let mut r = client.post(&url).body(body.clone()).send().await.unwrap();
                let e = r.save_to(&missing).await.unwrap_err();
                sink_error_names(&e, &what);
                assert!(format!("{e:#}").contains("no-such-dir"), "{what}: {e:#}");
                assert!(format!("{e:#}").contains(&url), "{what}: the call's URL: {e}");
                drop(r);
                // A writer that fails after 1 MiB.
                let mut r = client.post(&url).body(body.clone()).send().await.unwrap();
                let e = r.copy_to(&mut Full { room: 1 << 20 }).await.unwrap_err();
                sink_error_names(&e, &what);
                assert!(format!("{e:#}").contains("no space left on the test device"), "{what}: {e:#}");
                drop(r);
                // The client still works on the same server.
                let r = client.get(format!("http://127.0.0.1:{}/hello", server.port())).send().await.unwrap();
                assert_eq!(r.text().await.unwrap(), "hello", "{what}");
            });
        }
        // The server cuts the body short: the body's error, never a short
        // success; the file holds what arrived.
        for http2 in [false, true] {
            let server = FaultServer::start(FaultOptions { http2, ..FaultOptions::default() });
            server.push([Reply { status: 200, body: body.clone(), fault: Fault::CloseDuringResponseBody }]);
            let version =
                if http2 { $adapter::HttpVersion::Http2Only } else { $adapter::HttpVersion::Http1Only };
            let client = $adapter::Client::builder().no_proxy().http_version(version).build().unwrap();
            let path = d.join("cut.bin");
            let url = format!("http://127.0.0.1:{}/", server.port());
            $block_on(async {
                let mut r = client.get(&url).send().await.unwrap();
                let e = r.save_to(&path).await.unwrap_err();
                assert!(e.is_body(), "http2 {http2}: {e:?}");
                assert!(
                    !matches!(
                        e.kind(),
                        switchyard_common::ErrorKind::Body(switchyard_common::BodyError::Sink(_))
                    ),
                    "http2 {http2}: the body's failure, not the file's: {e:?}"
                );
            });
            let kept = std::fs::read(&path).unwrap();
            assert!(
                kept.len() < body.len() && body.starts_with(&kept),
                "http2 {http2}: {} bytes kept",
                kept.len()
            );
        }
        let _ = std::fs::remove_dir_all(&d);
    }};
}

#[test]
fn tokio_copies_and_saves_bodies() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    async_checks!(
        switchyard_tokio,
        |f| rt.block_on(f),
        async |r: &mut switchyard_tokio::Response, path: std::path::PathBuf| {
            let mut file = tokio::fs::File::create(&path).await.unwrap();
            r.copy_to(&mut file).await.unwrap()
        }
    );
}

#[test]
fn smol_copies_and_saves_bodies() {
    async_checks!(
        switchyard_smol,
        smol::block_on,
        async |r: &mut switchyard_smol::Response, path: std::path::PathBuf| {
            let mut file = smol::fs::File::create(&path).await.unwrap();
            r.copy_to_futures(&mut file).await.unwrap()
        }
    );
}

#[test]
fn std_copies_and_saves_bodies() {
    let body = pattern();
    let d = dir("std");
    for (server, proto) in servers() {
        let version = if proto == "HTTP/2" {
            switchyard_std::HttpVersion::Http2Only
        } else {
            switchyard_std::HttpVersion::Http1Only
        };
        let client = switchyard_std::Client::builder().no_proxy().http_version(version).build().unwrap();
        let url = format!("http://127.0.0.1:{}/echo", server.port());
        let path = d.join("saved.bin");
        let mut r = client.post(&url).body(body.clone()).send().unwrap();
        assert_eq!(r.save_to(&path).unwrap(), body.len() as u64, "{proto}");
        assert!(std::fs::read(&path).unwrap() == body, "{proto}: save_to's bytes");
        let mut r = client.post(&url).body(body.clone()).send().unwrap();
        let mut file = std::fs::File::create(d.join("copied.bin")).unwrap();
        assert_eq!(r.copy_to(&mut file).unwrap(), body.len() as u64, "{proto}");
        drop(file);
        assert!(std::fs::read(d.join("copied.bin")).unwrap() == body, "{proto}: copy_to's bytes");
        assert_eq!(client.stats().totals.in_use, 0, "{proto}: every connection went back");
        let mut r = client.post(&url).body(body.clone()).send().unwrap();
        let e = r.save_to(d.join("no-such-dir").join("x.bin")).unwrap_err();
        sink_error_names(&e, proto);
        assert!(format!("{e:#}").contains("no-such-dir"), "{proto}: {e:#}");
        drop(r);
        let mut r = client.post(&url).body(body.clone()).send().unwrap();
        let e = r.copy_to(&mut Full { room: 1 << 20 }).unwrap_err();
        sink_error_names(&e, proto);
        drop(r);
        let r = client.get(format!("http://127.0.0.1:{}/hello", server.port())).send().unwrap();
        assert_eq!(r.text().unwrap(), "hello", "{proto}");
    }
    let server = FaultServer::start(FaultOptions::default());
    server.push([Reply { status: 200, body: body.clone(), fault: Fault::CloseDuringResponseBody }]);
    let client = switchyard_std::Client::builder().no_proxy().build().unwrap();
    let path = d.join("cut.bin");
    let mut r = client.get(format!("http://127.0.0.1:{}/", server.port())).send().unwrap();
    let e = r.save_to(&path).unwrap_err();
    assert!(e.is_body(), "{e:?}");
    let kept = std::fs::read(&path).unwrap();
    assert!(kept.len() < body.len() && body.starts_with(&kept), "{} bytes kept", kept.len());
    let _ = std::fs::remove_dir_all(&d);
}
