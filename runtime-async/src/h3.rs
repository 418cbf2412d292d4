//! HTTP/3: QUIC connections as pool connections. The protocol is
//! [`H3Conn`]'s (quinn-proto's QUIC and the core's HTTP/3 framing, QPACK and
//! message rules); here a UDP socket is pumped and each call waits on its
//! stream, as HTTP/2's pump does with a TCP stream.
//!
//! A QUIC attempt is the pool's connect attempt: "connected" when the
//! server's first datagram came back (the QUIC counterpart of TCP's
//! SYN-ACK, so Happy Eyeballs races families on it), "established" when
//! QUIC's handshake, TLS included, is over. The installed connection is one
//! task (the pump) and a shared state behind a lock; calls open streams on
//! it, in the pool's order, and wait for their events.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Instant as StdInstant;

use bytes::{Bytes, BytesMut};
use switchyard_common::engine::EngineHost;
use switchyard_common::exchange::Attempted;
use switchyard_common::h2::{tell_pool, wake_all, PoolNote, Wakeups};
use switchyard_common::h3::{H3Config, H3Conn, H3Event, H3Failure, H3OpenError, H3SendRoom, ResponseEvent};
use switchyard_common::{BodyError, Error};
use switchyard_core::http2::{Session, StreamLimits};
use switchyard_core::pool::{ExchangeFailure, ExchangeFailureKind, Progress, RequestFacts};
use switchyard_core::{CallId, CloseReason, ConnectError, ConnectionId, Instant, Reuse, Route, Source};

use crate::body::{Body, Kind};
use crate::runtime::{BoxFuture, Runtime, UdpIo};
use crate::shared::Shared;

/// The largest datagram we take (QUIC's own bound on a UDP payload).
const DATAGRAM_MAX: usize = 65_527;

/// How many datagrams the pump takes in one turn before it lets the calls
/// it woke run.
const TURN_DATAGRAMS: usize = 64;

/// A QUIC connection on its way up: its socket and state, carried as the
/// attempt's socket until the pool installs it.
pub(crate) struct Quic {
    wire: Wire,
    conn: H3Conn,
}

/// The UDP side of one connection: the socket, the datagrams QUIC gave that
/// the socket has not taken yet, the receive buffer, and QUIC's timer. Its
/// system calls need no lock: the installed connection's pump fills and
/// drains it under the connection's lock and sends and receives outside it.
struct Wire {
    udp: Box<dyn UdpIo>,
    rt: Arc<dyn Runtime>,
    /// Datagrams to send, in order.
    queue: VecDeque<Vec<u8>>,
    /// Sent datagrams' buffers, for the next ones.
    spare: Vec<Vec<u8>>,
    rx: Vec<u8>,
    timer: Option<(StdInstant, BoxFuture<()>)>,
}

impl Wire {
    /// Takes every datagram QUIC has to send now.
    fn fill(&mut self, conn: &mut H3Conn) {
        loop {
            let mut buf = self.spare.pop().unwrap_or_else(|| Vec::with_capacity(1500));
            if conn.poll_transmit(StdInstant::now(), &mut buf).is_some() {
                self.queue.push_back(buf);
            } else {
                self.spare.push(buf);
                return;
            }
        }
    }

