//! HTTP/2 through the `h2` crate: one connection task per connection; streams
//! for exchanges; SETTINGS (max concurrent streams), GOAWAY, REFUSED_STREAM and
//! other resets reported to the core.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use h2::client::SendRequest;
use switchyard_core::http2::{FrameNote, FrameScanner};
use switchyard_core::pool::{ExchangeFailure, ExchangeFailureKind, Progress, RequestFacts};
use switchyard_core::{CallId, CloseReason, ConnectionId, Reuse};
use tokio::sync::watch;

use switchyard_common::engine::EngineHost;
use switchyard_common::exchange::{Attempted, HTTP2_STRIPPED};
use switchyard_common::{BodyError, Error};

use crate::body::{Body, Kind};
use crate::driver::Shared;
use crate::runtime::{within, BoxFuture, Io};

type Ready = Option<Result<SendRequest<Bytes>, String>>;

/// A shared HTTP/2 connection: its request sender, once the handshake is done.
#[derive(Clone)]
pub(crate) struct H2Handle {
    ready: watch::Receiver<Ready>,
    /// The connection's PING sender; taken while a PING is out.
    ping: Arc<std::sync::Mutex<Option<h2::PingPong>>>,
    /// The pool asked for a PING while the adaptive window's was out: that
    /// one's PONG answers it.
    pong_wanted: Arc<std::sync::atomic::AtomicBool>,
    /// Set when the connection was retired as never usable, so its streams'
    /// failures say so rather than "broken pipe".
    never_usable: Arc<std::sync::atomic::AtomicBool>,
    /// Streams whose response head or trailers passed the head limit on the
    /// wire (the frame scanner's notes): their response fails.
    oversized: Oversized,
    /// The order streams open in.
    turns: Arc<Turns>,
    /// A leased handle's place in that order.
    turn: Option<Arc<Turn>>,
}

impl H2Handle {
    /// The handle for one stream the pool handed out (under the engine's
    /// lock, in the pool's order): it carries the stream's turn.
    pub(crate) fn leased(&self) -> H2Handle {
        H2Handle { turn: Some(Arc::new(self.turns.issue())), ..self.clone() }
    }
}

/// Streams with a header block over the limit, as the frame scanner saw
/// them (bounded: the oldest go first past 1,024).
#[derive(Clone, Debug, Default)]
struct Oversized(Arc<std::sync::Mutex<std::collections::BTreeSet<u32>>>);

impl Oversized {
    fn note(&self, stream_id: u32) {
        if let Ok(mut set) = self.0.lock() {
            set.insert(stream_id);
            while set.len() > 1024 {
                set.pop_first();
            }
        }
    }

    /// Whether `stream` had a header block over the limit (forgotten once asked).
    fn take(&self, stream: h2::StreamId) -> bool {
        self.0.lock().is_ok_and(|mut set| set.remove(&u32::from(stream)))
    }
}

/// A header list's size as HTTP/2 counts it (RFC 9113 §6.5.2: each field's
/// name and value, plus 32), `extra` for pseudo-fields.
fn header_list_size(fields: &http::HeaderMap, extra: usize) -> usize {
    fields.iter().map(|(n, v)| n.as_str().len() + v.len() + 32).sum::<usize>() + extra
}

