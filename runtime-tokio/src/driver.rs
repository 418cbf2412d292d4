//! The driver: owns the core's [`Pool`] behind a mutex, feeds it inputs with the
//! current time, performs every action it asks for with tokio, and reports the
//! results back. The lock is never held across an `.await`; listeners run after
//! it is released.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use bytes::BytesMut;
use switchyard_core::{
    AcquireError, AttemptId, CallId, CloseReason, ConnectError, ConnectionId, DnsError, Host, Instant, Pool,
    PoolAction, Protocol, Reuse, TlsFacts,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify};
use tokio::task::AbortHandle;

use crate::event::EventListener;
use crate::h2::H2Handle;
use crate::resolve::Resolve;
use crate::tls;

/// Any bidirectional byte stream (TCP or TLS over TCP).
pub(crate) trait AsyncIo: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> AsyncIo for T {}
pub(crate) type Io = Box<dyn AsyncIo>;

/// An HTTP/1.1 connection's socket and its read buffer (bytes read past one
/// response stay with the connection).
pub(crate) struct H1Conn {
    pub(crate) io: Io,
    pub(crate) buf: BytesMut,
}

/// How a call gets its HTTP/1.1 connection's socket.
pub(crate) enum H1Source {
    /// Fresh from the race.
    Ready(H1Conn),
    /// From the idle watcher, which hands it back when asked (or `None` if the
    /// server closed it meanwhile).
    Watched(oneshot::Sender<()>, oneshot::Receiver<H1Conn>),
}

/// A connection handed to a call for one exchange.
pub(crate) enum Lease {
    H1 { connection: ConnectionId, source: H1Source },
    H2 { connection: ConnectionId, handle: H2Handle },
}

enum Attempt {
    /// Connecting or handshaking; aborting the task closes the socket.
    Running(AbortHandle),
    /// Connected (or handshaken): waiting for the core's next word.
    Ready(Io),
}

enum Conn {
    H1Idle(H1Conn),
    H1Watched { stop: oneshot::Sender<()>, back: oneshot::Receiver<H1Conn> },
    H1Busy,
    H2(H2Handle),
}

/// A listener call, queued so every listener sees events in the order they
/// happened, whichever thread made them happen.
pub(crate) type Note = Box<dyn FnOnce(&dyn EventListener) + Send>;

pub(crate) struct State {
    pub(crate) pool: Pool,
    notes: std::collections::VecDeque<Note>,
    delivering: bool,
    pub(crate) waiters: HashMap<CallId, oneshot::Sender<Result<Lease, AcquireError>>>,
    attempts: HashMap<AttemptId, Attempt>,
    conns: HashMap<ConnectionId, Conn>,
    tls_config: HashMap<Vec<Protocol>, Arc<rustls::ClientConfig>>,
}

/// Timeouts and limits the exchange code needs.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) read_timeout: Option<std::time::Duration>,
    pub(crate) write_timeout: Option<std::time::Duration>,
    pub(crate) expect_continue_timeout: std::time::Duration,
    pub(crate) limits: switchyard_core::http1::Limits,
    pub(crate) tls: tls::TlsSettings,
}

pub(crate) struct Shared {
    state: Mutex<State>,
    pub(crate) timer: Arc<Notify>,
    origin: std::time::Instant,
    pub(crate) listener: Arc<dyn EventListener>,
    /// Whether anyone listens (a listener was configured): when not, and tracing
    /// is off, events are dropped without building notes for them.
    listening: bool,
    resolver: Arc<dyn Resolve>,
    pub(crate) settings: Settings,
}

