//! HTTP/1.1 over one connection, blocking. The core's connection driver
//! ([`switchyard_core::http1::Driver`]) decides everything — sequencing, the
//! 100-continue wait, early responses, timeouts, draining, keep-alive, how far a
//! failure got; this module only moves its bytes with blocking socket calls
//! bounded by the driver's next deadline, and feeds what happened back with the
//! time.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use switchyard_common::exchange::{
    before_head, body_kind, body_step, stale, stale_after, Attempted, BeforeHead, BodyStep,
};
use switchyard_common::{BodyError, Error, Hub};
use switchyard_core::handshake::{Handshake, ProxyHandshake};
use switchyard_core::http1::{self, Driver, TargetForm};
use switchyard_core::pool::RequestFacts;
use switchyard_core::{CallId, ConnectError, ConnectionId};

use crate::body::{Body, Kind};
use crate::driver::{H1Conn, IoState, Shared};
use crate::stream::{peek, read_available, Stream, Timeouts};

/// A connection's socket, its current socket timeouts, and where reads land.
pub(crate) struct Wire {
    pub(crate) stream: Stream,
    timeouts: Timeouts,
    /// Where reads land before the driver takes them (no zeroing per read).
    scratch: Box<[u8]>,
    /// The last write took nothing before its time slice ran out: look for an
    /// early answer before writing on.
    stalled: bool,
}

impl Wire {
    pub(crate) fn new(stream: Stream) -> Wire {
        Wire {
            stream,
            timeouts: Timeouts::default(),
            scratch: vec![0u8; 16 * 1024].into_boxed_slice(),
            stalled: false,
        }
    }
}

pub(crate) struct Request<'a> {
    pub(crate) parts: &'a http::request::Parts,
    pub(crate) body: &'a mut Body,
    pub(crate) form: TargetForm,
    pub(crate) facts: RequestFacts,
    /// The call's deadline (until the response head).
    pub(crate) deadline: Option<std::time::Instant>,
    /// When the response body must be complete, counted from its head.
    pub(crate) body_timeout: Option<Duration>,
}

/// How often a blocked request-body write stops to look for an early response.
const WATCH_SLICE: Duration = Duration::from_millis(50);

/// Socket timeouts are rounded up to this, so a deadline re-armed on every read
/// does not cost a system call per read (the driver fires at most this late).
const GRAIN: Duration = Duration::from_millis(10);

/// The request body, as the driver asks for it.
enum Source<'a> {
    None,
    Full(Option<Bytes>),
    Reader(&'a mut (dyn Read + Send)),
}

impl Source<'_> {
    fn of(body: &mut Body) -> Source<'_> {
        match &mut body.kind {
            Kind::Empty => Source::Full(Some(Bytes::new())),
            Kind::Full(b) => Source::Full(Some(b.clone())),
            Kind::Reader(r) => Source::Reader(&mut **r),
        }
    }

    /// Gives the driver the next chunk (blocking on a reader).
    fn feed(&mut self, hub: &Hub<IoState>, driver: &mut Driver, scratch: &mut [u8]) {
        match self {
            Source::None => {}
            Source::Full(b) => driver.handle_body_chunk(hub.now(), &b.take().unwrap_or_default(), true),
            Source::Reader(r) => match r.read(scratch) {
                Ok(0) => driver.handle_body_chunk(hub.now(), &[], true),
                Ok(n) => driver.handle_body_chunk(hub.now(), &scratch[..n], false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => driver.handle_body_error(hub.now(), &e.to_string()),
            },
        }
    }
}

/// How long a blocking socket call may wait: until the driver's next deadline
/// (rounded up to [`GRAIN`]), at most `cap`.
fn wait_for(hub: &Hub<IoState>, driver: &Driver, cap: Option<Duration>) -> Option<Duration> {
    let left = driver.poll_timeout().map(|t| {
        let d = t.saturating_duration_since(hub.now());
        let grains = d.as_nanos().div_ceil(GRAIN.as_nanos()).max(1);
        GRAIN * u32::try_from(grains).unwrap_or(u32::MAX)
    });
    match (left, cap) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted)
}

