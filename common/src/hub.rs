//! [`Hub`]: the core's [`Pool`] behind a mutex, with the adapter's own I/O state
//! beside it, the client's clock, and ordered event delivery.
//!
//! Every adapter drives the core the same way: lock, feed one input with the
//! current time, perform each action the core emitted (the adapter's part), turn
//! the core's events into listener notes, unlock, deliver the notes. The lock is
//! never held while a listener runs or while I/O waits.

use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use switchyard_core::{CallId, Instant, Pool, PoolAction};

use crate::event::{EventListener, NoopListener};

/// A listener call, queued so every listener sees events in the order they
/// happened, whichever thread made them happen.
pub type Note = Box<dyn FnOnce(&dyn EventListener) + Send>;

/// What the hub's lock guards: the pool, the adapter's I/O state `S`, and the
/// queued notes.
pub struct HubState<S> {
    /// The core's pool.
    pub pool: Pool,
    /// The adapter's state (sockets, waiters, attempts).
    pub io: S,
    notes: VecDeque<Note>,
    delivering: bool,
    /// Notes ever queued, and ever delivered (for [`Hub::flush`]).
    queued: u64,
    delivered: u64,
    /// Threads in [`Hub::flush`] waiting for another's delivery: deliveries
    /// wake them only when there are some (a wake-all is a system call even
    /// with nobody waiting: two per delivery, ~16 per call with a listener).
    flush_waiting: u32,
    /// The `tracing` span of each call in flight, while `debug` is on: the
    /// core's events for a call are logged inside it, on whichever task
    /// delivers them.
    spans: BTreeMap<CallId, tracing::Span>,
}

/// Spans kept at most (a call whose end was never heard cannot grow the map).
const SPANS_KEPT: usize = 4096;

thread_local! {
    /// Whether this thread is delivering notes (a listener calling back into
    /// the client must not wait for its own delivery).
    static DELIVERING: Cell<bool> = const { Cell::new(false) };
}

/// How long [`Hub::flush`] waits for another thread's delivery at most (a
/// listener that blocks must not hang a call forever).
const FLUSH_LIMIT: Duration = Duration::from_secs(5);

/// The pool, the adapter's I/O state and the listener, shared by a client's
/// handles and tasks.
pub struct Hub<S> {
    state: Mutex<HubState<S>>,
    /// Signalled after each delivered batch.
    delivered: Condvar,
    origin: std::time::Instant,
    listener: Arc<dyn EventListener>,
    /// Whether anyone listens (a listener was configured): when not, and tracing
    /// is off, events are dropped without building notes for them.
    listening: bool,
    /// Whether a call's span was ever kept (when not, a call's end takes no lock
    /// to forget it).
    traced: AtomicBool,
    /// Where the `debug` events go (the adapter's target).
    sites: &'static crate::LogSites,
}

impl<S> std::fmt::Debug for Hub<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").field("listening", &self.listening).finish_non_exhaustive()
    }
}

impl<S> Hub<S> {
    /// A hub around `pool`; its clock starts now.
    pub fn new(pool: Pool, io: S, listener: Option<Arc<dyn EventListener>>) -> Hub<S> {
        Hub {
            state: Mutex::new(HubState {
                pool,
                io,
                notes: VecDeque::new(),
                delivering: false,
                queued: 0,
                delivered: 0,
                flush_waiting: 0,
                spans: BTreeMap::new(),
            }),
            delivered: Condvar::new(),
            origin: std::time::Instant::now(),
            listening: listener.is_some(),
            listener: listener.unwrap_or_else(|| Arc::new(NoopListener)),
            traced: AtomicBool::new(false),
            sites: &crate::LogSites::DEFAULT,
        }
    }

    /// The hub's `debug` events (core events, calls' ends) under the
    /// adapter's target instead of `switchyard`.
    #[must_use]
    pub fn with_log_sites(mut self, sites: &'static crate::LogSites) -> Hub<S> {
        self.sites = sites;
        self
    }

