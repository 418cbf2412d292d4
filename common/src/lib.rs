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
//! - [`Resolve`]: DNS, with `--resolve`-style overrides.
//! - [`exchange`] and [`socks`]: failure classification, the `CONNECT` tunnel and
//!   the SOCKS5 handshake as bytes in, bytes out.
//!
//! It has no async runtime and performs no I/O of its own beyond the system
//! resolver; users normally reach it through an adapter's re-exports.

mod config;
mod error;
mod event;
pub mod exchange;
mod hub;
mod resolve;
pub mod socks;
pub mod tls;
mod userinfo;

pub use config::{ClientBuilder, Config, FromConfig, HttpVersion, RequestOptions};
pub use error::{BodyError, Error};
pub use event::{describe, EventListener, EventLog, NoopListener, Recorded};
pub use hub::{Hub, HubState};
pub use resolve::{Resolve, SystemResolver};
pub use switchyard_core;
pub use userinfo::{redacted, take_userinfo};