    /// Sends what is queued, as far as the socket takes it.
    ///
    /// # Errors
    /// The system reported an earlier datagram's ICMP "port unreachable"
    /// (on whichever call comes next).
    fn send(&mut self, cx: &mut Context<'_>) -> Result<(), std::io::Error> {
        while let Some(datagram) = self.queue.front() {
            match self.udp.poll_send(cx, datagram) {
                Poll::Ready(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Err(e),
                // A datagram the system would not send is lost, as on the
                // path: QUIC's loss recovery sends its content again.
                Poll::Ready(_) => {
                    let mut sent = self.queue.pop_front().unwrap_or_default();
                    sent.clear();
                    self.spare.push(sent);
                }
                Poll::Pending => break,
            }
        }
        Ok(())
    }

    /// Receives what arrived, at most [`TURN_DATAGRAMS`], into `inbox`.
    ///
    /// # Errors
    /// ICMP "port unreachable", as [`Wire::send`].
    fn recv(&mut self, cx: &mut Context<'_>, inbox: &mut Vec<BytesMut>) -> Result<(), std::io::Error> {
        for _ in 0..TURN_DATAGRAMS {
            match self.udp.poll_recv(cx, &mut self.rx) {
                Poll::Ready(Ok(n)) => inbox.push(BytesMut::from(&self.rx[..n])),
                Poll::Ready(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Err(e),
                // Other receive errors (a message too long, a network
                // down) lose at most a datagram: QUIC's timers go on, and a
                // lasting error ends in its idle timeout, never a busy loop.
                Poll::Ready(Err(_)) | Poll::Pending => break,
            }
        }
        Ok(())
    }

    /// Whether QUIC's timer, due `at`, has fired (or must be looked at again:
    /// it fired early for a deadline that moved later).
    fn timer_due(&mut self, at: Option<StdInstant>, cx: &mut Context<'_>) -> bool {
        let Some(at) = at else {
            self.timer = None;
            return false;
        };
        // QUIC's deadline moves with nearly every packet: a timer is made
        // anew only when it must fire earlier; one set for an earlier
        // deadline that has since moved later fires early and is then set
        // again (no timer per packet).
        if self.timer.as_ref().is_none_or(|(t, _)| at < *t) {
            self.timer = Some((at, self.rt.sleep_until(at)));
        }
        let fired = self.timer.as_mut().is_some_and(|(_, sleep)| sleep.as_mut().poll(cx).is_ready());
        if fired || StdInstant::now() >= at {
            self.timer = None;
            return true;
        }
        false
    }
}

/// The failure for a UDP port nothing listens on.
fn refused(conn: &H3Conn, e: &std::io::Error) -> ConnectError {
    ConnectError::Io {
        kind: std::io::ErrorKind::ConnectionRefused,
        message: format!("nothing answers QUIC (UDP) at {}: {e}", conn.remote()),
    }
}

/// Starts a QUIC attempt on `route` and pumps it until the server's first
/// datagram comes back (the attempt is then "connected").
pub(crate) async fn connect(shared: &Shared, route: &Route) -> Result<Quic, ConnectError> {
    if *route.proxy() != switchyard_core::Proxy::Direct {
        return Err(ConnectError::Proxy {
            message: format!(
                "HTTP/3 (QUIC) cannot go through proxy {}: QUIC goes to the origin itself",
                route.socket_addr()
            ),
        });
    }
    let peer = route.socket_addr();
    let udp = shared.rt.connect_udp(peer).map_err(|e| ConnectError::from_io(&e))?;
    let tls = shared.settings.tls.get(&[switchyard_core::Protocol::Http3]);
    let name = route.address().host().to_string();
    let config = H3Config {
        max_field_section_size: shared.settings.limits.max_head_size as u64,
        ..H3Config::default()
    };
    let conn = H3Conn::connect(StdInstant::now(), peer, &name, &tls, config).map_err(|e| {
        ConnectError::Tls { kind: switchyard_core::TlsFailure::Protocol, message: e.to_string() }
    })?;
    let wire = Wire {
        udp,
        rt: Arc::clone(&shared.rt),
        queue: VecDeque::new(),
        spare: Vec::new(),
        rx: vec![0; DATAGRAM_MAX],
        timer: None,
    };
    let mut quic = Quic { wire, conn };
    drive_until(&mut quic, H3Conn::heard_from_server).await?;
    Ok(quic)
}

/// Pumps the handshake to its end: the protocol (`h3`) and the verified
/// certificate's facts.
pub(crate) async fn handshake(
    mut quic: Quic,
    route: &Route,
    verification: switchyard_common::tls::Verification,
) -> Result<(Quic, switchyard_core::TlsFacts), ConnectError> {
    drive_until(&mut quic, H3Conn::is_connected).await?;
    let chain = quic.conn.peer_certificates();
    let leaf = chain.as_ref().and_then(|c| c.first());
    let facts = switchyard_common::tls::leaf_facts(leaf, verification, Some(route.socket_addr().ip()));
    Ok((quic, facts))
}

/// Pumps a connection that is not installed yet until `done`, or its end.
async fn drive_until(quic: &mut Quic, done: fn(&H3Conn) -> bool) -> Result<(), ConnectError> {
    let mut inbox = Vec::new();
    std::future::poll_fn(|cx| loop {
        if let Some(e) = quic.conn.connect_error() {
            return Poll::Ready(Err(e));
        }
        if done(&quic.conn) {
            return Poll::Ready(Ok(()));
        }
        let (wire, conn) = (&mut quic.wire, &mut quic.conn);
        wire.fill(conn);
        if let Err(e) = wire.send(cx).and_then(|()| wire.recv(cx, &mut inbox)) {
            return Poll::Ready(Err(refused(conn, &e)));
        }
        let arrived = !inbox.is_empty();
        for datagram in inbox.drain(..) {
            conn.handle_datagram(StdInstant::now(), conn.remote(), datagram);
        }
        let fired = !arrived && wire.timer_due(conn.poll_timeout(), cx);
        if fired {
            conn.handle_timeout(StdInstant::now());
        }
        if !arrived && !fired {
            return Poll::Pending;
        }
    })
    .await
}

/// One stream's events as the pump handed them over, for its call.
#[derive(Default)]
struct Slot {
    events: VecDeque<ResponseEvent>,
    failure: Option<H3Failure>,
    /// The call waiting for its head or body.
    waker: Option<Waker>,
    /// The call waiting to send more of its body.
    sender: Option<Waker>,
}

/// What the connection's lock guards.
struct State {
    conn: H3Conn,
    slots: BTreeMap<u64, Slot>,
    /// Calls waiting for stream credit (the server's MAX_STREAMS).
    open_waiters: Vec<Waker>,
    pump: Option<Waker>,
    notes: Vec<PoolNote>,
    /// A PING is out for the pool: the next datagram answers it.
    ping: bool,
    /// Every handle is gone: the connection closes and the pump ends.
    released: bool,
    /// A call changed what QUIC has to send (a stream opened, body sent,
    /// data taken, a stream cancelled): the pump is woken once the lock is
    /// released. A call that only looked is not worth a pump turn.
    pump_needed: bool,
    closed_reported: bool,
}

impl State {
    /// Hands the connection's events to their calls, and what the pool must
    /// hear to the notes.
    fn dispatch(&mut self, w: &mut Wakeups) {
        while let Some(event) = self.conn.poll_event() {
            match event {
                H3Event::Response { stream, event } => {
                    if let Some(slot) = self.slots.get_mut(&stream) {
                        slot.events.push_back(event);
                        w.extend(slot.waker.take());
                    }
                }
                H3Event::Failed { stream, failure } => {
                    if let Some(slot) = self.slots.get_mut(&stream) {
                        slot.failure = Some(failure);
                        w.extend(slot.waker.take());
                        w.extend(slot.sender.take());
                    }
                }
                H3Event::Writable { stream } => {
                    if let Some(slot) = self.slots.get_mut(&stream) {
                        w.extend(slot.sender.take());
                    }
                }
                H3Event::StreamsAvailable => w.append(&mut self.open_waiters),
                H3Event::GoAway(first) => {
                    self.notes.push(PoolNote::GoAway(switchyard_common::h3::goaway_for_pool(first)));
                    w.append(&mut self.open_waiters);
                }
                H3Event::Closed(_) => {
                    if !self.closed_reported {
                        self.closed_reported = true;
                        self.notes.push(PoolNote::Closed(self.conn.close_reason()));
                    }
                    w.append(&mut self.open_waiters);
                    w.extend(self.pump.clone());
                }
                H3Event::Connected | H3Event::Settings(_) => {}
            }
        }
    }
}

/// One installed HTTP/3 connection, shared by the pump and the calls.
pub(crate) struct H3Shared {
    state: Mutex<State>,
    handles: AtomicUsize,
    connection: ConnectionId,
    host: Weak<Shared>,
}

impl H3Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `f` on the state; then, the lock released, wakes who was woken
    /// (the pump too, when a call changed something it must send) and tells
    /// the pool what it must hear.
    fn with<R>(&self, from_pump: bool, f: impl FnOnce(&mut State, &mut Wakeups) -> R) -> R {
        let mut wakeups = Wakeups::new();
        let (r, notes) = {
            let mut st = self.lock();
            let r = f(&mut st, &mut wakeups);
            st.dispatch(&mut wakeups);
            if std::mem::take(&mut st.pump_needed) && !from_pump {
                wakeups.extend(st.pump.clone());
            }
            (r, (!st.notes.is_empty()).then(|| std::mem::take(&mut st.notes)))
        };
        wake_all(&mut wakeups);
        if let Some(notes) = notes {
            if let Some(host) = self.host.upgrade() {
                let connection = self.connection;
                host.input(|st, now| tell_pool(&mut st.pool, now, connection, notes));
            }
        }
        r
    }
}

/// A handle on an installed HTTP/3 connection: the pool holds one, each
/// call's stream another; when the last goes, the connection closes.
pub(crate) struct H3Handle {
    conn: Arc<H3Shared>,
    source: Source,
}

impl H3Handle {
    /// The handle a call gets, and how the pool found the connection.
    pub(crate) fn leased(&self, source: Source) -> H3Handle {
        let mut handle = self.clone();
        handle.source = source;
        handle
    }
}

impl Clone for H3Handle {
    fn clone(&self) -> H3Handle {
        self.conn.handles.fetch_add(1, Ordering::Relaxed);
        H3Handle { conn: Arc::clone(&self.conn), source: self.source }
    }
}

impl Drop for H3Handle {
    fn drop(&mut self) {
        if self.conn.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.conn.with(false, |st, _| {
                st.released = true;
                st.pump_needed = true;
                st.conn.close(StdInstant::now());
            });
        }
    }
}