/// One blocking I/O step for `driver`: fires its due timer, or looks for an
/// early answer while the request goes out, or feeds the body, writes, or
/// reads — each bounded by the driver's next deadline.
fn pump(hub: &Hub<IoState>, wire: &mut Wire, driver: &mut Driver, body: &mut Source<'_>) {
    if driver.poll_timeout().is_some_and(|t| t <= hub.now()) {
        driver.handle_timeout(hub.now());
        return;
    }
    // Between body chunks, and whenever the socket stopped taking bytes, look
    // at what the server sent so far, without waiting: an early final response
    // stops the upload. (A request without a body is written straight away.)
    let between_chunks = driver.wants_body() && driver.poll_transmit().is_none();
    if (wire.stalled || between_chunks) && driver.wants_read() {
        wire.stalled = false;
        match read_available(&mut wire.stream, &mut wire.scratch) {
            Ok(Some(0)) => return driver.handle_eof(hub.now()),
            Ok(Some(n)) => return driver.handle_read(hub.now(), &wire.scratch[..n]),
            Ok(None) => {}
            Err(e) => return driver.handle_read_error(hub.now(), &e),
        }
    }
    // A reader's next chunk only once the head (and the last chunk) went out.
    if driver.wants_body() && (driver.poll_transmit().is_none() || matches!(body, Source::Full(_))) {
        return body.feed(hub, driver, &mut wire.scratch);
    }
    if driver.poll_transmit().is_some() {
        let slice = if driver.wants_read() { Some(WATCH_SLICE) } else { None };
        let wait = wait_for(hub, driver, slice);
        if let Err(e) = wire.timeouts.write(wire.stream.tcp(), wait) {
            return driver.handle_write_error(hub.now(), &e);
        }
        let Some(out) = driver.poll_transmit() else { return };
        match wire.stream.write(out).and_then(|n| wire.stream.flush().map(|()| n)) {
            Ok(0) => driver.handle_write_error(hub.now(), &io::ErrorKind::WriteZero.into()),
            Ok(n) => driver.handle_written(hub.now(), n),
            Err(e) if is_timeout(&e) => wire.stalled = true, // the timer (or the next watch) decides
            Err(e) => driver.handle_write_error(hub.now(), &e),
        }
        return;
    }
    if driver.wants_read() {
        if let Err(e) = wire.timeouts.read(wire.stream.tcp(), wait_for(hub, driver, None)) {
            return driver.handle_read_error(hub.now(), &e);
        }
        match wire.stream.read(&mut wire.scratch) {
            Ok(0) => driver.handle_eof(hub.now()),
            Ok(n) => driver.handle_read(hub.now(), &wire.scratch[..n]),
            Err(e) if is_timeout(&e) => {} // the timer decides
            Err(e) => driver.handle_read_error(hub.now(), &e),
        }
        return;
    }
    // Nothing to move: only time can change anything.
    if let Some(d) = wait_for(hub, driver, None) {
        std::thread::sleep(d);
    }
}

