//! The HTTP/1.1 connection driver: one connection, its exchanges, no I/O.
//!
//! [`Conn`] is an idle HTTP/1.1 connection as the core knows it: its read buffer
//! (bytes read past a response stay with the connection) and how many exchanges it
//! has carried. [`Conn::start`] turns it into a [`Driver`] for one exchange; when
//! the exchange ends, [`Driver::finish`] gives the idle `Conn` back — or the reason
//! the connection must close. The two types make the order impossible to get
//! wrong: an exchange cannot start on a busy connection, and a connection cannot
//! go back to the pool in the middle of a response.
//!
//! The driver decides everything about the exchange; the adapter only moves bytes
//! and reads the clock (quinn-proto's shape: inputs carry `now`, outputs are
//! polled):
//!
//! | the adapter sees                     | it calls                                   |
//! |--------------------------------------|--------------------------------------------|
//! | [`Driver::poll_transmit`] has bytes   | writes them, then [`Driver::handle_written`] (or [`handle_write_error`](Driver::handle_write_error)) |
//! | [`Driver::wants_read`]                | reads, then [`handle_read`](Driver::handle_read) / [`handle_eof`](Driver::handle_eof) / [`handle_read_error`](Driver::handle_read_error) |
//! | [`Driver::wants_body`]                | gives the next body chunk: [`handle_body_chunk`](Driver::handle_body_chunk) (or [`handle_body_error`](Driver::handle_body_error)) |
//! | [`Driver::poll_timeout`] passes       | [`Driver::handle_timeout`]                 |
//! | [`Driver::poll_event`]                | acts on [`Event`]s: head, data, trailers, done, failed |
//!
//! An adapter may do all three kinds of I/O at once (an async one polls them
//! together) or one at a time; the driver accepts them in any order.
//!
//! ```text
//!            start
//!   Conn ───────────► Sending ──(head out, Expect: 100-continue)──► AwaitingContinue
//!    ▲                  │  ▲                                 100 / our timer │
//!    │                  │  └─────────────────────────────────────────────────┘
//!    │   request out    ▼            early final response (any time)
//!    │               Head ◄──────────────────────────────────────┐
//!    │                  │ final head                             │
//!    │                  ▼                                        │
//!    │                Body ──abandon──► Draining                 │
//!    │                  │ end              │ end / limit         │
//!    └──── finish ◄── Done ◄───────────────┘     write error ──► Salvage
//! ```
//!
//! The phases and their rules:
//!
//! * **Sending**: the head, then the body as the driver asks for it (one chunk at a
//!   time: nothing is asked before the last one was written). Meanwhile reads are
//!   decoded: a server may answer before it reads the body (RFC 9110 §15; curl and
//!   Go return that answer), and then the rest of the body is not sent (the
//!   connection is not reused: its framing position is unknown). Each wait for the
//!   socket to take bytes is bounded by the write timeout.
//! * **AwaitingContinue**: `Expect: 100-continue` — the body waits for
//!   `100 Continue`, a final response (the body is then withheld for good), or the
//!   driver's own timer (RFC 9110 §10.1.1 lets a client stop waiting).
//! * **Head**: the request is out; each wait for bytes is bounded by the read
//!   timeout.
//! * **Body**: [`Event::Data`] as bytes arrive, optional [`Event::Trailers`], then
//!   [`Event::Done`] with the keep-alive decision ([`Exchange::reuse`]). The driver
//!   wants no read while an event waits to be taken, so a slow reader applies
//!   back-pressure and nothing is buffered without bound.
//! * **Draining**: the caller dropped the body ([`Driver::abandon`]); the driver
//!   reads on up to [`DriverConfig::drain_bytes`] or [`DriverConfig::drain_time`] so
//!   the connection can be reused, and past either closes it (`UnreadBody`).
//! * **Salvage**: a write failed (not by timing out): the server may have answered
//!   and closed; the driver reads for up to
//!   [`DriverConfig::early_response_grace`] for that answer before failing.
//!
//! Deadlines are absolute instants: the call's deadline (until the response head,
//! checked on every input, so a trickle of bytes cannot outlive it) and the body's
//! deadline (from the head, [`Request::body_timeout`]).
//!
//! How far a failed exchange got ([`Progress`]) is the driver's verdict, for the
//! pool's retry decision: nothing written while no byte was ever handed to the
//! adapter; request written once a write was attempted (a buffering writer such
//! as TLS may have sent records before reporting an error); response started once
//! a response byte was read. A connection that closes before any response byte is
//! an I/O failure after the request was written.
//!
//! A `421 Misdirected Request` on HTTP/1.1 is the final answer: HTTP/1.1
//! connections are never coalesced across hosts, so there is no other connection
//! of the call's own host to retry on (the HTTP/2 rule lives in the pool).
//!
//! # Example
//!
//! A GET on a fresh connection, driven by hand:
//!
//! ```
//! # use switchyard_core::http1::{Conn, DriverConfig, Event, Request, RequestBody, TargetForm};
//! # use switchyard_core::{Instant, Reuse};
//!
//! let (parts, ()) = http::Request::get("http://example.com/").body(()).unwrap().into_parts();
//! let conn = Conn::new(DriverConfig::default());
//! let now = Instant::ZERO;
//! let mut driver = conn.start(now, Request::new(&parts, TargetForm::Origin, RequestBody::None)).map_err(|r| r.error)?;
//!
//! let head = driver.poll_transmit().unwrap().to_vec();
//! assert_eq!(head, b"GET / HTTP/1.1\r\nhost: example.com\r\n\r\n");
//! driver.handle_written(now, head.len());
//! assert_eq!(driver.poll_event(), Some(Event::HeadersSent));
//!
//! assert!(driver.wants_read());
//! driver.handle_read(now, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi");
//! let Some(Event::Head(response)) = driver.poll_event() else { panic!() };
//! assert_eq!(response.status(), 200);
//! assert_eq!(driver.poll_event(), Some(Event::Data("hi".into())));
//! assert_eq!(driver.poll_event(), Some(Event::Done(Reuse::Reusable)));
//! let idle = driver.finish().expect("reusable");
//! assert!(idle.needs_probe()); // used once: ask the socket before the next exchange
//! # Ok::<(), switchyard_core::http1::Http1Error>(())
//! ```