impl std::fmt::Debug for H3Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H3Handle").field("connection", &self.conn.connection).finish_non_exhaustive()
    }
}

/// The pool asks for a PING: any datagram back answers it.
pub(crate) fn ping(handle: &H3Handle) {
    handle.conn.with(false, |st, _| {
        st.ping = true;
        st.pump_needed = true;
        st.conn.ping(StdInstant::now());
    });
}

/// The pool ends the connection now.
pub(crate) fn end(handle: &H3Handle, _reason: CloseReason) {
    handle.conn.with(false, |st, _| {
        st.closed_reported = true; // the pool closed it: nothing to report
        st.pump_needed = true;
        st.conn.close(StdInstant::now());
    });
}

/// Installs an established QUIC connection: its handle now, its pump for
/// the caller to spawn once the lock is released. The pool hears the
/// connection's stream capacity as unbounded: QUIC's own credit (the
/// server's MAX_STREAMS) holds calls past it until a stream ends.
pub(crate) fn prepare(owner: &Shared, quic: Quic, connection: ConnectionId) -> (H3Handle, BoxFuture<()>) {
    let Quic { wire, conn } = quic;
    let state = State {
        conn,
        slots: BTreeMap::new(),
        open_waiters: Vec::new(),
        pump: None,
        notes: vec![PoolNote::Settings(None)],
        ping: false,
        released: false,
        pump_needed: false,
        closed_reported: false,
    };
    let conn = Arc::new(H3Shared {
        state: Mutex::new(state),
        handles: AtomicUsize::new(1),
        connection,
        host: Weak::clone(&owner.me),
    });
    let job = Box::pin(pump(Arc::clone(&conn), wire));
    (H3Handle { conn, source: Source::New }, job)
}

