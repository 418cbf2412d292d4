//! Scenario 9: HTTP/3 (issue 59). 64 concurrent calls on one HTTP/3
//! connection (`s9`), and 64 MiB downloads one after another (`s9-large`), to
//! ngtcp2's example server (`gtlsserver`, Debian's
//! `ngtcp2-server`: ngtcp2 and nghttp3 in C, serving files), each answered
//! with [`BODY`]: switchyard's QUIC connection (quinn-proto pumped by the
//! adapter, our HTTP/3 framing and QPACK) against h3 + h3-quinn on quinn,
//! the Rust HTTP/3 stack others build on — the limit a client library could
//! reach with the ecosystem's HTTP/3 (reqwest's is behind an unstable flag).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::measure::{smol_concurrent_with, switchyard_drain, tokio_concurrent_with, Sample, CONCURRENCY};
use crate::server::{Tls, BODY, LARGE, TLS_HOST};

/// The clients of scenario 9.
pub const CLIENTS: &[&str] = &["h3-quinn", "switchyard-tokio", "switchyard-smol"];

/// ngtcp2's server on a free UDP port of 127.0.0.1, serving `/hello`.
pub struct Ngtcp2 {
    child: std::process::Child,
    /// Its UDP port.
    pub port: u16,
    dir: PathBuf,
}

impl Drop for Ngtcp2 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What serves scenario 9 (for the report).
pub const SERVER: &str = "ngtcp2's gtlsserver (ngtcp2 + nghttp3, C), one process, UDP";

