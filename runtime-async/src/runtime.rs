//! [`Runtime`]: the few things the engine needs from an async runtime — spawn a
//! task, sleep until an instant, open a TCP connection, run blocking work — and
//! nothing else. switchyard-tokio and switchyard-smol each implement it in a few
//! dozen lines.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Any bidirectional byte stream (TCP, or TLS over TCP), with tokio's I/O traits
/// (which `tokio-rustls` speaks; it needs no tokio runtime).
pub trait AsyncIo: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + std::any::Any {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> AsyncIo for T {}

/// A connection's byte stream.
pub type Io = Box<dyn AsyncIo>;

/// What a connector hook ([`Connect`](switchyard_common::transport::Connect))
/// returns on the async adapters: the stream, once open.
pub type Connecting = BoxFuture<io::Result<Io>>;

use switchyard_common::transport::TcpOptions;

/// A UDP socket connected to one peer (QUIC for HTTP/3): datagrams out and
/// in, as polls. Connected, so the system filters what arrives and reports
/// an ICMP "port unreachable" as a refused receive (a server with no UDP
/// listener fails its QUIC attempt at once instead of timing out).
pub trait UdpIo: Send + Sync + 'static {
    /// Sends one datagram to the peer.
    ///
    /// # Errors
    /// The system's send error.
    fn poll_send(&self, cx: &mut std::task::Context<'_>, datagram: &[u8]) -> Poll<io::Result<usize>>;
    /// Receives one datagram from the peer into `buf`: its length.
    ///
    /// # Errors
    /// The system's receive error (`ConnectionRefused` after an ICMP
    /// port-unreachable).
    fn poll_recv(&self, cx: &mut std::task::Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>>;
}

/// Binds a non-blocking UDP socket of `peer`'s family on any port and
/// connects it to `peer` (for [`Runtime::connect_udp`] implementations).
///
/// # Errors
/// The system refused the socket, the bind or the connect.
pub fn connected_udp(peer: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let local: SocketAddr = if peer.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = std::net::UdpSocket::bind(local)?;
    socket.connect(peer)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// A spawned task. Dropping the handle detaches the task; [`Task::abort`] cancels
/// it (dropping whatever it owns, such as a connecting socket).
pub trait Task: Send {
    /// Cancels the task.
    fn abort(self: Box<Self>);
}

/// What the engine needs from an async runtime.
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use switchyard_async::{BoxFuture, Io, Runtime, Task};
/// /// A runtime that cannot do anything: every connect fails.
/// struct Nothing;
/// impl Runtime for Nothing {
///     fn spawn(&self, _task: BoxFuture<()>) -> Option<Box<dyn Task>> { None }
///     fn sleep_until(&self, _at: std::time::Instant) -> BoxFuture<()> {
///         Box::pin(std::future::pending())
///     }
///     fn connect(&self, _addr: SocketAddr) -> BoxFuture<std::io::Result<Io>> {
///         Box::pin(async { Err(std::io::ErrorKind::Unsupported.into()) })
///     }
///     fn unblock(
///         &self,
///         work: Box<dyn FnOnce() -> std::io::Result<Vec<IpAddr>> + Send>,
///     ) -> BoxFuture<std::io::Result<Vec<IpAddr>>> {
///         Box::pin(async move { work() })
///     }
/// }
/// ```
pub trait Runtime: Send + Sync + 'static {
    /// The `tracing` span of one call, under the adapter's crate name as its
    /// target (`switchyard_tokio`, …): method, URI without userinfo, and the
    /// `call` and `status` fields filled in later. Default: target
    /// `switchyard_async`. An adapter names its own with
    /// `switchyard_common::call_span!("its_crate", method, uri)`.
    fn call_span(method: &http::Method, uri: &http::Uri) -> tracing::Span
    where
        Self: Sized,
    {
        switchyard_common::call_span!("switchyard_async", method, uri)
    }
    /// Records how a call's `send` ended in its span, with an event under
    /// the same target as [`call_span`](Runtime::call_span)'s (`debug` for a
    /// response, `warn` with the error chain for a failure). An adapter
    /// overrides both with `switchyard_common::call_traced!("its_crate", span, result)`.
    fn call_traced(
        span: &tracing::Span,
        result: &Result<http::Response<crate::ResponseBody>, switchyard_common::Error>,
    ) where
        Self: Sized,
    {
        switchyard_common::call_traced!("switchyard_async", span, result)
    }
    /// Where the client's `debug` events (the connection timeline, a call's
    /// end) go: the same target as [`call_span`](Runtime::call_span)'s.
    /// An adapter overrides it with a `static` made by
    /// `switchyard_common::log_sites!("its_crate")`.
    fn log_sites() -> &'static switchyard_common::LogSites
    where
        Self: Sized,
    {
        static SITES: switchyard_common::LogSites = switchyard_common::log_sites!("switchyard_async");
        &SITES
    }
    /// Spawns a task; `None` when no executor is reachable from here (then the
    /// engine does without: an abandoned body is closed instead of drained).
    fn spawn(&self, task: BoxFuture<()>) -> Option<Box<dyn Task>>;
    /// Whether a future of this runtime's (a DNS lookup, a connect attempt:
    /// its socket, its timers) may run right here, polled by the calling
    /// future on the caller's thread, instead of being spawned. When it may, a
    /// call that has to dial drives its own lookups and attempts and hands
    /// only what is left to
    /// [`spawn`](Runtime::spawn) when it is answered or goes away, which
    /// saves the task hand-over on every new connection. Default: `false`
    /// (always spawned).
    fn drives_inline(&self) -> bool {
        false
    }
    /// Completes at `at`.
    fn sleep_until(&self, at: std::time::Instant) -> BoxFuture<()>;
    /// The local address of a stream this runtime's `connect` made (`None`
    /// for another kind of stream: the client then reports none).
    fn local_addr(&self, _io: &Io) -> Option<SocketAddr> {
        None
    }
    /// Opens a TCP connection to `addr`, with `TCP_NODELAY` set.
    fn connect(&self, addr: SocketAddr) -> BoxFuture<io::Result<Io>>;
    /// Opens a TCP connection to `addr` with the client's socket options
    /// (only called when some are set). Default: an "unsupported" error
    /// naming the options, so none is silently ignored.
    fn connect_with(&self, addr: SocketAddr, options: &TcpOptions) -> BoxFuture<io::Result<Io>> {
        let what = format!("this runtime cannot set socket options ({options:?}) for {addr}");
        Box::pin(async move { Err(io::Error::new(io::ErrorKind::Unsupported, what)) })
    }
    /// Opens a Unix-domain stream socket at `path`. Default: an
    /// "unsupported" error.
    fn connect_unix(&self, path: &std::path::Path) -> BoxFuture<io::Result<Io>> {
        let what = format!("this runtime cannot connect to Unix socket {}", path.display());
        Box::pin(async move { Err(io::Error::new(io::ErrorKind::Unsupported, what)) })
    }
    /// A UDP socket connected to `peer` (QUIC, for HTTP/3), registered with
    /// this runtime's reactor; called from a task running on the runtime.
    /// Default: an "unsupported" error (the QUIC attempt fails, typed).
    fn connect_udp(&self, peer: SocketAddr) -> io::Result<Box<dyn UdpIo>> {
        let what = format!("this runtime has no UDP sockets (QUIC to {peer})");
        Err(io::Error::new(io::ErrorKind::Unsupported, what))
    }
    /// Runs blocking work (a DNS lookup) off the executor's threads.
    fn unblock(
        &self,
        work: Box<dyn FnOnce() -> io::Result<Vec<IpAddr>> + Send>,
    ) -> BoxFuture<io::Result<Vec<IpAddr>>>;
}

/// Runs `f` until `at`; `None` if `at` came first (or `f` was still not done
/// when polled at or after `at`). An `f` ready at its first poll needs no
/// timer and wins whatever the time.
pub(crate) async fn until<T>(
    rt: &dyn Runtime,
    at: std::time::Instant,
    f: impl Future<Output = T>,
) -> Option<T> {
    let mut f = std::pin::pin!(f);
    // No timer for what is ready at once (a stream slot, a buffered frame):
    // the common case costs no timer registration.
    let mut sleep = None;
    std::future::poll_fn(|cx| {
        let Some(timer) = sleep.as_mut() else {
            if let Poll::Ready(v) = f.as_mut().poll(cx) {
                return Poll::Ready(Some(v));
            }
            let timer = sleep.insert(rt.sleep_until(at));
            return if timer.as_mut().poll(cx).is_ready() { Poll::Ready(None) } else { Poll::Pending };
        };
        // Then the timer first: a busy `f` may exhaust the runtime's
        // cooperative budget in its poll, and a timer polled after it would
        // then never see its deadline (tokio's timers honour the budget).
        if timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        if let Poll::Ready(v) = f.as_mut().poll(cx) {
            return Poll::Ready(Some(v));
        }
        Poll::Pending
    })
    .await
}

/// Runs `f` for at most `limit`; `None` if time ran out.
pub(crate) async fn within<T>(rt: &dyn Runtime, limit: Duration, f: impl Future<Output = T>) -> Option<T> {
    until(rt, std::time::Instant::now() + limit, f).await
}
