//! # switchyard-core
//!
//! The connection layer of an HTTP client as pure state machines: no sockets, no
//! clocks, no threads, no async. It decides which connection carries a request —
//! plan routes (proxies, DNS answers ordered per RFC 8305, recently failed routes
//! last) and race new connections (Happy Eyeballs) — and reports every step as an
//! event. Runtime adapters (tokio, smol, blocking std) or your own event loop
//! perform the I/O it asks for.
//!
//! ## The contract
//!
//! * **Inputs** are method calls that carry `now` (an [`Instant`], the core's only
//!   clock) and facts from the world: a DNS answer, a TCP connect, a finished TLS
//!   handshake, a failure.
//! * **Outputs** are polled. `poll_action()` yields what the embedder must do next
//!   ([`PoolAction`], or [`Action`] for a bare [`Race`]); `poll_event()` what
//!   happened ([`Event`]); `poll_timeout()` when the core next needs
//!   `handle_timeout(now)`.
//! * Most embedders own one [`Pool`]: it runs a [`Race`] per connecting call and
//!   owns the [`RouteDatabase`]. A [`Race`] can also be driven alone, as below.
//! * The embedder's loop: feed an input with `now`; drain actions and perform them;
//!   drain events; sleep until the next input or `poll_timeout()`, whichever is
//!   first; call `handle_timeout(now)` when the timer fires.
//! * Same inputs, same outputs. Ids ([`CallId`], [`AttemptId`], [`QueryId`],
//!   [`ConnectionId`]) are opaque and never reused. Reports for cancelled attempts
//!   are ignored; ids the core never issued are a typed [`Misuse`] and change
//!   nothing. No input sequence panics.
//!
//! ## A whole race, by hand
//!
//! DNS answers with two IPv6 and two IPv4 addresses. The first IPv6 route is a
//! black hole; the first IPv4 route, started 250 ms later, connects at 260 ms and
//! wins; TLS finishes at 300 ms. (The addresses are data: the core dials nothing.)
//!
//! ```
//! use std::time::Duration;
//! use switchyard_core::{
//!     Action, Address, IdAllocator, Instant, Protocol, Race, RaceConfig, RaceRequest,
//!     RouteDatabase,
//! };
//!
//! let ms = Instant::from_millis;
//! let address = Address::from_uri(&"https://example.com/".parse()?)?.build()?;
//! let mut ids = IdAllocator::default();
//! let mut db = RouteDatabase::default(); // shared by every call of a client
//! let request = RaceRequest::new(ids.next_call(), address);
//! let mut race = Race::start(request, RaceConfig::default(), ms(0), &mut db);
//!
//! // 0 ms: the first action is a DNS lookup.
//! let Some(Action::Resolve { query, host, port, .. }) = race.poll_action() else { panic!() };
//! assert_eq!((host.to_string(), port), ("example.com".to_owned(), 443));
//!
//! // 0 ms: the answer arrives; routes are interleaved IPv6-first (RFC 8305 §4)
//! // and the first attempt starts at once.
//! let answer = ["2001:db8::1", "2001:db8::2", "192.0.2.1", "192.0.2.2"]
//!     .map(|ip| ip.parse().unwrap());
//! race.handle_dns(ms(0), query, Ok(answer.to_vec()), &mut db)?;
//! let Some(Action::Connect { attempt: v6, route }) = race.poll_action() else { panic!() };
//! assert_eq!(route.to_string(), "example.com at [2001:db8::1]:443");
//! assert_eq!(race.poll_action(), None);
//!
//! // The IPv6 route never answers. The next deadline is the attempt delay.
//! assert_eq!(race.poll_timeout(), Some(ms(250)));
//! race.handle_timeout(ms(250), &mut db);
//! let Some(Action::Connect { attempt: v4, route }) = race.poll_action() else { panic!() };
//! assert_eq!(route.to_string(), "example.com at 192.0.2.1:443");
//!
//! // 260 ms: IPv4's TCP handshake completes. The IPv6 attempt is cancelled at
//! // once, and only the winner runs TLS.
//! race.handle_connected(ms(260), v4, &mut db)?;
//! assert_eq!(race.poll_action(), Some(Action::Cancel { attempt: v6 }));
//! assert!(matches!(race.poll_action(), Some(Action::Handshake { attempt, .. }) if attempt == v4));
//! assert_eq!(race.poll_timeout(), Some(ms(260) + Duration::from_secs(10))); // handshake timeout
//!
//! // 300 ms: TLS is done and ALPN chose h2. The race is won.
//! race.handle_established(ms(300), v4, Some(Protocol::Http2), &mut db)?;
//! let Some(Action::Won { attempt, protocol, .. }) = race.poll_action() else { panic!() };
//! assert_eq!((attempt, protocol), (v4, Protocol::Http2));
//! assert!(race.is_finished() && race.poll_timeout().is_none());
//!
//! // The black hole, in flight for a whole attempt delay, is remembered: the next
//! // call to this Address tries it last.
//! assert!(db.should_postpone(&switchyard_core::Route::new(
//!     race.address().clone(), switchyard_core::Proxy::Direct, "[2001:db8::1]:443".parse()?), ms(300)));
//!
//! // Every step was an event, timestamped.
//! let mut timeline = Vec::new();
//! while let Some(e) = race.poll_event() {
//!     let kind = format!("{:?}", e.kind);
//!     let name = kind.split([' ', '{']).next().unwrap_or_default().to_owned();
//!     timeline.push(format!("{} ms {name}", e.at.elapsed_since_origin().as_millis()));
//! }
//! assert_eq!(timeline, [
//!     "0 ms ProxySelectStart", "0 ms ProxySelectEnd", "0 ms DnsStart", "0 ms DnsEnd",
//!     "0 ms ConnectStart", "250 ms ConnectStart", "260 ms ConnectCancelled",
//!     "260 ms SecureConnectStart", "300 ms SecureConnectEnd", "300 ms ConnectEnd",
//! ]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Embedding: driving the core from your own event loop
//!
//! The core makes every decision; an embedder supplies only four things:
//!
//! 1. **Sockets and readiness**: non-blocking connects, reads and writes, and
//!    knowing when a socket is ready.
//! 2. **The clock**: `now` on every input, and sleeping until the earliest
//!    `poll_timeout()` of the [`Pool`] and of each busy [`http1::Driver`].
//! 3. **DNS**: answering [`PoolAction::Resolve`] — all addresses at once
//!    ([`Pool::handle_dns`]), or A and AAAA separately with their time to live
//!    ([`Pool::handle_dns_answer`]; the race then follows RFC 8305 §3, see
//!    [`dns`]). The pool caches answers and shares lookups in flight.
//! 4. **TLS bytes**: moving records between the socket and a TLS library (the
//!    example uses rustls's own sans-IO `ClientConnection`), and reporting the
//!    certificate's names ([`TlsFacts`]).
//!
//! Everything else is a state machine to feed and poll:
//!
//! * the [`Pool`] — routes, the race, pooling, limits, retries
//!   ([`Pool::exchange_failed`]), the idle sweep ([`PoolAction::Probe`]);
//! * a [`handshake::ProxyHandshake`] per proxy hop (HTTP `CONNECT`, SOCKS5);
//! * an [`http1::Conn`] per idle HTTP/1.1 connection and an [`http1::Driver`]
//!   per exchange — partial writes, the 100-continue wait, early answers,
//!   timeouts, draining, keep-alive, and how far a failure got (which is what
//!   [`Pool::exchange_failed`] needs).
//!
//! The loop, every turn: feed an input with `now`; drain [`Pool::poll_action`]
//! and perform each action; drain [`Pool::poll_event`] (events queue until
//! drained); move bytes for every busy driver and act on its events; sleep
//! until readiness or the earliest deadline; call `handle_timeout(now)`.

