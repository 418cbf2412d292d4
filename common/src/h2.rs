//! One HTTP/2 connection as every adapter shares it: the core's
//! [`Driver`] and [`Session`], the calls' streams, and what the pool must
//! hear — behind the adapter's lock, with no I/O and no waiting of its own.
//!
//! The adapter keeps a [`H2Conn`] in a mutex and does two things with it:
//!
//! * **The connection's I/O** (a task on the async adapters, a reader
//!   thread on the blocking one): bytes read go to [`H2Conn::handle_read`],
//!   what [`H2Conn::take_transmit`] returns is written, and after the lock is
//!   released the [`Wakeups`] are woken and the [`PoolNote`]s reported.
//! * **Each call's stream**: [`H2Conn::lease`] when the pool hands the
//!   stream out (in the pool's order), [`submit`](H2Conn::submit) the
//!   request, then poll for the head, for body room and for body chunks with
//!   a [`Waker`] (an async task's, or one that unparks a blocked thread).
//!
//! Streams open in the order the pool leased them: submitted requests wait in
//! lease order and the connection's side opens them ([`H2Conn::open_pending`]),
//! so no call's task needs to run first.

use std::collections::{BTreeMap, VecDeque};
use std::task::{Poll, Waker};

use bytes::Bytes;
use switchyard_core::http2::{
    ConnectionEnd, Driver, DriverConfig, Event, GoAway, OpenError, Report, RequestHead, Session, StreamError,
    StreamLimits, StreamTimer, Wait, WindowEstimator,
};
use switchyard_core::{CloseReason, Instant, Reuse};

/// What the pool must hear from the connection (reported after the lock is
/// released).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolNote {
    /// [`Pool::settings`](switchyard_core::Pool::settings).
    Settings(Option<u32>),
    /// [`Pool::goaway`](switchyard_core::Pool::goaway).
    GoAway(GoAway),
    /// [`Pool::pong`](switchyard_core::Pool::pong): the PING the pool asked for
    /// was answered.
    Pong,
    /// [`Pool::stream_stalled`](switchyard_core::Pool::stream_stalled): a
    /// stream's read or write timeout passed; the peer may have stalled.
    Stalled,
    /// [`Pool::connection_closed`](switchyard_core::Pool::connection_closed).
    Closed(CloseReason),
}

/// A response head: its stream, the head, and its block's wire length.
pub type Head = (u32, http::Response<()>, usize);

/// How a stream failed before its head: its id (if it opened) and what
/// happened.
pub type Unanswered = (Option<u32>, StreamError);

/// Wakers to wake once the lock is released.
pub type Wakeups = Vec<Waker>;

/// A request's body as submitted with its head.
#[derive(Debug)]
pub enum Submitted {
    /// No body: the HEADERS end the stream.
    Empty,
    /// The whole body, known now.
    Full(Bytes),
    /// A body streamed by the caller ([`H2Conn::poll_send`], [`H2Conn::send`]).
    Streaming,
}

#[derive(Debug)]
struct Pending {
    head: RequestHead,
    body: Submitted,
}

/// The calls' streams by their ticket (a reused index: no map to search or
/// shift).
#[derive(Debug, Default)]
struct Slots {
    items: Vec<Option<Slot>>,
    free: Vec<usize>,
}

impl Slots {
    fn insert(&mut self, slot: Slot) -> u64 {
        match self.free.pop() {
            Some(i) => {
                self.items[i] = Some(slot);
                i as u64
            }
            None => {
                self.items.push(Some(slot));
                (self.items.len() - 1) as u64
            }
        }
    }
    fn get(&self, ticket: u64) -> Option<&Slot> {
        self.items.get(usize::try_from(ticket).ok()?)?.as_ref()
    }
    fn get_mut(&mut self, ticket: u64) -> Option<&mut Slot> {
        self.items.get_mut(usize::try_from(ticket).ok()?)?.as_mut()
    }
    fn remove(&mut self, ticket: u64) -> Option<Slot> {
        let i = usize::try_from(ticket).ok()?;
        let slot = self.items.get_mut(i)?.take();
        if slot.is_some() {
            self.free.push(i);
        }
        slot
    }
}

#[derive(Debug, Default)]
struct Slot {
    /// The lease order (the order streams open in).
    seq: u64,
    /// The request, submitted and not yet opened.
    pending: Option<Pending>,
    stream: Option<u32>,
    head: Option<(http::Response<()>, usize)>,
    data: VecDeque<Bytes>,
    trailers: Option<(http::HeaderMap, usize)>,
    ended: bool,
    failed: Option<StreamError>,
    waker: Option<Waker>,
    /// The call's bounds on its waits (none: unbounded, the common case,
    /// which then costs one word here).
    timer: Option<Box<StreamTimer>>,
}

impl Slot {
    fn wake(&mut self, wakeups: &mut Wakeups) {
        if let Some(w) = self.waker.take() {
            wakeups.push(w);
        }
    }
}

/// A response body's next step ([`H2Conn::poll_body`]).
#[derive(Debug)]
pub enum BodyNext {
    /// The next chunk.
    Data(Bytes),
    /// The end, with the trailers if any.
    End(Option<http::HeaderMap>),
    /// The body failed: the caller's error, and whether the connection may
    /// carry more (close the stream, then tell the pool).
    Failed(crate::BodyError, Reuse),
}

