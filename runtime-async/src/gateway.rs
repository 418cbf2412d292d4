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
//! #   fn accept(_: &()) -> switchyard_async::gateway::Accepting<'_, (Self::Conn, Option<std::net::SocketAddr>)> { Box::pin(std::future::pending()) }
//! #   fn bind(_: std::net::SocketAddr) -> std::io::Result<()> { Ok(()) }
//! #   fn local_port(_: &()) -> Option<u16> { None }
//! # }
//! # let listener = ();
//! // switchyard_tokio::Manager / switchyard_smol::Manager, with their listeners.
//! let manager = Manager::builder().server("https://api.internal", 2).build()?;
//! // `curl -x http://127.0.0.1:8080 http://api.internal/v1/items` goes out over TLS.
//! manager.gateway().max_connections(256).serve(listener).await?;
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body::{Frame, SizeHint};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use switchyard_common::gateway::{self, Admission, Refusal};
pub use switchyard_common::gateway::{listener, shared_listener, StatusAccess, LISTEN_BACKLOG, STATUS_PATH};
use switchyard_common::manager::Declared;
use switchyard_core::{ConnectionId, Source};
use tokio::sync::Semaphore;

use crate::response::ResponseExt;
use crate::runtime::Runtime;
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
    /// The next connection (`TCP_NODELAY` set) and its peer's address.
    fn accept(listener: &Self::Listener) -> Accepting<'_, (Self::Conn, Option<SocketAddr>)>;
    /// A listener on `addr` with the system's maximum backlog
    /// ([`switchyard_common::gateway::listener`]); call it where the runtime
    /// can register sockets (inside it, for tokio).
    ///
    /// # Errors
    /// The address cannot be bound.
    fn bind(addr: SocketAddr) -> io::Result<Self::Listener>;
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
    idle_timeout: Duration,
    response_timeout: Duration,
    /// Per declared server (its URL as declared), bounded by the declarations.
    response_timeouts: Vec<(String, Duration)>,
    status: StatusAccess,
    via_name: String,
}

impl<R: Runtime> std::fmt::Debug for Gateway<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("max_connections", &self.max_connections)
            .field("max_requests", &self.max_requests)
            .field("grace", &self.grace)
            .field("idle_timeout", &self.idle_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("response_timeouts", &self.response_timeouts)
            .field("status", &self.status)
            .field("via_name", &self.via_name)
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> Manager<R> {
    /// A gateway over this Manager's servers, with every default: 1,024 local
    /// connections and 4,096 requests at once, local connections closed after
    /// 60 s of silence with no request in flight, 504 after 60 s without an
    /// upstream response head, 10 s of shutdown grace, the status page for
    /// loopback clients, no log.
    pub fn gateway(&self) -> Gateway<R> {
        Gateway {
            manager: self.clone(),
            max_connections: 1024,
            max_requests: 4096,
            grace: gateway::DEFAULT_SHUTDOWN_GRACE,
            log: None,
            idle_timeout: gateway::DEFAULT_IDLE_TIMEOUT,
            response_timeout: gateway::DEFAULT_RESPONSE_TIMEOUT,
            response_timeouts: Vec::new(),
            status: StatusAccess::default(),
            via_name: gateway::via_name(),
        }
    }
}

impl<R: Runtime> Gateway<R> {
    /// At most `n` local connections at once. At the cap, a new connection
    /// is accepted and waits while the gateway closes an idle one (no request
    /// in flight; the longest silent, then the oldest) to make room; while
    /// none is idle, it waits for a slot and the rest wait in the listener's
    /// backlog. Default 1,024.
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
    /// Closes a local connection that stays silent this long with no request
    /// in flight: before its first byte, and between requests (checked four
    /// times per period, so it closes within 1¼ of it). A head that starts
    /// but trickles is hyper's header timeout (30 s). Default 60 s.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout.max(Duration::from_millis(4));
        self
    }
    /// Answers 504 when an upstream response head takes longer than this,
    /// and cuts a response body short (the local client sees it end early)
    /// when the upstream then sends nothing of it for this long. Default 60 s
    /// (nginx's `proxy_read_timeout`).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }
    /// [`Gateway::response_timeout`] for one declared server (its URL as
    /// declared); the others keep the gateway's.
    pub fn response_timeout_for(mut self, server: &str, timeout: Duration) -> Self {
        self.response_timeouts.retain(|(url, _)| url != server);
        self.response_timeouts.push((server.to_owned(), timeout));
        self
    }
    /// Who may read the status page ([`STATUS_PATH`]). Default: loopback
    /// clients only.
    pub fn status_page(mut self, access: StatusAccess) -> Self {
        self.status = access;
        self
    }
    /// This gateway's pseudonym in `Via` (default `switchyard-` and 8 random
    /// hexadecimal digits). A request that arrives with it in its `Via` has
    /// come around a loop and is answered 508. It must be a token (`serve`
    /// fails with `InvalidInput` otherwise).
    pub fn via_name(mut self, name: impl Into<String>) -> Self {
        self.via_name = name.into();
        self
    }
    /// Calls `log` once per request, when its response body has ended (or was
    /// abandoned), when its tunnel closed, or when its client went away before
    /// the response (status 499, as nginx logs it).
    pub fn access_log(mut self, log: impl Fn(&AccessRecord) + Send + Sync + 'static) -> Self {
        self.log = Some(Arc::new(log));
        self
    }
}

