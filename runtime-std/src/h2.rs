//! HTTP/2 on blocking sockets: the pump. The connection's frames, flow
//! control, stream order and verdicts are the core's, shared with the async
//! adapters through [`switchyard_common::h2::H2Conn`]; here one reader
//! thread per connection feeds it what the socket delivers, whoever changes
//! the state writes what it produced (under the connection's lock, bounded by
//! the write timeout), and each call's thread parks until its stream moves.

use std::io::{self, Read, Write};
use std::sync::{Arc, Weak};
use std::task::{Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;
use switchyard_common::engine::EngineHost;
use switchyard_common::exchange::Attempted;
use switchyard_common::h2::{BodyNext, H2Conn, Handle, Locked, SendRoom, Side, Wakeups};
use switchyard_common::{BodyError, Error};
use switchyard_core::http2::{StreamError, StreamLimits};
use switchyard_core::pool::RequestFacts;
use switchyard_core::{CallId, CloseReason, ConnectionId, Instant, Reuse};

use crate::body::{Body, Kind};
use crate::shared::Shared;
use crate::stream::{Sock, Stream};

/// The connection's state and its write side, under one lock.
pub(crate) struct Inner {
    h2: H2Conn,
    /// TLS records in and out (absent on cleartext).
    tls: Option<rustls::ClientConnection>,
    /// Where writes go (a clone of the reader thread's socket).
    sock: Sock,
}

impl Inner {
    /// Writes what the state produced (blocking, bounded by the socket's
    /// write timeout); a failure fails the connection.
    fn flush(&mut self, wakeups: &mut Wakeups) {
        while let Some(bytes) = self.h2.take_transmit(wakeups) {
            let written = match self.tls.as_mut() {
                Some(tls) => write_tls(tls, &mut self.sock, &bytes),
                None => self.sock.write_all(&bytes),
            };
            if let Err(e) = written {
                self.h2.handle_io_error(&format!("writing to the HTTP/2 connection failed: {e}"), wakeups);
                let _ = self.sock.shutdown(std::net::Shutdown::Both);
                return;
            }
        }
    }

    /// TLS records read off the socket: decrypted (a buffer's worth at a
    /// time) and handed to the state.
    fn read_tls(
        &mut self,
        now: switchyard_core::Instant,
        mut input: &[u8],
        scratch: &mut [u8],
        wakeups: &mut Wakeups,
    ) {
        while !input.is_empty() {
            let Some(tls) = self.tls.as_mut() else { return };
            let processed = tls
                .read_tls(&mut input)
                .map_err(|e| e.to_string())
                .and_then(|_| tls.process_new_packets().map(|_| ()).map_err(|e| e.to_string()));
            if let Err(e) = processed {
                self.h2.handle_io_error(&format!("TLS failed on the HTTP/2 connection: {e}"), wakeups);
                return;
            }
            self.drain_tls(now, scratch, wakeups);
        }
    }

    /// Plaintext TLS has decrypted and not handed out yet.
    fn drain_tls(&mut self, now: switchyard_core::Instant, scratch: &mut [u8], wakeups: &mut Wakeups) {
        let Some(tls) = self.tls.as_mut() else { return };
        loop {
            match tls.reader().read(scratch) {
                Ok(0) => {
                    self.h2.handle_eof(wakeups);
                    return;
                }
                Ok(n) => self.h2.handle_read(now, &scratch[..n], wakeups),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    self.h2.handle_io_error(&format!("reading the HTTP/2 connection failed: {e}"), wakeups);
                    return;
                }
            }
        }
    }
}

/// Encrypts `bytes` and writes the records, as much as rustls buffers at a
/// time.
fn write_tls(tls: &mut rustls::ClientConnection, sock: &mut Sock, mut bytes: &[u8]) -> io::Result<()> {
    loop {
        while !bytes.is_empty() {
            let n = tls.writer().write(bytes)?;
            if n == 0 {
                break; // rustls's buffer is full: write records first
            }
            bytes = &bytes[n..];
        }
        while tls.wants_write() {
            tls.write_tls(sock)?;
        }
        if bytes.is_empty() {
            return Ok(());
        }
    }
}

impl Side for Inner {
    fn state(&mut self) -> &mut H2Conn {
        &mut self.h2
    }

