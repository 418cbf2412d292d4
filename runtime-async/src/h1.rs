//! HTTP/1.1 over one connection. The core's connection driver
//! ([`switchyard_core::http1::Driver`]) decides everything — sequencing, the
//! 100-continue wait, early responses, timeouts, draining, keep-alive, how far a
//! failure got; this module only moves its bytes: it polls the socket's read and
//! write sides, the caller's body and the driver's timer together, and feeds what
//! happened back with the time.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use switchyard_common::engine::{self, H1Exchange, Next, Step};
use switchyard_common::exchange::Attempted;
use switchyard_common::{BodyError, Hub};
use switchyard_core::http1::{Driver, Peek};
use switchyard_core::CloseReason;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::body::{Body, Kind};
use crate::runtime::{Io, Runtime};
use crate::shared::{IoState, Shared};

/// An idle HTTP/1.1 connection: its socket and the core's view of it.
pub(crate) type H1Conn = engine::H1Conn<Wire>;

/// Asks an idle connection's socket, without waiting, what it holds; the
/// core judges ([`http1::Conn::check`]). A read that would wait registers a
/// no-op waker, which the next real read replaces.
pub(crate) fn check(conn: &mut H1Conn) -> Result<(), CloseReason> {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut scratch = [0u8; 512];
    let mut read = tokio::io::ReadBuf::new(&mut scratch);
    let peek = match Pin::new(&mut conn.wire.io).poll_read(&mut cx, &mut read) {
        Poll::Pending => Peek::Quiet,
        Poll::Ready(Ok(())) if read.filled().is_empty() => Peek::Eof,
        Poll::Ready(Ok(())) => Peek::Data,
        Poll::Ready(Err(_)) => Peek::Error,
    };
    conn.conn.check(peek)
}

/// An HTTP/1.1 connection's socket side: the stream, and whether written
/// bytes still await a flush (TLS buffers records). Reads land in the core
/// driver's own buffer ([`http1::Driver::read_buffer`]).
pub(crate) struct Wire {
    io: Io,
    dirty: bool,
}

impl Wire {
    pub(crate) fn new(io: Io) -> Wire {
        Wire { io, dirty: false }
    }

    /// The stream, for a caller that takes the connection over (an upgrade,
    /// a tunnel).
    pub(crate) fn into_io(self) -> Io {
        self.io
    }
}

/// The request body, as the driver asks for it.
enum Source<'a> {
    None,
    Full(Option<Bytes>),
    Stream(&'a mut crate::body::Stream),
}

impl Source<'_> {
    fn of(body: &mut Body) -> Source<'_> {
        match &mut body.kind {
            Kind::Empty => Source::Full(Some(Bytes::new())),
            Kind::Full(b) => Source::Full(Some(b.clone())),
            Kind::Stream(rx) => Source::Stream(rx),
        }
    }

    /// The next chunk and whether it is the last, or the body's failure.
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Result<(Bytes, bool), crate::body::BoxError>> {
        match self {
            Source::None => Poll::Pending,
            Source::Full(b) => Poll::Ready(Ok((b.take().unwrap_or_default(), true))),
            Source::Stream(rx) => rx.poll_chunk(cx).map(|c| match c {
                Some(Ok(chunk)) => Ok((chunk, false)),
                Some(Err(e)) => Err(e),
                None => Ok((Bytes::new(), true)),
            }),
        }
    }
}

/// The driver's timer as the runtime sleeps for it: the instant it was
/// armed for, and the sleep (re-armed when the driver's next deadline moves).
pub(crate) type Timer = Option<(switchyard_core::Instant, crate::runtime::BoxFuture<()>)>;

/// One round of I/O for `driver`: polls its timer, the caller's body, the write
/// and the read side together, and returns once at least one of them gave the
/// driver an input. The timer comes first, so a read loop that never waits (or
/// exhausts the runtime's cooperative budget) cannot starve it.
async fn pump(
    rt: &dyn Runtime,
    hub: &Hub<IoState>,
    wire: &mut Wire,
    driver: &mut Driver,
    body: &mut Source<'_>,
) {
    let mut timer: Timer = None;
    std::future::poll_fn(|cx| poll_pump(rt, hub, wire, driver, body, &mut timer, cx)).await;
}

