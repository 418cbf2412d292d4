//! The Manager's incoming half (the `gateway` feature): local programs talk plain
//! HTTP to a listener, and each request rides the declared servers' warm, pooled
//! connections. hyper's server accepts HTTP/1.1 (keep-alive) and HTTP/2 with prior
//! knowledge; the decisions (routing, forwarded fields, failure statuses) are
//! [`switchyard_common::gateway`]'s. A runtime offers it by implementing
//! [`Listen`] (switchyard-tokio and switchyard-smol do).
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! # type Manager = switchyard_async::Manager<MyRuntime>;
//! # #[derive(Default)] struct MyRuntime;
//! # impl switchyard_async::Runtime for MyRuntime {
//! #   fn spawn(&self, _: switchyard_async::BoxFuture<()>) -> Option<Box<dyn switchyard_async::Task>> { None }
//! #   fn sleep_until(&self, _: std::time::Instant) -> switchyard_async::BoxFuture<()> { Box::pin(std::future::pending()) }
//! #   fn connect(&self, _: std::net::SocketAddr) -> switchyard_async::BoxFuture<std::io::Result<switchyard_async::Io>> { Box::pin(std::future::pending()) }
//! #   fn unblock(&self, w: Box<dyn FnOnce() -> std::io::Result<Vec<std::net::IpAddr>> + Send>) -> switchyard_async::BoxFuture<std::io::Result<Vec<std::net::IpAddr>>> { Box::pin(async move { w() }) }
//! # }
//! # impl switchyard_async::gateway::Listen for MyRuntime {
//! #   type Listener = ();
//! #   type Conn = switchyard_async::gateway::HyperIo<tokio::io::DuplexStream>;
//! #   fn accept(_: &()) -> switchyard_async::gateway::Accepting<'_, Self::Conn> { Box::pin(std::future::pending()) }
//! #   fn local_port(_: &()) -> Option<u16> { None }
//! # }
//! # let listener = ();
//! // switchyard_tokio::Manager / switchyard_smol::Manager, with their listeners.
//! let manager = Manager::builder().server("https://api.internal", 2).build()?;
//! // `curl -x http://127.0.0.1:8080 http://api.internal/v1/items` goes out over TLS.
//! manager.gateway().max_connections(256).serve(listener).await?;
//! # Ok(()) }
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body::{Frame, SizeHint};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use switchyard_common::gateway::{self, Refusal};
use switchyard_common::manager::Declared;
use switchyard_core::{ConnectionId, Source};
use tokio::sync::Semaphore;

use crate::response::ResponseExt;
use crate::runtime::{Io, Runtime};
use crate::{Body, BoxError, Manager};

type GatewayBody = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;

/// An accept in progress ([`Listen::accept`]).
pub type Accepting<'a, C> = Pin<Box<dyn Future<Output = io::Result<C>> + Send + 'a>>;

/// What a runtime adds for the gateway: its listener and accepted connections
/// as hyper's I/O.
pub trait Listen: Runtime + Sized {
    /// The listening socket (`tokio::net::TcpListener`, `smol::net::TcpListener`).
    type Listener: Send + Sync + 'static;
    /// An accepted connection, as hyper reads and writes it.
    type Conn: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static;
    /// The next connection (`TCP_NODELAY` set).
    fn accept(listener: &Self::Listener) -> Accepting<'_, Self::Conn>;
    /// The port it listens on.
    fn local_port(listener: &Self::Listener) -> Option<u16>;
}

