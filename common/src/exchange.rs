//! What every adapter's HTTP/1.1 exchange shares: how a failed attempt is
//! classified for the core's retry decision, how much of an abandoned body is
//! drained. (The proxy handshakes are the core's: `switchyard_core::handshake`.)

use std::io;
use std::time::Duration;

use switchyard_core::http1::{Http1Error, RequestBody};
use switchyard_core::pool::{ExchangeFailure, ExchangeFailureKind, Progress, RequestFacts};

use crate::Error;

/// How an attempt to run an exchange ended, when it did not produce a response.
#[derive(Debug)]
pub enum Attempted {
    /// The pool decides: retry or fail.
    Failed(ExchangeFailure),
    /// The request itself is wrong; nothing was sent.
    Fatal(Error),
}

/// An I/O failure at `progress`.
#[must_use]
pub fn io_failure(e: &io::Error, progress: Progress, facts: RequestFacts) -> Attempted {
    Attempted::Failed(ExchangeFailure { kind: ExchangeFailureKind::from_io(e), progress, request: facts })
}

/// A codec failure while reading the response: a connection that closed before
/// any byte is an I/O failure after the request was written; anything else is a
/// protocol failure once the response started.
#[must_use]
pub fn protocol_failure(e: &Http1Error, facts: RequestFacts) -> Attempted {
    let (kind, progress) = match e {
        Http1Error::EmptyResponse => (
            ExchangeFailureKind::Io {
                kind: io::ErrorKind::UnexpectedEof,
                message: "the connection closed before any response byte".into(),
            },
            Progress::RequestWritten,
        ),
        other => (ExchangeFailureKind::Protocol { message: other.to_string() }, Progress::ResponseStarted),
    };
    Attempted::Failed(ExchangeFailure { kind, progress, request: facts })
}

/// What an idle connection's socket says when asked without waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// Nothing to read: still open.
    Alive,
    /// The server closed it.
    Closed,
    /// Bytes nobody asked for, or a socket error.
    Unhealthy,
}

impl Probe {
    /// The close reason for a connection that failed the probe.
    #[must_use]
    pub fn close_reason(self) -> Option<switchyard_core::CloseReason> {
        match self {
            Probe::Alive => None,
            Probe::Closed => Some(switchyard_core::CloseReason::ServerClose),
            Probe::Unhealthy => Some(switchyard_core::CloseReason::Unhealthy),
        }
    }
}

/// A reused connection that turned out dead before anything was written: the
/// core retries the call elsewhere (nothing was sent).
#[must_use]
pub fn stale(why: &str, facts: RequestFacts) -> Attempted {
    let e = io::Error::new(io::ErrorKind::ConnectionAborted, why.to_owned());
    io_failure(&e, Progress::NothingWritten, facts)
}

/// The failure for a pooled connection that did not pass its probe.
#[must_use]
pub fn stale_after(probe: Probe, facts: RequestFacts) -> Attempted {
    match probe {
        Probe::Closed => stale("the server closed the idle connection", facts),
        _ => stale("the idle connection received unexpected bytes or failed", facts),
    }
}

/// The framing for a request body of this length (`None`: unknown, chunked).
#[must_use]
pub fn body_kind(len: Option<u64>) -> RequestBody {
    match len {
        Some(0) => RequestBody::None,
        Some(n) => RequestBody::Length(n),
        None => RequestBody::Chunked,
    }
}

/// How much of an abandoned HTTP/1.1 body is read so the connection can be
/// reused; past either bound the connection is closed instead.
pub const DRAIN_BYTES: u64 = 64 * 1024;
/// How long draining an abandoned body may take.
pub const DRAIN_TIME: Duration = Duration::from_millis(100);

/// After a request body write fails (the server answered early and closed),
/// how long the exchange keeps reading for the response the server may have
/// sent before the connection broke.
pub const EARLY_RESPONSE_GRACE: Duration = Duration::from_millis(500);

/// Header fields that have no meaning in HTTP/2 and are removed from requests.
pub const HTTP2_STRIPPED: [&str; 6] =
    ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host"];
