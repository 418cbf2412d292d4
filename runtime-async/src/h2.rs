//! HTTP/2 through the `h2` crate: one connection task per connection; streams
//! for exchanges; SETTINGS (max concurrent streams), GOAWAY, REFUSED_STREAM and
//! other resets reported to the core.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use h2::client::SendRequest;
use switchyard_core::pool::{ExchangeFailure, ExchangeFailureKind, Progress, RequestFacts};
use switchyard_core::{CallId, CloseReason, ConnectionId, Reuse};
use tokio::sync::watch;

use switchyard_common::exchange::{Attempted, HTTP2_STRIPPED};
use switchyard_common::BodyError;

use crate::body::{Body, Kind};
use crate::driver::Shared;
use crate::runtime::{within, Io};

type Ready = Option<Result<SendRequest<Bytes>, String>>;

/// A shared HTTP/2 connection: its request sender, once the handshake is done.
#[derive(Clone)]
pub(crate) struct H2Handle {
    ready: watch::Receiver<Ready>,
    reported_limit: Arc<AtomicUsize>,
    /// The connection's PING sender; taken while a liveness check runs.
    ping: Arc<std::sync::Mutex<Option<h2::PingPong>>>,
}

/// How long a PING may go unanswered before the connection is declared unhealthy.
const PONG_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);

/// A stream's read timed out: send one PING. No PONG within a second marks the
/// connection unhealthy (no new exchanges), so a stalled peer stops receiving
/// calls (BEHAVIOUR §4).
fn check_liveness(shared: &Arc<Shared>, connection: ConnectionId, handle: &H2Handle) {
    let Some(mut pong) = handle.ping.lock().ok().and_then(|mut p| p.take()) else {
        return; // a check is already running, or the connection is gone
    };
    let (me, slot) = (Arc::clone(shared), Arc::clone(&handle.ping));
    let _detached = shared.rt.spawn(Box::pin(async move {
        let shared = me;
        match within(&*shared.rt, PONG_WITHIN, pong.ping(h2::Ping::opaque())).await {
            Some(Ok(_)) => {
                if let Ok(mut s) = slot.lock() {
                    *s = Some(pong);
                }
            }
            _ => {
                tracing::debug!(%connection, "no PONG within {PONG_WITHIN:?}: unhealthy");
                shared.input(|st, now| {
                    let _ = st.pool.connection_closed(now, connection, CloseReason::Unhealthy);
                });
            }
        }
    }));
}

/// Starts the HTTP/2 connection on `io`: handshake, then the connection task,
/// which reports the connection's end to the core. `None` without an executor.
pub(crate) fn start(owner: &Arc<Shared>, io: Io, connection: ConnectionId) -> Option<H2Handle> {
    let shared: Weak<Shared> = Arc::downgrade(owner);
    let (tx, rx) = watch::channel(None);
    let ping = Arc::new(std::sync::Mutex::new(None));
    let ping_slot = Arc::clone(&ping);
    let task = owner.rt.spawn(Box::pin(async move {
        let reason = match h2::client::Builder::new().handshake::<_, Bytes>(io).await {
            Ok((send, mut conn)) => {
                if let (Some(p), Ok(mut slot)) = (conn.ping_pong(), ping_slot.lock()) {
                    *slot = Some(p);
                }
                let _ = tx.send(Some(Ok(send)));
                match conn.await {
                    Ok(()) => CloseReason::ServerClose,
                    Err(e) if e.is_go_away() => CloseReason::GoAway,
                    Err(_) => CloseReason::Failure,
                }
            }
            Err(e) => {
                let _ = tx.send(Some(Err(e.to_string())));
                CloseReason::Failure
            }
        };
        if let Some(shared) = shared.upgrade() {
            shared.input(|st, now| {
                // Already closed by the pool: nothing to report.
                let _ = st.pool.connection_closed(now, connection, reason);
            });
        }
    }));
    task.map(|_detached| H2Handle { ready: rx, reported_limit: Arc::new(AtomicUsize::new(usize::MAX)), ping })
}

fn failure(e: &h2::Error, progress: Progress, facts: RequestFacts) -> ExchangeFailure {
    let kind = if e.reason() == Some(h2::Reason::REFUSED_STREAM) {
        ExchangeFailureKind::RefusedStream
    } else if e.is_go_away() && e.is_remote() && e.reason() == Some(h2::Reason::NO_ERROR) {
        // Streams above the GOAWAY's last-stream-id were not processed.
        ExchangeFailureKind::GoAwayUnprocessed
    } else if e.is_io() {
        ExchangeFailureKind::Io { kind: std::io::ErrorKind::ConnectionReset, message: e.to_string() }
    } else if let (true, Some(reason)) = (e.is_reset(), e.reason()) {
        ExchangeFailureKind::StreamReset { code: u32::from(reason) }
    } else {
        ExchangeFailureKind::Protocol { message: e.to_string() }
    };
    ExchangeFailure { kind, progress, request: facts }
}

fn io_failure(message: String, facts: RequestFacts) -> Attempted {
    Attempted::Failed(ExchangeFailure {
        kind: ExchangeFailureKind::Io { kind: std::io::ErrorKind::ConnectionAborted, message },
        progress: Progress::NothingWritten,
        request: facts,
    })
}

