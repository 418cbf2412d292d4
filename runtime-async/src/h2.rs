//! HTTP/2 through the `h2` crate: the bridge. One connection task per
//! connection, one stream per exchange. It only pumps `h2` and reports facts:
//! the server's bytes go through the core's [`Session`] (SETTINGS and GOAWAY
//! reach the pool as they are read), and each `h2` error is turned into a
//! [`StreamError`] fact (who reset what, with which code). The session decides
//! what a failure means for the call and the connection, when a head is too
//! large, when a 421 is retried and why the connection ended; the pool keeps
//! the one timer an HTTP/2 connection has (usable within the handshake
//! timeout) and ends it through [`end`] when a stream still waits on it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use h2::client::SendRequest;
use switchyard_core::http1::Http1Error;
use switchyard_core::http2::{ConnectionEnd, Peer, Report, Session, StreamError};
use switchyard_core::pool::{Progress, RequestFacts};
use switchyard_core::{CallId, CloseReason, ConnectionId, Reuse, Source};
use tokio::sync::{watch, Notify};

use switchyard_common::engine::EngineHost;
use switchyard_common::exchange::{Attempted, HTTP2_STRIPPED};
use switchyard_common::{BodyError, Error};

use crate::body::{Body, Kind};
use crate::runtime::{within, BoxFuture, Io};
use crate::shared::Shared;

type Ready = Option<Result<SendRequest<Bytes>, StreamError>>;

/// A shared HTTP/2 connection: its request sender, once the handshake is done.
#[derive(Clone)]
pub(crate) struct H2Handle {
    ready: watch::Receiver<Ready>,
    /// The connection's PING sender; taken while a PING is out.
    ping: Arc<std::sync::Mutex<Option<h2::PingPong>>>,
    /// The pool asked for a PING while the adaptive window's was out: that
    /// one's PONG answers it.
    pong_wanted: Arc<std::sync::atomic::AtomicBool>,
    /// The connection's rules (the core's): frames read, verdicts.
    session: Arc<std::sync::Mutex<Session>>,
    /// Ends the connection's task now (the pool's [`end`]).
    end: Arc<Notify>,
    /// The order streams open in.
    turns: Arc<Turns>,
    /// A leased handle's place in that order.
    turn: Option<Arc<Turn>>,
    /// How the pool found this connection for a leased stream.
    source: Source,
}

impl H2Handle {
    /// The handle for one stream the pool handed out (under the engine's
    /// lock, in the pool's order): it carries the stream's turn and how the
    /// pool found the connection.
    pub(crate) fn leased(&self, source: Source) -> H2Handle {
        H2Handle { turn: Some(Arc::new(self.turns.issue())), source, ..self.clone() }
    }

    fn session(&self) -> std::sync::MutexGuard<'_, Session> {
        self.session.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What an `h2` error says happened (facts only; the [`Session`] judges).
fn fact(e: &h2::Error) -> StreamError {
    let by = if e.is_remote() { Peer::Server } else { Peer::Us };
    match e.reason() {
        Some(reason) if e.is_go_away() => StreamError::GoAway { code: reason.into(), by },
        Some(reason) if e.is_reset() => StreamError::Reset { code: reason.into(), by },
        _ if e.is_io() => StreamError::Io { message: e.to_string() },
        _ => StreamError::Other { message: e.to_string() },
    }
}

/// Each name's and value's length, as the session counts a header list.
fn field_sizes(fields: &http::HeaderMap) -> impl Iterator<Item = (usize, usize)> + '_ {
    fields.iter().map(|(n, v)| (n.as_str().len(), v.len()))
}

/// How many times a stream yields to the tasks of the streams handed out
/// before it, so they open first. Only a caller that holds a send future
/// without polling it delays the ones behind it; past this they go ahead (the
/// order is a fairness rule, not a safety one). Yields, not a clock: a task
/// woken but not yet run gets its turn within one pass of the run queue.
const TURN_YIELDS: u32 = 64;

