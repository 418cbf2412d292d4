//! A server that fails on purpose (OkHttp's MockWebServer socket policies are
//! the model): scripted replies, one per request, each with a [`Fault`]; HTTP/1.1
//! (hand-written, so every byte can misbehave) and HTTP/2 (the `h2` server, for
//! resets, GOAWAY and SETTINGS); cleartext or TLS. It records every request
//! with its connection and exchange index. Loopback only; stops when dropped.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::certs::Leaf;
use crate::server::Record;

/// How a reply misbehaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Behave.
    None,
    /// Close the connection as soon as it is accepted (before reading).
    CloseAtStart,
    /// Accept, then neither read nor write (after TLS, if any).
    StallAtStart,
    /// Fail the TLS handshake (close during it).
    FailTlsHandshake,
    /// Read the request, then close without answering.
    CloseAfterRequest,
    /// Read the request, then half-close (FIN) without answering.
    HalfCloseAfterRequest,
    /// Read half the request body, then close.
    CloseDuringRequestBody,
    /// Read the request, never answer.
    NoResponse,
    /// HTTP/2: stop driving the whole connection after reading the request (no
    /// frames at all, not even PING replies). HTTP/1.1: as `NoResponse`.
    StallConnection,
    /// Send the head and half the body, then close.
    CloseDuringResponseBody,
    /// Answer, then stop reading: the next request on the connection is never
    /// read or answered (the socket stays open).
    ShutdownInputAfterResponse,
    /// Answer, then shut down the output side (FIN).
    ShutdownOutputAfterResponse,
    /// Answer with `Connection: close` (HTTP/1.1) or then GOAWAY (HTTP/2), and close.
    CloseAfterResponse,
    /// Answer without reading the request body, then close.
    DoNotReadRequestBody,
    /// HTTP/2: reset the stream at once with this error code.
    Reset(u32),
    /// Never send `100 Continue`, even when asked.
    ContinueNever,
    /// Send `100 Continue` even when not asked.
    ContinueAlways,
    /// Wait before the response head.
    HeaderDelay(Duration),
    /// Wait between the head and the body.
    BodyDelay(Duration),
    /// Write the body in chunks of this many bytes, with a delay between them.
    Throttle(usize, Duration),
    /// HTTP/1.1: after the request, answer with exactly these bytes (whatever
    /// they are: a smuggled second response, a body on a 204, not HTTP at all)
    /// in one write, then hold the connection open without reading.
    Raw(Vec<u8>),
    /// HTTP/1.1: write the response head a few bytes at a time with this delay
    /// between writes, for about 6 s, then finish it.
    TrickleHead(Duration),
    /// HTTP/1.1: `100 Continue` heads as fast as the client takes them, for up
    /// to 10 s, then a final response.
    EndlessInterim,
    /// HTTP/1.1: answer right after the request head without reading the body,
    /// then hold the connection open, still not reading.
    AnswerBeforeBody,
    /// HTTP/1.1: answer right after the request head with `Connection: close`,
    /// then close as real servers do (FIN, then discard whatever still arrives
    /// for up to 2 s — a "lingering close" — so the answer is not lost to a reset).
    AnswerBeforeBodyThenClose,
    /// HTTP/2: send the head and half the body, then reset the stream with this code.
    ResetDuringResponseBody(u32),
    /// A response header field this many bytes long (`x-huge`).
    HugeHeader(usize),
    /// Trailers after the body: this many fields (`x-t-N`), each value this
    /// many bytes (HTTP/1.1: a chunked body with a trailer section).
    Trailers(usize, usize),
}

/// The trailer fields of [`Fault::Trailers`].
fn trailer_fields(fields: usize, size: usize) -> Vec<(String, String)> {
    (0..fields).map(|i| (format!("x-t-{i}"), "t".repeat(size))).collect()
}

/// One scripted reply.
#[derive(Clone, Debug)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Body.
    pub body: Vec<u8>,
    /// How it misbehaves.
    pub fault: Fault,
}

