//! Scenario 7: large bodies. Downloads of 64 MiB one at a time and of 1 MiB
//! eight at a time, over HTTP/1.1 cleartext (the single-thread tokio server),
//! HTTP/1.1 over TLS and HTTP/2 over TLS (h2o serving files, ALPN picks the
//! protocol); uploads of 64 MiB over each of the three (a single-thread
//! tokio server reading and dropping the body; over TLS with ALPN). Every
//! response body is read chunk by chunk and dropped (what a download to a
//! file costs the client).
//!
//! The limit (`raw`) is the least a client can do: a blocking socket read
//! loop for cleartext, the same over a rustls stream for TLS, and the `h2`
//! crate alone (with switchyard's default windows) for HTTP/2.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::measure::{
    cpu, h2_bare, smol_concurrent_with, summarize, switchyard_drain, thread_concurrent_with, tls_config_alpn,
    tokio_concurrent_with, Fixed, Sample,
};
use crate::server::{self, LARGE, MEDIUM, TLS_HOST};

/// How the bytes travel.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Wire {
    /// HTTP/1.1 over plain TCP.
    Clear,
    /// HTTP/1.1 over TLS (ALPN `http/1.1`).
    Tls,
    /// HTTP/2 over TLS (ALPN `h2`), one connection.
    H2,
}

/// One row of scenario 7.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// The scenario id (`--only`).
    pub id: &'static str,
    /// How the bytes travel.
    pub wire: Wire,
    /// Body bytes per request.
    pub size: usize,
    /// Calls at once.
    pub width: usize,
    /// Upload (`POST` with the body, small answer) instead of download.
    pub upload: bool,
    /// Download into a file (in the system's temporary directory) instead
    /// of dropping the chunks: each client's documented fast way.
    pub file: bool,
}

/// Every row, in report order.
pub const SPECS: &[Spec] = &[
    Spec { id: "s7", wire: Wire::Clear, size: LARGE, width: 1, upload: false, file: false },
    Spec { id: "s7-1m8", wire: Wire::Clear, size: MEDIUM, width: 8, upload: false, file: false },
    Spec { id: "s7-up", wire: Wire::Clear, size: LARGE, width: 1, upload: true, file: false },
    Spec { id: "s7-file", wire: Wire::Clear, size: LARGE, width: 1, upload: false, file: true },
    Spec { id: "s7-tls", wire: Wire::Tls, size: LARGE, width: 1, upload: false, file: false },
    Spec { id: "s7-tls-1m8", wire: Wire::Tls, size: MEDIUM, width: 8, upload: false, file: false },
    Spec { id: "s7-tls-up", wire: Wire::Tls, size: LARGE, width: 1, upload: true, file: false },
    Spec { id: "s7-h2", wire: Wire::H2, size: LARGE, width: 1, upload: false, file: false },
    Spec { id: "s7-h2-1m8", wire: Wire::H2, size: MEDIUM, width: 8, upload: false, file: false },
    Spec { id: "s7-h2-up", wire: Wire::H2, size: LARGE, width: 1, upload: true, file: false },
];

/// The row with this id.
pub fn spec(id: &str) -> Option<Spec> {
    SPECS.iter().copied().find(|s| s.id == id)
}

impl Spec {
    /// The report's heading.
    pub fn title(&self) -> String {
        let mib = self.size >> 20;
        let what = if self.upload {
            "uploads (POST)"
        } else if self.file {
            "GETs saved to a file"
        } else {
            "GETs"
        };
        let how = match self.wire {
            Wire::Clear => "HTTP/1.1 cleartext",
            Wire::Tls => "HTTP/1.1 over TLS",
            Wire::H2 => "HTTP/2 over TLS, one connection",
        };
        let at_once =
            if self.width == 1 { "sequential".to_owned() } else { format!("{} at once", self.width) };
        format!(
            "7. Large bodies: {mib} MiB {what}, {at_once}, {how} (req/s × {mib} = MiB/s; CPU per request = per {mib} MiB)"
        )
    }

    /// Requests per measurement.
    pub fn requests(&self, quick: bool) -> usize {
        match (self.size == LARGE, quick) {
            (true, true) => 3,
            (true, false) => 20,
            (false, true) => 64,
            (false, false) => 800,
        }
    }

