//! The driver: the core's [`Pool`](switchyard_core::Pool) in a [`Hub`], fed by
//! the calling threads and by one short-lived thread per DNS query and connect
//! attempt. No background thread: whoever enters the client — a call starting,
//! waiting, finishing, a connect thread reporting, `stats()` — first fires the
//! core's due timers, and a waiting call sleeps only until the core's next
//! deadline, so race stagger, connect and handshake timeouts, acquire timeouts
//! and keep-alive eviction all happen on time without a housekeeping thread.

use std::collections::HashMap;
use std::net::TcpStream;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use switchyard_common::{Hub, HubState, Resolve};
use switchyard_core::{
    AcquireError, AttemptId, CallId, CloseReason, ConnectError, ConnectionId, DnsError, Host, Instant,
    PoolAction, Protocol, Reuse, TlsFacts,
};

use crate::h1::{H1Conn, Wire};
use crate::stream::Stream;

/// What a waiting call receives.
pub(crate) enum Msg {
    /// The pool's answer.
    Answer(Result<Lease, AcquireError>),
    /// Wake up: the core's next deadline moved earlier, or this call is now the
    /// timekeeper.
    Wake,
}

/// A connection handed to a call for one exchange (`None`: its socket was
/// already gone; the exchange fails before writing and is retried).
pub(crate) struct Lease {
    pub(crate) connection: ConnectionId,
    pub(crate) conn: Option<Box<H1Conn>>,
}

enum Attempt {
    /// A thread is connecting or handshaking. For a handshake, a clone of the
    /// socket, so cancelling shuts it down and the thread's I/O ends at once.
    Running(Option<TcpStream>),
    /// Connected (or handshaken): waiting for the core's next word.
    Ready(Stream),
}

enum Conn {
    Idle(Box<H1Conn>),
    Busy,
}

/// The driver's I/O state, beside the pool under the hub's lock.
#[derive(Default)]
pub(crate) struct IoState {
    pub(crate) waiters: HashMap<CallId, mpsc::Sender<Msg>>,
    /// The waiting call that runs the core's timers, and when it plans to wake.
    /// One at a time; when it leaves, another waiter takes over.
    pub(crate) keeper: Option<(CallId, Option<std::time::Instant>)>,
    attempts: HashMap<AttemptId, Attempt>,
    conns: HashMap<ConnectionId, Conn>,
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
}

/// Fires the core's timers if one is due.
fn fire_due(st: &mut State, now: Instant) {
    if st.pool.poll_timeout().is_some_and(|t| t <= now) {
        st.pool.handle_timeout(now);
    }
}

impl Shared {
    pub(crate) fn new(hub: Hub<IoState>, resolver: Arc<dyn Resolve>, settings: Settings) -> Arc<Shared> {
        Arc::new(Shared { hub, resolver, settings })
    }

    pub(crate) fn now(&self) -> Instant {
        self.hub.now()
    }

    /// Fires due timers, runs `f` on the state with the current time, performs
    /// every action the core emitted, then delivers events.
    pub(crate) fn input<R>(self: &Arc<Self>, f: impl FnOnce(&mut State, Instant) -> R) -> R {
        self.hub.input_then(
            |st, now| {
                fire_due(st, now);
                f(st, now)
            },
            |st, now, action| self.perform(st, now, action),
            |st, _| self.mind_the_clock_locked(st),
        )
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
        if st.io.keeper.is_some_and(|(keeper, _)| !st.io.waiters.contains_key(&keeper)) {
            st.io.keeper = None; // it stopped waiting without handing on (an error path)
        }
        match st.io.keeper {
            Some((call, planned)) => {
                if planned.is_none_or(|p| next < p) {
                    st.io.keeper = Some((call, Some(next)));
                    if let Some(tx) = st.io.waiters.get(&call) {
                        let _ = tx.send(Msg::Wake);
                    }
                }
            }
            None => {
                // The lowest call id: deterministic, and the oldest waiter.
                if let Some((&call, tx)) = st.io.waiters.iter().min_by_key(|(id, _)| **id) {
                    let _ = tx.send(Msg::Wake);
                    st.io.keeper = Some((call, Some(next)));
                }
            }
        }
    }

