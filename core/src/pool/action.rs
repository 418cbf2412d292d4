//! What the pool tells the embedder ([`PoolAction`]) and how calls end: where a
//! connection came from ([`Source`]), [`AcquireError`], [`ExchangeError`].

use std::fmt;
use std::time::Duration;

use super::{ExchangeFailureKind, NoRetry, RetryReason};
use crate::address::{Address, Host, Protocol, Proxy};
use crate::connection::CloseReason;
pub use crate::connection::Source;
use crate::error::RaceError;
use crate::id::{AttemptId, CallId, ConnectionId, QueryId};
use crate::route::Route;

/// Why an acquisition failed.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum AcquireError {
    /// The call waited for capacity longer than the acquire timeout or its deadline.
    Timeout {
        /// The Address it waited for.
        address: Address,
        /// How long it waited.
        waited: Duration,
    },
    /// The pool is shut down.
    Shutdown,
    /// Connecting failed: every route, or the call's deadline.
    Connect(RaceError),
    /// The server's HTTP/2 SETTINGS allowed zero concurrent streams
    /// (`SETTINGS_MAX_CONCURRENT_STREAMS` 0) for the whole never-usable period
    /// (the handshake timeout) of the connection the call waited for. The
    /// request was not sent.
    NoStreams {
        /// The Address the call asked for.
        address: Address,
        /// The connection that allowed no stream.
        connection: ConnectionId,
        /// How long that connection was given to allow one.
        waited: Duration,
    },
}

impl fmt::Display for AcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcquireError::Timeout { address, waited } => {
                write!(f, "timed out after {waited:?} waiting for a connection to {address}")
            }
            AcquireError::Shutdown => f.write_str("the connection pool is shut down"),
            AcquireError::Connect(e) => fmt::Display::fmt(e, f),
            AcquireError::NoStreams { address, connection, waited } => write!(
                f,
                "the HTTP/2 server {address} allows no streams: its SETTINGS said MAX_CONCURRENT_STREAMS 0 on {connection} for {waited:?}"
            ),
        }
    }
}

impl std::error::Error for AcquireError {}

/// An exchange failed and will not be retried.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ExchangeError {
    /// What failed.
    pub kind: ExchangeFailureKind,
    /// Whether the server may have received and processed the request.
    pub may_have_been_sent: bool,
    /// Why it was not retried.
    pub why: NoRetry,
    /// The connection it failed on.
    pub connection: ConnectionId,
    /// That connection's route.
    pub route: Route,
    /// Retries the call had made.
    pub retries: u32,
}

impl fmt::Display for ExchangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {} ({})", self.kind, self.route, self.connection)?;
        if self.may_have_been_sent {
            f.write_str("; the request may have been sent")?;
        } else {
            f.write_str("; the request was not processed")?;
        }
        write!(f, "; not retried: {}", self.why)
    }
}

impl std::error::Error for ExchangeError {}

/// What [`Pool::exchange_failed`](super::Pool::exchange_failed) decided.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum FailureOutcome {
    /// The call goes on: a new [`PoolAction::Acquired`] (or failure) follows.
    Retrying(RetryReason),
    /// The call is over.
    Failed(ExchangeError),
}

/// Where a call stood when its own deadline passed
/// ([`Pool::call_timed_out`](super::Pool::call_timed_out)): which phase the
/// timeout belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CallTimeout {
    /// It had no connection yet: how far connecting got (`None`: the pool
    /// no longer knew). End the call with [`Pool::cancel`](super::Pool::cancel).
    Connecting(Option<crate::race::ConnectStage>),
    /// It held a connection: its exchange failed as a timeout (the pool
    /// judged the connection and remembered the route, as for any timeout)
    /// and the call is over. The response head had not arrived.
    Exchange,
}

/// An instruction for the embedder.
#[must_use]
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum PoolAction {
    /// Resolve `host`; answer with [`Pool::handle_dns`](super::Pool::handle_dns)
    /// (every address at once) or [`Pool::handle_dns_answer`](super::Pool::handle_dns_answer)
    /// (per family, with a time to live). Answer every one, even after its call has
    /// ended: other calls may be sharing the lookup. A name the pool's cache holds
    /// is not asked for.
    Resolve {
        /// Quote this in the answer.
        query: QueryId,
        /// The name.
        host: Host,
        /// The port routes will dial.
        port: u16,
        /// Whose host: [`Proxy::Direct`] for the origin. Boxed: it is the
        /// largest field of any action, and actions move by value.
        proxy: Box<Proxy>,
    },
    /// Open TCP to the route; answer with [`Pool::handle_connected`](super::Pool::handle_connected) or [`Pool::handle_failed`](super::Pool::handle_failed).
    Connect {
        /// Quote this.
        attempt: AttemptId,
        /// What to dial.
        route: Route,
    },
    /// Run the route's handshakes; answer with [`Pool::handle_established`](super::Pool::handle_established) or [`Pool::handle_failed`](super::Pool::handle_failed).
    Handshake {
        /// Quote this.
        attempt: AttemptId,
        /// The route.
        route: Route,
    },
    /// Close this attempt's socket now.
    CancelAttempt {
        /// The abandoned attempt.
        attempt: AttemptId,
    },
    /// The attempt's socket is now this connection; keep it under this id and
    /// speak `protocol` on it.
    Established {
        /// The winning attempt.
        attempt: AttemptId,
        /// Its new id.
        connection: ConnectionId,
        /// The protocol negotiated (or known in advance).
        protocol: Protocol,
    },
    /// The call may run one exchange on this connection.
    Acquired {
        /// The call.
        call: CallId,
        /// The connection.
        connection: ConnectionId,
        /// Where it came from.
        source: Source,
    },
    /// The call gets no connection.
    AcquireFailed {
        /// The call.
        call: CallId,
        /// Why.
        error: AcquireError,
    },
    /// Ask this idle HTTP/1.1 connection's socket, without waiting, whether
    /// the server closed it or sent something unasked
    /// ([`http1::Conn::check`](crate::http1::Conn::check)); if so, answer with
    /// [`Pool::connection_closed`](super::Pool::connection_closed). A healthy
    /// connection needs no answer. Emitted every
    /// [`PoolConfig::probe_interval`](super::PoolConfig::probe_interval) while
    /// such connections are idle, oldest idle first.
    Probe {
        /// The idle connection.
        connection: ConnectionId,
    },
    /// Send one HTTP/2 PING on this connection; answer with
    /// [`Pool::pong`](super::Pool::pong) when its PONG arrives. Without one
    /// within [`PoolConfig::pong_timeout`](super::PoolConfig::pong_timeout),
    /// the pool marks the connection unhealthy itself.
    Ping {
        /// The HTTP/2 connection.
        connection: ConnectionId,
    },
    /// End this connection now, without waiting for the exchanges it
    /// carries: they cannot finish (an HTTP/2 connection the server never made
    /// usable within the handshake timeout). Each exchange in flight then
    /// fails; report it with [`Pool::exchange_failed`](super::Pool::exchange_failed)
    /// (an HTTP/2 bridge tells its [`Session`](crate::http2::Session::end)
    /// first, so the failure says why). [`PoolAction::Close`] follows the last.
    Abort {
        /// The connection.
        connection: ConnectionId,
        /// Why (also its close reason).
        reason: CloseReason,
    },
    /// Close this connection's socket.
    Close {
        /// The connection.
        connection: ConnectionId,
        /// Why.
        reason: CloseReason,
    },
}
