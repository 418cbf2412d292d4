//! Retry budgets (Finagle's shape): the retries an Address may spend are a
//! share of its recent calls plus a small reserve, over a sliding window, so
//! a failing server sees a bounded multiple of the load, never every call
//! times its retry limit.
//!
//! The window is ten buckets of a tenth of it each; a call deposits into the
//! current bucket when it first asks, a retry withdraws. Free retries (a
//! stream a GOAWAY left unprocessed, a refusal beyond the limit the server
//! advertised later) are not charged: they are a healthy server rotating its
//! connections (nginx's `keepalive_requests` sends a GOAWAY every N streams;
//! charged, 294 of 800 calls against it failed), and
//! [`PoolConfig::max_free_retries`](super::PoolConfig::max_free_retries)
//! bounds them per call.
//! A retry is allowed while the window's retries are below
//! `ratio × calls + min_per_second × window`.

use std::time::Duration;

use crate::time::Instant;

/// How many retries an Address may spend ([`PoolConfig::retry_budget`]).
///
/// ```
/// # use switchyard_core::pool::RetryBudget;
/// let b = RetryBudget::default();
/// assert_eq!((b.ratio, b.min_per_second, b.window.as_secs()), (0.2, 10, 10));
/// // 50 calls in the window: 20 % of them plus the 10/s floor over 10 s.
/// assert_eq!(b.allowed(50), 110);
/// // No floor: exactly a fifth of the calls.
/// assert_eq!(RetryBudget { min_per_second: 0, ..b }.allowed(64), 12);
/// ```
///
/// [`PoolConfig::retry_budget`]: super::PoolConfig::retry_budget
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct RetryBudget {
    /// Retries allowed per call made in the window. Default: 0.2.
    pub ratio: f64,
    /// Retries allowed per second of the window whatever the calls (so a
    /// client making few calls still retries). Default: 10.
    pub min_per_second: u32,
    /// How far back calls and retries count. Default: 10 s.
    pub window: Duration,
}

impl Default for RetryBudget {
    fn default() -> Self {
        RetryBudget { ratio: 0.2, min_per_second: 10, window: Duration::from_secs(10) }
    }
}

impl RetryBudget {
    /// Retries allowed in a window in which `calls` calls were made.
    #[must_use]
    pub fn allowed(&self, calls: u64) -> u64 {
        let share = (self.ratio.max(0.0) * calls as f64).floor() as u64;
        let floor = u64::from(self.min_per_second).saturating_mul(self.window.as_secs().max(1));
        share.saturating_add(floor)
    }
}

const BUCKETS: usize = 10;

/// One Address's calls and retries over the window.
#[derive(Clone, Debug, Default)]
pub(super) struct Window {
    /// (calls, retries) per bucket; `current` indexes the newest.
    buckets: [(u32, u32); BUCKETS],
    /// The newest bucket's number (instant ÷ bucket width).
    current: u64,
}

/// Whole milliseconds of `d`, in 64-bit arithmetic (a call's hot path:
/// `Duration::as_millis` divides 128-bit nanoseconds).
fn millis(d: Duration) -> u64 {
    d.as_secs().saturating_mul(1000).saturating_add(u64::from(d.subsec_millis()))
}

impl Window {
    /// The bucket `now` falls in.
    fn bucket(now: Instant, budget: &RetryBudget) -> u64 {
        let width = (millis(budget.window) / BUCKETS as u64).max(1);
        millis(now.elapsed_since_origin()) / width
    }

    /// Moves the window to `now`: buckets older than it are emptied.
    fn advance(&mut self, now: Instant, budget: &RetryBudget) {
        let bucket = Self::bucket(now, budget);
        if bucket == self.current {
            return;
        }
        let gone = bucket.saturating_sub(self.current).min(BUCKETS as u64);
        for step in 1..=gone {
            self.buckets[((self.current + step) % BUCKETS as u64) as usize] = (0, 0);
        }
        self.current = bucket;
    }

    /// A call asked (its first time, not a retry).
    pub(super) fn deposit(&mut self, now: Instant, budget: &RetryBudget) {
        self.advance(now, budget);
        let b = &mut self.buckets[(self.current % BUCKETS as u64) as usize];
        b.0 = b.0.saturating_add(1);
    }

    /// A retry asks to be spent: `true` (and counted) while the window's
    /// retries are below the budget.
    pub(super) fn withdraw(&mut self, now: Instant, budget: &RetryBudget) -> bool {
        self.advance(now, budget);
        let (calls, retries) = self.totals();
        if retries >= budget.allowed(calls) {
            return false;
        }
        let b = &mut self.buckets[(self.current % BUCKETS as u64) as usize];
        b.1 = b.1.saturating_add(1);
        true
    }

    /// Calls and retries in the window.
    pub(super) fn totals(&self) -> (u64, u64) {
        self.buckets.iter().fold((0, 0), |(c, r), (bc, br)| (c + u64::from(*bc), r + u64::from(*br)))
    }

    /// The newest bucket it counted in (larger: used more recently).
    pub(super) fn newest(&self) -> u64 {
        self.current
    }

    /// Whether the window may still hold something at `now` (the Address's
    /// state is kept while it does, after its last connection).
    pub(super) fn recent(&self, now: Instant, budget: &RetryBudget) -> bool {
        Self::bucket(now, budget) < self.current + BUCKETS as u64 && self.totals() != (0, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(t: u64) -> Instant {
        Instant::from_millis(t)
    }

    #[test]
    fn the_window_slides_bucket_by_bucket() {
        let b = RetryBudget { ratio: 0.5, min_per_second: 0, window: Duration::from_secs(10) };
        let mut w = Window::default();
        for _ in 0..4 {
            w.deposit(ms(0), &b);
        }
        assert!(w.withdraw(ms(100), &b) && w.withdraw(ms(200), &b));
        assert!(!w.withdraw(ms(300), &b), "2 retries for 4 calls at 50 %");
        // 5 s later two more calls: one more retry.
        w.deposit(ms(5_000), &b);
        w.deposit(ms(5_000), &b);
        assert!(w.withdraw(ms(5_000), &b));
        assert!(!w.withdraw(ms(5_001), &b));
        assert_eq!(w.totals(), (6, 3));
        assert!(!w.withdraw(ms(9_999), &b));
        // At 10 s the first bucket's calls and retries have left the window:
        // 2 calls and 1 retry remain, and they allow no more.
        assert!(!w.withdraw(ms(10_000), &b));
        assert_eq!(w.totals(), (2, 1));
        // Kept while a window from the last look may still hold something.
        assert!(w.recent(ms(14_000), &b));
        assert!(!w.recent(ms(21_000), &b));
        w.advance(ms(30_000), &b);
        assert_eq!(w.totals(), (0, 0));
    }

    #[test]
    fn the_floor_allows_retries_without_calls() {
        let b = RetryBudget { ratio: 0.2, min_per_second: 1, window: Duration::from_secs(3) };
        let mut w = Window::default();
        assert!((0..3).all(|_| w.withdraw(ms(0), &b)));
        assert!(!w.withdraw(ms(0), &b));
    }
}