impl Reply {
    /// `200` with this body.
    #[must_use]
    pub fn ok(body: &str) -> Reply {
        Reply { status: 200, body: body.as_bytes().to_vec(), fault: Fault::None }
    }
    /// This reply, misbehaving.
    #[must_use]
    pub fn with(mut self, fault: Fault) -> Reply {
        self.fault = fault;
        self
    }
    fn connection_level(&self) -> bool {
        matches!(self.fault, Fault::CloseAtStart | Fault::StallAtStart | Fault::FailTlsHandshake)
    }
}

/// How the fault server is set up.
#[derive(Clone, Debug, Default)]
pub struct FaultOptions {
    /// Serve TLS with this leaf (ALPN `h2` when `http2`, else `http/1.1`).
    pub tls: Option<Leaf>,
    /// Speak HTTP/2 (prior knowledge over cleartext).
    pub http2: bool,
    /// HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS.
    pub max_concurrent_streams: Option<u32>,
}

struct Shared {
    script: Mutex<VecDeque<Reply>>,
    records: Mutex<Vec<Record>>,
    /// HTTP/1.1: each request's path and the fault its reply carried, in order.
    served: Mutex<Vec<(String, Fault)>>,
    connections: AtomicUsize,
}

impl Shared {
    fn next(&self) -> Reply {
        self.script.lock().ok().and_then(|mut s| s.pop_front()).unwrap_or_else(|| Reply::ok("ok"))
    }
    fn peek_connection_fault(&self) -> Option<Reply> {
        let mut s = self.script.lock().ok()?;
        if s.front().is_some_and(Reply::connection_level) {
            return s.pop_front();
        }
        None
    }
    fn record(&self, r: Record) {
        if let Ok(mut v) = self.records.lock() {
            v.push(r);
        }
    }
}

