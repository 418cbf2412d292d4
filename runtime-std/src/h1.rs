//! HTTP/1.1 over one connection, blocking, through the core's codec: probe an
//! idle socket, write the request, read the response head, stream the body, and
//! hand the socket back to the pool (or close it) exactly as the codec's
//! keep-alive decision says.

use std::io::{self, Read, Write};
use std::net::TcpStream;
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

use crate::body::{Body, Kind};
use crate::driver::{H1Conn, Lease, Shared};
use crate::stream::probe;

pub(crate) struct Request<'a> {
    pub(crate) parts: &'a http::request::Parts,
    pub(crate) body: &'a mut Body,
    pub(crate) form: TargetForm,
    pub(crate) facts: RequestFacts,
    /// The call's deadline (until the response head): checked before every
    /// read and bounding each, so no trickle of bytes outlives it.
    pub(crate) deadline: Option<Instant>,
    /// When the response body must be complete, counted from its head.
    pub(crate) body_timeout: Option<Duration>,
}

fn deadline_passed(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

fn deadline_error() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "the call's deadline passed")
}

/// How often a blocked request-body write stops to look for an early response.
const WATCH_SLICE: Duration = Duration::from_millis(50);

/// How sending (part of) a request ended.
enum Sent {
    /// Everything was written and flushed.
    All,
    /// The server answered before the body was sent: the rest is not sent.
    Early(http::Response<()>),
}