/// One answered request, as the access log sees it: written when its response
/// body has ended (or was abandoned), with the bytes each way.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AccessRecord {
    /// The request method.
    pub method: http::Method,
    /// The request target as it arrived (absolute, origin or authority form).
    pub target: String,
    /// The declared server it went to, if it was routed.
    pub server: Option<String>,
    /// The status answered (200 for an established tunnel).
    pub status: StatusCode,
    /// Request body bytes read from the local client (a tunnel: bytes sent up).
    pub request_bytes: u64,
    /// Response body bytes written to the local client (a tunnel: bytes sent down).
    pub response_bytes: u64,
    /// From the request's arrival to the response head.
    pub head_time: Duration,
    /// From the request's arrival to the response body's end (a tunnel: its close).
    pub total_time: Duration,
    /// Whether the response body was passed on to its end (false: the local
    /// client went away, or the upstream body failed).
    pub complete: bool,
    /// The upstream connection that carried it.
    pub connection: Option<ConnectionId>,
    /// How the pool found that connection: `New` (connected for this request),
    /// `Pooled` (idle, reused), `Shared` (an HTTP/2 connection carrying other
    /// streams), `Coalesced` (an HTTP/2 connection to another name). A tunnel's
    /// own connection is `New`.
    pub source: Option<Source>,
    /// The gateway's own answer (a refusal or a failure), in words.
    pub refused: Option<String>,
}

fn source_name(source: Source) -> &'static str {
    match source {
        Source::New => "new",
        Source::Pooled => "pooled",
        Source::Shared => "shared",
        Source::Coalesced => "coalesced",
    }
}

impl AccessRecord {
    fn new(method: http::Method, target: String) -> AccessRecord {
        AccessRecord {
            method,
            target,
            server: None,
            status: StatusCode::OK,
            request_bytes: 0,
            response_bytes: 0,
            head_time: Duration::ZERO,
            total_time: Duration::ZERO,
            complete: false,
            connection: None,
            source: None,
            refused: None,
        }
    }

    /// The record as one JSON object (for `--json` logs).
    ///
    /// ```
    /// # #[cfg(feature = "gateway")] {
    /// // {"method":"GET","target":"/x","server":"https://api.internal","status":200,...}
    /// # }
    /// ```
    #[must_use]
    pub fn to_json(&self) -> String {
        fn text(s: &str) -> String {
            let mut out = String::with_capacity(s.len() + 2);
            out.push('"');
            for c in s.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
                    c => out.push(c),
                }
            }
            out.push('"');
            out
        }
        let opt = |s: Option<String>| s.map_or_else(|| "null".to_owned(), |s| text(&s));
        format!(
            "{{\"method\":{},\"target\":{},\"server\":{},\"status\":{},\"request_bytes\":{},\"response_bytes\":{},\"head_ms\":{:.3},\"total_ms\":{:.3},\"complete\":{},\"connection\":{},\"source\":{},\"refused\":{}}}",
            text(self.method.as_str()),
            text(&self.target),
            opt(self.server.clone()),
            self.status.as_u16(),
            self.request_bytes,
            self.response_bytes,
            self.head_time.as_secs_f64() * 1000.0,
            self.total_time.as_secs_f64() * 1000.0,
            self.complete,
            opt(self.connection.map(|c| c.to_string())),
            opt(self.source.map(|s| source_name(s).to_owned())),
            opt(self.refused.clone()),
        )
    }
}

/// One line per request: `GET http://api.test/x -> 200 5120 B (1.2 ms head, 3.4 ms, conn 3 pooled)`.
impl std::fmt::Display for AccessRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} -> {} {} B", self.method, self.target, self.status.as_u16(), self.response_bytes)?;
        write!(
            f,
            " ({:.1} ms head, {:.1} ms",
            self.head_time.as_secs_f64() * 1000.0,
            self.total_time.as_secs_f64() * 1000.0
        )?;
        if let Some(c) = self.connection {
            write!(f, ", conn {c}")?;
        }
        if let Some(s) = self.source {
            write!(f, " {}", source_name(s))?;
        }
        if !self.complete && self.refused.is_none() {
            f.write_str(", incomplete")?;
        }
        f.write_str(")")?;
        if let Some(why) = &self.refused {
            write!(f, ": {why}")?;
        }
        Ok(())
    }
}

type Log = Arc<dyn Fn(&AccessRecord) + Send + Sync>;