/// A running fault-injecting server.
pub struct FaultServer {
    /// Where it listens (127.0.0.1).
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for FaultServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultServer").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl FaultServer {
    /// Starts it on `127.0.0.1:0`.
    #[must_use]
    pub fn start(options: FaultOptions) -> FaultServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        FaultServer::on(listener, options)
    }

    /// Starts it on `addr` (a loopback address), or says why not (a port
    /// another test holds).
    pub fn start_on(addr: std::net::SocketAddr, options: FaultOptions) -> std::io::Result<FaultServer> {
        let listener = std::net::TcpListener::bind(addr)?;
        Ok(FaultServer::on(listener, options))
    }

    fn on(listener: std::net::TcpListener, options: FaultOptions) -> FaultServer {
        let addr = listener.local_addr().expect("addr");
        let shared = Arc::new(Shared {
            script: Mutex::new(VecDeque::new()),
            records: Mutex::new(Vec::new()),
            served: Mutex::new(Vec::new()),
            connections: AtomicUsize::new(0),
        });
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let s = Arc::clone(&shared);
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("rt");
            rt.block_on(accept_loop(listener, options, s, stop_rx));
            rt.shutdown_timeout(Duration::from_millis(100));
        });
        FaultServer { addr, shared, stop: Some(stop_tx), thread: Some(thread) }
    }

    /// Queues replies, in order.
    pub fn push(&self, replies: impl IntoIterator<Item = Reply>) {
        if let Ok(mut s) = self.shared.script.lock() {
            s.extend(replies);
        }
    }

    /// Every request read so far.
    #[must_use]
    pub fn records(&self) -> Vec<Record> {
        self.shared.records.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// HTTP/1.1: every request's path with the fault its reply carried, in
    /// the order the replies were taken.
    #[must_use]
    pub fn served(&self) -> Vec<(String, Fault)> {
        self.shared.served.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// (connection, exchange) of every request.
    #[must_use]
    pub fn pattern(&self) -> Vec<(usize, usize)> {
        self.records().iter().map(|r| (r.connection, r.exchange)).collect()
    }

    /// Connections accepted.
    #[must_use]
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// The port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

impl Drop for FaultServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn acceptor(options: &FaultOptions) -> Option<tokio_rustls::TlsAcceptor> {
    let leaf = options.tls.as_ref()?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain: Vec<CertificateDer<'static>> =
        leaf.chain.iter().map(|c| CertificateDer::from(c.clone())).collect();
    let key = PrivateKeyDer::Pkcs8(leaf.key.clone().into());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("certificate");
    config.alpn_protocols = vec![if options.http2 { b"h2".to_vec() } else { b"http/1.1".to_vec() }];
    Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

async fn accept_loop(
    listener: std::net::TcpListener,
    options: FaultOptions,
    shared: Arc<Shared>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    listener.set_nonblocking(true).expect("nonblocking");
    let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
    let tls = acceptor(&options);
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut stop => return,
            r = listener.accept() => match r { Ok(s) => s, Err(_) => continue },
        };
        // A head and its body go out as two writes: without this, Nagle
        // holds the body until the client's delayed ACK (40 ms a reply).
        let _ = stream.set_nodelay(true);
        let index = shared.connections.fetch_add(1, Ordering::SeqCst);
        let (shared, tls, options) = (Arc::clone(&shared), tls.clone(), options.clone());
        tokio::spawn(async move {
            let first = shared.peek_connection_fault();
            match first.as_ref().map(|r| &r.fault) {
                Some(Fault::CloseAtStart) => return,
                Some(Fault::FailTlsHandshake) => {
                    let mut s = stream;
                    let mut hello = [0u8; 512];
                    let _ = s.read(&mut hello).await; // the ClientHello, ignored
                    return;
                }
                _ => {}
            }
            let stall = matches!(first.map(|r| r.fault), Some(Fault::StallAtStart));
            match tls {
                Some(tls) => {
                    let Ok(s) = tls.accept(stream).await else { return };
                    let sni = s.get_ref().1.server_name().map(str::to_owned);
                    serve(s, index, sni, stall, &options, shared).await;
                }
                None => serve(stream, index, None, stall, &options, shared).await,
            }
        });
    }
}

async fn serve<S>(
    io: S,
    index: usize,
    sni: Option<String>,
    stall: bool,
    options: &FaultOptions,
    shared: Arc<Shared>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if stall {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        return;
    }
    if options.http2 {
        serve_h2(io, index, sni, options, shared).await;
    } else {
        serve_h1(io, index, sni, shared).await;
    }
}

struct Head {
    method: String,
    path: String,
    length: Option<usize>,
    chunked: bool,
    expect: bool,
}

async fn read_head<S: AsyncRead + Unpin>(io: &mut S, buf: &mut Vec<u8>) -> Option<Head> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut req = httparse::Request::new(&mut headers);
            req.parse(&buf[..end + 4]).ok()?;
            let find = |name: &str| {
                req.headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                    .map(|h| String::from_utf8_lossy(h.value).to_ascii_lowercase())
            };
            let head = Head {
                method: req.method?.to_owned(),
                path: req.path?.to_owned(),
                length: find("content-length").and_then(|v| v.trim().parse().ok()),
                chunked: find("transfer-encoding").is_some_and(|v| v.contains("chunked")),
                expect: find("expect").is_some_and(|v| v.contains("100-continue")),
            };
            buf.drain(..end + 4);
            return Some(head);
        }
        let mut chunk = [0u8; 4096];
        match io.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

