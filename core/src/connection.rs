//! Connection vocabulary shared by the pool and the adapters: why a connection
//! stops taking exchanges or closes ([`CloseReason`]), what an exchange's end means
//! for its connection ([`Reuse`]), and the TLS facts an adapter reports
//! ([`TlsFacts`]).

use std::fmt;
use std::net::IpAddr;

/// Why a connection takes no new exchanges, or why it closed. Every close and
/// every no-new-exchanges transition carries one.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[non_exhaustive]
pub enum CloseReason {
    /// Idle longer than the keep-alive.
    IdleTimeout,
    /// Older than the configured max lifetime.
    MaxLifetime,
    /// Over an idle cap (per Address or total); the oldest idle goes first.
    OverIdleCap,
    /// Closed to make room under the total connection cap for another Address.
    Evicted,
    /// The server closed it, or said `Connection: close` (or HTTP/1.0 without
    /// keep-alive).
    ServerClose,
    /// The request said `Connection: close`.
    RequestClose,
    /// The response body was delimited by the connection closing.
    CloseDelimited,
    /// HTTP/2 GOAWAY.
    GoAway,
    /// An I/O or protocol failure on the connection.
    Failure,
    /// A response body was dropped unread beyond the drain limit; framing lost.
    UnreadBody,
    /// `Expect: 100-continue` was not honoured, so the body's fate is unknown.
    ExpectNotHonoured,
    /// The response ended before the request body was fully sent.
    RequestBodyIncomplete,
    /// Handed out for exclusive use (upgrade, `CONNECT`, WebSocket).
    Exclusive,
    /// A second HTTP/2 REFUSED_STREAM on this connection.
    RefusedStreams,
    /// The peer reset a stream with an error other than REFUSED_STREAM.
    StreamReset,
    /// A liveness check failed (HTTP/2 PING without PONG, EOF seen while idle).
    Unhealthy,
    /// A new HTTP/2 connection found an eligible one already pooled.
    Duplicate,
    /// [`Pool::evict_all`](crate::Pool::evict_all).
    EvictAll,
    /// The pool is shutting down.
    Shutdown,
    /// HTTP/1.1: bytes arrived beyond the end of a response (an unsolicited
    /// response, or garbage). They are never read as another request's response.
    BytesAfterResponse,
    /// HTTP/2: the server never made the connection usable (no SETTINGS, or a
    /// stream limit of zero) within the handshake timeout.
    NeverUsable,
    /// Its server's name was looked up again and no longer gives the
    /// connection's IP address: it drains, and new calls go to the addresses
    /// DNS gives now.
    DnsChanged,
    /// Its route was ejected after failures in a row
    /// ([`crate::OutlierPolicy`]) and the Address has another route.
    RouteEjected,
    /// HTTP/2: it carried as many streams as the server was seen to process
    /// on one connection before going away (GOAWAY with streams left over,
    /// twice in a row: nginx's `keepalive_requests`). It takes no more, so no
    /// stream lands where the server would turn it away.
    StreamBudget,
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CloseReason::IdleTimeout => "idle timeout",
            CloseReason::MaxLifetime => "max lifetime",
            CloseReason::OverIdleCap => "over idle cap",
            CloseReason::Evicted => "evicted for capacity",
            CloseReason::ServerClose => "server closed",
            CloseReason::RequestClose => "request asked to close",
            CloseReason::CloseDelimited => "close-delimited body",
            CloseReason::GoAway => "GOAWAY",
            CloseReason::Failure => "failure",
            CloseReason::UnreadBody => "unread body",
            CloseReason::ExpectNotHonoured => "100-continue not honoured",
            CloseReason::RequestBodyIncomplete => "request body not fully sent",
            CloseReason::Exclusive => "exclusive use",
            CloseReason::RefusedStreams => "refused streams",
            CloseReason::StreamReset => "stream reset",
            CloseReason::Unhealthy => "unhealthy",
            CloseReason::Duplicate => "duplicate",
            CloseReason::EvictAll => "evict all",
            CloseReason::Shutdown => "shutdown",
            CloseReason::BytesAfterResponse => "bytes after the response",
            CloseReason::NeverUsable => "never usable",
            CloseReason::DnsChanged => "address no longer in DNS",
            CloseReason::RouteEjected => "route ejected",
            CloseReason::StreamBudget => "the server's streams per connection reached",
        })
    }
}

/// What the end of an exchange means for its connection.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Reuse {
    /// The connection may carry another exchange.
    Reusable,
    /// It may not, for this reason; it closes once its other exchanges end.
    Retire(CloseReason),
}

/// What the adapter learned from a verified TLS handshake, used for coalescing.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct TlsFacts {
    /// DNS names the verified certificate covers (subjectAltName dNSName entries,
    /// wildcards as written, e.g. `*.example.com`).
    pub dns_names: Vec<String>,
    /// IP addresses the certificate covers (subjectAltName iPAddress entries).
    pub ip_addresses: Vec<IpAddr>,
    /// SHA-256 digests of the chain's SubjectPublicKeyInfo, leaf first, for pins.
    pub spki_sha256: Vec<[u8; 32]>,
    /// The certificate was *not* verified (the client was told to accept any
    /// certificate, for development). Such a connection is never a
    /// coalescing target — its names prove nothing — and every event about it
    /// says so ([`Event::unverified_tls`](crate::Event::unverified_tls)).
    pub unverified: bool,
    /// The certificate was checked by a verifier the caller supplied (a
    /// prepared TLS config), not by switchyard's own. What it checks is
    /// unknown — it may accept anything, or pin a key per host — so its
    /// names prove nothing for *another* host: the connection is never a
    /// coalescing target (BEHAVIOUR §5). A client whose caller vouches for
    /// the verifier leaves this `false`.
    pub caller_verifier: bool,
}

/// Where an acquired connection came from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Source {
    /// An idle pooled connection.
    Pooled,
    /// A share of an HTTP/2 connection already carrying exchanges.
    Shared,
    /// An HTTP/2 connection to another host, coalesced.
    Coalesced,
    /// Newly connected by this call's race.
    New,
}

impl Source {
    /// Whether the connection existed before this call.
    #[must_use]
    pub fn is_reused(self) -> bool {
        self != Source::New
    }
}