/// [`pump`] as a poll, its timer kept by the caller across rounds (a body
/// read through the poll interface keeps it in the body).
fn poll_pump(
    rt: &dyn Runtime,
    hub: &Hub<IoState>,
    wire: &mut Wire,
    driver: &mut Driver,
    body: &mut Source<'_>,
    timer: &mut Timer,
    cx: &mut std::task::Context<'_>,
) -> Poll<()> {
    match driver.poll_timeout() {
        None => *timer = None,
        Some(at) => {
            if timer.as_ref().is_none_or(|(armed, _)| *armed != at) {
                *timer = Some((at, rt.sleep_until(hub.to_std(at))));
            }
        }
    }
    if let Some((_, t)) = timer.as_mut() {
        if t.as_mut().poll(cx).is_ready() {
            *timer = None;
            driver.handle_timeout(hub.now());
            return Poll::Ready(());
        }
    }
    if driver.wants_body() {
        match body.poll_chunk(cx) {
            Poll::Ready(Ok((chunk, last))) => {
                driver.handle_body_bytes(hub.now(), chunk, last);
                return Poll::Ready(());
            }
            Poll::Ready(Err(e)) => {
                driver.handle_body_error(hub.now(), &e.to_string());
                return Poll::Ready(());
            }
            Poll::Pending => {}
        }
    }
    if let Some(out) = driver.poll_transmit() {
        match Pin::new(&mut wire.io).poll_write(cx, out) {
            Poll::Ready(Ok(0)) => {
                driver.handle_write_error(hub.now(), &io::ErrorKind::WriteZero.into());
                return Poll::Ready(());
            }
            Poll::Ready(Ok(n)) => {
                wire.dirty = true;
                driver.handle_written(hub.now(), n);
                return Poll::Ready(());
            }
            Poll::Ready(Err(e)) => {
                driver.handle_write_error(hub.now(), &e);
                return Poll::Ready(());
            }
            Poll::Pending => {}
        }
    } else if wire.dirty {
        match Pin::new(&mut wire.io).poll_flush(cx) {
            Poll::Ready(Ok(())) => wire.dirty = false,
            Poll::Ready(Err(e)) => {
                wire.dirty = false;
                driver.handle_write_error(hub.now(), &e);
                return Poll::Ready(());
            }
            Poll::Pending => {}
        }
    }
    if driver.wants_read() {
        // Straight into the driver's buffer: no copy through a scratch.
        match tokio_util::io::poll_read_buf(Pin::new(&mut wire.io), cx, driver.read_buffer()) {
            Poll::Ready(Ok(0)) => driver.handle_eof(hub.now()),
            Poll::Ready(Ok(n)) => driver.handle_appended(hub.now(), n),
            Poll::Ready(Err(e)) => driver.handle_read_error(hub.now(), &e),
            Poll::Pending => return Poll::Pending,
        }
        return Poll::Ready(());
    }
    Poll::Pending
}

/// Runs a started exchange to its response head, feeding it `body`. On
/// success the response's body owns the connection until it ends.
pub(crate) async fn exchange(
    mut exchange: H1Exchange<Shared>,
    body: &mut Body,
) -> Result<http::Response<crate::ResponseBody>, Attempted> {
    let mut source = Source::of(body);
    let head = loop {
        match exchange.step() {
            Step::Io(sh, wire, driver) => pump(&*sh.rt, &sh.hub, wire, driver, &mut source).await,
            Step::Done(done) => break done?,
        }
    };
    Ok(head.map(|b| crate::ResponseBody::h1(H1Body(b, None))))
}

/// An HTTP/1.1 response body: the driver's body events, read on demand; at the
/// end the connection goes back (or closes) per the driver's decision.
pub(crate) struct H1Body(pub(crate) engine::H1Body<Shared>, Timer);

impl H1Body {
    /// The next chunk, as a poll: the driver's I/O rounds run here, with
    /// its timer kept in the body between polls (no future per chunk).
    pub(crate) fn poll_chunk(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Result<Option<Bytes>, BodyError>> {
        loop {
            match self.0.next_chunk() {
                Next::Ready(r) => {
                    self.1 = None;
                    return Poll::Ready(r);
                }
                Next::Io(sh, wire, driver) => {
                    std::task::ready!(poll_pump(
                        &*sh.rt,
                        &sh.hub,
                        wire,
                        driver,
                        &mut Source::None,
                        &mut self.1,
                        cx
                    ));
                }
            }
        }
    }
}

impl H1Body {
    /// After `101`: the connection, out of the pool, with the bytes read
    /// past the head.
    pub(crate) fn take_upgraded(&mut self) -> Option<crate::Upgraded> {
        let (wire, early) = self.0.take_upgraded()?;
        self.1 = None;
        Some(crate::Upgraded::new(wire.into_io(), early))
    }
}

impl Drop for H1Body {
    /// Dropped before its end: the driver drains (bounded) in the background so
    /// the connection can be reused, or decides to close it.
    fn drop(&mut self) {
        let Some(mut drain) = self.0.abandon() else { return };
        let rt = Arc::clone(&drain.shared.rt);
        let lost = drain.if_lost();
        let spawned = rt.clone().spawn(Box::pin(async move {
            while !drain.driver.is_finished() {
                pump(&*rt, &drain.shared.hub, &mut drain.wire, &mut drain.driver, &mut Source::None).await;
            }
            drain.release();
        }));
        if spawned.is_none() {
            // No executor here (dropped outside the runtime): the unspawned drain
            // dropped the socket; tell the pool it is gone.
            lost();
        }
    }
}
