//! Events: what happened, timestamped, for listeners and tracing.
//!
//! Events are observations; nothing depends on an embedder consuming them, but a
//! embedder that never drains [`poll_event`](crate::Race::poll_event) lets them pile
//! up for the life of the race.
//!
//! Order for one race: `ProxySelectStart`, `ProxySelectEnd`, then per lookup
//! `DnsStart` and `DnsEnd` or `DnsFailed`; per attempt `ConnectStart`, and then
//! exactly one of `ConnectEnd`, `ConnectFailed` or `ConnectCancelled`. The winner
//! of an `https` race has `SecureConnectStart` and `SecureConnectEnd` between its
//! `ConnectStart` and `ConnectEnd`.

use std::net::IpAddr;

use crate::address::{Address, Host, Protocol, Proxy};
use crate::dns::{DnsSource, Family};
use crate::error::{ConnectError, DnsError};
use crate::id::{AttemptId, CallId, ConnectionId, QueryId};
use crate::route::Route;
use crate::time::Instant;

/// Something that happened to a call, at a time.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Event {
    /// When it happened (the `now` of the input that caused it).
    pub at: Instant,
    /// The call it belongs to; `None` for pool-wide events (a connection closed,
    /// a connection taking no new exchanges).
    pub call: Option<CallId>,
    /// What happened.
    pub kind: EventKind,
    /// The event concerns a connection (or a connect attempt) whose TLS
    /// certificate was not verified ([`TlsFacts::unverified`](crate::TlsFacts::unverified)).
    pub unverified_tls: bool,
}

impl EventKind {
    /// The connection the event is about, if any.
    #[must_use]
    pub fn connection(&self) -> Option<ConnectionId> {
        match self {
            EventKind::ConnectionAcquired { connection, .. }
            | EventKind::ConnectionReleased { connection }
            | EventKind::ConnectionClosed { connection, .. }
            | EventKind::NoNewExchanges { connection, .. }
            | EventKind::RetryDecision { connection, .. }
            | EventKind::PooledConnectionTaken { connection } => Some(*connection),
            _ => None,
        }
    }

    /// The connect attempt the event is about, if any.
    #[must_use]
    pub fn attempt(&self) -> Option<AttemptId> {
        match self {
            EventKind::ConnectStart { attempt, .. }
            | EventKind::SecureConnectStart { attempt }
            | EventKind::SecureConnectEnd { attempt, .. }
            | EventKind::ConnectEnd { attempt, .. }
            | EventKind::ConnectFailed { attempt, .. }
            | EventKind::ConnectCancelled { attempt, .. }
            | EventKind::AttemptKeptForPool { attempt, .. } => Some(*attempt),
            _ => None,
        }
    }
}

/// Why an attempt was abandoned without failing.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[non_exhaustive]
pub enum CancelReason {
    /// Another attempt won the TCP race.
    LostRace,
    /// A pooled connection became eligible and the call took it.
    Pooled,
    /// The call was cancelled.
    CallCancelled,
    /// The call's deadline passed.
    CallTimeout,
}

