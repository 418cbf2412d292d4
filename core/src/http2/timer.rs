//! A stream's deadlines, held with the stream so that the caller only waits.
//!
//! An HTTP/2 call waits three ways on its stream: for the response head, for
//! the next body chunk, and (uploading) for the server's windows to take more.
//! Each wait is bounded by the call's deadlines and by the per-wait timeouts,
//! and what a passed bound means differs: a read or write timeout may mean the
//! peer stalled (the pool's PING decides about the connection), while the
//! call's own deadline or the body timeout says nothing about the connection.
//! [`StreamTimer`] holds those bounds; whoever drives the connection asks it
//! how long a wait may last ([`StreamTimer::deadline`]) and, when that passed,
//! what it means ([`StreamTimer::expired`]). No clock: `now` comes in.
//!
//! ```
//! use std::time::Duration;
//! # use switchyard_core::http2::{Expired, StreamLimits, StreamTimer, Wait};
//! # use switchyard_core::Instant;
//!
//! let limits = StreamLimits {
//!     read_timeout: Some(Duration::from_secs(5)),
//!     call_deadline: Some(Instant::from_millis(12_000)),
//!     ..StreamLimits::default()
//! };
//! let mut timer = StreamTimer::new(limits);
//! // The caller starts waiting for the head at t = 10 s: the read timeout
//! // bounds this wait before the call's deadline does.
//! let t0 = Instant::from_millis(10_000);
//! assert_eq!(timer.waiting(Wait::Head, || t0), Some(Instant::from_millis(12_000)));
//! assert_eq!(timer.expired(Instant::from_millis(11_999)), None);
//! assert_eq!(timer.expired(Instant::from_millis(12_000)), Some(Expired::Deadline));
//! ```

use core::time::Duration;

use crate::Instant;

use super::StreamError;

/// What a stream's caller waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// The response head.
    Head,
    /// The next response body chunk (or its end).
    Body,
    /// Room in the server's windows for the next chunk of the upload.
    Room,
}

/// The bounds a call puts on its stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamLimits {
    /// The response head must have arrived by then (the call's head deadline).
    pub head_deadline: Option<Instant>,
    /// The whole call, its body included, ends by then.
    pub call_deadline: Option<Instant>,
    /// Each wait for the head or for a body chunk (the read timeout).
    pub read_timeout: Option<Duration>,
    /// Each wait for the server's windows to take more of the upload (the
    /// write timeout, as each wait for the socket is on HTTP/1.1).
    pub write_timeout: Option<Duration>,
    /// The response body, from its head to its end.
    pub body_timeout: Option<Duration>,
}

impl StreamLimits {
    /// Whether no bound is set (a stream that never needs the clock).
    #[must_use]
    pub fn is_unbounded(&self) -> bool {
        *self == StreamLimits::default()
    }
}

/// Which bound passed, and so what it means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expired {
    /// The read timeout: no head or data came for that long. The peer may
    /// have stalled; the pool's PING decides about the connection.
    Read,
    /// The write timeout: the server's windows stayed shut for that long.
    /// The peer may have stalled, as for [`Expired::Read`].
    Write,
    /// The call's own deadline, or the body timeout: says nothing about the
    /// connection.
    Deadline,
}

impl Expired {
    /// The stream's failure.
    #[must_use]
    pub fn error(self) -> StreamError {
        match self {
            Expired::Read => StreamError::ReadTimeout,
            Expired::Write => StreamError::WriteTimeout,
            Expired::Deadline => StreamError::Deadline,
        }
    }

    /// Whether the peer may have stalled (report
    /// [`Pool::stream_stalled`](crate::Pool::stream_stalled)).
    #[must_use]
    pub fn suspects_peer(self) -> bool {
        !matches!(self, Expired::Deadline)
    }
}

/// One stream's deadlines (see the [module docs](self)).
#[derive(Clone, Copy, Debug, Default)]
pub struct StreamTimer {
    /// Some bound is set (else nothing here ever needs the clock).
    bounded: bool,
    limits: StreamLimits,
    /// When the body must have ended (the body timeout, from the head).
    body_deadline: Option<Instant>,
    /// The wait in progress: what, until when, and which bound that is.
    armed: Option<(Wait, Instant, Expired)>,
}

impl StreamTimer {
    /// A stream under these bounds.
    #[must_use]
    pub fn new(limits: StreamLimits) -> StreamTimer {
        StreamTimer { bounded: !limits.is_unbounded(), limits, body_deadline: None, armed: None }
    }

    /// Whether no bound is set.
    #[must_use]
    pub fn is_unbounded(&self) -> bool {
        !self.bounded
    }

    /// The caller waits for `what`; returns until when. A wait already in
    /// progress for the same thing keeps its deadline (asking again is
    /// free); `now` is read only when a new wait starts under some bound.
    #[inline]
    pub fn waiting(&mut self, what: Wait, now: impl FnOnce() -> Instant) -> Option<Instant> {
        if !self.bounded {
            return None;
        }
        self.arm(what, now)
    }

