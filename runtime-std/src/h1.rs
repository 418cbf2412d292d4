//! HTTP/1.1 over one connection, blocking. The core's connection driver
//! ([`switchyard_core::http1::Driver`]) decides everything — sequencing, the
//! 100-continue wait, early responses, timeouts, draining, keep-alive, how far a
//! failure got; this module only moves its bytes with blocking socket calls
//! bounded by the driver's next deadline, and feeds what happened back with the
//! time.

use std::io::{self, Read, Write};

use std::time::Duration;

use bytes::Bytes;
use switchyard_common::engine::{self, H1Exchange, Next};
use switchyard_common::exchange::Attempted;
use switchyard_common::{BodyError, Hub};
use switchyard_core::http1::Driver;

use crate::body::{Body, Kind};
use crate::shared::{IoState, Shared};
use crate::stream::{read_available, read_direct, Stream, Timeouts};

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
            timeouts: Timeouts::fresh(),
            scratch: vec![0u8; 16 * 1024].into_boxed_slice(),
            stalled: false,
        }
    }
}

/// A buffered body up to this size goes out in one write with the head.
const JOIN_LIMIT: usize = 16 * 1024;

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
            Kind::Stream(r) => Source::Reader(&mut **r),
        }
    }

    /// Gives the driver the next chunk (blocking on a reader).
    fn feed(&mut self, hub: &Hub<IoState>, driver: &mut Driver, scratch: &mut [u8]) {
        match self {
            Source::None => {}
            Source::Full(b) => driver.handle_body_bytes(hub.now(), b.take().unwrap_or_default(), true),
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
    // Before every write but the first, between body chunks, and whenever the
    // socket stopped taking bytes, look at what the server sent so far,
    // without waiting: an early final response stops the upload. (A request
    // that fits one write goes out at once.)
    let between_chunks = driver.wants_body() && driver.poll_transmit().is_none();
    let writing_on = driver.written() > 0 && driver.poll_transmit().is_some();
    let flushing = wire.stream.wants_flush();
    if (wire.stalled || between_chunks || writing_on || flushing) && driver.wants_read() {
        wire.stalled = false;
        match read_available(&mut wire.stream, &mut wire.scratch) {
            Ok(Some(0)) => return driver.handle_eof(hub.now()),
            Ok(Some(n)) => return driver.handle_read(hub.now(), &wire.scratch[..n]),
            Ok(None) => {}
            Err(e) => return driver.handle_read_error(hub.now(), &e),
        }
    }
    // The next chunk only once the head (and the last chunk) went out, so an
    // answer to the head is seen before body bytes race it; a small buffered
    // body joins the head in one write.
    let small = matches!(body, Source::Full(Some(b)) if b.len() <= JOIN_LIMIT);
    if driver.wants_body() && (driver.poll_transmit().is_none() || small) {
        return body.feed(hub, driver, &mut wire.scratch);
    }
    if driver.poll_transmit().is_some() || flushing {
        let slice = if driver.wants_read() { Some(WATCH_SLICE) } else { None };
        let wait = wait_for(hub, driver, slice);
        if let Err(e) = wire.timeouts.write(wire.stream.tcp(), wait) {
            return driver.handle_write_error(hub.now(), &e);
        }
        // The next bytes, or (TLS) the records still buffered: each step is
        // preceded by a look for an early answer once the request is under way.
        let step = match driver.poll_transmit() {
            Some(out) => wire.stream.write(out),
            None => wire.stream.flush().map(|()| 0),
        };
        match step {
            Ok(0) if driver.poll_transmit().is_some() => {
                driver.handle_write_error(hub.now(), &io::ErrorKind::WriteZero.into());
            }
            Ok(n) => driver.handle_written(hub.now(), n),
            // The timer (or the next look for an early answer) decides.
            Err(e) if is_timeout(&e) => wire.stalled = true,
            Err(e) => driver.handle_write_error(hub.now(), &e),
        }
        return;
    }
    if driver.wants_read() {
        if let Err(e) = wire.timeouts.read(wire.stream.tcp(), wait_for(hub, driver, None)) {
            return driver.handle_read_error(hub.now(), &e);
        }
        match read_direct(&mut wire.stream, &mut wire.scratch) {
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

/// Runs a started exchange to its response head, feeding it `body` (blocking).
/// On success the response's body owns the connection until it ends.
pub(crate) fn exchange(
    exchange: H1Exchange<Shared>,
    body: &mut Body,
) -> Result<http::Response<crate::ResponseBody>, Attempted> {
    let mut source = Source::of(body);
    let head = exchange.run_blocking(|sh, wire, driver| pump(&sh.hub, wire, driver, &mut source))?;
    Ok(head.map(|b| crate::ResponseBody::h1(H1Body(b))))
}

/// An HTTP/1.1 response body: the driver's body events, read on demand; at the
/// end the connection goes back (or closes) per the driver's decision.
pub(crate) struct H1Body(pub(crate) engine::H1Body<Shared>);

impl H1Body {
    /// After `101`: the connection, out of the pool, with the bytes read
    /// past the head.
    pub(crate) fn take_upgraded(&mut self) -> Option<crate::Upgraded> {
        let (wire, early) = self.0.take_upgraded()?;
        Some(crate::Upgraded::new(wire.stream, early))
    }

    pub(crate) fn chunk(&mut self) -> Result<Option<Bytes>, BodyError> {
        loop {
            match self.0.next_chunk() {
                Next::Ready(r) => return r,
                Next::Io(sh, wire, driver) => pump(&sh.hub, wire, driver, &mut Source::None),
            }
        }
    }
}

impl Drop for H1Body {
    /// Dropped before its end: the driver drains (bounded: 64 KiB or 100 ms, on
    /// this thread) so the connection can be reused, or decides to close it.
    fn drop(&mut self) {
        let Some(mut drain) = self.0.abandon() else { return };
        while !drain.driver.is_finished() {
            pump(&drain.shared.hub, &mut drain.wire, &mut drain.driver, &mut Source::None);
        }
        drain.release();
    }
}