use std::collections::VecDeque;
use std::io;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::HeaderMap;

use super::outbox::{Outbox, CARRY_MIN};
use super::{BodyPermission, Exchange, Frame, Http1Error, Limits, RequestBody, TargetForm};
use crate::connection::{CloseReason, Reuse};
use crate::retry::{ExchangeFailureKind, Progress};
use crate::time::Instant;

/// What the driver needs to know about timing and limits. Every default is stated
/// on its field.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct DriverConfig {
    /// Bounds on what the response decoder buffers. Default: [`Limits::default`].
    pub limits: Limits,
    /// How long a body waits for `100 Continue` before it is sent anyway.
    /// Default: 1 s.
    pub expect_continue_timeout: Duration,
    /// Bounds each wait for response bytes (head and body). Default: none.
    pub read_timeout: Option<Duration>,
    /// Bounds each wait for the socket to take request bytes. Default: none.
    pub write_timeout: Option<Duration>,
    /// How much of an abandoned body is read so the connection can be reused.
    /// Default: 64 KiB.
    pub drain_bytes: u64,
    /// How long draining an abandoned body may take. Default: 100 ms.
    pub drain_time: Duration,
    /// After a request write fails (not by timing out), how long the driver reads
    /// for a response the server sent before the connection broke. Default: 500 ms.
    pub early_response_grace: Duration,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            limits: Limits::default(),
            expect_continue_timeout: Duration::from_secs(1),
            read_timeout: None,
            write_timeout: None,
            drain_bytes: 64 * 1024,
            drain_time: Duration::from_millis(100),
            early_response_grace: Duration::from_millis(500),
        }
    }
}

/// What a read that must not wait returned on an idle socket ([`Conn::check`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Peek {
    /// Nothing to read: the socket is open and quiet.
    Quiet,
    /// Bytes nobody asked for.
    Data,
    /// End of stream: the server closed it.
    Eof,
    /// The read failed.
    Error,
}

/// An idle HTTP/1.1 connection: its read buffer and its history. Start an
/// exchange with [`Conn::start`].
#[derive(Debug)]
pub struct Conn {
    buf: BytesMut,
    exchanges: u64,
    config: DriverConfig,
    /// How much the next read asks for ([`Driver::read_buffer`]): 8 KiB,
    /// doubled (up to 64 KiB) while reads fill it — a large body arrives in
    /// large chunks — and back to 8 KiB between exchanges.
    read_size: usize,
    /// The event queue, empty, kept between exchanges so each does not
    /// allocate its own (measured: ~430 instructions per pooled call).
    events: VecDeque<Event>,
    /// The request head's buffer, empty, kept between exchanges likewise.
    head: Vec<u8>,
}

/// A read's size before a large body is seen (and the most an idle
/// connection's buffer keeps).
const READ_MIN: usize = 8 * 1024;
/// The most a read asks for: larger buffers fall out of the CPU's cache and
/// cost more in copying than they save in calls (measured on 64 MiB bodies).
const READ_MAX: usize = 64 * 1024;
/// The most queued events an idle connection's spare queue keeps room for.
const EVENTS_KEPT: usize = 16;
/// The largest request-head buffer an idle connection keeps for its next one.
const HEAD_KEPT: usize = 4 * 1024;

impl Conn {
    /// A connection fresh from its handshake.
    #[must_use]
    pub fn new(config: DriverConfig) -> Conn {
        Conn {
            buf: BytesMut::with_capacity(8 * 1024),
            exchanges: 0,
            config,
            read_size: READ_MIN,
            events: VecDeque::new(),
            head: Vec::new(),
        }
    }

