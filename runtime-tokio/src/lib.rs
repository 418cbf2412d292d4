//! # switchyard-tokio
//!
//! An HTTP/1.1 and HTTP/2 client on tokio whose every connection decision —
//! reuse, HTTP/2 sharing and coalescing, route planning, the Happy Eyeballs race,
//! limits, eviction, retries — comes from [`switchyard_core`]. This crate only
//! performs the I/O the core asks for: DNS, TCP, TLS (rustls, ring provider),
//! HTTP/2 (`h2`), timers.
//!
//! ```
//! # use switchyard_tests::server::{ServerOptions, TestServer};
//! # let server = TestServer::start(ServerOptions::default()); // loopback, for this example
//! # let authority = format!("example.test:{}", server.port());
//! # let base = format!("http://{authority}");
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! # rt.block_on(async {
//! use switchyard_tokio::{Body, Client, EventLog};
//!
//! let log = EventLog::default(); // a listener that records every event
//! let client = Client::builder()
//!     .event_listener(log.clone())
//!     .resolve(&authority, ["127.0.0.1".parse().unwrap()]) // like curl --resolve
//!     .build()?;
//!
//! // GET, body collected.
//! let mut response = client.get(&format!("{base}/hello")).send().await?;
//! assert_eq!(response.body_mut().text().await?, "hello");
//!
//! // POST with a body.
//! let mut response = client.post(&format!("{base}/echo")).body("ping").send().await?;
//! assert_eq!(response.body_mut().text().await?, "ping");
//!
//! // A streaming request body (chunked on HTTP/1.1).
//! let (sender, body) = Body::channel();
//! tokio::spawn(async move {
//!     for part in ["str", "eam"] {
//!         if sender.send(part).await.is_err() { break; }
//!     }
//! });
//! let request = http::Request::put(format!("{base}/echo")).body(body).unwrap();
//! let mut response = client.send(request).await?;
//! assert_eq!(response.body_mut().text().await?, "stream");
//!
//! // What happened, and the pool's view: one connection carried all three calls.
//! assert_eq!(log.events().iter().filter(|e| e.name == "connect_start").count(), 1);
//! let stats = client.stats();
//! assert_eq!((stats.created, stats.reused), (1, 2));
//! # Ok::<(), switchyard_tokio::Error>(()) }).unwrap();
//! ```

mod body;
mod client;
mod driver;
mod error;
mod event;
mod h1;
mod h2;
mod resolve;
mod response;
mod socks;
mod tls;

pub use body::{Body, BodyClosed, BodySender};
pub use client::{Client, ClientBuilder, HttpVersion, RequestBuilder, RequestOptions};
pub use error::{BodyError, Error};
pub use event::{describe, EventListener, EventLog, NoopListener, Recorded};
pub use resolve::{Resolve, Resolving, SystemResolver};
pub use response::ResponseBody;
pub use switchyard_core;
pub use switchyard_core::{PoolStats, Proxy, StreamLimitPolicy};
