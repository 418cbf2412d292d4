//! The driver: the core's [`Pool`](switchyard_core::Pool) in a [`Hub`], with the
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

use std::convert::Infallible;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, PoisonError, Weak};
use std::time::Duration;

use switchyard_common::engine::{self, Adapter, Closed, Effect, EngineHost, EngineState, Installed};
use switchyard_common::{Hub, HubState, Resolve};
use switchyard_core::{
    AcquireError, CallId, CloseReason, ConnectError, ConnectionId, DnsError, Instant, Protocol, TlsFacts,
};

use crate::h1::Wire;
use crate::stream::{peek, Stream};

/// An idle HTTP/1.1 connection: its socket and the core's view of it.
pub(crate) type H1Conn = engine::H1Conn<Wire>;
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
}

pub(crate) struct Shared {
    pub(crate) hub: Hub<IoState>,
    resolver: Arc<dyn Resolve>,
    pub(crate) settings: Settings,
    /// Threads for DNS queries, connects and handshakes, reused.
    workers: crate::workers::Workers,
    /// Wakes the Manager's clock thread when the core's next deadline moves
    /// earlier than it planned ([`keep_clock`]).
    clock: Condvar,
    /// Woken after every input while someone waits on the pool's state
    /// ([`Shared::wait_for`]: the Manager's `ready` and `shutdown`).
    changed: Condvar,
    /// How many wait in [`Shared::wait_for`]; no wake-ups are sent without one.
    watching: AtomicUsize,
}

/// Fires the core's timers if one is due.
fn fire_due(st: &mut State, now: Instant) {
    if st.pool.poll_timeout().is_some_and(|t| t <= now) {
        st.pool.handle_timeout(now);
    }
}

impl Shared {
    pub(crate) fn new(hub: Hub<IoState>, resolver: Arc<dyn Resolve>, settings: Settings) -> Arc<Shared> {
        Arc::new(Shared {
            hub,
            resolver,
            settings,
            workers: crate::workers::Workers::default(),
            clock: Condvar::new(),
            changed: Condvar::new(),
            watching: AtomicUsize::new(0),
        })
    }

    /// Makes sure a waiting call will wake in time for the core's next
    /// deadline: the timekeeper if its planned wake is too late, or a new
    /// timekeeper if there is none.
    fn mind_the_clock(&self) {
        let mut st = self.hub.lock();
        self.mind_the_clock_locked(&mut st);
    }

    fn mind_the_clock_locked(&self, st: &mut State) {
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
        self.watching.fetch_add(1, Ordering::Relaxed);
        let _unwatch = Unwatch(&self.watching);
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
    fn thread(&self, work: impl FnOnce() + Send + 'static) -> bool {
        self.workers.run(work)
    }
}

impl EngineHost for Shared {
    fn hub(&self) -> &Hub<IoState> {
        &self.hub
    }

    fn check(conn: &mut H1Conn) -> Result<(), CloseReason> {
        conn.conn.check(peek(&mut conn.wire.stream))
    }

    fn carry_out_one(self: &Arc<Self>, effect: Effect<Self>) {
        match effect {
            Effect::Resolve { query, name, port } => {
                let me = Arc::clone(self);
                let started = self.thread(move || {
                    let answer = me.resolver.resolve(&name, port).map_err(|e| DnsError::from_io(&e));
                    me.input(|st, now| {
                        if let Err(misuse) = st.pool.handle_dns(now, query, answer) {
                            tracing::warn!("{misuse}");
                        }
                    });
                });
                if !started {
                    self.input(|st, now| {
                        let _ = st.pool.handle_dns(now, query, Err(DnsError::from_io(&no_thread())));
                    });
                }
            }
            Effect::Connect { attempt, route } => {
                let addr = route.socket_addr();
                let limit = self.settings.connect_timeout;
                let me = Arc::clone(self);
                let started = self.thread(move || {
                    let result = TcpStream::connect_timeout(&addr, limit)
                        .and_then(|s| s.set_nodelay(true).map(|()| Stream::Tcp(s)))
                        .map_err(|e| ConnectError::from_io(&e));
                    // A cancelled attempt's socket comes back and closes here.
                    drop(
                        me.input(|st, now| st.io.engine.handle_connected(&mut st.pool, now, attempt, result)),
                    );
                });
                if !started {
                    self.attempt_not_started(attempt, ConnectError::from_io(&no_thread()));
                }
            }
            Effect::Handshake { attempt, route, socket } => {
                let Stream::Tcp(tcp) = socket else {
                    tracing::warn!("handshake for {attempt} on a socket that is not plain TCP");
                    return;
                };
                // Built with the client: a lookup, nothing built here.
                let config = self.settings.tls.get(route.address().protocols());
                let verification = self.settings.tls.verification;
                // A clone of the socket, so cancelling shuts it down and the
                // thread's I/O ends at once. Registered before the thread
                // starts: once the handshake is done the attempt is gone, and a
                // handle registered late would look cancelled and shut down the
                // new connection.
                if let Some(Some(orphan)) = self.attempt_running(attempt, tcp.try_clone().ok()) {
                    let _ = orphan.shutdown(std::net::Shutdown::Both); // cancelled already
                    return;
                }
                let limit = self.settings.handshake_timeout;
                let me = Arc::clone(self);
                let started = self.thread(move || {
                    let tunnelled = || {
                        me.input(|st, now| st.io.engine.handle_tunnelled(&mut st.pool, now, attempt));
                    };
                    let result = establish(tcp, &route, (config, verification), limit, tunnelled);
                    drop(me.input(|st, now| {
                        st.io.engine.handle_established(&mut st.pool, now, attempt, result)
                    }));
                });
                if !started {
                    self.attempt_not_started(attempt, ConnectError::from_io(&no_thread()));
                }
            }
            // A handshake's socket is shut down, ending its thread's I/O now; a
            // TCP connect in progress cannot be interrupted in std: its thread
            // closes the socket the moment the connect returns (at the latest
            // after the connect timeout).
            Effect::Abort(Some(tcp)) => {
                let _ = tcp.shutdown(std::net::Shutdown::Both);
            }
            Effect::Abort(None) => {}
            Effect::Start(never) | Effect::Ping { handle: never, .. } | Effect::End { handle: never, .. } => {
                match never {}
            }
            Effect::Answer { call, waiter, answer } => {
                if let Err(mpsc::SendError(Msg::Answer(Ok(lease)))) = waiter.send(Msg::Answer(answer)) {
                    self.give_back(call, lease);
                }
            }
            Effect::Probe { .. } => {} // judged in `carry_out`
            Effect::Close(closed) => drop::<Closed<Self>>(closed),
        }
    }

