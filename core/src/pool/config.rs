//! The pool's configuration and a call's options.

use std::time::Duration;

use super::CertificatePins;
use crate::address::Proxy;
#[allow(unused_imports)] // for rustdoc links
use crate::outlier::OutlierPolicy;
use crate::race::RaceConfig;
#[allow(unused_imports)] // for rustdoc links
use crate::race::RaceRequest;
use crate::route_db::RouteDatabase;
use crate::time::Instant;

/// What to do when every HTTP/2 connection to an Address is at its stream limit.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum StreamLimitPolicy {
    /// Open another connection (OkHttp, Go). Default.
    #[default]
    OpenNew,
    /// Wait for a stream to free (hyper; RFC 9113's SHOULD).
    Wait,
}

/// The pool's knobs. Every default is stated on its field.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// The connect race's timing. Default: [`RaceConfig::default`].
    pub race: RaceConfig,
    /// Idle connections older than this are closed. Default: 90 s.
    pub keep_alive: Duration,
    /// Connections older than this take no new exchanges: an HTTP/1.1 one
    /// closes when its exchange ends (at once when idle), an HTTP/2 one opens
    /// no new stream and closes when its last stream ends
    /// ([`CloseReason::MaxLifetime`]). Rotating connections spreads a scaled-out
    /// service's load over the instances DNS or the balancer added since.
    /// Default: none.
    ///
    /// [`CloseReason::MaxLifetime`]: crate::CloseReason::MaxLifetime
    pub max_lifetime: Option<Duration>,
    /// Each connection's lifetime is [`PoolConfig::max_lifetime`] moved by up
    /// to this share of itself, either way, drawn per connection from
    /// [`PoolConfig::seed`]: connections opened together (a burst, a warm
    /// pool) do not all retire in the same instant. Clamped to `[0, 1]`.
    /// Default: 0.1 (±10 %).
    pub max_lifetime_jitter: f64,
    /// Open plus connecting connections per Address. Default: unlimited.
    pub max_connections_per_address: Option<usize>,
    /// Open plus connecting connections in total. Default: unlimited.
    pub max_connections_total: Option<usize>,
    /// Idle connections kept per Address. Default: 32. Above it, the oldest
    /// idle ones close after [`PoolConfig::idle_cap_grace`]; zero keeps none:
    /// a released connection closes at once ([`CloseReason::OverIdleCap`]).
    ///
    /// [`CloseReason::OverIdleCap`]: crate::CloseReason::OverIdleCap
    pub max_idle_per_address: usize,
    /// Idle connections kept in total, across Addresses; past it the least
    /// recently used idle connection closes ([`CloseReason::OverIdleCap`]).
    /// Default: 100 (as Go's `MaxIdleConns`): a client that talks to thousands of
    /// hosts keeps at most 100 idle sockets, well under the common 1,024
    /// descriptor limit. `None`: unbounded.
    ///
    /// [`CloseReason::OverIdleCap`]: crate::CloseReason::OverIdleCap
    pub max_idle_total: Option<usize>,
    /// How long a call may wait for capacity. Default: 30 s.
    pub acquire_timeout: Duration,
    /// HTTP/2 at its stream limit. Default: open another connection.
    pub stream_limit_policy: StreamLimitPolicy,
    /// How long a failed route stays postponed. Default: 10 min.
    pub route_ttl: Duration,
    /// Retries per call. Default: 3.
    pub max_retries: u32,
    /// Retries per call that do not count toward [`PoolConfig::max_retries`]
    /// because the request was turned away through no fault of its own: a
    /// stream above a GOAWAY's last stream id (the server is retiring the
    /// connection), or a REFUSED_STREAM for a stream opened before the server's
    /// SETTINGS arrived (BEHAVIOUR §4, §6). Each still needs the call's deadline
    /// not to have passed. Default: 10.
    pub max_free_retries: u32,
    /// Retries per Address, as a share of its recent calls (free retries are
    /// not charged: see [`crate::pool::RetryBudget`]): beyond it a failure that would be retried fails with
    /// [`NoRetry::RetryBudget`]. `None`: only the per-call limits apply.
    /// Default: [`RetryBudget::default`] (20 % of the calls of the last 10 s,
    /// plus 10 per second: Finagle's default budget).
    ///
    /// [`NoRetry::RetryBudget`]: crate::pool::NoRetry::RetryBudget
    /// [`RetryBudget::default`]: super::RetryBudget
    pub retry_budget: Option<super::RetryBudget>,
    /// Outlier ejection per route: failures in a row eject a route for a
    /// backoff, then one attempt tries it (see [`crate::outlier`]).
    /// Default: [`OutlierPolicy::default`] (5 failures in a row; 10 s,
    /// doubling, at most 300 s; 5xx answers not counted).
    pub outliers: crate::outlier::OutlierPolicy,
    /// Public-key pins, checked before coalescing. Default: none.
    pub pins: CertificatePins,
    /// One handshake per HTTP/2 origin: a call to an `https` Address that may
    /// speak HTTP/2 waits for a connect already in flight for it instead of
    /// racing beside it (see the [pool docs](crate::pool)). Default: on.
    pub await_pending_http2: bool,
    /// How long an idle connection above the per-Address idle cap stays before
    /// it is closed: under steady demand connections are idle only between
    /// exchanges and nothing is closed; once demand falls, the excess closes
    /// after this. Default: 5 s.
    pub idle_cap_grace: Duration,
    /// How often idle HTTP/1.1 connections are probed ([`PoolAction::Probe`]),
    /// so a server's close is seen while they sit in the pool, not only at the
    /// next reuse (which probes anyway). Default: none (switchyard's adapters
    /// set 1 s).
    ///
    /// [`PoolAction::Probe`]: super::PoolAction::Probe
    pub probe_interval: Option<Duration>,
    /// HTTP/2 liveness: after a stream's read stalls ([`Pool::stream_stalled`]),
    /// and every [`PoolConfig::ping_interval`], one PING is sent
    /// ([`PoolAction::Ping`]); no PONG within this marks the connection
    /// unhealthy ([`CloseReason::Unhealthy`]: no new exchanges; an idle one
    /// closes at once). Default: 1 s.
    ///
    /// [`CloseReason::Unhealthy`]: crate::CloseReason::Unhealthy
    ///
    /// [`Pool::stream_stalled`]: super::Pool::stream_stalled
    /// [`PoolAction::Ping`]: super::PoolAction::Ping
    pub pong_timeout: Duration,
    /// HTTP/2 keep-alive: every HTTP/2 connection, idle or busy, sends a PING
    /// this often, so a peer that went away silently (a NAT that dropped the
    /// mapping, a host that lost power) is found within `ping_interval +
    /// pong_timeout` rather than at the next call's timeout. The core takes
    /// any interval; switchyard's builders refuse less than 10 s (gRPC
    /// clients' floor: servers enforcing gRPC's keep-alive policy close
    /// connections that ping faster than they allow). Default: none (as
    /// hyper and Go).
    pub ping_interval: Option<Duration>,
    /// The DNS cache (see [`crate::dns`]). Default: [`DnsCacheConfig::default`]
    /// (60 s for answers without a time to live, 5 s for failures, 256 names).
    ///
    /// [`DnsCacheConfig::default`]: crate::DnsCacheConfig
    pub dns_cache: crate::dns::DnsCacheConfig,
    /// Names with pooled connections are looked up again as their cached
    /// answers expire, and connections to addresses the new answer no longer
    /// gives drain ([`CloseReason::DnsChanged`]; see [`crate::pool::refresh`]).
    /// Needs the DNS cache. Default: on.
    ///
    /// [`CloseReason::DnsChanged`]: crate::CloseReason::DnsChanged
    pub dns_refresh: bool,
    /// How long an address must be absent from every answer for its name
    /// before connections to it drain: a connection drains only once no
    /// answer has named its address for the longer of this and three of the
    /// answers' times to live. Services that answer each query with one or
    /// a few of many addresses (object stores, CDNs, cloud load balancers)
    /// rotate through them; an address that keeps serving keeps turning up,
    /// so its connections stay. Default: 60 s.
    pub dns_drain_grace: Duration,
    /// Seeds the pool's jitter: warm connects' backoff (see
    /// [`crate::pool::warm`]) and connections' lifetimes
    /// ([`PoolConfig::max_lifetime_jitter`]); an embedder passes a random one, a
    /// test a fixed one. Default: a constant.
    pub seed: u64,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            race: RaceConfig::default(),
            keep_alive: Duration::from_secs(90),
            max_lifetime: None,
            max_lifetime_jitter: 0.1,
            max_connections_per_address: None,
            max_connections_total: None,
            max_idle_per_address: 32,
            max_idle_total: Some(100),
            acquire_timeout: Duration::from_secs(30),
            stream_limit_policy: StreamLimitPolicy::OpenNew,
            route_ttl: RouteDatabase::DEFAULT_TTL,
            max_retries: 3,
            max_free_retries: 10,
            retry_budget: Some(super::RetryBudget::default()),
            outliers: crate::outlier::OutlierPolicy::default(),
            pins: CertificatePins::default(),
            await_pending_http2: true,
            idle_cap_grace: Duration::from_secs(5),
            probe_interval: None,
            pong_timeout: Duration::from_secs(1),
            ping_interval: None,
            dns_cache: crate::dns::DnsCacheConfig::default(),
            dns_refresh: true,
            dns_drain_grace: Duration::from_secs(60),
            seed: 0x5EED_5EED_5EED_5EED,
        }
    }
}

/// What a call asks for.
#[derive(Clone, Debug, Default)]
pub struct AcquireOptions {
    /// A connection no one else will use (upgrades, `CONNECT`, WebSocket). It is
    /// marked no-new-exchanges when handed out.
    pub exclusive: bool,
    /// Only a multiplexed (HTTP/2) connection will do.
    pub require_multiplexed: bool,
    /// The call's own deadline; bounds waiting and connecting.
    pub deadline: Option<Instant>,
    /// The proxy selector's answer for this call (see [`RaceRequest::proxies`]).
    pub proxies: Vec<Proxy>,
    /// Why the selector chose them, in words (see [`RaceRequest::proxy_reason`]).
    pub proxy_reason: Option<String>,
}