    /// How long the waiting `call` may sleep: until the core's next deadline if
    /// it keeps the clock (taking the job if nobody does), otherwise `None`
    /// (until its answer or its own deadline).
    pub(crate) fn plan_sleep(&self, call: CallId) -> Option<Duration> {
        let mut st = self.hub.lock();
        let keeps = match st.io.keeper {
            None => true,
            Some((keeper, _)) => keeper == call,
        };
        if !keeps {
            return None;
        }
        let next = st.pool.poll_timeout().map(|t| self.hub.to_std(t));
        st.io.keeper = Some((call, next));
        next.map(|at| at.saturating_duration_since(std::time::Instant::now()))
    }

    /// `call` stops waiting: if it kept the clock, hand the job on.
    pub(crate) fn stop_waiting(&self, call: CallId) {
        let handed_on = {
            let mut st = self.hub.lock();
            if st.io.keeper.is_some_and(|(keeper, _)| keeper == call) {
                st.io.keeper = None;
                true
            } else {
                false
            }
        };
        if handed_on {
            self.mind_the_clock();
        }
    }

    pub(crate) fn emit(&self, note: impl FnOnce(&dyn switchyard_common::EventListener) + Send + 'static) {
        self.hub.emit(note);
    }

    /// Runs `work` on a new thread; if the system refuses one, `refused` reports it.
    fn thread(name: &str, work: impl FnOnce() + Send + 'static) -> bool {
        std::thread::Builder::new().name(name.into()).spawn(work).is_ok()
    }