    /// Writes what the state produced; a state that must stop says GOAWAY
    /// (or fails what is open) and ends the reader thread's blocking read.
    fn after(&mut self, wakeups: &mut Wakeups) {
        self.flush(wakeups);
        if self.h2.should_stop() {
            self.h2.stopped(wakeups);
            self.flush(wakeups);
            let _ = self.sock.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// The shared connection: its state and write side under one lock.
pub(crate) type Conn = Locked<Inner, Shared>;

/// A handle on a shared HTTP/2 connection (see [`Handle`]).
pub(crate) type H2Handle = Handle<Conn>;

/// Sends the PING the core asked for; its PONG is reported.
pub(crate) fn ping(handle: &H2Handle) {
    handle.conn().with(|st, w| st.ping(w));
}

/// The pool ends the connection now.
pub(crate) fn end(handle: &H2Handle, reason: CloseReason) {
    handle.conn().with(|st, w| st.end(reason, w));
}

/// The connection on `stream`: its handle, and the reader thread's work
/// (started by the engine once the lock is released).
pub(crate) fn prepare(
    owner: &Shared,
    stream: Stream,
    connection: ConnectionId,
) -> io::Result<(H2Handle, Box<dyn FnOnce() + Send>)> {
    let (sock, tls) = match stream {
        Stream::Tcp(sock) => (sock, None),
        Stream::Tls(s) => {
            let rustls::StreamOwned { conn, sock } = *s;
            (sock, Some(conn))
        }
    };
    let reader = sock.try_clone()?;
    sock.set_read_timeout(None)?;
    sock.set_write_timeout(Some(owner.settings.driver.write_timeout.unwrap_or(WRITE_LIMIT)))?;
    let h2 = H2Conn::new(owner.settings.http2, owner.settings.driver.limits.max_head_size);
    let conn = Arc::new(Conn::new(Inner { h2, tls, sock }, connection, Weak::clone(&owner.me)));
    let job = {
        let conn = Arc::clone(&conn);
        Box::new(move || read_loop(&conn, reader)) as Box<dyn FnOnce() + Send>
    };
    Ok((H2Handle::new(conn), job))
}

/// A write that makes no progress this long fails the connection (unless the
/// client set a write timeout).
const WRITE_LIMIT: Duration = Duration::from_secs(30);

/// The reader thread: blocking reads until the connection ends.
fn read_loop(conn: &Arc<Conn>, mut reader: Sock) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut plain = vec![0u8; 16 * 1024];
    // The preface goes out, and whatever the TLS handshake left decrypted is read.
    let now = || conn.host().map_or(switchyard_core::Instant::from_millis(0), |s| s.hub.now());
    conn.with_side(|st, w| {
        if let Some(tls) = st.tls.as_mut() {
            let _ = tls.process_new_packets();
        }
        st.drain_tls(now(), &mut plain, w);
    });
    loop {
        let read = reader.read(&mut buf);
        let at = now();
        let over = conn.with_side(|st, w| {
            match read {
                _ if st.h2.should_stop() => {}
                Ok(0) => st.h2.handle_eof(w),
                Ok(n) => match st.tls.as_mut() {
                    None => st.h2.handle_read(at, &buf[..n], w),
                    Some(_) => st.read_tls(at, &buf[..n], &mut plain, w),
                },
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => st.h2.handle_io_error(&format!("reading the HTTP/2 connection failed: {e}"), w),
            }
            // When over, the side's own step says GOAWAY and ends this
            // thread's reads (after this closure).
            st.h2.should_stop()
        });
        if over {
            return;
        }
    }
}

/// Wakes a parked thread.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `poll` until it is ready, parking in between. The state holds the
/// stream's deadlines: when the one it names passes, it hears the time and
/// decides what that means (`poll` then reports it). A parked call keeps the
/// core's clock meanwhile (there is no housekeeping thread): it wakes for
/// the pool's next deadline and fires what is due — the handshake timeout
/// that retires a connection the server never made usable, a PONG that never
/// came.
fn wait<T>(
    shared: &Arc<Shared>,
    conn: &Conn,
    ticket: u64,
    mut poll: impl FnMut(&mut H2Conn, &dyn Fn() -> Instant, &Waker, &mut Wakeups) -> Poll<T>,
) -> T {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let now = || shared.hub.now();
    loop {
        let until = match conn.with(|st, w| match poll(st, &now, &waker, w) {
            Poll::Ready(v) => Ok(v),
            Poll::Pending => Err(st.deadline(ticket)),
        }) {
            Ok(v) => return v,
            Err(until) => until.map(|t| shared.hub.to_std(t)),
        };
        let timer = shared.hub.lock().pool.poll_timeout().map(|t| shared.hub.to_std(t));
        let earliest = match (until, timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let at = std::time::Instant::now();
        match earliest {
            Some(e) if e <= at => {}
            Some(e) => std::thread::park_timeout(e - at),
            None => std::thread::park(),
        }
        let at = std::time::Instant::now();
        if until.is_some_and(|u| at >= u) {
            let now = shared.hub.from_std(at);
            conn.with(|st, w| st.handle_timeout(now, w));
        }
        if timer.is_some_and(|t| at >= t) {
            shared.input(|_, _| {}); // fires the due timers
        }
    }
}

/// A call's stream: closed (reset when still open) when dropped.
struct StreamGuard(H2Handle);

impl StreamGuard {
    fn ticket(&self) -> u64 {
        self.0.ticket()
    }
}

/// What one HTTP/2 exchange sends, and its bounds.
pub(crate) struct Request<'a> {
    pub(crate) parts: &'a http::request::Parts,
    pub(crate) body: &'a mut Body,
    pub(crate) facts: RequestFacts,
    /// The call's bounds on its waits (the state holds them).
    pub(crate) limits: StreamLimits,
}

/// Runs one exchange on a stream of the connection (blocking).
pub(crate) fn exchange(
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
    let failed =
        |stream: Option<u32>, e: &StreamError| plan.failed(conn.lock().h2.session(), stream, e, facts);
    let submitted = match &body.kind {
        Kind::Full(bytes) if plan.has_body() => switchyard_common::h2::Submitted::Full(bytes.clone()),
        _ => plan.submitted(),
    };
    let at = shared.hub.now();
    shared.hub.emit(move |l| l.request_headers_start(call, at));
    conn.with(|st, w| st.submit(ticket, head, submitted, limits, w));
    let at = shared.hub.now();
    let has_body = plan.has_body();
    shared.hub.emit(move |l| switchyard_common::request_head_written(l, call, at, has_body));
    if has_body {
        if let Kind::Stream(reader) = &mut body.kind {
            let mut counter = plan.counter();
            let mut scratch = vec![0u8; 16 * 1024];
            let mut failure = None;
            let mut stopped = false;
            loop {
                let n = match reader.read(&mut scratch) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        failure = Some(format!("reading the request body failed: {e}"));
                        break;
                    }
                };
                if let Err(why) = counter.add(n as u64) {
                    failure = Some(why.to_string());
                    break;
                }
                // Back-pressure: a chunk goes once the server's windows have
                // room; an early answer (or a passed bound) stops the rest,
                // and the head says which.
                if wait(shared, &conn, ticket, |st, now, waker, _| st.poll_send(ticket, now, waker))
                    == SendRoom::Stop
                {
                    stopped = true;
                    break;
                }
                let chunk = Bytes::copy_from_slice(&scratch[..n]);
                conn.with(|st, w| st.send(ticket, chunk, false, w));
            }
            if failure.is_none() && !stopped {
                failure = counter.finish().err().map(|e| e.to_string());
            }
            if let Some(why) = failure {
                drop(guard);
                let reuse = plan.body_failed(conn.lock().h2.session());
                shared.input(|st, now| {
                    let _ = st.pool.exchange_finished(now, call, reuse);
                });
                return Err(Attempted::Fatal(Error::invalid_request(why)));
            }
            if !stopped {
                conn.with(|st, w| st.send(ticket, Bytes::new(), true, w));
            }
        }
        let (at, n) = (shared.hub.now(), body.len().unwrap_or(0));
        shared.hub.emit(move |l| switchyard_common::request_body_written(l, call, n, at));
    }
    let head = wait(shared, &conn, ticket, |st, now, waker, _| st.poll_head(ticket, now, waker));
    let (stream_id, response, _) = head.map_err(|(stream, e)| failed(stream, &e))?;
    plan.judge_head(conn.lock().h2.session(), stream_id, &response, source, facts)?;
    let (mut parts, ()) = response.into_parts();
    let carrier = switchyard_common::Carrier { connection, source };
    switchyard_common::exchange::head_received(shared, call, carrier, &mut parts);
    let body = H2Body { shared: Arc::clone(shared), call, stream: Some(guard), stream_id, trailers: None };
    Ok(http::Response::from_parts(parts, crate::ResponseBody::h2(body)))
}

/// An HTTP/2 response body, read on demand.
pub(crate) struct H2Body {
    shared: Arc<Shared>,
    call: CallId,
    stream: Option<StreamGuard>,
    stream_id: u32,
    pub(crate) trailers: Option<http::HeaderMap>,
}

impl H2Body {
    pub(crate) fn chunk(&mut self) -> Result<Option<Bytes>, BodyError> {
        let Some(guard) = self.stream.as_ref() else { return Ok(None) };
        let (conn, ticket, stream) = (Arc::clone(guard.0.conn()), guard.ticket(), self.stream_id);
        match wait(&self.shared, &conn, ticket, |st, now, waker, w| {
            st.poll_body(ticket, stream, now, waker, w)
        }) {
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
        }
    }

    pub(crate) fn finish(&mut self) {
        self.end(Reuse::Reusable);
    }

    fn end(&mut self, reuse: Reuse) {
        if let Some(guard) = self.stream.take() {
            drop(guard);
            let call = self.call;
            self.shared.input(|st, now| {
                let _ = st.pool.exchange_finished(now, call, reuse);
            });
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.stream.is_none()
    }
}

impl Drop for H2Body {
    fn drop(&mut self) {
        self.end(Reuse::Reusable);
    }
}
