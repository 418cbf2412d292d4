//! What a graceful shutdown ([`Client::shutdown`] on every adapter) found at
//! its deadline.
//!
//! The order, on every adapter: new calls are refused at once
//! ([`Error::is_shutdown`](crate::Error::is_shutdown)), calls waiting for a
//! connection fail the same way, idle connections close, connections in
//! use take no new exchanges (HTTP/2: no new streams) and close as their
//! exchanges end; calls in flight (their bodies included) finish until the
//! deadline. At the deadline, HTTP/2 connections still carrying streams are
//! ended (the streams fail typed); HTTP/1.1 exchanges are not interrupted
//! (their sockets belong to their calls) and their connections close when
//! they end.
//!
//! [`Client::shutdown`]: https://docs.rs/switchyard-tokio/latest/switchyard_tokio/struct.Client.html

use std::fmt;

/// The state at a graceful shutdown's deadline.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ShutdownReport {
    /// Calls still running at the deadline (0: everything finished in time).
    pub in_flight: usize,
    /// HTTP/2 connections ended at the deadline with streams still open.
    pub aborted: usize,
}

impl ShutdownReport {
    /// Whether every call finished before the deadline.
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.in_flight == 0
    }
}

impl fmt::Display for ShutdownReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_clean() {
            return f.write_str("every call finished before the deadline");
        }
        write!(
            f,
            "{} call(s) still running at the deadline; {} HTTP/2 connection(s) ended",
            self.in_flight, self.aborted
        )
    }
}