/// Moves datagrams until the connection is over and drained. The state is
/// locked only to hand QUIC what arrived and take what it sends; the system
/// calls run outside the lock, so calls on other threads never wait on them.
async fn pump(conn: Arc<H3Shared>, mut wire: Wire) {
    let mut inbox: Vec<BytesMut> = Vec::new();
    let mut refused: Option<std::io::Error> = None;
    let mut fired = false;
    std::future::poll_fn(|cx| loop {
        let had_input = !inbox.is_empty() || fired;
        let (over, due) = conn.with(true, |st, _| {
            st.pump = Some(cx.waker().clone());
            let now = StdInstant::now();
            let heard = !inbox.is_empty();
            for datagram in inbox.drain(..) {
                st.conn.handle_datagram(now, st.conn.remote(), datagram);
            }
            if std::mem::take(&mut fired) {
                st.conn.handle_timeout(now);
            }
            if let Some(e) = refused.take() {
                tracing::debug!("HTTP/3 connection to {}: {e}", st.conn.remote());
                st.conn.close(now);
            }
            if st.ping && heard {
                st.ping = false;
                st.notes.push(PoolNote::Pong);
            }
            wire.fill(&mut st.conn);
            let closed = !st.conn.is_connected();
            if closed && !st.closed_reported {
                // Lost without an event (cannot happen after the handshake,
                // but the pool must never keep a dead connection).
                st.closed_reported = true;
                st.notes.push(PoolNote::Closed(CloseReason::Failure));
            }
            ((st.released || closed) && st.conn.is_drained(), st.conn.poll_timeout())
        });
        if over {
            return Poll::Ready(());
        }
        if let Err(e) = wire.send(cx) {
            refused = Some(e);
            continue;
        }
        if had_input {
            // What arrived woke the calls it answered: let them run (and
            // queue their requests beside QUIC's acknowledgements) before
            // taking more.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if let Err(e) = wire.recv(cx, &mut inbox) {
            refused = Some(e);
            continue;
        }
        fired = inbox.is_empty() && wire.timer_due(due, cx);
        if inbox.is_empty() && !fired {
            return Poll::Pending;
        }
    })
    .await;
}

