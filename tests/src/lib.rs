//! # switchyard-tests
//!
//! The conformance suite every switchyard adapter must pass
//! ([`conformance`]), the servers it runs against ([`server`]: hyper with
//! rustls; [`net`]: loopback tricks and a raw scripted server), and test
//! certificates ([`certs`]). Everything listens on loopback only and stops when
//! dropped.

pub mod adapter;
pub mod certs;
pub mod churn;
pub mod conformance;
pub mod dns;
pub mod ecosystem;
pub mod fault;
pub mod found;
pub mod h3;
pub mod hostile;
pub mod interop;
pub mod manager;
pub mod net;
pub mod proxy;
pub mod reliability;
pub mod resilience;
pub mod server;
pub mod streams;
#[cfg(unix)]
pub mod transport;

/// The README's quick start, compiled as doc tests (`cargo test --workspace`
/// runs them): the programs a new user copies first must build as written.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeQuickStart;
