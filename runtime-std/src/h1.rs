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
    body_kind, io_failure, protocol_failure, stale, stale_after, Attempted, Probe, Tunnel, DRAIN_BYTES,
    DRAIN_TIME,
};
use switchyard_common::{BodyError, Error};
use switchyard_core::http1::{BodyPermission, Exchange, Frame, TargetForm};
use switchyard_core::pool::{Progress, RequestFacts};
use switchyard_core::{Address, CallId, CloseReason, ConnectError, ConnectionId, Reuse};

use crate::body::{Body, Kind};
use crate::driver::{H1Conn, Lease, Shared};
use crate::stream::probe;

pub(crate) struct Request<'a> {
    pub(crate) parts: &'a http::request::Parts,
    pub(crate) body: &'a mut Body,
    pub(crate) form: TargetForm,
    pub(crate) facts: RequestFacts,
    /// The call's deadline (until the response head).
    pub(crate) deadline: Option<Instant>,
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
    // An idle connection may have been closed by the server while pooled: ask
    // the socket before writing, so a request never goes out on a dead
    // connection (and the core retries on another, nothing having been sent).
    if !conn.fresh {
        match probe(&mut conn.stream) {
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
    conn.write_all(&out, write_limit()).map_err(|e| written(&e))?;
    let at = shared.now();
    shared.emit(move |l| l.request_headers_end(call, at));

    // `Expect: 100-continue`: wait for the server's word, or our own timeout.
    let mut early_head = None;
    if ex.body_permission() == BodyPermission::AwaitContinue {
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
                Ok(0) => {
                    let e =
                        io::Error::new(io::ErrorKind::UnexpectedEof, "closed while awaiting 100 Continue");
                    return Err(written(&e));
                }
                Ok(_) => {}
                Err(e) => return Err(written(&e)),
            }
        }
        if ex.body_permission() == BodyPermission::Send {
            if let Some(bytes) = req.body.bytes() {
                let mut out = Vec::with_capacity(bytes.len() + 16);
                let encoded = ex.encode_body(&bytes, &mut out).and_then(|()| ex.finish_body(None, &mut out));
                if let Err(e) = encoded {
                    let reuse = Reuse::Retire(CloseReason::RequestBodyIncomplete);
                    shared.release_h1(call, connection, conn, reuse);
                    return Err(Attempted::Fatal(Error::InvalidRequest(e.to_string())));
                }
                conn.write_all(&out, write_limit()).map_err(|e| written(&e))?;
            }
        }
    }

    // A streaming body, read from the caller's reader and sent chunk by chunk.
    if ex.body_permission() == BodyPermission::Send {
        if let Kind::Reader(reader) = &mut req.body.kind {
            let mut chunk = vec![0u8; 16 * 1024];
            let mut out = Vec::with_capacity(chunk.len() + 16);
            loop {
                let n = match reader.read(&mut chunk) {
                    Ok(0) => break,
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
                if let Err(e) = ex.encode_body(&chunk[..n], &mut out) {
                    let reuse = Reuse::Retire(CloseReason::RequestBodyIncomplete);
                    shared.release_h1(call, connection, conn, reuse);
                    return Err(Attempted::Fatal(Error::InvalidRequest(e.to_string())));
                }
                conn.write_all(&out, write_limit()).map_err(|e| written(&e))?;
            }
            out.clear();
            let _ = ex.finish_body(None, &mut out);
            conn.write_all(&out, write_limit()).map_err(|e| written(&e))?;
        }
    }
    if ex.body_permission() == BodyPermission::Done && !req.body.is_empty() {
        let (at, n) = (shared.now(), req.body.len().unwrap_or(0));
        shared.emit(move |l| l.request_body_end(call, n, at));
    }
    conn.stream.flush().map_err(|e| written(&timed_out(e)))?;

    // The response head.
    let head = match early_head {
        Some(h) => h,
        None => read_head(&mut conn, &mut ex, bound(settings.read_timeout, req.deadline), facts)?,
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
    };
    Ok(http::Response::from_parts(parts, crate::ResponseBody::h1(body)))
}

fn read_head(
    conn: &mut H1Conn,
    ex: &mut Exchange,
    limit: Option<Duration>,
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
        match conn.read_more(limit) {
            Ok(0) => eof = true,
            Ok(_) => any = true,
            Err(e) => {
                let progress = if any { Progress::ResponseStarted } else { Progress::RequestWritten };
                return Err(io_failure(&e, progress, facts));
            }
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
}

impl H1Body {
    pub(crate) fn chunk(&mut self) -> Result<Option<Bytes>, BodyError> {
        let read_timeout = self.shared.settings.read_timeout;
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
                Ok(None) => match conn.read_more(read_timeout) {
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

/// Opens an HTTP `CONNECT` tunnel through a proxy to the Address.
pub(crate) fn connect_tunnel(tcp: &mut TcpStream, address: &Address) -> Result<(), ConnectError> {
    let io = |e: io::Error| ConnectError::from_io(&e);
    let (mut tunnel, head) = Tunnel::start(address)?;
    tcp.write_all(&head).map_err(io)?;
    let mut buf = BytesMut::with_capacity(1024);
    let mut eof = false;
    let mut scratch = [0u8; 1024];
    while !tunnel.read(&mut buf, eof)? {
        // A proxy sends nothing past its answer until the tunnel is used;
        // `Tunnel::read` rejects any surplus.
        match tcp.read(&mut scratch).map_err(io)? {
            0 => eof = true,
            n => buf.extend_from_slice(&scratch[..n]),
        }
    }
    Ok(())
}

/// Asks the SOCKS5 proxy on `tcp` to connect to the Address.
pub(crate) fn socks5(tcp: &mut TcpStream, address: &Address) -> Result<(), ConnectError> {
    use switchyard_common::socks;
    let io = |e: io::Error| ConnectError::from_io(&e);
    tcp.write_all(&socks::GREETING).map_err(io)?;
    let mut choice = [0u8; 2];
    tcp.read_exact(&mut choice).map_err(io)?;
    socks::check_choice(choice)?;
    tcp.write_all(&socks::request(address)?).map_err(io)?;
    let mut head = [0u8; 4];
    tcp.read_exact(&mut head).map_err(io)?;
    let skip = match socks::reply(head, address)? {
        socks::Rest::Bytes(n) => n,
        socks::Rest::Domain => {
            let mut len = [0u8; 1];
            tcp.read_exact(&mut len).map_err(io)?;
            usize::from(len[0]) + 2
        }
    };
    let mut bound = vec![0u8; skip];
    tcp.read_exact(&mut bound).map_err(io)?;
    Ok(())
}
