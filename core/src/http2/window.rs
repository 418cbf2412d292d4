//! HTTP/2's adaptive flow-control window, decided here and applied by the
//! adapter (`http2_adaptive_window` in the client builders): both windows start at the protocol's 65,535 bytes, and while DATA flows
//! the connection sends one PING at a time and counts the DATA bytes of the
//! read that showed the flow and those that arrive before its PONG: the bytes
//! one round trip carries, an estimate of the path's bandwidth-delay product. When those bytes fill two thirds of the
//! window or more, the window was the limit: it grows to twice them (never
//! shrinking, never past the configured windows). A PING measures the path,
//! but credit comes back only as the caller reads, in half-window steps: on a
//! fast path that loop is slower than the round trip, and a sample can carry
//! little while the server sits waiting for credit. So a sample during which
//! DATA left a stream with less than a frame of credit while its body went on
//! ([`WindowEstimator::stalled`]) grows the windows too, to twice the larger
//! of what it carried and the window it outgrew (a reader that stopped
//! reading starts no sample: no data flows). Otherwise the next sample
//! waits longer (doubling, from 10 ms to 1 s), so an idle or slow transfer
//! costs almost no PINGs; once both windows are full size, none at all.
//!
//! The adapter feeds it the DATA bytes the connection has read (the frame
//! scanner's [`FrameScanner::data_bytes`](super::FrameScanner::data_bytes)),
//! sends a PING when [`WindowEstimator::wants_sample`] says so, reports the
//! PONG, and applies the windows [`WindowEstimator::pong`] returns.
//!
//! ```
//! use std::time::Duration;
//! # use switchyard_core::http2::WindowEstimator;
//! # use switchyard_core::Instant;
//! let mut e = WindowEstimator::new(16 << 20, 32 << 20);
//! assert_eq!(e.windows(), (65_535, 65_535));
//! let t = Instant::from_millis(0);
//! assert!(e.wants_sample(t, 100)); // data flows: send a PING
//! e.started(t);
//! // A full window arrived before the PONG: the window was the limit.
//! let grown = e.pong(t + Duration::from_millis(10), 100 + 65_535);
//! assert_eq!(grown, Some((131_270, 131_270)));
//! ```

use std::time::Duration;

use crate::time::Instant;

/// The protocol's initial window (RFC 9113 §6.9.2), where both windows start.
pub const PROTOCOL_WINDOW: u32 = 65_535;

const MIN_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The estimator: pure arithmetic on times and byte counts.
#[derive(Debug, Clone)]
pub struct WindowEstimator {
    stream: u32,
    connection: u32,
    max_stream: u32,
    max_connection: u32,
    /// The sample in flight: when its PING went, and the DATA bytes seen then.
    sample: Option<(Instant, u64)>,
    next_at: Option<Instant>,
    backoff: Duration,
    /// DATA bytes seen at the last look (a sample starts only while data flows).
    last_data: u64,
    /// DATA bytes seen at the look before it: where a sample starts counting.
    before: u64,
    /// The sample in flight saw the server wait for credit.
    stalled: bool,
}

impl WindowEstimator {
    /// Windows starting at the protocol's size, growing to these at most.
    #[must_use]
    pub fn new(max_stream: u32, max_connection: u32) -> WindowEstimator {
        WindowEstimator {
            stream: PROTOCOL_WINDOW.min(max_stream),
            connection: PROTOCOL_WINDOW.min(max_connection),
            max_stream,
            max_connection,
            sample: None,
            next_at: None,
            backoff: Duration::ZERO,
            last_data: 0,
            before: 0,
            stalled: false,
        }
    }

    /// The windows now: (per stream, per connection).
    #[must_use]
    pub fn windows(&self) -> (u32, u32) {
        (self.stream, self.connection)
    }