    /// The connection taken over for another protocol (a tunnel): the bytes
    /// read from it that no exchange consumed (none on a fresh connection).
    #[must_use]
    pub fn into_buffered(self) -> BytesMut {
        self.buf
    }

    /// Exchanges completed on this connection.
    #[must_use]
    pub fn exchanges(&self) -> u64 {
        self.exchanges
    }

    /// The settings it runs with.
    #[must_use]
    pub fn config(&self) -> &DriverConfig {
        &self.config
    }

    /// Whether the socket must be asked ([`Conn::check`]) before the next
    /// exchange: a connection that has sat idle after an exchange may have been
    /// closed by the server since. A fresh one has not (no need to ask).
    #[must_use]
    pub fn needs_probe(&self) -> bool {
        self.exchanges > 0
    }

    /// Judges an idle connection from what a read that must not wait returned
    /// (before reuse, and for a periodic sweep): `Err` says why it must close.
    /// Bytes already buffered past the last response condemn it too: they were
    /// never asked for and are never read as another response.
    ///
    /// ```
    /// # use switchyard_core::http1::{Conn, DriverConfig, Peek};
    /// # use switchyard_core::CloseReason;
    /// let conn = Conn::new(DriverConfig::default());
    /// assert_eq!(conn.check(Peek::Quiet), Ok(()));
    /// assert_eq!(conn.check(Peek::Eof), Err(CloseReason::ServerClose));
    /// assert_eq!(conn.check(Peek::Data), Err(CloseReason::Unhealthy));
    /// ```
    pub fn check(&self, peek: Peek) -> Result<(), CloseReason> {
        if !self.buf.is_empty() {
            return Err(CloseReason::BytesAfterResponse);
        }
        match peek {
            Peek::Quiet => Ok(()),
            Peek::Eof => Err(CloseReason::ServerClose),
            Peek::Data | Peek::Error => Err(CloseReason::Unhealthy),
        }
    }

    /// Starts an exchange: validates and encodes the request head. A request the
    /// encoder refuses gives the connection back untouched (nothing was written).
    pub fn start(mut self, now: Instant, request: Request<'_>) -> Result<Driver, Box<Refused>> {
        let events = std::mem::take(&mut self.events);
        let buffer = match std::mem::take(&mut self.head) {
            b if b.capacity() == 0 => Vec::with_capacity(256),
            b => b,
        };
        let (ex, head) = match Exchange::with_buffer(
            request.parts,
            request.form,
            request.body,
            self.config.limits,
            buffer,
        ) {
            Ok(x) => x,
            Err(error) => return Err(Box::new(Refused { conn: self, error })),
        };
        let head_len = head.len() as u64;
        let mut driver = Driver {
            conn: self,
            ex,
            phase: Phase::Sending,
            out: Outbox::new(head),
            body_pending: false,
            head_len,
            written: 0,
            handed_out: false,
            response_started: false,
            eof: false,
            has_body: request.body != RequestBody::None,
            body_bytes: 0,
            events,
            step: None,
            limit: request.deadline,
            body_timeout: request.body_timeout,
            call_deadline: request.call_deadline,
            drain_start: 0,
            write_error: None,
            outcome: None,
        };
        driver.arm_write(now);
        Ok(driver)
    }
}

/// A request [`Conn::start`] refused, with the connection it leaves untouched.
#[derive(Debug)]
pub struct Refused {
    /// The connection, as it was.
    pub conn: Conn,
    /// Why the request cannot be sent.
    pub error: Http1Error,
}

/// One request, as the driver needs it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    parts: &'a http::request::Parts,
    form: TargetForm,
    body: RequestBody,
    deadline: Option<Instant>,
    call_deadline: Option<Instant>,
    body_timeout: Option<Duration>,
}

impl<'a> Request<'a> {
    /// The request's head, its target form and its body framing; no deadline.
    #[must_use]
    pub fn new(parts: &'a http::request::Parts, form: TargetForm, body: RequestBody) -> Request<'a> {
        Request { parts, form, body, deadline: None, call_deadline: None, body_timeout: None }
    }

    /// The call's deadline: the response head must have arrived by then.
    #[must_use]
    pub fn deadline(mut self, deadline: Option<Instant>) -> Request<'a> {
        self.deadline = deadline;
        self
    }

    /// The whole call's deadline: the response body must end by then too
    /// (whichever of this and [`Request::body_timeout`] comes first).
    #[must_use]
    pub fn call_deadline(mut self, deadline: Option<Instant>) -> Request<'a> {
        self.call_deadline = deadline;
        self
    }

    /// How long the response body may take, counted from its head.
    #[must_use]
    pub fn body_timeout(mut self, timeout: Option<Duration>) -> Request<'a> {
        self.body_timeout = timeout;
        self
    }
}

