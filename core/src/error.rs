//! Typed errors. Each says what failed and where: the host for DNS, the route for
//! connects, every failure in order for a race. [`Misuse`] is separate: it reports
//! embedder bugs (an id the core never issued), which network data can never cause.

use std::fmt;
use std::io;
use std::time::Duration;

use crate::address::{Address, Host};
use crate::id::{AttemptId, CallId, ConnectionId, QueryId};
use crate::route::Route;

/// Why a DNS query gave no usable answer.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum DnsError {
    /// The resolver answered with no addresses.
    NoAddresses,
    /// The resolver did not answer in time.
    Timeout,
    /// The resolver failed (NXDOMAIN, SERVFAIL, system error, …).
    Failed {
        /// The resolver's message.
        message: String,
    },
}

impl DnsError {
    /// A resolver failure from an I/O error (what `getaddrinfo` wrappers return).
    #[must_use]
    pub fn from_io(err: &io::Error) -> DnsError {
        match err.kind() {
            io::ErrorKind::TimedOut => DnsError::Timeout,
            _ => DnsError::Failed { message: err.to_string() },
        }
    }
}

impl fmt::Display for DnsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DnsError::NoAddresses => f.write_str("no addresses"),
            DnsError::Timeout => f.write_str("lookup timed out"),
            DnsError::Failed { message } => write!(f, "lookup failed: {message}"),
        }
    }
}

/// Which part of the TLS handshake failed.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[non_exhaustive]
pub enum TlsFailure {
    /// The certificate chain is not trusted (unknown issuer, expired, revoked, …).
    Certificate,
    /// The certificate is valid but does not cover the host.
    Hostname,
    /// A pinned key did not match.
    Pin,
    /// The peer sent an alert or broke the protocol.
    Protocol,
}

/// Why one connect attempt (TCP, proxy handshake, TLS) failed.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum ConnectError {
    /// The TCP connect failed (refused, unreachable, reset, …).
    Io {
        /// The I/O error's kind.
        kind: io::ErrorKind,
        /// The I/O error's message.
        message: String,
    },
    /// The TCP connect did not finish within the connect timeout.
    ConnectTimeout {
        /// The timeout that ran out.
        after: Duration,
    },
    /// The proxy did not open the tunnel (SOCKS5, or `CONNECT` for an https
    /// origin) in time: within the connect timeout, which covers reaching the
    /// origin (TCP to the proxy and the tunnel together), or within the
    /// handshake timeout from TCP's end, whichever ended first.
    TunnelTimeout {
        /// The timeout that ran out.
        after: Duration,
    },
    /// The TLS handshake (after any tunnel) did not finish in time.
    HandshakeTimeout {
        /// The timeout that ran out.
        after: Duration,
    },
    /// TLS failed.
    Tls {
        /// Which part failed.
        kind: TlsFailure,
        /// The TLS library's message.
        message: String,
    },
    /// The proxy refused or broke the `CONNECT` or SOCKS5 handshake.
    Proxy {
        /// What the proxy said or did.
        message: String,
    },
    /// An HTTP proxy answered the `CONNECT` with a status other than 2xx and
    /// 407 (which is [`ConnectError::ProxyAuth`]): it works, and will not
    /// open this tunnel.
    TunnelRefused {
        /// The host and port the tunnel was asked for.
        authority: String,
        /// The proxy's answer.
        status: http::StatusCode,
    },
    /// The proxy asked for authentication (HTTP 407; SOCKS5 refusing every
    /// method offered, or the username/password). Never retried with the same
    /// credentials.
    ProxyAuth {
        /// The proxy's URL (never its credentials).
        proxy: String,
        /// Credentials were offered and refused (else none were configured).
        credentials_refused: bool,
    },
    /// The peer negotiated a protocol the Address does not allow.
    ProtocolNotAllowed {
        /// What was negotiated.
        protocol: crate::address::Protocol,
    },
    /// No socket could be opened: the process or the system is out of file
    /// descriptors (`EMFILE`, `ENFILE`). The pool closes its least recently used
    /// idle connection and tries the same route again, while it has one.
    Exhausted {
        /// The I/O error's message.
        message: String,
    },
}

