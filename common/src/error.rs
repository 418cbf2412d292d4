//! [`Error`]: what failed and where, for every way a call can end badly.

use std::fmt;

use switchyard_core::http1::Http1Error;
use switchyard_core::{AcquireError, AddressError, ExchangeError};

/// Why a call failed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// The URL or the client configuration is invalid (bad scheme, host or port;
    /// cleartext not permitted; an impossible protocol list).
    InvalidUrl {
        /// The URL as given, with any password shown as `***`.
        url: String,
        /// What is wrong with it.
        error: AddressError,
    },
    /// The request cannot be sent as given (for example a relative URI).
    InvalidRequest(String),
    /// No connection: DNS, every connect attempt, TLS, the pool's wait, or shutdown.
    /// The error lists every route tried and why each failed.
    Connect(AcquireError),
    /// The exchange failed and was not retried; says whether the request may have
    /// been sent.
    Exchange(Box<ExchangeError>),
    /// The response body failed after the head arrived.
    Body(BodyError),
    /// The call's overall timeout passed.
    Timeout,
    /// The client configuration is invalid (TLS roots, client certificate, …).
    Config(String),
}

/// A response body failed mid-stream.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum BodyError {
    /// The HTTP/1.1 framing broke, or the connection closed early.
    Http1(Http1Error),
    /// The HTTP/2 stream failed.
    Http2(String),
    /// Reading timed out.
    Timeout,
    /// The connection failed.
    Io(std::sync::Arc<std::io::Error>),
}

impl Error {
    /// Whether a timeout ended the call (the call's own, a read, or the pool wait).
    #[must_use]
    pub fn is_timeout(&self) -> bool {
        match self {
            Error::Timeout | Error::Body(BodyError::Timeout) => true,
            Error::Connect(AcquireError::Timeout { .. }) => true,
            Error::Exchange(e) => matches!(e.kind, switchyard_core::pool::ExchangeFailureKind::Timeout),
            _ => false,
        }
    }

    /// Whether the server may have received the request. `false` means it provably
    /// did not, so sending it again is safe.
    #[must_use]
    pub fn may_have_been_sent(&self) -> bool {
        match self {
            Error::Exchange(e) => e.may_have_been_sent,
            Error::Body(_) | Error::Timeout => true,
            _ => false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidUrl { url, error } => write!(f, "invalid URL {url:?}: {error}"),
            Error::InvalidRequest(why) => write!(f, "invalid request: {why}"),
            Error::Connect(e) => fmt::Display::fmt(e, f),
            Error::Exchange(e) => fmt::Display::fmt(e, f),
            Error::Body(e) => write!(f, "response body failed: {e}"),
            Error::Timeout => f.write_str("the call timed out"),
            Error::Config(why) => write!(f, "invalid client configuration: {why}"),
        }
    }
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::Http1(e) => fmt::Display::fmt(e, f),
            BodyError::Http2(e) => write!(f, "HTTP/2 stream error: {e}"),
            BodyError::Timeout => f.write_str("read timed out"),
            BodyError::Io(e) => write!(f, "connection failed: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::InvalidUrl { error, .. } => Some(error),
            Error::Connect(e) => Some(e),
            Error::Exchange(e) => Some(&**e),
            Error::Body(BodyError::Http1(e)) => Some(e),
            Error::Body(BodyError::Io(e)) => Some(&**e),
            _ => None,
        }
    }
}

impl std::error::Error for BodyError {}
