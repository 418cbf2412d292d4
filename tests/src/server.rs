//! A real HTTP/1.1 + HTTP/2 server (hyper, TLS by rustls) on loopback, started by
//! the test and stopped when dropped. It records, per request, the connection
//! index and the exchange index on that connection, so tests can assert reuse
//! from the server's side.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::ResolvesServerCertUsingSni;
use rustls::sign::CertifiedKey;

use crate::certs::Leaf;

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Record {
    /// Which accepted connection (0-based, in accept order).
    pub connection: usize,
    /// Which request on that connection (0-based).
    pub exchange: usize,
    /// The method.
    pub method: String,
    /// The path and query.
    pub path: String,
    /// HTTP/1.1 or HTTP/2.
    pub version: http::Version,
    /// The request body length.
    pub body_len: usize,
    /// The TLS server name the client sent, if TLS.
    pub sni: Option<String>,
    /// The `host` header or `:authority`.
    pub authority: Option<String>,
    /// The `authorization` header.
    pub authorization: Option<String>,
}

/// How the server is set up.
#[derive(Clone, Debug, Default)]
pub struct ServerOptions {
    /// Serve TLS with these certificates, chosen by SNI (first one is the default).
    pub tls: Vec<(Vec<String>, Leaf)>,
    /// HTTP/1.1 only (no HTTP/2).
    pub http1_only: bool,
    /// HTTP/2 only (prior knowledge over cleartext; ALPN h2 over TLS).
    pub http2_only: bool,
    /// HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS.
    pub max_concurrent_streams: Option<u32>,
    /// Extra loopback IPs to listen on (same port), e.g. `127.0.0.2`.
    pub also_on: Vec<std::net::IpAddr>,
    /// Also listen on this Unix-domain socket (created; removed first if it
    /// exists). Its connections count and record like the TCP ones.
    pub unix: Option<std::path::PathBuf>,
}

