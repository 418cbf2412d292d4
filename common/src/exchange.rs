//! What every adapter's HTTP/1.1 exchange shares on top of the core's connection
//! driver ([`switchyard_core::http1::Driver`]): turning its events into what the
//! adapters return (a response head, a body chunk, a typed failure) and into
//! listener events. The driver makes every decision; these helpers only translate.
//! (The proxy handshakes are the core's too: `switchyard_core::handshake`.)

use std::io;

use bytes::Bytes;
use switchyard_core::http1::{BodyFailure, Driver, Event, Failure, RequestBody};
use switchyard_core::pool::{ExchangeFailure, RequestFacts};
use switchyard_core::{CallId, CloseReason};

use crate::{BodyError, Error, Hub};

/// How an attempt to run an exchange ended, when it did not produce a response.
#[derive(Debug)]
pub enum Attempted {
    /// The pool decides: retry or fail.
    Failed(ExchangeFailure),
    /// The request itself is wrong; nothing was sent.
    Fatal(Error),
}

/// A reused connection that turned out dead before anything was written: the
/// core retries the call elsewhere (nothing was sent).
#[must_use]
pub fn stale(why: &str, facts: RequestFacts) -> Attempted {
    Attempted::Failed(ExchangeFailure::stale(why, facts))
}

/// The failure for a pooled connection that did not pass its probe
/// ([`switchyard_core::http1::Conn::check`]).
#[must_use]
pub fn stale_after(reason: CloseReason, facts: RequestFacts) -> Attempted {
    match reason {
        CloseReason::ServerClose => stale("the server closed the idle connection", facts),
        _ => stale("the idle connection received unexpected bytes or failed", facts),
    }
}

/// The framing for a request body of this length. A stream (`None`) whose
/// request declares one valid `Content-Length` is sent with that length, and
/// held to it (the driver fails the exchange on a body that ends short or runs
/// long, and the connection is not reused); any other stream is chunked.
#[must_use]
pub fn body_kind(len: Option<u64>, headers: &http::HeaderMap) -> RequestBody {
    match len {
        Some(0) => RequestBody::None,
        Some(n) => RequestBody::Length(n),
        // None, malformed or repeated: chunked (and the encoder says what is wrong).
        None => declared_length(headers).map_or(RequestBody::Chunked, RequestBody::Length),
    }
}

/// The one valid `Content-Length` a request declares (`None`: none, several,
/// or not a number).
#[must_use]
pub fn declared_length(headers: &http::HeaderMap) -> Option<u64> {
    let mut declared = headers.get_all(http::header::CONTENT_LENGTH).iter();
    match (declared.next().and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok()), declared.next()) {
        (Some(n), None) => Some(n),
        _ => None,
    }
}

/// Where an exchange stands before its response head, after the driver's
/// queued events were taken ([`before_head`]).
#[derive(Debug)]
pub enum BeforeHead {
    /// The driver needs I/O (or time) to go on.
    NeedIo,
    /// The final response head: the body follows on the same driver.
    Head(http::Response<()>),
    /// The exchange failed; the pool decides what follows.
    Failed(ExchangeFailure),
    /// The request cannot be sent (its framing, or its body source): the
    /// caller's fault. Finish the driver: the connection may still be reusable.
    Refused(String),
}

/// Takes the driver's events up to the response head, telling listeners as
/// they happen, in OkHttp's order: `request_headers_end`, then
/// `request_body_start` and `request_body_end` (`has_body`), then
/// `response_headers_start` (the request is written, the head is awaited);
/// `response_headers_end` comes with [`head_received`].
pub fn before_head<S>(
    hub: &Hub<S>,
    call: CallId,
    driver: &mut Driver,
    facts: RequestFacts,
    has_body: bool,
) -> BeforeHead {
    let listening = hub.is_listening();
    while let Some(event) = driver.poll_event() {
        match event {
            Event::HeadersSent if listening => {
                let at = hub.now();
                hub.emit(move |l| crate::event::request_head_written(l, call, at, has_body));
            }
            Event::BodySent { bytes } if listening => {
                let at = hub.now();
                hub.emit(move |l| crate::event::request_body_written(l, call, bytes, at));
            }
            Event::HeadersSent | Event::BodySent { .. } => {}
            // Listeners hear `response_headers_end` in [`head_received`],
            // the step every protocol's final head takes.
            Event::Head(head) => return BeforeHead::Head(head),
            Event::Failed(Failure::Exchange { kind, progress }) => {
                return BeforeHead::Failed(ExchangeFailure { kind, progress, request: facts })
            }
            Event::Failed(Failure::Request { message }) => return BeforeHead::Refused(message),
            // Body events and a body failure come only after the head.
            Event::Failed(Failure::Body(_)) | Event::Data(_) | Event::Trailers(_) | Event::Done(_) => {}
        }
    }
    BeforeHead::NeedIo
}

