//! The adapter's client state: the core's [`Pool`](switchyard_core::Pool) in a
//! [`Hub`], with the shared engine beside it, the runtime, the resolvers and
//! the settings the exchanges need; the timer task; waiting on the pool's
//! state. How the engine's effects are carried out (tasks spawned, sockets
//! connected and set up, answers delivered) is in [`crate::connect`]; the
//! exchanges are in [`crate::h1`] and [`crate::h2`].

use std::sync::{Arc, Weak};

use switchyard_common::engine::{self, EngineHost, EngineState};
use switchyard_common::{AsyncResolve, Hub, HubState, Resolve, Watchers};
use switchyard_core::Instant;
use tokio::sync::Notify;

use crate::runtime::Runtime;

/// A connection handed to a call for one exchange.
pub(crate) type Lease = engine::Lease<Shared>;

/// The engine's state beside the pool under the hub's lock.
pub(crate) type IoState = EngineState<Shared>;

/// The timer task's plan.
#[derive(Default)]
pub(crate) struct TimerPlan {
    /// The core instant the timer task sleeps until (`None`: indefinitely); an
    /// input wakes it only when the next deadline moves earlier than this.
    until: Option<Instant>,
}

pub(crate) type State = HubState<IoState>;

/// Timeouts and limits the exchange code needs.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) read_timeout: Option<std::time::Duration>,
    /// The HTTP/1.1 connection driver's timeouts and limits.
    pub(crate) driver: switchyard_core::http1::DriverConfig,
    pub(crate) limits: switchyard_core::http1::Limits,
    pub(crate) tls: switchyard_common::tls::TlsConfigs,
    /// HTTP/2 flow-control windows.
    pub(crate) http2: switchyard_common::Http2Settings,
    /// Socket options for TCP connects (default: the runtime's plain connect).
    pub(crate) tcp: Option<switchyard_common::transport::TcpOptions>,
    /// The embedder's connector hook, instead of TCP.
    pub(crate) connector: Option<crate::ConnectorSlot>,
}

pub(crate) struct Shared {
    pub(crate) hub: Hub<IoState>,
    pub(crate) rt: Arc<dyn Runtime>,
    pub(crate) timer: Arc<Notify>,
    /// Woken after every input while someone waits on the pool's state
    /// ([`Shared::wait_for`]: the Manager's `ready` and `shutdown`).
    pub(crate) changed: Notify,
    /// How many wait in [`Shared::wait_for`]; no wake-ups are sent without one.
    pub(crate) watching: Watchers,
    pub(crate) resolver: Arc<dyn Resolve>,
    /// Used instead of `resolver` when set.
    pub(crate) async_resolver: Option<Arc<dyn AsyncResolve>>,
    pub(crate) settings: Settings,
    /// This `Shared`, for tasks that must not keep the client alive.
    pub(crate) me: Weak<Shared>,
}

impl Shared {
    /// A call's exchange on a multiplexed connection ended (`reuse`: whether
    /// the connection may carry more): the pool hears it.
    pub(crate) fn exchange_finished(
        self: &Arc<Self>,
        call: switchyard_core::CallId,
        reuse: switchyard_core::Reuse,
    ) {
        switchyard_common::engine::EngineHost::input(self, |st, now| {
            let _ = st.pool.exchange_finished(now, call, reuse);
        });
    }

    pub(crate) fn new(
        hub: Hub<IoState>,
        rt: Arc<dyn Runtime>,
        resolver: Arc<dyn Resolve>,
        async_resolver: Option<Arc<dyn AsyncResolve>>,
        settings: Settings,
    ) -> Arc<Shared> {
        Arc::new_cyclic(|me| Shared {
            hub,
            rt,
            timer: Arc::new(Notify::new()),
            changed: Notify::new(),
            watching: Watchers::default(),
            resolver,
            async_resolver,
            settings,
            me: Weak::clone(me),
        })
    }

    /// The core's notion of now.
    pub(crate) fn now(&self) -> Instant {
        self.hub.now()
    }

    /// Whether the timer task must be woken: it would sleep past the core's
    /// next deadline. Most inputs (a release pushing a keep-alive 90 s out)
    /// leave it asleep.
    pub(crate) fn timer_needed(&self, st: &mut State) -> bool {
        let Some(wanted) = st.pool.poll_timeout() else { return false };
        if st.io.local.until.is_none_or(|sleeping| wanted < sleeping) {
            st.io.local.until = Some(wanted);
            return true;
        }
        false
    }

    pub(crate) fn emit(&self, note: impl FnOnce(&dyn switchyard_common::EventListener) + Send + 'static) {
        self.hub.emit(note);
    }

    pub(crate) fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        self.hub.lock()
    }

    /// Waits until `done` holds for the pool's state, or `deadline` passes
    /// (`false`). Looks again after every input — the pool's state changes
    /// only in one — instead of polling on a timer.
    pub(crate) async fn wait_for(
        &self,
        deadline: std::time::Instant,
        mut done: impl FnMut(&State, Instant) -> bool,
    ) -> bool {
        let _watch = self.watching.watch();
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the state is read: a change made after the
            // read wakes it.
            changed.as_mut().enable();
            let holds = {
                let st = self.hub.lock();
                done(&st, self.hub.now())
            };
            if holds {
                return true;
            }
            if crate::runtime::until(&*self.rt, deadline, changed).await.is_none() {
                let st = self.hub.lock();
                return done(&st, self.hub.now());
            }
        }
    }
}

/// Runs the core's timers: sleeps until the next deadline, is woken early only
/// when an input moves that earlier, and ends when the client is dropped.
pub(crate) async fn timer_task(
    shared: Weak<Shared>,
    notify: Arc<Notify>,
    closed: Arc<std::sync::atomic::AtomicBool>,
) {
    use std::sync::atomic::Ordering;
    loop {
        if closed.load(Ordering::Acquire) {
            return;
        }
        let plan = {
            let Some(me) = shared.upgrade() else { return };
            let mut st = me.hub.lock();
            let wake = st.pool.poll_timeout();
            st.io.local.until = wake;
            wake.map(|at| (me.hub.to_std(at), Arc::clone(&me.rt)))
        };
        match plan {
            Some((at, rt)) => {
                tokio::select! {
                    () = rt.sleep_until(at) => {
                        let Some(me) = shared.upgrade() else { return };
                        me.input(|st, now| st.pool.handle_timeout(now));
                    }
                    () = notify.notified() => {}
                }
            }
            None => notify.notified().await,
        }
    }
}
