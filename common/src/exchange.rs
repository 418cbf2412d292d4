//! What every adapter's HTTP/1.1 exchange shares: how a failed attempt is
//! classified for the core's retry decision, how much of an abandoned body is
//! drained, and the proxy `CONNECT` tunnel's request and answer.

use std::io;
use std::time::Duration;

use bytes::BytesMut;
use switchyard_core::http1::{Exchange, Frame, Http1Error, RequestBody, TargetForm};
use switchyard_core::pool::{ExchangeFailure, ExchangeFailureKind, Progress, RequestFacts};
use switchyard_core::{Address, ConnectError};

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

/// An HTTP `CONNECT` tunnel being opened through a proxy: the request to write,
/// then [`Tunnel::read`] on what the proxy answers.
#[derive(Debug)]
pub struct Tunnel {
    ex: Exchange,
    authority: String,
}

impl Tunnel {
    /// The tunnel to the Address and its request bytes.
    ///
    /// # Errors
    /// [`ConnectError::Proxy`] if the authority cannot form a request.
    pub fn start(address: &Address) -> Result<(Tunnel, Vec<u8>), ConnectError> {
        let authority = format!("{}:{}", address.host(), address.port());
        let req = http::Request::connect(authority.as_str())
            .body(())
            .map_err(|e| proxy_error(format!("cannot build CONNECT request: {e}")))?;
        let (parts, ()) = req.into_parts();
        let (ex, head) = Exchange::new(&parts, TargetForm::Authority, RequestBody::None, Default::default())
            .map_err(|e| proxy_error(e.to_string()))?;
        Ok((Tunnel { ex, authority }, head))
    }

    /// Feeds what the proxy sent (`eof`: it closed): `Ok(true)` once the tunnel
    /// is open, `Ok(false)` while more is needed.
    ///
    /// # Errors
    /// The proxy refused, answered garbage, or sent bytes past its answer.
    pub fn read(&mut self, buf: &mut BytesMut, eof: bool) -> Result<bool, ConnectError> {
        loop {
            match self.ex.decode(buf, eof) {
                Ok(Some(Frame::Head(r))) if r.status().is_success() => {
                    if !buf.is_empty() {
                        return Err(proxy_error("the proxy sent bytes before the tunnel was used".into()));
                    }
                    return Ok(true);
                }
                Ok(Some(Frame::Head(r))) => {
                    return Err(proxy_error(format!(
                        "the proxy refused the tunnel to {}: {}",
                        self.authority,
                        r.status()
                    )))
                }
                Ok(Some(_)) => {}
                Ok(None) => return Ok(false),
                Err(e) => return Err(proxy_error(format!("bad CONNECT response: {e}"))),
            }
        }
    }
}

pub(crate) fn proxy_error(message: String) -> ConnectError {
    ConnectError::Proxy { message }
}