    /// The clients that apply.
    pub fn clients(&self) -> &'static [&'static str] {
        if self.file {
            // Into a file: switchyard's `save_to` (tokio, smol, std), tokio's
            // `copy_to` into a `tokio::fs::File` (`-copy`), and the old
            // documented way, `into_reader` + `tokio::io::copy` (`-reader`);
            // reqwest's chunk loop into a `tokio::fs::File`, ureq's
            // `io::copy` into a `std::fs::File`.
            return &[
                "switchyard-tokio",
                "switchyard-tokio-copy",
                "switchyard-tokio-reader",
                "switchyard-smol",
                "switchyard-std",
                "reqwest",
                "ureq",
            ];
        }
        match self.wire {
            // `-reader`: switchyard-tokio through `into_reader()` and
            // `tokio::io::copy` instead of the chunk loop.
            Wire::Clear => &[
                "raw",
                "switchyard-tokio",
                "switchyard-tokio-reader",
                "switchyard-smol",
                "switchyard-std",
                "hyper-util",
                "reqwest",
                "ureq",
            ],
            // ureq is built without TLS here.
            Wire::Tls => {
                &["raw", "switchyard-tokio", "switchyard-smol", "switchyard-std", "hyper-util", "reqwest"]
            }
            // `-adaptive`: switchyard-tokio with the adaptive window (starting
            // at 64 KiB, growing to the same 16 / 32 MiB), and hyper-util with
            // its own (h2's BDP estimate).
            Wire::H2 => &[
                "raw",
                "switchyard-tokio",
                "switchyard-tokio-adaptive",
                "switchyard-smol",
                "switchyard-std",
                "hyper-util",
                "hyper-util-adaptive",
                "reqwest",
            ],
        }
    }

    /// The file h2o serves for this size.
    fn path(&self) -> &'static str {
        if self.size == LARGE {
            "/large.bin"
        } else {
            "/medium.bin"
        }
    }

    fn url(&self, port: u16) -> String {
        match self.wire {
            Wire::Clear => format!("http://127.0.0.1:{port}/"),
            Wire::Tls | Wire::H2 => format!("https://{TLS_HOST}:{port}{}", self.path()),
        }
    }
}

/// The bench CA (DER), for the TLS rows.
fn ca() -> Option<Vec<u8>> {
    std::fs::read(std::env::var_os("SWITCHYARD_BENCH_CA")?).ok()
}

fn alpn(wire: Wire) -> &'static [u8] {
    if wire == Wire::H2 {
        b"h2"
    } else {
        b"http/1.1"
    }
}

/// A POST of `upload` when there is one, else a GET (every client's builder
/// spells it the same way).
macro_rules! get_or_post {
    ($client:expr, $url:expr, $upload:expr) => {
        match $upload {
            Some(body) => $client.post($url).body(body),
            None => $client.get($url),
        }
    };
}

/// A switchyard client builder (any adapter) set up for the row: the row's
/// HTTP version, and on TLS rows the bench CA with [`TLS_HOST`] on 127.0.0.1.
macro_rules! for_row {
    ($builder:expr, $spec:expr, $port:expr) => {{
        let b = $builder.http_version(match $spec.wire {
            Wire::Clear | Wire::Tls => switchyard_tokio::HttpVersion::Http1Only,
            Wire::H2 => switchyard_tokio::HttpVersion::Http2Only,
        });
        match $spec.wire {
            Wire::Clear => b,
            _ => b.add_root_certificate(ca()?).resolve(&format!("{TLS_HOST}:{}", $port), [local()]),
        }
    }};
}