/// Streams open (HEADERS sent, stream ids assigned) in the order the pool
/// handed them out, not in the order the runtime happens to run the calls'
/// tasks. This matters when a server takes only so many more streams (nginx
/// sends GOAWAY after `keepalive_requests`): the calls it turned away were
/// handed the next connection's streams first, and must get its lowest
/// stream ids, or an executor that runs woken tasks last-in-first-out turns
/// the same calls away again on every connection.
#[derive(Debug)]
pub(crate) struct Turns {
    state: std::sync::Mutex<TurnState>,
    /// The turn now open to go (every earlier one has gone or given up).
    next: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct TurnState {
    issued: u64,
    next: u64,
    /// Turns done out of order (a later one that went ahead after waiting).
    done: std::collections::BTreeSet<u64>,
}

impl Turns {
    fn new() -> Turns {
        Turns { state: std::sync::Mutex::new(TurnState::default()), next: watch::channel(0).0 }
    }

    fn issue(self: &Arc<Turns>) -> Turn {
        let mut s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = s.issued;
        s.issued += 1;
        Turn { turns: Arc::clone(self), n, finished: std::sync::atomic::AtomicBool::new(false) }
    }

    fn finish(&self, n: u64) {
        let next = {
            let mut s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            s.done.insert(n);
            while s.done.first() == Some(&s.next) {
                s.done.pop_first();
                s.next += 1;
            }
            s.next
        };
        self.next.send_replace(next);
    }
}

/// One stream's place in [`Turns`]; finished when its HEADERS are queued, or
/// when it is dropped unused.
#[derive(Debug)]
pub(crate) struct Turn {
    turns: Arc<Turns>,
    n: u64,
    finished: std::sync::atomic::AtomicBool,
}

impl Turn {
    /// Waits (at most [`TURN_YIELDS`] yields) until every earlier stream
    /// has opened.
    async fn wait(&self) {
        let mine = self.n;
        if *self.turns.next.borrow() >= mine {
            return; // the common case: no receiver, no yield
        }
        let next = self.turns.next.subscribe();
        let mut yields = 0;
        std::future::poll_fn(|cx| {
            if *next.borrow() >= mine || yields >= TURN_YIELDS {
                return std::task::Poll::Ready(());
            }
            yields += 1;
            // Back of the run queue: the earlier streams' tasks run first.
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        })
        .await;
    }