/// Tells the core the peer's MAX_CONCURRENT_STREAMS when it changed.
fn report_limit(shared: &Arc<Shared>, connection: ConnectionId, handle: &H2Handle) {
    let limit = match handle.ready.borrow().as_ref() {
        Some(Ok(send)) => send.current_max_send_streams(),
        _ => return,
    };
    if handle.reported_limit.swap(limit, Ordering::Relaxed) != limit {
        let limit = u32::try_from(limit).unwrap_or(u32::MAX);
        shared.input(|st, now| {
            let _ = st.pool.settings(now, connection, limit);
        });
    }
}

/// Runs one exchange on a stream of the connection.
pub(crate) async fn exchange(
    shared: &Arc<Shared>,
    call: CallId,
    connection: ConnectionId,
    handle: H2Handle,
    parts: &http::request::Parts,
    body: &mut Body,
    facts: RequestFacts,
) -> Result<http::Response<crate::ResponseBody>, Attempted> {
    let mut ready = handle.ready.clone();
    let send = loop {
        if let Some(r) = ready.borrow_and_update().clone() {
            break r;
        }
        if ready.changed().await.is_err() {
            break Err("the HTTP/2 connection ended during its handshake".into());
        }
    };
    let send = send.map_err(|e| io_failure(e, facts))?;
    let mut send =
        send.ready().await.map_err(|e| Attempted::Failed(failure(&e, Progress::NothingWritten, facts)))?;
    report_limit(shared, connection, &handle);

    let mut request = http::Request::from_parts(parts.clone(), ());
    *request.version_mut() = http::Version::HTTP_2;
    for name in HTTP2_STRIPPED {
        request.headers_mut().remove(name);
    }
    let end_of_stream = body.is_empty();
    let (response, mut stream) = send
        .send_request(request, end_of_stream)
        .map_err(|e| Attempted::Failed(failure(&e, Progress::NothingWritten, facts)))?;
    let at = shared.now();
    shared.emit(move |l| l.request_headers_end(call, at));
    let written = |e: h2::Error| Attempted::Failed(failure(&e, Progress::RequestWritten, facts));
    if !end_of_stream {
        match &mut body.kind {
            Kind::Full(bytes) => stream.send_data(bytes.clone(), true).map_err(written)?,
            Kind::Stream(rx) => {
                while let Some(chunk) = rx.recv().await {
                    stream.send_data(chunk, false).map_err(written)?;
                }
                stream.send_data(Bytes::new(), true).map_err(written)?;
            }
            Kind::Empty => {}
        }
        let (at, n) = (shared.now(), body.len().unwrap_or(0));
        shared.emit(move |l| l.request_body_end(call, n, at));
    }
    let read_timeout = shared.settings.read_timeout;
    let response = match read_timeout {
        Some(d) => match within(&*shared.rt, d, response).await {
            Some(r) => r,
            None => {
                check_liveness(shared, connection, &handle);
                return Err(Attempted::Failed(ExchangeFailure {
                    kind: ExchangeFailureKind::Timeout,
                    progress: Progress::RequestWritten,
                    request: facts,
                }));
            }
        },
        None => response.await,
    };
    let response = response.map_err(written)?;
    // The peer's SETTINGS have surely arrived by now: report its stream limit.
    report_limit(shared, connection, &handle);
    let (at, status) = (shared.now(), response.status());
    shared.emit(move |l| l.response_headers_end(call, status, at));
    let (parts, recv) = response.into_parts();
    let body =
        H2Body { shared: Arc::clone(shared), call, connection, handle, recv: Some(recv), trailers: None };
    Ok(http::Response::from_parts(parts, crate::ResponseBody::h2(body)))
}

/// An HTTP/2 response body: a stream's DATA frames, with flow-control capacity
/// returned as they are consumed.
pub(crate) struct H2Body {
    shared: Arc<Shared>,
    call: CallId,
    connection: ConnectionId,
    handle: H2Handle,
    recv: Option<h2::RecvStream>,
    pub(crate) trailers: Option<http::HeaderMap>,
}

impl H2Body {
    pub(crate) async fn chunk(&mut self) -> Result<Option<Bytes>, BodyError> {
        let read_timeout = self.shared.settings.read_timeout;
        let Some(recv) = self.recv.as_mut() else { return Ok(None) };
        let next = match read_timeout {
            Some(d) => match within(&*self.shared.rt, d, recv.data()).await {
                Some(n) => n,
                None => {
                    check_liveness(&self.shared, self.connection, &self.handle);
                    self.end(Reuse::Reusable);
                    return Err(BodyError::Timeout);
                }
            },
            None => recv.data().await,
        };
        match next {
            Some(Ok(data)) => {
                let _ = recv.flow_control().release_capacity(data.len());
                Ok(Some(data))
            }
            Some(Err(e)) => {
                self.end(Reuse::Reusable);
                Err(BodyError::Http2(e.to_string()))
            }
            None => {
                self.trailers = recv.trailers().await.ok().flatten();
                Ok(None)
            }
        }
    }

    /// The body ended: the connection's stream is free again.
    pub(crate) fn finish(&mut self) {
        self.end(Reuse::Reusable);
    }

    /// The stream is over: the connection's stream is free again.
    fn end(&mut self, reuse: Reuse) {
        if self.recv.take().is_some() {
            let call = self.call;
            self.shared.input(|st, now| {
                let _ = st.pool.exchange_finished(now, call, reuse);
            });
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.recv.is_none()
    }
}

impl Drop for H2Body {
    fn drop(&mut self) {
        // Dropping the stream resets it (CANCEL, which we asked for): the
        // connection stays usable.
        self.end(Reuse::Reusable);
    }
}