/// One measurement of `client` on this row: `n` requests.
pub fn client(spec: Spec, client: &str, port: u16, n: usize) -> Option<Sample> {
    let url: &'static str = Box::leak(spec.url(port).into_boxed_str());
    let socket = SocketAddr::from(([127, 0, 0, 1], port));
    let upload = spec.upload.then(|| Bytes::from(vec![b'u'; spec.size]));
    // Downloads count body bytes; uploads count the small answer's.
    let expect = if spec.upload { server::BODY.len() } else { spec.size };
    let check = move |got: usize| assert_eq!(got, expect, "the whole body");
    let tls = match spec.wire {
        Wire::Clear => None,
        wire => Some(tls_config_alpn(&ca()?, alpn(wire))?),
    };
    let w = spec.width;
    if spec.file {
        return to_file(spec, client, url, n, check);
    }
    Some(match client {
        "raw" => match spec.wire {
            // The `h2` crate alone, with switchyard's default windows, so the
            // window is never the limit.
            Wire::H2 => {
                let windows = Some((16 << 20, 32 << 20));
                h2_bare(w, n, url.parse().ok()?, socket, Some(Arc::new(tls?)), windows, (upload, expect))
            }
            _ => raw(spec, n, port, tls.map(Arc::new), upload, check),
        },
        "switchyard-tokio" | "switchyard-tokio-adaptive" => {
            let b = switchyard_tokio::Client::builder().http2_adaptive_window(client.ends_with("-adaptive"));
            let c = for_row!(b, spec, port).build().ok()?;
            tokio_concurrent_with(w, n, move || {
                let (c, up) = (c.clone(), upload.clone());
                async move { check(switchyard_call(&c, url, up).await) }
            })
        }
        "switchyard-tokio-reader" if spec.wire == Wire::Clear => {
            let c = for_row!(switchyard_tokio::Client::builder(), spec, port).build().ok()?;
            tokio_concurrent_with(w, n, move || {
                let (c, up) = (c.clone(), upload.clone());
                async move {
                    let r = get_or_post!(c, url, up).send().await.expect("switchyard");
                    let mut reader = r.into_body().into_reader();
                    let got = tokio::io::copy(&mut reader, &mut tokio::io::sink()).await.expect("body");
                    check(usize::try_from(got).unwrap_or(0));
                }
            })
        }
        "switchyard-smol" => {
            let c = for_row!(switchyard_smol::Client::builder(), spec, port).build().ok()?;
            smol_concurrent_with(w, n, move || {
                let (c, up) = (c.clone(), upload.clone());
                async move { check(switchyard_call(&c, url, up).await) }
            })
        }
        "switchyard-std" => {
            let c = for_row!(switchyard_std::Client::builder(), spec, port).build().ok()?;
            thread_concurrent_with(w, n, || {
                let mut r = get_or_post!(c, url, upload.clone()).send().expect("switchyard-std");
                let mut got = 0;
                while let Some(chunk) = r.body_mut().chunk().expect("body") {
                    got += chunk.len();
                }
                check(got);
            })
        }
        "hyper-util" | "hyper-util-adaptive" => {
            use hyper_util::client::legacy::{connect::HttpConnector, Client};
            let mut http = HttpConnector::new_with_resolver(Fixed(vec![socket]));
            http.enforce_http(spec.wire == Wire::Clear);
            http.set_nodelay(true);
            let builder = {
                let mut b = Client::builder(hyper_util::rt::TokioExecutor::new());
                b.http2_only(spec.wire == Wire::H2);
                b.http2_adaptive_window(client.ends_with("-adaptive"));
                b
            };
            let uri: http::Uri = url.parse().ok()?;
            match tls {
                None => {
                    let c: Client<_, http_body_util::Full<Bytes>> = builder.build(http);
                    tokio_concurrent_with(w, n, move || {
                        let (c, uri, up) = (c.clone(), uri.clone(), upload.clone());
                        async move { check(hyper_call(&c, uri, up).await) }
                    })
                }
                Some(mut config) => {
                    // hyper-rustls sets ALPN itself.
                    config.alpn_protocols.clear();
                    let https =
                        hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config).https_only();
                    let https = if spec.wire == Wire::H2 {
                        https.enable_http2().wrap_connector(http)
                    } else {
                        https.enable_http1().wrap_connector(http)
                    };
                    let c: Client<_, http_body_util::Full<Bytes>> = builder.build(https);
                    tokio_concurrent_with(w, n, move || {
                        let (c, uri, up) = (c.clone(), uri.clone(), upload.clone());
                        async move { check(hyper_call(&c, uri, up).await) }
                    })
                }
            }
        }
        "reqwest" => {
            let b = reqwest::Client::builder();
            let c = match (spec.wire, tls) {
                (Wire::Clear, _) => b.http1_only(),
                (Wire::Tls, Some(config)) => {
                    b.tls_backend_preconfigured(config).resolve(TLS_HOST, socket).http1_only()
                }
                (_, Some(config)) => b.tls_backend_preconfigured(config).resolve(TLS_HOST, socket),
                (_, None) => return None,
            }
            .build()
            .ok()?;
            tokio_concurrent_with(w, n, move || {
                let (c, up) = (c.clone(), upload.clone());
                async move {
                    let mut r = get_or_post!(c, url, up).send().await.expect("reqwest");
                    let mut got = 0;
                    while let Some(chunk) = r.chunk().await.expect("body") {
                        got += chunk.len();
                    }
                    check(got);
                }
            })
        }
        "ureq" if spec.wire == Wire::Clear => {
            let agent: ureq::Agent =
                ureq::Agent::config_builder().max_idle_connections_per_host(spec.width).build().into();
            thread_concurrent_with(w, n, || {
                let mut r = match &upload {
                    Some(body) => agent.post(url).send(&body[..]).expect("ureq"),
                    None => agent.get(url).call().expect("ureq"),
                };
                let got = std::io::copy(&mut r.body_mut().as_reader(), &mut std::io::sink()).expect("body");
                check(usize::try_from(got).unwrap_or(0));
            })
        }
        _ => return None,
    })
}

