//! PLACEHOLDER
#![forbid(unsafe_code)]

pub mod address;
pub mod error;
pub mod event;
pub mod id;
pub mod plan;
pub mod race;
pub mod route;
pub mod time;

pub use address::{
    Address, AddressBuilder, AddressError, Host, Protocol, Proxy, ResolverIdentity, Scheme,
    TlsIdentity,
};
pub use error::{ConnectError, DnsError, Failure, Misuse, RaceError, RaceErrorKind, TlsFailure};
pub use event::{CancelReason, Event, EventKind};
pub use id::{AttemptId, CallId, ConnectionId, IdAllocator, QueryId};
pub use plan::{interleave, DnsOutcome, Family, PlanConfig, PlanStep, RoutePlanner};
pub use race::{Action, Race, RaceConfig, RaceRequest};
pub use route::{Route, RouteDatabase};
pub use time::Instant;