/// How a streamed body may go on ([`H2Conn::poll_send`]).
#[derive(Debug, PartialEq, Eq)]
pub enum SendRoom {
    /// The stream takes the next chunk.
    Open,
    /// The server no longer wants the body (it answered, or the stream is
    /// over): send no more; the head (or failure) is next.
    Stop,
}

/// One HTTP/2 connection's shared state. See the [module docs](self).
#[derive(Debug)]
pub struct H2Conn {
    driver: Driver,
    session: Session,
    /// Submitted requests not yet opened: lease order → ticket.
    pending: BTreeMap<u64, u64>,
    /// Streamed uploads waiting for the server's windows.
    send_waiters: Vec<u64>,
    slots: Slots,
    by_stream: BTreeMap<u32, u64>,
    next_ticket: u64,
    /// The connection's I/O side, woken when there is something to write or
    /// the connection must end.
    io_waker: Option<Waker>,
    notes: Vec<PoolNote>,
    /// The pool's PING is out (its PONG is reported).
    pool_ping: bool,
    /// The adaptive window's sample is out.
    sample_ping: bool,
    estimator: Option<WindowEstimator>,
    /// The driver's credit stalls at the last read (the estimator hears new ones).
    stalls_seen: u64,
    /// The I/O side must end the connection now (the pool ended it, or its
    /// last handle is gone).
    stop: bool,
    closed_reported: bool,
}

impl H2Conn {
    /// A connection whose preface is ready to write. `head_limit` bounds
    /// response heads and trailers (as on HTTP/1.1); `adaptive` starts both
    /// windows at the protocol's size and grows them by PING samples.
    #[must_use]
    pub fn new(settings: crate::config::Http2Settings, head_limit: usize) -> H2Conn {
        let estimator = settings
            .adaptive_window
            .then(|| WindowEstimator::new(settings.stream_window, settings.connection_window));
        let (stream_window, connection_window) = match &estimator {
            Some(e) => e.windows(),
            None => (settings.stream_window, settings.connection_window),
        };
        let config = DriverConfig {
            stream_window,
            connection_window,
            // A block several times the head limit ends the connection; up
            // to that it is decoded and its response failed (the session).
            max_header_block: head_limit.saturating_mul(4).max(64 * 1024),
            max_header_list: u32::try_from(head_limit).unwrap_or(u32::MAX),
        };
        H2Conn {
            driver: Driver::new(config),
            session: Session::new(head_limit),
            pending: BTreeMap::new(),
            send_waiters: Vec::new(),
            slots: Slots::default(),
            by_stream: BTreeMap::new(),
            next_ticket: 0,
            io_waker: None,
            notes: Vec::new(),
            pool_ping: false,
            sample_ping: false,
            estimator,
            stalls_seen: 0,
            stop: false,
            closed_reported: false,
        }
    }

    /// The connection's rules (verdicts on failures, head limits).
    pub fn session(&mut self) -> &mut Session {
        &mut self.session
    }

    /// A stream the pool handed out: its place in the opening order.
    pub fn lease(&mut self) -> u64 {
        let seq = self.next_ticket;
        self.next_ticket += 1;
        self.slots.insert(Slot { seq, ..Slot::default() })
    }

    /// The call's request. It opens when the connection's side next runs
    /// ([`open_pending`](Self::open_pending)), after every request leased
    /// before it that was submitted by then.
    ///
    /// `limits` bound each of the call's waits on the stream (see
    /// [`StreamTimer`]): a wait that passes one fails as the timer says, when
    /// the adapter reports the time ([`handle_timeout`](Self::handle_timeout)).
    pub fn submit(
        &mut self,
        ticket: u64,
        head: RequestHead,
        body: Submitted,
        limits: StreamLimits,
        wakeups: &mut Wakeups,
    ) {
        let Some(slot) = self.slots.get_mut(ticket) else { return };
        slot.timer = (!limits.is_unbounded()).then(|| Box::new(StreamTimer::new(limits)));
        if self.driver.is_closed() || self.stop {
            // The connection ended before this request reached it (the
            // pool leased the stream before it heard): never sent.
            let error = match self.driver.goaway() {
                Some(g) => {
                    StreamError::GoAway { code: g.error_code, by: switchyard_core::http2::Peer::Server }
                }
                None => StreamError::Io {
                    message: "the HTTP/2 connection closed before the request was sent".into(),
                },
            };
            return self.fail_slot(ticket, error, wakeups);
        }
        if let Some(slot) = self.slots.get_mut(ticket) {
            slot.pending = Some(Pending { head, body });
            self.pending.insert(slot.seq, ticket);
        }
        self.wake_io(wakeups);
    }