    /// Whoever enters the client first fires the core's due timers.
    fn before_input(&self, st: &mut State, now: Instant) {
        fire_due(st, now);
    }

    fn after_input(&self, st: &mut State) -> bool {
        if self.watching.load(Ordering::Relaxed) > 0 {
            self.changed.notify_all();
        }
        self.mind_the_clock_locked(st);
        false
    }
}

impl Adapter for Shared {
    type Socket = Stream;
    type Wire = Wire;
    /// For a handshake, a clone of its socket (cancelling shuts it down).
    type Task = Option<TcpStream>;
    type H2 = Infallible;
    type Job = Infallible;
    type Waiter = mpsc::Sender<Msg>;
    type Local = Keeper;

    fn install(&self, _: ConnectionId, protocol: Protocol, socket: Stream) -> Option<Installed<Self>> {
        // Only HTTP/1.1 is ever offered (Address protocols), so anything else
        // is a peer that ignored ALPN: refused.
        (protocol == Protocol::Http1).then(|| {
            Installed::Http1(Box::new(H1Conn {
                wire: Wire::new(socket),
                conn: switchyard_core::http1::Conn::new(self.settings.driver),
            }))
        })
    }
}

/// Ends one [`Shared::wait_for`]'s watch, however it returns.
struct Unwatch<'a>(&'a AtomicUsize);

impl Drop for Unwatch<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
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

fn no_thread() -> std::io::Error {
    std::io::Error::other("the system refused a thread for the connection attempt")
}

/// SOCKS5, `CONNECT` and TLS, as the route requires, on the race's winner;
/// every read and write bounded by the handshake timeout (the core's own
/// deadline — the connect timeout for a tunnel — cancels sooner, shutting the
/// socket down). `tunnelled` runs between a tunnel and TLS.
fn establish(
    tcp: TcpStream,
    route: &switchyard_core::Route,
    (config, verification): (Arc<rustls::ClientConfig>, switchyard_common::tls::Verification),
    limit: Duration,
    tunnelled: impl FnOnce(),
) -> Result<(Stream, Option<Protocol>, Option<TlsFacts>), ConnectError> {
    let io = |e: std::io::Error| ConnectError::from_io(&e);
    tcp.set_read_timeout(Some(limit)).map_err(io)?;
    tcp.set_write_timeout(Some(limit)).map_err(io)?;
    let mut tcp = tcp;
    use switchyard_core::handshake::ProxyHandshake;
    // SOCKS5, or a CONNECT tunnel for an https origin, with the proxy's credentials.
    if let Some(hs) = ProxyHandshake::for_route(route)? {
        crate::h1::proxy_handshake(&mut tcp, hs)?;
        if route.requires_tls() {
            tunnelled();
        }
    }
    let direct = (*route.proxy() == switchyard_core::Proxy::Direct).then(|| route.socket_addr().ip());
    let established = if route.requires_tls() {
        let (stream, alpn, facts) =
            crate::stream::handshake(tcp, config, route.address().host(), (verification, direct))?;
        (stream, alpn, Some(facts))
    } else {
        (Stream::Tcp(tcp), None, None)
    };
    // Exchanges set their own timeouts.
    established.0.tcp().set_read_timeout(None).map_err(io)?;
    established.0.tcp().set_write_timeout(None).map_err(io)?;
    Ok(established)
}
