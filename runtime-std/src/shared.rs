//! The adapter's client state: the core's [`Pool`](switchyard_core::Pool) in a [`Hub`], with the
//! shared [`Engine`] beside it, fed by the calling threads and by job threads
//! for DNS queries, connect attempts and handshakes (reused: a finished one
//! waits a few seconds for the next job, then exits). No background thread:
//! whoever enters the client — a call starting, waiting, finishing, a connect
//! thread reporting, `stats()` — first fires the core's due timers, and a
//! waiting call sleeps only until the core's next deadline, so race stagger,
//! connect and handshake timeouts, acquire timeouts, keep-alive eviction and
//! the idle sweep all happen on time without a housekeeping thread. A
//! Manager (which must re-warm while no call runs) adds one clock thread
//! ([`keep_clock`]); while it lives it is the only timekeeper. An input
//! runs under the lock and collects the engine's effects; they are carried out
//! once the lock is released (threads are spawned, sockets probed and closed,
//! waiting calls answered there).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, PoisonError, Weak};
use std::time::Duration;

use switchyard_common::engine::{self, EngineHost, EngineState};
use switchyard_common::{Hub, HubState, Resolve, Watchers};
use switchyard_core::{AcquireError, CallId, Instant};

/// A connection handed to a call for one exchange.
pub(crate) type Lease = engine::Lease<Shared>;

/// What a waiting call receives.
pub(crate) enum Msg {
    /// The pool's answer.
    Answer(Result<Lease, AcquireError>),
    /// Wake up: the core's next deadline moved earlier, or this call is now the
    /// timekeeper.
    Wake,
}

/// The engine's state beside the pool under the hub's lock.
pub(crate) type IoState = EngineState<Shared>;

/// Who runs the core's timers. While a Manager lives, its clock thread does
/// (`standing`: when it plans to wake); otherwise the waiting call in `call`,
/// one at a time, and when it leaves another waiter takes over.
#[derive(Default)]
pub(crate) struct Keeper {
    call: Option<(CallId, Option<std::time::Instant>)>,
    standing: Option<Option<std::time::Instant>>,
}

pub(crate) type State = HubState<IoState>;

/// Timeouts and limits the exchange code needs.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The HTTP/1.1 connection driver's timeouts and limits.
    pub(crate) driver: switchyard_core::http1::DriverConfig,
    pub(crate) connect_timeout: Duration,
    pub(crate) handshake_timeout: Duration,
    pub(crate) tls: switchyard_common::tls::TlsConfigs,
    /// Socket options for TCP connects.
    pub(crate) tcp: switchyard_common::transport::TcpOptions,
    /// The embedder's connector hook, instead of TCP.
    pub(crate) connector: Option<crate::ConnectorSlot>,
    /// HTTP/2 windows.
    pub(crate) http2: switchyard_common::Http2Settings,
}

pub(crate) struct Shared {
    pub(crate) hub: Hub<IoState>,
    pub(crate) resolver: Arc<dyn Resolve>,
    pub(crate) settings: Settings,
    /// Threads for DNS queries, connects and handshakes, reused.
    workers: crate::workers::Workers,
    /// Wakes the Manager's clock thread when the core's next deadline moves
    /// earlier than it planned ([`keep_clock`]).
    clock: Condvar,
    /// Woken after every input while someone waits on the pool's state
    /// ([`Shared::wait_for`]: the Manager's `ready` and `shutdown`).
    pub(crate) changed: Condvar,
    /// How many wait in [`Shared::wait_for`]; no wake-ups are sent without one.
    pub(crate) watching: Watchers,
    /// This `Shared`, for connection threads that must not keep the client
    /// alive.
    pub(crate) me: Weak<Shared>,
}

/// Fires the core's timers if one is due.
pub(crate) fn fire_due(st: &mut State, now: Instant) {
    if st.pool.poll_timeout().is_some_and(|t| t <= now) {
        st.pool.handle_timeout(now);
    }
}

impl Shared {
    pub(crate) fn new(hub: Hub<IoState>, resolver: Arc<dyn Resolve>, settings: Settings) -> Arc<Shared> {
        Arc::new_cyclic(|me| Shared {
            hub,
            resolver,
            settings,
            workers: crate::workers::Workers::default(),
            clock: Condvar::new(),
            changed: Condvar::new(),
            watching: Watchers::default(),
            me: Weak::clone(me),
        })
    }

    /// Makes sure a waiting call will wake in time for the core's next
    /// deadline: the timekeeper if its planned wake is too late, or a new
    /// timekeeper if there is none.
    fn mind_the_clock(&self) {
        let mut st = self.hub.lock();
        self.mind_the_clock_locked(&mut st);
    }