    fn perform(self: &Arc<Self>, st: &mut State, now: Instant, action: PoolAction) {
        match action {
            PoolAction::Resolve { query, host, port, .. } => {
                let name = match &host {
                    Host::Domain(d) => d.clone(),
                    Host::Ip(ip) => ip.to_string(),
                };
                let me = Arc::clone(self);
                let started = Self::thread("switchyard-dns", move || {
                    let answer = me.resolver.resolve(&name, port).map_err(|e| DnsError::from_io(&e));
                    me.input(|st, now| {
                        if let Err(misuse) = st.pool.handle_dns(now, query, answer) {
                            tracing::warn!("{misuse}");
                        }
                    });
                });
                if !started {
                    let _ = st.pool.handle_dns(now, query, Err(DnsError::from_io(&no_thread())));
                }
            }
            PoolAction::Connect { attempt, route } => {
                let addr = route.socket_addr();
                let limit = self.settings.connect_timeout;
                let me = Arc::clone(self);
                let started = Self::thread("switchyard-connect", move || {
                    let result = match TcpStream::connect_timeout(&addr, limit) {
                        Ok(s) => s.set_nodelay(true).map(|()| s),
                        Err(e) => Err(e),
                    };
                    me.input(|st, now| {
                        // A cancelled attempt was removed: its socket closes here.
                        if !matches!(st.io.attempts.get(&attempt), Some(Attempt::Running(_))) {
                            return;
                        }
                        let outcome = match result {
                            Ok(s) => {
                                st.io.attempts.insert(attempt, Attempt::Ready(Stream::Tcp(s)));
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
                if started {
                    st.io.attempts.insert(attempt, Attempt::Running(None));
                } else {
                    let _ = st.pool.handle_failed(now, attempt, ConnectError::from_io(&no_thread()));
                }
            }
            PoolAction::Handshake { attempt, route } => {
                let Some(Attempt::Ready(Stream::Tcp(tcp))) = st.io.attempts.remove(&attempt) else {
                    tracing::warn!("handshake for {attempt} without a socket");
                    return;
                };
                // Built with the client: a lookup, nothing built under the lock.
                let config = self.settings.tls.get(route.address().protocols());
                let handle = tcp.try_clone().ok();
                let limit = self.settings.handshake_timeout;
                let me = Arc::clone(self);
                let started = Self::thread("switchyard-handshake", move || {
                    let result = establish(tcp, &route, config, limit);
                    me.input(|st, now| {
                        if !matches!(st.io.attempts.get(&attempt), Some(Attempt::Running(_))) {
                            return;
                        }
                        let outcome = match result {
                            Ok((stream, alpn, facts)) => {
                                st.io.attempts.insert(attempt, Attempt::Ready(stream));
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
                if started {
                    st.io.attempts.insert(attempt, Attempt::Running(handle));
                } else {
                    let _ = st.pool.handle_failed(now, attempt, ConnectError::from_io(&no_thread()));
                }
            }
            PoolAction::CancelAttempt { attempt } => {
                // A handshake's socket is shut down, ending its thread's I/O now; a
                // TCP connect in progress cannot be interrupted in std: its thread
                // closes the socket the moment the connect returns (at the latest
                // after the connect timeout).
                if let Some(Attempt::Running(Some(tcp))) = st.io.attempts.remove(&attempt) {
                    let _ = tcp.shutdown(std::net::Shutdown::Both);
                }
            }
            PoolAction::Established { attempt, connection, protocol } => {
                let Some(Attempt::Ready(stream)) = st.io.attempts.remove(&attempt) else {
                    tracing::warn!("{connection} established without a socket");
                    return;
                };
                if protocol != Protocol::Http1 {
                    // Only HTTP/1.1 is ever offered (Address protocols), so this is a
                    // peer that ignored ALPN: refuse the connection.
                    let _ = st.pool.connection_closed(now, connection, CloseReason::Failure);
                    return;
                }
                let conn = H1Conn {
                    wire: Wire::new(stream),
                    conn: switchyard_core::http1::Conn::new(self.settings.driver),
                };
                st.io.conns.insert(connection, Conn::Idle(Box::new(conn)));
            }
            PoolAction::Acquired { call, connection, .. } => {
                let conn = match st.io.conns.get_mut(&connection) {
                    Some(slot @ Conn::Idle(_)) => match std::mem::replace(slot, Conn::Busy) {
                        Conn::Idle(c) => Some(c),
                        Conn::Busy => None,
                    },
                    Some(Conn::Busy) | None => {
                        tracing::debug!("{connection} handed out without a socket");
                        None
                    }
                };
                let lease = Lease { connection, conn };
                match st.io.waiters.remove(&call) {
                    Some(tx) => {
                        if let Err(mpsc::SendError(Msg::Answer(Ok(lease)))) = tx.send(Msg::Answer(Ok(lease)))
                        {
                            Self::give_back(st, now, call, lease);
                        }
                    }
                    None => Self::give_back(st, now, call, lease),
                }
            }
            PoolAction::AcquireFailed { call, error } => {
                if let Some(tx) = st.io.waiters.remove(&call) {
                    let _ = tx.send(Msg::Answer(Err(error)));
                }
            }
            PoolAction::Close { connection, .. } => {
                st.io.conns.remove(&connection);
            }
        }
    }

    /// A lease nobody took (the call went away): return the connection unused.
    fn give_back(st: &mut State, now: Instant, call: CallId, lease: Lease) {
        if let Some(conn) = lease.conn {
            st.io.conns.insert(lease.connection, Conn::Idle(conn));
        }
        let _ = st.pool.exchange_finished(now, call, Reuse::Reusable);
    }

    /// An HTTP/1.1 exchange ended: keep the socket if the connection may carry
    /// another, or close it for the driver's reason; then tell the core.
    pub(crate) fn release_h1(
        self: &Arc<Self>,
        call: CallId,
        connection: ConnectionId,
        outcome: Result<H1Conn, CloseReason>,
    ) {
        self.input(|st, now| {
            let reuse = match outcome {
                Ok(conn) if st.io.conns.contains_key(&connection) => {
                    st.io.conns.insert(connection, Conn::Idle(Box::new(conn)));
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
}

fn no_thread() -> std::io::Error {
    std::io::Error::other("the system refused a thread for the connection attempt")
}

/// SOCKS5, `CONNECT` and TLS, as the route requires, on the race's winner;
/// every step bounded by the handshake timeout.
fn establish(
    tcp: TcpStream,
    route: &switchyard_core::Route,
    config: Arc<rustls::ClientConfig>,
    limit: Duration,
) -> Result<(Stream, Option<Protocol>, Option<TlsFacts>), ConnectError> {
    let io = |e: std::io::Error| ConnectError::from_io(&e);
    tcp.set_read_timeout(Some(limit)).map_err(io)?;
    tcp.set_write_timeout(Some(limit)).map_err(io)?;
    let mut tcp = tcp;
    use switchyard_core::handshake::ProxyHandshake;
    if route.requires_socks5() {
        crate::h1::proxy_handshake(&mut tcp, ProxyHandshake::socks5(route.address())?)?;
    }
    if route.requires_tunnel() {
        crate::h1::proxy_handshake(&mut tcp, ProxyHandshake::connect_tunnel(route.address())?)?;
    }
    let established = if route.requires_tls() {
        let (stream, alpn, facts) = crate::stream::handshake(tcp, config, route.address().host())?;
        (stream, alpn, Some(facts))
    } else {
        (Stream::Tcp(tcp), None, None)
    };
    // Exchanges set their own timeouts.
    established.0.tcp().set_read_timeout(None).map_err(io)?;
    established.0.tcp().set_write_timeout(None).map_err(io)?;
    Ok(established)
}
