//! HTTP/2: the pump. The connection's frames, flow control, stream order
//! and verdicts are the core's ([`switchyard_core::http2::Driver`] and
//! [`Session`](switchyard_core::http2::Session)), shared by every adapter
//! through [`switchyard_common::h2::H2Conn`]. Here, one task per connection
//! moves bytes between the socket and that state, and each call waits on its
//! stream; nothing is decided here.

use std::sync::{Arc, Weak};
use std::task::{Poll, Waker};

use bytes::Bytes;
use switchyard_core::http2::{StreamError, StreamLimits};
use switchyard_core::pool::RequestFacts;
use switchyard_core::{CallId, CloseReason, ConnectionId, Instant, Reuse};
use tokio::io::AsyncWrite;

use switchyard_common::exchange::Attempted;
use switchyard_common::h2::{BodyNext, H2Conn, Handle, Locked, SendRoom, Submitted, Wakeups};
use switchyard_common::{BodyError, Error};

use crate::body::{Body, Kind};
use crate::h1::Timer;
use crate::runtime::{BoxFuture, Io};
use crate::shared::Shared;

/// The shared connection: its state behind a lock (the pump task writes).
pub(crate) type Conn = Locked<H2Conn, Shared>;

/// A handle on a shared HTTP/2 connection (see [`Handle`]).
pub(crate) type H2Handle = Handle<Conn>;

/// Waits until `poll` on the connection's state is ready. The state holds
/// the stream's deadlines: when the one it names passes, it hears the time
/// and decides what that means (`poll` then reports it).
fn wait<'a, T: 'a>(
    shared: &'a Shared,
    conn: &'a Conn,
    ticket: u64,
    mut poll: impl FnMut(&mut H2Conn, &dyn Fn() -> Instant, &Waker, &mut Wakeups) -> Poll<T> + 'a,
) -> impl std::future::Future<Output = T> + 'a {
    let mut timer: Timer = None;
    std::future::poll_fn(move |cx| poll_wait(shared, conn, ticket, &mut timer, cx, &mut poll))
}

/// [`wait`] as a poll, its timer kept by the caller between polls.
fn poll_wait<T>(
    shared: &Shared,
    conn: &Conn,
    ticket: u64,
    timer: &mut Timer,
    cx: &mut std::task::Context<'_>,
    poll: &mut impl FnMut(&mut H2Conn, &dyn Fn() -> Instant, &Waker, &mut Wakeups) -> Poll<T>,
) -> Poll<T> {
    loop {
        let now = || shared.now();
        let mut until = None;
        let polled = conn.with(|st, w| {
            let polled = poll(st, &now, cx.waker(), w);
            if polled.is_pending() {
                until = st.deadline(ticket);
            }
            polled
        });
        if polled.is_ready() {
            *timer = None;
            return polled;
        }
        let Some(until) = until else { return Poll::Pending };
        if timer.as_ref().is_none_or(|(t, _)| *t != until) {
            *timer = Some((until, shared.rt.sleep_until(shared.hub.to_std(until))));
        }
        let Some((_, sleep)) = timer.as_mut() else { return Poll::Pending };
        if sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        *timer = None;
        conn.with(|st, w| st.handle_timeout(shared.now().max(until), w));
    }
}

/// Sends the PING the core asked for; its PONG is reported. The core times
/// it out (`PoolConfig::pong_timeout`).
pub(crate) fn ping(_shared: &Arc<Shared>, _connection: ConnectionId, handle: &H2Handle) {
    handle.conn().with(|st, w| st.ping(w));
}

/// The pool ends the connection now ([`PoolAction::Abort`](switchyard_core::PoolAction::Abort)).
pub(crate) fn end(handle: &H2Handle, reason: CloseReason) {
    handle.conn().with(|st, w| st.end(reason, w));
}

/// Prepares the HTTP/2 connection on `io` without I/O: its handle now, and
/// its task (the pump) for the caller to spawn once the lock is released.
pub(crate) fn prepare(owner: &Shared, io: Io, connection: ConnectionId) -> (H2Handle, BoxFuture<()>) {
    let state = H2Conn::new(owner.settings.http2, owner.settings.limits.max_head_size);
    let conn = Arc::new(Conn::new(state, connection, Weak::clone(&owner.me)));
    let job = Box::pin(pump(Arc::clone(&conn), io));
    (H2Handle::new(conn), job)
}

/// How much room a read gets (as the HTTP/1.1 side reads), and the least
/// left before more is reserved.
const READ_SIZE: usize = 16 * 1024;
const READ_MIN: usize = 4 * 1024;