    pub(crate) fn mind_the_clock_locked(&self, st: &mut State) {
        let Some(next) = st.pool.poll_timeout().map(|t| self.hub.to_std(t)) else { return };
        if let Some(planned) = st.io.local.standing {
            // The Manager's clock thread keeps time; wake it if it sleeps too long.
            if planned.is_none_or(|p| next < p) {
                st.io.local.standing = Some(Some(next));
                self.clock.notify_one();
            }
            return;
        }
        if st.io.local.call.is_some_and(|(keeper, _)| !st.io.engine.is_waiting(keeper)) {
            st.io.local.call = None; // it stopped waiting without handing on (an error path)
        }
        match st.io.local.call {
            Some((call, planned)) => {
                if planned.is_none_or(|p| next < p) {
                    st.io.local.call = Some((call, Some(next)));
                    if let Some(tx) = st.io.engine.waiter(call) {
                        let _ = tx.send(Msg::Wake);
                    }
                }
            }
            None => {
                // The lowest call id: deterministic, and the oldest waiter.
                if let Some((call, tx)) = st.io.engine.first_waiter() {
                    let _ = tx.send(Msg::Wake);
                    st.io.local.call = Some((call, Some(next)));
                }
            }
        }
    }

    /// How long the waiting `call` may sleep: until the core's next deadline if
    /// it keeps the clock (taking the job if nobody does), otherwise `None`
    /// (until its answer or its own deadline).
    pub(crate) fn plan_sleep(&self, call: CallId) -> Option<Duration> {
        let mut st = self.hub.lock();
        if st.io.local.standing.is_some() {
            return None; // the Manager's clock thread keeps time
        }
        let keeps = match st.io.local.call {
            None => true,
            Some((keeper, _)) => keeper == call,
        };
        if !keeps {
            return None;
        }
        let next = st.pool.poll_timeout().map(|t| self.hub.to_std(t));
        st.io.local.call = Some((call, next));
        next.map(|at| at.saturating_duration_since(std::time::Instant::now()))
    }

    /// `call` stops waiting: if it kept the clock, hand the job on.
    pub(crate) fn stop_waiting(&self, call: CallId) {
        let handed_on = {
            let mut st = self.hub.lock();
            if st.io.local.call.is_some_and(|(keeper, _)| keeper == call) {
                st.io.local.call = None;
                true
            } else {
                false
            }
        };
        if handed_on {
            self.mind_the_clock();
        }
    }

    /// Waits until `done` holds for the pool's state, or `deadline` passes
    /// (`false`). Looks again after every input — the pool's state changes
    /// only in one — instead of polling on a timer. The core's timers are not
    /// fired here: a Manager's clock thread does that ([`keep_clock`]).
    pub(crate) fn wait_for(
        &self,
        deadline: std::time::Instant,
        mut done: impl FnMut(&State, Instant) -> bool,
    ) -> bool {
        let _watch = self.watching.watch();
        let mut st = self.hub.lock();
        loop {
            if done(&st, self.hub.now()) {
                return true;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            st = match self.changed.wait_timeout(st, left) {
                Ok((st, _)) => st,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    /// Wakes the Manager's clock thread (it looks at its stop flag).
    pub(crate) fn wake_clock(&self) {
        let _st = self.hub.lock();
        self.clock.notify_all();
    }

    /// Runs `work` on a job thread (reused, or new); `false` if the system
    /// refuses a thread.
    pub(crate) fn thread(&self, work: impl FnOnce() + Send + 'static) -> bool {
        self.workers.run(work)
    }
}

/// The Manager's clock thread: fires the core's due timers (backoff retries,
/// replacements, eviction) while no call is running, then sleeps until the
/// next deadline — woken early when an input moves that deadline earlier
/// ([`Keeper`]) — until `stop` is set. While it runs, waiting calls do not
/// keep the clock: there is one clock.
pub(crate) fn keep_clock(shared: &Weak<Shared>, stop: &AtomicBool) {
    loop {
        let Some(s) = shared.upgrade() else { return };
        s.input(|_, _| ()); // entering the client fires the due timers
        let mut st = s.hub.lock();
        if stop.load(Ordering::Acquire) {
            st.io.local.standing = None;
            drop(st);
            s.mind_the_clock(); // a waiting call keeps time again
            return;
        }
        let next = st.pool.poll_timeout().map(|t| s.hub.to_std(t));
        st.io.local.standing = Some(next);
        match next {
            Some(at) => {
                let nap = at.saturating_duration_since(std::time::Instant::now());
                drop(s.clock.wait_timeout(st, nap).unwrap_or_else(PoisonError::into_inner));
            }
            None => drop(s.clock.wait(st).unwrap_or_else(PoisonError::into_inner)),
        }
    }
}
