//! The driver: owns the core's [`Pool`] behind a mutex, feeds it inputs with the
//! current time, performs every action it asks for with tokio, and reports the
//! results back. The lock is never held across an `.await`; listeners run after
//! it is released.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use switchyard_common::{Hub, HubState, Resolve};
use switchyard_core::{
    AcquireError, AttemptId, CallId, CloseReason, ConnectError, ConnectionId, DnsError, Host, Instant,
    PoolAction, Protocol, Reuse, TlsFacts,
};
use tokio::sync::{oneshot, Notify};

use crate::h1::H1Conn;
use crate::h2::H2Handle;
use crate::runtime::{Io, Runtime, Task};

/// A connection handed to a call for one exchange.
pub(crate) enum Lease {
    /// `conn` is `None` when its socket is already gone: the exchange fails
    /// before writing and the core retries elsewhere.
    H1 {
        connection: ConnectionId,
        conn: Option<H1Conn>,
    },
    H2 {
        connection: ConnectionId,
        handle: H2Handle,
    },
}

/// How often idle HTTP/1.1 connections are probed, so a server's close is
/// seen (and counted) while they sit in the pool, not only at the next reuse.
pub(crate) const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

enum Attempt {
    /// Connecting or handshaking; aborting the task closes the socket.
    Running(Box<dyn Task>),
    /// Connected (or handshaken): waiting for the core's next word.
    Ready(Io),
}

enum Conn {
    H1Idle(H1Conn),
    H1Busy,
    H2(H2Handle),
}

/// The engine's I/O state, beside the pool under the hub's lock.
#[derive(Default)]
pub(crate) struct IoState {
    pub(crate) waiters: HashMap<CallId, oneshot::Sender<Result<Lease, AcquireError>>>,
    attempts: HashMap<AttemptId, Attempt>,
    conns: HashMap<ConnectionId, Conn>,
    /// Idle HTTP/1.1 connections (the timer task sweeps while there are any).
    idle_h1: usize,
    /// The core instant the timer task sleeps until (`None`: indefinitely); an
    /// input wakes it only when the next deadline moves earlier than this.
    timer_until: Option<Instant>,
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
    /// Also bounds how long a new HTTP/2 connection may take to become usable.
    pub(crate) handshake_timeout: std::time::Duration,
}

pub(crate) struct Shared {
    pub(crate) hub: Hub<IoState>,
    pub(crate) rt: Arc<dyn Runtime>,
    pub(crate) timer: Arc<Notify>,
    resolver: Arc<dyn Resolve>,
    pub(crate) settings: Settings,
}

impl Shared {
    pub(crate) fn new(
        hub: Hub<IoState>,
        rt: Arc<dyn Runtime>,
        resolver: Arc<dyn Resolve>,
        settings: Settings,
    ) -> Arc<Shared> {
        Arc::new(Shared { hub, rt, timer: Arc::new(Notify::new()), resolver, settings })
    }

    /// The core's notion of now.
    pub(crate) fn now(&self) -> Instant {
        self.hub.now()
    }

    /// Runs `f` on the state with the current time, performs every action the
    /// core emitted, wakes the timer task (the next deadline may have moved), then
    /// delivers events.
    pub(crate) fn input<R>(self: &Arc<Self>, f: impl FnOnce(&mut State, Instant) -> R) -> R {
        let mut wake = false;
        let result = self.hub.input_then(
            f,
            |st, now, action| self.perform(st, now, action),
            |st, _| wake = self.timer_needed(st),
        );
        if wake {
            self.timer.notify_one();
        }
        result
    }

    /// When the timer task should next wake: the core's next deadline, or the
    /// next sweep while idle HTTP/1.1 connections exist.
    fn wake_at(&self, st: &State) -> Option<Instant> {
        let sweep = (st.io.idle_h1 > 0).then(|| self.now() + SWEEP_EVERY);
        match (st.pool.poll_timeout(), sweep) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether the timer task must be woken: it would sleep past when it is
    /// next needed. Most inputs (a release pushing a keep-alive 90 s out) leave
    /// it asleep.
    fn timer_needed(&self, st: &mut State) -> bool {
        let Some(wanted) = self.wake_at(st) else { return false };
        if st.io.timer_until.is_none_or(|sleeping| wanted < sleeping) {
            st.io.timer_until = Some(wanted);
            return true;
        }
        false
    }

    /// Probes every idle HTTP/1.1 connection; tells the core of the dead ones.
    fn sweep(self: &Arc<Self>) {
        self.input(|st, now| {
            let mut dead = Vec::new();
            for (id, conn) in &mut st.io.conns {
                if let Conn::H1Idle(c) = conn {
                    if let Err(reason) = c.check() {
                        dead.push((*id, reason));
                    }
                }
            }
            dead.sort_by_key(|(id, _)| *id); // report in a stable order
            for (id, reason) in dead {
                st.io.conns.remove(&id);
                st.io.idle_h1 -= 1;
                let _ = st.pool.connection_closed(now, id, reason);
            }
        });
    }

    pub(crate) fn emit(&self, note: impl FnOnce(&dyn switchyard_common::EventListener) + Send + 'static) {
        self.hub.emit(note);
    }

    /// Spawns `task`; without an executor, `or_else` reports the failure instead.
    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) -> Option<Box<dyn Task>> {
        self.rt.spawn(Box::pin(task))
    }

