//! # switchyard-smol
//!
//! An HTTP/1.1 and HTTP/2 client for smol (and async-std) programs, with
//! reqwest's shape:
//!
//! ```no_run
//! smol::block_on(async {
//!     let client = switchyard_smol::Client::new()?;
//!     let body = client.get("https://example.com/").send().await?.error_for_status()?.text().await?;
//!     println!("{body}");
//!     Ok::<(), switchyard_smol::Error>(())
//! })
//! # .unwrap();
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
//! An HTTP/1.1 and HTTP/2 client on [smol](https://docs.rs/smol) whose every
//! connection decision — reuse, HTTP/2 sharing and coalescing, route planning, the
//! Happy Eyeballs race, limits, eviction, retries — comes from the core, a state machine with no I/O
//! that every adapter shares.
//! Same API as `switchyard-tokio` (the two share their async engine).
//!
//! What it guarantees against hostile servers and careless callers (no
//! response smuggling, no leaked URL credentials, deadlines that hold, early
//! responses, bounded idle sockets, …) is listed in
//! [the guarantees every adapter keeps](switchyard_async::switchyard_common#what-every-adapter-guarantees-against-hostile-peers-and-careless-callers).
//!
//! Sockets are `async-net`, timers `async-io`, DNS runs on smol's blocking pool,
//! and tasks go to smol's global executor (or one you give with [`Smol::on`]).
//! There is no tokio runtime in the tree: `tokio-rustls` uses tokio's
//! I/O traits only, and the sockets are bridged to them with `tokio-util`'s
//! `compat`.
//!
//! It also serves programs written for async-std (discontinued upstream): the
//! client needs no particular executor on the calling side, so
//! `async_std::task::block_on(client.get(url).send())` works as is.
//!
//! ```
//! # use switchyard_tests::server::{ServerOptions, TestServer};
//! # let server = TestServer::start(ServerOptions::default()); // loopback, for this example
//! # let base = format!("http://127.0.0.1:{}", server.port());
//! smol::block_on(async {
//!     let client = switchyard_smol::Client::builder().build()?;
//!     let mut response = client.get(format!("{base}/hello")).send().await?;
//!     assert_eq!(response.body_mut().text().await?, "hello");
//!     let mut response = client.post(format!("{base}/echo")).body("ping").send().await?;
//!     assert_eq!(response.body_mut().text().await?, "ping");
//!     assert_eq!(client.stats().reused, 1);
//!     Ok::<(), switchyard_smol::Error>(())
//! })
//! .unwrap();
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use switchyard_async::{BoxFuture, Runtime, Task};
use tokio_util::compat::FuturesAsyncReadCompatExt;

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
#[cfg(feature = "hickory")]
mod hickory;
#[cfg(feature = "hickory")]
pub use hickory::{HickoryResolver, HttpsRecords, SmolProvider, SmolSpawner, SmolTcp, SmolTime, SmolUdp};

/// An HTTP client on smol. Cheap to clone; clones share the pool. Build one
/// with [`Client::builder`] (every knob is on [`ClientBuilder`]) or
/// [`Client::new`]; send with [`Client::get`], [`Client::post`], …,
/// [`Client::send`]. It is a `tower::Service<http::Request<B>>` for any
/// `http_body::Body` `B`.
///
/// ```no_run
/// # async fn run() -> Result<(), switchyard_smol::Error> {
/// let client = switchyard_smol::Client::new()?;
/// let text = client.get("https://example.com/").send().await?.error_for_status()?.text().await?;
/// # drop(text); Ok(()) }
/// ```
pub type Client = switchyard_async::Client<Smol>;
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
pub type ClientService = switchyard_async::ClientService<Smol>;
/// Warm connections to a declared set of servers: each server's minimum is
/// connected before the first request and kept as connections close (with
/// backoff after failures); requests go through a server's [`ServerHandle`].
/// Cheap to clone; clones share the pool.
///
/// ```no_run
/// # async fn run() -> Result<(), switchyard_smol::Error> {
/// let manager = switchyard_smol::Manager::builder()
///     .server("https://api.internal:8443", 2)
///     .build()?;
/// manager.ready().await?;
/// let response = manager.connection("api.internal")?.get("/health").send().await?;
/// # drop(response); Ok(()) }
/// ```
pub type Manager = switchyard_async::Manager<Smol>;
/// Builds a [`Manager`]: servers, minimums, the client settings they share.
pub type ManagerBuilder = switchyard_async::ManagerBuilder<Smol>;
/// Requests to one declared server ([`Manager::connection`]): paths, or URLs
/// to that server only.
pub type ServerHandle = switchyard_async::ServerHandle<Smol>;

/// For code written against [`ResponseExt`] (an `http::Response` from the
/// tower `Service`): `use switchyard_smol::prelude::*;`. A [`Response`]
/// from `send` needs no import.
pub mod prelude {
    pub use switchyard_async::ResponseExt as _;
}

/// smol, as the engine sees it: tasks on smol's global executor by default, or
/// on the executor given to [`Smol::on`] (which the program must run).
///
/// **Which to choose.** Either works without thought: a call that has to
/// dial drives its own connect attempts (and TLS handshake) in the calling
/// future, on the caller's thread, and hands to the executor only what is
/// left when it is answered or dropped; the client's other tasks (HTTP/2
/// connections, the pool's timer) run on the executor. With the default (smol's global
/// executor), a program that makes its calls inside one `smol::block_on`
/// runs a new connection per call (`Connection: close`) level with
/// switchyard-tokio on the project's benchmark (scenario 4,
/// `switchyard-smol-main`: 0.98–1.06×), and so does one that runs an executor of
/// its own and gives it here (`Smol::on(ex)`, calls inside
/// `block_on(ex.run(...))`, `switchyard-smol-local`). A program that wraps
/// each call in a `block_on` of its own pays async-io's hand-over of the
/// reactor to its helper thread at every `block_on`'s end (0.65–0.79×,
/// `switchyard-smol`).
///
/// ```
/// use std::sync::Arc;
/// let executor = Arc::new(smol::Executor::new());
/// let client = switchyard_smol::Client::builder()
///     .runtime(switchyard_smol::Smol::on(executor.clone()))
///     .build()
///     .unwrap();
/// # drop(client);
/// ```
#[derive(Default, Clone)]
pub struct Smol {
    executor: Option<Arc<smol::Executor<'static>>>,
}