/// A gateway over a [`Manager`]'s servers (`Manager::gateway()` in the
/// adapters): limits, the shutdown grace, an access log. Serve with
/// [`Gateway::serve`] or [`Gateway::serve_until`].
#[must_use]
pub struct Gateway<R: Runtime> {
    manager: Manager<R>,
    max_connections: usize,
    max_requests: usize,
    grace: Duration,
    log: Option<Log>,
}

impl<R: Runtime> std::fmt::Debug for Gateway<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("max_connections", &self.max_connections)
            .field("max_requests", &self.max_requests)
            .field("grace", &self.grace)
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> Manager<R> {
    /// A gateway over this Manager's servers, with every default: 1,024 local
    /// connections and 4,096 requests at once, 10 s of shutdown grace, no log.
    pub fn gateway(&self) -> Gateway<R> {
        Gateway {
            manager: self.clone(),
            max_connections: 1024,
            max_requests: 4096,
            grace: gateway::DEFAULT_SHUTDOWN_GRACE,
            log: None,
        }
    }
}

impl<R: Runtime> Gateway<R> {
    /// At most `n` local connections at once; more wait in the listener's
    /// backlog (accepting pauses). Default 1,024.
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }
    /// At most `n` requests in flight at once; more wait for a slot. Default 4,096.
    pub fn max_requests(mut self, n: usize) -> Self {
        self.max_requests = n.max(1);
        self
    }
    /// How long requests in flight may finish after shutdown begins. Default 10 s.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }
    /// Calls `log` once per request, when its response body has ended (or was
    /// abandoned), or when its tunnel closed.
    pub fn access_log(mut self, log: impl Fn(&AccessRecord) + Send + Sync + 'static) -> Self {
        self.log = Some(Arc::new(log));
        self
    }
}

impl<R: Listen> Gateway<R> {
    /// Serves until an error stops accepting.
    ///
    /// # Errors
    /// The listener failed (other than the transient errors of `accept`:
    /// a connection reset before it was accepted, out of descriptors).
    pub async fn serve(self, listener: R::Listener) -> io::Result<()> {
        self.serve_until(listener, std::future::pending()).await
    }

    /// Serves until `shutdown` completes: then stops accepting, lets requests in
    /// flight finish for up to the grace, and closes the local connections
    /// (idle keep-alive ones at once). The Manager is left running.
    ///
    /// # Errors
    /// As [`Gateway::serve`].
    pub async fn serve_until(
        self,
        listener: R::Listener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> io::Result<()> {
        let rt = Arc::clone(&self.manager.client().inner.shared.rt);
        let connections = Arc::new(Semaphore::new(self.max_connections));
        let state = Arc::new(State {
            local_port: R::local_port(&listener),
            manager: self.manager,
            requests: Semaphore::new(self.max_requests),
            log: self.log,
            rt: Arc::clone(&rt),
        });
        let mut builder = hyper_util::server::conn::auto::Builder::new(Exec(Arc::clone(&rt)));
        builder.http1().keep_alive(true).timer(Timer(Arc::clone(&rt)));
        builder.http2().timer(Timer(Arc::clone(&rt)));
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let permit = tokio::select! {
                biased;
                () = &mut shutdown => break,
                p = Arc::clone(&connections).acquire_owned() => p.map_err(io::Error::other)?,
            };
            let stream = tokio::select! {
                biased;
                () = &mut shutdown => break,
                accepted = R::accept(&listener) => match accepted {
                    Ok(stream) => stream,
                    Err(e) if is_transient(&e) => {
                        rt.sleep_until(Instant::now() + Duration::from_millis(10)).await;
                        continue;
                    }
                    Err(e) => return Err(e),
                },
            };
            let state = Arc::clone(&state);
            let service = hyper::service::service_fn(move |request| {
                let state = Arc::clone(&state);
                async move { Ok::<_, Infallible>(state.handle(request).await) }
            });
            let connection = builder.serve_connection_with_upgrades(stream, service).into_owned();
            let connection = graceful.watch(connection);
            let _ = rt.spawn(Box::pin(async move {
                let _ = connection.await;
                drop(permit);
            }));
        }
        drop(listener);
        let deadline = rt.sleep_until(Instant::now() + self.grace);
        tokio::select! {
            () = graceful.shutdown() => {}
            () = deadline => {}
        }
        Ok(())
    }
}