    fn perform(self: &Arc<Self>, st: &mut State, now: Instant, action: PoolAction) {
        match action {
            PoolAction::Resolve { query, host, port, .. } => {
                let name = match &host {
                    Host::Domain(d) => d.clone(),
                    Host::Ip(ip) => ip.to_string(),
                };
                let resolver = Arc::clone(&self.resolver);
                let lookup = self.rt.unblock(Box::new(move || resolver.resolve(&name, port)));
                let me = Arc::clone(self);
                let spawned = self.spawn(async move {
                    let answer = lookup.await.map_err(|e| DnsError::from_io(&e));
                    me.input(|st, now| {
                        if let Err(misuse) = st.pool.handle_dns(now, query, answer) {
                            tracing::warn!("{misuse}");
                        }
                    });
                });
                if spawned.is_none() {
                    let _ = st.pool.handle_dns(now, query, Err(DnsError::from_io(&no_executor())));
                }
            }
            PoolAction::Connect { attempt, route } => {
                let addr = route.socket_addr();
                let me = Arc::clone(self);
                let connecting = self.rt.connect(addr);
                let task = self.spawn(async move {
                    let result = connecting.await;
                    me.input(|st, now| {
                        // Cancelled attempts were removed: their result is dropped here.
                        if !matches!(st.io.attempts.get(&attempt), Some(Attempt::Running(_))) {
                            return;
                        }
                        let outcome = match result {
                            Ok(io) => {
                                st.io.attempts.insert(attempt, Attempt::Ready(io));
                                st.pool.handle_connected(now, attempt)
                            }
                            Err(e) => {
                                st.io.attempts.remove(&attempt);
                                st.pool.handle_failed(now, attempt, ConnectError::from_io(&e))
                            }
                        };
                        if let Err(misuse) = outcome {
                            tracing::warn!("{misuse}");
                        }
                    });
                });
                match task {
                    Some(task) => {
                        st.io.attempts.insert(attempt, Attempt::Running(task));
                    }
                    None => {
                        let _ = st.pool.handle_failed(now, attempt, ConnectError::from_io(&no_executor()));
                    }
                }
            }
            PoolAction::Handshake { attempt, route } => {
                let Some(Attempt::Ready(io)) = st.io.attempts.remove(&attempt) else {
                    tracing::warn!("handshake for {attempt} without a socket");
                    return;
                };
                // Built with the client: a lookup, nothing built under the lock.
                let config = self.settings.tls.get(route.address().protocols());
                let me = Arc::clone(self);
                let task = self.spawn(async move {
                    let result = establish(io, &route, config).await;
                    me.input(|st, now| {
                        if !matches!(st.io.attempts.get(&attempt), Some(Attempt::Running(_))) {
                            return;
                        }
                        let outcome = match result {
                            Ok((io, alpn, facts)) => {
                                st.io.attempts.insert(attempt, Attempt::Ready(io));
                                st.pool.handle_established(now, attempt, alpn, facts)
                            }
                            Err(e) => {
                                st.io.attempts.remove(&attempt);
                                st.pool.handle_failed(now, attempt, e)
                            }
                        };
                        if let Err(misuse) = outcome {
                            tracing::warn!("{misuse}");
                        }
                    });
                });
                match task {
                    Some(task) => {
                        st.io.attempts.insert(attempt, Attempt::Running(task));
                    }
                    None => {
                        let _ = st.pool.handle_failed(now, attempt, ConnectError::from_io(&no_executor()));
                    }
                }
            }
            PoolAction::CancelAttempt { attempt } => {
                // Aborting the task drops its socket: the loser is closed at once.
                if let Some(Attempt::Running(task)) = st.io.attempts.remove(&attempt) {
                    task.abort();
                }
            }
            PoolAction::Established { attempt, connection, protocol } => {
                let Some(Attempt::Ready(io)) = st.io.attempts.remove(&attempt) else {
                    tracing::warn!("{connection} established without a socket");
                    return;
                };
                let conn = match protocol {
                    Protocol::Http1 => {
                        st.io.idle_h1 += 1;
                        let conn = switchyard_core::http1::Conn::new(self.settings.driver);
                        Conn::H1Idle(H1Conn { io, conn })
                    }
                    Protocol::Http2 | Protocol::H2PriorKnowledge => {
                        match crate::h2::start(self, io, connection) {
                            Some(handle) => Conn::H2(handle),
                            None => {
                                let _ = st.pool.connection_closed(now, connection, CloseReason::Failure);
                                return;
                            }
                        }
                    }
                };
                st.io.conns.insert(connection, conn);
            }
            PoolAction::Acquired { call, connection, .. } => {
                let lease = match st.io.conns.get_mut(&connection) {
                    Some(Conn::H2(handle)) => Lease::H2 { connection, handle: handle.clone() },
                    Some(slot @ Conn::H1Idle(_)) => {
                        let Conn::H1Idle(c) = std::mem::replace(slot, Conn::H1Busy) else {
                            unreachable!("matched above")
                        };
                        st.io.idle_h1 -= 1;
                        Lease::H1 { connection, conn: Some(c) }
                    }
                    Some(Conn::H1Busy) | None => {
                        // The socket is gone (closed by the peer as it was handed out):
                        // the call's exchange fails before writing and is retried.
                        tracing::debug!("{connection} handed out without a socket");
                        Lease::H1 { connection, conn: None }
                    }
                };
                match st.io.waiters.remove(&call) {
                    Some(tx) => {
                        if let Err(Ok(lease)) = tx.send(Ok(lease)) {
                            self.give_back(st, now, call, lease);
                        }
                    }
                    None => self.give_back(st, now, call, lease),
                }
            }
            PoolAction::AcquireFailed { call, error } => {
                if let Some(tx) = st.io.waiters.remove(&call) {
                    let _ = tx.send(Err(error));
                }
            }
            PoolAction::Close { connection, .. } => {
                // Dropping the socket (or the HTTP/2 handle) closes it.
                if let Some(Conn::H1Idle(_)) = st.io.conns.remove(&connection) {
                    st.io.idle_h1 -= 1;
                }
            }
        }
    }