/// Runs one exchange. On success the response's body owns the connection until
/// it ends.
pub(crate) fn exchange(
    shared: &Arc<Shared>,
    call: CallId,
    connection: ConnectionId,
    conn: Option<Box<H1Conn>>,
    req: Request<'_>,
) -> Result<http::Response<crate::ResponseBody>, Attempted> {
    let facts = req.facts;
    let Some(mut conn) = conn else {
        return Err(stale("the connection's socket was already closed", facts));
    };
    // An idle connection may have been closed by the server while pooled (or
    // sent something nobody asked for): ask before writing, so a request never
    // goes out on a dead connection (and the core retries on another, nothing
    // having been sent).
    if conn.conn.needs_probe() {
        if let Err(reason) = conn.conn.check(peek(&mut conn.wire.stream)) {
            return Err(stale_after(reason, facts));
        }
    }
    let hub = &shared.hub;
    let request = http1::Request::new(req.parts, req.form, body_kind(req.body.len()))
        .deadline(req.deadline.map(|d| hub.from_std(d)))
        .body_timeout(req.body_timeout);
    let H1Conn { mut wire, conn } = *conn;
    let mut driver = match conn.start(hub.now(), request) {
        Ok(d) => d,
        Err(refused) => {
            shared.release_h1(call, connection, Ok(H1Conn { wire, conn: refused.conn }));
            return Err(Attempted::Fatal(Error::InvalidRequest(refused.error.to_string())));
        }
    };
    let mut source = Source::of(req.body);
    loop {
        match before_head(hub, call, &mut driver, facts) {
            BeforeHead::NeedIo => pump(hub, &mut wire, &mut driver, &mut source),
            BeforeHead::Head(head) => {
                let (parts, ()) = head.into_parts();
                let body = H1Body {
                    shared: Arc::clone(shared),
                    call,
                    connection,
                    live: Some((wire, driver)),
                    complete: false,
                    trailers: None,
                };
                return Ok(http::Response::from_parts(parts, crate::ResponseBody::h1(body)));
            }
            BeforeHead::Failed(failure) => return Err(Attempted::Failed(failure)),
            BeforeHead::Refused(why) => {
                shared.release_h1(call, connection, driver.finish().map(|conn| H1Conn { wire, conn }));
                return Err(Attempted::Fatal(Error::InvalidRequest(why)));
            }
        }
    }
}

/// An HTTP/1.1 response body: the driver's body events, read on demand; at the
/// end the connection goes back (or closes) per the driver's decision.
pub(crate) struct H1Body {
    shared: Arc<Shared>,
    call: CallId,
    connection: ConnectionId,
    live: Option<(Wire, Driver)>,
    complete: bool,
    pub(crate) trailers: Option<http::HeaderMap>,
}

impl H1Body {
    pub(crate) fn chunk(&mut self) -> Result<Option<Bytes>, BodyError> {
        loop {
            let Some((wire, driver)) = self.live.as_mut() else { return Ok(None) };
            match body_step(driver, &mut self.trailers) {
                BodyStep::Data(b) => return Ok(Some(b)),
                // Released by `finish`, after the body-end event.
                BodyStep::End => {
                    self.complete = true;
                    return Ok(None);
                }
                BodyStep::Failed(e) => {
                    self.finish();
                    return Err(e);
                }
                BodyStep::NeedIo => pump(&self.shared.hub, wire, driver, &mut Source::None),
            }
        }
    }

    /// Gives the connection back (or closes it) per the driver's decision.
    pub(crate) fn finish(&mut self) {
        if let Some((wire, driver)) = self.live.take() {
            self.shared.release_h1(
                self.call,
                self.connection,
                driver.finish().map(|conn| H1Conn { wire, conn }),
            );
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.live.is_none()
    }
}

impl Drop for H1Body {
    /// Dropped before its end: the driver drains (bounded: 64 KiB or 100 ms, on
    /// this thread) so the connection can be reused, or decides to close it.
    fn drop(&mut self) {
        if let Some((wire, driver)) = self.live.as_mut() {
            if !self.complete {
                driver.abandon(self.shared.hub.now());
            }
            while !driver.is_finished() {
                pump(&self.shared.hub, wire, driver, &mut Source::None);
            }
        }
        self.finish();
    }
}

/// Runs a proxy handshake (the core's state machine) on `tcp`: writes what it
/// asks, reads what the proxy answers, until the tunnel is open. The socket's
/// timeouts bound each step.
pub(crate) fn proxy_handshake(tcp: &mut TcpStream, mut hs: ProxyHandshake) -> Result<(), ConnectError> {
    let io = |e: io::Error| ConnectError::from_io(&e);
    let mut buf = BytesMut::with_capacity(512);
    let mut scratch = [0u8; 512];
    let mut eof = false;
    loop {
        while let Some(out) = hs.poll_transmit() {
            tcp.write_all(&out).map_err(io)?;
        }
        if hs.handle_read(&mut buf, eof)? == Handshake::Done {
            return Ok(());
        }
        if !hs.wants_write() {
            match tcp.read(&mut scratch).map_err(io)? {
                0 => eof = true,
                n => buf.extend_from_slice(&scratch[..n]),
            }
        }
    }
}