/// Moves bytes until the connection ends: reads go to the state, what it
/// has to write is written; woken by the socket and by the calls.
async fn pump(conn: Arc<Conn>, mut io: Io) {
    // Reads land here and become the driver's input (no copy); it keeps
    // the tail of a frame not yet whole between reads.
    let mut buf = bytes::BytesMut::new();
    let mut out: Option<Bytes> = None;
    let mut flush = false;
    let mut read_open = true;
    std::future::poll_fn(|cx| {
        // Woken (most often by calls that submitted requests): what they
        // submitted goes out before the next read, so the ACK for what was
        // read rides on those bytes. Reading first would empty the socket
        // and make the kernel send a bare ACK per batch, a segment the
        // server pays for (measured: 23 % more segments on loopback).
        if out.is_none() {
            out = conn.with(|st, w| st.take_transmit(w));
        }
        if let Some(bytes) = out.as_mut() {
            // A failure is left to the loop's write, which reports it.
            if let Poll::Ready(Ok(n)) = std::pin::Pin::new(&mut io).poll_write(cx, bytes) {
                let _ = bytes.split_to(n.min(bytes.len()));
                if bytes.is_empty() {
                    out = None;
                }
                flush |= n > 0;
            }
        }
        loop {
            let mut progressed = false;
            let read = if read_open {
                if buf.capacity() - buf.len() < READ_MIN {
                    buf.reserve(READ_SIZE);
                }
                match tokio_util::io::poll_read_buf(std::pin::Pin::new(&mut io), cx, &mut buf) {
                    Poll::Ready(r) => Some(r),
                    Poll::Pending => None,
                }
            } else {
                None
            };
            let now = conn.host().map(|s| s.now());
            let (stop, taken) = conn.with(|st, w| {
                match &read {
                    Some(Ok(0)) => st.handle_eof(w),
                    Some(Ok(_)) => st.handle_read_buf(
                        now.unwrap_or(switchyard_core::Instant::from_millis(0)),
                        &mut buf,
                        w,
                    ),
                    Some(Err(e)) => {
                        st.handle_io_error(&format!("reading the HTTP/2 connection failed: {e}"), w)
                    }
                    None => {}
                }
                st.register_io(cx.waker());
                let taken = if out.is_none() { st.take_transmit(w) } else { None };
                if st.should_stop() && out.is_none() && taken.is_none() {
                    st.stopped(w);
                    return (true, st.take_transmit(w));
                }
                (false, taken)
            });
            if let Some(r) = &read {
                progressed = true;
                if !matches!(r, Ok(n) if *n > 0) {
                    read_open = false;
                }
            }
            if let Some(bytes) = taken {
                out = Some(bytes);
            }
            if stop {
                // Best effort: whatever fits now (a GOAWAY), then close.
                if let Some(bytes) = out.take() {
                    let _ = std::pin::Pin::new(&mut io).poll_write(cx, &bytes);
                    let _ = std::pin::Pin::new(&mut io).poll_flush(cx);
                }
                let _ = std::pin::Pin::new(&mut io).poll_shutdown(cx);
                return Poll::Ready(());
            }
            if let Some(bytes) = out.as_mut() {
                match std::pin::Pin::new(&mut io).poll_write(cx, bytes) {
                    Poll::Ready(Ok(n)) if n > 0 => {
                        let _ = bytes.split_to(n);
                        if bytes.is_empty() {
                            out = None;
                        }
                        flush = true;
                        progressed = true;
                    }
                    Poll::Ready(Ok(_)) | Poll::Ready(Err(_)) => {
                        out = None;
                        conn.with(|st, w| st.handle_io_error("writing to the HTTP/2 connection failed", w));
                        progressed = true;
                    }
                    Poll::Pending => {}
                }
            }
            if out.is_none() && flush {
                match std::pin::Pin::new(&mut io).poll_flush(cx) {
                    Poll::Ready(Ok(())) => flush = false,
                    Poll::Ready(Err(_)) => {
                        flush = false;
                        conn.with(|st, w| st.handle_io_error("writing to the HTTP/2 connection failed", w));
                        progressed = true;
                    }
                    Poll::Pending => {}
                }
            }
            if !progressed {
                return Poll::Pending;
            }
            if matches!(read, Some(Ok(n)) if n > 0) && out.is_none() {
                // What was read woke the calls it answered: let them run
                // (and send their next requests, which the server can work on
                // while we read on) before reading more.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
    })
    .await;
}

/// What one HTTP/2 exchange sends, and its bounds.
pub(crate) struct Request<'a> {
    pub(crate) parts: &'a http::request::Parts,
    pub(crate) body: &'a mut Body,
    pub(crate) facts: RequestFacts,
    /// The call's bounds on its waits (the state holds them).
    pub(crate) limits: StreamLimits,
}

/// A call's stream: closed (reset when still open) when dropped.
struct StreamGuard(H2Handle);

impl StreamGuard {
    fn ticket(&self) -> u64 {
        self.0.ticket()
    }
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
    let source = handle.source();
    let guard = StreamGuard(handle);
    let conn = Arc::clone(guard.0.conn());
    let ticket = guard.ticket();
    let streaming = matches!(body.kind, Kind::Stream(_));
    let mut plan = switchyard_common::h2::Outgoing::new(parts, body.len(), streaming, !body.is_empty());
    let head = plan.take_head();
    let failed = |stream: Option<u32>, e: &StreamError| plan.failed(conn.lock().session(), stream, e, facts);
    let submitted = match &body.kind {
        Kind::Full(bytes) if plan.has_body() => Submitted::Full(bytes.clone()),
        _ => plan.submitted(),
    };
    let has_body = plan.has_body();
    let at = shared.now();
    shared.emit(move |l| l.request_headers_start(call, at));
    conn.with(|st, w| st.submit(ticket, head, submitted, limits, w));
    let at = shared.now();
    shared.emit(move |l| switchyard_common::request_head_written(l, call, at, has_body));
    if has_body {
        if let Kind::Stream(source) = &mut body.kind {
            let mut counter = plan.counter();
            let mut failure = None;
            let mut stopped = false;
            while let Some(next) = std::future::poll_fn(|cx| source.poll_chunk(cx)).await {
                match next {
                    Ok(chunk) => {
                        if let Err(e) = counter.add(chunk.len() as u64) {
                            failure = Some(e.to_string());
                            break;
                        }
                        // Back-pressure: a chunk goes once the server's
                        // windows have room; an early answer (or a passed
                        // bound) stops the rest, and the head says which.
                        let room =
                            wait(shared, &conn, ticket, |st, now, waker, _| st.poll_send(ticket, now, waker));
                        if room.await == SendRoom::Stop {
                            stopped = true;
                            break;
                        }
                        conn.with(|st, w| st.send(ticket, chunk, false, w));
                    }
                    Err(e) => {
                        failure = Some(format!("reading the request body failed: {e}"));
                        break;
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
                let reuse = plan.body_failed(conn.lock().session());
                shared.exchange_finished(call, reuse);
                return Err(Attempted::Fatal(Error::invalid_request(why)));
            }
            if !stopped {
                conn.with(|st, w| st.send(ticket, Bytes::new(), true, w));
            }
        }
        let (at, n) = (shared.now(), body.len().unwrap_or(0));
        shared.emit(move |l| switchyard_common::request_body_written(l, call, n, at));
    }
    let head = wait(shared, &conn, ticket, |st, now, waker, _| st.poll_head(ticket, now, waker)).await;
    let (stream_id, response, _) = head.map_err(|(stream, e)| failed(stream, &e))?;
    plan.judge_head(conn.lock().session(), stream_id, &response, source, facts)?;
    let (mut parts, ()) = response.into_parts();
    let carrier = switchyard_common::Carrier { connection, source };
    switchyard_common::exchange::head_received(shared, call, carrier, &mut parts);
    let body = H2Body {
        shared: Arc::clone(shared),
        call,
        stream: Some(guard),
        stream_id,
        trailers: None,
        timer: None,
    };
    Ok(http::Response::from_parts(parts, crate::ResponseBody::h2(body)))
}

/// An HTTP/2 response body: the stream's DATA as the connection read it,
/// its flow-control credit returned as each chunk is taken.
pub(crate) struct H2Body {
    shared: Arc<Shared>,
    call: CallId,
    stream: Option<StreamGuard>,
    stream_id: u32,
    pub(crate) trailers: Option<http::HeaderMap>,
    /// The wait's timer between polls (when the stream has a deadline).
    timer: Timer,
}

impl H2Body {
    /// The next chunk, as a poll (no future per chunk).
    pub(crate) fn poll_chunk(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Result<Option<Bytes>, BodyError>> {
        let Some(guard) = self.stream.as_ref() else { return Poll::Ready(Ok(None)) };
        let (conn, ticket, stream) = (guard.0.conn(), guard.ticket(), self.stream_id);
        let mut poll = |st: &mut H2Conn, now: &dyn Fn() -> Instant, waker: &Waker, w: &mut Wakeups| {
            st.poll_body(ticket, stream, now, waker, w)
        };
        let next = std::task::ready!(poll_wait(&self.shared, conn, ticket, &mut self.timer, cx, &mut poll));
        Poll::Ready(match next {
            BodyNext::Data(data) => Ok(Some(data)),
            // The stream is released by `finish`, after the body's end is
            // reported.
            BodyNext::End(trailers) => {
                self.trailers = trailers;
                Ok(None)
            }
            BodyNext::Failed(e, reuse) => {
                self.end(reuse);
                Err(e)
            }
        })
    }

    /// The body ended: the connection's stream is free again.
    pub(crate) fn finish(&mut self) {
        self.end(Reuse::Reusable);
    }

    /// The stream is over: the connection's stream is free again.
    fn end(&mut self, reuse: Reuse) {
        if let Some(guard) = self.stream.take() {
            drop(guard); // closes the stream (reset if still open)
            let call = self.call;
            self.shared.exchange_finished(call, reuse);
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.stream.is_none()
    }
}

impl Drop for H2Body {
    fn drop(&mut self) {
        // Dropping the stream resets it (CANCEL): the connection stays usable.
        self.end(Reuse::Reusable);
    }
}