impl<R: Listen> Manager<R> {
    /// Serves [`Manager::gateway`] with every default on `listener` until an
    /// error stops accepting (`gateway().serve_until` takes a shutdown
    /// signal).
    ///
    /// # Errors
    /// The listener failed (other than the transient errors of `accept`).
    pub async fn serve(&self, listener: R::Listener) -> io::Result<()> {
        self.gateway().serve(listener).await
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
        let declared = self.manager.servers();
        let via = gateway::Via::new(&self.via_name).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "gateway: via_name({:?}) is not a token (letters, digits, -._~ and the like)",
                    self.via_name
                ),
            )
        })?;
        let mut response_timeouts = vec![self.response_timeout; declared.len()];
        for (url, timeout) in &self.response_timeouts {
            let at = declared.iter().position(|d| d.url == *url).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("gateway: response_timeout_for({url:?}): no such server is declared"),
                )
            })?;
            response_timeouts[at] = *timeout;
        }
        let rt = Arc::clone(&self.manager.client().inner.shared.rt);
        let connections = Arc::new(Semaphore::new(self.max_connections));
        let shortest = response_timeouts.iter().copied().min().unwrap_or(self.response_timeout);
        let deadlines = Arc::new(Deadlines::new(shortest));
        let state = Arc::new(State {
            deadlines: Arc::clone(&deadlines),
            local_port: R::local_port(&listener),
            probing: declared.iter().map(|_| AtomicBool::new(false)).collect(),
            response_timeouts,
            manager: self.manager,
            requests: Semaphore::new(self.max_requests),
            log: self.log,
            rt: Arc::clone(&rt),
            status: self.status,
            via,
            idle_timeout: self.idle_timeout,
        });
        let watched = Arc::new(Watched::default());
        let (stopping, stop) = tokio::sync::watch::channel(false);
        let sweeping =
            sweeper(Arc::clone(&deadlines), Arc::clone(&watched), self.idle_timeout, Arc::clone(&rt), stop);
        if rt.spawn(Box::pin(sweeping)).is_none() {
            return Err(io::Error::other("gateway: the runtime cannot spawn tasks"));
        }
        let mut builder = hyper_util::server::conn::auto::Builder::new(Exec(Arc::clone(&rt)));
        builder.http1().keep_alive(true).timer(CoarseTimer(Arc::clone(&deadlines)));
        builder.http2().timer(Timer(Arc::clone(&rt)));
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let free = Arc::clone(&connections).try_acquire_owned().ok();
            let (stream, peer) = tokio::select! {
                biased;
                () = &mut shutdown => break,
                accepted = R::accept(&listener) => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) if is_transient(&e) => {
                        rt.sleep_until(Instant::now() + Duration::from_millis(10)).await;
                        continue;
                    }
                    Err(e) => return Err(e),
                },
            };
            let permit = match free {
                Some(permit) => permit,
                None => {
                    // At the cap, with a connection waiting: make room by
                    // closing an idle one (the new one is not among them),
                    // then wait for its slot (or any other).
                    let mut got = None;
                    loop {
                        watched.close_an_idle();
                        let wait = rt.sleep_until(Instant::now() + Duration::from_millis(50));
                        tokio::select! {
                            biased;
                            () = &mut shutdown => break,
                            p = Arc::clone(&connections).acquire_owned() => {
                                got = Some(p.map_err(io::Error::other)?);
                                break;
                            }
                            () = wait => {}
                        }
                    }
                    match got {
                        Some(permit) => permit,
                        None => break,
                    }
                }
            };
            let watch = Arc::new(Watch::default());
            let key = watched.insert(Arc::clone(&watch));
            let io = WatchedIo { io: stream, watch: Arc::clone(&watch), _slot: permit };
            let service = {
                let (state, watch) = (Arc::clone(&state), Arc::clone(&watch));
                let peer = peer.map(|p| p.ip());
                hyper::service::service_fn(move |request| {
                    let state = Arc::clone(&state);
                    let active = Active::start(&watch);
                    async move { Ok::<_, Infallible>(state.handle(request, peer, active).await) }
                })
            };
            let connection = builder.serve_connection_with_upgrades(io, service).into_owned();
            let watched = Arc::clone(&watched);
            let _ = rt.spawn(Box::pin(async move {
                let mut connection = std::pin::pin!(connection);
                let mut closing = false;
                std::future::poll_fn(|cx| {
                    if !closing {
                        watch.task.register(cx.waker());
                        if watch.close.load(Ordering::Acquire) {
                            connection.as_mut().graceful_shutdown();
                            closing = true;
                        }
                    }
                    connection.as_mut().poll(cx)
                })
                .await
                .ok();
                watched.remove(key);
            }));
        }
        drop(listener);
        let _ = stopping.send(true);
        watched.close_all();
        let all = u32::try_from(self.max_connections).unwrap_or(u32::MAX);
        let deadline = rt.sleep_until(Instant::now() + self.grace);
        tokio::select! {
            _ = connections.acquire_many(all) => {}
            () = deadline => {}
        }
        Ok(())
    }
}

