//! The pool's deadlines in one ordered table: every timer the pool arms
//! (a connection's max lifetime, a waiting call's acquire timeout, a kept
//! attempt's deadline, an idle-cap trim, a race's next step, the idle probe, a
//! warm backoff or `Down` deadline, a probation's end, an overdue PONG, an
//! HTTP/2 connection's SETTINGS deadline) is one entry keyed by its instant and
//! a [`Timer`], so [`Pool::poll_timeout`](super::Pool::poll_timeout) is the
//! first entry and [`Pool::handle_timeout`](super::Pool::handle_timeout) one
//! match over the due ones, in time order. Idle expiry is not here: the idle
//! queue already orders idle connections by when they went idle (the order
//! the caps close them in), so its first entry is the keep-alive deadline.

use std::collections::BTreeSet;

use crate::id::{AttemptId, CallId, ConnectionId};
use crate::time::Instant;

/// What a deadline is for. Entries due at the same instant fire in this
/// order (the order the pool has always handled them in).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(super) enum Timer {
    /// The connection's max lifetime: it retires.
    Lifetime(ConnectionId),
    /// The waiting call's acquire timeout: it fails.
    Wait(CallId),
    /// A kept attempt's connect or handshake deadline: it fails.
    Kept(AttemptId),
    /// An idle connection over its Address's cap has used its grace.
    Trim(ConnectionId),
    /// The call's race has a step due (stagger, attempt timeout).
    Race(CallId),
    /// Idle HTTP/1.1 connections are probed.
    Probe,
    /// A declared Address's backoff ends, or it goes `Down`.
    Warm(u64),
    /// A connection to a declared Address ends its probation.
    Probation(ConnectionId),
    /// The connection's PONG is overdue: it is unhealthy.
    Pong(ConnectionId),
    /// The HTTP/2 connection's first SETTINGS never came: never usable.
    Settings(ConnectionId),
    /// Names with pooled connections are due to be looked up again.
    DnsRefresh,
    /// The HTTP/2 connection's keep-alive PING is due.
    KeepAlive(ConnectionId),
}

impl Timer {
    /// Its kind, as an index into [`Timers`]' counts.
    fn kind(self) -> usize {
        match self {
            Timer::Lifetime(_) => 0,
            Timer::Wait(_) => 1,
            Timer::Kept(_) => 2,
            Timer::Trim(_) => 3,
            Timer::Race(_) => 4,
            Timer::Probe => 5,
            Timer::Warm(_) => 6,
            Timer::Probation(_) => 7,
            Timer::Pong(_) => 8,
            Timer::Settings(_) => 9,
            Timer::DnsRefresh => 10,
            Timer::KeepAlive(_) => 11,
        }
    }
}

/// How many kinds of [`Timer`] there are.
const KINDS: usize = 12;

/// The table: entries in deadline order, and how many of each kind are armed.
/// Disarming a kind none of whose timers is armed costs no search (an acquire
/// disarms the idle-cap trim of the connection it takes, which is almost
/// never armed), and a connection's PONG is looked up only while a PING is out.
#[derive(Default, Debug)]
pub(super) struct Timers {
    set: BTreeSet<(Instant, Timer)>,
    armed: [u32; KINDS],
}

impl Timers {
    /// Arms `timer` at `at`.
    pub(super) fn insert(&mut self, at: Instant, timer: Timer) {
        if self.set.insert((at, timer)) {
            self.armed[timer.kind()] += 1;
        }
    }

    /// Disarms `timer` armed at `at`; whether it was armed.
    pub(super) fn remove(&mut self, at: Instant, timer: Timer) -> bool {
        if self.armed[timer.kind()] == 0 || !self.set.remove(&(at, timer)) {
            return false;
        }
        self.armed[timer.kind()] -= 1;
        true
    }

    /// Whether `timer` is armed at `at`.
    pub(super) fn contains(&self, at: Instant, timer: Timer) -> bool {
        self.armed[timer.kind()] > 0 && self.set.contains(&(at, timer))
    }

    /// The earliest deadline.
    pub(super) fn first(&self) -> Option<Instant> {
        self.set.first().map(|(at, _)| *at)
    }

    /// Takes the earliest entry if it is due at `now`.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<Timer> {
        let &(at, timer) = self.set.first()?;
        if at > now {
            return None;
        }
        self.remove(at, timer);
        Some(timer)
    }

    /// Whether a PING on `connection` waits for its PONG.
    pub(super) fn pong_pending(&self, connection: ConnectionId) -> bool {
        self.pong_at(connection).is_some()
    }

    /// Disarms `connection`'s PONG deadline, if armed.
    pub(super) fn cancel_pong(&mut self, connection: ConnectionId) {
        if let Some(at) = self.pong_at(connection) {
            self.remove(at, Timer::Pong(connection));
        }
    }

    fn pong_at(&self, connection: ConnectionId) -> Option<Instant> {
        if self.armed[Timer::Pong(connection).kind()] == 0 {
            return None;
        }
        self.set.iter().find(|(_, t)| *t == Timer::Pong(connection)).map(|(at, _)| *at)
    }

    /// Keeps only the entries `keep` accepts (shutdown drops the warm ones).
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&Timer) -> bool) {
        self.set.retain(|(_, t)| keep(t));
        self.armed = [0; KINDS];
        for (_, t) in &self.set {
            self.armed[t.kind()] += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_entries_come_in_time_order_then_kind_order() {
        let ms = Instant::from_millis;
        let mut ids = crate::id::IdAllocator::default();
        let (a, b) = (ids.next_connection(), ids.next_connection());
        let mut t = Timers::default();
        t.insert(ms(20), Timer::Lifetime(a));
        t.insert(ms(10), Timer::Settings(b));
        t.insert(ms(10), Timer::Lifetime(b));
        t.insert(ms(30), Timer::Probe);
        assert_eq!(t.first(), Some(ms(10)));
        assert_eq!(t.pop_due(ms(5)), None, "nothing due yet");
        assert_eq!(t.pop_due(ms(20)), Some(Timer::Lifetime(b)));
        assert_eq!(t.pop_due(ms(20)), Some(Timer::Settings(b)));
        assert_eq!(t.pop_due(ms(20)), Some(Timer::Lifetime(a)));
        assert_eq!(t.pop_due(ms(20)), None, "the probe is at 30 ms");
        assert_eq!(t.first(), Some(ms(30)));
    }

    #[test]
    fn pong_deadlines_are_found_and_counted() {
        let ms = Instant::from_millis;
        let mut ids = crate::id::IdAllocator::default();
        let (a, b) = (ids.next_connection(), ids.next_connection());
        let mut t = Timers::default();
        assert!(!t.pong_pending(a));
        t.insert(ms(10), Timer::Pong(a));
        t.insert(ms(10), Timer::Pong(a)); // armed once
        assert!(t.pong_pending(a) && !t.pong_pending(b));
        t.cancel_pong(a);
        assert!(!t.pong_pending(a));
        assert_eq!(t.first(), None);
        t.insert(ms(10), Timer::Pong(b));
        t.insert(ms(5), Timer::Warm(1));
        t.retain(|timer| !matches!(timer, Timer::Warm(_)));
        assert!(t.pong_pending(b));
        assert_eq!(t.pop_due(ms(10)), Some(Timer::Pong(b)));
        assert!(!t.pong_pending(b));
    }
}