    /// Opens the submitted requests, in lease order (the I/O side calls this
    /// before taking what to write).
    pub fn open_pending(&mut self, wakeups: &mut Wakeups) {
        while let Some((&seq, &ticket)) = self.pending.first_key_value() {
            let Some(p) = self.slots.get_mut(ticket).and_then(|s| s.pending.as_ref()) else {
                self.pending.remove(&seq);
                continue;
            };
            let end =
                matches!(p.body, Submitted::Empty) || matches!(&p.body, Submitted::Full(b) if b.is_empty());
            let opened = self.driver.open_head(&p.head, end);
            if opened == Err(OpenError::AtLimit) {
                // Waits for a stream to end, or for more streams (SETTINGS).
                return;
            }
            self.pending.remove(&seq);
            let Some(slot) = self.slots.get_mut(ticket) else { continue };
            let Some(p) = slot.pending.take() else { continue };
            match opened {
                Ok(stream) => {
                    slot.stream = Some(stream);
                    slot.wake(wakeups);
                    if let Submitted::Full(b) = p.body {
                        if !b.is_empty() {
                            self.driver.send_data(stream, b, true);
                        }
                    }
                    self.by_stream.insert(stream, ticket);
                }
                Err(OpenError::Closed(error)) => self.fail_slot(ticket, error, wakeups),
                Err(OpenError::AtLimit | OpenError::Exhausted) => {
                    let error = StreamError::GoAway { code: 0, by: switchyard_core::http2::Peer::Us };
                    self.fail_slot(ticket, error, wakeups);
                }
            }
        }
    }

    fn fail_slot(&mut self, ticket: u64, error: StreamError, wakeups: &mut Wakeups) {
        if let Some(slot) = self.slots.get_mut(ticket) {
            slot.failed.get_or_insert(error);
            slot.wake(wakeups);
        }
    }

    /// The stream's id once it opened.
    #[must_use]
    pub fn stream_id(&self, ticket: u64) -> Option<u32> {
        self.slots.get(ticket).and_then(|s| s.stream)
    }

    /// The response head (status and fields, and the block's wire length),
    /// or how the stream failed before it (with its id, if it had opened) —
    /// a passed bound among them. `now` is read only when a bounded wait
    /// starts (or the body timeout does, at the head).
    pub fn poll_head(
        &mut self,
        ticket: u64,
        now: impl FnOnce() -> Instant,
        waker: &Waker,
    ) -> Poll<Result<Head, Unanswered>> {
        let Some(slot) = self.slots.get_mut(ticket) else {
            let message = "the HTTP/2 stream is gone".into();
            return Poll::Ready(Err((None, StreamError::Other { message })));
        };
        if let Some((head, len)) = slot.head.take() {
            if let Some(t) = slot.timer.as_mut() {
                t.head_arrived(now);
            }
            return Poll::Ready(Ok((slot.stream.unwrap_or(0), head, len)));
        }
        if let Some(e) = &slot.failed {
            if let Some(t) = slot.timer.as_mut() {
                t.done();
            }
            return Poll::Ready(Err((slot.stream, e.clone())));
        }
        if let Some(t) = slot.timer.as_mut() {
            t.waiting(Wait::Head, now);
        }
        slot.waker = Some(waker.clone());
        Poll::Pending
    }

    /// Whether a streamed body may send its next chunk now (`Stop`: the
    /// server answered, or the stream failed — a passed write timeout among
    /// those; the head or failure is next).
    pub fn poll_send(&mut self, ticket: u64, now: impl FnOnce() -> Instant, waker: &Waker) -> Poll<SendRoom> {
        let Some(slot) = self.slots.get_mut(ticket) else { return Poll::Ready(SendRoom::Stop) };
        let room = match slot.stream {
            _ if slot.failed.is_some() || slot.head.is_some() => Some(SendRoom::Stop),
            // Not opened yet: waits for a stream.
            None => None,
            Some(stream) if self.driver.body_done(stream) => Some(SendRoom::Stop),
            Some(stream) if self.driver.wants_body(stream) => Some(SendRoom::Open),
            Some(_) => None,
        };
        if let Some(room) = room {
            if let Some(t) = slot.timer.as_mut() {
                t.done();
            }
            return Poll::Ready(room);
        }
        if let Some(t) = slot.timer.as_mut() {
            t.waiting(Wait::Room, now);
        }
        slot.waker = Some(waker.clone());
        if slot.stream.is_none() {
            return Poll::Pending;
        }
        // Waits for the server's window (a WINDOW_UPDATE or SETTINGS read
        // later wakes it).
        if !self.send_waiters.contains(&ticket) {
            self.send_waiters.push(ticket);
        }
        Poll::Pending
    }

    /// A streamed body's next chunk (`end`: the last).
    pub fn send(&mut self, ticket: u64, chunk: Bytes, end: bool, wakeups: &mut Wakeups) {
        if let Some(stream) = self.stream_id(ticket) {
            self.driver.send_data(stream, chunk, end);
            self.wake_io(wakeups);
            return;
        }
        // Not opened yet (a body that ended before its first chunk needed
        // room): the stream opens with what it is, all of it.
        if let Some(p) = self.slots.get_mut(ticket).and_then(|s| s.pending.as_mut()) {
            if end {
                p.body = Submitted::Full(chunk);
            }
        }
    }