/// What one HTTP/3 exchange sends, and its bounds.
pub(crate) struct Request<'a> {
    pub(crate) parts: &'a http::request::Parts,
    pub(crate) body: &'a mut Body,
    pub(crate) facts: RequestFacts,
    pub(crate) limits: StreamLimits,
}

/// A call's stream: cancelled (reset and stopped) when dropped before its end.
struct StreamGuard {
    handle: H3Handle,
    stream: u64,
    over: bool,
}

impl StreamGuard {
    fn conn(&self) -> &Arc<H3Shared> {
        &self.handle.conn
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let (stream, over) = (self.stream, self.over);
        self.handle.conn.with(false, |st, _| {
            if st.slots.remove(&stream).is_some() && !over {
                st.pump_needed = true;
                st.conn.cancel(StdInstant::now(), stream);
            }
        });
    }
}

/// Waits on the connection until `poll` is ready, or `deadline` (then
/// `Err(())`).
async fn wait<T>(
    shared: &Shared,
    conn: &H3Shared,
    deadline: Option<Instant>,
    mut poll: impl FnMut(&mut State, &Waker) -> Poll<T>,
) -> Result<T, ()> {
    let ready = std::future::poll_fn(|cx| conn.with(false, |st, _| poll(st, cx.waker())));
    match deadline {
        None => Ok(ready.await),
        Some(at) => crate::runtime::until(&*shared.rt, shared.hub.to_std(at), ready).await.ok_or(()),
    }
}

/// The earliest of the bounds that are set.
fn earliest(bounds: impl IntoIterator<Item = Option<Instant>>) -> Option<Instant> {
    bounds.into_iter().flatten().min()
}