async fn fill<S: AsyncRead + Unpin>(io: &mut S, buf: &mut Vec<u8>, want: usize) -> bool {
    while buf.len() < want {
        let mut chunk = [0u8; 4096];
        match io.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    true
}

/// Reads a body (Content-Length, or chunked), at most `limit` bytes of it.
async fn read_body<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut Vec<u8>,
    head: &Head,
    limit: usize,
) -> Option<usize> {
    if let Some(n) = head.length {
        let take = n.min(limit);
        if !fill(io, buf, take).await {
            return None;
        }
        buf.drain(..take);
        return Some(take);
    }
    if !head.chunked {
        return Some(0);
    }
    let mut total = 0;
    loop {
        let line_end = loop {
            if let Some(p) = buf.windows(2).position(|w| w == b"\r\n") {
                break p;
            }
            let len = buf.len() + 1;
            if !fill(io, buf, len).await {
                return None;
            }
        };
        let line = String::from_utf8_lossy(&buf[..line_end]).to_string();
        let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16).ok()?;
        buf.drain(..line_end + 2);
        if size == 0 {
            // Trailers (none expected) end with an empty line.
            if !fill(io, buf, 2).await {
                return None;
            }
            buf.drain(..2);
            return Some(total);
        }
        if total + size > limit {
            return Some(total);
        }
        if !fill(io, buf, size + 2).await {
            return None;
        }
        buf.drain(..size + 2);
        total += size;
    }
}

