//! # switchyard-tokio
//!
//! An HTTP/1.1 and HTTP/2 client on tokio whose every connection decision —
//! reuse, HTTP/2 sharing and coalescing, route planning, the Happy Eyeballs race,
//! limits, eviction, retries — comes from [`switchyard_core`]. This crate only
//! performs the I/O the core asks for: DNS, TCP, TLS (rustls, ring provider),
//! HTTP/2 (`h2`), timers.
//!
//! ```no_run
//! # async fn run() -> Result<(), switchyard_tokio::Error> {
//! use switchyard_tokio::{Body, Client, EventLog};
//!
//! let log = EventLog::default();
//! let client = Client::builder().event_listener(log.clone()).build()?;
//!
//! // GET, body collected.
//! let mut response = client.get("https://example.com/").send().await?;
//! let text = response.body_mut().text().await?;
//!
//! // POST with a body.
//! client.post("https://example.com/items").header("content-type", "application/json")
//!     .body(r#"{"name":"switch"}"#).send().await?;
//!
//! // A streaming request body (chunked on HTTP/1.1).
//! let (sender, body) = Body::channel();
//! tokio::spawn(async move {
//!     for part in ["a", "b", "c"] {
//!         if sender.send(part).await.is_err() { break; }
//!     }
//! });
//! let request = http::Request::put("https://example.com/upload").body(body).unwrap();
//! client.send(request).await?;
//!
//! // What happened, and the pool's view.
//! for e in log.events() {
//!     println!("{:>8?} {:<22} {}", e.at, e.name, e.detail);
//! }
//! println!("reused {} times", client.stats().reused);
//! # let _ = text; Ok(()) }
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
mod tls;

pub use body::{Body, BodyClosed, BodySender};
pub use client::{Client, ClientBuilder, HttpVersion, RequestBuilder, RequestOptions};
pub use error::{BodyError, Error};
pub use event::{describe, EventListener, EventLog, NoopListener, Recorded};
pub use resolve::{Resolve, Resolving, SystemResolver};
pub use response::ResponseBody;
pub use switchyard_core;
pub use switchyard_core::{PoolStats, Proxy, StreamLimitPolicy};
