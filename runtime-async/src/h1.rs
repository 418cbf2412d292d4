//! HTTP/1.1 over one connection, through the core's codec: write the request,
//! read the response head, stream the body, and hand the socket back to the pool
//! (or close it) exactly as the codec's keep-alive decision says.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use switchyard_common::exchange::{
    body_kind, io_failure, protocol_failure, stale, stale_after, Attempted, Probe, DRAIN_BYTES, DRAIN_TIME,
    EARLY_RESPONSE_GRACE,
};
use switchyard_common::{BodyError, Error};
use switchyard_core::handshake::{Handshake, ProxyHandshake};
use switchyard_core::http1::{BodyPermission, Exchange, Frame, TargetForm};
use switchyard_core::pool::{Progress, RequestFacts};
use switchyard_core::{CallId, CloseReason, ConnectError, ConnectionId, Reuse};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::body::{Body, Kind};
use crate::driver::{H1Conn, Shared};
use crate::runtime::{timed, until, within, Io, Runtime};

pub(crate) struct Request<'a> {
    pub(crate) parts: &'a http::request::Parts,
    pub(crate) body: &'a mut Body,
    pub(crate) form: TargetForm,
    pub(crate) facts: RequestFacts,
    /// The call's deadline (until the response head): checked before every
    /// read, so no stream of bytes, however fast or slow, outlives it.
    pub(crate) deadline: Option<Instant>,
    /// When the response body must be complete, counted from its head.
    pub(crate) body_timeout: Option<Duration>,
}

/// The tighter of a per-operation timeout and what is left until `deadline`.
pub(crate) fn bound(limit: Option<Duration>, deadline: Option<Instant>) -> Option<Duration> {
    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
    match (limit, left) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn deadline_passed(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "the call's deadline passed")
}

/// Writes `data`, counting what reached the socket so a failure can say whether
/// any of the request was sent.
async fn write_counted(
    rt: &dyn Runtime,
    conn: &mut H1Conn,
    data: &[u8],
    written: &mut u64,
    limit: Option<Duration>,
) -> io::Result<()> {
    let mut rest = data;
    while !rest.is_empty() {
        let n = timed(rt, limit, conn.io.write(rest)).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        *written += n as u64;
        rest = &rest[n..];
    }
    Ok(())
}

/// Reads whatever the server sent while the request body is still going out,
/// and decodes it: `Ready(Ok(head))` once a final response head is complete.
/// Interim responses (`100 Continue`) are consumed. Pending otherwise (with the
/// read side's waker registered, unless the server closed its side).
fn watch_for_response(
    cx: &mut std::task::Context<'_>,
    conn: &mut H1Conn,
    ex: &mut Exchange,
    eof: &mut bool,
) -> std::task::Poll<Result<http::Response<()>, switchyard_core::http1::Http1Error>> {
    use std::task::Poll;
    loop {
        loop {
            match ex.decode(&mut conn.buf, false) {
                Ok(Some(Frame::Head(r))) => return Poll::Ready(Ok(r)),
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        if *eof {
            return Poll::Pending;
        }
        let mut scratch = [0u8; 4096];
        let mut read = tokio::io::ReadBuf::new(&mut scratch);
        match tokio::io::AsyncRead::poll_read(std::pin::Pin::new(&mut conn.io), cx, &mut read) {
            Poll::Ready(Ok(())) if read.filled().is_empty() => *eof = true,
            Poll::Ready(Ok(())) => conn.buf.extend_from_slice(read.filled()),
            // The write side reports the connection's failure.
            Poll::Ready(Err(_)) => *eof = true,
            Poll::Pending => return Poll::Pending,
        }
    }
}

/// How sending (part of) a request ended.
enum Sent {
    /// Everything was written.
    All,
    /// The server answered before the body was sent: the rest is not sent.
    Early(http::Response<()>),
}

/// Writes `data` (and flushes) while reading: a final response that arrives
/// first stops the upload and is returned (RFC 9110 §15: a server may answer
/// before the body, and curl and Go return that answer). `limit` bounds each
/// wait for the socket to take more bytes.
async fn send_watching(
    rt: &dyn Runtime,
    conn: &mut H1Conn,
    ex: &mut Exchange,
    data: &[u8],
    written: &mut u64,
    limit: Option<Duration>,
) -> Result<Sent, SendError> {
    use std::task::Poll;
    let mut rest = data;
    let mut eof = false;
    let mut timer = limit.map(|d| rt.sleep_until(Instant::now() + d));
    std::future::poll_fn(|cx| loop {
        match watch_for_response(cx, conn, ex, &mut eof) {
            Poll::Ready(Ok(head)) => {
                // All of it went out only if it was all written and flushed.
                let flushed = rest.is_empty()
                    && matches!(
                        tokio::io::AsyncWrite::poll_flush(std::pin::Pin::new(&mut conn.io), cx),
                        Poll::Ready(Ok(()))
                    );
                if !flushed {
                    ex.abandon_body();
                }
                return Poll::Ready(Ok(Sent::Early(head)));
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(SendError::Protocol(e))),
            Poll::Pending => {}
        }
        let progress = if rest.is_empty() {
            match tokio::io::AsyncWrite::poll_flush(std::pin::Pin::new(&mut conn.io), cx) {
                Poll::Ready(Ok(())) => return Poll::Ready(Ok(Sent::All)),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(SendError::Io(e))),
                Poll::Pending => false,
            }
        } else {
            match tokio::io::AsyncWrite::poll_write(std::pin::Pin::new(&mut conn.io), cx, rest) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(SendError::Io(io::ErrorKind::WriteZero.into())))
                }
                Poll::Ready(Ok(n)) => {
                    *written += n as u64;
                    rest = &rest[n..];
                    true
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(SendError::Io(e))),
                Poll::Pending => false,
            }
        };
        if progress {
            // Each wait for the socket gets the whole write timeout.
            timer = limit.map(|d| rt.sleep_until(Instant::now() + d));
            continue;
        }
        if let Some(t) = timer.as_mut() {
            if t.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(SendError::Io(io::ErrorKind::TimedOut.into())));
            }
        }
        return Poll::Pending;
    })
    .await
}