impl Shared {
    pub(crate) fn new(
        pool: Pool,
        listener: Option<Arc<dyn EventListener>>,
        resolver: Arc<dyn Resolve>,
        settings: Settings,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            state: Mutex::new(State {
                pool,
                notes: std::collections::VecDeque::new(),
                delivering: false,
                waiters: HashMap::new(),
                attempts: HashMap::new(),
                conns: HashMap::new(),
                tls_config: HashMap::new(),
            }),
            timer: Arc::new(Notify::new()),
            origin: std::time::Instant::now(),
            listening: listener.is_some(),
            listener: listener.unwrap_or_else(|| Arc::new(crate::event::NoopListener)),
            resolver,
            settings,
        })
    }

    /// The core's notion of now: time since this client started.
    pub(crate) fn now(&self) -> Instant {
        Instant::from_elapsed(self.origin.elapsed())
    }

    pub(crate) fn deadline_to_tokio(&self, at: Instant) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.origin + at.elapsed_since_origin())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock must not wedge every call: the
        // pool's own state is consistent between inputs.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `f` on the state with the current time, performs every action the
    /// core emitted, then delivers its events (and anything `f` queued first).
    pub(crate) fn input<R>(self: &Arc<Self>, f: impl FnOnce(&mut State, Instant) -> R) -> R {
        let now = self.now();
        let mut st = self.lock();
        let result = f(&mut st, now);
        self.drain(&mut st, now);
        let wanted = self.wants_events();
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
        self.timer.notify_one();
        self.deliver(st);
        result
    }

    /// Queues one listener call and delivers it in order.
    fn wants_events(&self) -> bool {
        self.listening || tracing::enabled!(tracing::Level::DEBUG)
    }

    pub(crate) fn emit(&self, note: impl FnOnce(&dyn EventListener) + Send + 'static) {
        if !self.listening {
            return;
        }
        let mut st = self.lock();
        st.notes.push_back(Box::new(note));
        self.deliver(st);
    }

    /// Delivers queued notes outside the lock. One thread delivers at a time, in
    /// queue order; others only queue. A listener that panics loses that one
    /// call, nothing else; a listener may call back into the client.
    fn deliver<'a>(&'a self, mut st: MutexGuard<'a, State>) {
        if st.delivering {
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

    pub(crate) fn queue_note(&self, st: &mut State, note: impl FnOnce(&dyn EventListener) + Send + 'static) {
        if self.listening {
            st.notes.push_back(Box::new(note));
        }
    }

    fn drain(self: &Arc<Self>, st: &mut State, now: Instant) {
        while let Some(action) = st.pool.poll_action() {
            self.perform(st, now, action);
        }
    }

    fn perform(self: &Arc<Self>, st: &mut State, now: Instant, action: PoolAction) {
        match action {
            PoolAction::Resolve { query, host, port, .. } => {
                let name = match &host {
                    Host::Domain(d) => d.clone(),
                    Host::Ip(ip) => ip.to_string(),
                };
                let lookup = self.resolver.resolve(&name, port);
                let me = Arc::clone(self);
                tokio::spawn(async move {
                    let answer = lookup.await.map_err(|e| DnsError::from_io(&e));
                    me.input(|st, now| {
                        if let Err(misuse) = st.pool.handle_dns(now, query, answer) {
                            tracing::warn!("{misuse}");
                        }
                    });
                });
            }
            PoolAction::Connect { attempt, route } => {
                let addr = route.socket_addr();
                let me = Arc::clone(self);
                let task = tokio::spawn(async move {
                    let result = match TcpStream::connect(addr).await {
                        Ok(s) => s.set_nodelay(true).map(|()| s),
                        Err(e) => Err(e),
                    };
                    me.input(|st, now| {
                        // Cancelled attempts were removed: their result is dropped here.
                        if !matches!(st.attempts.get(&attempt), Some(Attempt::Running(_))) {
                            return;
                        }
                        let outcome = match result {
                            Ok(s) => {
                                st.attempts.insert(attempt, Attempt::Ready(tls::boxed(s)));
                                st.pool.handle_connected(now, attempt)
                            }
                            Err(e) => {
                                st.attempts.remove(&attempt);
                                st.pool.handle_failed(now, attempt, ConnectError::from_io(&e))
                            }
                        };
                        if let Err(misuse) = outcome {
                            tracing::warn!("{misuse}");
                        }
                    });
                });
                st.attempts.insert(attempt, Attempt::Running(task.abort_handle()));
            }
            PoolAction::Handshake { attempt, route } => {
                let Some(Attempt::Ready(io)) = st.attempts.remove(&attempt) else {
                    tracing::warn!("handshake for {attempt} without a socket");
                    return;
                };
                let protocols = route.address().protocols().to_vec();
                let config = match self.tls_config(st, &protocols) {
                    Ok(c) => c,
                    Err(e) => {
                        let error =
                            ConnectError::Tls { kind: switchyard_core::TlsFailure::Protocol, message: e };
                        let _ = st.pool.handle_failed(now, attempt, error);
                        return;
                    }
                };
                let me = Arc::clone(self);
                let task = tokio::spawn(async move {
                    let result = establish(io, &route, config).await;
                    me.input(|st, now| {
                        if !matches!(st.attempts.get(&attempt), Some(Attempt::Running(_))) {
                            return;
                        }
                        let outcome = match result {
                            Ok((io, alpn, facts)) => {
                                st.attempts.insert(attempt, Attempt::Ready(io));
                                st.pool.handle_established(now, attempt, alpn, facts)
                            }
                            Err(e) => {
                                st.attempts.remove(&attempt);
                                st.pool.handle_failed(now, attempt, e)
                            }
                        };
                        if let Err(misuse) = outcome {
                            tracing::warn!("{misuse}");
                        }
                    });
                });
                st.attempts.insert(attempt, Attempt::Running(task.abort_handle()));
            }
            PoolAction::CancelAttempt { attempt } => {
                // Aborting the task drops its socket: the loser is closed at once.
                if let Some(Attempt::Running(task)) = st.attempts.remove(&attempt) {
                    task.abort();
                }
            }
            PoolAction::Established { attempt, connection, protocol } => {
                let Some(Attempt::Ready(io)) = st.attempts.remove(&attempt) else {
                    tracing::warn!("{connection} established without a socket");
                    return;
                };
                let conn = match protocol {
                    Protocol::Http1 => Conn::H1Idle(H1Conn { io, buf: BytesMut::with_capacity(8 * 1024) }),
                    Protocol::Http2 | Protocol::H2PriorKnowledge => {
                        Conn::H2(crate::h2::start(io, Arc::downgrade(self), connection))
                    }
                };
                st.conns.insert(connection, conn);
            }
            PoolAction::Acquired { call, connection, .. } => {
                let lease = match st.conns.get_mut(&connection) {
                    Some(Conn::H2(handle)) => Lease::H2 { connection, handle: handle.clone() },
                    Some(slot @ (Conn::H1Idle(_) | Conn::H1Watched { .. })) => {
                        let source_io = match std::mem::replace(slot, Conn::H1Busy) {
                            Conn::H1Idle(c) => H1Source::Ready(c),
                            Conn::H1Watched { stop, back } => H1Source::Watched(stop, back),
                            _ => unreachable!("matched above"),
                        };
                        Lease::H1 { connection, source: source_io }
                    }
                    Some(Conn::H1Busy) | None => {
                        // The socket is gone (closed by the peer as it was handed out):
                        // the call's exchange fails before writing and is retried.
                        tracing::debug!("{connection} handed out without a socket");
                        let (stop, _) = oneshot::channel();
                        let (_, back) = oneshot::channel();
                        Lease::H1 { connection, source: H1Source::Watched(stop, back) }
                    }
                };
                match st.waiters.remove(&call) {
                    Some(tx) => {
                        if let Err(Ok(lease)) = tx.send(Ok(lease)) {
                            self.give_back(st, now, call, lease);
                        }
                    }
                    None => self.give_back(st, now, call, lease),
                }
            }
            PoolAction::AcquireFailed { call, error } => {
                if let Some(tx) = st.waiters.remove(&call) {
                    let _ = tx.send(Err(error));
                }
            }
            PoolAction::Close { connection, .. } => {
                // Dropping the socket (or the watcher's stop signal, or the HTTP/2
                // handle) closes it.
                st.conns.remove(&connection);
            }
        }
    }

    /// A lease nobody took (the call went away): return the connection unused.
    fn give_back(self: &Arc<Self>, st: &mut State, now: Instant, call: CallId, lease: Lease) {
        match lease {
            Lease::H1 { connection, source: H1Source::Ready(c), .. } => {
                st.conns.insert(connection, Conn::H1Idle(c));
            }
            Lease::H1 { connection, source: H1Source::Watched(stop, back), .. } => {
                st.conns.insert(connection, Conn::H1Watched { stop, back });
            }
            Lease::H2 { .. } => {}
        }
        let _ = st.pool.exchange_finished(now, call, Reuse::Reusable);
    }

    fn tls_config(
        &self,
        st: &mut State,
        protocols: &[Protocol],
    ) -> Result<Arc<rustls::ClientConfig>, String> {
        if let Some(c) = st.tls_config.get(protocols) {
            return Ok(c.clone());
        }
        let c = tls::client_config(&self.settings.tls, protocols)?;
        st.tls_config.insert(protocols.to_vec(), c.clone());
        Ok(c)
    }

    /// An HTTP/1.1 exchange ended: keep the socket (watched while idle) if the
    /// connection is reusable, then tell the core.
    pub(crate) fn release_h1(
        self: &Arc<Self>,
        call: CallId,
        connection: ConnectionId,
        conn: H1Conn,
        reuse: Reuse,
    ) {
        self.input(|st, now| {
            if reuse == Reuse::Reusable && st.conns.contains_key(&connection) {
                let (stop_tx, stop_rx) = oneshot::channel();
                let (back_tx, back_rx) = oneshot::channel();
                tokio::spawn(watch_idle(Arc::downgrade(self), connection, conn, stop_rx, back_tx));
                st.conns.insert(connection, Conn::H1Watched { stop: stop_tx, back: back_rx });
            } else {
                st.conns.remove(&connection);
            }
            if let Err(misuse) = st.pool.exchange_finished(now, call, reuse) {
                tracing::warn!("{misuse}");
            }
        });
    }

    pub(crate) fn lock_state(&self) -> MutexGuard<'_, State> {
        self.lock()
    }
}