/// Runs one exchange on a stream of the connection.
pub(crate) async fn exchange(
    shared: &Arc<Shared>,
    call: CallId,
    connection: ConnectionId,
    handle: H3Handle,
    req: Request<'_>,
) -> Result<http::Response<crate::ResponseBody>, Attempted> {
    let Request { parts, body, facts, limits } = req;
    let source = handle.source;
    let conn = Arc::clone(&handle.conn);
    let streaming = matches!(body.kind, Kind::Stream(_));
    let declared = body.len();
    let full = match &body.kind {
        Kind::Full(bytes) => bytes.clone(),
        _ => Bytes::new(),
    };
    let at = shared.now();
    shared.emit(move |l| l.request_headers_start(call, at));
    // Open the stream, waiting for QUIC's stream credit when the server's
    // MAX_STREAMS is reached.
    let opened = wait(shared, &conn, earliest([limits.head_deadline, limits.call_deadline]), |st, waker| {
        let now = StdInstant::now();
        let opened = if streaming {
            st.conn.open_streaming(
                now,
                parts,
                declared.or_else(|| switchyard_common::exchange::declared_length(&parts.headers)),
            )
        } else {
            st.conn.open(now, parts, full.clone())
        };
        match opened {
            Ok(stream) => {
                st.slots.insert(stream, Slot::default());
                st.pump_needed = true;
                Poll::Ready(Ok(stream))
            }
            Err(H3OpenError::AtLimit) => {
                st.open_waiters.push(waker.clone());
                Poll::Pending
            }
            Err(e) => Poll::Ready(Err(e)),
        }
    })
    .await;
    let stream = match opened {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            // Going away or closed before the stream opened: nothing was
            // sent, the call goes elsewhere.
            return Err(switchyard_common::exchange::stale(&format!("the HTTP/3 connection: {e}"), facts));
        }
        Err(()) => return Err(Attempted::Failed(ExchangeFailure::call_deadline(facts))),
    };
    let mut guard = StreamGuard { handle, stream, over: false };
    let has_body = streaming || !full.is_empty();
    let at = shared.now();
    shared.emit(move |l| switchyard_common::request_head_written(l, call, at, has_body));
    if streaming {
        if let Kind::Stream(source) = &mut body.kind {
            let mut counter = switchyard_core::http1::BodyCounter::new(
                declared.or_else(|| switchyard_common::exchange::declared_length(&parts.headers)),
            );
            let mut failure = None;
            let mut stopped = false;
            while let Some(next) = std::future::poll_fn(|cx| source.poll_chunk(cx)).await {
                let chunk = match next {
                    Ok(chunk) => chunk,
                    Err(e) => {
                        failure = Some(format!("reading the request body failed: {e}"));
                        break;
                    }
                };
                if let Err(e) = counter.add(chunk.len() as u64) {
                    failure = Some(e.to_string());
                    break;
                }
                let deadline = earliest([
                    limits.call_deadline,
                    limits.write_timeout.map(|t| shared.now().saturating_add(t)),
                ]);
                let room = wait(shared, &conn, deadline, |st, waker| match st.conn.send_room(stream) {
                    H3SendRoom::Full => {
                        if let Some(slot) = st.slots.get_mut(&stream) {
                            slot.sender = Some(waker.clone());
                        }
                        Poll::Pending
                    }
                    room => Poll::Ready(room),
                })
                .await;
                match room {
                    Ok(H3SendRoom::Room) => conn.with(false, |st, _| {
                        st.pump_needed = true;
                        st.conn.send(StdInstant::now(), stream, chunk, false);
                    }),
                    Ok(_) => {
                        stopped = true;
                        break;
                    }
                    Err(()) => {
                        drop(guard);
                        let failure = ExchangeFailure {
                            kind: ExchangeFailureKind::Timeout,
                            progress: Progress::RequestWritten,
                            request: facts,
                        };
                        return Err(Attempted::Failed(failure));
                    }
                }
            }
            if failure.is_none() && !stopped {
                failure = counter.finish().err().map(|e| e.to_string());
            }
            if let Some(why) = failure {
                // The caller's body failed: only this stream ends (reset, as
                // on HTTP/1.1 an invalid request, never retried).
                drop(guard);
                shared.exchange_finished(call, Reuse::Reusable);
                return Err(Attempted::Fatal(Error::invalid_request(why)));
            }
            if !stopped {
                conn.with(false, |st, _| {
                    st.pump_needed = true;
                    st.conn.send(StdInstant::now(), stream, Bytes::new(), true);
                });
            }
        }
    }
    if has_body {
        let (at, n) = (shared.now(), body.len().unwrap_or(0));
        shared.emit(move |l| switchyard_common::request_body_written(l, call, n, at));
    }
    // The head: each wait bounded by the read timeout, the whole by the
    // call's head and call deadlines.
    let head = loop {
        let deadline = earliest([
            limits.head_deadline,
            limits.call_deadline,
            limits.read_timeout.map(|t| shared.now().saturating_add(t)),
        ]);
        let next = wait(shared, &conn, deadline, |st, waker| poll_next(st, stream, waker)).await;
        match next {
            Ok(Next::Event(ResponseEvent::Head(head))) => break head,
            Ok(Next::Event(_)) => continue, // nothing comes before the head
            Ok(Next::Failed(failure)) => {
                guard.over = true;
                return Err(Attempted::Failed(failure.judged(Progress::RequestWritten, facts)));
            }
            Err(()) => {
                let failure = ExchangeFailure {
                    kind: ExchangeFailureKind::Timeout,
                    progress: Progress::RequestWritten,
                    request: facts,
                };
                return Err(Attempted::Failed(failure));
            }
        }
    };
    if let Some(misdirected) = Session::misdirected(head.status().as_u16(), source, facts) {
        return Err(Attempted::Failed(misdirected));
    }
    let (mut parts, ()) = head.into_parts();
    parts.version = http::Version::HTTP_3;
    let carrier = switchyard_common::Carrier { connection, source };
    switchyard_common::exchange::head_received(shared, call, carrier, &mut parts);
    let body = H3Body {
        shared: Arc::clone(shared),
        call,
        guard: Some(guard),
        trailers: None,
        read_timeout: limits.read_timeout,
        call_deadline: limits.call_deadline,
        body_deadline: limits.body_timeout.map(|t| shared.now().saturating_add(t)),
        wait: None,
    };
    Ok(http::Response::from_parts(parts, crate::ResponseBody::h3(body)))
}

