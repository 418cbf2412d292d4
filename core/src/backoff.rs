//! Backoff and jitter, shared by the pool's warm connects
//! ([`crate::pool::warm`]) and route ejection ([`crate::outlier`]): below both.

use std::time::Duration;

/// Exponential backoff with jitter for failed warm connects (gRPC's connection
/// backoff, whose published defaults these are).
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Backoff {
    /// The delay after the first failure. Default: 1 s.
    pub initial: Duration,
    /// Growth per further failure. Default: 1.6.
    pub multiplier: f64,
    /// Each delay is moved by up to this fraction either way. Default: 0.2.
    pub jitter: f64,
    /// No delay is longer, jitter included. Default: 120 s.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_secs(1),
            multiplier: 1.6,
            jitter: 0.2,
            max: Duration::from_secs(120),
        }
    }
}

impl Backoff {
    /// The delay after the `failures`-th failure in a row (from 1), for a
    /// jitter draw `unit` in `[-1, 1]`: `initial × multiplier^(failures−1)`,
    /// moved by `jitter × unit` of itself, at most `max`.
    ///
    /// ```
    /// use std::time::Duration;
    /// # use switchyard_core::Backoff;
    /// let b = Backoff::default();
    /// assert_eq!(b.delay(1, 0.0), Duration::from_secs(1));
    /// assert_eq!(b.delay(2, 0.0), Duration::from_millis(1600));
    /// assert_eq!(b.delay(2, 1.0), Duration::from_millis(1920));
    /// assert_eq!(b.delay(50, 0.0), Duration::from_secs(120), "capped");
    /// assert_eq!(b.delay(50, 1.0), Duration::from_secs(120), "jitter never passes the cap");
    /// ```
    #[must_use]
    pub fn delay(&self, failures: u32, unit: f64) -> Duration {
        let exponent = i32::try_from(failures.saturating_sub(1)).unwrap_or(i32::MAX);
        let max = self.max.as_secs_f64();
        let base = (self.initial.as_secs_f64() * self.multiplier.powi(exponent)).min(max);
        let jittered = base * (1.0 + self.jitter * unit.clamp(-1.0, 1.0));
        // Whole milliseconds, so delays are exact in tests and events.
        let ms = (jittered.clamp(0.0, max) * 1000.0).round();
        Duration::from_millis(ms as u64)
    }
}

/// A tiny seeded generator for jitter (SplitMix64): deterministic per seed.
#[derive(Clone, Debug)]
pub(crate) struct Jitter(u64);

impl Jitter {
    pub(crate) fn new(seed: u64) -> Jitter {
        Jitter(seed)
    }

    /// A draw in `[-1, 1]`.
    pub(crate) fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        // 53 bits into [0, 1), then onto [-1, 1].
        let fraction = (z >> 11) as f64 / (1u64 << 53) as f64;
        fraction * 2.0 - 1.0
    }
}