/// One variant per listener callback.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum EventKind {
    /// Proxy selection begins for `address`.
    ProxySelectStart {
        /// The Address being connected.
        address: Address,
    },
    /// The proxies that will be tried, in order.
    ProxySelectEnd {
        /// Proxies in try order ([`Proxy::Direct`] for none).
        proxies: Vec<Proxy>,
        /// Why, in the selector's words, when it gave them
        /// (`"no_proxy matches example.com"`, `"from https_proxy"`).
        reason: Option<String>,
    },
    /// A lookup starts.
    DnsStart {
        /// The query.
        query: QueryId,
        /// The name being resolved.
        host: Host,
        /// A query to the resolver, the cache, or another call's query in flight.
        source: DnsSource,
    },
    /// A lookup answered (once, or once per address family when the resolver
    /// answers A and AAAA separately).
    DnsEnd {
        /// The query.
        query: QueryId,
        /// The name resolved.
        host: Host,
        /// The addresses, in the order routes will use them.
        addresses: Vec<IpAddr>,
        /// The family these addresses are for (`None`: every family).
        family: Option<Family>,
        /// Where the answer came from.
        source: DnsSource,
    },
    /// A lookup failed (planning moves on to the next proxy).
    DnsFailed {
        /// The query.
        query: QueryId,
        /// The name being resolved.
        host: Host,
        /// Why.
        error: DnsError,
        /// Where the answer came from.
        source: DnsSource,
    },
    /// A declared (warm) Address's readiness changed, or a failed connect set
    /// its next retry (pool-wide: no call).
    WarmReadiness {
        /// The Address.
        address: Address,
        /// Where it stands now.
        readiness: crate::readiness::Readiness,
        /// Open connections taking new exchanges.
        open: usize,
        /// Connections its policy wants.
        wanted: usize,
        /// The last connect failure, in words.
        last_error: Option<String>,
        /// When the next connect starts, while backing off.
        next_retry: Option<Instant>,
    },
    /// A TCP connect starts.
    ConnectStart {
        /// The attempt.
        attempt: AttemptId,
        /// The route dialled.
        route: Route,
    },
    /// TLS starts on the race's winner (after any proxy handshake).
    SecureConnectStart {
        /// The attempt.
        attempt: AttemptId,
    },
    /// TLS finished.
    SecureConnectEnd {
        /// The attempt.
        attempt: AttemptId,
        /// The protocol ALPN settled on.
        protocol: Protocol,
    },
    /// The connection is ready to carry exchanges.
    ConnectEnd {
        /// The attempt.
        attempt: AttemptId,
        /// The route.
        route: Route,
        /// The protocol the connection speaks.
        protocol: Protocol,
    },
    /// The attempt failed; the route is recorded in the route database.
    ConnectFailed {
        /// The attempt.
        attempt: AttemptId,
        /// The route.
        route: Route,
        /// Why.
        error: ConnectError,
    },
    /// The attempt was abandoned; its socket was closed by the embedder.
    ConnectCancelled {
        /// The attempt.
        attempt: AttemptId,
        /// The route.
        route: Route,
        /// Why.
        reason: CancelReason,
    },
    /// The call got a connection for one exchange.
    ConnectionAcquired {
        /// The connection.
        connection: ConnectionId,
        /// Where it came from (pooled, shared, coalesced, new).
        source: crate::connection::Source,
        /// The exchange's ordinal on this connection: 0 for its first exchange
        /// (a new connection), 1 for the next, and so on.
        exchange: u64,
    },
    /// The call's exchange on the connection ended.
    ConnectionReleased {
        /// The connection.
        connection: ConnectionId,
    },
    /// A connection was closed (pool-wide; `call` is `None`).
    ConnectionClosed {
        /// The connection.
        connection: ConnectionId,
        /// Why.
        reason: crate::connection::CloseReason,
    },
    /// A connection stopped taking new exchanges; emitted once (pool-wide).
    NoNewExchanges {
        /// The connection.
        connection: ConnectionId,
        /// Why.
        reason: crate::connection::CloseReason,
    },
    /// A failed exchange was judged: retried or failed.
    RetryDecision {
        /// The connection it failed on.
        connection: ConnectionId,
        /// The verdict.
        decision: crate::retry::RetryDecision,
    },
    /// The call took a pooled connection that became eligible mid-race.
    PooledConnectionTaken {
        /// The pooled connection.
        connection: ConnectionId,
    },
    /// The call took a pooled connection mid-race, but this attempt had already
    /// finished TCP (or was its only attempt in flight): it is not thrown away.
    /// It goes on without the call, and its connection joins the pool idle, or
    /// is closed with its own reason when over a cap. Its remaining events
    /// (`SecureConnectStart`/`SecureConnectEnd`, then `ConnectEnd` or
    /// `ConnectFailed`) still come, under the call that started it.
    AttemptKeptForPool {
        /// The attempt.
        attempt: AttemptId,
        /// Its route.
        route: Route,
    },
    /// A route failed too many times in a row and is ejected for `backoff`
    /// (pool-wide; [`crate::OutlierPolicy`]): planned last, its pooled
    /// connections take no new exchange while the Address has another route.
    RouteEjected {
        /// The route.
        route: Route,
        /// Its failures in a row.
        failures: u32,
        /// How long the ejection lasts before the route is half-open.
        backoff: std::time::Duration,
    },
    /// An ejected route's half-open trial succeeded: it is planned as any
    /// other route again (pool-wide).
    RouteRestored {
        /// The route.
        route: Route,
    },
}