/// Where a client of the file row writes (one file per client, rewritten by
/// each request).
fn file_for(client: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("switchyard-bench-{client}-{}.bin", std::process::id()))
}

/// The file row (cleartext HTTP/1.1, sequential downloads into a file).
fn to_file(
    spec: Spec,
    client: &str,
    url: &'static str,
    n: usize,
    check: impl Fn(usize) + Copy + Send + Sync + 'static,
) -> Option<Sample> {
    let path = file_for(client);
    let sample = match client {
        "switchyard-tokio" | "switchyard-tokio-copy" | "switchyard-tokio-reader" => {
            let c = for_row!(switchyard_tokio::Client::builder(), spec, 0).build().ok()?;
            let how = client.to_owned();
            tokio_concurrent_with(1, n, move || {
                let (c, path, how) = (c.clone(), path.clone(), how.clone());
                async move {
                    let mut r = c.get(url).send().await.expect("switchyard");
                    let got = match how.as_str() {
                        "switchyard-tokio" => r.save_to(&path).await.expect("body"),
                        "switchyard-tokio-copy" => {
                            let mut file = tokio::fs::File::create(&path).await.expect("file");
                            r.copy_to(&mut file).await.expect("body")
                        }
                        _ => {
                            let mut file = tokio::fs::File::create(&path).await.expect("file");
                            let mut reader = r.into_reader();
                            let got = tokio::io::copy(&mut reader, &mut file).await.expect("body");
                            tokio::io::AsyncWriteExt::flush(&mut file).await.expect("flush");
                            got
                        }
                    };
                    check(usize::try_from(got).unwrap_or(0));
                }
            })
        }
        "switchyard-smol" => {
            let c = for_row!(switchyard_smol::Client::builder(), spec, 0).build().ok()?;
            smol_concurrent_with(1, n, move || {
                let (c, path) = (c.clone(), path.clone());
                async move {
                    let mut r = c.get(url).send().await.expect("switchyard");
                    check(usize::try_from(r.save_to(&path).await.expect("body")).unwrap_or(0));
                }
            })
        }
        "switchyard-std" => {
            let c = for_row!(switchyard_std::Client::builder(), spec, 0).build().ok()?;
            thread_concurrent_with(1, n, || {
                let mut r = c.get(url).send().expect("switchyard-std");
                check(usize::try_from(r.save_to(&path).expect("body")).unwrap_or(0));
            })
        }
        "reqwest" => {
            let c = reqwest::Client::builder().http1_only().build().ok()?;
            tokio_concurrent_with(1, n, move || {
                let (c, path) = (c.clone(), path.clone());
                async move {
                    use tokio::io::AsyncWriteExt;
                    let mut r = c.get(url).send().await.expect("reqwest");
                    let mut file = tokio::fs::File::create(&path).await.expect("file");
                    let mut got = 0;
                    while let Some(chunk) = r.chunk().await.expect("body") {
                        file.write_all(&chunk).await.expect("write");
                        got += chunk.len();
                    }
                    file.flush().await.expect("flush");
                    check(got);
                }
            })
        }
        "ureq" => {
            let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
            thread_concurrent_with(1, n, || {
                let mut r = agent.get(url).call().expect("ureq");
                let mut file = std::fs::File::create(&path).expect("file");
                let got = std::io::copy(&mut r.body_mut().as_reader(), &mut file).expect("body");
                check(usize::try_from(got).unwrap_or(0));
            })
        }
        _ => return None,
    };
    let _ = std::fs::remove_file(file_for(client));
    Some(sample)
}

fn local() -> IpAddr {
    IpAddr::from([127u8, 0, 0, 1])
}

