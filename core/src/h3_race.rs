//! Where QUIC fails: per address family, remembered with backoff (issue 59,
//! item 3). The pool's race tries an Address's QUIC route first and its TCP
//! route one attempt delay later (or at once when QUIC fails); the route
//! database ([`crate::RouteDatabase`]) keeps a [`QuicMemory`] so that after
//! QUIC failed on a family, every QUIC route of that family goes last — the
//! race goes straight to TCP — for five minutes, doubling with each failure
//! in a row up to a day, and QUIC is tried again after that.
//!
//! Per family, because a network may carry UDP over IPv4 and drop it over
//! IPv6 (or the reverse): failing on one family says nothing of the other.
//! What counts as QUIC failing: its own failure (an ICMP error, a handshake
//! error, its timeout), or a QUIC attempt cancelled because TCP, started
//! later, connected while QUIC had not heard a single datagram back (UDP
//! dropped on the way: a black hole never fails on its own, it only stays
//! silent). A QUIC attempt is "connected" when the server's first datagram
//! arrives, so one that heard the server wins the race instead of losing it.
//!
//! ```
//! use std::time::Duration;
//! use switchyard_core::h3_race::{QuicBackoff, QuicMemory};
//! use switchyard_core::{Family, Instant};
//!
//! let backoff = QuicBackoff::default();
//! let mut memory = QuicMemory::default();
//! let t0 = Instant::ZERO;
//! // QUIC failed over IPv6: skipped there for five minutes, then tried again.
//! let again = memory.failed(Family::V6, t0, &backoff);
//! assert_eq!(again, t0 + Duration::from_secs(300));
//! assert!(!memory.usable(Family::V6, t0 + Duration::from_secs(299)));
//! assert!(memory.usable(Family::V6, again));
//! // IPv4 is another network path: QUIC is still tried there.
//! assert!(memory.usable(Family::V4, t0));
//! ```

use std::time::Duration;

use crate::plan::Family;
use crate::time::Instant;

/// How long QUIC is skipped on a family after it failed there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuicBackoff {
    /// After the first failure. Default 5 min.
    pub first: Duration,
    /// The longest skip, however often QUIC failed. Default 24 h.
    pub max: Duration,
}

impl Default for QuicBackoff {
    fn default() -> QuicBackoff {
        QuicBackoff { first: Duration::from_secs(300), max: Duration::from_secs(86_400) }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct FamilyState {
    /// Failures in a row.
    failures: u32,
    /// QUIC is skipped on this family until then.
    retry_at: Option<Instant>,
}

/// Per address family: whether QUIC failed there lately, and until when it
/// is skipped (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuicMemory {
    v6: FamilyState,
    v4: FamilyState,
}

impl QuicMemory {
    fn state(&mut self, family: Family) -> &mut FamilyState {
        match family {
            Family::V6 => &mut self.v6,
            Family::V4 => &mut self.v4,
        }
    }

    fn get(&self, family: Family) -> FamilyState {
        match family {
            Family::V6 => self.v6,
            Family::V4 => self.v4,
        }
    }

    /// Whether QUIC is worth trying on `family` at `now`.
    #[must_use]
    pub fn usable(&self, family: Family, now: Instant) -> bool {
        self.get(family).retry_at.is_none_or(|at| at <= now)
    }

    /// When QUIC will be tried again on `family`, if it is skipped now.
    #[must_use]
    pub fn retry_at(&self, family: Family, now: Instant) -> Option<Instant> {
        self.get(family).retry_at.filter(|at| *at > now)
    }

    /// QUIC failed on `family` at `now`: skip it for the first backoff,
    /// doubled for each failure in a row before, up to the maximum. Returns
    /// when it will be tried again.
    pub fn failed(&mut self, family: Family, now: Instant, config: &QuicBackoff) -> Instant {
        let state = self.state(family);
        let doublings = state.failures.min(31);
        let backoff = config.first.saturating_mul(1u32 << doublings).min(config.max);
        state.failures = state.failures.saturating_add(1);
        let at = now + backoff;
        state.retry_at = Some(at);
        at
    }

    /// QUIC worked on `family`: forget its failures.
    pub fn succeeded(&mut self, family: Family) {
        *self.state(family) = FamilyState::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    #[test]
    fn backoff_doubles_per_family_and_success_forgets() {
        let c = QuicBackoff::default();
        let mut m = QuicMemory::default();
        let min = Duration::from_secs(60);
        assert_eq!(m.failed(Family::V6, ms(0), &c), ms(0) + 5 * min);
        assert_eq!(m.failed(Family::V6, ms(0), &c), ms(0) + 10 * min);
        assert_eq!(m.failed(Family::V6, ms(0), &c), ms(0) + 20 * min);
        assert!(!m.usable(Family::V6, ms(0) + 19 * min) && m.usable(Family::V6, ms(0) + 20 * min));
        assert!(m.usable(Family::V4, ms(0)), "IPv4 is untouched by IPv6's failures");
        for _ in 0..40 {
            m.failed(Family::V6, ms(0), &c);
        }
        assert_eq!(m.retry_at(Family::V6, ms(0)), Some(ms(0) + c.max), "capped");
        m.succeeded(Family::V6);
        assert!(m.usable(Family::V6, ms(0)));
        assert_eq!(m.failed(Family::V6, ms(0), &c), ms(0) + 5 * min, "a success starts the doubling over");
    }

    proptest! {
        /// Whatever the failures and successes, a family is skipped exactly
        /// until its last failure's backoff ends, never longer than the
        /// maximum, and the other family is never touched.
        #[test]
        fn skips_end_when_their_backoff_does(steps in proptest::collection::vec((any::<bool>(), any::<bool>(), 0u64..100_000_000), 1..64)) {
            let c = QuicBackoff::default();
            let mut m = QuicMemory::default();
            let mut now = 0u64;
            let mut until = [None::<u64>, None];
            for (v6, fail, dt) in steps {
                now += dt;
                let (family, i) = if v6 { (Family::V6, 0) } else { (Family::V4, 1) };
                if fail {
                    let at = m.failed(family, ms(now), &c);
                    prop_assert!(at > ms(now) && at <= ms(now) + c.max);
                    until[i] = Some(u64::try_from(at.elapsed_since_origin().as_millis()).unwrap());
                } else {
                    m.succeeded(family);
                    until[i] = None;
                }
                for (j, f) in [(0, Family::V6), (1, Family::V4)] {
                    let skipped = until[j].is_some_and(|u| now < u);
                    prop_assert_eq!(m.usable(f, ms(now)), !skipped);
                }
            }
        }
    }
}