    fn finish(&self) {
        if !self.finished.swap(true, Ordering::AcqRel) {
            self.turns.finish(self.n);
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A stream's read timed out: the peer may have stalled. The core decides
/// what follows (one PING, and no new exchanges if no PONG comes in time).
fn stream_stalled(shared: &Arc<Shared>, connection: ConnectionId) {
    shared.input(|st, now| {
        let _ = st.pool.stream_stalled(now, connection);
    });
}

/// Sends the PING the core asked for and reports its PONG. The core times it
/// out (`PoolConfig::pong_timeout`): a PING that cannot be sent, or a PONG
/// that never comes, is simply never reported.
pub(crate) fn ping(shared: &Arc<Shared>, connection: ConnectionId, handle: &H2Handle) {
    let Some(mut pong) = handle.ping.lock().ok().and_then(|mut p| p.take()) else {
        // Not ready yet, the connection is gone, or the adaptive window's
        // PING is out (its PONG will answer this one).
        handle.pong_wanted.store(true, Ordering::Release);
        return;
    };
    let (me, slot) = (Arc::clone(shared), Arc::clone(&handle.ping));
    let _detached = shared.rt.spawn(Box::pin(async move {
        if pong.ping(h2::Ping::opaque()).await.is_ok() {
            me.input(|st, now| {
                let _ = st.pool.pong(now, connection);
            });
        }
        if let Ok(mut s) = slot.lock() {
            *s = Some(pong);
        }
    }));
}

/// The server's frames as they arrive: the `h2` crate does not say when the
/// server's SETTINGS or GOAWAY arrive, so the connection's reads pass through
/// the core's [`Session`] (frame headers only), and each report goes to the
/// pool at once: the stream limit, and no new exchanges after GOAWAY.
struct FrameWatcher<T> {
    inner: T,
    session: Arc<std::sync::Mutex<Session>>,
    reports: Vec<Report>,
    on_report: Box<dyn Fn(Report) + Send>,
    /// DATA bytes read so far (the session's count).
    data: u64,
    /// The adaptive window's sampling, when on.
    adaptive: Option<Adaptive>,
}

/// The adaptive window's sampling, run as the connection reads: PINGs while
/// DATA flows, each PONG an estimate; larger windows go to the connection
/// task (which owns the `h2` connection) through `grow`.
struct Adaptive {
    estimator: switchyard_core::http2::WindowEstimator,
    /// This connection's clock origin (the estimator needs only relative times).
    origin: std::time::Instant,
    /// The connection's PING sender, shared with the pool's health PINGs.
    slot: Arc<std::sync::Mutex<Option<h2::PingPong>>>,
    /// Taken from `slot` while our PING is out.
    out: Option<h2::PingPong>,
    grow: watch::Sender<(u32, u32)>,
    pong_wanted: Arc<std::sync::atomic::AtomicBool>,
    /// Reports a PONG the pool asked for.
    on_pong: Box<dyn Fn() + Send>,
}

impl Adaptive {
    fn poll(&mut self, cx: &mut std::task::Context<'_>, data: u64) {
        let now = switchyard_core::Instant::from_elapsed(self.origin.elapsed());
        if let Some(out) = self.out.as_mut() {
            let std::task::Poll::Ready(pong) = out.poll_pong(cx) else { return };
            if let (Some(out), Ok(mut slot)) = (self.out.take(), self.slot.lock()) {
                *slot = Some(out);
            }
            if self.pong_wanted.swap(false, Ordering::AcqRel) {
                (self.on_pong)();
            }
            match pong {
                Ok(_) => {
                    if let Some(windows) = self.estimator.pong(now, data) {
                        let _ = self.grow.send(windows);
                    }
                }
                Err(_) => self.estimator.abandoned(),
            }
        }
        if !self.estimator.wants_sample(now, data) {
            return;
        }
        let Some(mut pinger) = self.slot.lock().ok().and_then(|mut s| s.take()) else {
            return; // the pool's PING is out, or the connection is not ready
        };
        if pinger.send_ping(h2::Ping::opaque()).is_ok() {
            self.estimator.started(now, data);
            // Registers this task for the PONG.
            if pinger.poll_pong(cx).is_pending() {
                self.out = Some(pinger);
                return;
            }
            self.estimator.abandoned();
        }
        if let Ok(mut slot) = self.slot.lock() {
            *slot = Some(pinger);
        }
    }
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for FrameWatcher<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let me = &mut *self;
        let fresh = &buf.filled()[before..];
        if !fresh.is_empty() {
            let mut session = me.session.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            session.read(fresh, &mut me.reports);
            me.data = session.data_bytes();
        }
        for report in me.reports.drain(..) {
            (me.on_report)(report);
        }
        if let Some(adaptive) = me.adaptive.as_mut() {
            adaptive.poll(cx, me.data);
        }
        polled
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for FrameWatcher<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Prepares the HTTP/2 connection on `io` without I/O: its handle now, and its
/// task (handshake, then driving the connection, reporting its end to the
/// core) for the caller to spawn once the lock is released.
///
/// A connection the server never makes usable (no SETTINGS, or a stream
/// limit of zero, within the handshake timeout) is the pool's to retire
/// ([`CloseReason::NeverUsable`]): it closes it, or, when a stream waits on
/// it, ends it through [`end`]. Response header blocks are bounded like
/// HTTP/1.1 heads (the same setting; the session checks them).
pub(crate) fn prepare(owner: &Shared, io: Io, connection: ConnectionId) -> (H2Handle, BoxFuture<()>) {
    let shared: Weak<Shared> = Weak::clone(&owner.me);
    let (tx, rx) = watch::channel(None);
    let ping = Arc::new(std::sync::Mutex::new(None));
    let ping_slot = Arc::clone(&ping);
    // The head limit bounds a response head and its trailers alike, as on
    // HTTP/1.1. `h2` cuts the fields of a header list over its own limit
    // silently for trailers, so its limit is set well above ours (3× plus
    // 8 KiB: no single field, literal or from the HPACK table, can hide a cut
    // below our limit) and the session checks ours: a block over it on the
    // wire, or a decoded list over it, fails that response.
    let limit = owner.settings.limits.max_head_size;
    let session = Arc::new(std::sync::Mutex::new(Session::new(limit)));
    let on_report = {
        let shared = Weak::clone(&shared);
        move |report: Report| {
            let Some(shared) = shared.upgrade() else { return };
            shared.input(|st, now| {
                let _ = match report {
                    // Every SETTINGS frame, with or without a limit: the first
                    // one lets the connection carry more than one stream.
                    Report::Settings { max_concurrent_streams } => {
                        st.pool.settings(now, connection, max_concurrent_streams)
                    }
                    Report::GoAway(goaway) => st.pool.goaway(now, connection, goaway),
                };
            });
        }
    };
    let windows = owner.settings.http2;
    let pong_wanted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let estimator =
        switchyard_core::http2::WindowEstimator::new(windows.stream_window, windows.connection_window);
    let (grow_tx, mut grow) = watch::channel(if windows.adaptive_window {
        estimator.windows()
    } else {
        (windows.stream_window, windows.connection_window)
    });
    let adaptive = windows.adaptive_window.then(|| {
        let shared = Weak::clone(&shared);
        Adaptive {
            estimator,
            origin: std::time::Instant::now(),
            slot: Arc::clone(&ping),
            out: None,
            grow: grow_tx,
            pong_wanted: Arc::clone(&pong_wanted),
            on_pong: Box::new(move || {
                if let Some(shared) = shared.upgrade() {
                    shared.input(|st, now| {
                        let _ = st.pool.pong(now, connection);
                    });
                }
            }),
        }
    });
    // Where the windows start: full size, or the protocol's when adaptive.
    let (stream_window, connection_window) = *grow.borrow();
    let io = FrameWatcher {
        inner: io,
        session: Arc::clone(&session),
        reports: Vec::new(),
        on_report: Box::new(on_report),
        data: 0,
        adaptive,
    };
    let header_limit = u32::try_from(limit.saturating_mul(3).saturating_add(8192)).unwrap_or(u32::MAX);
    let end = Arc::new(Notify::new());
    let (ends, judge) = (Arc::clone(&end), Arc::clone(&session));
    let job: BoxFuture<()> = Box::pin(async move {
        // Tells the core why the connection ended (the session's verdict),
        // while its streams are still waiting: the pool hears the
        // connection's own reason first.
        let report = |end: ConnectionEnd| {
            let reason = judge.lock().unwrap_or_else(std::sync::PoisonError::into_inner).ended(&end);
            if let Some(shared) = shared.upgrade() {
                shared.input(|st, now| {
                    // Already closed by the pool: nothing to report.
                    let _ = st.pool.connection_closed(now, connection, reason);
                });
            }
        };
        // One stream until the server's SETTINGS say more (the pool's rule too,
        // BEHAVIOUR §4): `h2` would otherwise assume no limit and send a burst
        // the server refuses.
        let handshake = h2::client::Builder::new()
            .initial_window_size(stream_window)
            .initial_connection_window_size(connection_window)
            .max_header_list_size(header_limit)
            .initial_max_send_streams(1)
            .handshake::<_, Bytes>(io);
        match handshake.await {
            Ok((send, mut conn)) => {
                if let (Some(p), Ok(mut slot)) = (conn.ping_pong(), ping_slot.lock()) {
                    *slot = Some(p);
                }
                let _ = tx.send(Some(Ok(send)));
                let mut conn = std::pin::pin!(conn);
                // Drives the connection until it ends, until every handle is
                // gone (the pool closed it and no stream holds it), or until
                // the pool ends it: then dropping the connection closes the
                // socket (and fails its streams), whoever still holds a sender.
                let tx = &tx;
                let ended = loop {
                    tokio::select! {
                        ended = conn.as_mut() => break Some(ended),
                        () = tx.closed() => break None,
                        () = ends.notified() => break None,
                        // The adaptive window grew (never without it: the
                        // sender is gone and this branch is off).
                        Ok(()) = grow.changed() => {
                            let (stream_window, connection_window) = *grow.borrow_and_update();
                            tracing::trace!(%connection, stream_window, connection_window, "HTTP/2 windows grow");
                            conn.set_target_window_size(connection_window);
                            if conn.set_initial_window_size(stream_window).is_err() {
                                tracing::debug!(%connection, "HTTP/2 window update refused");
                            }
                        }
                    }
                };
                report(match ended {
                    None => ConnectionEnd::Released,
                    Some(Ok(())) => ConnectionEnd::Closed,
                    Some(Err(e)) => ConnectionEnd::Failed(fact(&e)),
                });
                // Dropping the connection now fails its remaining streams.
            }
            Err(e) => {
                let e = fact(&e);
                let _ = tx.send(Some(Err(e.clone())));
                report(ConnectionEnd::Failed(e));
            }
        }
    });
    let turns = Arc::new(Turns::new());
    let source = Source::New;
    (H2Handle { ready: rx, ping, pong_wanted, session, end, turns, turn: None, source }, job)
}

/// The pool ends the connection now ([`PoolAction::Abort`](switchyard_core::PoolAction::Abort)):
/// the session hears why first, so its streams' failures say so.
pub(crate) fn end(handle: &H2Handle, reason: CloseReason) {
    handle.session().end(reason);
    handle.end.notify_one();
}

/// What one HTTP/2 exchange sends, and its bounds.
pub(crate) struct Request<'a> {
    pub(crate) parts: &'a http::request::Parts,
    pub(crate) body: &'a mut Body,
    pub(crate) facts: RequestFacts,
    pub(crate) limits: crate::shared::CallLimits,
}

/// Runs one exchange on a stream of the connection.
pub(crate) async fn exchange(
    shared: &Arc<Shared>,
    call: CallId,
    connection: ConnectionId,
    handle: H2Handle,
    req: Request<'_>,
) -> Result<http::Response<crate::ResponseBody>, Attempted> {
    let Request { parts, body, facts, limits } = req;
    // Every failure is the session's verdict on a fact.
    let failed = |stream: Option<u32>, e: &StreamError, progress: Progress| {
        Attempted::Failed(handle.session().stream_failed(stream, e, progress, facts))
    };
    // This stream's turn is given up however the exchange ends before its
    // HEADERS go (the handle's clones outlive it, in the body).
    let turn = handle.turn.clone();
    let _gives_up = TurnGuard(turn.clone());
    let mut ready = handle.ready.clone();
    let send = loop {
        if let Some(r) = ready.borrow_and_update().clone() {
            break r;
        }
        if ready.changed().await.is_err() {
            let message = "the HTTP/2 connection ended during its handshake".into();
            break Err(StreamError::Io { message });
        }
    };
    let send = send.map_err(|e| failed(None, &e, Progress::NothingWritten))?;
    // A stream the server never allows (a limit of zero that is never raised)
    // does not hold the call forever: the pool retires the connection at the
    // handshake timeout and ends it, which fails this wait.
    let mut send = send.ready().await.map_err(|e| failed(None, &fact(&e), Progress::NothingWritten))?;
    let mut request = http::Request::from_parts(parts.clone(), ());
    *request.version_mut() = http::Version::HTTP_2;
    for name in HTTP2_STRIPPED {
        request.headers_mut().remove(name);
    }
    // A stream declared with its length tells the server so, as on HTTP/1.1.
    if let (Kind::Stream(_), Some(n)) = (&body.kind, body.length) {
        request.headers_mut().entry(http::header::CONTENT_LENGTH).or_insert(n.into());
    }
    let end_of_stream = body.is_empty();
    if let Some(turn) = &turn {
        turn.wait().await;
    }
    let at = shared.now();
    shared.emit(move |l| l.request_headers_start(call, at));
    let opened = send.send_request(request, end_of_stream);
    if let Some(turn) = &turn {
        turn.finish();
    }
    let (response, mut stream) = opened.map_err(|e| failed(None, &fact(&e), Progress::NothingWritten))?;
    let stream_id = u32::from(stream.stream_id());
    let at = shared.now();
    shared.emit(move |l| switchyard_common::request_head_written(l, call, at, !end_of_stream));
    let written = |e: h2::Error| failed(Some(stream_id), &fact(&e), Progress::RequestWritten);
    if !end_of_stream {
        match &mut body.kind {
            Kind::Full(bytes) => stream.send_data(bytes.clone(), true).map_err(written)?,
            Kind::Stream(source) => {
                // A stream with a Content-Length is held to it, as on HTTP/1.1
                // (in the same words: the core's).
                let declared =
                    body.length.or_else(|| switchyard_common::exchange::declared_length(&parts.headers));
                let mut sent = 0u64;
                let mut failure = None;
                // The server stopped reading (its stream's send side closed,
                // as after an early answer): the rest is not sent.
                let mut refused = false;
                while let Some(next) = std::future::poll_fn(|cx| source.poll_chunk(cx)).await {
                    match next {
                        Ok(chunk) => {
                            sent += chunk.len() as u64;
                            if let Some(declared) = declared.filter(|d| sent > *d) {
                                failure = Some(Http1Error::BodyTooLong { declared }.to_string());
                                break;
                            }
                            // Back-pressure: a chunk goes out once the server's
                            // window has room, so at most one chunk past the
                            // window is buffered (h2 itself would queue the
                            // whole body).
                            if !window_open(&mut stream).await.map_err(written)? {
                                refused = true;
                                break;
                            }
                            stream.send_data(chunk, false).map_err(written)?;
                        }
                        Err(e) => {
                            failure = Some(format!("reading the request body failed: {e}"));
                            break;
                        }
                    }
                }
                if let Some(declared) = declared.filter(|d| failure.is_none() && sent != *d) {
                    failure = Some(Http1Error::BodyTooShort { declared, sent }.to_string());
                }
                if let Some(why) = failure {
                    // The caller's body failed: only this stream ends (as on
                    // HTTP/1.1, an invalid request, never retried).
                    stream.send_reset(h2::Reason::CANCEL);
                    let ours = StreamError::Reset { code: h2::Reason::CANCEL.into(), by: Peer::Us };
                    let reuse = handle.session().body_failed(&ours);
                    shared.input(|st, now| {
                        let _ = st.pool.exchange_finished(now, call, reuse);
                    });
                    return Err(Attempted::Fatal(Error::invalid_request(why)));
                }
                if !refused {
                    stream.send_data(Bytes::new(), true).map_err(written)?;
                }
            }
            Kind::Empty => {}
        }
        let (at, n) = (shared.now(), body.len().unwrap_or(0));
        shared.emit(move |l| switchyard_common::request_body_written(l, call, n, at));
    }
    let read_timeout = shared.settings.read_timeout;
    let response = match read_timeout {
        Some(d) => match within(&*shared.rt, d, response).await {
            Some(r) => r,
            None => {
                stream_stalled(shared, connection);
                return Err(failed(Some(stream_id), &StreamError::ReadTimeout, Progress::RequestWritten));
            }
        },
        None => response.await,
    };
    let response = response.map_err(written)?;
    handle
        .session()
        .response_head(stream_id, field_sizes(response.headers()), facts)
        .map_err(Attempted::Failed)?;
    // 421 on a connection the pool coalesced this call onto: the core's rule
    // retries the call on a fresh connection of its own (and stops coalescing
    // onto this one), when the request can be sent again. Anywhere else, or
    // when it cannot, the 421 is the caller's answer (RFC 9110 §15.5.20).
    if let Some(misdirected) = Session::misdirected(response.status().as_u16(), handle.source, facts) {
        return Err(Attempted::Failed(misdirected));
    }
    if response.status().is_server_error() {
        // Counts toward the route's ejection when the policy counts 5xx
        // answers (the core decides).
        shared.input(|st, now| {
            let _ = st.pool.server_error(now, call);
        });
    }
    let (at, status) = (shared.now(), response.status());
    shared.emit(move |l| l.response_headers_end(call, status, at));
    let (mut parts, recv) = response.into_parts();
    parts.extensions.insert(call);
    parts.extensions.insert(switchyard_common::Carrier { connection, source: handle.source });
    let deadline = match (limits.body_timeout.map(|d| std::time::Instant::now() + d), limits.call_deadline) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let body = H2Body {
        shared: Arc::clone(shared),
        call,
        connection,
        handle,
        stream_id,
        recv: Some(recv),
        trailers: None,
        deadline,
    };
    Ok(http::Response::from_parts(parts, crate::ResponseBody::h2(body)))
}

/// Finishes a stream's turn when the exchange is over before its HEADERS went.
struct TurnGuard(Option<Arc<Turn>>);

impl Drop for TurnGuard {
    fn drop(&mut self) {
        if let Some(turn) = &self.0 {
            turn.finish();
        }
    }
}

/// Waits until the stream may send at least one byte (`false`: its send side
/// closed, the server wants no more).
async fn window_open(stream: &mut h2::SendStream<Bytes>) -> Result<bool, h2::Error> {
    if stream.capacity() > 0 {
        return Ok(true);
    }
    stream.reserve_capacity(1);
    loop {
        match std::future::poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(Ok(0)) => {}
            Some(Ok(_)) => return Ok(true),
            Some(Err(e)) => return Err(e),
            None => return Ok(false),
        }
    }
}

/// An HTTP/2 response body: a stream's DATA frames, with flow-control capacity
/// returned as they are consumed.
pub(crate) struct H2Body {
    shared: Arc<Shared>,
    call: CallId,
    connection: ConnectionId,
    /// Held while the body streams: the connection task runs while any
    /// handle is alive.
    handle: H2Handle,
    stream_id: u32,
    recv: Option<h2::RecvStream>,
    pub(crate) trailers: Option<http::HeaderMap>,
    /// When the whole body must have arrived (the body timeout).
    deadline: Option<std::time::Instant>,
}

impl H2Body {
    pub(crate) async fn chunk(&mut self) -> Result<Option<Bytes>, BodyError> {
        let read_timeout = self.shared.settings.read_timeout;
        let limit = crate::h1::bound(read_timeout, self.deadline);
        let Some(recv) = self.recv.as_mut() else { return Ok(None) };
        let next = match limit {
            Some(d) => match within(&*self.shared.rt, d, recv.data()).await {
                Some(n) => n,
                None => {
                    // The body timeout says nothing about the connection; a
                    // read timeout may mean a stalled peer (the pool's PING
                    // decides).
                    let body_deadline = self.deadline.is_some_and(|t| std::time::Instant::now() >= t);
                    if !body_deadline {
                        stream_stalled(&self.shared, self.connection);
                    }
                    let reuse = self.handle.session().body_failed(&StreamError::ReadTimeout);
                    self.end(reuse);
                    return Err(BodyError::Timeout);
                }
            },
            None => recv.data().await,
        };
        match next {
            Some(Ok(data)) => {
                let _ = recv.flow_control().release_capacity(data.len());
                Ok(Some(data))
            }
            Some(Err(e)) => Err(self.stream_failed(&e)),
            None => match recv.trailers().await {
                Ok(trailers) => {
                    // Over the head limit on the wire, or decoded: a typed
                    // error, never fields cut silently. The connection is fine.
                    let fits = {
                        let mut session = self.handle.session();
                        let fields = trailers.iter().flat_map(field_sizes);
                        session.trailers_fit(self.stream_id, fields).then_some(()).ok_or(session.head_limit())
                    };
                    if let Err(limit) = fits {
                        self.end(Reuse::Reusable);
                        return Err(BodyError::TrailersTooLarge { limit });
                    }
                    self.trailers = trailers;
                    Ok(None)
                }
                Err(e) => Err(self.stream_failed(&e)),
            },
        }
    }

    /// The stream failed mid-body or in its trailers: ends the exchange with
    /// what the session says that means for the connection.
    fn stream_failed(&mut self, e: &h2::Error) -> BodyError {
        let reuse = self.handle.session().body_failed(&fact(e));
        self.end(reuse);
        BodyError::Http2(e.to_string())
    }

    /// The body ended: the connection's stream is free again.
    pub(crate) fn finish(&mut self) {
        self.end(Reuse::Reusable);
    }

    /// The stream is over: the connection's stream is free again.
    fn end(&mut self, reuse: Reuse) {
        if self.recv.take().is_some() {
            let call = self.call;
            self.shared.input(|st, now| {
                let _ = st.pool.exchange_finished(now, call, reuse);
            });
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.recv.is_none()
    }
}

impl Drop for H2Body {
    fn drop(&mut self) {
        // Dropping the stream resets it (CANCEL, which we asked for): the
        // connection stays usable.
        self.end(Reuse::Reusable);
    }
}