    /// The next body chunk, `None` at the end (trailers, if any, are then in
    /// [`body_end`](Self::body_end)). Each chunk's flow-control
    /// credit goes back as it is taken.
    pub fn poll_chunk(
        &mut self,
        ticket: u64,
        now: impl FnOnce() -> Instant,
        waker: &Waker,
        wakeups: &mut Wakeups,
    ) -> Poll<Result<Option<Bytes>, StreamError>> {
        let Some(slot) = self.slots.get_mut(ticket) else { return Poll::Ready(Ok(None)) };
        if let Some(chunk) = slot.data.pop_front() {
            if let Some(t) = slot.timer.as_mut() {
                t.done();
            }
            if let Some(stream) = slot.stream {
                self.driver.release(stream, chunk.len());
                if self.driver.poll_transmit().is_some() {
                    self.wake_io(wakeups);
                }
            }
            return Poll::Ready(Ok(Some(chunk)));
        }
        if slot.ended {
            if let Some(t) = slot.timer.as_mut() {
                t.done();
            }
            return Poll::Ready(Ok(None));
        }
        if let Some(e) = &slot.failed {
            if let Some(t) = slot.timer.as_mut() {
                t.done();
            }
            return Poll::Ready(Err(e.clone()));
        }
        if let Some(t) = slot.timer.as_mut() {
            t.waiting(Wait::Body, now);
        }
        slot.waker = Some(waker.clone());
        Poll::Pending
    }