enum SendError {
    Io(io::Error),
    Protocol(switchyard_core::http1::Http1Error),
}

/// After a failed write: a server that answered early and closed may have
/// sent its response before the connection broke. Read what is there, briefly.
async fn salvage_early_response(
    rt: &dyn Runtime,
    conn: &mut H1Conn,
    ex: &mut Exchange,
) -> Option<http::Response<()>> {
    let mut eof = false;
    within(
        rt,
        EARLY_RESPONSE_GRACE,
        std::future::poll_fn(|cx| match watch_for_response(cx, conn, ex, &mut eof) {
            std::task::Poll::Ready(r) => std::task::Poll::Ready(r.ok()),
            std::task::Poll::Pending if eof => std::task::Poll::Ready(None),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }),
    )
    .await
    .flatten()
}

/// Runs one exchange. On success the response's body owns the connection until
/// it ends.
pub(crate) async fn exchange(
    shared: &Arc<Shared>,
    call: CallId,
    connection: ConnectionId,
    conn: Option<H1Conn>,
    req: Request<'_>,
) -> Result<http::Response<crate::ResponseBody>, Attempted> {
    let facts = req.facts;
    let Some(mut conn) = conn else { return Err(stale("the connection's socket was already closed", facts)) };
    // A pooled connection may have been closed by the server since its last
    // use: ask the socket before writing, so a request never goes out on a
    // dead connection (the core then retries elsewhere, nothing having been sent).
    if !conn.fresh {
        match conn.probe() {
            Probe::Alive => {}
            dead => return Err(stale_after(dead, facts)),
        }
    }
    conn.fresh = false;
    let settings = &shared.settings;
    let rt = &*shared.rt;
    let (mut ex, head) = match Exchange::new(req.parts, req.form, body_kind(req.body.len()), settings.limits)
    {
        Ok(x) => x,
        Err(e) => {
            // Nothing was written: the connection goes back as it was.
            shared.release_h1(call, connection, conn, Reuse::Reusable);
            return Err(Attempted::Fatal(Error::InvalidRequest(e.to_string())));
        }
    };
    let mut written = 0u64;
    // Once a write has been attempted, nothing proves the request did not leave:
    // a buffering writer (TLS) may have sent records before reporting an error.
    // Only a failure before the first write counts as "nothing written".
    let sent_failure = |e: &io::Error| io_failure(e, Progress::RequestWritten, facts);
    let write_limit = || bound(settings.write_timeout, req.deadline);

    // Head, and a buffered body in the same write when it may go at once.
    let mut out = head;
    if ex.body_permission() == BodyPermission::Send {
        if let Some(bytes) = req.body.bytes() {
            let encoded = ex.encode_body(&bytes, &mut out).and_then(|()| ex.finish_body(None, &mut out));
            if let Err(e) = encoded {
                shared.release_h1(call, connection, conn, Reuse::Reusable);
                return Err(Attempted::Fatal(Error::InvalidRequest(e.to_string())));
            }
        }
    }
    let mut early_head = None;
    if req.body.is_empty() {
        if let Err(e) = write_counted(rt, &mut conn, &out, &mut written, write_limit()).await {
            return Err(sent_failure(&e));
        }
    } else {
        // A server may answer before it reads the body (413, 401, …).
        early_head = send_part(rt, &mut conn, &mut ex, &out, &mut written, write_limit(), facts).await?;
    }
    let at = shared.now();
    shared.emit(move |l| l.request_headers_end(call, at));

    // `Expect: 100-continue`: wait for the server's word, or our own timeout.
    if early_head.is_none() && ex.body_permission() == BodyPermission::AwaitContinue {
        let until_continue = Instant::now() + settings.expect_continue_timeout;
        loop {
            match ex.decode(&mut conn.buf, false) {
                Ok(Some(Frame::Informational(r))) if r.status() == http::StatusCode::CONTINUE => break,
                Ok(Some(Frame::Informational(_))) => continue,
                Ok(Some(Frame::Head(r))) => {
                    early_head = Some(r);
                    break;
                }
                Ok(_) => {}
                Err(e) => return Err(protocol_failure(&e, facts)),
            }
            if deadline_passed(req.deadline) {
                return Err(sent_failure(&timed_out()));
            }
            let wake = req.deadline.map_or(until_continue, |d| d.min(until_continue));
            match until(rt, wake, conn.io.read_buf(&mut conn.buf)).await {
                None if Instant::now() >= until_continue => {
                    ex.continue_timed_out();
                    break;
                }
                None => {}
                Some(Ok(0)) => {
                    let e =
                        io::Error::new(io::ErrorKind::UnexpectedEof, "closed while awaiting 100 Continue");
                    return Err(sent_failure(&e));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(sent_failure(&e)),
            }
        }
    }

    // A buffered body held back for `100 Continue` (or our own timeout).
    if early_head.is_none() && ex.body_permission() == BodyPermission::Send {
        if let Some(bytes) = req.body.bytes() {
            let mut out = Vec::with_capacity(bytes.len() + 16);
            let encoded = ex.encode_body(&bytes, &mut out).and_then(|()| ex.finish_body(None, &mut out));
            if let Err(e) = encoded {
                let reuse = Reuse::Retire(CloseReason::RequestBodyIncomplete);
                shared.release_h1(call, connection, conn, reuse);
                return Err(Attempted::Fatal(Error::InvalidRequest(e.to_string())));
            }
            early_head = send_part(rt, &mut conn, &mut ex, &out, &mut written, write_limit(), facts).await?;
        }
    }

    // A streaming body, chunk by chunk, watching for an early answer meanwhile.
    if early_head.is_none() && ex.body_permission() == BodyPermission::Send {
        if let Kind::Stream(rx) = &mut req.body.kind {
            let mut out = Vec::new();
            let mut finished = false;
            while !finished {
                let mut eof = false;
                let next = std::future::poll_fn(|cx| {
                    if let std::task::Poll::Ready(chunk) = rx.poll_recv(cx) {
                        return std::task::Poll::Ready(Ok(chunk));
                    }
                    watch_for_response(cx, &mut conn, &mut ex, &mut eof).map(Err)
                })
                .await;
                out.clear();
                match next {
                    Ok(Some(chunk)) => {
                        if let Err(e) = ex.encode_body(&chunk, &mut out) {
                            let reuse = Reuse::Retire(CloseReason::RequestBodyIncomplete);
                            shared.release_h1(call, connection, conn, reuse);
                            return Err(Attempted::Fatal(Error::InvalidRequest(e.to_string())));
                        }
                    }
                    Ok(None) => {
                        let _ = ex.finish_body(None, &mut out);
                        finished = true;
                    }
                    Err(Ok(h)) => {
                        ex.abandon_body();
                        early_head = Some(h);
                        break;
                    }
                    Err(Err(e)) => return Err(protocol_failure(&e, facts)),
                }
                early_head =
                    send_part(rt, &mut conn, &mut ex, &out, &mut written, write_limit(), facts).await?;
                if early_head.is_some() {
                    break;
                }
            }
        }
    }
    if ex.body_sent() && !req.body.is_empty() {
        let (at, n) = (shared.now(), req.body.len().unwrap_or(0));
        shared.emit(move |l| l.request_body_end(call, n, at));
    }
    if early_head.is_none() {
        if let Err(e) = timed(rt, write_limit(), conn.io.flush()).await {
            return Err(sent_failure(&e));
        }
    }

    // The response head.
    let head = match early_head {
        Some(h) => h,
        None => read_head(rt, &mut conn, &mut ex, settings.read_timeout, req.deadline, facts).await?,
    };
    let (at, status) = (shared.now(), head.status());
    shared.emit(move |l| l.response_headers_end(call, status, at));
    let (parts, ()) = head.into_parts();
    let body = H1Body {
        shared: Arc::clone(shared),
        call,
        connection,
        conn: Some(conn),
        ex,
        complete: false,
        trailers: None,
        deadline: req.body_timeout.map(|d| Instant::now() + d),
    };
    Ok(http::Response::from_parts(parts, crate::ResponseBody::h1(body)))
}

/// Sends `data` watching for an early answer: `Ok(Some(head))` when the
/// server answered first (also when the write broke after it did), `Ok(None)`
/// when everything went out.
async fn send_part(
    rt: &dyn Runtime,
    conn: &mut H1Conn,
    ex: &mut Exchange,
    data: &[u8],
    written: &mut u64,
    limit: Option<Duration>,
    facts: RequestFacts,
) -> Result<Option<http::Response<()>>, Attempted> {
    match send_watching(rt, conn, ex, data, written, limit).await {
        Ok(Sent::All) => Ok(None),
        Ok(Sent::Early(head)) => Ok(Some(head)),
        Err(SendError::Protocol(e)) => Err(protocol_failure(&e, facts)),
        Err(SendError::Io(e)) => match salvage(rt, conn, ex, &e).await {
            Some(head) => Ok(Some(head)),
            None => Err(io_failure(&e, Progress::RequestWritten, facts)),
        },
    }
}

/// A write failed: unless it timed out (the server is alive but not reading),
/// look for a response the server sent before the connection broke.
async fn salvage(
    rt: &dyn Runtime,
    conn: &mut H1Conn,
    ex: &mut Exchange,
    e: &io::Error,
) -> Option<http::Response<()>> {
    if e.kind() == io::ErrorKind::TimedOut {
        return None;
    }
    // Whatever the response, part of the request never went out.
    ex.abandon_body();
    salvage_early_response(rt, conn, ex).await
}

async fn read_head(
    rt: &dyn Runtime,
    conn: &mut H1Conn,
    ex: &mut Exchange,
    read_timeout: Option<Duration>,
    deadline: Option<Instant>,
    facts: RequestFacts,
) -> Result<http::Response<()>, Attempted> {
    let mut eof = false;
    let mut any = !conn.buf.is_empty();
    loop {
        match ex.decode(&mut conn.buf, eof) {
            Ok(Some(Frame::Head(r))) => return Ok(r),
            Ok(Some(_)) => continue,
            Ok(None) => {}
            Err(e) => return Err(protocol_failure(&e, facts)),
        }
        let progress = if any { Progress::ResponseStarted } else { Progress::RequestWritten };
        // Checked before every read: a busy stream of bytes cannot outlive the
        // call (a timer alone can be starved by a read loop that never waits).
        if deadline_passed(deadline) {
            return Err(io_failure(&timed_out(), progress, facts));
        }
        match timed(rt, bound(read_timeout, deadline), conn.io.read_buf(&mut conn.buf)).await {
            Ok(0) => eof = true,
            Ok(_) => any = true,
            Err(e) => return Err(io_failure(&e, progress, facts)),
        }
    }
}

/// An HTTP/1.1 response body: reads frames from the connection; at the end gives
/// the connection back (or closes it) per the codec's decision.
pub(crate) struct H1Body {
    shared: Arc<Shared>,
    call: CallId,
    connection: ConnectionId,
    conn: Option<H1Conn>,
    ex: Exchange,
    complete: bool,
    pub(crate) trailers: Option<http::HeaderMap>,
    /// When the whole body must have arrived (the body timeout).
    deadline: Option<Instant>,
}

impl H1Body {
    pub(crate) async fn chunk(&mut self) -> Result<Option<Bytes>, BodyError> {
        let (read_timeout, deadline) = (self.shared.settings.read_timeout, self.deadline);
        let mut eof = false;
        loop {
            if self.complete {
                return Ok(None);
            }
            let Some(conn) = self.conn.as_mut() else { return Ok(None) };
            match self.ex.decode(&mut conn.buf, eof) {
                Ok(Some(Frame::Data(b))) => return Ok(Some(b)),
                Ok(Some(Frame::Trailers(t))) => self.trailers = Some(t),
                Ok(Some(Frame::End | Frame::Upgraded)) => {
                    // Released by `finish`, after the body-end event.
                    self.complete = true;
                    return Ok(None);
                }
                Ok(Some(_)) => {}
                Ok(None) => {
                    if deadline_passed(deadline) {
                        self.retire();
                        return Err(BodyError::Timeout);
                    }
                    let limit = bound(read_timeout, deadline);
                    match timed(&*self.shared.rt, limit, conn.io.read_buf(&mut conn.buf)).await {
                        Ok(0) => eof = true,
                        Ok(_) => {}
                        Err(e) => {
                            self.retire();
                            return Err(if e.kind() == io::ErrorKind::TimedOut {
                                BodyError::Timeout
                            } else {
                                BodyError::Io(std::sync::Arc::new(e))
                            });
                        }
                    }
                }
                Err(e) => {
                    self.retire();
                    return Err(BodyError::Http1(e));
                }
            }
        }
    }

    /// Gives the connection back per the codec's keep-alive decision.
    pub(crate) fn finish(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.shared.release_h1(self.call, self.connection, conn, self.ex.reuse());
        }
    }

    fn retire(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.shared.release_h1(self.call, self.connection, conn, Reuse::Retire(CloseReason::Failure));
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.conn.is_none()
    }
}