    /// Whether to send a PING now: none in flight, data arrived since the last
    /// look, the backoff has passed, and a window can still grow.
    pub fn wants_sample(&mut self, now: Instant, data: u64) -> bool {
        let flowing = data > self.last_data;
        self.before = self.last_data;
        self.last_data = data;
        flowing
            && self.sample.is_none()
            && self.next_at.is_none_or(|t| now >= t)
            && (self.stream < self.max_stream || self.connection < self.max_connection)
    }

    /// The sample [`wants_sample`](Self::wants_sample) asked for: its PING
    /// went out at `now`. It counts the DATA that showed the flow (what
    /// arrived since the look before) with what arrives until the PONG: the
    /// server sent it on the credit it held when the PING left, and leaving it
    /// out would miss up to half the window (credit returns in half-window
    /// steps), so a window-bound transfer would look below the window.
    pub fn started(&mut self, now: Instant) {
        self.sample = Some((now, self.before));
        self.stalled = false;
    }

    /// While a sample is in flight, a stream's DATA left the server with less
    /// than a frame of credit while its body went on
    /// ([`Driver::credit_stalls`](super::Driver::credit_stalls)): the server
    /// waited for our WINDOW_UPDATE, so the window was the limit even if the
    /// round trip carried less than two thirds of it. A PING measures the
    /// path's round trip, but credit comes back only as the caller reads, in
    /// half-window steps, a loop slower than the path on a fast one.
    pub fn stalled(&mut self) {
        if self.sample.is_some() {
            self.stalled = true;
        }
    }

    /// The sample's PING could not complete (the connection is ending).
    pub fn abandoned(&mut self) {
        self.sample = None;
    }