    /// The response body's next step for the stream `stream` of `ticket`:
    /// a chunk, its end (with trailers, held to the head limit), or its
    /// failure as the caller sees it and what it means for the connection.
    pub fn poll_body(
        &mut self,
        ticket: u64,
        stream: u32,
        now: impl FnOnce() -> Instant,
        waker: &Waker,
        wakeups: &mut Wakeups,
    ) -> Poll<BodyNext> {
        Poll::Ready(match self.poll_chunk(ticket, now, waker, wakeups) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Ok(Some(data))) => BodyNext::Data(data),
            Poll::Ready(Ok(None)) => match self.body_end(ticket, stream) {
                Ok(trailers) => BodyNext::End(trailers),
                Err(e) => BodyNext::Failed(e, Reuse::Reusable),
            },
            Poll::Ready(Err(e)) => {
                let reuse = self.session.body_failed(&e);
                let error = match e {
                    _ if self.session.ending() == Some(CloseReason::Shutdown) => crate::BodyError::Shutdown,
                    StreamError::ReadTimeout | StreamError::WriteTimeout | StreamError::Deadline => {
                        crate::BodyError::Timeout
                    }
                    e => crate::BodyError::Http2(e.to_string()),
                };
                BodyNext::Failed(error, reuse)
            }
        })
    }

    /// When the wait in progress on `ticket`'s stream must end (`None`: no
    /// bound). The adapter waits at most until then, then reports the time
    /// ([`handle_timeout`](Self::handle_timeout)) and polls again.
    #[must_use]
    pub fn deadline(&self, ticket: u64) -> Option<Instant> {
        self.slots.get(ticket)?.timer.as_ref()?.deadline()
    }

    /// Time passed: every wait whose bound passed at `now` fails as its
    /// timer says (its caller is woken and sees the failure); a passed read
    /// or write timeout tells the pool the peer may have stalled
    /// ([`PoolNote::Stalled`]: its PING decides about the connection).
    pub fn handle_timeout(&mut self, now: Instant, wakeups: &mut Wakeups) {
        let mut stalled = false;
        for slot in self.slots.items.iter_mut().flatten() {
            let Some(timer) = slot.timer.as_mut() else { continue };
            if let Some(expired) = timer.expired(now) {
                timer.done();
                stalled |= expired.suspects_peer();
                slot.failed.get_or_insert(expired.error());
                slot.wake(wakeups);
            }
        }
        if stalled {
            self.notes.push(PoolNote::Stalled);
        }
    }

    /// The body ended: its trailers, if any, held to the head limit (over
    /// it, on the wire or decoded, a typed error — never fields cut
    /// silently; the connection is fine).
    pub fn body_end(
        &mut self,
        ticket: u64,
        stream: u32,
    ) -> Result<Option<http::HeaderMap>, crate::BodyError> {
        let Some((trailers, _)) = self.slots.get_mut(ticket).and_then(|s| s.trailers.take()) else {
            return Ok(None);
        };
        let fits = self.session.trailers_fit(stream, switchyard_core::http2::field_sizes(&trailers));
        if fits {
            Ok(Some(trailers))
        } else {
            Err(crate::BodyError::TrailersTooLarge { limit: self.session.head_limit() })
        }
    }

    /// The call is done with its stream (body read, dropped, or failed): a
    /// stream still open is reset (CANCEL); the slot is freed.
    pub fn close(&mut self, ticket: u64, wakeups: &mut Wakeups) {
        let Some(slot) = self.slots.remove(ticket) else { return };
        if slot.pending.is_some() {
            self.pending.remove(&slot.seq);
        }
        if let Some(stream) = slot.stream {
            self.by_stream.remove(&stream);
            self.driver.close_stream(stream);
        }
        // A stream freed: a request waiting for one may open.
        self.wake_io(wakeups);
    }

    /// The pool's PING (keep-alive or a stalled stream): its PONG is noted.
    pub fn ping(&mut self, wakeups: &mut Wakeups) {
        self.pool_ping = true;
        if self.driver.ping() {
            self.wake_io(wakeups);
        }
    }

    /// The pool ends the connection now: the session hears why first, so the
    /// streams' failures say so; the I/O side closes the socket.
    pub fn end(&mut self, reason: CloseReason, wakeups: &mut Wakeups) {
        self.session.end(reason);
        self.stop = true;
        self.wake_io(wakeups);
    }

    /// The last handle is gone (the pool closed the connection and no call
    /// holds a stream): the I/O side says GOAWAY and closes.
    pub fn release(&mut self, wakeups: &mut Wakeups) {
        self.stop = true;
        self.wake_io(wakeups);
    }

    /// Whether the I/O side should end the connection (after writing what
    /// is left).
    #[must_use]
    pub fn should_stop(&self) -> bool {
        self.stop || self.driver.is_closed()
    }

    /// The I/O side is ending the connection because it was asked to: fails
    /// what is still open.
    pub fn stopped(&mut self, wakeups: &mut Wakeups) {
        if self.session.ending().is_some() {
            let message = "the pool ended the HTTP/2 connection".to_owned();
            self.driver.handle_read_error(&message);
        } else {
            self.driver.go_away();
        }
        self.dispatch(Instant::from_millis(0), wakeups);
    }

    /// The connection's I/O side registers to be woken.
    pub fn register_io(&mut self, waker: &Waker) {
        if !self.io_waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
            self.io_waker = Some(waker.clone());
        }
    }

    fn wake_io(&mut self, wakeups: &mut Wakeups) {
        if let Some(w) = self.io_waker.take() {
            wakeups.push(w);
        }
    }

    /// Bytes the server sent.
    pub fn handle_read(&mut self, now: Instant, bytes: &[u8], wakeups: &mut Wakeups) {
        self.driver.handle_read(bytes);
        self.after_read(now, wakeups);
    }

    /// Bytes the server sent, read into `buf` (outside the lock) with no
    /// copy: `buf` becomes the driver's input, and comes back holding what
    /// is left of a frame not yet whole, for the next read to append to.
    pub fn handle_read_buf(&mut self, now: Instant, buf: &mut bytes::BytesMut, wakeups: &mut Wakeups) {
        let input = self.driver.read_buffer();
        if input.is_empty() {
            std::mem::swap(input, buf);
        } else {
            input.extend_from_slice(buf);
            buf.clear();
        }
        self.driver.handle_appended(0);
        self.after_read(now, wakeups);
        std::mem::swap(self.driver.read_buffer(), buf);
    }

    fn after_read(&mut self, now: Instant, wakeups: &mut Wakeups) {
        if let Some(e) = self.estimator.as_mut() {
            let stalls = self.driver.credit_stalls();
            if stalls != self.stalls_seen {
                self.stalls_seen = stalls;
                e.stalled();
            }
        }
        self.dispatch(now, wakeups);
        // What was read may have opened the server's windows: uploads that
        // wait for room look again.
        for ticket in std::mem::take(&mut self.send_waiters) {
            if let Some(slot) = self.slots.get_mut(ticket) {
                slot.wake(wakeups);
            }
        }
        if let Some(e) = self.estimator.as_mut() {
            let data = self.driver.data_bytes();
            if !self.sample_ping && e.wants_sample(now, data) && self.driver.ping() {
                e.started(now);
                self.sample_ping = true;
            }
        }
    }

    /// The server closed the connection.
    pub fn handle_eof(&mut self, wakeups: &mut Wakeups) {
        self.driver.handle_eof();
        self.dispatch(Instant::from_millis(0), wakeups);
    }

    /// Reading or writing failed.
    pub fn handle_io_error(&mut self, message: &str, wakeups: &mut Wakeups) {
        self.driver.handle_read_error(message);
        self.dispatch(Instant::from_millis(0), wakeups);
    }

    /// What to write now (opening submitted requests first).
    pub fn take_transmit(&mut self, wakeups: &mut Wakeups) -> Option<Bytes> {
        self.open_pending(wakeups);
        let bytes = self.driver.take_transmit();
        (!bytes.is_empty()).then_some(bytes)
    }

    /// What the pool must hear, in order.
    pub fn take_notes(&mut self) -> Vec<PoolNote> {
        std::mem::take(&mut self.notes)
    }

    /// Whether a note waits (cheap check before taking them).
    #[must_use]
    pub fn has_notes(&self) -> bool {
        !self.notes.is_empty()
    }

    fn slot_of(&mut self, stream: u32) -> Option<&mut Slot> {
        let ticket = *self.by_stream.get(&stream)?;
        self.slots.get_mut(ticket)
    }

    fn dispatch(&mut self, now: Instant, wakeups: &mut Wakeups) {
        while let Some(event) = self.driver.poll_event() {
            match event {
                Event::Settings { max_concurrent_streams } => {
                    let _ = self.session.heard(Report::Settings { max_concurrent_streams });
                    self.notes.push(PoolNote::Settings(max_concurrent_streams));
                    // More streams may be allowed now.
                    self.wake_io(wakeups);
                }
                Event::GoAway(g) => {
                    if let Report::GoAway(g) = self.session.heard(Report::GoAway(g)) {
                        self.notes.push(PoolNote::GoAway(g));
                    }
                }
                Event::Head { stream, response, block_len } => {
                    self.session.block_read(stream, block_len);
                    if let Some(slot) = self.slot_of(stream) {
                        slot.head = Some((response, block_len));
                        slot.wake(wakeups);
                    }
                }
                Event::Data { stream, data } => {
                    if let Some(slot) = self.slot_of(stream) {
                        slot.data.push_back(data);
                        slot.wake(wakeups);
                    }
                }
                Event::Trailers { stream, trailers, block_len } => {
                    self.session.block_read(stream, block_len);
                    if let Some(slot) = self.slot_of(stream) {
                        slot.trailers = Some((trailers, block_len));
                    }
                }
                Event::End { stream } => {
                    if let Some(slot) = self.slot_of(stream) {
                        slot.ended = true;
                        slot.wake(wakeups);
                    }
                    // A stream freed: a waiting request may open.
                    if !self.pending.is_empty() {
                        self.wake_io(wakeups);
                    }
                }
                Event::Failed { stream, error } => {
                    if let Some(slot) = self.slot_of(stream) {
                        slot.failed.get_or_insert(error);
                        slot.wake(wakeups);
                    }
                    if !self.pending.is_empty() {
                        self.wake_io(wakeups);
                    }
                }
                Event::Pong => {
                    if std::mem::take(&mut self.pool_ping) {
                        self.notes.push(PoolNote::Pong);
                    }
                    if std::mem::take(&mut self.sample_ping) {
                        let data = self.driver.data_bytes();
                        if let Some(grown) = self.estimator.as_mut().and_then(|e| e.pong(now, data)) {
                            self.driver.grow_windows(grown.0, grown.1);
                            self.wake_io(wakeups);
                        }
                    }
                }
                Event::Closed(end) => {
                    // Requests that never opened fail as never sent.
                    let error = match &end {
                        ConnectionEnd::Failed(e) => e.clone(),
                        _ => StreamError::Other { message: "the HTTP/2 connection closed".into() },
                    };
                    for (_, ticket) in std::mem::take(&mut self.pending) {
                        if let Some(slot) = self.slots.get_mut(ticket) {
                            slot.pending = None;
                        }
                        self.fail_slot(ticket, error.clone(), wakeups);
                    }
                    if !self.closed_reported {
                        self.closed_reported = true;
                        self.notes.push(PoolNote::Closed(self.session.ended(&end)));
                    }
                    self.wake_io(wakeups);
                }
            }
        }
    }
}