//! What the core promises in return:
//!
//! * A report that comes **late** (for an attempt already cancelled, a race
//!   already won or lost, a call already over) is accepted and ignored.
//! * A report that comes **twice** is ignored the second time.
//! * An id the core **never issued** (or a connection it already closed) is a
//!   typed [`Misuse`] error, and the state is unchanged.
//! * `handle_timeout` **early, late or twice** is harmless: it acts only on
//!   deadlines `<= now`, and a `now` that goes backwards only delays work.
//! * Nothing panics on any input sequence — the `pool_ops` and `h1_driver` fuzz
//!   targets and the seeded simulation (`core/tests/sim.rs`) check that, with the
//!   invariants after every step.
//!
//! `core/examples/fetch_loop.rs` is a complete embedding: mio for readiness,
//! rustls for TLS, and the core's pool, proxy handshakes and connection driver
//! for the rest — several calls at once, partial writes, retries through the
//! core, an HTTPS origin reached through a `CONNECT` proxy, every event printed.
//! CI runs it (`cargo run -p switchyard-core --example fetch_loop`) against its
//! own loopback servers.
//!
//! ## Modules
//!
//! | module | concept |
//! | --- | --- |
//! | [`address`] | [`Address`] (the pool key), [`Proxy`], [`Protocol`], validation |
//! | [`route`] | [`Route`] and the [`RouteDatabase`] of recent failures |
//! | [`dns`] | [`DnsAnswer`] (whole or per family), [`DnsSource`], the pool's DNS cache ([`DnsCacheConfig`]) |
//! | [`plan`] | [`RoutePlanner`]: proxies × DNS → RFC 8305 order, failed routes last |
//! | [`race`] | [`Race`]: Happy Eyeballs for one call |
//! | [`pool`] | [`Pool`]: acquire, share, coalesce, limits and waiters, eviction, retry decisions, warm minimums ([`pool::warm`]) |
//! | [`connection`] | [`CloseReason`], [`Reuse`], [`TlsFacts`]: the vocabulary of connection lifecycles |
//! | [`http1`] | HTTP/1.1: the connection driver ([`http1::Conn`], [`http1::Driver`]) over the codec (request encoding, incremental response decoding, keep-alive) |
//! | [`handshake`] | proxy handshakes (`CONNECT`, SOCKS5) as sans-IO machines |
//! | [`http2`] | the HTTP/2 frame scanner: SETTINGS and GOAWAY as they arrive |
//! | [`event`] | [`Event`]: what happened, timestamped |
//! | [`error`] | typed errors: [`AddressError`], [`DnsError`], [`ConnectError`], [`RaceError`], [`Misuse`] |
//! | [`id`] | opaque, never-reused ids |
//! | [`time`] | [`Instant`], the virtual clock |
#![forbid(unsafe_code)]

