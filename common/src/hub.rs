//! [`Hub`]: the core's [`Pool`] behind a mutex, with the adapter's own I/O state
//! beside it, the client's clock, and ordered event delivery.
//!
//! Every adapter drives the core the same way: lock, feed one input with the
//! current time, perform each action the core emitted (the adapter's part), turn
//! the core's events into listener notes, unlock, deliver the notes. The lock is
//! never held while a listener runs or while I/O waits.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use switchyard_core::{Instant, Pool, PoolAction};

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
}

/// The pool, the adapter's I/O state and the listener, shared by a client's
/// handles and tasks.
pub struct Hub<S> {
    state: Mutex<HubState<S>>,
    origin: std::time::Instant,
    listener: Arc<dyn EventListener>,
    /// Whether anyone listens (a listener was configured): when not, and tracing
    /// is off, events are dropped without building notes for them.
    listening: bool,
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
            state: Mutex::new(HubState { pool, io, notes: VecDeque::new(), delivering: false }),
            origin: std::time::Instant::now(),
            listening: listener.is_some(),
            listener: listener.unwrap_or_else(|| Arc::new(NoopListener)),
        }
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
        let result = f(&mut st, now);
        while let Some(action) = st.pool.poll_action() {
            perform(&mut st, now, action);
        }
        then(&mut st, now);
        let wanted = self.listening || tracing::enabled!(tracing::Level::DEBUG);
        while let Some(e) = st.pool.poll_event() {
            if !wanted {
                continue;
            }
            st.notes.push_back(Box::new(move |l: &dyn EventListener| {
                if tracing::enabled!(tracing::Level::DEBUG) {
                    let (name, detail) = crate::event::describe(&e);
                    tracing::debug!(at = ?e.at, call = ?e.call, "{name} {detail}");
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
        st.notes.push_back(Box::new(note));
        self.deliver(st);
    }

    /// Queues a listener call while the lock is held (delivered after the input).
    pub fn queue_note(&self, st: &mut HubState<S>, note: impl FnOnce(&dyn EventListener) + Send + 'static) {
        if self.listening {
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
        loop {
            let batch: Vec<Note> = st.notes.drain(..).collect();
            if batch.is_empty() {
                st.delivering = false;
                return;
            }
            drop(st);
            for note in batch {
                let listener = &*self.listener;
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| note(listener)));
            }
            st = self.lock();
        }
    }
}
