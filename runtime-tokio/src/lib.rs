//! # switchyard-tokio
//!
//! An HTTP/1.1 and HTTP/2 client for tokio programs, with reqwest's shape:
//!
//! ```no_run
//! # async fn run() -> Result<(), switchyard_tokio::Error> {
//! let client = switchyard_tokio::Client::new()?;
//! let body = client.get("https://example.com/").send().await?.error_for_status()?.text().await?;
//! println!("{body}");
//! # Ok(()) }
//! ```
//!
//! The pieces, in the order you meet them:
//! - [`Client`] — cheap to clone, one connection pool; [`Client::builder`]
//!   gives a [`ClientBuilder`] (timeouts, TLS roots, proxies, DNS, limits,
//!   HTTP versions, retries, listeners).
//! - [`RequestBuilder`] — `client.get(url)`, `.post(url)`, …: headers, body,
//!   `json`/`query` (features), per-request timeouts; `.send()`.
//! - [`Response`] — status, headers, `url()`, `text().await`, `bytes`, `json`,
//!   `chunk`, `save_to(path)`, `copy_to(writer)`, `error_for_status`.
//! - [`Error`] — what failed and where ([`ErrorKind`]), with reqwest's
//!   predicates (`is_timeout`, `is_connect`, `is_status`, `is_shutdown`, …).
//! - [`Manager`] — declared servers kept warm, and the gateway that hooks incoming requests up to them (feature `gateway`).
//! - Events ([`EventListener`], [`EventLog`]) and metrics
//!   (`stats()`, `stats_by_address()` as [`AddressMetrics`]).
//!
//! ## How it works
//!
//! An HTTP/1.1 and HTTP/2 client on tokio whose every connection decision —
//! reuse, HTTP/2 sharing and coalescing, route planning, the Happy Eyeballs race,
//! limits, eviction, retries — comes from the core, a state machine with no I/O
//! that every adapter shares (re-exported as [`switchyard_core`] for embedders). This crate only
//! performs the I/O the core asks for: DNS, TCP, TLS (rustls, ring provider),
//! the bytes of HTTP/1.1 and HTTP/2 (framed by the core's drivers), timers.
//!
//! What it guarantees against hostile servers and careless callers (no
//! response smuggling, no leaked URL credentials, deadlines that hold, early
//! responses, bounded idle sockets, …) is listed in
//! [the guarantees every adapter keeps](switchyard_async::switchyard_common#what-every-adapter-guarantees-against-hostile-peers-and-careless-callers).
//!
//! ```
//! # use switchyard_tests::server::{ServerOptions, TestServer};
//! # let server = TestServer::start(ServerOptions::default()); // loopback, for this example
//! # let authority = format!("example.test:{}", server.port());
//! # let base = format!("http://{authority}");
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! # rt.block_on(async {
//! use switchyard_tokio::{Body, Client, EventLog};
//!
//! let log = EventLog::default(); // a listener that records every event
//! let client = Client::builder()
//!     .event_listener(log.clone())
//!     .resolve(&authority, ["127.0.0.1".parse().unwrap()]) // like curl --resolve
//!     .build()?;
//!
//! // GET, body collected.
//! let mut response = client.get(format!("{base}/hello")).send().await?;
//! assert_eq!(response.body_mut().text().await?, "hello");
//!
//! // POST with a body.
//! let mut response = client.post(format!("{base}/echo")).body("ping").send().await?;
//! assert_eq!(response.body_mut().text().await?, "ping");
//!
//! // A streaming request body (chunked on HTTP/1.1).
//! let (sender, body) = Body::channel();
//! tokio::spawn(async move {
//!     for part in ["str", "eam"] {
//!         if sender.send(part).await.is_err() { break; }
//!     }
//! });
//! let request = http::Request::put(format!("{base}/echo")).body(body).unwrap();
//! let mut response = client.send(request).await?;
//! assert_eq!(response.body_mut().text().await?, "stream");
//!
//! // What happened, and the pool's view: one connection carried all three calls.
//! assert_eq!(log.events().iter().filter(|e| e.name == "connect_start").count(), 1);
//! let stats = client.stats();
//! assert_eq!((stats.created, stats.reused), (1, 2));
//! # Ok::<(), switchyard_tokio::Error>(()) }).unwrap();
//! ```
//!
//! # Transports
//!
//! [`ClientBuilder::unix_socket`] (or a request's `unix_socket`) talks to a
//! Unix-domain socket; `local_address`, `interface` and `tcp_keepalive` set
//! socket options; [`ClientBuilder::connector`] opens the byte stream with
//! your code, and TLS and HTTP run on top. Firecracker's vsock as a
//! connector (the host end is a Unix socket; `CONNECT <port>\n` picks the
//! guest port, `OK <n>\n` accepts):
//!
//! ```no_run
//! use switchyard_tokio::{Client, Connect, Connecting, Io, Route};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! struct Vsock {
//!     uds: std::path::PathBuf,
//!     port: u32,
//! }
//!
//! impl Connect<Connecting> for Vsock {
//!     fn connect(&self, _route: &Route) -> Connecting {
//!         let (uds, port) = (self.uds.clone(), self.port);
//!         Box::pin(async move {
//!             let mut s = tokio::net::UnixStream::connect(&uds).await?;
//!             s.write_all(format!("CONNECT {port}\n").as_bytes()).await?;
//!             // Byte by byte: nothing past the answer line is taken from the stream.
//!             let mut line = Vec::new();
//!             loop {
//!                 match s.read_u8().await? {
//!                     b'\n' => break,
//!                     b if line.len() < 64 => line.push(b),
//!                     _ => return Err(std::io::Error::other("vsock: answer too long")),
//!                 }
//!             }
//!             if !line.starts_with(b"OK ") {
//!                 return Err(std::io::ErrorKind::ConnectionRefused.into());
//!             }
//!             Ok(Box::new(s) as Io)
//!         })
//!     }
//!     /// The guest is reached by port: no DNS, no proxy, one route.
//!     fn uses_dns(&self) -> bool {
//!         false
//!     }
//! }
//!
//! # async fn run() -> Result<(), switchyard_tokio::Error> {
//! let guest = Client::builder().connector(Vsock { uds: "/tmp/v.sock".into(), port: 52 }).build()?;
//! let metrics = guest.get("http://guest.vm/metrics").send().await?; // pooled like any connection
//! # Ok(()) }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::io;
use std::net::{IpAddr, SocketAddr};

