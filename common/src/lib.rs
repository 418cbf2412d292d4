//! # switchyard-common
//!
//! The adapter-neutral half of switchyard's clients, shared by `switchyard-tokio`,
//! `switchyard-smol` and `switchyard-std` so that each adapter only performs I/O:
//!
//! - [`ClientBuilder`] and [`Config`]: every knob with its default, validated once;
//!   each adapter's client implements [`FromConfig`].
//! - [`Error`] / [`BodyError`]: what failed and where.
//! - [`EventListener`], [`EventLog`], [`describe`]: events, in order.
//! - [`Hub`]: the core's pool behind a lock, with ordered, panic-safe listener
//!   delivery outside it.
//! - [`tls`]: rustls configs (explicit provider, roots, client certificates, ALPN)
//!   and what a handshake tells the core.
//! - [`Resolve`] and [`AsyncResolve`]: DNS (blocking or async, whole or per address
//!   family), with `--resolve`-style overrides; the `hickory` feature adds
//!   `hickory::HickoryResolver`. The pool caches answers ([`switchyard_core::dns`]).
//! - [`RequestBuilder`], [`BodyKind`], [`BodyLedger`], [`Collector`]: the
//!   request and response surface, the same on every adapter.
//! - [`engine`]: the engine's bookkeeping (attempts, connections, leases,
//!   waiters) and what each of the core's actions means for it, as effects the
//!   adapter carries out after the lock is released.
//! - [`exchange`]: the HTTP/1.1 connection driver's events turned into
//!   responses, body chunks, typed failures and listener events (the driver
//!   itself, and the proxy handshakes, are sans-IO machines in the core:
//!   `switchyard_core::http1::Driver`, `switchyard_core::handshake`).
//!
//! It has no async runtime and performs no I/O of its own beyond the system
//! resolver; users normally reach it through an adapter's re-exports.
//!
//! # What switchyard does not do
//!
//! It is the connection layer, with a thin request API on top: it does not
//! follow redirects, decompress bodies or keep cookies (stack tower-http's
//! `FollowRedirect`, `Decompression` and a cookie layer over an async client,
//! which is a `tower::Service`: see `switchyard-tokio`'s `tower` example), it
//! does not speak over Unix sockets, and it has no HTTP/3.
//!
//! # What every adapter guarantees against hostile peers and careless callers
//!
//! These hold on switchyard-tokio, switchyard-smol and switchyard-std alike, and
//! the hostile suite (`switchyard_tests::hostile`) checks each on every adapter,
//! over cleartext and TLS, HTTP/2 where it applies:
//!
//! - **No response smuggling.** An HTTP/1.1 connection is reused only if nothing
//!   was received beyond the end of the response. Bytes after it — a second,
//!   unsolicited response after a body, a body on a 204 or a HEAD response,
//!   garbage — close the connection (`CloseReason::BytesAfterResponse`, or
//!   `Unhealthy` when they arrive while it is idle) and are never decoded as
//!   another call's response. The probe before reuse checks the read buffer as
//!   well as the socket.
//! - **Credentials in a URL never leak.** `https://user:pw@host/` never puts the
//!   userinfo in `Host` or `:authority`; it becomes `Authorization: Basic`
//!   (percent-decoded, marked sensitive) unless the request has its own
//!   `Authorization`. Events, logs and errors show the URL without it, or with
//!   the password as `***` ([`redacted`], [`redact`]).
//! - **The call timeout is a deadline.** It holds while the response head is
//!   read: checked before every read, and bounding each (std); polled before the
//!   work, so a read loop that never waits cannot starve it (async).
//! - **At most 5 interim (1xx) responses** per exchange; a sixth is a protocol
//!   error ([`switchyard_core::http1::Limits::max_informational`]).
//! - **An early final response wins.** While a request body is being sent, the
//!   connection is also read: a final response that arrives first (a 413 before
//!   the upload is read) stops the upload and is the call's answer; the
//!   connection is then closed, since part of the body never went out. If the
//!   write fails, what the server sent before the break is still read (for
//!   `DriverConfig::early_response_grace`, 500 ms). The core's connection driver
//!   (`switchyard_core::http1::Driver`) makes these decisions for every adapter.
//! - **Idle connections are bounded in total** (100 by default,
//!   [`ClientBuilder::max_idle`]); a connect that fails for lack of file
//!   descriptors, or a full total connection cap, closes the least recently
//!   used idle connection to make room.
//! - **Bodies have a deadline**: [`ClientBuilder::timeout`] bounds the whole
//!   call, its response body included (as reqwest's does);
//!   [`ClientBuilder::head_timeout`] bounds only the time to the head, and
//!   [`ClientBuilder::body_timeout`] the body from its head (each also per request).
//! - **Non-HTTP fails fast**: a first line that cannot begin `HTTP/1.x` is a
//!   protocol error at once, not after a blank line or 64 KiB.
//! - **HTTP/2 that never becomes usable is retired**: no SETTINGS from the
//!   server, or a stream limit still zero, within the handshake timeout closes
//!   the connection (`CloseReason::NeverUsable`); its calls fail typed or move
//!   on per the retry rules, and it never sits idle in the pool.
//! - **Header blocks are bounded** on HTTP/2 as on HTTP/1.1: h2's maximum
//!   header list size is the head limit (64 KiB by default,
//!   [`ClientBuilder::max_response_head_size`]).
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod alt_svc;
pub mod call;
mod config;
pub mod engine;
mod error;
mod event;
pub mod exchange;
pub mod gateway;
pub mod h2;
#[cfg(feature = "http3")]
#[cfg_attr(docsrs, doc(cfg(feature = "http3")))]
pub mod h3;
mod hub;
pub mod manager;
pub mod metrics;
pub mod proxy_env;
pub mod proxy_rule;
pub mod redirect;
mod request;
mod resolve;
mod shutdown;
pub use shutdown::ShutdownReport;
pub mod tls;
pub mod transport;
mod userinfo;