/// One switchyard call: a GET, or a POST of `upload`; the body bytes read.
async fn switchyard_call<R: switchyard_async::Runtime>(
    c: &switchyard_async::Client<R>,
    url: &str,
    upload: Option<Bytes>,
) -> usize {
    match upload {
        None => switchyard_drain(c, url).await,
        up => {
            let mut r = get_or_post!(c, url, up).send().await.expect("switchyard");
            let mut got = 0;
            while let Some(chunk) = r.body_mut().chunk().await.expect("body") {
                got += chunk.len();
            }
            got
        }
    }
}

/// One hyper-util call: a GET (empty body), or a POST of `upload`.
async fn hyper_call<C>(
    c: &hyper_util::client::legacy::Client<C, http_body_util::Full<Bytes>>,
    uri: http::Uri,
    upload: Option<Bytes>,
) -> usize
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    use http_body_util::BodyExt;
    let req = match upload {
        Some(body) => http::Request::post(uri).body(http_body_util::Full::new(body)),
        None => http::Request::get(uri).body(http_body_util::Full::new(Bytes::new())),
    }
    .expect("request");
    let mut body = c.request(req).await.expect("hyper").into_body();
    let mut got = 0;
    while let Some(frame) = body.frame().await {
        got += frame.expect("body").data_ref().map_or(0, Bytes::len);
    }
    got
}

/// The cleartext or TLS limit: `width` threads, each on a connection of its
/// own, writing the request and reading the response with one 64 KiB buffer.
fn raw(
    spec: Spec,
    n: usize,
    port: u16,
    tls: Option<Arc<rustls::ClientConfig>>,
    upload: Option<Bytes>,
    check: impl Fn(usize) + Sync,
) -> Sample {
    let head = match &upload {
        Some(body) => {
            format!("POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\n\r\n", body.len())
        }
        None if tls.is_some() => format!("GET {} HTTP/1.1\r\nHost: {TLS_HOST}:{port}\r\n\r\n", spec.path()),
        None => format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"),
    };
    let body_len = if upload.is_some() { server::BODY.len() } else { spec.size };
    let connect = || -> Box<dyn ReadWrite> {
        let tcp = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        tcp.set_nodelay(true).expect("nodelay");
        match &tls {
            None => Box::new(tcp),
            Some(config) => {
                let name = rustls::pki_types::ServerName::try_from(TLS_HOST).expect("name");
                let conn = rustls::ClientConnection::new(Arc::clone(config), name).expect("tls");
                Box::new(rustls::StreamOwned::new(conn, tcp))
            }
        }
    };
    let one = |s: &mut dyn ReadWrite, buf: &mut [u8]| {
        s.write_all(head.as_bytes()).expect("write");
        if let Some(body) = &upload {
            s.write_all(body).expect("write body");
        }
        s.flush().expect("flush");
        // The head (whatever the server puts in it), then `body_len` bytes.
        let mut head_seen: Vec<u8> = Vec::new();
        let mut body: Option<usize> = None;
        loop {
            let k = s.read(buf).expect("read");
            assert!(k > 0, "server closed early");
            match body.as_mut() {
                Some(b) => *b += k,
                None => {
                    head_seen.extend_from_slice(&buf[..k]);
                    body = head_seen
                        .windows(4)
                        .position(|w| w == b"\r\n\r\n")
                        .map(|e| head_seen.len() - (e + 4));
                }
            }
            if let Some(b) = body.filter(|b| *b >= body_len) {
                check(b);
                return;
            }
        }
    };
    let per = n / spec.width;
    let run = |count: usize| {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..spec.width)
                .map(|_| {
                    scope.spawn(|| {
                        let mut s = connect();
                        let mut buf = vec![0u8; 64 * 1024];
                        (0..count)
                            .map(|_| {
                                let t = Instant::now();
                                one(&mut *s, &mut buf);
                                t.elapsed()
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().flat_map(|h| h.join().expect("thread")).collect::<Vec<_>>()
        })
    };
    run(1);
    let (c0, t0) = (cpu(), Instant::now());
    let lat = run(per);
    summarize(lat, t0.elapsed(), cpu() - c0, per * spec.width)
}

/// A blocking byte stream: a TCP socket or a rustls stream over one.
trait ReadWrite: Read + Write + Send {}
impl<T: Read + Write + Send> ReadWrite for T {}
