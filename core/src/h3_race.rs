//! Racing HTTP/3 against TCP (issue 59, item 3), sans-IO: when an origin is
//! known to speak HTTP/3 (an `Alt-Svc` entry, an HTTPS record), QUIC starts
//! first and TCP (HTTP/2 or HTTP/1.1) after a short delay, or at once when
//! QUIC fails first; the first usable connection wins and the other attempt
//! is cancelled. [`H3Race`] is one such race; [`QuicMemory`] remembers, per
//! address family, a network where QUIC fails, so later races skip it there
//! (five minutes, doubling each time it fails again) and try it again later.
//!
//! Per family, because a network may carry UDP over IPv4 and drop it over
//! IPv6 (or the reverse): failing on one family says nothing of the other.
//! What counts as QUIC failing: its own failure (an ICMP error, a handshake
//! error, its timeout), or TCP — started later — winning while QUIC has not
//! heard a single datagram back (UDP dropped on the way: a black hole never
//! fails on its own, it only stays silent). A QUIC attempt that had heard
//! from the server and was merely slower is not a failure.
//!
//! ```
//! use std::time::Duration;
//! use switchyard_core::h3_race::{H3Race, H3RaceConfig, QuicMemory, RaceStep};
//! use switchyard_core::{Family, Instant};
//!
//! let config = H3RaceConfig::default();
//! let mut memory = QuicMemory::default();
//! let t0 = Instant::ZERO;
//! // QUIC starts first; TCP is due 250 ms later.
//! let (mut race, first) = H3Race::start(Family::V6, &memory, t0, &config);
//! assert_eq!(first, RaceStep::StartQuic);
//! assert_eq!(race.poll_timeout(), Some(t0 + Duration::from_millis(250)));
//! // No UDP answer on this network: QUIC fails, TCP starts at once and wins.
//! assert_eq!(race.quic_failed(t0 + Duration::from_millis(100), &mut memory, &config), vec![RaceStep::StartTcp]);
//! let won = race.tcp_connected(t0 + Duration::from_millis(130), false, &mut memory, &config);
//! assert_eq!(won, vec![RaceStep::Won(switchyard_core::h3_race::Winner::Tcp)]);
//! // The next race on IPv6 goes straight to TCP for five minutes.
//! let (_, step) = H3Race::start(Family::V6, &memory, t0 + Duration::from_secs(1), &config);
//! assert_eq!(step, RaceStep::StartTcp);
//! // IPv4 is another network path: QUIC is still tried there.
//! assert_eq!(H3Race::start(Family::V4, &memory, t0, &config).1, RaceStep::StartQuic);
//! ```

use std::time::Duration;

use crate::plan::Family;
use crate::time::Instant;

/// The race's timings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct H3RaceConfig {
    /// How long QUIC runs alone before TCP starts too. Default 250 ms (the
    /// connect race's attempt delay).
    pub tcp_delay: Duration,
    /// How long a family skips QUIC after its first failure. Default 5 min.
    pub first_backoff: Duration,
    /// The longest skip, however often QUIC failed. Default 24 h.
    pub max_backoff: Duration,
}