    fn arm(&mut self, what: Wait, now: impl FnOnce() -> Instant) -> Option<Instant> {
        if let Some((w, until, _)) = self.armed {
            if w == what {
                return Some(until);
            }
        }
        let now = now();
        let per_wait = match what {
            Wait::Head | Wait::Body => {
                self.limits.read_timeout.map(|d| (now.saturating_add(d), Expired::Read))
            }
            Wait::Room => self.limits.write_timeout.map(|d| (now.saturating_add(d), Expired::Write)),
        };
        let deadline = match what {
            // Until the head: the head deadline (an upload waits under it too).
            Wait::Head | Wait::Room => earliest(self.limits.head_deadline, self.limits.call_deadline),
            Wait::Body => earliest(self.body_deadline, self.limits.call_deadline),
        };
        // The call's own bound wins a tie: it says nothing about the peer.
        let pick = match (per_wait, deadline) {
            (Some((t, e)), Some(d)) if t < d => Some((t, e)),
            (_, Some(d)) => Some((d, Expired::Deadline)),
            (p, None) => p,
        };
        self.armed = pick.map(|(until, why)| (what, until, why));
        pick.map(|(until, _)| until)
    }

    /// The wait ended: what it waited for came.
    #[inline]
    pub fn done(&mut self) {
        self.armed = None;
    }

    /// The response head arrived (at `now`): the body timeout starts.
    pub fn head_arrived(&mut self, now: impl FnOnce() -> Instant) {
        self.armed = None;
        if let Some(d) = self.limits.body_timeout {
            self.body_deadline = Some(now().saturating_add(d));
        }
    }

    /// When the wait in progress must end (`None`: no wait, or no bound).
    #[must_use]
    #[inline]
    pub fn deadline(&self) -> Option<Instant> {
        self.armed.map(|(_, until, _)| until)
    }

    /// Whether the wait in progress passed its bound at `now`, and which.
    #[must_use]
    pub fn expired(&self, now: Instant) -> Option<Expired> {
        let (_, until, why) = self.armed?;
        (now >= until).then_some(why)
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    fn no_clock() -> Instant {
        panic!("the clock was read")
    }

    #[test]
    fn an_unbounded_stream_never_reads_the_clock() {
        let mut t = StreamTimer::new(StreamLimits::default());
        assert_eq!(t.waiting(Wait::Head, no_clock), None);
        t.head_arrived(no_clock);
        assert_eq!(t.waiting(Wait::Body, no_clock), None);
        assert_eq!(t.expired(at(u64::MAX / 2)), None);
    }

    #[test]
    fn a_wait_keeps_its_deadline_until_it_ends() {
        let limits =
            StreamLimits { read_timeout: Some(Duration::from_millis(100)), ..StreamLimits::default() };
        let mut t = StreamTimer::new(limits);
        assert_eq!(t.waiting(Wait::Head, || at(1_000)), Some(at(1_100)));
        // Polled again later: the same wait, the same deadline, no clock.
        assert_eq!(t.waiting(Wait::Head, no_clock), Some(at(1_100)));
        assert_eq!(t.expired(at(1_099)), None);
        assert_eq!(t.expired(at(1_100)), Some(Expired::Read));
        t.head_arrived(no_clock);
        assert_eq!(t.deadline(), None);
        // Each body wait gets the whole read timeout again.
        assert_eq!(t.waiting(Wait::Body, || at(5_000)), Some(at(5_100)));
        t.done();
        assert_eq!(t.waiting(Wait::Body, || at(9_000)), Some(at(9_100)));
    }

    #[test]
    fn the_tighter_bound_wins_and_says_what_it_means() {
        let limits = StreamLimits {
            head_deadline: Some(at(2_000)),
            call_deadline: Some(at(10_000)),
            read_timeout: Some(Duration::from_millis(500)),
            write_timeout: Some(Duration::from_millis(300)),
            body_timeout: Some(Duration::from_millis(1_000)),
        };
        let mut t = StreamTimer::new(limits);
        // Uploading: the write timeout, a suspected peer.
        assert_eq!(t.waiting(Wait::Room, || at(0)), Some(at(300)));
        assert!(t.expired(at(300)).is_some_and(Expired::suspects_peer));
        t.done();
        // Near the head deadline, it wins over the read timeout.
        assert_eq!(t.waiting(Wait::Head, || at(1_800)), Some(at(2_000)));
        assert_eq!(t.expired(at(2_000)), Some(Expired::Deadline));
        assert!(!Expired::Deadline.suspects_peer());
        // The head deadline does not bound the body; the body timeout does.
        t.head_arrived(|| at(1_900));
        assert_eq!(t.waiting(Wait::Body, || at(2_600)), Some(at(2_900)));
        assert_eq!(t.expired(at(2_900)), Some(Expired::Deadline));
    }

    #[test]
    fn a_tie_is_the_calls_deadline() {
        let limits = StreamLimits {
            call_deadline: Some(at(1_000)),
            read_timeout: Some(Duration::from_millis(1_000)),
            ..StreamLimits::default()
        };
        let mut t = StreamTimer::new(limits);
        t.waiting(Wait::Head, || at(0));
        assert_eq!(t.expired(at(1_000)), Some(Expired::Deadline));
    }

    #[test]
    fn errors_say_which_bound() {
        assert_eq!(Expired::Read.error(), StreamError::ReadTimeout);
        assert_eq!(Expired::Write.error(), StreamError::WriteTimeout);
        assert_eq!(Expired::Deadline.error(), StreamError::Deadline);
    }
}
