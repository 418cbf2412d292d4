//! Where a declared Address stands for the warm pool ([`Readiness`]): the
//! word the Manager, its events and its status share.

use std::fmt;

/// Where a declared Address stands.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Readiness {
    /// Below the minimum, which it has never reached.
    Warming,
    /// The minimum is open.
    Ready,
    /// Below the minimum after having met it, or connects are failing.
    Degraded,
    /// No connection open, and connects have failed for longer than
    /// [`WarmPolicy::down_after`](crate::pool::WarmPolicy::down_after).
    Down,
    /// Warming stopped ([`Pool::stop_warming`](crate::pool::Pool::stop_warming)).
    ShutDown,
}

impl Readiness {
    /// `warming`, `ready`, `degraded`, `down`, `shut down`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Readiness::Warming => "warming",
            Readiness::Ready => "ready",
            Readiness::Degraded => "degraded",
            Readiness::Down => "down",
            Readiness::ShutDown => "shut down",
        }
    }
}

impl fmt::Display for Readiness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