    /// Where the hub's `debug` events go.
    #[must_use]
    pub fn log_sites(&self) -> &'static crate::LogSites {
        self.sites
    }

    /// Whether `debug` events of the adapter's target are wanted (the
    /// global level first, inline: with `debug` off no call is made).
    fn debug_wanted(&self) -> bool {
        tracing::level_enabled!(tracing::Level::DEBUG) && (self.sites.enabled)()
    }

    /// `call` has started inside the current `tracing` span: the span records
    /// its id at once, and while `debug` is on the core's events for the call
    /// are logged inside it, whichever task delivers them.
    pub fn trace_call(&self, st: &mut HubState<S>, call: CallId) {
        // No subscriber was ever set: no span to find (one atomic load).
        if !tracing::dispatcher::has_been_set() {
            return;
        }
        let span = tracing::Span::current();
        if span.is_disabled() {
            return;
        }
        span.record("call", tracing::field::display(call));
        if self.debug_wanted() {
            st.spans.insert(call, span);
            if st.spans.len() > SPANS_KEPT {
                st.spans.pop_first();
            }
            self.traced.store(true, Ordering::Relaxed);
        }
    }

    /// `call` is over: its span is no longer kept.
    pub fn untrace_call(&self, call: CallId) {
        if self.traced.load(Ordering::Relaxed) {
            // Dropped after the lock (a subscriber may act on a span's close).
            let span = self.lock().spans.remove(&call);
            drop(span);
        }
    }

    /// Whether calls' spans are kept (a body must then say when its call ends).
    pub fn is_tracing_calls(&self) -> bool {
        self.traced.load(Ordering::Relaxed)
    }

    /// Whether a listener was configured (when not, callers skip building notes).
    pub fn is_listening(&self) -> bool {
        self.listening
    }

    /// The core's notion of now: time since this client started.
    pub fn now(&self) -> Instant {
        Instant::from_elapsed(self.origin.elapsed())
    }

    /// A core instant on the process clock (for sleeping until a deadline).
    pub fn to_std(&self, at: Instant) -> std::time::Instant {
        self.origin + at.elapsed_since_origin()
    }

    /// A process-clock instant as a core instant (saturating at the origin).
    pub fn from_std(&self, at: std::time::Instant) -> Instant {
        Instant::from_elapsed(at.saturating_duration_since(self.origin))
    }

    /// Locks the state. A panic elsewhere while holding the lock does not wedge
    /// every call: the pool's own state is consistent between inputs.
    pub fn lock(&self) -> MutexGuard<'_, HubState<S>> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `f` on the state with the current time, hands every action the core
    /// emitted to `perform`, then delivers the core's events (and anything `f`
    /// queued first) outside the lock.
    pub fn input<R>(
        &self,
        f: impl FnOnce(&mut HubState<S>, Instant) -> R,
        perform: impl FnMut(&mut HubState<S>, Instant, PoolAction),
    ) -> R {
        self.input_then(f, perform, |_, _| {})
    }

    /// As [`Hub::input`], and `then` runs under the same lock once every action
    /// was performed (for bookkeeping that depends on the core's new state, such
    /// as its next deadline), before the events are delivered.
    pub fn input_then<R>(
        &self,
        f: impl FnOnce(&mut HubState<S>, Instant) -> R,
        mut perform: impl FnMut(&mut HubState<S>, Instant, PoolAction),
        then: impl FnOnce(&mut HubState<S>, Instant),
    ) -> R {
        let now = self.now();
        let mut st = self.lock();
        // Nobody to tell (no listener, no call traced, `debug` off): the core
        // builds and queues no events.
        let wanted = self.listening || !st.spans.is_empty() || self.debug_wanted();
        if st.pool.events_on() != wanted {
            st.pool.set_events(wanted);
        }
        let result = f(&mut st, now);
        while let Some(action) = st.pool.poll_action() {
            perform(&mut st, now, action);
        }
        then(&mut st, now);
        let wanted = self.listening || !st.spans.is_empty() || self.debug_wanted();
        while let Some(e) = st.pool.poll_event() {
            if !wanted {
                continue;
            }
            st.queued += 1;
            let span = match e.call {
                Some(call) if !st.spans.is_empty() => st.spans.get(&call).cloned(),
                _ => None,
            };
            let sites = self.sites;
            st.notes.push_back(Box::new(move |l: &dyn EventListener| {
                // A call's events go to the subscriber its span belongs to (a
                // thread's own default as well as the global one), whichever
                // thread delivers them.
                let dispatch = span.as_ref().and_then(|s| s.with_subscriber(|(_, d)| d.clone()));
                let log = || {
                    if (sites.enabled)() {
                        let (name, detail) = crate::event::describe(&e);
                        (sites.core_event)(&e, span.as_ref(), name, &detail);
                    }
                };
                match &dispatch {
                    Some(d) => tracing::dispatcher::with_default(d, log),
                    None => log(),
                }
                l.core_event(&e);
            }));
        }
        self.deliver(st);
        result
    }

    /// Queues one listener call and delivers it in order.
    pub fn emit(&self, note: impl FnOnce(&dyn EventListener) + Send + 'static) {
        if !self.listening {
            return;
        }
        let mut st = self.lock();
        st.queued += 1;
        st.notes.push_back(Box::new(note));
        self.deliver(st);
    }

    /// Returns once every note queued before this call has been delivered to
    /// the listener, whichever thread delivers it: a call's events are all
    /// heard before `send` returns and before its body's end is handed out.
    /// Delivers them itself when nobody is; waits (at most 5 s) while another
    /// thread is; returns at once on the delivering thread (a listener calling
    /// back into the client).
    pub fn flush(&self) {
        if !self.listening || DELIVERING.with(Cell::get) {
            return;
        }
        let mut st = self.lock();
        let target = st.queued;
        let deadline = std::time::Instant::now() + FLUSH_LIMIT;
        while st.delivered < target {
            if !st.delivering {
                self.deliver(st);
                st = self.lock();
                continue;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return;
            }
            st.flush_waiting += 1;
            st = self.delivered.wait_timeout(st, left).map_or_else(|e| e.into_inner().0, |(g, _)| g);
            st.flush_waiting -= 1;
        }
    }

    /// Queues a listener call while the lock is held (delivered after the input).
    pub fn queue_note(&self, st: &mut HubState<S>, note: impl FnOnce(&dyn EventListener) + Send + 'static) {
        if self.listening {
            st.queued += 1;
            st.notes.push_back(Box::new(note));
        }
    }

    /// Delivers queued notes outside the lock. One thread delivers at a time, in
    /// queue order; others only queue. A listener that panics loses that one
    /// call, nothing else; a listener may call back into the client.
    fn deliver<'a>(&'a self, mut st: MutexGuard<'a, HubState<S>>) {
        if st.delivering || st.notes.is_empty() {
            return;
        }
        st.delivering = true;
        DELIVERING.with(|d| d.set(true));
        loop {
            let batch: Vec<Note> = st.notes.drain(..).collect();
            if batch.is_empty() {
                st.delivering = false;
                DELIVERING.with(|d| d.set(false));
                if st.flush_waiting > 0 {
                    self.delivered.notify_all();
                }
                return;
            }
            drop(st);
            let n = batch.len() as u64;
            for note in batch {
                let listener = &*self.listener;
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| note(listener)));
            }
            st = self.lock();
            st.delivered += n;
            if st.flush_waiting > 0 {
                self.delivered.notify_all();
            }
        }
    }
}

/// How many wait on the pool's state (a Manager's `ready` or `shutdown`): an
/// adapter wakes them after each input only while [`Watchers::any`] says so,
/// so ordinary calls pay one relaxed load.
#[derive(Default, Debug)]
pub struct Watchers(std::sync::atomic::AtomicUsize);

impl Watchers {
    /// Whether anyone waits.
    #[must_use]
    pub fn any(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed) > 0
    }

    /// Counts one waiter until the returned guard drops (however the wait ends).
    #[must_use]
    pub fn watch(&self) -> Watch<'_> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Watch(&self.0)
    }
}

/// One waiter counted by [`Watchers::watch`].
#[derive(Debug)]
pub struct Watch<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}