use switchyard_async::{BoxFuture, Runtime, Task};

/// Pool metrics as Prometheus text (`stats_by_address()` in).
pub use switchyard_async::metrics;
/// Following redirects (the `redirect` feature): give a [`Policy`](redirect::Policy)
/// to `ClientBuilder::redirect`. Not followed unless a client asks; each hop
/// is a call of its own on the same pool; 301/302 turn a POST into a GET, 303
/// anything but HEAD; 307/308 resend a buffered body; `Authorization`,
/// `Cookie` and `Proxy-Authorization` are dropped on a hop to another origin;
/// past the limit the call fails with `ErrorKind::Redirect`.
pub mod redirect {
    pub use switchyard_async::switchyard_common::redirect::Policy;
}
/// Transports: the connector hook and what it returns, the route it is
/// given, socket options.
pub use switchyard_async::{by_name, AsyncIo, Connect, Connecting, Io, Route, TcpKeepalive, TcpOptions};
pub use switchyard_async::{
    describe, switchyard_core, Body, BodyClosed, BodyError, BodyReader, BodySender, BoxError, CallId,
    ConnectionId, Error, ErrorKind, Event, EventKind, EventListener, EventLog, HttpVersion, Instant, IntoUri,
    NoProxy, NoopListener, PoolStats, Proxy, ProxyCredentials, ProxyEnv, ProxySelector, ProxyServer, RawHead,
    Recorded, RequestOptions, Resolve, Response, ResponseBody, ResponseExt, StreamLimitPolicy,
    SystemResolver, TimeoutPhase, Upgraded, DEFAULT_USER_AGENT,
};
pub use switchyard_async::{
    AddressCounters, AddressMetrics, AddressStats, AsyncResolve, Backoff, CloseReason, DnsSource, Family,
    Host, OutlierPolicy, Readiness, Resolved, RetryBudget, ServerStatus, ShutdownReport, WarmPolicy,
};

#[cfg(feature = "gateway")]
pub mod gateway;
#[cfg(feature = "gateway")]
pub use gateway::{AccessRecord, Gateway};

/// hickory-resolver on tokio: A and AAAA asked separately (the race starts on
/// the first useful answer, RFC 8305 §3), TTLs into the client's DNS cache,
/// hickory's own cache off. Needs the `hickory` feature.
///
/// ```no_run
/// # fn main() -> Result<(), switchyard_tokio::Error> {
/// let client = switchyard_tokio::Client::builder()
///     .async_resolver(switchyard_tokio::HickoryResolver::system()?)
///     .build()?;
/// # drop(client); Ok(()) }
/// ```
#[cfg(feature = "hickory")]
pub type HickoryResolver = switchyard_async::switchyard_common::hickory::HickoryResolver<
    hickory_resolver::net::runtime::TokioRuntimeProvider,
