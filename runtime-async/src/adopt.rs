//! A call drives the connect attempts (and DNS lookups) it started itself.
//!
//! When a call's acquisition makes the pool dial (nothing idle to reuse), the
//! lookups and attempts it starts are not spawned: the calling future polls them beside
//! its wait for an answer, on whatever thread and executor run it. A new
//! connection per call then costs no task hand-over (spawn, wake-up across
//! threads, the answer back) — on smol's global executor, which runs spawned
//! tasks on a thread of its own, that hand-over was half of a call with a new
//! connection. Whatever the call leaves unfinished (it was answered by
//! another connection, it timed out, it was dropped) is spawned then and
//! finishes for the pool, as a spawned attempt would have; an attempt the
//! engine aborts is dropped where it is (its socket closes).
//!
//! Work is collected for a caller while [`adopting`] runs on its thread:
//! the start of the call, and each poll of what it adopted (so the connect
//! that follows an adopted lookup, and the TLS handshake that follows an
//! adopted connect, are adopted too).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use switchyard_core::{AttemptId, QueryId};

use crate::runtime::{BoxFuture, Task};
use crate::shared::Shared;

thread_local! {
    /// A caller collects attempts on this thread.
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    /// How many attempts `COLLECTED` holds (read without touching it: a call
    /// served from the pool, the common case, only reads two cells).
    static HELD: Cell<usize> = const { Cell::new(0) };
    /// Attempts collected, the innermost collector's last.
    static COLLECTED: RefCell<Vec<Arc<Adopted>>> = const { RefCell::new(Vec::new()) };
}

/// Attempts one caller collected.
pub(crate) type Collected = Vec<Arc<Adopted>>;

/// Runs `f`, collecting the attempts started meanwhile on this thread
/// (see [`offer`]) instead of letting them be spawned: `None` when it
/// started none.
pub(crate) fn adopting<T>(f: impl FnOnce() -> T) -> (T, Option<Collected>) {
    let outer = ACTIVE.replace(true);
    let start = HELD.get();
    let result = f();
    ACTIVE.set(outer);
    if HELD.get() == start {
        return (result, None);
    }
    HELD.set(start);
    (result, Some(COLLECTED.with(|c| c.borrow_mut().split_off(start))))
}

/// What an adopted future does for the pool, so that one the runtime cannot
/// take when the caller leaves fails as it would have failed to start.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Work {
    /// A connect attempt (TCP, then TLS and proxies).
    Attempt(AttemptId),
    /// A DNS lookup (every call waiting on the name shares it).
    Lookup(QueryId),
}

/// Gives a lookup's or an attempt's future to the caller collecting on this
/// thread, if any: the handle the engine aborts it with, or the future back
/// to be spawned.
/// `here` says whether the runtime lets a future of its own run in the
/// caller's context ([`Runtime::drives_inline`](crate::Runtime::drives_inline)),
/// asked only when a caller collects.
pub(crate) fn offer(
    what: Work,
    task: BoxFuture<()>,
    here: impl FnOnce() -> bool,
) -> Result<Box<dyn Task>, BoxFuture<()>> {
    if !ACTIVE.get() || !here() {
        return Err(task);
    }
    let cell = Arc::new(Adopted {
        what,
        aborted: AtomicBool::new(false),
        slot: Mutex::new(Slot { future: Some(task), spawned: None }),
    });
    COLLECTED.with(|c| c.borrow_mut().push(Arc::clone(&cell)));
    HELD.set(HELD.get() + 1);
    Ok(Box::new(Handle(cell)))
}

/// A lookup or attempt a caller drives.
pub(crate) struct Adopted {
    what: Work,
    /// Aborted by the engine (checked by the caller after each poll: an
    /// abort that comes while the caller polls it cannot take the slot).
    aborted: AtomicBool,
    slot: Mutex<Slot>,
}

struct Slot {
    /// Still the caller's to poll.
    future: Option<BoxFuture<()>>,
    /// Handed to the runtime (the caller left first).
    spawned: Option<Box<dyn Task>>,
}

