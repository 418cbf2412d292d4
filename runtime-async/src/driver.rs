//! The driver: the core's [`Pool`](switchyard_core::Pool) in a [`Hub`], with the
//! shared [`Engine`] beside it. An input runs under the lock and collects the
//! engine's effects; they are carried out once the lock is released (spawning
//! tasks, probing sockets, answering waiting calls, closing sockets), and their
//! results come back as new inputs. Listeners run outside the lock too.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use switchyard_common::engine::{self, Adapter, Closed, Effect, EngineHost, EngineState, Installed};
use switchyard_common::{AsyncResolve, Hub, HubState, Resolve, Resolved};
use switchyard_core::{
    AcquireError, CloseReason, ConnectError, ConnectionId, DnsAnswer, DnsError, Family, Instant, Protocol,
    QueryId, TlsFacts,
};
use tokio::sync::{oneshot, Notify};

use crate::h1::Wire;
use crate::h2::H2Handle;
use crate::runtime::{BoxFuture, Io, Runtime, Task};

/// An idle HTTP/1.1 connection: its socket and the core's view of it.
pub(crate) type H1Conn = engine::H1Conn<Wire>;
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
}

pub(crate) struct Shared {
    pub(crate) hub: Hub<IoState>,
    pub(crate) rt: Arc<dyn Runtime>,
    pub(crate) timer: Arc<Notify>,
    /// Woken after every input while someone waits on the pool's state
    /// ([`Shared::wait_for`]: the Manager's `ready` and `shutdown`).
    changed: Notify,
    /// How many wait in [`Shared::wait_for`]; no wake-ups are sent without one.
    watching: AtomicUsize,
    resolver: Arc<dyn Resolve>,
    /// Used instead of `resolver` when set.
    async_resolver: Option<Arc<dyn AsyncResolve>>,
    pub(crate) settings: Settings,
    /// This `Shared`, for tasks that must not keep the client alive.
    pub(crate) me: Weak<Shared>,
}

impl Adapter for Shared {
    type Socket = Io;
    type Wire = Wire;
    type Task = Box<dyn Task>;
    type H2 = H2Handle;
    type Job = (ConnectionId, BoxFuture<()>);
    type Waiter = oneshot::Sender<Result<Lease, AcquireError>>;
    type Local = TimerPlan;

    fn install(&self, connection: ConnectionId, protocol: Protocol, socket: Io) -> Option<Installed<Self>> {
        Some(match protocol {
            Protocol::Http1 => Installed::Http1(Box::new(H1Conn {
                wire: Wire::new(socket),
                conn: switchyard_core::http1::Conn::new(self.settings.driver),
            })),
            Protocol::Http2 | Protocol::H2PriorKnowledge => {
                let (handle, job) = crate::h2::prepare(self, socket, connection);
                Installed::Http2(handle, (connection, job))
            }
        })
    }

    fn lease_h2(&self, handle: &H2Handle, source: switchyard_core::Source) -> H2Handle {
        handle.leased(source)
    }
}

impl EngineHost for Shared {
    fn hub(&self) -> &Hub<IoState> {
        &self.hub
    }

    fn check(conn: &mut H1Conn) -> Result<(), CloseReason> {
        crate::h1::check(conn)
    }

    fn carry_out_one(self: &Arc<Self>, effect: Effect<Self>) {
        match effect {
            Effect::Resolve { query, name, port } => match &self.async_resolver {
                Some(resolver) if resolver.per_family() => {
                    // A and AAAA at once; each answer feeds the race as it comes.
                    for family in [Family::V6, Family::V4] {
                        let lookup = resolver.resolve_family(&name, port, family);
                        self.spawn_lookup(query, Box::pin(async move { answer(Some(family), lookup.await) }));
                    }
                }
                Some(resolver) => {
                    let lookup = resolver.resolve(&name, port);
                    self.spawn_lookup(query, Box::pin(async move { answer(None, lookup.await) }));
                }
                None => {
                    let resolver = Arc::clone(&self.resolver);
                    let lookup = self.rt.unblock(Box::new(move || resolver.resolve(&name, port)));
                    self.spawn_lookup(
                        query,
                        Box::pin(
                            async move { DnsAnswer::all(lookup.await.map_err(|e| DnsError::from_io(&e))) },
                        ),
                    );
                }
            },
            Effect::Connect { attempt, route } => {
                let connecting = self.rt.connect(route.socket_addr());
                let me = Arc::clone(self);
                let task = Box::pin(async move {
                    let result = connecting.await.map_err(|e| ConnectError::from_io(&e));
                    let stale =
                        me.input(|st, now| st.io.engine.handle_connected(&mut st.pool, now, attempt, result));
                    drop(stale); // a cancelled attempt's socket closes here
                });
                self.start_attempt(attempt, task);
            }
            Effect::Handshake { attempt, route, socket } => {
                // Built with the client: a lookup, nothing built here.
                let config = self.settings.tls.get(route.address().protocols());
                let verification = self.settings.tls.verification;
                let me = Arc::clone(self);
                let task = Box::pin(async move {
                    let tunnelled = || {
                        me.input(|st, now| st.io.engine.handle_tunnelled(&mut st.pool, now, attempt));
                    };
                    let result = establish(socket, &route, (config, verification), tunnelled).await;
                    let stale = me
                        .input(|st, now| st.io.engine.handle_established(&mut st.pool, now, attempt, result));
                    drop(stale);
                });
                self.start_attempt(attempt, task);
            }
            // Aborting the task drops its socket: the loser is closed at once.
            Effect::Abort(task) => task.abort(),
            Effect::Start((connection, job)) => {
                if self.rt.spawn(job).is_none() {
                    self.input(|st, now| {
                        let _ = st.pool.connection_closed(now, connection, CloseReason::Failure);
                    });
                }
            }
            Effect::Answer { call, waiter, answer } => {
                if let Err(Ok(lease)) = waiter.send(answer) {
                    self.give_back(call, lease);
                }
            }
            Effect::Ping { connection, handle } => crate::h2::ping(self, connection, &handle),
            Effect::End { handle, reason, .. } => crate::h2::end(&handle, reason),
            Effect::Probe { .. } => {} // judged in `carry_out`
            // Dropping the socket (or the HTTP/2 handle) closes it.
            Effect::Close(closed) => drop::<Closed<Self>>(closed),
        }
    }