async fn serve_h1<S>(mut io: S, index: usize, sni: Option<String>, shared: Arc<Shared>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut buf = Vec::new();
    let mut exchange = 0;
    while let Some(head) = read_head(&mut io, &mut buf).await {
        let reply = shared.next();
        if let Ok(mut served) = shared.served.lock() {
            served.push((head.path.clone(), reply.fault.clone()));
        }
        let mut record = Record {
            connection: index,
            exchange,
            method: head.method.clone(),
            path: head.path.clone(),
            version: http::Version::HTTP_11,
            body_len: 0,
            sni: sni.clone(),
            authority: None,
            authorization: None,
        };
        exchange += 1;
        let continue_line = b"HTTP/1.1 100 Continue\r\n\r\n";
        match reply.fault {
            Fault::ContinueAlways => {
                let _ = io.write_all(continue_line).await;
            }
            Fault::ContinueNever
            | Fault::DoNotReadRequestBody
            | Fault::AnswerBeforeBody
            | Fault::AnswerBeforeBodyThenClose => {}
            _ if head.expect => {
                let _ = io.write_all(continue_line).await;
            }
            _ => {}
        }
        if reply.fault == Fault::CloseDuringRequestBody {
            let half = head.length.unwrap_or(2) / 2;
            let _ = read_body(&mut io, &mut buf, &head, half).await;
            shared.record(record);
            return;
        }
        if !matches!(
            reply.fault,
            Fault::DoNotReadRequestBody | Fault::AnswerBeforeBody | Fault::AnswerBeforeBodyThenClose
        ) {
            match read_body(&mut io, &mut buf, &head, usize::MAX).await {
                Some(n) => record.body_len = n,
                None => return,
            }
        }
        shared.record(record);
        match reply.fault {
            Fault::CloseAfterRequest => return,
            Fault::HalfCloseAfterRequest => {
                let _ = io.shutdown().await;
                let mut rest = [0u8; 1024];
                while matches!(io.read(&mut rest).await, Ok(n) if n > 0) {}
                return;
            }
            Fault::NoResponse | Fault::StallConnection => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return;
            }
            Fault::HeaderDelay(d) => tokio::time::sleep(d).await,
            Fault::Raw(bytes) => {
                let _ = io.write_all(&bytes).await;
                let _ = io.flush().await;
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return;
            }
            Fault::EndlessInterim => {
                let until = tokio::time::Instant::now() + Duration::from_secs(10);
                while tokio::time::Instant::now() < until {
                    if io.write_all(continue_line).await.is_err() {
                        return;
                    }
                }
            }
            _ => {}
        }
        let close = matches!(
            reply.fault,
            Fault::CloseAfterResponse | Fault::DoNotReadRequestBody | Fault::AnswerBeforeBodyThenClose
        );
        let huge = match reply.fault {
            Fault::HugeHeader(n) => format!("x-huge: {}\r\n", "h".repeat(n)),
            _ => String::new(),
        };
        let framing = match reply.fault {
            Fault::Trailers(..) => "Transfer-Encoding: chunked".to_owned(),
            _ => format!("Content-Length: {}", reply.body.len()),
        };
        let head_bytes = format!(
            "HTTP/1.1 {} Scripted\r\n{framing}\r\n{}{huge}\r\n",
            reply.status,
            if close { "Connection: close\r\n" } else { "" }
        );
        if let Fault::TrickleHead(delay) = reply.fault {
            // The status line, then header fields a few bytes at a time.
            let mut trickle = b"HTTP/1.1 200 OK\r\n".to_vec();
            let until = tokio::time::Instant::now() + Duration::from_secs(6);
            while tokio::time::Instant::now() < until {
                trickle.extend_from_slice(b"x-slow: 1\r\n");
                for part in trickle.chunks(4) {
                    if io.write_all(part).await.is_err() || io.flush().await.is_err() {
                        return;
                    }
                    tokio::time::sleep(delay).await;
                }
                trickle.clear();
            }
            let end = format!("Content-Length: {}\r\n\r\n", reply.body.len());
            let _ = io.write_all(end.as_bytes()).await;
            let _ = io.write_all(&reply.body).await;
            let _ = io.flush().await;
            continue;
        }
        if io.write_all(head_bytes.as_bytes()).await.is_err() {
            return;
        }
        match reply.fault {
            Fault::BodyDelay(d) => {
                let _ = io.flush().await;
                tokio::time::sleep(d).await;
                let _ = io.write_all(&reply.body).await;
            }
            Fault::Throttle(n, d) => {
                for part in reply.body.chunks(n.max(1)) {
                    let _ = io.write_all(part).await;
                    let _ = io.flush().await;
                    tokio::time::sleep(d).await;
                }
            }
            Fault::CloseDuringResponseBody => {
                let _ = io.write_all(&reply.body[..reply.body.len() / 2]).await;
                let _ = io.flush().await;
                return;
            }
            Fault::Trailers(fields, size) => {
                let mut chunked = format!("{:x}\r\n", reply.body.len()).into_bytes();
                chunked.extend_from_slice(&reply.body);
                chunked.extend_from_slice(b"\r\n0\r\n");
                for (name, value) in trailer_fields(fields, size) {
                    chunked.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
                }
                chunked.extend_from_slice(b"\r\n");
                let _ = io.write_all(&chunked).await;
            }
            _ => {
                let _ = io.write_all(&reply.body).await;
            }
        }
        let _ = io.flush().await;
        match reply.fault {
            Fault::CloseAfterResponse | Fault::DoNotReadRequestBody => return,
            Fault::AnswerBeforeBody => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return;
            }
            Fault::AnswerBeforeBodyThenClose => {
                let _ = io.shutdown().await;
                let mut rest = [0u8; 16 * 1024];
                let _ = tokio::time::timeout(Duration::from_secs(2), async {
                    while matches!(io.read(&mut rest).await, Ok(n) if n > 0) {}
                })
                .await;
                return;
            }
            Fault::ShutdownOutputAfterResponse => {
                let _ = io.shutdown().await;
                let mut rest = [0u8; 1024];
                while matches!(io.read(&mut rest).await, Ok(n) if n > 0) {}
                return;
            }
            Fault::ShutdownInputAfterResponse => {
                // Stop reading: whatever comes next is never read or answered;
                // the socket stays open until the client gives up.
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return;
            }
            _ => {}
        }
    }
}

enum Command {
    /// Drop the connection without resetting streams (the stream's responder
    /// rides along so it is dropped only after the socket is gone).
    Abort(Option<h2::server::SendResponse<Bytes>>),
    GoAway,
}