impl Drop for H1Body {
    fn drop(&mut self) {
        if self.complete {
            self.finish();
            return;
        }
        let Some(mut conn) = self.conn.take() else { return };
        // What is already buffered may finish the body without any I/O.
        loop {
            match self.ex.decode(&mut conn.buf, false) {
                Ok(Some(Frame::End | Frame::Upgraded)) => {
                    self.shared.release_h1(self.call, self.connection, conn, self.ex.reuse());
                    return;
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => {
                    self.shared.release_h1(
                        self.call,
                        self.connection,
                        conn,
                        Reuse::Retire(CloseReason::Failure),
                    );
                    return;
                }
            }
        }
        // Drain in the background up to 64 KiB or 100 ms; past that, close.
        let (shared, call, connection) = (Arc::clone(&self.shared), self.call, self.connection);
        let mut ex = self.ex.clone();
        let rt = Arc::clone(&shared.rt);
        let spawned = rt.clone().spawn(Box::pin(async move {
            let start = ex.decoder().body_received();
            let drained = within(&*rt, DRAIN_TIME, async {
                let mut eof = false;
                loop {
                    match ex.decode(&mut conn.buf, eof) {
                        Ok(Some(Frame::End | Frame::Upgraded)) => return true,
                        Ok(Some(_)) if ex.decoder().body_received() - start > DRAIN_BYTES => return false,
                        Ok(Some(_)) => {}
                        Ok(None) => match conn.io.read_buf(&mut conn.buf).await {
                            Ok(0) => eof = true,
                            Ok(_) => {}
                            Err(_) => return false,
                        },
                        Err(_) => return false,
                    }
                }
            })
            .await
            .unwrap_or(false);
            let reuse = if drained { ex.reuse() } else { Reuse::Retire(CloseReason::UnreadBody) };
            shared.release_h1(call, connection, conn, reuse);
        }));
        if spawned.is_none() {
            // No executor here (dropped outside the runtime): the unspawned drain
            // dropped the socket; tell the pool it is gone.
            self.shared.connection_lost(call, connection, CloseReason::UnreadBody);
        }
    }
}

/// Runs a proxy handshake (the core's state machine) on `io`: writes what it
/// asks, reads what the proxy answers, until the tunnel is open.
pub(crate) async fn proxy_handshake(io: &mut Io, mut hs: ProxyHandshake) -> Result<(), ConnectError> {
    let io_err = |e: io::Error| ConnectError::from_io(&e);
    let mut buf = BytesMut::with_capacity(512);
    let mut eof = false;
    loop {
        while let Some(out) = hs.poll_transmit() {
            io.write_all(&out).await.map_err(io_err)?;
        }
        if hs.handle_read(&mut buf, eof)? == Handshake::Done {
            return Ok(());
        }
        if !hs.wants_write() && io.read_buf(&mut buf).await.map_err(io_err)? == 0 {
            eof = true;
        }
    }
}