pub mod address;
pub mod alt_svc;
pub mod backoff;
pub mod connection;
pub mod dns;
pub mod error;
pub mod event;
pub mod h3_race;
pub mod handshake;
pub mod hash;
pub mod http1;
pub mod http2;
pub mod http3;
pub mod id;
pub mod outlier;
pub mod plan;
pub mod pool;
pub mod race;
pub mod readiness;
pub mod retry;
pub mod route;
pub mod route_db;
pub mod service_binding;
pub mod time;

pub use address::{
    Address, AddressBuilder, AddressError, Host, Protocol, Proxy, ProxyCredentials, ResolverIdentity, Scheme,
    TlsIdentity,
};
pub use connection::{CloseReason, Reuse, TlsFacts};
pub use dns::{DnsAnswer, DnsCacheConfig, DnsSource};
pub use error::{ConnectError, DnsError, Failure, Misuse, RaceError, RaceErrorKind, TlsFailure};
pub use event::{CancelReason, Event, EventKind};
pub use id::{AttemptId, CallId, ConnectionId, IdAllocator, QueryId};
pub use outlier::OutlierPolicy;
pub use plan::{interleave, DnsOutcome, Family, KnownAnswer, PlanConfig, PlanStep, RoutePlanner};
pub use pool::{
    AcquireError, AcquireOptions, AddressCounters, AddressMetrics, AddressStats, Backoff, CallTimeout,
    Connection, ExchangeError, FailureOutcome, Pool, PoolAction, PoolConfig, PoolStats, Readiness,
    RetryBudget, Source, StreamLimitPolicy, WarmPolicy, WarmStatus,
};
pub use race::{Action, ConnectStage, Race, RaceConfig, RaceRequest, Sequence};
pub use route::Route;
pub use route_db::RouteDatabase;
pub use time::Instant;