impl Ngtcp2 {
    /// Starts it with the bench's certificate, or `None` when it is not installed.
    pub fn start(tls: &Tls) -> Option<Ngtcp2> {
        let program =
            ["gtlsserver", "/usr/sbin/gtlsserver", "/usr/bin/gtlsserver"].into_iter().find(|p| {
                Command::new(p).arg("--help").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
            })?;
        let dir = std::env::temp_dir().join(format!("switchyard-bench-{}-h3", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("htdocs")).ok()?;
        std::fs::write(dir.join("htdocs/hello"), BODY).ok()?;
        std::fs::write(dir.join("htdocs/large.bin"), vec![b'x'; LARGE]).ok()?;
        let (cert, key) = tls.pem_files(&dir)?;
        let port = std::net::UdpSocket::bind("127.0.0.1:0").and_then(|s| s.local_addr()).ok()?.port();
        let child = Command::new(program)
            .args(["-q", "-d"])
            .arg(dir.join("htdocs"))
            .args(["127.0.0.1", &port.to_string()])
            .arg(key)
            .arg(cert)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        // A UDP server has no accept to wait for: give it its start-up.
        std::thread::sleep(Duration::from_millis(300));
        Some(Ngtcp2 { child, port, dir })
    }
}

/// A client of any async adapter speaking only HTTP/3 to the bench server.
fn http3_only<R: switchyard_async::Runtime + Default>(
    ca: Vec<u8>,
    port: u16,
) -> Option<switchyard_async::Client<R>> {
    switchyard_async::Client::<R>::builder()
        .http_version(switchyard_async::switchyard_common::HttpVersion::Http3Only)
        .add_root_certificate(ca)
        .resolve(&format!("{TLS_HOST}:{port}"), [std::net::IpAddr::from([127, 0, 0, 1])])
        .build()
        .ok()
}

/// The bench CA (DER).
fn ca() -> Option<Vec<u8>> {
    std::fs::read(std::env::var_os("SWITCHYARD_BENCH_CA")?).ok()
}

/// The title of `s9-large`.
pub fn large_title() -> String {
    let mib = LARGE >> 20;
    format!(
        "9. Large body over HTTP/3: {mib} MiB GETs, sequential, one connection (req/s × {mib} = MiB/s; CPU per request = per {mib} MiB)"
    )
}

/// `n` downloads of [`LARGE`] bytes, one after another, by `client`.
pub fn large_client(client: &str, port: u16, n: usize) -> Option<Sample> {
    let ca = ca()?;
    let url: &'static str = Box::leak(format!("https://{TLS_HOST}:{port}/large.bin").into_boxed_str());
    let check = |got: usize| assert_eq!(got, LARGE, "the whole body");
    Some(match client {
        "switchyard-tokio" => {
            let c: switchyard_tokio::Client = http3_only(ca, port)?;
            tokio_concurrent_with(1, n, move || {
                let c = c.clone();
                async move { check(switchyard_drain(&c, url).await) }
            })
        }
        "switchyard-smol" => {
            let c: switchyard_smol::Client = http3_only(ca, port)?;
            smol_concurrent_with(1, n, move || {
                let c = c.clone();
                async move { check(switchyard_drain(&c, url).await) }
            })
        }
        "h3-quinn" => h3_quinn(1, n, port, ca, url, LARGE)?,
        _ => return None,
    })
}

/// `n` calls, 64 at a time on one connection, by `client`.
pub fn client(client: &str, port: u16, n: usize) -> Option<Sample> {
    let ca = ca()?;
    let url: &'static str = Box::leak(format!("https://{TLS_HOST}:{port}/hello").into_boxed_str());
    Some(match client {
        "switchyard-tokio" => {
            let c: switchyard_tokio::Client = http3_only(ca, port)?;
            tokio_concurrent_with(CONCURRENCY, n, move || {
                let c = c.clone();
                async move { get(&c, url).await }
            })
        }
        "switchyard-smol" => {
            let c: switchyard_smol::Client = http3_only(ca, port)?;
            smol_concurrent_with(CONCURRENCY, n, move || {
                let c = c.clone();
                async move { get(&c, url).await }
            })
        }
        "h3-quinn" => h3_quinn(CONCURRENCY, n, port, ca, url, BODY.len())?,
        _ => return None,
    })
}

async fn get<R: switchyard_async::Runtime>(c: &switchyard_async::Client<R>, url: &str) {
    let mut r = c.get(url).send().await.expect("switchyard over HTTP/3");
    assert_eq!(r.version(), http::Version::HTTP_3);
    assert_eq!(r.body_mut().collect().await.expect("body").as_ref(), BODY);
}

/// h3 + h3-quinn on quinn: one connection, its driver on the same
/// single-thread runtime as the calls; `width` calls at a time, each body
/// read to its end and counted (`expect` bytes).
fn h3_quinn(
    width: usize,
    n: usize,
    port: u16,
    ca: Vec<u8>,
    url: &'static str,
    expect: usize,
) -> Option<Sample> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
    let send = rt.block_on(async {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(rustls::pki_types::CertificateDer::from(ca)).ok()?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .ok()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"h3".to_vec()];
        let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).ok()?;
        let mut endpoint = quinn::Endpoint::client(([127, 0, 0, 1], 0).into()).ok()?;
        endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(quic)));
        let conn = endpoint.connect(([127, 0, 0, 1], port).into(), TLS_HOST).ok()?.await.ok()?;
        let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn)).await.ok()?;
        tokio::spawn(async move {
            let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
            drop(endpoint);
        });
        Some(send)
    })?;
    let sample = crate::measure::on_runtime(&rt, width, n, move || {
        let mut send = send.clone();
        async move {
            let request = http::Request::get(url).body(()).expect("request");
            let mut stream = send.send_request(request).await.expect("h3 request");
            stream.finish().await.expect("h3 finish");
            let response = stream.recv_response().await.expect("h3 response");
            assert_eq!(response.status(), 200);
            // Counted and dropped, as the switchyard rows do.
            let mut got = 0;
            while let Some(chunk) = stream.recv_data().await.expect("h3 body") {
                got += bytes::Buf::remaining(&chunk);
            }
            assert_eq!(got, expect);
        }
    });
    Some(sample)
}