/// The gateway's response timeouts, kept coarse: one task wakes every tick and
/// wakes the requests whose deadline passed, instead of a runtime timer armed
/// and dropped for every request and every response body (two per request
/// cost 13 % of the gateway's CPU per request, measured). A deadline is
/// noticed within one tick after it passes.
struct Deadlines {
    tick: Duration,
    waiting: Mutex<Waiting>,
}

/// The registered deadlines: a slab (a request registers and leaves in
/// constant time, under the lock for a few dozen instructions; an ordered map
/// cost ~1 k per request), swept whole every tick — its size is the requests
/// waiting, at most the gateway's `max_requests`.
#[derive(Default)]
struct Waiting {
    /// Each slot: its generation (bumped when freed, so a stale key never
    /// removes another registration) and the deadline with its waker.
    slots: Vec<(u64, Option<(Instant, Waker)>)>,
    free: Vec<usize>,
}

/// A registration: its slot and the slot's generation then.
type Key = (usize, u64);

impl Waiting {
    fn insert(&mut self, at: Instant, waker: Waker) -> Key {
        match self.free.pop() {
            Some(i) => {
                self.slots[i].1 = Some((at, waker));
                (i, self.slots[i].0)
            }
            None => {
                self.slots.push((0, Some((at, waker))));
                (self.slots.len() - 1, 0)
            }
        }
    }

    fn remove(&mut self, (i, generation): Key) {
        if let Some(slot) = self.slots.get_mut(i) {
            if slot.0 == generation && slot.1.take().is_some() {
                slot.0 += 1;
                self.free.push(i);
            }
        }
    }
}

