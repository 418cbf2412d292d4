//! [`Connection`]: the pool's record of one connection, lent out read-only.

use crate::address::{Address, Protocol, Proxy};
use crate::connection::{CloseReason, TlsFacts};
use crate::http2::GoAway;
use crate::id::ConnectionId;
use crate::route::Route;
use crate::time::Instant;

/// A read-only view of one connection.
#[derive(Clone, Debug)]
pub struct Connection {
    pub(super) id: ConnectionId,
    pub(super) address: Address,
    pub(super) route: Route,
    pub(super) protocol: Protocol,
    pub(super) created: Instant,
    pub(super) in_flight: u32,
    /// The peer's MAX_CONCURRENT_STREAMS (HTTP/2; `u32::MAX` while unknown or
    /// unlimited), or 1 (HTTP/1).
    pub(super) stream_limit: u32,
    /// HTTP/2: the server's first SETTINGS frame has arrived. Until then the
    /// connection carries one stream (BEHAVIOUR §4).
    pub(super) settings: bool,
    pub(super) idle_since: Option<Instant>,
    pub(super) no_new: Option<CloseReason>,
    pub(super) no_coalescing: bool,
    pub(super) refusals: u32,
    pub(super) completed: u64,
    /// Carried at least one exchange.
    pub(super) used: bool,
    /// Exchanges handed out on it so far (the next one's ordinal).
    pub(super) assigned: u64,
    pub(super) tls: Option<TlsFacts>,
    pub(super) lifetime_deadline: Option<Instant>,
    /// HTTP/2: the server's GOAWAY, once heard.
    pub(super) goaway: Option<GoAway>,
    /// When a DNS answer for its name last gave its address (at first: when
    /// it was established from one). See [`crate::pool::refresh`].
    pub(super) dns_seen: Instant,
}

impl Connection {
    /// The record of a connection just established: idle since `now`,
    /// nothing carried yet; HTTP/2 with one stream until the server's
    /// SETTINGS arrive.
    pub(super) fn established(
        id: ConnectionId,
        (address, route, protocol): (Address, Route, Protocol),
        now: Instant,
        tls: Option<TlsFacts>,
        lifetime_deadline: Option<Instant>,
    ) -> Connection {
        Connection {
            id,
            address,
            route,
            protocol,
            created: now,
            in_flight: 0,
            stream_limit: if protocol.is_multiplexed() { u32::MAX } else { 1 },
            settings: !protocol.is_multiplexed(),
            idle_since: Some(now),
            no_new: None,
            no_coalescing: false,
            refusals: 0,
            completed: 0,
            used: false,
            assigned: 0,
            tls,
            lifetime_deadline,
            goaway: None,
            dns_seen: now,
        }
    }

    /// Its id.
    #[must_use]
    pub fn id(&self) -> ConnectionId {
        self.id
    }
    /// The Address it was made for.
    #[must_use]
    pub fn address(&self) -> &Address {
        &self.address
    }
    /// Its route.
    #[must_use]
    pub fn route(&self) -> &Route {
        &self.route
    }
    /// The protocol it speaks.
    #[must_use]
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }
    /// When it was established.
    #[must_use]
    pub fn created(&self) -> Instant {
        self.created
    }
    /// Exchanges it carries now.
    #[must_use]
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }
    /// Most exchanges it may carry at once now: 1 for HTTP/1; for HTTP/2, 1
    /// until the server's first SETTINGS frame arrives, then the server's
    /// MAX_CONCURRENT_STREAMS (`u32::MAX` when it set none).
    #[must_use]
    pub fn stream_limit(&self) -> u32 {
        self.limit()
    }
    /// HTTP/2: whether the server's first SETTINGS frame has arrived (always
    /// `true` for HTTP/1).
    #[must_use]
    pub fn settings_received(&self) -> bool {
        self.settings
    }
    /// Since when it is idle, if it is.
    #[must_use]
    pub fn idle_since(&self) -> Option<Instant> {
        self.idle_since
    }
    /// Why it takes no new exchanges, if it does not.
    #[must_use]
    pub fn no_new_exchanges(&self) -> Option<CloseReason> {
        self.no_new
    }
    /// HTTP/2: the server's GOAWAY (last stream id and error code), once
    /// reported with [`Pool::goaway`](crate::Pool::goaway).
    #[must_use]
    pub fn goaway(&self) -> Option<GoAway> {
        self.goaway
    }
    /// Whether a 421 forbade coalescing onto it.
    #[must_use]
    pub fn is_no_coalescing(&self) -> bool {
        self.no_coalescing
    }
    /// Exchanges it completed.
    #[must_use]
    pub fn completed_exchanges(&self) -> u64 {
        self.completed
    }
    pub(super) fn multiplexed(&self) -> bool {
        self.protocol.is_multiplexed()
    }
    /// Streams it may carry at once now (see [`Connection::stream_limit`]).
    pub(super) fn limit(&self) -> u32 {
        if self.settings {
            self.stream_limit
        } else {
            1
        }
    }
    /// HTTP/2 whose SETTINGS allow zero streams now.
    pub(super) fn allows_no_stream(&self) -> bool {
        self.settings && self.stream_limit == 0 && self.multiplexed()
    }
    pub(super) fn usable(&self) -> bool {
        self.no_new.is_none()
    }
    pub(super) fn is_idle(&self) -> bool {
        self.usable() && self.in_flight == 0
    }
    pub(super) fn shareable(&self) -> bool {
        self.usable() && self.multiplexed() && self.in_flight > 0 && self.in_flight < self.limit()
    }
    pub(super) fn coalescable(&self) -> bool {
        self.usable()
            && self.protocol.is_coalescable()
            && !self.no_coalescing
            && self.tls.is_some()
            && *self.route.proxy() == Proxy::Direct
            && !self.route.address().skips_dns()
    }
}