impl ConnectError {
    /// A TCP-level failure from an I/O error.
    #[must_use]
    pub fn from_io(err: &io::Error) -> ConnectError {
        // EMFILE and ENFILE are 24 and 23 on Linux, the BSDs and macOS;
        // WSAEMFILE is 10024 on Windows.
        if matches!(err.raw_os_error(), Some(23 | 24 | 10024)) {
            return ConnectError::Exhausted { message: err.to_string() };
        }
        ConnectError::Io { kind: err.kind(), message: err.to_string() }
    }

    /// Whether this was a timeout (timeouts are never retried by a call).
    #[must_use]
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            ConnectError::ConnectTimeout { .. }
                | ConnectError::TunnelTimeout { .. }
                | ConnectError::HandshakeTimeout { .. }
        ) || matches!(self, ConnectError::Io { kind, .. } if *kind == io::ErrorKind::TimedOut)
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Io { message, .. } => write!(f, "connect failed: {message}"),
            ConnectError::Exhausted { message } => {
                write!(f, "no socket could be opened (out of file descriptors): {message}")
            }
            ConnectError::ConnectTimeout { after } => {
                write!(f, "connect timed out after {after:?}")
            }
            ConnectError::TunnelTimeout { after } => {
                write!(f, "proxy handshake timed out: the proxy did not open the tunnel within {after:?}")
            }
            ConnectError::HandshakeTimeout { after } => {
                write!(f, "TLS handshake timed out after {after:?}")
            }
            ConnectError::Tls { kind, message } => {
                let what = match kind {
                    TlsFailure::Certificate => "certificate not trusted",
                    TlsFailure::Hostname => "certificate does not cover the host",
                    TlsFailure::Pin => "certificate pin mismatch",
                    TlsFailure::Protocol => "TLS handshake failed",
                };
                write!(f, "{what}: {message}")
            }
            ConnectError::Proxy { message } => write!(f, "proxy handshake failed: {message}"),
            ConnectError::TunnelRefused { authority, status } => {
                write!(f, "proxy handshake failed: the proxy refused the tunnel to {authority}: {status}")
            }
            ConnectError::ProxyAuth { proxy, credentials_refused } => {
                // A proxy's URL, or (a handshake made without its route) its kind.
                let the = if proxy.contains("://") { "the proxy" } else { "the" };
                if *credentials_refused {
                    write!(f, "{the} {proxy} refused the credentials given (proxy authentication required)")
                } else {
                    write!(f, "{the} {proxy} requires authentication, and none is configured for it")
                }
            }
            ConnectError::ProtocolNotAllowed { protocol } => {
                write!(f, "peer negotiated {protocol}, which is not allowed")
            }
        }
    }
}

impl std::error::Error for ConnectError {}

/// One failure inside a race, in the order it happened.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Failure {
    /// A DNS lookup for `host` (the origin's or a proxy's) failed.
    Dns {
        /// The query.
        query: QueryId,
        /// The host looked up.
        host: Host,
        /// Why.
        error: DnsError,
    },
    /// An attempt on `route` failed.
    Connect {
        /// The attempt.
        attempt: AttemptId,
        /// The route it dialled.
        route: Route,
        /// Why.
        error: ConnectError,
    },
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Dns { host, error, .. } => write!(f, "dns {host}: {error}"),
            Failure::Connect { route, error, .. } => write!(f, "{route}: {error}"),
        }
    }
}

/// Why a race ended without a connection.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum RaceErrorKind {
    /// Every route failed (or DNS gave none).
    AllRoutesFailed,
    /// The call's deadline passed first.
    CallTimeout,
}

