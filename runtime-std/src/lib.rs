//! # switchyard-std
//!
//! A blocking HTTP/1.1 and HTTP/2 client — no async runtime anywhere in its
//! tree — with reqwest's blocking shape:
//!
//! ```no_run
//! let client = switchyard_std::Client::new()?;
//! let mut response = client.get("https://example.com/").send()?.error_for_status()?;
//! response.copy_to(&mut std::io::stdout())?; // or save_to("page.html"); a Response is an io::Read
//! # Ok::<(), switchyard_std::Error>(())
//! ```
//!
//! The pieces, in the order you meet them:
//! - [`Client`] — cheap to clone, one connection pool; [`Client::builder`]
//!   gives a [`ClientBuilder`] (timeouts, TLS roots, proxies, DNS, limits,
//!   HTTP versions, retries, listeners).
//! - [`RequestBuilder`] — `client.get(url)`, `.post(url)`, …: headers, body,
//!   `json`/`query` (features), per-request timeouts; `.send()`.
//! - [`Response`] — status, headers, `url()`, `text()`, `bytes`, `json`,
//!   `chunk`, `save_to(path)`, `copy_to(writer)`, `error_for_status`.
//! - [`Error`] — what failed and where ([`ErrorKind`]), with reqwest's
//!   predicates (`is_timeout`, `is_connect`, `is_status`, `is_shutdown`, …).
//! - [`Manager`] — declared servers kept warm.
//! - Events ([`EventListener`], [`EventLog`]) and metrics
//!   (`stats()`, `stats_by_address()` as [`AddressMetrics`]).
//!
//! ## How it works
//!
//! A blocking HTTP/1.1 and HTTP/2 client on `std::net` and rustls whose every connection
//! decision — reuse, route planning, the Happy Eyeballs race, limits, eviction,
//! retries — comes from the core, a state machine with no I/O
//! that every adapter shares. No async runtime anywhere in its tree.
//!
//! How it runs without one:
//! - **The race**: a call's first TCP connect starts on the calling thread,
//!   which waits a millisecond for it (a loopback or LAN peer has answered by
//!   then, and the request goes out from the thread that connected); a slower
//!   connect, every later attempt and each handshake run on reused worker
//!   threads, in parallel as the core staggers them. A losing handshake is shut
//!   down at once; a losing TCP connect cannot be interrupted in std, so its
//!   thread closes the socket the moment the connect returns (at the latest
//!   after the connect timeout).
//! - **Timers**: no housekeeping thread. Whoever enters the client (a call
//!   starting, waiting, finishing; a connect thread reporting; [`Client::stats`])
//!   fires the core's due timers, and a waiting call sleeps only until the
//!   core's next deadline. Idle connections past their keep-alive are closed at
//!   the client's next activity.
//! - **Idle connections** are probed (a non-blocking peek) before reuse, so a
//!   request never goes out on a connection the server already closed.
//! - **Timeouts** are socket options, bounded by what is left of the call.
//! - **HTTP/2** by ALPN over TLS (`h2` is offered first, as on the async
//!   adapters) and with prior knowledge over cleartext
//!   ([`HttpVersion::Http2Only`]): the
//!   core's sans-IO HTTP/2 driver with the same
//!   rules as every adapter (stream limits, GOAWAY retries, coalescing, 421,
//!   PING keep-alive, windows, trailers). Each HTTP/2 connection has one
//!   reader thread for its life; calls write their own frames and park until
//!   their stream moves.
//!
//! ```
//! # use switchyard_tests::server::{ServerOptions, TestServer};
//! # let server = TestServer::start(ServerOptions::default()); // loopback, for this example
//! # let authority = format!("example.test:{}", server.port());
//! # let base = format!("http://{authority}");
//! use switchyard_std::{Body, Client, EventLog};
//!
//! let log = EventLog::default();
//! let client = Client::builder()
//!     .event_listener(log.clone())
//!     .resolve(&authority, ["127.0.0.1".parse().unwrap()]) // like curl --resolve
//!     .build()?;
//!
//! let mut response = client.get(format!("{base}/hello")).send()?;
//! assert_eq!(response.body_mut().text()?, "hello");
//!
//! let mut response = client.post(format!("{base}/echo")).body("ping").send()?;
//! assert_eq!(response.body_mut().text()?, "ping");
//!
//! // A body streamed from a reader (chunked).
//! let request = http::Request::put(format!("{base}/echo"))
//!     .body(Body::from_reader(std::io::Cursor::new(b"stream".to_vec()), None))
//!     .unwrap();
//! let mut response = client.send(request)?;
//! assert_eq!(response.body_mut().text()?, "stream");
//!
//! // One connection carried all three calls.
//! assert_eq!(log.events().iter().filter(|e| e.name == "connect_start").count(), 1);
//! let stats = client.stats();
//! assert_eq!((stats.created, stats.reused), (1, 2));
//! # Ok::<(), switchyard_std::Error>(())
//! ```
//!
//! What it guarantees against hostile servers and careless callers (no
//! response smuggling, no leaked URL credentials, deadlines that hold, early
//! responses, bounded idle sockets, …) is listed in
//! [the guarantees every adapter keeps](switchyard_common#what-every-adapter-guarantees-against-hostile-peers-and-careless-callers).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod body;
mod client;
mod connect;
mod dial;
mod h1;
mod h2;
mod manager;
mod response;
mod shared;
mod stream;
mod upgrade;
mod workers;

pub use body::Body;

/// What a program imports to read responses as reqwest's do:
/// `use switchyard_std::prelude::*;` brings the response methods (`text`,
/// `bytes`, `json`, `error_for_status`, …) into scope.
pub mod prelude {
    pub use crate::ResponseExt as _;
}
pub use client::{Client, ClientBuilder, RequestBuilder};
pub use stream::Sock as Socket;
/// Transports: the connector hook, the route it is given, socket options.
pub use switchyard_common::transport::{by_name, Connect, TcpKeepalive, TcpOptions};
pub use switchyard_core::Route;

/// What a connector hook returns on the blocking adapter: the socket, once
/// connected (the call runs on the attempt's own thread).
pub type Connecting = std::io::Result<Socket>;

/// A connector hook as the builder stores it.
#[derive(Clone)]
pub(crate) struct ConnectorSlot(pub(crate) std::sync::Arc<dyn Connect<Connecting>>);

impl std::fmt::Debug for ConnectorSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Connector")
    }
}
pub use manager::{Manager, ManagerBuilder, ServerHandle};
pub use response::{Response, ResponseBody, ResponseExt};
pub use switchyard_common::manager::ServerStatus;
/// Pool metrics as Prometheus text (`stats_by_address()` in).
pub use switchyard_common::metrics;
/// A proxy rule: a proxy server and the requests that go through it
/// (reqwest's `Proxy`: `Proxy::https("http://proxy:3128")?`).
pub use switchyard_common::ProxyRule as Proxy;
pub use switchyard_common::ShutdownReport;
pub use switchyard_common::{
    describe, BodyError, Error, ErrorKind, EventListener, EventLog, HttpVersion, IntoUri, NoProxy,
    NoopListener, ProxyEnv, ProxySelector, Recorded, RequestOptions, Resolve, SystemResolver, TimeoutPhase,
    DEFAULT_USER_AGENT,
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
pub use switchyard_core::{CallId, ConnectionId, Event, EventKind, Instant, PoolStats, ProxyCredentials};
pub use upgrade::Upgraded;