impl Deadlines {
    fn new(shortest: Duration) -> Deadlines {
        let tick = (shortest / 8).clamp(Duration::from_millis(5), Duration::from_secs(1));
        Deadlines { tick, waiting: Mutex::new(Waiting::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Wakes whoever waits on a deadline that has passed.
    fn sweep(&self, now: Instant) {
        let mut due = Vec::new();
        {
            let mut waiting = self.lock();
            let Waiting { slots, free } = &mut *waiting;
            for (i, slot) in slots.iter_mut().enumerate() {
                if slot.1.as_ref().is_some_and(|(at, _)| *at <= now) {
                    if let Some((_, waker)) = slot.1.take() {
                        due.push(waker);
                    }
                    slot.0 += 1;
                    free.push(i);
                }
            }
        }
        for waker in due {
            waker.wake();
        }
    }
}

/// The gateway's one housekeeping task: the deadlines every tick, and the
/// local connections' idle check four times per idle timeout.
async fn sweeper(
    deadlines: Arc<Deadlines>,
    watched: Arc<Watched>,
    idle: Duration,
    rt: Arc<dyn Runtime>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let every = (idle / 4).max(Duration::from_millis(1));
    let tick = deadlines.tick.min(every);
    let mut next_check = Instant::now() + every;
    loop {
        let sleep = rt.sleep_until(Instant::now() + tick);
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            () = sleep => {
                let now = Instant::now();
                deadlines.sweep(now);
                if now >= next_check {
                    watched.check_idle(4);
                    next_check = now + every;
                }
            }
        }
    }
}

/// One registration with [`Deadlines`]: woken at (or after) its deadline.
struct Deadline<'a> {
    deadlines: &'a Deadlines,
    /// The registration and the instant it is for.
    key: Option<(Key, Instant)>,
    waker: Option<Waker>,
}

impl<'a> Deadline<'a> {
    fn new(deadlines: &'a Deadlines) -> Deadline<'a> {
        Deadline { deadlines, key: None, waker: None }
    }

    /// Whether `at` has passed; if not, the task of `cx` is woken once it has
    /// (within a tick). Takes the lock only to (re-)register.
    fn passed(&mut self, at: Instant, cx: &Context<'_>) -> bool {
        if Instant::now() >= at {
            return true;
        }
        let fresh = self.key.is_none_or(|(_, k)| k != at);
        let moved = self.waker.as_ref().is_none_or(|w| !w.will_wake(cx.waker()));
        if fresh || moved {
            let mut waiting = self.deadlines.lock();
            if let Some((old, _)) = self.key.take() {
                waiting.remove(old);
            }
            let key = waiting.insert(at, cx.waker().clone());
            self.key = Some((key, at));
            self.waker = Some(cx.waker().clone());
        }
        false
    }

    /// Forgets the registration (the work ended first).
    fn clear(&mut self) {
        if let Some((key, _)) = self.key.take() {
            self.deadlines.lock().remove(key);
        }
    }
}

impl Drop for Deadline<'_> {
    fn drop(&mut self) {
        self.clear();
    }
}

/// What the gateway watches of one local connection.
#[derive(Default)]
struct Watch {
    /// Completed reads and bytes written so far (only the connection's task
    /// writes it): unchanged between two checks means silent.
    bytes: AtomicU64,
    /// What the last idle check saw of `bytes` (only the sweeper writes it).
    seen: AtomicU64,
    /// Requests whose response has not ended.
    active: AtomicUsize,
    /// Idle-timeout checks in a row that found it silent and idle.
    quiet: AtomicU32,
    /// Asked to close (gracefully: at once when idle): idle, room for
    /// another, or the gateway's shutdown.
    close: AtomicBool,
    /// The connection's task, woken to see `close` (registered without a
    /// lock on every wake-up: this is polled with the connection).
    task: atomic_waker::AtomicWaker,
}

impl Watch {
    fn ask_to_close(&self) {
        self.close.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// Every open local connection, to find an idle one when the cap is reached.
#[derive(Default)]
struct Watched {
    open: Mutex<(u64, BTreeMap<u64, Arc<Watch>>)>,
}

impl Watched {
    fn insert(&self, watch: Arc<Watch>) -> u64 {
        let mut open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        open.0 += 1;
        let key = open.0;
        open.1.insert(key, watch);
        key
    }

    fn remove(&self, key: u64) {
        self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner).1.remove(&key);
    }

    /// Asks the idle connection silent longest (the oldest among equals) to
    /// close; none idle: nothing.
    fn close_an_idle(&self) {
        let open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // The oldest among the longest silent (`max_by_key` keeps the last
        // maximum: newest first).
        let victim = open
            .1
            .values()
            .rev()
            .filter(|w| w.active.load(Ordering::Relaxed) == 0 && !w.close.load(Ordering::Relaxed))
            .max_by_key(|w| w.quiet.load(Ordering::Relaxed));
        if let Some(victim) = victim {
            victim.ask_to_close();
        }
    }

    /// One idle check of every connection: silent (no byte either way) and
    /// idle (no request in flight) since the last check counts; `checks` in
    /// a row close it.
    fn check_idle(&self, checks: u32) {
        let open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for w in open.1.values() {
            let bytes = w.bytes.load(Ordering::Relaxed);
            let quiet = if bytes == w.seen.load(Ordering::Relaxed) && w.active.load(Ordering::Relaxed) == 0 {
                w.quiet.load(Ordering::Relaxed) + 1
            } else {
                w.seen.store(bytes, Ordering::Relaxed);
                0
            };
            w.quiet.store(quiet, Ordering::Relaxed);
            if quiet >= checks && !w.close.load(Ordering::Relaxed) {
                tracing::debug!(target: "switchyard::gateway", "closing a silent, idle local connection");
                w.ask_to_close();
            }
        }
    }

    /// Asks every connection to close (the gateway's shutdown).
    fn close_all(&self) {
        let open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for w in open.1.values() {
            w.ask_to_close();
        }
    }
}

/// A request in flight on a local connection, until its response ends.
struct Active(Arc<Watch>);

impl Active {
    fn start(watch: &Arc<Watch>) -> Active {
        watch.active.fetch_add(1, Ordering::Relaxed);
        Active(Arc::clone(watch))
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

pin_project_lite::pin_project! {
    /// An upstream response body on its way to the local client: its request
    /// counted as in flight until it ends, and failed when the upstream sends
    /// nothing for the response timeout while the local side waits for more
    /// (a slow local reader, which stops polling, never counts).
    struct Upstream<B> {
        #[pin]
        body: B,
        active: Option<Active>,
        limit: Duration,
        // Frames so far, and at the registered deadline's start.
        frames: u64,
        since: (u64, Instant),
        registered: Registered,
    }
}

/// A body's registration with [`Deadlines`], removed when it ends or drops.
struct Registered {
    deadlines: Arc<Deadlines>,
    /// The registration and the instant it is for.
    key: Option<(Key, Instant)>,
}

impl Registered {
    fn clear(&mut self) {
        if let Some((key, _)) = self.key.take() {
            self.deadlines.lock().remove(key);
        }
    }

    /// Wakes `waker` at `at` unless already registered for then or later.
    fn register(&mut self, at: Instant, waker: &Waker) {
        if self.key.is_some_and(|(_, k)| k >= at) {
            return;
        }
        let mut waiting = self.deadlines.lock();
        if let Some((old, _)) = self.key.take() {
            waiting.remove(old);
        }
        let key = waiting.insert(at, waker.clone());
        self.key = Some((key, at));
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.clear();
    }
}

impl<B: http_body::Body<Data = Bytes, Error = BoxError>> http_body::Body for Upstream<B> {
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let polled = this.body.poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(_))) => *this.frames += 1,
            Poll::Ready(None | Some(Err(_))) => {
                *this.active = None;
                this.registered.clear();
            }
            Poll::Pending => {
                // Silent since the last registration's start: past the limit
                // once its deadline passes. A frame since then starts a new one.
                let now = Instant::now();
                if this.since.0 != *this.frames {
                    *this.since = (*this.frames, now);
                }
                let at = this.since.1 + *this.limit;
                if now >= at {
                    *this.active = None;
                    this.registered.clear();
                    let why = format!("the upstream sent nothing of the response body for {:?}", this.limit);
                    return Poll::Ready(Some(Err(io::Error::new(io::ErrorKind::TimedOut, why).into())));
                }
                // (Re-)registered at most once per limit of progress; a
                // wake-up before `at` only re-checks.
                this.registered.register(at, cx.waker());
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

/// A local connection's socket, counting the bytes that pass (the idle check).
struct WatchedIo<C> {
    io: C,
    watch: Arc<Watch>,
    /// The connection's slot under the cap: held by the stream itself, so a
    /// connection handed over for a tunnel or a protocol switch keeps it
    /// until the tunnel closes.
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl<C> WatchedIo<C> {
    fn count(&self, n: usize) {
        // One writer (the connection's task): no read-modify-write needed.
        let bytes = self.watch.bytes.load(Ordering::Relaxed);
        self.watch.bytes.store(bytes.wrapping_add(n as u64), Ordering::Relaxed);
    }
}

impl<C: hyper::rt::Read + Unpin> hyper::rt::Read for WatchedIo<C> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            // The cursor is handed on whole: a read that completed is counted
            // as activity (its length does not matter to the idle check).
            this.count(1);
        }
        polled
    }
}

impl<C: hyper::rt::Write + Unpin> hyper::rt::Write for WatchedIo<C> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            this.count(n);
        }
        polled
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
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = polled {
            this.count(n);
        }
        polled
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
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

/// hyper's HTTP/1.1 timer (its header read timeout, armed for every request
/// head) on the gateway's coarse [`Deadlines`]: a slab entry instead of a
/// runtime timer and two boxes per request; it fires within a tick (at most
/// a second) after its instant.
struct CoarseTimer(Arc<Deadlines>);

/// A sleep on [`Deadlines`]: ready once its instant has passed.
struct CoarseSleep {
    at: Instant,
    registered: Registered,
}

impl Future for CoarseSleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if Instant::now() >= this.at {
            this.registered.clear();
            return Poll::Ready(());
        }
        this.registered.register(this.at, cx.waker());
        Poll::Pending
    }
}