>;

/// What [`HickoryResolver::https_records`] finds: an origin's HTTPS records
/// (RFC 9460), for [`service_binding::endpoints`](switchyard_core::service_binding::endpoints).
#[cfg(feature = "hickory")]
pub use switchyard_async::switchyard_common::hickory::HttpsRecords;

/// An HTTP client on tokio. Cheap to clone; clones share the pool. Build one
/// with [`Client::builder`] (every knob is on [`ClientBuilder`]) or
/// [`Client::new`]; send with [`Client::get`], [`Client::post`], …,
/// [`Client::send`]. It is a `tower::Service<http::Request<B>>` for any
/// `http_body::Body` `B`.
///
/// ```no_run
/// # async fn run() -> Result<(), switchyard_tokio::Error> {
/// let client = switchyard_tokio::Client::new()?;
/// let text = client.get("https://example.com/").send().await?.error_for_status()?.text().await?;
/// # drop(text); Ok(()) }
/// ```
pub type Client = switchyard_async::Client<Tokio>;
/// Builds a [`Client`]; every knob has a documented default.
pub type ClientBuilder = switchyard_async::ClientBuilder<Client>;
/// A request being built: [`Client::get`], [`Client::post`], …,
/// [`Client::request`]. Finish with `.send().await`. The first error (a bad
/// URL, a header that is not a valid name or value) is kept and returned by
/// `send`.
pub type RequestBuilder =
    switchyard_async::switchyard_common::RequestBuilder<Client, switchyard_async::switchyard_common::Async>;
/// A [`Client`] as a `tower::Service<http::Request<Body>>` of one request
/// type ([`Client::service`]).
pub type ClientService = switchyard_async::ClientService<Tokio>;
/// Warm connections to a declared set of servers: each server's minimum is
/// connected before the first request and kept as connections close (with
/// backoff after failures); requests go through a server's [`ServerHandle`].
/// Cheap to clone; clones share the pool.
///
/// ```no_run
/// # async fn run() -> Result<(), switchyard_tokio::Error> {
/// let manager = switchyard_tokio::Manager::builder()
///     .server("https://api.internal:8443", 2)
///     .build()?;
/// manager.ready().await?;
/// let response = manager.connection("api.internal")?.get("/health").send().await?;
/// # drop(response); Ok(()) }
/// ```
pub type Manager = switchyard_async::Manager<Tokio>;
/// Builds a [`Manager`]: servers, minimums, the client settings they share.
pub type ManagerBuilder = switchyard_async::ManagerBuilder<Tokio>;
/// Requests to one declared server ([`Manager::connection`]): paths, or URLs
/// to that server only.
pub type ServerHandle = switchyard_async::ServerHandle<Tokio>;

/// For code written against [`ResponseExt`] (an `http::Response` from the
/// tower `Service`): `use switchyard_tokio::prelude::*;`. A [`Response`]
/// from `send` needs no import.
pub mod prelude {
    pub use switchyard_async::ResponseExt as _;
}

/// The tokio runtime, as the engine sees it. By default the client runs on the
/// runtime it is called from (`Handle::try_current`); [`Tokio::on`] pins it to
/// one runtime, so it also works when called from outside.
///
/// ```
/// let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// let client = switchyard_tokio::Client::builder()
///     .runtime(switchyard_tokio::Tokio::on(rt.handle().clone()))
///     .build()
///     .unwrap();
/// # drop(client);
/// ```
#[derive(Debug, Default, Clone)]
pub struct Tokio {
    handle: Option<tokio::runtime::Handle>,
}

impl Tokio {
    /// Runs the client's tasks on this runtime.
    #[must_use]
    pub fn on(handle: tokio::runtime::Handle) -> Tokio {
        Tokio { handle: Some(handle) }
    }

    fn handle(&self) -> Option<tokio::runtime::Handle> {
        self.handle.clone().or_else(|| tokio::runtime::Handle::try_current().ok())
    }
}

struct Spawned(tokio::task::AbortHandle);

impl Task for Spawned {
    fn abort(self: Box<Self>) {
        self.0.abort();
    }
}

impl Runtime for Tokio {
    fn connect_udp(&self, peer: SocketAddr) -> io::Result<Box<dyn switchyard_async::UdpIo>> {
        let socket = tokio::net::UdpSocket::from_std(switchyard_async::connected_udp(peer)?)?;
        Ok(Box::new(TokioUdp(socket)))
    }