impl Adopted {
    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The engine's handle on an adopted attempt.
struct Handle(Arc<Adopted>);

impl Task for Handle {
    fn abort(self: Box<Self>) {
        self.0.aborted.store(true, Ordering::Release);
        // Held only while the caller polls it; the caller drops it after.
        if let Ok(mut slot) = self.0.slot.try_lock() {
            slot.future = None;
            if let Some(task) = slot.spawned.take() {
                task.abort();
            }
        }
    }
}

/// What one call adopted: polled beside its wait, spawned when it leaves.
pub(crate) struct Adoptions {
    list: Vec<Arc<Adopted>>,
    shared: Arc<Shared>,
}

impl Adoptions {
    /// What a call collected, if anything (boxed: a call served from the
    /// pool carries one pointer).
    pub(crate) fn new(shared: &Arc<Shared>, list: Option<Collected>) -> Option<Box<Adoptions>> {
        list.map(|list| Box::new(Adoptions { list, shared: Arc::clone(shared) }))
    }

    /// Adds attempts collected later (a retry's).
    pub(crate) fn extend(
        this: &mut Option<Box<Adoptions>>,
        shared: &Arc<Shared>,
        more: Option<Vec<Arc<Adopted>>>,
    ) {
        match (this.as_mut(), more) {
            (_, None) => {}
            (Some(a), Some(more)) => a.list.extend(more),
            (None, more) => *this = Adoptions::new(shared, more),
        }
    }

    /// Polls every adopted attempt still running (collecting what they start
    /// in turn); whether any finished or started another.
    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let mut changed = false;
        let mut born = Vec::new();
        self.list.retain(|cell| {
            let mut slot = cell.slot();
            let Some(future) = slot.future.as_mut() else { return slot.spawned.is_some() };
            let (done, started) = adopting(|| future.as_mut().poll(cx).is_ready());
            born.extend(started.into_iter().flatten());
            if done || cell.aborted.load(Ordering::Acquire) {
                slot.future = None;
                changed = true;
                return false;
            }
            true
        });
        changed |= !born.is_empty();
        self.list.extend(born);
        changed
    }

    /// Hands every attempt still running to the runtime (the call no longer
    /// waits). One that cannot be spawned fails, as an attempt the runtime
    /// could not start.
    pub(crate) fn release(&mut self) {
        let shared = &self.shared;
        for cell in self.list.drain(..) {
            let mut slot = cell.slot();
            let Some(future) = slot.future.take() else { continue };
            if cell.aborted.load(Ordering::Acquire) {
                continue;
            }
            match shared.rt.spawn(future) {
                Some(task) => {
                    slot.spawned = Some(task);
                    drop(slot);
                    // An abort whose `try_lock` met this one's lock set its
                    // flag before: seen here, after the unlock, it is taken.
                    if cell.aborted.load(Ordering::Acquire) {
                        if let Ok(mut slot) = cell.slot.try_lock() {
                            if let Some(task) = slot.spawned.take() {
                                task.abort();
                            }
                        }
                    }
                }
                None => {
                    drop(slot);
                    match cell.what {
                        Work::Attempt(attempt) => shared.attempt_failed_to_start(attempt),
                        Work::Lookup(query) => shared.lookup_failed_to_start(query),
                    }
                }
            }
        }
    }
}

impl Drop for Adoptions {
    fn drop(&mut self) {
        self.release();
    }
}

/// Waits for `answer`, driving the call's adopted attempts meanwhile; the
/// ones still running when it comes are spawned.
pub(crate) async fn wait<F: Future + Unpin>(answer: &mut F, adoptions: &mut Adoptions) -> F::Output {
    let out = std::future::poll_fn(|cx| loop {
        if let Poll::Ready(out) = Pin::new(&mut *answer).poll(cx) {
            return Poll::Ready(out);
        }
        // An attempt that finished may have answered the call: look again.
        if !adoptions.poll(cx) {
            return Poll::Pending;
        }
    })
    .await;
    adoptions.release();
    out
}