/// A running test server.
pub struct TestServer {
    /// The address it listens on (127.0.0.1).
    pub addr: SocketAddr,
    records: Arc<Mutex<Vec<Record>>>,
    connections: Arc<AtomicUsize>,
    handshakes: Arc<AtomicUsize>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for TestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestServer").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl TestServer {
    /// Starts a server on `127.0.0.1:0`.
    #[must_use]
    pub fn start(options: ServerOptions) -> TestServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        TestServer::start_on(listener, options)
    }

    /// Starts a server on a listener the test prepared (e.g. for the Happy
    /// Eyeballs port trick).
    #[must_use]
    pub fn start_on(listener: std::net::TcpListener, options: ServerOptions) -> TestServer {
        let addr = listener.local_addr().expect("local addr");
        let mut listeners = vec![listener];
        for ip in &options.also_on {
            listeners
                .push(std::net::TcpListener::bind(SocketAddr::new(*ip, addr.port())).expect("bind extra"));
        }
        #[cfg(unix)]
        let unix = options.unix.as_ref().map(|path| {
            let _ = std::fs::remove_file(path);
            let l = std::os::unix::net::UnixListener::bind(path).expect("bind the Unix socket");
            l.set_nonblocking(true).expect("nonblocking");
            l
        });
        #[cfg(not(unix))]
        let unix: Option<UnixListener> = None;
        let records = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let handshakes = Arc::new(AtomicUsize::new(0));
        let h = Arc::clone(&handshakes);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let (r, c) = (Arc::clone(&records), Arc::clone(&connections));
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("server runtime");
            rt.block_on(serve((listeners, unix), options, r, (c, h), stop_rx));
        });
        TestServer { addr, records, connections, handshakes, stop: Some(stop_tx), thread: Some(thread) }
    }

    /// The port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Every request so far, in arrival order.
    #[must_use]
    pub fn records(&self) -> Vec<Record> {
        self.records.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Forgets the requests recorded so far (a long run's record grows with
    /// every request).
    pub fn clear_records(&self) {
        if let Ok(mut r) = self.records.lock() {
            r.clear();
        }
    }

    /// Connections accepted so far.
    #[must_use]
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// TLS handshakes completed so far.
    #[must_use]
    pub fn handshakes(&self) -> usize {
        self.handshakes.load(Ordering::SeqCst)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn tls_acceptor(options: &ServerOptions) -> Option<tokio_rustls::TlsAcceptor> {
    if options.tls.is_empty() {
        return None;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut sni = ResolvesServerCertUsingSni::new();
    let mut default = None;
    for (names, leaf) in &options.tls {
        let chain: Vec<CertificateDer<'static>> =
            leaf.chain.iter().map(|c| CertificateDer::from(c.clone())).collect();
        let key = PrivateKeyDer::Pkcs8(leaf.key.clone().into());
        let signing = provider.key_provider.load_private_key(key).expect("test key");
        let certified = CertifiedKey::new(chain, signing);
        for n in names {
            // IP literals are not SNI names; they fall back to the default.
            if n.parse::<std::net::IpAddr>().is_err() {
                sni.add(n, certified.clone()).expect("SNI entry");
            }
        }
        default.get_or_insert(Arc::new(certified));
    }
    let resolver = Arc::new(WithDefault { sni, default: default.expect("one certificate") });
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = if options.http1_only {
        vec![b"http/1.1".to_vec()]
    } else if options.http2_only {
        vec![b"h2".to_vec()]
    } else {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    };
    Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

#[derive(Debug)]
struct WithDefault {
    sni: ResolvesServerCertUsingSni,
    default: Arc<CertifiedKey>,
}

impl rustls::server::ResolvesServerCert for WithDefault {
    fn resolve(&self, hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if hello.server_name().is_some() {
            if let Some(k) = self.sni.resolve(hello) {
                return Some(k);
            }
        }
        Some(Arc::clone(&self.default))
    }
}

/// Bound before the server starts, so a client may connect at once.
#[cfg(unix)]
type UnixListener = std::os::unix::net::UnixListener;
#[cfg(not(unix))]
type UnixListener = ();

async fn serve(
    (listeners, unix): (Vec<std::net::TcpListener>, Option<UnixListener>),
    options: ServerOptions,
    records: Arc<Mutex<Vec<Record>>>,
    (connections, handshakes): (Arc<AtomicUsize>, Arc<AtomicUsize>),
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let acceptor = tls_acceptor(&options);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Accepted>();
    #[cfg(unix)]
    if let Some(l) = unix {
        let l = tokio::net::UnixListener::from_std(l).expect("tokio Unix listener");
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                if tx.send(Accepted::Unix(s)).is_err() {
                    return;
                }
            }
        });
    }
    for l in listeners {
        l.set_nonblocking(true).expect("nonblocking");
        let l = tokio::net::TcpListener::from_std(l).expect("tokio listener");
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let _ = s.set_nodelay(true);
                if tx.send(Accepted::Tcp(s)).is_err() {
                    return;
                }
            }
        });
    }
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => return,
            s = rx.recv() => match s { Some(s) => s, None => return },
        };
        let index = connections.fetch_add(1, Ordering::SeqCst);
        let (records, acceptor, options) = (Arc::clone(&records), acceptor.clone(), options.clone());
        let handshakes = Arc::clone(&handshakes);
        tokio::spawn(async move {
            match accepted {
                Accepted::Tcp(s) => accept(s, index, acceptor, &options, records, &handshakes).await,
                #[cfg(unix)]
                Accepted::Unix(s) => accept(s, index, acceptor, &options, records, &handshakes).await,
            }
        });
    }
}

/// A connection the server accepted.
enum Accepted {
    Tcp(tokio::net::TcpStream),
    #[cfg(unix)]
    Unix(tokio::net::UnixStream),
}

/// TLS (when the server has certificates), then HTTP, on one connection.
async fn accept<S>(
    stream: S,
    index: usize,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    options: &ServerOptions,
    records: Arc<Mutex<Vec<Record>>>,
    handshakes: &AtomicUsize,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    match acceptor {
        Some(acceptor) => {
            let Ok(tls) = acceptor.accept(stream).await else { return };
            handshakes.fetch_add(1, Ordering::SeqCst);
            let sni = tls.get_ref().1.server_name().map(str::to_owned);
            serve_connection(TokioIo::new(tls), index, sni, options, records).await;
        }
        None => serve_connection(TokioIo::new(stream), index, None, options, records).await,
    }
}