enum SendError {
    Io(io::Error),
    Protocol(switchyard_core::http1::Http1Error),
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// The tighter of a per-operation timeout and what is left of the call.
fn bound(limit: Option<Duration>, deadline: Option<Instant>) -> Option<Duration> {
    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
    match (limit, left) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Blocking reads report a passed timeout as `WouldBlock` on Unix and
/// `TimedOut` on Windows: both are timeouts.
fn timed_out(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::WouldBlock {
        io::Error::new(io::ErrorKind::TimedOut, "read or write timed out")
    } else {
        e
    }
}

impl H1Conn {
    fn read_more(&mut self, limit: Option<Duration>) -> io::Result<usize> {
        self.timeouts.read(self.stream.tcp(), limit)?;
        let n = self.stream.read(&mut self.scratch[..]).map_err(timed_out)?;
        self.buf.extend_from_slice(&self.scratch[..n]);
        Ok(n)
    }

    fn write_all(&mut self, data: &[u8], limit: Option<Duration>) -> io::Result<()> {
        self.timeouts.write(self.stream.tcp(), limit)?;
        self.stream.write_all(data).map_err(timed_out)
    }

    /// Decodes what the server sent so far, reading only what is already
    /// there (never waiting): `Some(head)` once a final response head is
    /// complete. Interim responses are consumed.
    fn early_head(
        &mut self,
        ex: &mut Exchange,
        eof: &mut bool,
    ) -> Result<Option<http::Response<()>>, SendError> {
        loop {
            loop {
                match ex.decode(&mut self.buf, false) {
                    Ok(Some(Frame::Head(r))) => return Ok(Some(r)),
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(e) => return Err(SendError::Protocol(e)),
                }
            }
            if *eof {
                return Ok(None);
            }
            match crate::stream::read_available(&mut self.stream, &mut self.scratch) {
                Ok(Some(0)) | Err(_) => *eof = true,
                Ok(Some(n)) => self.buf.extend_from_slice(&self.scratch[..n]),
                Ok(None) => return Ok(None),
            }
        }
    }

    /// Writes `data` and flushes, looking for an early final response between
    /// writes (and every [`WATCH_SLICE`] while the socket takes nothing): a
    /// server may answer before it reads the body (413, 401, …), and that
    /// answer is what the caller gets. `limit` bounds a wait without progress.
    fn send_watching(
        &mut self,
        ex: &mut Exchange,
        data: &[u8],
        limit: Option<Duration>,
        deadline: Option<Instant>,
    ) -> Result<Sent, SendError> {
        let mut rest = data;
        let mut eof = false;
        let mut since = Instant::now();
        loop {
            if let Some(head) = self.early_head(ex, &mut eof)? {
                // All of it went out only if it was all written and flushed.
                let flushed = rest.is_empty()
                    && self.timeouts.write(self.stream.tcp(), Some(WATCH_SLICE)).is_ok()
                    && self.stream.flush().is_ok();
                if !flushed {
                    ex.abandon_body();
                }
                return Ok(Sent::Early(head));
            }
            let slice = limit.map_or(WATCH_SLICE, |l| l.saturating_sub(since.elapsed()).min(WATCH_SLICE));
            if slice.is_zero() || deadline_passed(deadline) {
                return Err(SendError::Io(io::Error::new(io::ErrorKind::TimedOut, "write timed out")));
            }
            self.timeouts.write(self.stream.tcp(), Some(slice)).map_err(SendError::Io)?;
            let step = if rest.is_empty() {
                self.stream.flush().map(|()| None)
            } else {
                self.stream.write(rest).map(Some)
            };
            match step {
                Ok(None) => return Ok(Sent::All),
                Ok(Some(0)) => return Err(SendError::Io(io::ErrorKind::WriteZero.into())),
                Ok(Some(n)) => {
                    rest = &rest[n..];
                    since = Instant::now();
                }
                Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(SendError::Io(e)),
            }
        }
    }

    /// A write failed (not by timing out): the server may have answered and
    /// closed; read briefly for the response it sent before the break.
    fn salvage(&mut self, ex: &mut Exchange, e: &io::Error) -> Option<http::Response<()>> {
        if is_timeout(e) {
            return None;
        }
        // Whatever the response, part of the request never went out.
        ex.abandon_body();
        let until = Instant::now() + EARLY_RESPONSE_GRACE;
        loop {
            loop {
                match ex.decode(&mut self.buf, false) {
                    Ok(Some(Frame::Head(r))) => return Some(r),
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => return None,
                }
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            match self.read_more(Some(left)) {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }
}

/// Sends `data` watching for an early answer: `Ok(Some(head))` when the
/// server answered first, `Ok(None)` when everything went out.
fn send_part(
    conn: &mut H1Conn,
    ex: &mut Exchange,
    data: &[u8],
    (limit, deadline): (Option<Duration>, Option<Instant>),
    facts: RequestFacts,
) -> Result<Option<http::Response<()>>, Attempted> {
    match conn.send_watching(ex, data, limit, deadline) {
        Ok(Sent::All) => Ok(None),
        Ok(Sent::Early(head)) => Ok(Some(head)),
        Err(SendError::Protocol(e)) => Err(protocol_failure(&e, facts)),
        Err(SendError::Io(e)) => match conn.salvage(ex, &e) {
            Some(head) => Ok(Some(head)),
            None => Err(io_failure(&timed_out(e), Progress::RequestWritten, facts)),
        },
    }
}

/// Runs one exchange. On success the response's body owns the connection until
/// it ends.
pub(crate) fn exchange(
    shared: &Arc<Shared>,
    call: CallId,
    lease: Lease,
    req: Request<'_>,
) -> Result<http::Response<crate::ResponseBody>, Attempted> {
    let facts = req.facts;
    let connection = lease.connection;
    let Some(mut conn) = lease.conn else {
        return Err(stale("the connection's socket was already closed", facts));
    };
    // An idle connection may have been closed by the server while pooled (or
    // sent something nobody asked for): ask the buffer and the socket before
    // writing, so a request never goes out on a dead connection (and the core
    // retries on another, nothing having been sent).
    if !conn.fresh {
        let verdict = if conn.buf.is_empty() { probe(&mut conn.stream) } else { Probe::Unhealthy };
        match verdict {
            Probe::Alive => {}
            dead => return Err(stale_after(dead, facts)),
        }
    }
    conn.fresh = false;
    let settings = &shared.settings;
    let write_limit = || bound(settings.write_timeout, req.deadline);
    let (mut ex, head) = match Exchange::new(req.parts, req.form, body_kind(req.body.len()), settings.limits)
    {
        Ok(x) => x,
        Err(e) => {
            shared.release_h1(call, connection, conn, Reuse::Reusable);
            return Err(Attempted::Fatal(Error::InvalidRequest(e.to_string())));
        }
    };
    // Once a write has been attempted, nothing proves the request did not leave
    // (TLS may have sent records before an error): any write failure counts as
    // "request written".
    let written = |e: &io::Error| io_failure(e, Progress::RequestWritten, facts);

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
        conn.write_all(&out, write_limit()).map_err(|e| written(&e))?;
    } else {
        early_head = send_part(&mut conn, &mut ex, &out, (write_limit(), req.deadline), facts)?;
    }
    let at = shared.now();
    shared.emit(move |l| l.request_headers_end(call, at));

    // `Expect: 100-continue`: wait for the server's word, or our own timeout.
    if early_head.is_none() && ex.body_permission() == BodyPermission::AwaitContinue {
        let until = Instant::now() + settings.expect_continue_timeout;
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
                return Err(written(&deadline_error()));
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                ex.continue_timed_out();
                break;
            }
            match conn.read_more(bound(Some(left), req.deadline)) {
                Err(e) if e.kind() == io::ErrorKind::TimedOut && Instant::now() >= until => {
                    ex.continue_timed_out();
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::TimedOut && deadline_passed(req.deadline) => {
                    return Err(written(&deadline_error()));
                }
                Ok(0) => {
                    let e =
                        io::Error::new(io::ErrorKind::UnexpectedEof, "closed while awaiting 100 Continue");
                    return Err(written(&e));
                }
                Ok(_) => {}
                Err(e) => return Err(written(&e)),
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
            early_head = send_part(&mut conn, &mut ex, &out, (write_limit(), req.deadline), facts)?;
        }
    }

    // A streaming body, read from the caller's reader and sent chunk by chunk,
    // looking for an early answer between chunks.
    if early_head.is_none() && ex.body_permission() == BodyPermission::Send {
        if let Kind::Reader(reader) = &mut req.body.kind {
            let mut chunk = vec![0u8; 16 * 1024];
            let mut out = Vec::with_capacity(chunk.len() + 16);
            let mut finished = false;
            while !finished && early_head.is_none() {
                let n = match reader.read(&mut chunk) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        // The body cannot be completed: the connection is unusable.
                        let reuse = Reuse::Retire(CloseReason::RequestBodyIncomplete);
                        shared.release_h1(call, connection, conn, reuse);
                        return Err(Attempted::Fatal(Error::InvalidRequest(format!(
                            "reading the request body failed: {e}"
                        ))));
                    }
                };
                out.clear();
                let encoded = if n == 0 {
                    finished = true;
                    ex.finish_body(None, &mut out)
                } else {
                    ex.encode_body(&chunk[..n], &mut out)
                };
                if let Err(e) = encoded {
                    let reuse = Reuse::Retire(CloseReason::RequestBodyIncomplete);
                    shared.release_h1(call, connection, conn, reuse);
                    return Err(Attempted::Fatal(Error::InvalidRequest(e.to_string())));
                }
                early_head = send_part(&mut conn, &mut ex, &out, (write_limit(), req.deadline), facts)?;
            }
        }
    }
    if ex.body_sent() && !req.body.is_empty() {
        let (at, n) = (shared.now(), req.body.len().unwrap_or(0));
        shared.emit(move |l| l.request_body_end(call, n, at));
    }
    if early_head.is_none() {
        conn.stream.flush().map_err(|e| written(&timed_out(e)))?;
    }

    // The response head.
    let head = match early_head {
        Some(h) => h,
        None => read_head(&mut conn, &mut ex, settings.read_timeout, req.deadline, facts)?,
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

fn read_head(
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
        // The deadline is checked before every read and bounds each one: a
        // head trickled a few bytes at a time cannot outlive the call.
        if deadline_passed(deadline) {
            return Err(io_failure(&deadline_error(), progress, facts));
        }
        match conn.read_more(bound(read_timeout, deadline)) {
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
    pub(crate) fn chunk(&mut self) -> Result<Option<Bytes>, BodyError> {
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
                Ok(None) if deadline_passed(deadline) => {
                    self.retire();
                    return Err(BodyError::Timeout);
                }
                Ok(None) => match conn.read_more(bound(read_timeout, deadline)) {
                    Ok(0) => eof = true,
                    Ok(_) => {}
                    Err(e) => {
                        self.retire();
                        return Err(if e.kind() == io::ErrorKind::TimedOut {
                            BodyError::Timeout
                        } else {
                            BodyError::Io(Arc::new(e))
                        });
                    }
                },
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
    /// Dropped before its end: read on (up to 64 KiB or 100 ms, on this thread)
    /// so the connection can be reused; past that, close it.
    fn drop(&mut self) {
        if self.complete {
            self.finish();
            return;
        }
        let Some(mut conn) = self.conn.take() else { return };
        let start = self.ex.decoder().body_received();
        let until = Instant::now() + DRAIN_TIME;
        let mut eof = false;
        let drained = loop {
            match self.ex.decode(&mut conn.buf, eof) {
                Ok(Some(Frame::End | Frame::Upgraded)) => break true,
                Ok(Some(_)) if self.ex.decoder().body_received() - start > DRAIN_BYTES => break false,
                Ok(Some(_)) => {}
                Ok(None) => {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break false;
                    }
                    match conn.read_more(Some(left)) {
                        Ok(0) => eof = true,
                        Ok(_) => {}
                        Err(_) => break false,
                    }
                }
                Err(_) => break false,
            }
        };
        let reuse = if drained { self.ex.reuse() } else { Reuse::Retire(CloseReason::UnreadBody) };
        self.shared.release_h1(self.call, self.connection, conn, reuse);
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