/// An adapter's shared HTTP/2 connection, as its handles see it.
pub trait SharedConn: Send + Sync + 'static {
    /// Runs `f` on the state under the connection's lock; after it, the
    /// adapter writes what was produced (or wakes its writer), wakes who was
    /// woken, and tells the pool what it must hear.
    fn with<R>(&self, f: impl FnOnce(&mut H2Conn, &mut Wakeups) -> R) -> R;
    /// How many handles hold the connection (the pool's, and each stream's).
    fn handles(&self) -> &std::sync::atomic::AtomicUsize;
}

/// What an adapter keeps under a connection's lock: the state, and beside it
/// whatever the adapter's I/O needs there (nothing on the async adapters,
/// whose pump task writes; the socket's write side on the blocking one, which
/// writes under the lock).
pub trait Side: Send + 'static {
    /// The connection's state.
    fn state(&mut self) -> &mut H2Conn;
    /// Under the lock, after each change to the state: the adapter's own
    /// work (the blocking adapter writes what the state produced).
    fn after(&mut self, _wakeups: &mut Wakeups) {}
}

impl Side for H2Conn {
    fn state(&mut self) -> &mut H2Conn {
        self
    }
}

/// One shared HTTP/2 connection as an adapter holds it: its [`Side`] behind
/// a mutex, how many handles hold it, and the client it reports to. Every
/// change goes through [`Locked::with`], which wakes who was woken and tells
/// the pool what it must hear once the lock is released (never under it).
pub struct Locked<S, H> {
    side: std::sync::Mutex<S>,
    handles: std::sync::atomic::AtomicUsize,
    connection: switchyard_core::ConnectionId,
    host: std::sync::Weak<H>,
}

impl<S: Side, H: crate::engine::EngineHost> Locked<S, H> {
    /// A new connection, held by one handle (the pool's).
    pub fn new(side: S, connection: switchyard_core::ConnectionId, host: std::sync::Weak<H>) -> Self {
        Locked {
            side: std::sync::Mutex::new(side),
            handles: std::sync::atomic::AtomicUsize::new(1),
            connection,
            host,
        }
    }

    /// The side, locked (a poisoned lock is taken over: the state stays
    /// consistent between calls).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, S> {
        self.side.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The pool's name for the connection.
    pub fn connection(&self) -> switchyard_core::ConnectionId {
        self.connection
    }

    /// The client, while it lives.
    pub fn host(&self) -> Option<std::sync::Arc<H>> {
        self.host.upgrade()
    }

    /// Runs `f` on the state, then the side's own work, then — with the lock
    /// released — wakes who was woken and tells the pool what it must hear.
    pub fn with<R>(&self, f: impl FnOnce(&mut H2Conn, &mut Wakeups) -> R) -> R {
        self.with_side(|side, w| f(side.state(), w))
    }