impl std::fmt::Debug for Smol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Smol").field("own_executor", &self.executor.is_some()).finish()
    }
}

impl Smol {
    /// Runs the client's tasks on this executor.
    #[must_use]
    pub fn on(executor: Arc<smol::Executor<'static>>) -> Smol {
        Smol { executor: Some(executor) }
    }
}

/// A spawned task: detached when dropped, cancelled by [`Task::abort`].
struct Spawned(Option<smol::Task<()>>);

impl Task for Spawned {
    fn abort(mut self: Box<Self>) {
        drop(self.0.take()); // dropping a smol task cancels it
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.detach();
        }
    }
}

impl Runtime for Smol {
    fn connect_udp(&self, peer: SocketAddr) -> io::Result<Box<dyn switchyard_async::UdpIo>> {
        let socket = smol::Async::new_nonblocking(switchyard_async::connected_udp(peer)?)?;
        Ok(Box::new(QuicUdp(socket)))
    }

    fn call_span(method: &http::Method, uri: &http::Uri) -> tracing::Span {
        switchyard_async::switchyard_common::call_span!("switchyard_smol", method, uri)
    }

    fn call_traced(
        span: &tracing::Span,
        result: &Result<http::Response<switchyard_async::ResponseBody>, switchyard_async::Error>,
    ) {
        switchyard_async::switchyard_common::call_traced!("switchyard_smol", span, result)
    }

    fn log_sites() -> &'static switchyard_async::switchyard_common::LogSites {
        static SITES: switchyard_async::switchyard_common::LogSites =
            switchyard_async::switchyard_common::log_sites!("switchyard_smol");
        &SITES
    }

    fn spawn(&self, task: BoxFuture<()>) -> Option<Box<dyn Task>> {
        let spawned = match &self.executor {
            Some(executor) => executor.spawn(task),
            None => smol::spawn(task),
        };
        Some(Box::new(Spawned(Some(spawned))))
    }

    /// Always: smol's sockets and timers belong to async-io's one reactor,
    /// which serves every thread and executor.
    fn drives_inline(&self) -> bool {
        true
    }

    fn sleep_until(&self, at: std::time::Instant) -> BoxFuture<()> {
        let timer = smol::Timer::at(at);
        Box::pin(async move {
            timer.await;
        })
    }

    fn local_addr(&self, io: &Io) -> Option<SocketAddr> {
        let any: &dyn std::any::Any = &**io;
        any.downcast_ref::<tokio_util::compat::Compat<smol::net::TcpStream>>()?.get_ref().local_addr().ok()
    }

    fn connect(&self, addr: SocketAddr) -> BoxFuture<io::Result<Io>> {
        self.connect_with(addr, &switchyard_async::TcpOptions::default())
    }

    fn connect_with(
        &self,
        addr: SocketAddr,
        options: &switchyard_async::TcpOptions,
    ) -> BoxFuture<io::Result<Io>> {
        // A non-blocking connect that completes when the socket turns
        // writable (async-io's own way), unless it is over when it returns
        // (a peer on this host).
        let options = options.clone();
        Box::pin(async move {
            let (socket, connected) = options.start_connect(addr)?;
            let stream = smol::Async::new_nonblocking(std::net::TcpStream::from(socket))?;
            if !connected {
                stream.writable().await?;
                if let Some(e) = stream.get_ref().take_error()? {
                    return Err(e);
                }
                stream.get_ref().peer_addr()?; // connected, not merely writable
            }
            Ok(Box::new(smol::net::TcpStream::from(stream).compat()) as Io)
        })
    }

    #[cfg(unix)]
    fn connect_unix(&self, path: &std::path::Path) -> BoxFuture<io::Result<Io>> {
        let path = path.to_owned();
        Box::pin(async move {
            let stream = smol::net::unix::UnixStream::connect(&path)
                .await
                .map_err(|e| io::Error::new(e.kind(), format!("Unix socket {}: {e}", path.display())))?;
            Ok(Box::new(stream.compat()) as Io)
        })
    }

    fn unblock(
        &self,
        work: Box<dyn FnOnce() -> io::Result<Vec<IpAddr>> + Send>,
    ) -> BoxFuture<io::Result<Vec<IpAddr>>> {
        Box::pin(smol::unblock(work))
    }
}

/// A connected UDP socket on async-io's reactor (QUIC, for HTTP/3).
struct QuicUdp(smol::Async<std::net::UdpSocket>);

impl switchyard_async::UdpIo for QuicUdp {
    fn poll_send(
        &self,
        cx: &mut std::task::Context<'_>,
        datagram: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        loop {
            match self.0.get_ref().send(datagram) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::task::ready!(self.0.poll_writable(cx))?;
                }
                done => return std::task::Poll::Ready(done),
            }
        }
    }
    fn poll_recv(
        &self,
        cx: &mut std::task::Context<'_>,
        buf: &mut [u8],
    ) -> std::task::Poll<io::Result<usize>> {
        loop {
            match self.0.get_ref().recv(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::task::ready!(self.0.poll_readable(cx))?;
                }
                done => return std::task::Poll::Ready(done),
            }
        }
    }
}