    /// Its PONG arrived at `now`, with `data` DATA bytes seen so far: the new
    /// windows when they grow.
    pub fn pong(&mut self, now: Instant, data: u64) -> Option<(u32, u32)> {
        let (sent, start) = self.sample.take()?;
        let carried = data.saturating_sub(start);
        let rtt = now.saturating_duration_since(sent);
        let limit = u64::from(self.stream.min(self.connection));
        let stalled = std::mem::take(&mut self.stalled);
        if stalled || carried.saturating_mul(3) >= limit.saturating_mul(2) {
            let carried = if stalled { carried.max(limit) } else { carried };
            let want = u32::try_from(carried.saturating_mul(2)).unwrap_or(u32::MAX);
            let stream = want.max(self.stream).min(self.max_stream);
            let connection = want.max(stream).max(self.connection).min(self.max_connection);
            self.backoff = Duration::ZERO;
            self.next_at = None;
            if (stream, connection) != (self.stream, self.connection) {
                self.stream = stream;
                self.connection = connection;
                return Some((stream, connection));
            }
            return None;
        }
        self.backoff = (self.backoff * 2).clamp(MIN_BACKOFF, MAX_BACKOFF);
        self.next_at = Some(now + self.backoff.max(rtt));
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_bound_transfer_doubles_its_windows_up_to_the_configured_ones() {
        let t = Instant::from_millis(0);
        let mut e = WindowEstimator::new(16 << 20, 32 << 20);
        assert_eq!(e.windows(), (65_535, 65_535));
        let mut data = 0u64;
        let mut now = t;
        let mut grown = Vec::new();
        // Each round trip (10 ms) carries a full window: the window is the limit.
        for _ in 0..20 {
            if e.windows() == (16 << 20, 32 << 20) {
                break;
            }
            data += 1;
            assert!(e.wants_sample(now, data), "a sample while data flows");
            e.started(now);
            data += u64::from(e.windows().0.min(e.windows().1));
            now += Duration::from_millis(10);
            if let Some(w) = e.pong(now, data) {
                grown.push(w);
            }
        }
        assert_eq!(e.windows(), (16 << 20, 32 << 20), "{grown:?}");
        assert!(grown.len() <= 10, "doubling: a few round trips, not many: {grown:?}");
        assert!(grown.windows(2).all(|w| w[1].0 >= w[0].0 && w[1].1 >= w[0].1), "never shrinks: {grown:?}");
        // Full size: no more PINGs.
        assert!(!e.wants_sample(now, data + 1));
    }

    #[test]
    fn a_transfer_below_the_window_backs_off_and_never_grows() {
        let t = Instant::from_millis(0);
        let mut e = WindowEstimator::new(16 << 20, 32 << 20);
        let mut data = 0u64;
        let mut now = t;
        let mut gaps = Vec::new();
        let mut last_ping = None;
        while now < t + Duration::from_secs(10) {
            data += 100; // a slow trickle
            if e.wants_sample(now, data) {
                if let Some(prev) = last_ping {
                    gaps.push(now - prev);
                }
                last_ping = Some(now);
                e.started(now);
                data += 1_000; // well under two thirds of 65,535
                now += Duration::from_millis(5);
                assert_eq!(e.pong(now, data), None);
            }
            now += Duration::from_millis(1);
        }
        assert_eq!(e.windows(), (65_535, 65_535));
        assert!(gaps.windows(2).all(|g| g[1] >= g[0]), "the waits only grow: {gaps:?}");
        assert!(gaps.last().is_some_and(|g| *g >= Duration::from_secs(1)), "up to a second: {gaps:?}");
        assert!(gaps.len() < 20, "a handful of PINGs in 10 s, not one per round trip: {}", gaps.len());
    }

    #[test]
    fn a_sample_that_saw_the_server_wait_for_credit_grows_the_windows() {
        let t = Instant::from_millis(0);
        let mut e = WindowEstimator::new(16 << 20, 32 << 20);
        // A fast path: the round trip carries a fraction of the window, but
        // the server ran out of credit meanwhile (credit returns in
        // half-window steps as the caller reads).
        assert!(e.wants_sample(t, 16_384));
        e.started(t);
        e.stalled();
        let grown = e.pong(t + Duration::from_micros(40), 16_384 + 20_000);
        assert_eq!(grown, Some((131_070, 131_070)), "twice the window it outgrew");
        // The same carriage without a stall is the path's need: no growth.
        let t1 = t + Duration::from_millis(1);
        assert!(e.wants_sample(t1, 99_000), "data flows (this look only moves the count)");
        assert!(e.wants_sample(t1, 100_000));
        e.started(t1);
        assert_eq!(e.pong(t + Duration::from_millis(2), 100_000 + 20_000), None);
    }

    #[test]
    fn a_stall_outside_a_sample_is_not_counted() {
        let t = Instant::from_millis(0);
        let mut e = WindowEstimator::new(16 << 20, 32 << 20);
        // A reader that stopped reading: the server waits for credit, but no
        // data flows, so no sample starts and the stall says nothing.
        e.stalled();
        assert!(e.wants_sample(t, 10));
        e.started(t);
        assert_eq!(e.pong(t + Duration::from_millis(1), 1_000), None);
        assert_eq!(e.windows(), (65_535, 65_535));
    }

    #[test]
    fn no_sample_without_data_or_with_one_in_flight() {
        let t = Instant::from_millis(0);
        let mut e = WindowEstimator::new(1 << 20, 2 << 20);
        assert!(!e.wants_sample(t, 0), "no data yet");
        assert!(e.wants_sample(t, 10));
        e.started(t);
        assert!(!e.wants_sample(t, 20), "one PING at a time");
        e.abandoned();
        assert!(e.wants_sample(t, 30));
        assert_eq!(e.pong(t, 40), None, "no sample in flight: nothing to learn");
    }

    #[test]
    fn windows_never_pass_the_configured_ones_even_when_small() {
        let t = Instant::from_millis(0);
        let mut e = WindowEstimator::new(100_000, 50_000);
        assert_eq!(e.windows(), (65_535, 50_000));
        assert!(e.wants_sample(t, 1));
        e.started(t);
        assert_eq!(e.pong(t + Duration::from_millis(1), 1 + 50_000), Some((100_000, 50_000)));
    }
}