    /// A lease nobody took (the call went away): return the connection unused.
    fn give_back(self: &Arc<Self>, st: &mut State, now: Instant, call: CallId, lease: Lease) {
        if let Lease::H1 { connection, conn: Some(c) } = lease {
            st.io.conns.insert(connection, Conn::H1Idle(c));
            st.io.idle_h1 += 1;
        }
        let _ = st.pool.exchange_finished(now, call, Reuse::Reusable);
    }

    /// An HTTP/1.1 exchange ended: keep the socket idle if the connection may
    /// carry another (probed before its next use, and swept meanwhile), or
    /// close it for the driver's reason; then tell the core.
    pub(crate) fn release_h1(
        self: &Arc<Self>,
        call: CallId,
        connection: ConnectionId,
        outcome: Result<H1Conn, CloseReason>,
    ) {
        self.input(|st, now| {
            let reuse = match outcome {
                Ok(conn) if st.io.conns.contains_key(&connection) => {
                    st.io.conns.insert(connection, Conn::H1Idle(conn));
                    st.io.idle_h1 += 1;
                    Reuse::Reusable
                }
                Ok(_) => {
                    st.io.conns.remove(&connection);
                    Reuse::Reusable
                }
                Err(reason) => {
                    st.io.conns.remove(&connection);
                    Reuse::Retire(reason)
                }
            };
            if let Err(misuse) = st.pool.exchange_finished(now, call, reuse) {
                tracing::warn!("{misuse}");
            }
        });
    }

    pub(crate) fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        self.hub.lock()
    }
}

fn no_executor() -> std::io::Error {
    std::io::Error::other("no async executor to run the connection on (call from inside the runtime)")
}

/// SOCKS5, `CONNECT` and TLS, as the route requires, on the race's winner.
async fn establish(
    io: Io,
    route: &switchyard_core::Route,
    config: Arc<rustls::ClientConfig>,
) -> Result<(Io, Option<Protocol>, Option<TlsFacts>), ConnectError> {
    let mut io = io;
    use switchyard_core::handshake::ProxyHandshake;
    if route.requires_socks5() {
        crate::h1::proxy_handshake(&mut io, ProxyHandshake::socks5(route.address())?).await?;
    }
    if route.requires_tunnel() {
        crate::h1::proxy_handshake(&mut io, ProxyHandshake::connect_tunnel(route.address())?).await?;
    }
    if route.requires_tls() {
        use switchyard_common::tls;
        let name = tls::server_name(route.address().host())?;
        let stream = tokio_rustls::TlsConnector::from(config)
            .connect(name, io)
            .await
            .map_err(|e| tls::tls_error(&e))?;
        let (alpn, facts) = tls::negotiated(stream.get_ref().1);
        return Ok((Box::new(stream), alpn, Some(facts)));
    }
    Ok((io, None, None))
}

/// Runs the core's timers and the idle sweep: sleeps until the next deadline
/// (or sweep), is woken early only when an input moves that earlier, and ends
/// when the client is dropped.
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
            let wake = me.wake_at(&st);
            st.io.timer_until = wake;
            wake.map(|at| (me.hub.to_std(at), Arc::clone(&me.rt)))
        };
        match plan {
            Some((at, rt)) => {
                tokio::select! {
                    () = rt.sleep_until(at) => {
                        let Some(me) = shared.upgrade() else { return };
                        me.input(|st, now| st.pool.handle_timeout(now));
                        let sweep_due = me.hub.lock().io.idle_h1 > 0;
                        if sweep_due {
                            me.sweep();
                        }
                    }
                    () = notify.notified() => {}
                }
            }
            None => notify.notified().await,
        }
    }
}