/// What happened, in order. Take them with [`Driver::poll_event`]. Heads compare
/// by status, version and header fields.
#[derive(Clone, Debug)]
pub enum Event {
    /// The request head is written.
    HeadersSent,
    /// The whole request body is written (`bytes` of content).
    BodySent {
        /// Content bytes (before chunked framing).
        bytes: u64,
    },
    /// The final response head. Body events follow.
    Head(http::Response<()>),
    /// Response body bytes.
    Data(Bytes),
    /// The trailer section of a chunked body.
    Trailers(HeaderMap),
    /// The exchange is complete; whether the connection may carry another. Call
    /// [`Driver::finish`].
    Done(Reuse),
    /// The exchange failed. Call [`Driver::finish`] (the connection closes).
    Failed(Failure),
}

impl PartialEq for Event {
    fn eq(&self, other: &Event) -> bool {
        match (self, other) {
            (Event::HeadersSent, Event::HeadersSent) => true,
            (Event::BodySent { bytes: a }, Event::BodySent { bytes: b }) => a == b,
            (Event::Head(a), Event::Head(b)) => {
                a.status() == b.status() && a.version() == b.version() && a.headers() == b.headers()
            }
            (Event::Data(a), Event::Data(b)) => a == b,
            (Event::Trailers(a), Event::Trailers(b)) => a == b,
            (Event::Done(a), Event::Done(b)) => a == b,
            (Event::Failed(a), Event::Failed(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Event {}

/// How an exchange failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Before the response head: the connection or the peer failed. With the
    /// request's facts this is the pool's [`ExchangeFailure`](crate::retry::ExchangeFailure).
    Exchange {
        /// What failed.
        kind: ExchangeFailureKind,
        /// How far the exchange got.
        progress: Progress,
    },
    /// The request cannot be framed, or its body source failed: the caller's
    /// fault, never retried.
    Request {
        /// What was wrong.
        message: String,
    },
    /// After the response head: the body failed.
    Body(BodyFailure),
}

/// How a response body failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BodyFailure {
    /// The read timeout or the body's deadline passed.
    Timeout,
    /// The connection failed.
    Io {
        /// The I/O error's kind.
        kind: io::ErrorKind,
        /// The I/O error's message.
        message: String,
    },
    /// The body's framing is broken.
    Protocol(Http1Error),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Sending,
    AwaitingContinue,
    Head,
    Body,
    Salvage,
    Draining,
    Finished,
}

/// One exchange on one HTTP/1.1 connection. See [`Conn`] and the
/// [driver docs](crate::http1::driver).
#[derive(Debug)]
pub struct Driver {
    conn: Conn,
    ex: Exchange,
    phase: Phase,
    /// Encoded request bytes not yet written.
    out: Outbox,
    /// `out[pos..]` holds body bytes (the next chunk waits until they are written).
    body_pending: bool,
    head_len: u64,
    written: u64,
    /// Bytes were handed to the adapter to write: the request may have left.
    handed_out: bool,
    response_started: bool,
    eof: bool,
    has_body: bool,
    body_bytes: u64,
    events: VecDeque<Event>,
    /// The phase's own timer: write, 100-continue, read, salvage or drain.
    step: Option<Instant>,
    /// The call's deadline (before the head) or the body's (after it).
    limit: Option<Instant>,
    body_timeout: Option<Duration>,
    /// The whole call's deadline, which also bounds the body.
    call_deadline: Option<Instant>,
    drain_start: u64,
    write_error: Option<ExchangeFailureKind>,
    outcome: Option<Result<Reuse, Failure>>,
}

impl Driver {
    /// Bytes to write next, if any. Write what the socket takes and report it
    /// with [`Driver::handle_written`]; the rest stays here.
    pub fn poll_transmit(&mut self) -> Option<&[u8]> {
        if self.phase != Phase::Sending {
            return None;
        }
        let pending = self.out.pending()?;
        self.handed_out = true;
        Some(pending)
    }

    /// Whether the driver wants bytes from the socket now.
    #[must_use]
    pub fn wants_read(&self) -> bool {
        match self.phase {
            Phase::Sending | Phase::AwaitingContinue | Phase::Head | Phase::Salvage | Phase::Draining => {
                !self.eof
            }
            Phase::Body => !self.eof && self.events.is_empty(),
            Phase::Finished => false,
        }
    }

    /// Whether the driver wants the next chunk of the request body now
    /// ([`Driver::handle_body_chunk`]): only once the previous chunk is written
    /// (the first may join the head in one write).
    #[must_use]
    pub fn wants_body(&self) -> bool {
        self.phase == Phase::Sending
            && !self.body_pending
            && self.ex.body_permission() == BodyPermission::Send
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Earliest instant at which [`Driver::handle_timeout`] must run (`None`: no
    /// timer). Read it after every input; calling `handle_timeout` early or twice
    /// is harmless.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.phase == Phase::Finished {
            return None;
        }
        match (self.step, self.limit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether the exchange has ended ([`Event::Done`] or [`Event::Failed`] was
    /// queued).
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.phase == Phase::Finished
    }

    /// The exchange's codec, for its state.
    #[must_use]
    pub fn exchange(&self) -> &Exchange {
        &self.ex
    }

    /// Response bytes read and not yet decoded (bounded by the head and
    /// chunk-line limits past the last read).
    #[must_use]
    pub fn buffered(&self) -> usize {
        self.conn.buf.len()
    }

    /// Request bytes written so far (head and framed body).
    #[must_use]
    pub fn written(&self) -> u64 {
        self.written
    }

    /// `n` bytes of [`Driver::poll_transmit`] reached the socket.
    pub fn handle_written(&mut self, now: Instant, n: usize) {
        if self.phase != Phase::Sending {
            return;
        }
        let n = self.out.advance(n);
        self.written += n as u64;
        if self.written >= self.head_len && self.written - (n as u64) < self.head_len {
            self.events.push_back(Event::HeadersSent);
        }
        if self.expired(now) {
            return;
        }
        if !self.out.is_empty() {
            self.arm_write(now); // each wait for the socket gets the whole timeout
        } else {
            self.body_pending = false;
            self.after_output(now);
        }
    }

    /// Writing failed. A timeout fails the exchange; any other error means the
    /// server may have answered and closed: the driver reads briefly for that
    /// answer ([`DriverConfig::early_response_grace`]).
    pub fn handle_write_error(&mut self, now: Instant, error: &io::Error) {
        if self.phase != Phase::Sending && self.phase != Phase::AwaitingContinue {
            return;
        }
        self.handed_out = true;
        let kind = ExchangeFailureKind::from_io(error);
        if kind == ExchangeFailureKind::Timeout {
            self.fail_exchange(kind);
            return;
        }
        // Whatever the response, part of the request never went out.
        self.ex.abandon_body();
        self.out.clear();
        self.write_error = Some(kind);
        self.phase = Phase::Salvage;
        self.step = Some(now + self.conn.config.early_response_grace);
        if self.eof {
            self.decode(now);
        }
    }

    /// The next chunk of the request body; `last` ends it (an empty last chunk
    /// is fine). Ignored unless [`Driver::wants_body`]. The chunk is copied;
    /// [`Driver::handle_body_bytes`] sends a large one without copying.
    pub fn handle_body_chunk(&mut self, now: Instant, chunk: &[u8], last: bool) {
        if !self.wants_body() {
            return;
        }
        self.body_bytes += chunk.len() as u64;
        let before = self.out.len();
        let mut encoded = self.ex.encode_body(chunk, self.out.buffer());
        if last && encoded.is_ok() {
            encoded = self.ex.finish_body(None, self.out.buffer());
        }
        self.body_encoded(now, encoded, before);
    }

    /// [`Driver::handle_body_chunk`] for a chunk the caller owns as [`Bytes`]:
    /// one of 16 KiB or more is written from the caller's buffer as it is
    /// (only its framing is copied), so a large upload costs no copy here.
    pub fn handle_body_bytes(&mut self, now: Instant, chunk: Bytes, last: bool) {
        if chunk.len() < CARRY_MIN {
            return self.handle_body_chunk(now, &chunk, last);
        }
        if !self.wants_body() {
            return;
        }
        self.body_bytes += chunk.len() as u64;
        let before_len = self.out.len();
        let (mut before, mut after) = (Vec::new(), Vec::new());
        let mut encoded = self.ex.frame_body(chunk.len(), &mut before, &mut after);
        if last && encoded.is_ok() {
            encoded = self.ex.finish_body(None, &mut after);
        }
        if encoded.is_ok() {
            self.out.hold(&before, chunk, &after);
        }
        self.body_encoded(now, encoded, before_len);
    }

    fn body_encoded(&mut self, now: Instant, encoded: Result<(), Http1Error>, before: usize) {
        if let Err(e) = encoded {
            self.fail(Failure::Request { message: e.to_string() });
            return;
        }
        if !self.out.is_empty() {
            self.body_pending |= self.out.len() > before;
            self.arm_write(now);
        } else {
            self.after_output(now);
        }
    }

    /// The request body's source failed: the request cannot be completed.
    pub fn handle_body_error(&mut self, _now: Instant, message: &str) {
        if matches!(self.phase, Phase::Sending | Phase::AwaitingContinue) {
            self.fail(Failure::Request { message: format!("reading the request body failed: {message}") });
        }
    }

    /// Bytes read from the socket.
    pub fn handle_read(&mut self, now: Instant, data: &[u8]) {
        if self.phase == Phase::Finished {
            return;
        }
        // Checked before the bytes count: a busy stream of bytes cannot outlive
        // the call.
        if self.expired(now) {
            return;
        }
        if data.is_empty() {
            return;
        }
        self.response_started = true;
        self.conn.buf.extend_from_slice(data);
        if matches!(self.phase, Phase::Head | Phase::Body) {
            self.arm_read(now);
        }
        self.decode(now);
    }

    /// The read buffer, for a driver that reads from the socket straight into
    /// it rather than through [`Driver::handle_read`] (one copy fewer), with
    /// room for the next read reserved (8 KiB, more while a large body
    /// streams). Append at the end only, then report the count with
    /// [`Driver::handle_appended`].
    ///
    /// ```
    /// # use switchyard_core::http1::{Conn, DriverConfig, Event, Request, RequestBody, TargetForm};
    /// # use switchyard_core::Instant;
    /// let (parts, ()) = http::Request::get("http://example.com/").body(()).unwrap().into_parts();
    /// let request = Request::new(&parts, TargetForm::Origin, RequestBody::None);
    /// let mut driver = Conn::new(DriverConfig::default()).start(Instant::ZERO, request).map_err(|r| r.error)?;
    /// let n = driver.poll_transmit().unwrap().len();
    /// driver.handle_written(Instant::ZERO, n);
    /// let wire = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi";
    /// let buf = driver.read_buffer();
    /// assert!(buf.capacity() - buf.len() >= 8 * 1024);
    /// buf.extend_from_slice(wire); // a socket read into the spare capacity
    /// driver.handle_appended(Instant::ZERO, wire.len());
    /// assert_eq!(driver.poll_event(), Some(Event::HeadersSent));
    /// assert!(matches!(driver.poll_event(), Some(Event::Head(_))));
    /// assert_eq!(driver.poll_event(), Some(Event::Data("hi".into())));
    /// # Ok::<(), switchyard_core::http1::Http1Error>(())
    /// ```
    pub fn read_buffer(&mut self) -> &mut BytesMut {
        let size = self.conn.read_size;
        self.conn.buf.reserve(size);
        &mut self.conn.buf
    }

    /// `n` bytes were read into [`Driver::read_buffer`]: as
    /// [`Driver::handle_read`] with those bytes.
    pub fn handle_appended(&mut self, now: Instant, n: usize) {
        if n >= self.conn.read_size && self.conn.read_size < READ_MAX {
            // The socket had more than was asked for: ask for more next time.
            self.conn.read_size *= 2;
        }
        if self.phase == Phase::Finished || self.expired(now) || n == 0 {
            return;
        }
        self.response_started = true;
        if matches!(self.phase, Phase::Head | Phase::Body) {
            self.arm_read(now);
        }
        self.decode(now);
    }

    /// The socket reached end of stream.
    pub fn handle_eof(&mut self, now: Instant) {
        if self.phase == Phase::Finished || self.eof {
            return;
        }
        self.eof = true;
        if self.expired(now) {
            return;
        }
        self.decode(now);
    }

    /// Reading failed.
    pub fn handle_read_error(&mut self, now: Instant, error: &io::Error) {
        let kind = ExchangeFailureKind::from_io(error);
        match self.phase {
            // The write side reports the connection's failure.
            Phase::Sending => self.eof = true,
            Phase::AwaitingContinue | Phase::Head => self.fail_exchange(kind),
            Phase::Salvage => self.fail_salvage(),
            Phase::Body => self.fail(Failure::Body(match kind {
                ExchangeFailureKind::Timeout => BodyFailure::Timeout,
                _ => BodyFailure::Io { kind: error.kind(), message: error.to_string() },
            })),
            Phase::Draining => self.end(Reuse::Retire(CloseReason::UnreadBody)),
            Phase::Finished => {}
        }
        let _ = now;
    }

    /// Time passed: acts on every deadline `<= now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.expired(now) {
            return;
        }
        if self.step.is_none_or(|t| t > now) {
            return;
        }
        self.step = None;
        match self.phase {
            Phase::Sending | Phase::Head => self.fail_exchange(ExchangeFailureKind::Timeout),
            Phase::AwaitingContinue => {
                self.ex.continue_timed_out();
                self.phase = Phase::Sending;
                self.after_output(now);
            }
            Phase::Body => self.fail(Failure::Body(BodyFailure::Timeout)),
            Phase::Salvage => self.fail_salvage(),
            Phase::Draining => self.end(Reuse::Retire(CloseReason::UnreadBody)),
            Phase::Finished => {}
        }
    }

    /// The caller dropped the response body before its end: read on (bounded)
    /// so the connection can be reused. Queued data is discarded. Before the
    /// head there is nothing to drain: the exchange fails
    /// ([`Failure::Request`]), and the connection closes unless nothing was
    /// written yet.
    pub fn abandon(&mut self, now: Instant) {
        match self.phase {
            Phase::Body => {
                self.events.retain(|e| !matches!(e, Event::Data(_)));
                self.phase = Phase::Draining;
                self.drain_start = self.ex.decoder().body_received();
                self.limit = None;
                self.step = Some(now + self.conn.config.drain_time);
                self.decode(now);
            }
            Phase::Finished | Phase::Draining => {}
            // Before the head: the caller gave up on the exchange. Nothing
            // written leaves the connection as it was; otherwise it closes.
            _ => self
                .fail(Failure::Request { message: "the exchange was abandoned before its response".into() }),
        }
    }

    /// Ends the exchange: the idle connection when it may carry another, or
    /// why it must close. A request refused before any byte was written leaves
    /// the connection as it was; an exchange dropped before its end closes it.
    pub fn finish(self) -> Result<Conn, CloseReason> {
        let mut conn = self.conn;
        match self.outcome {
            Some(Ok(Reuse::Reusable)) => {
                conn.exchanges += 1;
                // An idle connection keeps a small read buffer (reused by the
                // next exchange without allocating); a large body's goes.
                conn.read_size = READ_MIN;
                if conn.buf.is_empty() && conn.buf.capacity() > READ_MIN {
                    conn.buf = BytesMut::new();
                }
                let mut events = self.events;
                if events.capacity() <= EVENTS_KEPT {
                    events.clear();
                    conn.events = events;
                }
                let head = self.out.into_head_buffer();
                if head.capacity() <= HEAD_KEPT {
                    conn.head = head;
                }
                Ok(conn)
            }
            Some(Ok(Reuse::Retire(reason))) => Err(reason),
            Some(Err(Failure::Request { .. })) if !self.handed_out => Ok(conn),
            Some(Err(Failure::Request { .. })) => Err(CloseReason::RequestBodyIncomplete),
            Some(Err(_)) => Err(CloseReason::Failure),
            None if self.phase == Phase::Body => Err(CloseReason::UnreadBody),
            None => Err(CloseReason::Failure),
        }
    }

    /// Whether the exchange ended in a switch of protocols (`101 Switching
    /// Protocols`, or a `2xx` to `CONNECT`): the connection is no longer
    /// HTTP/1.1, and belongs to the caller ([`Driver::take_upgraded`]);
    /// [`Driver::finish`] says [`CloseReason::Exclusive`].
    #[must_use]
    pub fn is_upgraded(&self) -> bool {
        matches!(self.outcome, Some(Ok(Reuse::Retire(CloseReason::Exclusive))))
    }

    /// After an upgrade, takes the bytes that arrived past the response head:
    /// the new protocol's first bytes, to be read before anything the socket
    /// gives next. `None` when the exchange did not upgrade.
    ///
    /// ```
    /// # use switchyard_core::http1::{Conn, DriverConfig, Request, RequestBody, TargetForm};
    /// # use switchyard_core::Instant;
    /// let parts = http::Request::get("http://a.test/chat")
    ///     .header("connection", "upgrade")
    ///     .header("upgrade", "websocket")
    ///     .body(())
    ///     .unwrap()
    ///     .into_parts()
    ///     .0;
    /// let now = Instant::ZERO;
    /// let request = Request::new(&parts, TargetForm::Origin, RequestBody::None);
    /// let mut driver = Conn::new(DriverConfig::default()).start(now, request).unwrap();
    /// while let Some(out) = driver.poll_transmit() {
    ///     let n = out.len();
    ///     driver.handle_written(now, n);
    /// }
    /// driver.handle_read(now, b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x02hi");
    /// assert!(driver.is_upgraded());
    /// assert_eq!(&driver.take_upgraded().unwrap()[..], b"\x81\x02hi");
    /// ```
    pub fn take_upgraded(&mut self) -> Option<BytesMut> {
        self.is_upgraded().then(|| std::mem::take(&mut self.conn.buf))
    }

    fn progress(&self) -> Progress {
        if self.response_started {
            Progress::ResponseStarted
        } else if self.handed_out {
            Progress::RequestWritten
        } else {
            Progress::NothingWritten
        }
    }

    fn arm_write(&mut self, now: Instant) {
        self.step = self.conn.config.write_timeout.map(|t| now + t);
    }

    fn arm_read(&mut self, now: Instant) {
        self.step = self.conn.config.read_timeout.map(|t| now + t);
    }

    /// The call's or the body's deadline passed: fail, and say so.
    fn expired(&mut self, now: Instant) -> bool {
        if self.limit.is_none_or(|l| l > now) {
            return false;
        }
        match self.phase {
            Phase::Body => self.fail(Failure::Body(BodyFailure::Timeout)),
            Phase::Finished | Phase::Draining => return false,
            _ => self.fail_exchange(ExchangeFailureKind::Timeout),
        }
        true
    }

    /// Everything encoded so far is written: what comes next.
    fn after_output(&mut self, now: Instant) {
        if self.phase != Phase::Sending {
            return;
        }
        match self.ex.body_permission() {
            BodyPermission::Send => self.step = None, // the caller's body paces itself
            BodyPermission::AwaitContinue => {
                self.phase = Phase::AwaitingContinue;
                self.step = Some(now + self.conn.config.expect_continue_timeout);
                self.decode(now);
            }
            BodyPermission::Done | BodyPermission::Withheld => {
                if self.has_body && self.ex.body_sent() {
                    self.events.push_back(Event::BodySent { bytes: self.body_bytes });
                }
                self.phase = Phase::Head;
                self.arm_read(now);
                self.decode(now);
            }
        }
    }

    /// Decodes what the buffer holds, as far as the phase allows.
    fn decode(&mut self, now: Instant) {
        loop {
            let watching = matches!(self.phase, Phase::Sending | Phase::AwaitingContinue | Phase::Salvage);
            if self.phase == Phase::Finished {
                return;
            }
            // While the request is going out, end of stream is not yet an answer:
            // the write side (or the head phase after it) reports it.
            let eof = self.eof && !(self.phase == Phase::Sending);
            let frame = match self.ex.decode(&mut self.conn.buf, eof) {
                Ok(Some(frame)) => frame,
                Ok(None) => {
                    if self.phase == Phase::Salvage && self.eof {
                        self.fail_salvage();
                    }
                    return;
                }
                Err(e) => {
                    self.decode_error(e);
                    return;
                }
            };
            match frame {
                Frame::Informational(_) => {
                    if self.phase == Phase::AwaitingContinue
                        && self.ex.body_permission() == BodyPermission::Send
                    {
                        self.phase = Phase::Sending;
                        self.step = None;
                        return;
                    }
                }
                Frame::Head(head) => {
                    let unsent = !self.out.is_empty()
                        || (!self.ex.body_sent() && self.ex.body_permission() != BodyPermission::Withheld);
                    if watching && unsent {
                        // An early answer: the rest of the request is not sent.
                        self.ex.abandon_body();
                    }
                    self.out.clear();
                    self.phase = Phase::Body;
                    self.limit = match (self.body_timeout.map(|t| now + t), self.call_deadline) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    self.arm_read(now);
                    self.events.push_back(Event::Head(head));
                }
                Frame::Data(data) => {
                    if self.phase == Phase::Draining {
                        let drained = self.ex.decoder().body_received() - self.drain_start;
                        if drained > self.conn.config.drain_bytes {
                            self.end(Reuse::Retire(CloseReason::UnreadBody));
                            return;
                        }
                    } else {
                        self.events.push_back(Event::Data(data));
                    }
                }
                Frame::Trailers(t) => {
                    if self.phase != Phase::Draining {
                        self.events.push_back(Event::Trailers(t));
                    }
                }
                Frame::End | Frame::Upgraded => {
                    let reuse = self.ex.reuse();
                    self.end(reuse);
                    return;
                }
            }
        }
    }

    fn decode_error(&mut self, e: Http1Error) {
        match self.phase {
            Phase::Body => self.fail(Failure::Body(BodyFailure::Protocol(e))),
            Phase::Draining => self.end(Reuse::Retire(CloseReason::UnreadBody)),
            Phase::Salvage => self.fail_salvage(),
            _ => {
                let (kind, progress) = classify(&e);
                self.fail(Failure::Exchange { kind, progress });
            }
        }
    }

    fn fail_exchange(&mut self, kind: ExchangeFailureKind) {
        let progress = self.progress();
        self.fail(Failure::Exchange { kind, progress });
    }

    fn fail_salvage(&mut self) {
        let kind = self.write_error.take().unwrap_or(ExchangeFailureKind::Timeout);
        self.fail(Failure::Exchange { kind, progress: Progress::RequestWritten.max(self.progress()) });
    }

    fn fail(&mut self, failure: Failure) {
        self.phase = Phase::Finished;
        self.step = None;
        self.out.clear();
        self.events.push_back(Event::Failed(failure.clone()));
        self.outcome = Some(Err(failure));
    }

    fn end(&mut self, reuse: Reuse) {
        self.phase = Phase::Finished;
        self.step = None;
        self.events.push_back(Event::Done(reuse));
        self.outcome = Some(Ok(reuse));
    }
}

/// A codec failure before the response head: a connection that closed before any
/// byte is an I/O failure after the request was written; anything else is a
/// protocol failure once the response started.
fn classify(e: &Http1Error) -> (ExchangeFailureKind, Progress) {
    match e {
        Http1Error::EmptyResponse => (
            ExchangeFailureKind::Io {
                kind: io::ErrorKind::UnexpectedEof,
                message: "the connection closed before any response byte".into(),
            },
            Progress::RequestWritten,
        ),
        other => (ExchangeFailureKind::Protocol { message: other.to_string() }, Progress::ResponseStarted),
    }
}