    fn call_span(method: &http::Method, uri: &http::Uri) -> tracing::Span {
        switchyard_async::switchyard_common::call_span!("switchyard_tokio", method, uri)
    }

    fn call_traced(
        span: &tracing::Span,
        result: &Result<http::Response<switchyard_async::ResponseBody>, switchyard_async::Error>,
    ) {
        switchyard_async::switchyard_common::call_traced!("switchyard_tokio", span, result)
    }

    fn log_sites() -> &'static switchyard_async::switchyard_common::LogSites {
        static SITES: switchyard_async::switchyard_common::LogSites =
            switchyard_async::switchyard_common::log_sites!("switchyard_tokio");
        &SITES
    }

    fn spawn(&self, task: BoxFuture<()>) -> Option<Box<dyn Task>> {
        let handle = self.handle()?;
        Some(Box::new(Spawned(handle.spawn(task).abort_handle())))
    }

    /// Only a client on the runtime of the caller's context: a client
    /// pinned to a runtime ([`Tokio::on`]) keeps its sockets on that one.
    fn drives_inline(&self) -> bool {
        self.handle.is_none() && tokio::runtime::Handle::try_current().is_ok()
    }

    fn sleep_until(&self, at: std::time::Instant) -> BoxFuture<()> {
        match self.handle() {
            Some(handle) => {
                let _inside = handle.enter();
                Box::pin(tokio::time::sleep_until(tokio::time::Instant::from_std(at)))
            }
            // No runtime: nothing can be waited for; calls fail when they try to
            // connect (a typed error), they never panic.
            None => Box::pin(std::future::pending()),
        }
    }

    fn local_addr(&self, io: &Io) -> Option<SocketAddr> {
        let any: &dyn std::any::Any = &**io;
        any.downcast_ref::<tokio::net::TcpStream>()?.local_addr().ok()
    }

    fn connect(&self, addr: SocketAddr) -> BoxFuture<io::Result<Io>> {
        self.connect_with(addr, &switchyard_async::TcpOptions::default())
    }

    fn connect_with(
        &self,
        addr: SocketAddr,
        options: &switchyard_async::TcpOptions,
    ) -> BoxFuture<io::Result<Io>> {
        let options = options.clone();
        Box::pin(async move {
            // A connect already over when it returns (a peer on this host)
            // skips the wait for writability.
            let (socket, connected) = options.start_connect(addr)?;
            let tcp = tokio::net::TcpStream::from_std(socket.into())?;
            if !connected {
                tcp.writable().await?;
                if let Some(e) = tcp.take_error()? {
                    return Err(e);
                }
                // Writable without an error, yet not connected: say so.
                tcp.peer_addr()?;
            }
            Ok(Box::new(tcp) as Io)
        })
    }

    #[cfg(unix)]
    fn connect_unix(&self, path: &std::path::Path) -> BoxFuture<io::Result<Io>> {
        let path = path.to_owned();
        Box::pin(async move {
            let stream = tokio::net::UnixStream::connect(&path).await.map_err(|e| unix_error(&path, &e))?;
            Ok(Box::new(stream) as Io)
        })
    }

    fn unblock(
        &self,
        work: Box<dyn FnOnce() -> io::Result<Vec<IpAddr>> + Send>,
    ) -> BoxFuture<io::Result<Vec<IpAddr>>> {
        let Some(handle) = self.handle() else {
            return Box::pin(async move { work() });
        };
        let task = handle.spawn_blocking(work);
        Box::pin(async move { task.await.map_err(io::Error::other)? })
    }
}

/// A Unix-socket connect failure naming the path.
#[cfg(unix)]
fn unix_error(path: &std::path::Path, e: &io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("Unix socket {}: {e}", path.display()))
}

/// A connected UDP socket on tokio's reactor (QUIC, for HTTP/3).
struct TokioUdp(tokio::net::UdpSocket);

impl switchyard_async::UdpIo for TokioUdp {
    fn poll_send(
        &self,
        cx: &mut std::task::Context<'_>,
        datagram: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        self.0.poll_send(cx, datagram)
    }
    fn poll_recv(
        &self,
        cx: &mut std::task::Context<'_>,
        buf: &mut [u8],
    ) -> std::task::Poll<io::Result<usize>> {
        let mut read = tokio::io::ReadBuf::new(buf);
        std::task::ready!(self.0.poll_recv(cx, &mut read))?;
        std::task::Poll::Ready(Ok(read.filled().len()))
    }
}