/// What a stream had for its call.
enum Next {
    Event(ResponseEvent),
    Failed(H3Failure),
}

/// The stream's next event: body bytes are counted as consumed as they are
/// taken (the stream reads on).
fn poll_next(st: &mut State, stream: u64, waker: &Waker) -> Poll<Next> {
    let Some(slot) = st.slots.get_mut(&stream) else {
        return Poll::Ready(Next::Failed(H3Failure::ConnectionLost("the stream is gone".into())));
    };
    if let Some(event) = slot.events.pop_front() {
        if let ResponseEvent::Data(data) = &event {
            let n = data.len();
            st.conn.consumed(StdInstant::now(), stream, n);
            st.pump_needed = true;
        }
        return Poll::Ready(Next::Event(event));
    }
    if let Some(failure) = slot.failure.take() {
        return Poll::Ready(Next::Failed(failure));
    }
    slot.waker = Some(waker.clone());
    Poll::Pending
}

/// An HTTP/3 response body: the stream's DATA as the connection read it;
/// the stream reads on as each chunk is taken.
pub(crate) struct H3Body {
    shared: Arc<Shared>,
    call: CallId,
    guard: Option<StreamGuard>,
    pub(crate) trailers: Option<http::HeaderMap>,
    read_timeout: Option<std::time::Duration>,
    call_deadline: Option<Instant>,
    body_deadline: Option<Instant>,
    /// The current wait's timer.
    wait: Option<(Instant, BoxFuture<()>)>,
}

impl H3Body {
    /// The next chunk, as a poll.
    pub(crate) fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, BodyError>> {
        loop {
            let Some(guard) = self.guard.as_ref() else { return Poll::Ready(Ok(None)) };
            let stream = guard.stream;
            let next = guard.conn().with(false, |st, _| poll_next(st, stream, cx.waker()));
            match next {
                Poll::Ready(Next::Event(event)) => {
                    self.wait = None;
                    match event {
                        ResponseEvent::Data(data) if data.is_empty() => {}
                        ResponseEvent::Data(data) => return Poll::Ready(Ok(Some(data))),
                        ResponseEvent::Trailers(t) => self.trailers = Some(t),
                        ResponseEvent::End => {
                            if let Some(g) = self.guard.as_mut() {
                                g.over = true;
                            }
                            return Poll::Ready(Ok(None));
                        }
                        ResponseEvent::Head(_) => {}
                    }
                }
                Poll::Ready(Next::Failed(failure)) => {
                    if let Some(g) = self.guard.as_mut() {
                        g.over = true;
                    }
                    let reuse = match failure {
                        H3Failure::ConnectionLost(_) => Reuse::Retire(CloseReason::Failure),
                        _ => Reuse::Reusable,
                    };
                    self.end(reuse);
                    return Poll::Ready(Err(BodyError::Http3(failure.to_string())));
                }
                Poll::Pending => {
                    let now = self.shared.now();
                    if self.wait.is_none() {
                        let read = self.read_timeout.map(|t| now.saturating_add(t));
                        if let Some(at) = earliest([read, self.call_deadline, self.body_deadline]) {
                            self.wait = Some((at, self.shared.rt.sleep_until(self.shared.hub.to_std(at))));
                        }
                    }
                    let Some((_, sleep)) = self.wait.as_mut() else { return Poll::Pending };
                    if sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.wait = None;
                    self.end(Reuse::Reusable);
                    return Poll::Ready(Err(BodyError::Timeout));
                }
            }
        }
    }

    /// The body ended: the stream is done.
    pub(crate) fn finish(&mut self) {
        self.end(Reuse::Reusable);
    }

    fn end(&mut self, reuse: Reuse) {
        if let Some(guard) = self.guard.take() {
            drop(guard);
            let call = self.call;
            self.shared.exchange_finished(call, reuse);
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.guard.is_none()
    }
}

impl Drop for H3Body {
    fn drop(&mut self) {
        // Dropping the stream cancels it: the connection stays usable.
        self.end(Reuse::Reusable);
    }
}