impl hyper::rt::Sleep for CoarseSleep {}

impl hyper::rt::Timer for CoarseTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(Instant::now() + duration)
    }
    fn sleep_until(&self, at: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(CoarseSleep { at, registered: Registered { deadlines: Arc::clone(&self.0), key: None } })
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

/// Joins a handed-over local connection (a tunnel's, or a switched one's) and
/// its upstream byte for byte until either side closes — or until nothing has
/// moved either way for `idle` (the gateway's idle timeout, looked at once per
/// period: a silent pair closes between one and two periods after its last
/// byte), so a forgotten tunnel cannot hold its slot for good. The bytes each
/// way, or why it ended.
async fn join(
    rt: &dyn Runtime,
    local: hyper::upgrade::Upgraded,
    upstream: crate::Upgraded,
    idle: Duration,
) -> io::Result<(u64, u64)> {
    let moved = AtomicU64::new(0);
    let mut upstream = Metered { io: upstream, moved: &moved };
    let mut local = Tunnel(local);
    let copy = tokio::io::copy_bidirectional(&mut local, &mut upstream);
    let watch = async {
        let mut last = 0;
        loop {
            rt.sleep_until(Instant::now() + idle).await;
            let now = moved.load(Ordering::Relaxed);
            if now == last {
                return;
            }
            last = now;
        }
    };
    tokio::select! {
        joined = copy => joined,
        () = watch => Err(io::Error::new(io::ErrorKind::TimedOut, format!("nothing moved either way for {idle:?}"))),
    }
}

/// A tunnel's upstream side, counting the bytes that cross it (each way) for
/// [`join`]'s idle check.
struct Metered<'a> {
    io: crate::Upgraded,
    moved: &'a AtomicU64,
}

impl Metered<'_> {
    fn count(&self, n: usize) {
        // One task moves the bytes and reads the count: no read-modify-write race.
        let at = self.moved.load(Ordering::Relaxed);
        self.moved.store(at.wrapping_add(n as u64).max(1), Ordering::Relaxed);
    }
}

impl tokio::io::AsyncRead for Metered<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        this.count(buf.filled().len() - before);
        polled
    }
}

impl tokio::io::AsyncWrite for Metered<'_> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = &polled {
            this.count(*n);
        }
        polled
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
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
    status: StatusAccess,
    via: gateway::Via,
    /// Per declared server (same order): a request is probing it while the
    /// Manager reports it down.
    probing: Vec<AtomicBool>,
    /// Per declared server (same order).
    response_timeouts: Vec<Duration>,
    deadlines: Arc<Deadlines>,
    /// How long a tunnel or switched connection may stay silent both ways.
    idle_timeout: Duration,
}