fn is_transient(e: &io::Error) -> bool {
    use io::ErrorKind as K;
    matches!(e.kind(), K::ConnectionAborted | K::ConnectionReset | K::Interrupted | K::WouldBlock)
        || e.raw_os_error().is_some_and(|c| c == 23 || c == 24) // ENFILE, EMFILE
}

/// hyper's executor: the runtime's spawn (HTTP/2 connections' tasks).
#[derive(Clone)]
struct Exec(Arc<dyn Runtime>);

impl<F: Future<Output = ()> + Send + 'static> hyper::rt::Executor<F> for Exec {
    fn execute(&self, future: F) {
        let _ = self.0.spawn(Box::pin(future));
    }
}

/// hyper's timer: the runtime's sleep (header read timeouts, HTTP/2 keep-alive).
#[derive(Clone)]
struct Timer(Arc<dyn Runtime>);

/// A sleep hyper may share between threads: the runtime's future behind a lock
/// it alone takes, once per poll.
struct Sleeping(std::sync::Mutex<crate::BoxFuture<()>>);

impl Future for Sleeping {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.0.lock() {
            Ok(mut sleep) => sleep.as_mut().poll(cx),
            Err(_) => Poll::Ready(()),
        }
    }
}

impl hyper::rt::Sleep for Sleeping {}

impl hyper::rt::Timer for Timer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(Instant::now() + duration)
    }
    fn sleep_until(&self, at: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(Sleeping(std::sync::Mutex::new(self.0.sleep_until(at))))
    }
}

/// A byte stream with tokio's I/O traits (what the smol adapter's sockets are,
/// through `compat`) as hyper's. Reads go through a scratch buffer: hyper's
/// cursor takes filled bytes only, and this crate writes no `unsafe`.
pub struct HyperIo<T> {
    io: T,
    scratch: Box<[u8]>,
}

impl<T> HyperIo<T> {
    /// Wraps `io`.
    pub fn new(io: T) -> HyperIo<T> {
        HyperIo { io, scratch: vec![0; 16 * 1024].into_boxed_slice() }
    }
}