/// The step every final response head takes, on HTTP/1.1 and HTTP/2 alike,
/// once the protocol's own verdicts passed it (the drivers' limits, and on
/// HTTP/2 the session's, a 421 included): listeners hear
/// `response_headers_end`, a 5xx answer counts toward its route's ejection
/// (when the outlier policy counts them: the core decides), and the head
/// gains the extensions that say which call and connection carried it
/// ([`CallId`], [`Carrier`](crate::Carrier)).
pub fn head_received<H: crate::engine::EngineHost>(
    host: &std::sync::Arc<H>,
    call: CallId,
    carrier: crate::Carrier,
    parts: &mut http::response::Parts,
) {
    let hub = host.hub();
    if hub.is_listening() {
        let (at, status) = (hub.now(), parts.status);
        hub.emit(move |l| l.response_headers_end(call, status, at));
    }
    if parts.status.is_server_error() {
        host.input(|st, now| {
            let _ = st.pool.server_error(now, call);
        });
    }
    parts.extensions.insert(call);
    parts.extensions.insert(carrier);
}

/// Where a response body stands, after the driver's next event ([`body_step`]).
#[derive(Debug)]
pub enum BodyStep {
    /// The driver needs I/O (or time) to go on.
    NeedIo,
    /// The next chunk.
    Data(Bytes),
    /// The body is complete: finish the driver to release the connection.
    End,
    /// The body failed: finish the driver (the connection closes).
    Failed(BodyError),
}

/// Takes the driver's next body event; trailers are kept in `trailers`.
pub fn body_step(driver: &mut Driver, trailers: &mut Option<http::HeaderMap>) -> BodyStep {
    while let Some(event) = driver.poll_event() {
        match event {
            Event::Data(b) => return BodyStep::Data(b),
            Event::Trailers(t) => *trailers = Some(t),
            Event::Done(_) => return BodyStep::End,
            Event::Failed(Failure::Body(f)) => return BodyStep::Failed(body_error(f)),
            Event::Failed(Failure::Exchange { kind, .. }) => {
                return BodyStep::Failed(BodyError::Io(std::sync::Arc::new(io::Error::other(
                    kind.to_string(),
                ))))
            }
            Event::Failed(Failure::Request { message }) => {
                return BodyStep::Failed(BodyError::Io(std::sync::Arc::new(io::Error::other(message))))
            }
            Event::HeadersSent | Event::BodySent { .. } | Event::Head(_) => {}
        }
    }
    BodyStep::NeedIo
}

/// The user-facing error for a body the driver failed.
#[must_use]
pub fn body_error(f: BodyFailure) -> BodyError {
    match f {
        BodyFailure::Timeout => BodyError::Timeout,
        BodyFailure::Io { kind, message } => {
            BodyError::Io(std::sync::Arc::new(io::Error::new(kind, message)))
        }
        BodyFailure::Protocol(e) => BodyError::Http1(e),
    }
}

/// Header fields that have no meaning in HTTP/2 and are removed from requests.
/// As header names, so removing them hashes without parsing a string each time.
pub const HTTP2_STRIPPED: [http::HeaderName; 6] = [
    http::header::CONNECTION,
    http::HeaderName::from_static("keep-alive"),
    http::HeaderName::from_static("proxy-connection"),
    http::header::TRANSFER_ENCODING,
    http::header::UPGRADE,
    http::header::HOST,
];