/// SOCKS5, `CONNECT` and TLS, as the route requires, on the race's winner.
async fn establish(
    io: Io,
    route: &switchyard_core::Route,
    config: Arc<rustls::ClientConfig>,
) -> Result<(Io, Option<Protocol>, Option<TlsFacts>), ConnectError> {
    let mut io = io;
    if route.requires_socks5() {
        io = crate::socks::connect(io, route.address()).await?;
    }
    if route.requires_tunnel() {
        io = crate::h1::connect_tunnel(io, route.address()).await?;
    }
    if route.requires_tls() {
        let (stream, alpn, facts) = tls::handshake(config, route.address().host(), io).await?;
        return Ok((Box::new(stream), alpn, Some(facts)));
    }
    Ok((io, None, None))
}

/// Watches an idle HTTP/1.1 connection: if the server closes it (or sends bytes
/// nobody asked for), the core hears of it before the connection is reused.
async fn watch_idle(
    shared: Weak<Shared>,
    connection: ConnectionId,
    mut conn: H1Conn,
    stop: oneshot::Receiver<()>,
    back: oneshot::Sender<H1Conn>,
) {
    tokio::select! {
        biased;
        handed_out = stop => {
            if handed_out.is_ok() {
                let _ = back.send(conn);
            }
        }
        read = conn.io.read_buf(&mut conn.buf) => {
            let reason = match read {
                Ok(0) => CloseReason::ServerClose,
                _ => CloseReason::Unhealthy,
            };
            drop(conn);
            if let Some(shared) = shared.upgrade() {
                shared.input(|st, now| {
                    if matches!(st.conns.get(&connection), Some(Conn::H1Watched { .. })) {
                        st.conns.remove(&connection);
                        let _ = st.pool.connection_closed(now, connection, reason);
                    }
                });
            }
        }
    }
}

/// Runs the core's timers: sleeps until `poll_timeout()`, wakes early when an
/// input may have moved it, and ends when the client is dropped.
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
        let deadline = {
            let Some(me) = shared.upgrade() else { return };
            let d = me.lock().pool.poll_timeout();
            d.map(|d| me.deadline_to_tokio(d))
        };
        match deadline {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {
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