    /// [`Locked::with`] on the whole side (the adapter's I/O beside the
    /// state: the blocking adapter's TLS session).
    pub fn with_side<R>(&self, f: impl FnOnce(&mut S, &mut Wakeups) -> R) -> R {
        let mut wakeups = Wakeups::new();
        let (r, notes) = {
            let mut side = self.lock();
            let r = f(&mut side, &mut wakeups);
            side.after(&mut wakeups);
            let st = side.state();
            (r, st.has_notes().then(|| st.take_notes()))
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

impl<S: Side, H: crate::engine::EngineHost> SharedConn for Locked<S, H> {
    fn with<R>(&self, f: impl FnOnce(&mut H2Conn, &mut Wakeups) -> R) -> R {
        Locked::with(self, f)
    }
    fn handles(&self) -> &std::sync::atomic::AtomicUsize {
        &self.handles
    }
}

/// A handle on a shared HTTP/2 connection. A leased one carries its stream's
/// place in the opening order (its ticket) and closes that stream when
/// dropped; when the last handle goes (the pool closed the connection and no
/// call holds a stream), the connection is released: GOAWAY, then closed.
pub struct Handle<C: SharedConn> {
    conn: std::sync::Arc<C>,
    ticket: Option<u64>,
    source: switchyard_core::Source,
}

impl<C: SharedConn> Handle<C> {
    /// The first handle on a new connection (the pool's).
    #[must_use]
    pub fn new(conn: std::sync::Arc<C>) -> Handle<C> {
        Handle { conn, ticket: None, source: switchyard_core::Source::New }
    }

    /// The handle for one stream the pool handed out (under the engine's
    /// lock, in the pool's order): its place in the opening order, and how
    /// the pool found the connection.
    #[must_use]
    pub fn leased(&self, source: switchyard_core::Source) -> Handle<C> {
        let mut handle = self.clone();
        handle.ticket = Some(self.conn.with(|st, _| st.lease()));
        handle.source = source;
        handle
    }

    /// The shared connection.
    #[must_use]
    pub fn conn(&self) -> &std::sync::Arc<C> {
        &self.conn
    }

    /// The stream's ticket (`u64::MAX` for a handle that leased none).
    #[must_use]
    pub fn ticket(&self) -> u64 {
        self.ticket.unwrap_or(u64::MAX)
    }

    /// How the pool found the connection for this stream.
    #[must_use]
    pub fn source(&self) -> switchyard_core::Source {
        self.source
    }
}

impl<C: SharedConn> Clone for Handle<C> {
    fn clone(&self) -> Handle<C> {
        self.conn.handles().fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Handle { conn: std::sync::Arc::clone(&self.conn), ticket: None, source: self.source }
    }
}

impl<C: SharedConn> Drop for Handle<C> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.conn.with(|st, w| st.close(ticket, w));
        }
        if self.conn.handles().fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1 {
            self.conn.with(|st, w| st.release(w));
        }
    }
}

impl<C: SharedConn> std::fmt::Debug for Handle<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle").field("ticket", &self.ticket).field("source", &self.source).finish()
    }
}

/// Tells the pool what it must hear from `connection` (under the engine's
/// lock, after the connection's was released).
pub fn tell_pool(
    pool: &mut switchyard_core::Pool,
    now: Instant,
    connection: switchyard_core::ConnectionId,
    notes: Vec<PoolNote>,
) {
    for note in notes {
        let _ = match note {
            PoolNote::Settings(max) => pool.settings(now, connection, max),
            PoolNote::GoAway(g) => pool.goaway(now, connection, g),
            PoolNote::Pong => pool.pong(now, connection),
            PoolNote::Stalled => pool.stream_stalled(now, connection),
            // Already closed by the pool: nothing to report.
            PoolNote::Closed(reason) => pool.connection_closed(now, connection, reason),
        };
    }
}

/// Wakes every waker in `wakeups` (after the lock is released).
pub fn wake_all(wakeups: &mut Wakeups) {
    for w in wakeups.drain(..) {
        w.wake();
    }
}

/// One request as it goes out on a stream, and the verdicts on it that do
/// not depend on the adapter: the head sent (HTTP/2's version, no
/// connection-specific fields, a streamed body's declared length), the
/// request-body length rule (the same counter and words as HTTP/1.1's), and
/// what a failure or a response head means (the session's rules).
#[derive(Debug)]
pub struct Outgoing {
    /// Until submitted ([`Outgoing::take_head`]).
    head: Option<RequestHead>,
    has_body: bool,
    streaming: bool,
    declared: Option<u64>,
}

impl Outgoing {
    /// `body_len`: the body's length when known (a buffered body's, or a
    /// stream's declared one); `streaming`: the caller streams it;
    /// `has_body`: there is a body at all. The head is encoded here, on the
    /// caller's side.
    #[must_use]
    pub fn new(
        parts: &http::request::Parts,
        body_len: Option<u64>,
        streaming: bool,
        has_body: bool,
    ) -> Outgoing {
        // A stream declared with its length tells the server so, as on HTTP/1.1.
        let length = if streaming { body_len } else { None };
        let head = RequestHead::encode(parts, length);
        let declared = if streaming {
            body_len.or_else(|| crate::exchange::declared_length(&parts.headers))
        } else {
            None
        };
        Outgoing { head: Some(head), has_body, streaming, declared }
    }

    /// Whether a body follows the head.
    #[must_use]
    pub fn has_body(&self) -> bool {
        self.has_body
    }