async fn serve_connection<I>(
    io: I,
    index: usize,
    sni: Option<String>,
    options: &ServerOptions,
    records: Arc<Mutex<Vec<Record>>>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let exchanges = Arc::new(AtomicUsize::new(0));
    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let (records, exchanges, sni) = (Arc::clone(&records), Arc::clone(&exchanges), sni.clone());
        async move {
            let exchange = exchanges.fetch_add(1, Ordering::SeqCst);
            let (parts, body) = req.into_parts();
            // `/early/STATUS`: answered at once, the request body never read
            // (an upload refused by its head: 413, 401, 403).
            let early = parts.uri.path().strip_prefix("/early/").and_then(|s| s.parse::<u16>().ok());
            let body = match early {
                Some(_) => {
                    drop(body);
                    Bytes::new()
                }
                None => body.collect().await.map(|b| b.to_bytes()).unwrap_or_default(),
            };
            let authority = parts
                .uri
                .authority()
                .map(ToString::to_string)
                .or_else(|| parts.headers.get("host").and_then(|h| h.to_str().ok()).map(str::to_owned));
            let path = parts.uri.path_and_query().map_or("/".to_owned(), ToString::to_string);
            if let Ok(mut r) = records.lock() {
                r.push(Record {
                    connection: index,
                    exchange,
                    method: parts.method.to_string(),
                    path: path.clone(),
                    version: parts.version,
                    body_len: body.len(),
                    sni,
                    authority,
                    authorization: parts
                        .headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned),
                });
            }
            Ok::<_, Infallible>(respond(&path, &parts.headers, body).await)
        }
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    if let Some(n) = options.max_concurrent_streams {
        builder.http2().max_concurrent_streams(n);
    }
    let builder = if options.http1_only {
        builder.http1_only()
    } else if options.http2_only {
        builder.http2_only()
    } else {
        builder
    };
    let _ = builder.serve_connection(io, service).await;
}

/// What the server answers with: a whole buffer, or a body of its own
/// making (a delayed body, trailers).
type ServerBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn full(b: impl Into<Bytes>) -> ServerBody {
    Full::new(b.into()).boxed()
}

/// A body that waits `delay` after its head, then sends `data`, then the
/// trailers (if any).
struct Later {
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
    data: Option<Bytes>,
    trailers: Option<http::HeaderMap>,
}

impl http_body::Body for Later {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        if self.sleep.as_mut().poll(cx).is_pending() {
            return std::task::Poll::Pending;
        }
        if let Some(d) = self.data.take() {
            return std::task::Poll::Ready(Some(Ok(http_body::Frame::data(d))));
        }
        std::task::Poll::Ready(self.trailers.take().map(|t| Ok(http_body::Frame::trailers(t))))
    }
}

/// "hello, gzip" compressed with gzip (flate2), for `/gzip`.
fn gzipped() -> Bytes {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let _ = e.write_all(b"hello, gzip");
    Bytes::from(e.finish().unwrap_or_default())
}