/// The one request trying a server the Manager reports down (half-open), until
/// it ends.
struct Probe<'a>(&'a AtomicBool);

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// A request's access record until its response head is decided: dropped
/// before that (its client went away), it is logged as 499.
struct Abandoned {
    record: AccessRecord,
    start: Instant,
    log: Option<Log>,
    armed: bool,
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(log) = &self.log {
            self.record.status = StatusCode::from_u16(499).expect("499 is a status code");
            self.record.refused = Some("the client went away before the response".into());
            self.record.head_time = self.start.elapsed();
            self.record.total_time = self.record.head_time;
            log(&self.record);
        }
    }
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

/// What the gateway learns of a request body as it goes up.
#[derive(Default)]
struct Upload {
    /// Reading it from the local client failed (bad chunking, cut off).
    failed: AtomicBool,
}

pin_project_lite::pin_project! {
    /// The request body on its way up: its failures noted, its bytes counted
    /// for the access log.
    struct Uploading<B> {
        #[pin]
        body: B,
        upload: Arc<Upload>,
        read: Option<Arc<AtomicU64>>,
    }
}

impl<B: http_body::Body<Data = Bytes>> http_body::Body for Uploading<B> {
    type Data = Bytes;
    type Error = B::Error;
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let polled = this.body.poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some(read)) = (frame.data_ref(), this.read.as_ref()) {
                    read.fetch_add(data.len() as u64, Ordering::Relaxed);
                }
            }
            Poll::Ready(Some(Err(_))) => this.upload.failed.store(true, Ordering::Release),
            _ => {}
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
    async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
        peer: Option<std::net::IpAddr>,
        active: Active,
    ) -> Response<GatewayBody> {
        let start = Instant::now();
        let _slot = self.requests.acquire().await;
        let (mut parts, body) = request.into_parts();
        let mut pending = Abandoned {
            // The target in words only for a log to read.
            record: AccessRecord::new(
                parts.method.clone(),
                if self.log.is_some() { parts.uri.to_string() } else { String::new() },
            ),
            start,
            log: self.log.clone(),
            armed: true,
        };
        let read = self.log.as_ref().map(|_| Arc::new(AtomicU64::new(0)));
        let admitted = {
            let rules = gateway::Rules {
                declared: self.manager.servers(),
                local_port: self.local_port,
                via_name: self.via.name(),
                status: self.status,
            };
            let shape =
                gateway::Shape { method: &parts.method, uri: &parts.uri, headers: &parts.headers, peer };
            gateway::admit(&rules, &shape)
        };
        let outcome = match admitted {
            Ok(Admission::Tunnel(server)) => {
                self.tunnel(server, parts, body, &mut pending.record, start).await
            }
            Ok(Admission::Forward { server, target }) => {
                self.forward(server, target, &mut parts, body, &mut pending.record, read.clone(), active)
                    .await
            }
            Ok(Admission::StatusPage) => Ok(Some(self.status_page())),
            Err(refusal) => Err(refusal),
        };
        pending.armed = false;
        let mut record =
            std::mem::replace(&mut pending.record, AccessRecord::new(http::Method::GET, String::new()));
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

    /// A half-open probe of a server the Manager reports down: `Ok(None)` when
    /// it is not down, `Ok(Some)` for the one request let through to try it,
    /// the 503 for the others meanwhile.
    fn admit_down(&self, server: &Declared) -> Result<Option<(Probe<'_>, Refusal)>, Refusal> {
        // The common case (up) answers from the pool's state, with no status built.
        if !self.manager.is_down(server) {
            return Ok(None);
        }
        let Some(refusal) = self.manager.status_of(server).as_ref().and_then(gateway::down) else {
            return Ok(None);
        };
        let at = self.manager.servers().iter().position(|d| std::ptr::eq(d, server));
        let Some(flag) = at.map(|at| &self.probing[at]) else { return Err(refusal) };
        if flag.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            tracing::debug!(target: "switchyard::gateway", "{} is down: this request tries it", server.url);
            Ok(Some((Probe(flag), refusal)))
        } else {
            Err(refusal)
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn forward(
        &self,
        server: &Declared,
        target: http::Uri,
        parts: &mut http::request::Parts,
        body: Incoming,
        record: &mut AccessRecord,
        read: Option<Arc<AtomicU64>>,
        active: Active,
    ) -> Result<Option<Response<GatewayBody>>, Refusal> {
        record.server = Some(server.url.clone());
        let probe = self.admit_down(server)?;
        let incoming_version = parts.version;
        // A protocol switch (WebSocket) asked by an HTTP/1.1 client: passed
        // through on an upstream connection of its own (the client library
        // sends a request with `Upgrade` alone on HTTP/1.1), the two joined
        // byte for byte after `101`.
        let switch = gateway::upgrade_asked(&parts.headers, incoming_version)
            .and_then(|protocol| Some((protocol, parts.extensions.remove::<hyper::upgrade::OnUpgrade>()?)));
        gateway::forward_request_headers(&mut parts.headers, incoming_version, &self.via);
        if let Some((protocol, _)) = &switch {
            gateway::switch_fields(&mut parts.headers, protocol.clone());
        }
        let upload = (!http_body::Body::is_end_stream(&body)).then(|| Arc::new(Upload::default()));
        let body = match &upload {
            None => Body::empty(),
            Some(upload) => Body::wrap(Uploading { body, upload: Arc::clone(upload), read }),
        };
        let mut upstream = Request::new(body);
        *upstream.method_mut() = parts.method.clone();
        *upstream.uri_mut() = target;
        *upstream.headers_mut() = std::mem::take(&mut parts.headers);
        let limit = self.limit_for(server);
        let sent = {
            let at = Instant::now() + limit;
            let mut deadline = Deadline::new(&self.deadlines);
            let mut send = std::pin::pin!(self.manager.client().send(upstream));
            std::future::poll_fn(|cx| {
                if let Poll::Ready(v) = send.as_mut().poll(cx) {
                    return Poll::Ready(Some(v));
                }
                if deadline.passed(at, cx) {
                    return Poll::Ready(None);
                }
                Poll::Pending
            })
            .await
        };
        let still_down = probe.map(|(probe, refusal)| {
            drop(probe);
            refusal
        });
        let response = match sent {
            Some(Ok(response)) => response.into_http(),
            Some(Err(e)) if e.is_connect() && still_down.is_some() => {
                // The probe found it still down: the down answer, with why.
                let mut refusal = still_down.expect("checked");
                refusal.reason = format!("{} (tried now: {e})", refusal.reason);
                return Err(refusal);
            }
            Some(Err(e)) if upload.as_ref().is_some_and(|u| u.failed.load(Ordering::Acquire)) => {
                // The local client's body broke (bad chunking, cut off): its
                // request is at fault, not the upstream.
                return Err(Refusal {
                    status: StatusCode::BAD_REQUEST,
                    reason: format!("gateway: the request body could not be read: {e}"),
                    retry_after: None,
                });
            }
            Some(Err(e)) => return Err(gateway::failure(&e)),
            None => {
                return Err(Refusal {
                    status: StatusCode::GATEWAY_TIMEOUT,
                    reason: format!("gateway: {} did not answer within {limit:?}", server.url),
                    retry_after: None,
                })
            }
        };
        if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            if let Some((_, local)) = switch {
                return self.switch(server, response, local, record);
            }
            // No switch was asked for (none forwarded): a 101 is the upstream's error.
            return Err(Refusal {
                status: StatusCode::BAD_GATEWAY,
                reason: format!(
                    "gateway: {} answered 101 Switching Protocols to a request that asked for no upgrade",
                    server.url
                ),
                retry_after: None,
            });
        }
        record.connection = response.connection_id();
        record.source = response.connection_source();
        let (mut head, body) = response.into_parts();
        let upstream_version = head.version;
        gateway::forward_response_headers(&mut head.headers, upstream_version, &self.via);
        head.version = http::Version::HTTP_11;
        let body = Upstream {
            body: body.map_err(BoxError::from),
            active: Some(active),
            limit,
            frames: 0,
            since: (0, Instant::now()),
            registered: Registered { deadlines: Arc::clone(&self.deadlines), key: None },
        };
        Ok(Some(Response::from_parts(head, body.boxed_unsync())))
    }

    /// The upstream switched protocols (`101`) for a local client that asked
    /// to: the 101 goes down with the upstream's fields (hop-by-hop ones
    /// replaced by the switch's own), and once hyper hands over the local
    /// connection the two are joined byte for byte until either side closes.
    fn switch(
        &self,
        server: &Declared,
        response: http::Response<crate::ResponseBody>,
        local: hyper::upgrade::OnUpgrade,
        record: &mut AccessRecord,
    ) -> Result<Option<Response<GatewayBody>>, Refusal> {
        record.connection = response.connection_id();
        record.source = response.connection_source();
        let mut head = http::Response::new(());
        *head.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        *head.headers_mut() = response.headers().clone();
        let protocol = response.headers().get(header::UPGRADE).cloned();
        let upstream = response.upgrade().map_err(|e| Refusal {
            status: StatusCode::BAD_GATEWAY,
            reason: format!("gateway: {}: {e}", server.url),
            retry_after: None,
        })?;
        let (mut head, ()) = head.into_parts();
        gateway::forward_response_headers(&mut head.headers, http::Version::HTTP_11, &self.via);
        let Some(protocol) = protocol else {
            return Err(Refusal {
                status: StatusCode::BAD_GATEWAY,
                reason: format!("gateway: {} switched protocols without naming one (no Upgrade)", server.url),
                retry_after: None,
            });
        };
        gateway::switch_fields(&mut head.headers, protocol);
        let url = server.url.clone();
        let (rt, idle) = (Arc::clone(&self.rt), self.idle_timeout);
        let spawned = self.rt.spawn(Box::pin(async move {
            let joined = match local.await {
                Ok(local) => join(&*rt, local, upstream, idle).await,
                Err(e) => Err(io::Error::other(e)),
            };
            match joined {
                Ok((up, down)) => {
                    tracing::debug!(target: "switchyard::gateway", "switched connection to {url} closed: {up} B up, {down} B down");
                }
                Err(e) => tracing::debug!(target: "switchyard::gateway", "switched connection to {url} ended: {e}"),
            }
        }));
        if spawned.is_none() {
            return Err(Refusal {
                status: StatusCode::SERVICE_UNAVAILABLE,
                reason: "gateway: no executor for the switched connection".into(),
                retry_after: None,
            });
        }
        Ok(Some(Response::from_parts(head, empty(StatusCode::SWITCHING_PROTOCOLS).into_body())))
    }

    /// `CONNECT host:port` to a declared server: a byte tunnel over a
    /// connection of its own (never pooled: its bytes are the client's, TLS
    /// included), acquired from the pool as an exclusive connection of the
    /// server's tunnel Address — routes raced (Happy Eyeballs) and
    /// remembered, through the client's resolver, connector hook, socket
    /// options and proxy rules, never TLS — within the server's response
    /// timeout. 200 once connected; 502 when no route answers.
    async fn tunnel(
        self: &Arc<Self>,
        server: &Declared,
        parts: http::request::Parts,
        body: Incoming,
        record: &mut AccessRecord,
        start: Instant,
    ) -> Result<Option<Response<GatewayBody>>, Refusal> {
        drop(body);
        record.server = Some(server.url.clone());
        let probe = self.admit_down(server)?;
        let limit = self.limit_for(server);
        let opened = self.manager.client().open_tunnel(&server.uri, Some(limit)).await;
        if let (Err(e), Some((probe, mut refusal))) = (&opened, probe) {
            drop(probe);
            refusal.reason = format!("{} (tried now: {e})", refusal.reason);
            return Err(refusal);
        }
        let opened = opened.map_err(|e| Refusal {
            status: if e.is_timeout() { StatusCode::GATEWAY_TIMEOUT } else { StatusCode::BAD_GATEWAY },
            reason: format!("gateway: no tunnel to {}: {e}", parts.uri),
            retry_after: None,
        })?;
        match &opened.route {
            Some(route) => {
                tracing::debug!(target: "switchyard::gateway", "tunnel to {} open via {route}", parts.uri)
            }
            None => tracing::debug!(target: "switchyard::gateway", "tunnel to {} open", parts.uri),
        }
        let request = Request::from_parts(parts, ());
        let mut record = record.clone();
        record.head_time = start.elapsed();
        record.source = Some(Source::New);
        record.connection = Some(opened.connection);
        let log = self.log.clone();
        let (rt, idle) = (Arc::clone(&self.rt), self.idle_timeout);
        let spawned = self.rt.spawn(Box::pin(async move {
            let (up, down) = match hyper::upgrade::on(request).await {
                Ok(local) => match join(&*rt, local, opened.io, idle).await {
                    Ok((up, down)) => {
                        record.complete = true;
                        (up, down)
                    }
                    Err(_) => (0, 0),
                },
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

    /// The response timeout for `server` (its own, or the gateway's).
    fn limit_for(&self, server: &Declared) -> Duration {
        self.manager
            .servers()
            .iter()
            .position(|d| std::ptr::eq(d, server))
            .map_or(gateway::DEFAULT_RESPONSE_TIMEOUT, |at| self.response_timeouts[at])
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A waker that counts its wakes.
    struct Count(AtomicUsize);
    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn counter() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (Arc::clone(&count), Waker::from(count))
    }

    #[test]
    fn deadlines_wake_what_is_due_once_and_stale_keys_touch_nothing() {
        let deadlines = Deadlines::new(Duration::from_secs(8));
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let (a, wa) = counter();
        let (b, wb) = counter();
        let (c, wc) = counter();
        let ka = deadlines.lock().insert(at(10), wa);
        let _kb = deadlines.lock().insert(at(20), wb);
        let kc = deadlines.lock().insert(at(30), wc);
        deadlines.lock().remove(kc); // its work ended first
        deadlines.sweep(at(25));
        let wakes = |c: &Count| c.0.load(Ordering::SeqCst);
        assert_eq!((wakes(&a), wakes(&b), wakes(&c)), (1, 1, 0));
        // Swept entries are gone: a later sweep wakes nobody again.
        deadlines.sweep(at(100));
        assert_eq!((wakes(&a), wakes(&b), wakes(&c)), (1, 1, 0));
        // A freed slot is reused; the old key (an earlier generation) of the
        // same slot removes nothing.
        let (d, wd) = counter();
        let kd = deadlines.lock().insert(at(40), wd);
        assert!(kd.0 == ka.0 || kd.0 == kc.0 || kd.0 == _kb.0, "a freed slot is reused");
        for stale in [ka, _kb, kc] {
            deadlines.lock().remove(stale);
        }
        deadlines.sweep(at(50));
        assert_eq!(wakes(&d), 1, "the reused slot's registration survived the stale removals");
        let waiting = deadlines.lock();
        assert!(waiting.slots.iter().all(|s| s.1.is_none()));
        assert_eq!(waiting.free.len(), waiting.slots.len());
    }
}