    fn after_input(&self, st: &mut State) -> bool {
        if self.watching.load(Ordering::Relaxed) > 0 {
            self.changed.notify_waiters();
        }
        self.timer_needed(st)
    }

    fn after_unlock(&self) {
        self.timer.notify_one();
    }
}

/// A resolver's answer as the core takes it (an empty list is "no addresses"),
/// with its time to live.
fn answer(family: Option<Family>, answer: std::io::Result<Resolved>) -> DnsAnswer {
    match answer {
        Ok(Resolved { addresses, ttl }) => DnsAnswer { family, result: Ok(addresses), ttl },
        Err(e) => DnsAnswer { family, result: Err(DnsError::from_io(&e)), ttl: None },
    }
}

impl Shared {
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
            watching: AtomicUsize::new(0),
            resolver,
            async_resolver,
            settings,
            me: Weak::clone(me),
        })
    }

    /// Runs a lookup as a task and feeds its answer to the pool (a failure to
    /// spawn is a failed lookup, never a call left waiting).
    fn spawn_lookup(self: &Arc<Self>, query: QueryId, lookup: BoxFuture<DnsAnswer>) {
        let me = Arc::clone(self);
        let spawned = self.rt.spawn(Box::pin(async move {
            let answer = lookup.await;
            me.input(|st, now| {
                if let Err(misuse) = st.pool.handle_dns_answer(now, query, answer) {
                    tracing::warn!("{misuse}");
                }
            });
        }));
        if spawned.is_none() {
            self.input(|st, now| {
                let _ = st.pool.handle_dns(now, query, Err(DnsError::from_io(&no_executor())));
            });
        }
    }

    /// The core's notion of now.
    pub(crate) fn now(&self) -> Instant {
        self.hub.now()
    }

    /// Whether the timer task must be woken: it would sleep past the core's
    /// next deadline. Most inputs (a release pushing a keep-alive 90 s out)
    /// leave it asleep.
    fn timer_needed(&self, st: &mut State) -> bool {
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

    /// Spawns an attempt's task and tells the engine its handle (aborting it
    /// when the attempt was cancelled meanwhile); without an executor, the
    /// attempt fails.
    fn start_attempt(self: &Arc<Self>, attempt: switchyard_core::AttemptId, task: BoxFuture<()>) {
        match self.rt.spawn(task) {
            Some(task) => {
                if let Some(orphan) = self.attempt_running(attempt, task) {
                    orphan.abort();
                }
            }
            None => self.attempt_not_started(attempt, ConnectError::from_io(&no_executor())),
        }
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
        self.watching.fetch_add(1, Ordering::Relaxed);
        let _unwatch = Unwatch(&self.watching);
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

/// Ends one [`Shared::wait_for`]'s watch, however it returns.
struct Unwatch<'a>(&'a AtomicUsize);

impl Drop for Unwatch<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn no_executor() -> std::io::Error {
    std::io::Error::other("no async executor to run the connection on (call from inside the runtime)")
}

/// SOCKS5, `CONNECT` and TLS, as the route requires, on the race's winner;
/// `tunnelled` runs between a tunnel and TLS (the core's bound changes there).
async fn establish(
    io: Io,
    route: &switchyard_core::Route,
    (config, verification): (Arc<rustls::ClientConfig>, switchyard_common::tls::Verification),
    tunnelled: impl FnOnce(),
) -> Result<(Io, Option<Protocol>, Option<TlsFacts>), ConnectError> {
    let mut io = io;
    use switchyard_core::handshake::ProxyHandshake;
    // SOCKS5, or a CONNECT tunnel for an https origin, with the proxy's credentials.
    if let Some(hs) = ProxyHandshake::for_route(route)? {
        crate::h1::proxy_handshake(&mut io, hs).await?;
        if route.requires_tls() {
            tunnelled();
        }
    }
    if route.requires_tls() {
        use switchyard_common::tls;
        let name = tls::server_name(route.address().host())?;
        let stream = tokio_rustls::TlsConnector::from(config)
            .connect(name, io)
            .await
            .map_err(|e| tls::tls_error(&e))?;
        let direct = (*route.proxy() == switchyard_core::Proxy::Direct).then(|| route.socket_addr().ip());
        let (alpn, facts) = tls::negotiated(stream.get_ref().1, verification, direct);
        return Ok((Box::new(stream), alpn, Some(facts)));
    }
    Ok((io, None, None))
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