pub use config::{
    ClientBuilder, Config, FromConfig, Http2Settings, HttpVersion, Layered, ProxySelector, ProxyServer,
    RequestOptions, UnixSocket, DEFAULT_USER_AGENT,
};
#[cfg(feature = "json")]
pub use error::decode_json;

/// Which connection carried a response, and how the pool found it: a
/// response's extension (read it through the adapters' `ResponseExt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Carrier {
    /// The connection.
    pub connection: switchyard_core::ConnectionId,
    /// New, pooled, shared or coalesced.
    pub source: switchyard_core::Source,
}
pub use error::{BodyError, Error, ErrorKind, TimeoutPhase};
pub use event::{
    describe, request_body_written, request_head_written, EventListener, EventLog, LogSites, NoopListener,
    Recorded,
};
pub use hub::{Hub, HubState, Note, Watch, Watchers};
pub use request::{
    Async, Blocking, BodyKind, BodyLedger, Collector, IntoUri, Notes, RequestBuilder, SendAsync,
    SendBlocking, Sender,
};

/// What the builder and request-builder method macros name, for adapters
/// that expand them.
#[doc(hidden)]
pub mod __private {
    /// No type has it: a method whose feature is off asks for it, so the
    /// compiler's error says which feature to turn on.
    #[diagnostic::on_unimplemented(
        message = "`json` needs the `json` feature: switchyard-tokio = {{ version = \"0.1\", features = [\"json\"] }} (or switchyard-smol, switchyard-std)",
        label = "the `json` feature is off"
    )]
    pub trait NeedsJsonFeature {}
    /// As [`NeedsJsonFeature`], for `query`.
    #[diagnostic::on_unimplemented(
        message = "`query` needs the `query` feature: switchyard-tokio = {{ version = \"0.1\", features = [\"query\"] }} (or switchyard-smol, switchyard-std)",
        label = "the `query` feature is off"
    )]
    pub trait NeedsQueryFeature {}
    /// As [`NeedsJsonFeature`], for `redirect`.
    #[diagnostic::on_unimplemented(
        message = "`redirect` needs the `redirect` feature: switchyard-tokio = {{ version = \"0.1\", features = [\"redirect\"] }} (or switchyard-smol)",
        label = "the `redirect` feature is off"
    )]
    pub trait NeedsRedirectFeature {}
    /// As [`NeedsJsonFeature`], for `gzip`, `deflate` and `brotli`.
    #[diagnostic::on_unimplemented(
        message = "decoding bodies needs the `decompression` feature: switchyard-tokio = {{ version = \"0.1\", features = [\"decompression\"] }} (or switchyard-smol)",
        label = "the `decompression` feature is off"
    )]
    pub trait NeedsDecompressionFeature {}
    pub use crate::event::EventListener;
    pub use crate::resolve::Resolve;
    pub use crate::HttpVersion;
    pub use base64;
    pub use rustls;
    pub use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    #[cfg(any(feature = "json", feature = "query"))]
    pub use serde;
    #[cfg(feature = "json")]
    pub use serde_json;
    #[cfg(feature = "query")]
    pub use serde_urlencoded;
    pub use std::net::IpAddr;
    pub use std::path::{Path, PathBuf};
    pub use std::sync::Arc;
    pub use std::time::Duration;
    pub use switchyard_core::{Family, OutlierPolicy, Proxy, RetryBudget, StreamLimitPolicy};
}
#[doc(hidden)]
pub use http as __http;
pub use proxy_env::{parse_proxy_url, NoProxy, ProxyEnv};
pub use proxy_rule::ProxyRule;
#[cfg(feature = "hickory")]
pub mod hickory;
pub use resolve::{AsyncResolve, BoxFuture, HttpsRecords, Resolve, Resolved, SystemResolver};
pub use switchyard_core;
#[doc(hidden)]
pub use tracing as __tracing;
pub use userinfo::{redact, redacted, take_userinfo, without_userinfo};