/// How long a stream waits for the streams handed out before it to open.
/// Only a caller that holds a send future without polling it delays the ones
/// behind it; past this they go ahead (the order is a fairness rule, not a
/// safety one).
const TURN_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

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
    /// Waits (at most [`TURN_WAIT`]) until every earlier stream has opened.
    async fn wait(&self, rt: &dyn crate::runtime::Runtime) {
        let mine = self.n;
        if *self.turns.next.borrow() >= mine {
            return; // the common case: no timer, no receiver
        }
        let mut next = self.turns.next.subscribe();
        let _ = within(rt, TURN_WAIT, async move {
            while *next.borrow_and_update() < mine {
                if next.changed().await.is_err() {
                    return;
                }
            }
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
/// the core's [`FrameScanner`] (frame headers only), and each note goes to the
/// pool at once: the stream limit, and no new exchanges after GOAWAY.
struct FrameWatcher<T> {
    inner: T,
    scanner: FrameScanner,
    notes: Vec<FrameNote>,
    on_note: Box<dyn Fn(FrameNote) + Send>,
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
        me.scanner.feed(&buf.filled()[before..], &mut me.notes);
        for note in me.notes.drain(..) {
            (me.on_note)(note);
        }
        if let Some(adaptive) = me.adaptive.as_mut() {
            adaptive.poll(cx, me.scanner.data_bytes());
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
/// A connection the server never makes usable is retired once the handshake
/// timeout has passed since it started: no SETTINGS frame by then, or a stream
/// limit still at zero ([`CloseReason::NeverUsable`]). Its streams fail and
/// their calls move on per the retry rules; it never sits idle in the pool.
/// Response header blocks are bounded like HTTP/1.1 heads (the same setting).
pub(crate) fn prepare(owner: &Shared, io: Io, connection: ConnectionId) -> (H2Handle, BoxFuture<()>) {
    let shared: Weak<Shared> = Weak::clone(&owner.me);
    let (tx, rx) = watch::channel(None);
    let ping = Arc::new(std::sync::Mutex::new(None));
    let ping_slot = Arc::clone(&ping);
    let settings_seen = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let oversized = Oversized::default();
    let on_note = {
        let (shared, seen, oversized) = (Weak::clone(&shared), Arc::clone(&settings_seen), oversized.clone());
        move |note: FrameNote| {
            if matches!(note, FrameNote::Settings { .. }) {
                seen.store(true, Ordering::Release);
            }
            if let FrameNote::HeaderBlockTooLarge { stream_id } = note {
                oversized.note(stream_id);
                return;
            }
            let Some(shared) = shared.upgrade() else { return };
            match note {
                // Every SETTINGS frame, with or without a limit: the first one
                // lets the connection carry more than one stream.
                FrameNote::Settings { max_concurrent_streams } => shared.input(|st, now| {
                    let _ = st.pool.settings(now, connection, max_concurrent_streams);
                }),
                FrameNote::GoAway { .. } => shared.input(|st, now| {
                    let _ = st.pool.goaway(now, connection);
                }),
                FrameNote::HeaderBlockTooLarge { .. } => {}
            }
        }
    };
    // The head limit bounds a response head and its trailers alike, as on
    // HTTP/1.1. `h2` cuts the fields of a header list over its own limit
    // silently for trailers, so its limit is set well above ours (3× plus
    // 8 KiB: no single field, literal or from the HPACK table, can hide a cut
    // below our limit) and ours is checked here: a block over it on the wire
    // (the scanner), or a decoded list over it, fails that response.
    let limit = owner.settings.limits.max_head_size;
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
        scanner: FrameScanner::with_header_block_limit(limit),
        notes: Vec::new(),
        on_note: Box::new(on_note),
        adaptive,
    };
    let header_limit = u32::try_from(limit.saturating_mul(3).saturating_add(8192)).unwrap_or(u32::MAX);
    let usable_by = std::time::Instant::now() + owner.settings.handshake_timeout;
    let never_usable = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let never_usable_flag = Arc::clone(&never_usable);
    let rt = Arc::clone(&owner.rt);
    let job: BoxFuture<()> = Box::pin(async move {
        // Tells the core why the connection ended, while its streams are still
        // waiting: the pool hears the connection's own reason first.
        let report = |reason: CloseReason| {
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
                let probe = send.clone();
                let _ = tx.send(Some(Ok(send)));
                let mut conn = std::pin::pin!(conn);
                // Drives the connection until it ends, or until every handle is
                // gone (the pool closed it and no stream holds it): then dropping
                // the connection closes the socket, whoever still holds a sender.
                let tx = &tx;
                let mut drive = std::pin::pin!(async {
                    loop {
                        tokio::select! {
                            ended = conn.as_mut() => return Some(ended),
                            () = tx.closed() => return None,
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
                    }
                });
                let outcome = match crate::runtime::until(&*rt, usable_by, drive.as_mut()).await {
                    Some(done) => done.map(Ok).unwrap_or(Err(false)),
                    None if !settings_seen.load(Ordering::Acquire) => Err(true),
                    None if probe.current_max_send_streams() == 0 => Err(true),
                    None => {
                        drop(probe);
                        drive.await.map(Ok).unwrap_or(Err(false))
                    }
                };
                let reason = match outcome {
                    Err(true) => {
                        tracing::debug!(%connection, "HTTP/2 connection not usable within the handshake timeout");
                        never_usable_flag.store(true, Ordering::Release);
                        CloseReason::NeverUsable
                    }
                    // Closed by the pool: it knows why already.
                    Err(false) => CloseReason::Shutdown,
                    Ok(Ok(())) => CloseReason::ServerClose,
                    Ok(Err(e)) if e.is_go_away() => CloseReason::GoAway,
                    Ok(Err(_)) => CloseReason::Failure,
                };
                report(reason);
                // Dropping the connection now fails its remaining streams.
            }
            Err(e) => {
                let _ = tx.send(Some(Err(e.to_string())));
                report(CloseReason::Failure);
            }
        }
    });
    let turns = Arc::new(Turns::new());
    (H2Handle { ready: rx, ping, pong_wanted, never_usable, oversized, turns, turn: None }, job)
}

/// How an `h2` error fails the exchange. (A failure before the server's
/// first SETTINGS is classified by the core: `Pool::exchange_failed`.)
fn failure(e: &h2::Error, progress: Progress, facts: RequestFacts) -> ExchangeFailure {
    let kind = if e.reason() == Some(h2::Reason::REFUSED_STREAM) {
        ExchangeFailureKind::RefusedStream
    } else if e.is_go_away() && e.is_remote() && e.reason() == Some(h2::Reason::NO_ERROR) {
        // Streams above the GOAWAY's last-stream-id were not processed.
        ExchangeFailureKind::GoAwayUnprocessed
    } else if e.is_io() {
        ExchangeFailureKind::Io { kind: std::io::ErrorKind::ConnectionReset, message: e.to_string() }
    } else if let (true, Some(reason)) = (e.is_reset(), e.reason()) {
        ExchangeFailureKind::StreamReset { code: u32::from(reason) }
    } else {
        ExchangeFailureKind::Protocol { message: e.to_string() }
    };
    ExchangeFailure { kind, progress, request: facts }
}

fn io_failure(message: String, facts: RequestFacts) -> Attempted {
    Attempted::Failed(ExchangeFailure {
        kind: ExchangeFailureKind::Io { kind: std::io::ErrorKind::ConnectionAborted, message },
        progress: Progress::NothingWritten,
        request: facts,
    })
}

/// What one HTTP/2 exchange sends, and its bounds.
pub(crate) struct Request<'a> {
    pub(crate) parts: &'a http::request::Parts,
    pub(crate) body: &'a mut Body,
    pub(crate) facts: RequestFacts,
    pub(crate) limits: crate::client::CallLimits,
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
            break Err("the HTTP/2 connection ended during its handshake".into());
        }
    };
    let send = send.map_err(|e| io_failure(e, facts))?;
    // A stream the server never allows (a limit of zero that is never raised)
    // must not hold the call forever: the handshake timeout bounds the wait.
    let mut send = match within(&*shared.rt, shared.settings.handshake_timeout, send.ready()).await {
        Some(ready) => ready.map_err(|e| Attempted::Failed(failure(&e, Progress::NothingWritten, facts)))?,
        None => {
            return Err(io_failure(
                "the HTTP/2 connection allowed no stream within the handshake timeout".into(),
                facts,
            ))
        }
    };
    let mut request = http::Request::from_parts(parts.clone(), ());
    *request.version_mut() = http::Version::HTTP_2;
    for name in HTTP2_STRIPPED {
        request.headers_mut().remove(name);
    }
    let end_of_stream = body.is_empty();
    if let Some(turn) = &turn {
        turn.wait(&*shared.rt).await;
    }
    let at = shared.now();
    shared.emit(move |l| l.request_headers_start(call, at));
    let opened = send.send_request(request, end_of_stream);
    if let Some(turn) = &turn {
        turn.finish();
    }
    let (response, mut stream) =
        opened.map_err(|e| Attempted::Failed(failure(&e, Progress::NothingWritten, facts)))?;
    let at = shared.now();
    shared.emit(move |l| switchyard_common::request_head_written(l, call, at, !end_of_stream));
    let never_usable = Arc::clone(&handle.never_usable);
    let written = |e: h2::Error| {
        let mut f = failure(&e, Progress::RequestWritten, facts);
        if never_usable.load(Ordering::Acquire) {
            f.kind = ExchangeFailureKind::Io {
                kind: std::io::ErrorKind::ConnectionAborted,
                message: "the server never made the HTTP/2 connection usable (no SETTINGS, or no stream \
                          allowed, within the handshake timeout)"
                    .into(),
            };
        }
        Attempted::Failed(f)
    };
    if !end_of_stream {
        match &mut body.kind {
            Kind::Full(bytes) => stream.send_data(bytes.clone(), true).map_err(written)?,
            Kind::Stream(source) => {
                while let Some(next) = std::future::poll_fn(|cx| source.poll_chunk(cx)).await {
                    match next {
                        Ok(chunk) => stream.send_data(chunk, false).map_err(written)?,
                        Err(e) => {
                            // The caller's body failed: only this stream ends (as on
                            // HTTP/1.1, an invalid request, never retried).
                            stream.send_reset(h2::Reason::CANCEL);
                            shared.input(|st, now| {
                                let _ = st.pool.exchange_finished(now, call, Reuse::Reusable);
                            });
                            return Err(Attempted::Fatal(Error::invalid_request(format!(
                                "reading the request body failed: {e}"
                            ))));
                        }
                    }
                }
                stream.send_data(Bytes::new(), true).map_err(written)?;
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
                return Err(Attempted::Failed(ExchangeFailure {
                    kind: ExchangeFailureKind::Timeout,
                    progress: Progress::RequestWritten,
                    request: facts,
                }));
            }
        },
        None => response.await,
    };
    let response = response.map_err(written)?;
    let limit = shared.settings.limits.max_head_size;
    let stream_id = stream.stream_id();
    // `:status` and its 3 digits count as a field too.
    if handle.oversized.take(stream_id) || header_list_size(response.headers(), 7 + 3 + 32) > limit {
        return Err(Attempted::Failed(ExchangeFailure {
            kind: ExchangeFailureKind::Protocol {
                message: format!("response head larger than {limit} bytes"),
            },
            progress: Progress::ResponseStarted,
            request: facts,
        }));
    }
    // 421 on a connection coalesced from another host: the core's rule retries
    // the call on a fresh connection of its own (and stops coalescing onto this
    // one), when the request can be sent again. Anywhere else, or when it cannot,
    // the 421 is the caller's answer (RFC 9110 §15.5.20).
    if response.status() == http::StatusCode::MISDIRECTED_REQUEST && facts.body_replayable {
        let coalesced = shared.lock_state().pool.connection(connection).is_some_and(|c| {
            !c.address().host().to_string().eq_ignore_ascii_case(parts.uri.host().unwrap_or_default())
        });
        if coalesced {
            return Err(Attempted::Failed(ExchangeFailure {
                kind: ExchangeFailureKind::Misdirected,
                progress: Progress::ResponseStarted,
                request: facts,
            }));
        }
    }
    let (at, status) = (shared.now(), response.status());
    shared.emit(move |l| l.response_headers_end(call, status, at));
    let (mut parts, recv) = response.into_parts();
    parts.extensions.insert(call);
    parts.extensions.insert(connection);
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
        limit,
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

/// An HTTP/2 response body: a stream's DATA frames, with flow-control capacity
/// returned as they are consumed.
pub(crate) struct H2Body {
    shared: Arc<Shared>,
    call: CallId,
    connection: ConnectionId,
    /// Held while the body streams: the connection task runs while any
    /// handle is alive.
    handle: H2Handle,
    stream_id: h2::StreamId,
    /// The head limit, which bounds the trailers too.
    limit: usize,
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
                    // read timeout may mean a stalled peer.
                    let body_deadline = self.deadline.is_some_and(|t| std::time::Instant::now() >= t);
                    if !body_deadline {
                        stream_stalled(&self.shared, self.connection);
                    }
                    self.end(Reuse::Reusable);
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
                    let over = self.handle.oversized.take(self.stream_id)
                        || trailers.as_ref().is_some_and(|t| header_list_size(t, 0) > self.limit);
                    if over {
                        self.end(Reuse::Reusable);
                        return Err(BodyError::TrailersTooLarge { limit: self.limit });
                    }
                    self.trailers = trailers;
                    Ok(None)
                }
                Err(e) => Err(self.stream_failed(&e)),
            },
        }
    }

    /// The stream failed mid-body or in its trailers: ends the exchange with
    /// what that says about the connection.
    fn stream_failed(&mut self, e: &h2::Error) -> BodyError {
        // The peer reset the stream (not our own CANCEL): what state it left
        // the connection in is unknown, so it takes no new exchanges
        // (BEHAVIOUR: StreamReset). A broken connection fails.
        let reuse = if e.is_reset() && e.is_remote() && e.reason() != Some(h2::Reason::CANCEL) {
            Reuse::Retire(CloseReason::StreamReset)
        } else if e.is_io() {
            Reuse::Retire(CloseReason::Failure)
        } else {
            Reuse::Reusable
        };
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