impl Default for H3RaceConfig {
    fn default() -> H3RaceConfig {
        H3RaceConfig {
            tcp_delay: Duration::from_millis(250),
            first_backoff: Duration::from_secs(300),
            max_backoff: Duration::from_secs(86_400),
        }
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
    pub fn failed(&mut self, family: Family, now: Instant, config: &H3RaceConfig) -> Instant {
        let state = self.state(family);
        let doublings = state.failures.min(31);
        let backoff = config.first_backoff.saturating_mul(1u32 << doublings).min(config.max_backoff);
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

/// What the race's driver does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RaceStep {
    /// Start the QUIC handshake.
    StartQuic,
    /// Start the TCP connect (and TLS).
    StartTcp,
    /// Cancel the QUIC attempt (TCP won).
    CancelQuic,
    /// Cancel the TCP attempt (QUIC won).
    CancelTcp,
    /// The race is over: this one carries the request.
    Won(Winner),
    /// The race is over and both failed (the TCP attempt's error is the one to report).
    BothFailed,
}

/// Which transport won.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Winner {
    /// HTTP/3 over QUIC.
    Quic,
    /// HTTP/2 or HTTP/1.1 over TCP.
    Tcp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attempt {
    NotStarted,
    Running,
    Failed,
    Done,
}

/// One race between QUIC and TCP to one origin on one address family (see
/// the module docs). Feed it what happens; it says what to do.
#[derive(Clone, Debug)]
pub struct H3Race {
    family: Family,
    quic: Attempt,
    tcp: Attempt,
    tcp_due: Option<Instant>,
    over: bool,
}

impl H3Race {
    /// Starts a race on `family`: QUIC first when `memory` allows it there
    /// (TCP then due after the delay), else TCP alone.
    #[must_use]
    pub fn start(
        family: Family,
        memory: &QuicMemory,
        now: Instant,
        config: &H3RaceConfig,
    ) -> (H3Race, RaceStep) {
        let mut race = H3Race {
            family,
            quic: Attempt::NotStarted,
            tcp: Attempt::NotStarted,
            tcp_due: None,
            over: false,
        };
        if memory.usable(family, now) {
            race.quic = Attempt::Running;
            race.tcp_due = Some(now + config.tcp_delay);
            (race, RaceStep::StartQuic)
        } else {
            race.tcp = Attempt::Running;
            (race, RaceStep::StartTcp)
        }
    }

    /// The address family raced on.
    #[must_use]
    pub fn family(&self) -> Family {
        self.family
    }

    /// Whether a winner was found or both failed.
    #[must_use]
    pub fn is_over(&self) -> bool {
        self.over
    }

    /// When [`handle_timeout`](Self::handle_timeout) is due: TCP's start.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.tcp_due.filter(|_| !self.over)
    }

    fn start_tcp(&mut self) -> Vec<RaceStep> {
        self.tcp_due = None;
        if self.tcp == Attempt::NotStarted {
            self.tcp = Attempt::Running;
            vec![RaceStep::StartTcp]
        } else {
            Vec::new()
        }
    }

    /// Time passed: TCP starts once its delay is over.
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<RaceStep> {
        match self.tcp_due {
            Some(due) if due <= now && !self.over => self.start_tcp(),
            _ => Vec::new(),
        }
    }

    /// The QUIC handshake is over: QUIC wins unless TCP already did.
    pub fn quic_connected(&mut self, memory: &mut QuicMemory) -> Vec<RaceStep> {
        if self.over || self.quic != Attempt::Running {
            return Vec::new();
        }
        memory.succeeded(self.family);
        self.quic = Attempt::Done;
        self.over = true;
        self.tcp_due = None;
        let mut steps = Vec::new();
        if self.tcp == Attempt::Running {
            self.tcp = Attempt::Failed;
            steps.push(RaceStep::CancelTcp);
        }
        steps.push(RaceStep::Won(Winner::Quic));
        steps
    }

    /// The QUIC attempt failed on its own: remembered for the family; TCP
    /// starts at once if it has not yet (or the race is lost if TCP failed too).
    pub fn quic_failed(
        &mut self,
        now: Instant,
        memory: &mut QuicMemory,
        config: &H3RaceConfig,
    ) -> Vec<RaceStep> {
        if self.over || self.quic != Attempt::Running {
            return Vec::new();
        }
        self.quic = Attempt::Failed;
        memory.failed(self.family, now, config);
        match self.tcp {
            Attempt::Failed => {
                self.over = true;
                vec![RaceStep::BothFailed]
            }
            _ => self.start_tcp(),
        }
    }

    /// TCP (and TLS) is connected at `now`: TCP wins unless QUIC already
    /// did. `quic_heard`: whether any datagram came back from the server on
    /// the QUIC attempt. A QUIC attempt that was merely slower is not a
    /// failure; one that heard nothing at all by the time TCP (started
    /// later) was through looks like UDP dropped on the way, and counts as
    /// one for the family.
    pub fn tcp_connected(
        &mut self,
        now: Instant,
        quic_heard: bool,
        memory: &mut QuicMemory,
        config: &H3RaceConfig,
    ) -> Vec<RaceStep> {
        if self.over || self.tcp != Attempt::Running {
            return Vec::new();
        }
        self.tcp = Attempt::Done;
        self.over = true;
        let mut steps = Vec::new();
        if self.quic == Attempt::Running {
            self.quic = Attempt::Failed;
            if !quic_heard {
                memory.failed(self.family, now, config);
            }
            steps.push(RaceStep::CancelQuic);
        }
        steps.push(RaceStep::Won(Winner::Tcp));
        steps
    }

    /// The TCP attempt failed: the race goes on with QUIC if it still runs.
    pub fn tcp_failed(&mut self) -> Vec<RaceStep> {
        if self.over || self.tcp != Attempt::Running {
            return Vec::new();
        }
        self.tcp = Attempt::Failed;
        if self.quic == Attempt::Running {
            Vec::new()
        } else {
            self.over = true;
            vec![RaceStep::BothFailed]
        }
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
    fn quic_first_tcp_after_the_delay_quic_wins() {
        let c = H3RaceConfig::default();
        let mut m = QuicMemory::default();
        let (mut race, step) = H3Race::start(Family::V4, &m, ms(0), &c);
        assert_eq!(step, RaceStep::StartQuic);
        assert!(race.handle_timeout(ms(249)).is_empty());
        assert_eq!(race.handle_timeout(ms(250)), [RaceStep::StartTcp]);
        assert!(race.handle_timeout(ms(300)).is_empty(), "TCP starts once");
        assert_eq!(race.quic_connected(&mut m), [RaceStep::CancelTcp, RaceStep::Won(Winner::Quic)]);
        assert!(race.is_over() && race.poll_timeout().is_none());
        assert!(
            race.tcp_connected(ms(400), true, &mut m, &c).is_empty(),
            "a late TCP connect changes nothing"
        );
    }

    #[test]
    fn backoff_doubles_per_family_and_success_forgets() {
        let c = H3RaceConfig::default();
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
        assert_eq!(m.retry_at(Family::V6, ms(0)), Some(ms(0) + c.max_backoff), "capped");
        m.succeeded(Family::V6);
        assert!(m.usable(Family::V6, ms(0)));
        assert_eq!(m.failed(Family::V6, ms(0), &c), ms(0) + 5 * min, "a success starts the doubling over");
    }

    #[test]
    fn tcp_winning_is_not_a_quic_failure_unless_quic_heard_nothing() {
        let c = H3RaceConfig::default();
        let mut m = QuicMemory::default();
        // QUIC heard from the server, just slower: not broken.
        let (mut race, _) = H3Race::start(Family::V4, &m, ms(0), &c);
        race.handle_timeout(ms(250));
        assert_eq!(
            race.tcp_connected(ms(251), true, &mut m, &c),
            [RaceStep::CancelQuic, RaceStep::Won(Winner::Tcp)]
        );
        assert!(m.usable(Family::V4, ms(251)));
        // Not one datagram back by the time TCP was through: UDP is dropped.
        let (mut race, _) = H3Race::start(Family::V6, &m, ms(0), &c);
        race.handle_timeout(ms(250));
        race.tcp_connected(ms(251), false, &mut m, &c);
        assert!(!m.usable(Family::V6, ms(252)) && m.usable(Family::V4, ms(252)));
        let (_, step) = H3Race::start(Family::V6, &m, ms(1000), &c);
        assert_eq!(step, RaceStep::StartTcp, "the next race on IPv6 goes straight to TCP");
        let mut race = H3Race::start(Family::V4, &m, ms(0), &c).0;
        race.handle_timeout(ms(250));
        race.tcp_connected(ms(251), true, &mut m, &c);
        assert!(
            race.quic_failed(ms(260), &mut m, &c).is_empty(),
            "a cancelled attempt's late failure is not news"
        );
        assert!(m.usable(Family::V4, ms(261)));
    }

    #[test]
    fn both_failing_ends_the_race_either_order() {
        let c = H3RaceConfig::default();
        let mut m = QuicMemory::default();
        let (mut race, _) = H3Race::start(Family::V4, &m, ms(0), &c);
        race.handle_timeout(ms(250));
        assert!(race.tcp_failed().is_empty(), "QUIC still runs");
        assert_eq!(race.quic_failed(ms(300), &mut m, &c), [RaceStep::BothFailed]);
        let mut m = QuicMemory::default();
        let (mut race, _) = H3Race::start(Family::V4, &m, ms(0), &c);
        assert_eq!(race.quic_failed(ms(10), &mut m, &c), [RaceStep::StartTcp]);
        assert_eq!(race.tcp_failed(), [RaceStep::BothFailed]);
        assert!(race.is_over());
    }

    #[derive(Clone, Copy, Debug)]
    enum Input {
        Tick(u16),
        QuicUp,
        QuicDown,
        TcpUp(bool),
        TcpDown,
    }

    proptest! {
        /// Whatever happens in whatever order: TCP starts at most once, and
        /// only after the delay or QUIC's failure; at most one winner, and
        /// only a transport that connected; the loser, if running, is
        /// cancelled; nothing is asked after the race is over; QUIC's memory
        /// changes only on QUIC's own failure or a TCP win while QUIC heard nothing.
        #[test]
        fn the_race_keeps_its_rules(inputs in proptest::collection::vec(prop_oneof![
            (0u16..400).prop_map(Input::Tick), Just(Input::QuicUp), Just(Input::QuicDown),
            any::<bool>().prop_map(Input::TcpUp), Just(Input::TcpDown),
        ], 0..12)) {
            let c = H3RaceConfig::default();
            let mut m = QuicMemory::default();
            let (mut race, first) = H3Race::start(Family::V4, &m, ms(0), &c);
            prop_assert_eq!(first, RaceStep::StartQuic);
            let (mut now, mut tcp_started, mut winners, mut over) = (0u64, false, 0, false);
            let (mut quic_failed, mut tcp_running, mut quic_running) = (false, false, true);
            for input in inputs {
                let steps = match input {
                    Input::Tick(d) => { now += u64::from(d); race.handle_timeout(ms(now)) }
                    Input::QuicUp if quic_running => race.quic_connected(&mut m),
                    Input::QuicDown if quic_running => { let s = race.quic_failed(ms(now), &mut m, &c); if !over { quic_failed = true; } s }
                    Input::TcpUp(heard) if tcp_running => {
                        if !over && quic_running && !heard { quic_failed = true; }
                        race.tcp_connected(ms(now), heard, &mut m, &c)
                    }
                    Input::TcpDown if tcp_running => race.tcp_failed(),
                    _ => Vec::new(),
                };
                if over {
                    prop_assert!(steps.is_empty(), "{:?} after the race was over", steps);
                }
                for step in &steps {
                    match step {
                        RaceStep::StartTcp => {
                            prop_assert!(!tcp_started);
                            prop_assert!(now >= 250 || quic_failed);
                            tcp_started = true;
                            tcp_running = true;
                        }
                        RaceStep::Won(w) => {
                            winners += 1;
                            prop_assert!(matches!((w, input), (Winner::Quic, Input::QuicUp) | (Winner::Tcp, Input::TcpUp(_))));
                            over = true;
                        }
                        RaceStep::BothFailed => over = true,
                        RaceStep::CancelQuic => prop_assert!(quic_running),
                        RaceStep::CancelTcp => prop_assert!(tcp_running),
                        RaceStep::StartQuic => prop_assert!(false, "QUIC starts only at the start"),
                    }
                }
                match input {
                    Input::QuicUp | Input::QuicDown => quic_running = false,
                    Input::TcpUp(_) | Input::TcpDown => tcp_running = false,
                    Input::Tick(_) => {}
                }
                prop_assert_eq!(over, race.is_over());
            }
            prop_assert!(winners <= 1);
            prop_assert_eq!(m.usable(Family::V4, ms(now)), !quic_failed);
        }
    }
}