    /// The head to submit (moved out: it is submitted once).
    ///
    /// # Panics
    /// When taken twice.
    #[must_use]
    pub fn take_head(&mut self) -> RequestHead {
        self.head.take().expect("the request head is submitted once")
    }

    /// How the body is submitted when the caller does not hand it over whole.
    #[must_use]
    pub fn submitted(&self) -> Submitted {
        if self.has_body && self.streaming {
            Submitted::Streaming
        } else {
            Submitted::Empty
        }
    }

    /// The streamed body's length rule.
    #[must_use]
    pub fn counter(&self) -> switchyard_core::http1::BodyCounter {
        switchyard_core::http1::BodyCounter::new(self.declared)
    }

    /// The stream failed before its response (`stream`: its id, if it had
    /// opened): the failure the retry rules judge.
    pub fn failed(
        &self,
        session: &Session,
        stream: Option<u32>,
        error: &StreamError,
        facts: switchyard_core::pool::RequestFacts,
    ) -> crate::exchange::Attempted {
        use switchyard_core::pool::Progress;
        let progress = if stream.is_some() { Progress::RequestWritten } else { Progress::NothingWritten };
        crate::exchange::Attempted::Failed(session.stream_failed(stream, error, progress, facts))
    }

    /// The caller's body failed (we reset the stream): whether the
    /// connection may carry more.
    #[must_use]
    pub fn body_failed(&self, session: &Session) -> switchyard_core::Reuse {
        let ours = StreamError::Reset {
            code: switchyard_core::http2::session::code::CANCEL,
            by: switchyard_core::http2::Peer::Us,
        };
        session.body_failed(&ours)
    }

    /// A response head arrived: over the head limit it fails, typed; a 421 on
    /// a coalesced connection is retried on one of the call's own (when the
    /// request can be sent again).
    pub fn judge_head(
        &self,
        session: &mut Session,
        stream: u32,
        response: &http::Response<()>,
        source: switchyard_core::Source,
        facts: switchyard_core::pool::RequestFacts,
    ) -> Result<(), crate::exchange::Attempted> {
        use crate::exchange::Attempted;
        session
            .response_head(stream, switchyard_core::http2::field_sizes(response.headers()), facts)
            .map_err(Attempted::Failed)?;
        match Session::misdirected(response.status().as_u16(), source, facts) {
            Some(misdirected) => Err(Attempted::Failed(misdirected)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    fn head() -> RequestHead {
        let (parts, ()) = http::Request::get("http://a.test/").body(()).expect("request").into_parts();
        RequestHead::encode(&parts, None)
    }

    /// A submitted request under `limits`, its caller waiting for the head
    /// since t = 1 s.
    fn waiting(limits: StreamLimits) -> (H2Conn, u64) {
        let mut conn = H2Conn::new(crate::config::Http2Settings::default(), 64 * 1024);
        let mut w = Wakeups::new();
        let ticket = conn.lease();
        conn.submit(ticket, head(), Submitted::Empty, limits, &mut w);
        assert!(conn.poll_head(ticket, || ms(1_000), Waker::noop()).is_pending());
        (conn, ticket)
    }

    #[test]
    fn a_read_timeout_fails_the_wait_and_suspects_the_peer() {
        let limits =
            StreamLimits { read_timeout: Some(Duration::from_millis(300)), ..StreamLimits::default() };
        let (mut conn, ticket) = waiting(limits);
        assert_eq!(conn.deadline(ticket), Some(ms(1_300)));
        let mut w = Wakeups::new();
        conn.handle_timeout(ms(1_299), &mut w);
        assert!(conn.poll_head(ticket, || ms(1_299), Waker::noop()).is_pending());
        assert!(!conn.has_notes());
        conn.handle_timeout(ms(1_300), &mut w);
        match conn.poll_head(ticket, || ms(1_300), Waker::noop()) {
            Poll::Ready(Err((_, e))) => assert_eq!(e, StreamError::ReadTimeout),
            other => panic!("expected the read timeout, got {other:?}"),
        }
        assert_eq!(conn.take_notes(), [PoolNote::Stalled]);
        assert_eq!(conn.deadline(ticket), None, "the wait is over");
    }

    #[test]
    fn the_calls_deadline_says_nothing_about_the_connection() {
        let limits = StreamLimits {
            head_deadline: Some(ms(1_200)),
            read_timeout: Some(Duration::from_secs(5)),
            ..StreamLimits::default()
        };
        let (mut conn, ticket) = waiting(limits);
        assert_eq!(conn.deadline(ticket), Some(ms(1_200)));
        conn.handle_timeout(ms(1_200), &mut Wakeups::new());
        match conn.poll_head(ticket, || ms(1_200), Waker::noop()) {
            Poll::Ready(Err((_, e))) => assert_eq!(e, StreamError::Deadline),
            other => panic!("expected the deadline, got {other:?}"),
        }
        assert!(!conn.has_notes(), "no PING for the call's own deadline");
    }

    #[test]
    fn an_unbounded_wait_has_no_deadline() {
        let (mut conn, ticket) = waiting(StreamLimits::default());
        assert_eq!(conn.deadline(ticket), None);
        conn.handle_timeout(ms(u64::from(u32::MAX)), &mut Wakeups::new());
        assert!(conn.poll_head(ticket, || panic!("no clock"), Waker::noop()).is_pending());
    }
}
