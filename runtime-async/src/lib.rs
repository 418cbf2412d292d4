//! # switchyard-async
//!
//! The engine behind switchyard's async adapters: an HTTP/1.1 and HTTP/2 client
//! whose every connection decision — reuse, HTTP/2 sharing and coalescing, route
//! planning, the Happy Eyeballs race, limits, eviction, retries — comes from
//! [`switchyard_core`], running on any async runtime that implements
//! [`Runtime`] (spawn, sleep, TCP connect, blocking work).
//!
//! Users pick an adapter — `switchyard-tokio` or `switchyard-smol` — whose
//! `Client` is this crate's [`Client`] for that runtime. Everything else here is
//! runtime-neutral: HTTP/1.1 and HTTP/2 through the core's sans-IO drivers
//! (`switchyard_core::http1::Driver`, `switchyard_core::http2::Driver`; one
//! task per HTTP/2 connection pumps its bytes), TLS through `tokio-rustls`
//! (which uses only tokio's I/O traits — no tokio runtime), idle connections probed before reuse and swept on the core's
//! probe timer (`PoolAction::Probe`, every second by default),
//! HTTP/2 liveness PINGs, the abandoned-body drain, and the core's timers.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod adopt;
mod body;
mod client;
mod connect;
mod copy;
#[cfg(feature = "gateway")]
#[cfg_attr(docsrs, doc(cfg(feature = "gateway")))]
pub mod gateway;
mod h1;
mod h2;
#[cfg(feature = "http3")]
mod h3;
mod manager;
pub mod redirect;
mod response;
mod runtime;
mod shared;
mod upgrade;

pub use body::{Body, BodyClosed, BodySender, BoxError};
pub use client::{Client, ClientService, RequestBuilder};
pub use manager::{Manager, ManagerBuilder, ServerHandle};
pub use response::{BodyReader, Response, ResponseBody, ResponseExt};
pub use runtime::{connected_udp, AsyncIo, BoxFuture, Connecting, Io, Runtime, Task, UdpIo};
pub use switchyard_common::transport::{by_name, Connect, TcpKeepalive, TcpOptions};
pub use switchyard_core::Route;
pub use upgrade::Upgraded;

/// A connector hook as the engine keeps it.
#[derive(Clone)]
pub(crate) struct ConnectorSlot(pub(crate) std::sync::Arc<dyn Connect<Connecting>>);

impl std::fmt::Debug for ConnectorSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Connector")
    }
}
/// The adapter-neutral half: configuration, errors, events, and the guarantees
/// every adapter keeps against hostile peers.
pub use switchyard_common;
pub use switchyard_common::manager::ServerStatus;
/// Pool metrics as Prometheus text (`stats_by_address()` in).
pub use switchyard_common::metrics;
/// A proxy rule: a proxy server and the requests that go through it
/// (reqwest's `Proxy`: `Proxy::https("http://proxy:3128")?`).
pub use switchyard_common::ProxyRule as Proxy;
pub use switchyard_common::ShutdownReport;
pub use switchyard_common::{
    describe, AsyncResolve, BodyError, ClientBuilder, Error, ErrorKind, EventListener, EventLog, HttpVersion,
    IntoUri, NoProxy, NoopListener, ProxyEnv, ProxySelector, Recorded, RequestOptions, Resolve, Resolved,
    SystemResolver, TimeoutPhase, DEFAULT_USER_AGENT,
};
pub use switchyard_core;
/// A response head's bytes as received ([`ClientBuilder::keep_raw_head`]).
pub use switchyard_core::http1::RawHead;
/// A proxy server: how a connection reaches the origin (what a
/// [`ProxySelector`] returns, and a [`Proxy`] rule for every request).
pub use switchyard_core::Proxy as ProxyServer;
pub use switchyard_core::{
    AddressCounters, AddressMetrics, AddressStats, Backoff, CloseReason, Host, OutlierPolicy, Readiness,
    RetryBudget, WarmPolicy,
};
pub use switchyard_core::{
    CallId, ConnectionId, DnsSource, Event, EventKind, Family, Instant, PoolStats, ProxyCredentials,
    StreamLimitPolicy,
};