impl<T: tokio::io::AsyncRead + Unpin> hyper::rt::Read for HyperIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let room = buf.remaining().min(this.scratch.len());
        let mut read = tokio::io::ReadBuf::new(&mut this.scratch[..room]);
        match Pin::new(&mut this.io).poll_read(cx, &mut read) {
            Poll::Ready(Ok(())) => {
                buf.put_slice(read.filled());
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> hyper::rt::Write for HyperIo<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// hyper's upgraded connection (a tunnel's local side) with tokio's I/O traits,
/// for `copy_bidirectional`. Reads land in tokio's buffer directly.
struct Tunnel(hyper::upgrade::Upgraded);

impl tokio::io::AsyncRead for Tunnel {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let room = buf.initialize_unfilled();
        let mut read = hyper::rt::ReadBuf::new(room);
        match hyper::rt::Read::poll_read(Pin::new(&mut self.get_mut().0), cx, read.unfilled()) {
            Poll::Ready(Ok(())) => {
                let n = read.filled().len();
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl tokio::io::AsyncWrite for Tunnel {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        hyper::rt::Write::poll_write(Pin::new(&mut self.get_mut().0), cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        hyper::rt::Write::poll_flush(Pin::new(&mut self.get_mut().0), cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        hyper::rt::Write::poll_shutdown(Pin::new(&mut self.get_mut().0), cx)
    }
}

struct State<R: Runtime> {
    local_port: Option<u16>,
    manager: Manager<R>,
    requests: Semaphore,
    log: Option<Log>,
    rt: Arc<dyn Runtime>,
}

/// What the access log learns as the response body streams: bytes, the end.
struct Finish {
    record: AccessRecord,
    /// The body's length, when it has one.
    expected: Option<u64>,
    start: Instant,
    request_bytes: Option<Arc<AtomicU64>>,
    log: Log,
}

impl Drop for Finish {
    fn drop(&mut self) {
        self.record.total_time = self.start.elapsed();
        if let Some(read) = &self.request_bytes {
            self.record.request_bytes = read.load(Ordering::Relaxed);
        }
        (self.log)(&self.record);
    }
}

pin_project_lite::pin_project! {
    /// A body that counts what passes and logs at its end (or when dropped).
    struct Counted<B> {
        #[pin]
        body: B,
        finish: Option<Finish>,
    }
}

impl<B: http_body::Body<Data = Bytes>> http_body::Body for Counted<B> {
    type Data = Bytes;
    type Error = B::Error;
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        let polled = this.body.as_mut().poll_frame(cx);
        if let Some(finish) = this.finish.as_mut() {
            match &polled {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(data) = frame.data_ref() {
                        finish.record.response_bytes += data.len() as u64;
                    }
                    // hyper stops polling once a body with a length has
                    // given it all.
                    if this.body.is_end_stream() || finish.expected == Some(finish.record.response_bytes) {
                        finish.record.complete = true;
                        *this.finish = None;
                    }
                }
                Poll::Ready(None) => {
                    finish.record.complete = true;
                    *this.finish = None; // logs now
                }
                Poll::Ready(Some(Err(_))) => *this.finish = None,
                Poll::Pending => {}
            }
        }
        polled
    }
    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

pin_project_lite::pin_project! {
    /// The request body on its way up, counted.
    struct Counting<B> {
        #[pin]
        body: B,
        read: Arc<AtomicU64>,
    }
}

impl<B: http_body::Body<Data = Bytes>> http_body::Body for Counting<B> {
    type Data = Bytes;
    type Error = B::Error;
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let polled = this.body.poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                this.read.fetch_add(data.len() as u64, Ordering::Relaxed);
            }
        }
        polled
    }
    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl<R: Runtime> State<R> {
    async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<GatewayBody> {
        let start = Instant::now();
        let _slot = self.requests.acquire().await;
        let (mut parts, body) = request.into_parts();
        let mut record = AccessRecord::new(parts.method.clone(), parts.uri.to_string());
        let read = self.log.as_ref().map(|_| Arc::new(AtomicU64::new(0)));
        let outcome = if parts.method == http::Method::CONNECT {
            self.tunnel(parts, body, &mut record, start).await
        } else {
            self.forward(&mut parts, body, &mut record, read.clone()).await
        };
        let response = match outcome {
            Ok(Some(response)) => response,
            // A tunnel: its record is logged when it closes.
            Ok(None) => return empty(StatusCode::OK),
            Err(refusal) => {
                record.refused = Some(refusal.reason.clone());
                let mut response = refuse(refusal);
                if record.method == http::Method::CONNECT {
                    // A client may send its tunnel's first bytes (a TLS
                    // ClientHello) right behind CONNECT: they must never be
                    // read as the next request.
                    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                response
            }
        };
        record.status = response.status();
        record.head_time = start.elapsed();
        let Some(log) = self.log.clone() else { return response };
        let (head, body) = response.into_parts();
        // The length hyper frames the body by: the body's own, or the
        // forwarded Content-Length (hyper stops reading there).
        let expected = http_body::Body::size_hint(&body)
            .exact()
            .or_else(|| head.headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok());
        let bodiless = record.method == http::Method::HEAD
            || head.status == StatusCode::NO_CONTENT
            || head.status == StatusCode::NOT_MODIFIED;
        let finish = Finish { record, expected, start, request_bytes: read, log };
        if bodiless || expected == Some(0) || http_body::Body::is_end_stream(&body) {
            let mut finish = finish;
            finish.record.complete = true;
            return Response::from_parts(head, body);
        }
        Response::from_parts(head, Counted { body, finish: Some(finish) }.boxed_unsync())
    }

    async fn forward(
        &self,
        parts: &mut http::request::Parts,
        body: Incoming,
        record: &mut AccessRecord,
        read: Option<Arc<AtomicU64>>,
    ) -> Result<Option<Response<GatewayBody>>, Refusal> {
        smuggling_shapes(&parts.headers)?;
        let servers = self.manager.__servers();
        let routed = gateway::route(servers, &parts.method, &parts.uri, &parts.headers, self.local_port);
        let (server, target) = match routed {
            Ok(routed) => routed,
            // The status page, for a request to the gateway itself (a host no
            // server was declared for).
            Err(refusal) if refusal.status == StatusCode::FORBIDDEN && parts.uri.path() == STATUS_PATH => {
                return Ok(Some(self.status_page()));
            }
            Err(refusal) => return Err(refusal),
        };
        record.server = Some(server.url.clone());
        if let Some(refusal) = self.manager.__status_of(server).as_ref().and_then(gateway::down) {
            return Err(refusal);
        }
        let incoming_version = parts.version;
        gateway::forward_request_headers(&mut parts.headers, incoming_version);
        let body = if http_body::Body::is_end_stream(&body) {
            Body::empty()
        } else {
            match read {
                Some(read) => Body::wrap(Counting { body, read }),
                None => Body::wrap(body),
            }
        };
        let mut upstream = Request::new(body);
        *upstream.method_mut() = parts.method.clone();
        *upstream.uri_mut() = target;
        *upstream.headers_mut() = std::mem::take(&mut parts.headers);
        let response = self.manager.client().send(upstream).await.map_err(|e| gateway::failure(&e))?;
        record.connection = response.connection_id();
        record.source = response.connection_source();
        let (mut head, body) = response.into_parts();
        let upstream_version = head.version;
        gateway::forward_response_headers(&mut head.headers, upstream_version);
        head.version = http::Version::HTTP_11;
        Ok(Some(Response::from_parts(head, body.map_err(BoxError::from).boxed_unsync())))
    }

    /// `CONNECT host:port` to a declared server: a byte tunnel over a
    /// connection of its own (never pooled: its bytes are the client's,
    /// TLS included), dialled through the client's resolver (its overrides
    /// too), addresses in the resolver's order, each within the connect
    /// timeout. 200 once connected; 502 when no address answers.
    async fn tunnel(
        self: &Arc<Self>,
        parts: http::request::Parts,
        body: Incoming,
        record: &mut AccessRecord,
        start: Instant,
    ) -> Result<Option<Response<GatewayBody>>, Refusal> {
        drop(body);
        let server = gateway::tunnel(self.manager.__servers(), &parts.uri)?;
        record.server = Some(server.url.clone());
        if let Some(refusal) = self.manager.__status_of(server).as_ref().and_then(gateway::down) {
            return Err(refusal);
        }
        let (io, peer) = self.dial(server).await.map_err(|e| Refusal {
            status: StatusCode::BAD_GATEWAY,
            reason: format!("gateway: no tunnel to {}: {e}", parts.uri),
            retry_after: None,
        })?;
        tracing::debug!(target: "switchyard::gateway", "tunnel to {} open via {peer}", parts.uri);
        let request = Request::from_parts(parts, ());
        let mut record = record.clone();
        record.head_time = start.elapsed();
        record.source = Some(Source::New);
        let log = self.log.clone();
        let spawned = self.rt.spawn(Box::pin(async move {
            let mut upstream = io;
            let (up, down) = match hyper::upgrade::on(request).await {
                Ok(upgraded) => {
                    let mut local = Tunnel(upgraded);
                    match tokio::io::copy_bidirectional(&mut local, &mut upstream).await {
                        Ok((up, down)) => {
                            record.complete = true;
                            (up, down)
                        }
                        Err(_) => (0, 0),
                    }
                }
                Err(_) => (0, 0),
            };
            tracing::debug!(target: "switchyard::gateway", "tunnel closed: {up} B up, {down} B down");
            if let Some(log) = log {
                record.request_bytes = up;
                record.response_bytes = down;
                record.total_time = start.elapsed();
                log(&record);
            }
        }));
        if spawned.is_none() {
            return Err(Refusal {
                status: StatusCode::SERVICE_UNAVAILABLE,
                reason: "gateway: no executor for the tunnel".into(),
                retry_after: None,
            });
        }
        Ok(None)
    }

    async fn dial(&self, server: &Declared) -> io::Result<(Io, SocketAddr)> {
        let shared = &self.manager.client().inner.shared;
        let (host, port) = (server.address.host().to_string(), server.address.port());
        let bare = host.trim_matches(['[', ']']);
        let addresses = match bare.parse::<std::net::IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => match &shared.async_resolver {
                Some(resolver) => resolver.resolve(bare, port).await?.addresses,
                None => {
                    let resolver = Arc::clone(&shared.resolver);
                    let name = bare.to_owned();
                    self.rt.unblock(Box::new(move || resolver.resolve(&name, port))).await?
                }
            },
        };
        let timeout = shared.lock_state().pool.config().race.connect_timeout;
        let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{bare} has no addresses"));
        for ip in addresses {
            let addr = SocketAddr::new(ip, port);
            match crate::runtime::within(&*self.rt, timeout, self.rt.connect(addr)).await {
                Some(Ok(io)) => return Ok((io, addr)),
                Some(Err(e)) => last = io::Error::new(e.kind(), format!("{addr}: {e}")),
                None => last = io::Error::new(io::ErrorKind::TimedOut, format!("{addr}: connect timed out")),
            }
        }
        Err(last)
    }

    fn status_page(&self) -> Response<GatewayBody> {
        let mut text = String::new();
        for status in self.manager.status() {
            text.push_str(&status.to_string());
            text.push('\n');
        }
        let mut response =
            Response::new(Full::new(Bytes::from(text)).map_err(|never| match never {}).boxed_unsync());
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
        response
    }
}

/// The path of the gateway's status page (`GET http://127.0.0.1:8080/.switchyard/status`):
/// one line per declared server, as `Manager::status()` prints it.
pub const STATUS_PATH: &str = "/.switchyard/status";

/// Requests a strict server must reject (RFC 9112 §6.3): `Content-Length`
/// values that disagree or do not parse, and (on HTTP/2, where hyper's HTTP/1.1
/// rule does not apply) `Transfer-Encoding` with `Content-Length`. hyper's
/// HTTP/1.1 server refuses most malformed heads itself (invalid bytes, oversized
/// heads, conflicting lengths) and, for `Transfer-Encoding` with
/// `Content-Length`, drops the length and reads the body as chunked (RFC 9112
/// §6.3's rule for an intermediary that forwards); the gateway re-frames what it
/// forwards, so the upstream never sees the length that was claimed.
fn smuggling_shapes(headers: &http::HeaderMap) -> Result<(), Refusal> {
    let bad = |why: &str| Refusal {
        status: StatusCode::BAD_REQUEST,
        reason: format!("gateway: {why}"),
        retry_after: None,
    };
    if headers.contains_key(header::TRANSFER_ENCODING) && headers.contains_key(header::CONTENT_LENGTH) {
        return Err(bad("Transfer-Encoding together with Content-Length"));
    }
    let mut lengths = headers
        .get_all(header::CONTENT_LENGTH)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .map(<[u8]>::trim_ascii);
    if let Some(first) = lengths.next() {
        if !first.iter().all(u8::is_ascii_digit) || first.is_empty() || lengths.any(|l| l != first) {
            return Err(bad("conflicting or malformed Content-Length"));
        }
    }
    Ok(())
}

fn empty(status: StatusCode) -> Response<GatewayBody> {
    let mut response =
        Response::new(http_body_util::Empty::new().map_err(|never| match never {}).boxed_unsync());
    *response.status_mut() = status;
    response
}

fn refuse(refusal: Refusal) -> Response<GatewayBody> {
    let mut body = refusal.reason;
    body.push('\n');
    let mut response =
        Response::new(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed_unsync());
    *response.status_mut() = refusal.status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    if let Some(secs) = refusal.retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    if refusal.status == StatusCode::BAD_REQUEST {
        // A malformed request leaves the connection's framing in doubt.
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}