async fn serve_h2<S>(io: S, index: usize, sni: Option<String>, options: &FaultOptions, shared: Arc<Shared>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = h2::server::Builder::new();
    if let Some(n) = options.max_concurrent_streams {
        builder.max_concurrent_streams(n);
    }
    let Ok(mut conn) = builder.handshake::<_, Bytes>(io).await else { return };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut exchange = 0;
    loop {
        let accepted = tokio::select! {
            a = conn.accept() => a,
            cmd = rx.recv() => match cmd {
                Some(Command::Abort(responder)) => {
                    drop(conn);
                    drop(responder);
                    return;
                }
                None => return,
                Some(Command::GoAway) => { conn.graceful_shutdown(); continue; }
            },
        };
        let Some(Ok((request, mut respond))) = accepted else { return };
        let reply = shared.next();
        if reply.fault == Fault::StallConnection {
            shared.record(Record {
                connection: index,
                exchange,
                method: request.method().to_string(),
                path: request.uri().path().to_owned(),
                version: http::Version::HTTP_2,
                body_len: 0,
                sni: sni.clone(),
                authority: None,
                authorization: None,
            });
            // Nobody polls the connection from here on: the peer looks dead.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(respond);
            return;
        }
        let record = Record {
            connection: index,
            exchange,
            method: request.method().to_string(),
            path: request.uri().path().to_owned(),
            version: http::Version::HTTP_2,
            body_len: 0,
            sni: sni.clone(),
            authority: request.uri().authority().map(ToString::to_string),
            authorization: None,
        };
        exchange += 1;
        let (tx, shared) = (tx.clone(), Arc::clone(&shared));
        tokio::spawn(async move {
            let mut record = record;
            if let Fault::Reset(code) = reply.fault {
                shared.record(record);
                respond.send_reset(h2::Reason::from(code));
                return;
            }
            let mut body = request.into_body();
            while let Some(Ok(data)) = body.data().await {
                record.body_len += data.len();
                let _ = body.flow_control().release_capacity(data.len());
            }
            shared.record(record);
            match reply.fault {
                Fault::CloseAfterRequest | Fault::HalfCloseAfterRequest => {
                    let _ = tx.send(Command::Abort(Some(respond)));
                    return;
                }
                Fault::NoResponse => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    return;
                }
                Fault::HeaderDelay(d) => tokio::time::sleep(d).await,
                _ => {}
            }
            let mut response = http::Response::builder().status(reply.status);
            if let Fault::HugeHeader(n) = reply.fault {
                response = response.header("x-huge", "h".repeat(n));
            }
            let response = response.body(()).expect("response");
            let Ok(mut stream) = respond.send_response(response, reply.body.is_empty()) else { return };
            let body = Bytes::from(reply.body);
            match reply.fault {
                Fault::BodyDelay(d) => {
                    tokio::time::sleep(d).await;
                    let _ = stream.send_data(body, true);
                }
                Fault::Throttle(n, d) => {
                    let parts: Vec<Bytes> = body.chunks(n.max(1)).map(Bytes::copy_from_slice).collect();
                    let last = parts.len().saturating_sub(1);
                    for (i, p) in parts.into_iter().enumerate() {
                        let _ = stream.send_data(p, i == last);
                        tokio::time::sleep(d).await;
                    }
                }
                Fault::CloseDuringResponseBody => {
                    let _ = stream.send_data(body.slice(..body.len() / 2), false);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let _ = tx.send(Command::Abort(None));
                }
                Fault::ResetDuringResponseBody(code) => {
                    let _ = stream.send_data(body.slice(..body.len() / 2), false);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    stream.send_reset(h2::Reason::from(code));
                }
                Fault::Trailers(fields, size) => {
                    let _ = stream.send_data(body, false);
                    let mut trailers = http::HeaderMap::new();
                    for (name, value) in trailer_fields(fields, size) {
                        trailers.insert(
                            http::HeaderName::from_bytes(name.as_bytes()).expect("name"),
                            http::HeaderValue::from_str(&value).expect("value"),
                        );
                    }
                    let _ = stream.send_trailers(trailers);
                }
                _ if !body.is_empty() => {
                    let _ = stream.send_data(body, true);
                }
                _ => {}
            }
            if reply.fault == Fault::CloseAfterResponse {
                let _ = tx.send(Command::GoAway);
            }
        });
    }
}