/// Routes: `/hello`, `/echo`, `/close` (Connection: close), `/sleep/MS`,
/// `/bytes/N`, `/status/N`, `/headers` (the request's header fields, one
/// `name: value` per line, sorted), `/redirect/N` (302 to `/redirect/N-1`,
/// `/redirect/0` to `/hello`), `/gzip` (a gzip-encoded body), `/slow-body/MS`
/// (the head at once, the body MS later), `/trailers` (a body, then an
/// `x-checksum` trailer), `/goto/STATUS?URL` (a redirect with that status
/// to URL), `/bad-gzip` (gzip-labelled bytes that are not gzip), `/early/STATUS`
/// (that status at once, the request body never read), `/alt-svc/PORT` (`hello`
/// with `Alt-Svc: h3=":PORT"; ma=60`); anything else answers its path.
async fn respond(path: &str, headers: &http::HeaderMap, body: Bytes) -> hyper::Response<ServerBody> {
    let mut segments = path.trim_start_matches('/').split('/');
    let first = segments.next().unwrap_or_default();
    let first = first.split('?').next().unwrap_or_default();
    let arg = segments.next().and_then(|s| s.split('?').next()).and_then(|s| s.parse::<u64>().ok());
    let mut response = hyper::Response::new(full(path.to_owned()));
    match (first, arg) {
        ("hello", _) => *response.body_mut() = full(Bytes::from_static(b"hello")),
        ("alt-svc", Some(port)) => {
            let field = format!("h3=\":{port}\"; ma=60");
            if let Ok(field) = http::HeaderValue::try_from(field) {
                response.headers_mut().insert("alt-svc", field);
            }
            *response.body_mut() = full(Bytes::from_static(b"hello"));
        }
        ("echo", _) => *response.body_mut() = full(body),
        ("close", _) => {
            response.headers_mut().insert("connection", http::HeaderValue::from_static("close"));
        }
        ("sleep", Some(ms)) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            *response.body_mut() = full(Bytes::from_static(b"slept"));
        }
        ("bytes", Some(n)) => *response.body_mut() = full(vec![b'x'; usize::try_from(n).unwrap_or(0)]),
        ("status", Some(code)) => {
            *response.status_mut() =
                http::StatusCode::from_u16(u16::try_from(code).unwrap_or(500)).unwrap_or_default();
        }
        ("headers", _) => {
            let mut lines: Vec<String> = headers
                .iter()
                .map(|(n, v)| format!("{n}: {}", String::from_utf8_lossy(v.as_bytes())))
                .collect();
            lines.sort();
            *response.body_mut() = full(lines.join("\n"));
        }
        ("redirect", Some(n)) => {
            *response.status_mut() = http::StatusCode::FOUND;
            let to = if n == 0 { "/hello".to_owned() } else { format!("/redirect/{}", n - 1) };
            response.headers_mut().insert(
                "location",
                http::HeaderValue::try_from(to).unwrap_or(http::HeaderValue::from_static("/hello")),
            );
            *response.body_mut() = full(Bytes::new());
        }
        ("goto", Some(code)) => {
            *response.status_mut() = http::StatusCode::from_u16(u16::try_from(code).unwrap_or(302))
                .unwrap_or(http::StatusCode::FOUND);
            let to = path.split_once('?').map_or("/hello", |(_, to)| to);
            if let Ok(to) = http::HeaderValue::try_from(to) {
                response.headers_mut().insert("location", to);
            }
            *response.body_mut() = full(Bytes::new());
        }
        ("gzip", _) => {
            response.headers_mut().insert("content-encoding", http::HeaderValue::from_static("gzip"));
            *response.body_mut() = full(gzipped());
        }
        ("bad-gzip", _) => {
            response.headers_mut().insert("content-encoding", http::HeaderValue::from_static("gzip"));
            *response.body_mut() = full(Bytes::from_static(b"this is not gzip at all"));
        }
        ("early", Some(code)) => {
            *response.status_mut() =
                http::StatusCode::from_u16(u16::try_from(code).unwrap_or(413)).unwrap_or_default();
            *response.body_mut() = full(Bytes::from_static(b"refused before reading"));
        }
        ("slow-body", Some(ms)) => {
            *response.body_mut() = Later {
                sleep: Box::pin(tokio::time::sleep(Duration::from_millis(ms))),
                data: Some(Bytes::from_static(b"late")),
                trailers: None,
            }
            .boxed();
        }
        ("trailers", _) => {
            let mut t = http::HeaderMap::new();
            t.insert("x-checksum", http::HeaderValue::from_static("abc"));
            *response.body_mut() = Later {
                sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
                data: Some(Bytes::from_static(b"with trailers")),
                trailers: Some(t),
            }
            .boxed();
        }
        _ => {}
    }
    response
}
