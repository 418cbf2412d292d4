//! Virtual time: the only clock the core knows.
//!
//! The core never reads a clock. Every input carries `now` as an [`Instant`], an
//! offset from an origin the embedder chooses (typically the moment the embedder was
//! created). Because the core's `Instant` is plain data, a simulator or a test can
//! write `Instant::from_millis(250)` and get exactly reproducible behaviour; a real
//! driver converts its runtime clock once per input:
//!
//! ```
//! # use switchyard_core::Instant;
//! # fn driver_example() {
//! let origin = std::time::Instant::now(); // kept by the embedder, never by the core
//! // ... later, on every input:
//! let now = Instant::ZERO + origin.elapsed();
//! # let _ = now;
//! # }
//! ```

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A point in time, measured from an origin chosen by the embedder.
///
/// Instants are totally ordered and only ever move forward in a well-behaved
/// driver; the core tolerates a `now` that goes backwards by treating every
/// deadline comparison as "due when `deadline <= now`", so a stale `now` merely
/// delays work and never corrupts state.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(Duration);

impl Instant {
    /// The embedder's origin.
    pub const ZERO: Instant = Instant(Duration::ZERO);

    /// The instant `ms` milliseconds after the origin.
    ///
    /// ```
    /// # use switchyard_core::Instant;
    /// # use std::time::Duration;
    /// assert_eq!(Instant::from_millis(250), Instant::ZERO + Duration::from_millis(250));
    /// ```
    #[must_use]
    pub const fn from_millis(ms: u64) -> Instant {
        Instant(Duration::from_millis(ms))
    }

    /// The instant `elapsed` after the origin.
    #[must_use]
    pub const fn from_elapsed(elapsed: Duration) -> Instant {
        Instant(elapsed)
    }

    /// Time since the origin.
    #[must_use]
    pub const fn elapsed_since_origin(self) -> Duration {
        self.0
    }

    /// Time from `earlier` to `self`, or zero when `earlier` is later.
    #[must_use]
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// `self + d`, saturating at the largest representable instant instead of
    /// overflowing (a `Duration::MAX` timeout means "never").
    #[must_use]
    pub fn saturating_add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturating: adding a huge timeout yields a far-future instant, never a panic.
    fn add(self, rhs: Duration) -> Instant {
        self.saturating_add(rhs)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating: an `earlier` that is later gives zero.
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t+{:?}", self.0)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_secs_f64() * 1000.0;
        write!(f, "{ms:.3}ms")
    }
}

/// The earliest of two optional deadlines.
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_millis(10);
        assert_eq!(t + Duration::MAX, Instant::from_elapsed(Duration::MAX));
        assert_eq!(Instant::ZERO - t, Duration::ZERO);
        assert_eq!(t - Instant::ZERO, Duration::from_millis(10));
        assert_eq!(format!("{t}"), "10.000ms");
    }

    #[test]
    fn earliest_picks_min() {
        let a = Some(Instant::from_millis(5));
        let b = Some(Instant::from_millis(3));
        assert_eq!(earliest(a, b), b);
        assert_eq!(earliest(a, None), a);
        assert_eq!(earliest(None, None), None);
    }
}