/// A race ended without a connection: the Address and every failure, first first.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct RaceError {
    /// Why it ended.
    pub kind: RaceErrorKind,
    /// The Address that could not be reached.
    pub address: Address,
    /// Every DNS and connect failure, in the order they happened.
    pub failures: Vec<Failure>,
    /// For [`RaceErrorKind::CallTimeout`]: how far the race had got.
    pub stage: Option<crate::race::ConnectStage>,
}

impl RaceError {
    /// Whether the race ended by time: the call's deadline passed, or every
    /// attempt timed out (connecting, in a proxy tunnel or in TLS) and nothing
    /// else failed.
    #[must_use]
    pub fn timed_out(&self) -> bool {
        self.kind == RaceErrorKind::CallTimeout
            || (!self.failures.is_empty()
                && self
                    .failures
                    .iter()
                    .all(|f| matches!(f, Failure::Connect { error, .. } if error.is_timeout())))
    }

    /// Whether the request may be retried: never after a call timeout, nor when a
    /// failure was a certificate or hostname problem, or a proxy asking for
    /// authentication (the same credentials would be refused again).
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        self.kind != RaceErrorKind::CallTimeout
            && !self.failures.iter().any(|f| {
                matches!(
                    f,
                    Failure::Connect {
                        error: ConnectError::Tls {
                            kind: TlsFailure::Certificate | TlsFailure::Hostname | TlsFailure::Pin,
                            ..
                        } | ConnectError::ProxyAuth { .. },
                        ..
                    }
                )
            })
    }
}

impl fmt::Display for RaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            RaceErrorKind::AllRoutesFailed => write!(f, "could not connect to {}", self.address)?,
            RaceErrorKind::CallTimeout => {
                write!(f, "call timed out connecting to {}", self.address)?;
                if let Some(stage) = self.stage {
                    write!(f, " ({stage})")?;
                }
            }
        }
        match self.failures.as_slice() {
            [] => Ok(()),
            [one] => write!(f, ": {one}"),
            many => {
                write!(f, ": {} failures", many.len())?;
                for (i, fail) in many.iter().enumerate() {
                    write!(f, "; {}) {fail}", i + 1)?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for RaceError {}

/// An embedder bug: an input the core cannot have asked for. Never caused by network
/// data; the core's state is unchanged when it is returned.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum Misuse {
    /// The attempt id was not issued by this race.
    UnknownAttempt(AttemptId),
    /// The query id was not issued by this race.
    UnknownQuery(QueryId),
    /// A handshake result for an attempt that was not asked to handshake.
    NotHandshaking(AttemptId),
    /// The connection id was never issued.
    UnknownConnection(ConnectionId),
    /// The connection was closed already.
    ClosedConnection(ConnectionId),
    /// The call holds no connection (it never acquired one, or already ended).
    NoExchange(CallId),
    /// A warm minimum that could not stay idle under the pool's idle caps.
    WarmAboveIdleCap {
        /// The connections asked for.
        wanted: usize,
        /// The idle cap in the way.
        cap: usize,
    },
}

impl fmt::Display for Misuse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Misuse::UnknownAttempt(id) => write!(f, "driver misuse: unknown attempt {id}"),
            Misuse::UnknownQuery(id) => write!(f, "driver misuse: unknown DNS query {id}"),
            Misuse::UnknownConnection(id) => write!(f, "driver misuse: unknown connection {id}"),
            Misuse::ClosedConnection(id) => write!(f, "driver misuse: {id} is already closed"),
            Misuse::NoExchange(id) => write!(f, "driver misuse: {id} holds no connection"),
            Misuse::WarmAboveIdleCap { wanted, cap } => write!(
                f,
                "a warm minimum of {wanted} connections does not fit the idle cap of {cap} (raise max_idle_per_host / max_idle)"
            ),
            Misuse::NotHandshaking(id) => {
                write!(f, "driver misuse: handshake result for {id}, which was not asked to handshake")
            }
        }
    }
}

impl std::error::Error for Misuse {}
