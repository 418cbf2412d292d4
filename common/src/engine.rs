//! The engine's bookkeeping, written once for every adapter and without I/O:
//! which socket belongs to which attempt, which connection is idle or busy,
//! which call waits for a lease — and what the core's actions mean for them.
//!
//! An adapter (async or blocking) keeps an [`Engine`] beside the pool under the
//! hub's lock. For each [`PoolAction`] it calls [`Engine::perform`], which
//! updates the maps at once and returns the [`Effect`] to carry out — and the
//! adapter carries effects out **after** the lock is released: connecting,
//! handshaking, resolving, spawning threads or tasks, probing sockets, handing
//! leases to waiting calls, closing sockets. Nothing that can block or take long
//! happens under the lock. Results come back through the engine's `handle_*`
//! methods, under the lock again, which feed the pool.
//!
//! The one thing an adapter does under the lock is [`Adapter::install`]: make an
//! established socket into an HTTP/1.1 connection or an HTTP/2 handle, without
//! I/O (the HTTP/2 connection's work is an [`Effect::Start`] for later), so a
//! lease handed out in the same batch of actions finds it.

use std::sync::Arc;
use switchyard_core::hash::FastMap;

use switchyard_core::http1;
use switchyard_core::{
    AcquireError, AttemptId, CallId, CloseReason, ConnectError, ConnectionId, Host, Instant, Pool,
    PoolAction, Protocol, QueryId, Reuse, Route, Source, TlsFacts,
};

use crate::{Hub, HubState};

/// What an adapter holds, as types, and the one thing it does under the lock.
pub trait Adapter: Sized {
    /// A connected byte stream (TCP, or TLS over TCP).
    type Socket: Send;
    /// What an idle HTTP/1.1 connection keeps besides the core's view of it
    /// (the socket and the adapter's buffers).
    type Wire: Send;
    /// A running connect or handshake, cancellable.
    type Task: Send;
    /// A shared handle on an HTTP/2 connection.
    type H2: Clone + Send;
    /// An HTTP/2 connection's work, started after the lock.
    type Job: Send;
    /// How a waiting call hears its answer.
    type Waiter: Send;
    /// The adapter's own bookkeeping beside the engine (its clock keeping).
    type Local: Default + Send;

    /// An established socket becomes a connection speaking `protocol`. Runs
    /// under the lock: no I/O, nothing that waits. `None` refuses it (the
    /// connection is closed as failed).
    fn install(
        &self,
        connection: ConnectionId,
        protocol: Protocol,
        socket: Self::Socket,
    ) -> Option<Installed<Self>>;

    /// The local address of an established socket (its own end), for the
    /// pool's record ([`Pool::set_local_addr`]); `None` when the adapter
    /// cannot tell (a Unix socket, a connector hook's stream). Runs under the
    /// lock: a `getsockname`, nothing that waits.
    fn local_addr(&self, _socket: &Self::Socket) -> Option<std::net::SocketAddr> {
        None
    }

    /// The handle a call gets when the pool hands it a stream of this HTTP/2
    /// connection, and how the pool found it (`source`: the 421 rule needs to
    /// know a coalesced share). Runs under the lock, in the order the pool
    /// hands streams out, so an adapter can open the streams in that order
    /// (first come, first served on the wire too). Default: a clone.
    fn lease_h2(&self, handle: &Self::H2, source: Source) -> Self::H2 {
        let _ = source;
        handle.clone()
    }
}

/// A socket past its handshakes, with the protocol ALPN chose (if any) and the
/// TLS facts (if TLS).
pub type Handshaken<A> = (<A as Adapter>::Socket, Option<Protocol>, Option<TlsFacts>);

/// What [`Adapter::install`] made of a socket.
pub enum Installed<A: Adapter> {
    /// An HTTP/1.1 connection, fresh.
    Http1(Box<H1Conn<A::Wire>>),
    /// An HTTP/2 connection's handle, and its work to start after the lock.
    Http2(A::H2, A::Job),
}

/// An idle HTTP/1.1 connection: the adapter's wire and the core's view
/// ([`http1::Conn`]: read buffer, history).
pub struct H1Conn<W> {
    /// The socket and the adapter's buffers.
    pub wire: W,
    /// The core's view of the connection.
    pub conn: http1::Conn,
}

/// A connection handed to a call for one exchange.
pub enum Lease<A: Adapter> {
    /// HTTP/1.1: `conn` is `None` when the socket is already gone (the exchange
    /// fails before writing, and the core retries elsewhere).
    H1 {
        /// The connection.
        connection: ConnectionId,
        /// How the pool found it (new or pooled).
        source: Source,
        /// Its socket and state, for the exchange.
        conn: Option<Box<H1Conn<A::Wire>>>,
    },
    /// HTTP/2: a share of the connection.
    H2 {
        /// The connection.
        connection: ConnectionId,
        /// Its handle.
        handle: A::H2,
    },
}

/// Work for the adapter, to carry out after the lock is released.
pub enum Effect<A: Adapter> {
    /// Resolve `name`; answer with [`Pool::handle_dns`].
    Resolve {
        /// Quote this.
        query: QueryId,
        /// The name (or an IP literal, which resolves to itself).
        name: String,
        /// The port.
        port: u16,
    },
    /// Open TCP to the route; report with [`Engine::attempt_started`], then
    /// [`Engine::handle_connected`].
    Connect {
        /// Quote this.
        attempt: AttemptId,
        /// What to dial.
        route: Route,
    },
    /// Run the route's handshakes (proxy, TLS) on `socket`; report with
    /// [`Engine::attempt_started`], then [`Engine::handle_established`].
    Handshake {
        /// Quote this.
        attempt: AttemptId,
        /// The route.
        route: Route,
        /// The connected socket.
        socket: A::Socket,
    },
    /// Cancel a running attempt.
    Abort(A::Task),
    /// Start an HTTP/2 connection's work.
    Start(A::Job),
    /// Tell a waiting call its answer. If it no longer waits, give the lease
    /// back with [`Engine::give_back`].
    Answer {
        /// The call.
        call: CallId,
        /// Its waiter.
        waiter: A::Waiter,
        /// The answer.
        answer: Result<Lease<A>, AcquireError>,
    },
    /// Ask this idle connection's socket, without waiting, what it holds;
    /// report with [`Engine::handle_probed`].
    Probe {
        /// The connection.
        connection: ConnectionId,
        /// Its socket and state, out of the pool meanwhile.
        conn: Box<H1Conn<A::Wire>>,
    },
    /// Send one PING on this HTTP/2 connection; report its PONG with
    /// [`Pool::pong`] (the pool times it out itself).
    Ping {
        /// The connection.
        connection: ConnectionId,
        /// Its handle.
        handle: A::H2,
    },
    /// End this HTTP/2 connection now ([`PoolAction::Abort`]): its streams
    /// fail and are reported; the pool's close follows the last.
    End {
        /// The connection.
        connection: ConnectionId,
        /// Its handle.
        handle: A::H2,
        /// Why the pool ends it.
        reason: CloseReason,
    },
    /// Drop these (closing sockets, ending handles) outside the lock.
    Close(Closed<A>),
}

/// Sockets and handles to drop outside the lock.
pub enum Closed<A: Adapter> {
    /// A connecting or connected attempt's socket.
    Socket(A::Socket),
    /// An HTTP/1.1 connection.
    H1(Box<H1Conn<A::Wire>>),
    /// An HTTP/2 connection's handle.
    H2(A::H2),
}

enum Attempt<A: Adapter> {
    /// Connecting or handshaking; the task's handle once it is known.
    Running(Option<A::Task>),
    /// Connected (or handshaken): waiting for the core's next word.
    Ready(A::Socket),
}

enum Conn<A: Adapter> {
    H1Idle(Box<H1Conn<A::Wire>>),
    /// Carrying an exchange (its socket is with the call).
    H1Busy,
    /// Idle, its socket being probed outside the lock; handed out meanwhile to
    /// a call that gets it once the probe is back.
    H1Probing(Option<(CallId, A::Waiter)>),
    H2(A::H2),
}

/// What the hub's lock guards beside the pool: the engine and the adapter's
/// own bookkeeping.
pub struct EngineState<A: Adapter> {
    /// The attempts, connections and waiters.
    pub engine: Engine<A>,
    /// The adapter's own.
    pub local: A::Local,
}

impl<A: Adapter> Default for EngineState<A> {
    fn default() -> Self {
        EngineState { engine: Engine::default(), local: A::Local::default() }
    }
}

/// The attempts, connections and waiters of one client. See the [module
/// docs](self).
///
/// The maps hash the core's ids with the core's fast hasher: with the
/// standard library's SipHash they cost ~300 instructions per pooled call.
pub struct Engine<A: Adapter> {
    waiters: FastMap<CallId, A::Waiter>,
    attempts: FastMap<AttemptId, Attempt<A>>,
    conns: FastMap<ConnectionId, Conn<A>>,
}

impl<A: Adapter> Default for Engine<A> {
    fn default() -> Self {
        Engine { waiters: FastMap::default(), attempts: FastMap::default(), conns: FastMap::default() }
    }
}

impl<A: Adapter> Engine<A> {
    /// `call` waits for its lease (or its failure) through `waiter`.
    pub fn wait(&mut self, call: CallId, waiter: A::Waiter) {
        self.waiters.insert(call, waiter);
    }

    /// `call` no longer waits.
    pub fn stop_waiting(&mut self, call: CallId) -> Option<A::Waiter> {
        self.waiters.remove(&call)
    }

    /// The waiter of `call`, if it waits.
    #[must_use]
    pub fn waiter(&self, call: CallId) -> Option<&A::Waiter> {
        self.waiters.get(&call)
    }

    /// Whether `call` waits.
    #[must_use]
    pub fn is_waiting(&self, call: CallId) -> bool {
        self.waiters.contains_key(&call)
    }

    /// The waiting call with the lowest id (the oldest), and its waiter.
    #[must_use]
    pub fn first_waiter(&self) -> Option<(CallId, &A::Waiter)> {
        self.waiters.iter().min_by_key(|(c, _)| **c).map(|(c, w)| (*c, w))
    }

    /// Updates the maps for `action` and says what the adapter must do.
    pub fn perform(
        &mut self,
        adapter: &A,
        pool: &mut Pool,
        now: Instant,
        action: PoolAction,
    ) -> Option<Effect<A>> {
        match action {
            PoolAction::Resolve { query, host, port, .. } => {
                let name = match host {
                    Host::Domain(d) => d,
                    Host::Ip(ip) => ip.to_string(),
                };
                Some(Effect::Resolve { query, name, port })
            }
            PoolAction::Connect { attempt, route } => {
                self.attempts.insert(attempt, Attempt::Running(None));
                Some(Effect::Connect { attempt, route })
            }
            PoolAction::Handshake { attempt, route } => {
                let Some(Attempt::Ready(socket)) = self.attempts.remove(&attempt) else {
                    tracing::warn!("handshake for {attempt} without a socket");
                    return None;
                };
                self.attempts.insert(attempt, Attempt::Running(None));
                Some(Effect::Handshake { attempt, route, socket })
            }
            PoolAction::CancelAttempt { attempt } => match self.attempts.remove(&attempt)? {
                Attempt::Running(task) => task.map(Effect::Abort),
                Attempt::Ready(socket) => Some(Effect::Close(Closed::Socket(socket))),
            },
            PoolAction::Established { attempt, connection, protocol } => {
                let Some(Attempt::Ready(socket)) = self.attempts.remove(&attempt) else {
                    tracing::warn!("{connection} established without a socket");
                    return None;
                };
                if let Some(local) = adapter.local_addr(&socket) {
                    pool.set_local_addr(connection, local);
                }
                match adapter.install(connection, protocol, socket) {
                    Some(Installed::Http1(conn)) => {
                        self.conns.insert(connection, Conn::H1Idle(conn));
                        None
                    }
                    Some(Installed::Http2(handle, job)) => {
                        self.conns.insert(connection, Conn::H2(handle));
                        Some(Effect::Start(job))
                    }
                    None => {
                        let _ = pool.connection_closed(now, connection, CloseReason::Failure);
                        None
                    }
                }
            }
            PoolAction::Acquired { call, connection, source } => {
                let lease = match self.conns.get_mut(&connection) {
                    Some(Conn::H2(handle)) => {
                        Lease::H2 { connection, handle: adapter.lease_h2(handle, source) }
                    }
                    Some(slot @ Conn::H1Idle(_)) => match std::mem::replace(slot, Conn::H1Busy) {
                        Conn::H1Idle(c) => Lease::H1 { connection, source, conn: Some(c) },
                        _ => Lease::H1 { connection, source, conn: None },
                    },
                    Some(Conn::H1Probing(handed)) => {
                        // Handed out while its probe runs: the call gets it when
                        // the probe is back (or a lease without a socket, if
                        // the probe found it dead: nothing is written, and the
                        // core retries elsewhere).
                        match self.waiters.remove(&call) {
                            Some(waiter) => *handed = Some((call, waiter)),
                            None => {
                                let _ = pool.exchange_finished(now, call, Reuse::Reusable);
                            }
                        }
                        return None;
                    }
                    Some(Conn::H1Busy) | None => {
                        tracing::debug!("{connection} handed out without a socket");
                        Lease::H1 { connection, source, conn: None }
                    }
                };
                match self.waiters.remove(&call) {
                    Some(waiter) => Some(Effect::Answer { call, waiter, answer: Ok(lease) }),
                    None => {
                        self.give_back(pool, now, call, lease);
                        None
                    }
                }
            }
            PoolAction::AcquireFailed { call, error } => {
                let waiter = self.waiters.remove(&call)?;
                Some(Effect::Answer { call, waiter, answer: Err(error) })
            }
            PoolAction::Probe { connection } => match self.conns.get_mut(&connection) {
                Some(slot @ Conn::H1Idle(_)) => match std::mem::replace(slot, Conn::H1Probing(None)) {
                    Conn::H1Idle(conn) => Some(Effect::Probe { connection, conn }),
                    _ => None,
                },
                _ => None,
            },
            PoolAction::Ping { connection } => match self.conns.get(&connection) {
                Some(Conn::H2(handle)) => Some(Effect::Ping { connection, handle: handle.clone() }),
                _ => None,
            },
            PoolAction::Abort { connection, reason } => match self.conns.get(&connection) {
                Some(Conn::H2(handle)) => Some(Effect::End { connection, handle: handle.clone(), reason }),
                _ => None,
            },
            PoolAction::Close { connection, .. } => match self.conns.remove(&connection)? {
                Conn::H1Idle(c) => Some(Effect::Close(Closed::H1(c))),
                Conn::H2(h) => Some(Effect::Close(Closed::H2(h))),
                Conn::H1Busy | Conn::H1Probing(_) => None,
            },
        }
    }

    /// The task of a started attempt. When the attempt is gone — cancelled, or
    /// (if the task ran first) already finished — the task comes back: abort
    /// it after the lock. Aborting must be harmless for a finished task, or the
    /// handle must be registered before the task can finish (std's socket
    /// clones are).
    pub fn attempt_started(&mut self, attempt: AttemptId, task: A::Task) -> Option<A::Task> {
        match self.attempts.get_mut(&attempt) {
            Some(Attempt::Running(slot @ None)) => {
                *slot = Some(task);
                None
            }
            // Already finished (its result arrived first): nothing to keep.
            Some(_) => None,
            None => Some(task),
        }
    }

    /// An attempt's TCP connect ended. A cancelled attempt's socket comes back,
    /// to be dropped after the lock.
    pub fn handle_connected(
        &mut self,
        pool: &mut Pool,
        now: Instant,
        attempt: AttemptId,
        result: Result<A::Socket, ConnectError>,
    ) -> Option<A::Socket> {
        let result = result.map(|socket| (socket, ()));
        self.attempt_ended(pool, now, attempt, result, |pool, ()| pool.handle_connected(now, attempt))
    }

    /// An attempt's proxy tunnel is open (its TLS starts): the core moves its
    /// bound from the connect timeout to the handshake timeout.
    pub fn handle_tunnelled(&mut self, pool: &mut Pool, now: Instant, attempt: AttemptId) {
        if matches!(self.attempts.get(&attempt), Some(Attempt::Running(_))) {
            if let Err(misuse) = pool.handle_tunnelled(now, attempt) {
                tracing::warn!("{misuse}");
            }
        }
    }

    /// An attempt's handshakes ended. A cancelled attempt's socket comes back.
    pub fn handle_established(
        &mut self,
        pool: &mut Pool,
        now: Instant,
        attempt: AttemptId,
        result: Result<Handshaken<A>, ConnectError>,
    ) -> Option<A::Socket> {
        let result = result.map(|(socket, alpn, facts)| (socket, (alpn, facts)));
        self.attempt_ended(pool, now, attempt, result, |pool, (alpn, facts)| {
            pool.handle_established(now, attempt, alpn, facts)
        })
    }

    /// A step of a running attempt ended: its socket waits for the core's next
    /// word (`report` tells the pool), or the attempt failed.
    fn attempt_ended<T>(
        &mut self,
        pool: &mut Pool,
        now: Instant,
        attempt: AttemptId,
        result: Result<(A::Socket, T), ConnectError>,
        report: impl FnOnce(&mut Pool, T) -> Result<(), switchyard_core::Misuse>,
    ) -> Option<A::Socket> {
        if !matches!(self.attempts.get(&attempt), Some(Attempt::Running(_))) {
            return result.ok().map(|(socket, _)| socket); // cancelled meanwhile
        }
        let outcome = match result {
            Ok((socket, facts)) => {
                self.attempts.insert(attempt, Attempt::Ready(socket));
                report(pool, facts)
            }
            Err(e) => {
                self.attempts.remove(&attempt);
                pool.handle_failed(now, attempt, e)
            }
        };
        if let Err(misuse) = outcome {
            tracing::warn!("{misuse}");
        }
        None
    }

    /// A lease nobody took (the call went away): the connection goes back unused.
    pub fn give_back(&mut self, pool: &mut Pool, now: Instant, call: CallId, lease: Lease<A>) {
        if let Lease::H1 { connection, conn: Some(c), .. } = lease {
            if self.conns.contains_key(&connection) {
                self.conns.insert(connection, Conn::H1Idle(c));
            }
        }
        let _ = pool.exchange_finished(now, call, Reuse::Reusable);
    }

    /// An HTTP/1.1 exchange ended: the connection goes back idle when the
    /// driver says it may carry another, or closes for the driver's reason.
    /// What must close comes back, to be dropped after the lock.
    pub fn release_h1(
        &mut self,
        pool: &mut Pool,
        now: Instant,
        call: CallId,
        connection: ConnectionId,
        outcome: Result<Box<H1Conn<A::Wire>>, CloseReason>,
    ) -> Option<Box<H1Conn<A::Wire>>> {
        let (reuse, leftover) = match outcome {
            Ok(conn) if self.conns.contains_key(&connection) => {
                self.conns.insert(connection, Conn::H1Idle(conn));
                (Reuse::Reusable, None)
            }
            Ok(conn) => (Reuse::Reusable, Some(conn)),
            Err(reason) => {
                self.conns.remove(&connection);
                (Reuse::Retire(reason), None)
            }
        };
        if let Err(misuse) = pool.exchange_finished(now, call, reuse) {
            tracing::warn!("{misuse}");
        }
        leftover
    }

    /// A probe's verdict ([`http1::Conn::check`]): a healthy connection goes
    /// back idle, or to the call it was handed to meanwhile; a dead one is
    /// reported closed. Returns what to carry out after the lock.
    pub fn handle_probed(
        &mut self,
        pool: &mut Pool,
        now: Instant,
        connection: ConnectionId,
        conn: Box<H1Conn<A::Wire>>,
        verdict: Result<(), CloseReason>,
    ) -> Vec<Effect<A>> {
        let Some(Conn::H1Probing(handed)) = self.conns.get_mut(&connection) else {
            return vec![Effect::Close(Closed::H1(conn))]; // closed meanwhile
        };
        if verdict.is_ok() {
            // A connection on probation proves usable this way.
            let _ = pool.probe_passed(now, connection);
        }
        match (handed.take(), verdict) {
            (None, Ok(())) => {
                self.conns.insert(connection, Conn::H1Idle(conn));
                Vec::new()
            }
            (None, Err(reason)) => {
                self.conns.remove(&connection);
                let _ = pool.connection_closed(now, connection, reason);
                vec![Effect::Close(Closed::H1(conn))]
            }
            (Some((call, waiter)), Ok(())) => {
                self.conns.insert(connection, Conn::H1Busy);
                vec![Effect::Answer {
                    call,
                    waiter,
                    answer: Ok(Lease::H1 { connection, source: Source::Pooled, conn: Some(conn) }),
                }]
            }
            (Some((call, waiter)), Err(reason)) => {
                self.conns.insert(connection, Conn::H1Busy);
                let _ = pool.connection_closed(now, connection, reason);
                vec![
                    Effect::Close(Closed::H1(conn)),
                    Effect::Answer {
                        call,
                        waiter,
                        answer: Ok(Lease::H1 { connection, source: Source::Pooled, conn: None }),
                    },
                ]
            }
        }
    }
}

/// What an adapter's client state offers so the engine's glue is written once:
/// its hub, how it judges an idle socket, how it carries out an effect. Its
/// provided methods are the input loop (lock, feed the core, collect effects,
/// unlock, carry them out) and the common reports back to the engine.
pub trait EngineHost: Adapter + Send + Sync + 'static {
    /// The client's hub.
    fn hub(&self) -> &Hub<EngineState<Self>>;

    /// Asks an idle connection's socket, without waiting, what it holds, and
    /// lets the core judge ([`http1::Conn::check`]).
    fn check(conn: &mut H1Conn<Self::Wire>) -> Result<(), CloseReason>;

    /// Carries out one effect (never [`Effect::Probe`]: those are batched).
    fn carry_out_one(self: &Arc<Self>, effect: Effect<Self>);

    /// Under the lock, before the input: the adapter's own due work.
    fn before_input(&self, _st: &mut HubState<EngineState<Self>>, _now: Instant) {}

    /// Under the lock, after every action was performed: whether
    /// [`EngineHost::after_unlock`] has something to do.
    fn after_input(&self, _st: &mut HubState<EngineState<Self>>) -> bool {
        false
    }

    /// With the lock released, when [`EngineHost::after_input`] said so.
    fn after_unlock(&self) {}

    /// Runs `f` on the state with the current time, lets the engine turn every
    /// action the core emitted into effects, delivers the core's events, then —
    /// with the lock released — carries the effects out.
    fn input<R>(self: &Arc<Self>, f: impl FnOnce(&mut HubState<EngineState<Self>>, Instant) -> R) -> R {
        let mut effects = Vec::new();
        let mut after = false;
        let result = self.hub().input_then(
            |st, now| {
                self.before_input(st, now);
                f(st, now)
            },
            |st, now, action| effects.extend(st.io.engine.perform(&**self, &mut st.pool, now, action)),
            |st, _| after = self.after_input(st),
        );
        if after {
            self.after_unlock();
        }
        self.carry_out(effects);
        result
    }

    /// Carries out effects, outside the lock; probes are judged together and
    /// reported in one input.
    fn carry_out(self: &Arc<Self>, effects: Vec<Effect<Self>>) {
        let mut verdicts = Vec::new();
        for effect in effects {
            match effect {
                Effect::Probe { connection, mut conn } => {
                    let verdict = Self::check(&mut conn);
                    verdicts.push((connection, conn, verdict));
                }
                other => self.carry_out_one(other),
            }
        }
        if verdicts.is_empty() {
            return;
        }
        let then = self.input(|st, now| {
            let engine = &mut st.io.engine;
            let mut then = Vec::new();
            for (connection, conn, verdict) in verdicts {
                then.extend(engine.handle_probed(&mut st.pool, now, connection, conn, verdict));
            }
            then
        });
        // Dead sockets close, and calls handed a probed connection get it.
        self.carry_out(then);
    }

    /// An attempt's task is running: the engine keeps its handle, or hands it
    /// back when the attempt was cancelled meanwhile (abort it).
    fn attempt_running(&self, attempt: AttemptId, task: Self::Task) -> Option<Self::Task> {
        self.hub().lock().io.engine.attempt_started(attempt, task)
    }

    /// An attempt could not be started (no thread, no executor): it fails.
    fn attempt_not_started(self: &Arc<Self>, attempt: AttemptId, error: ConnectError) {
        let stale =
            self.input(|st, now| st.io.engine.handle_connected(&mut st.pool, now, attempt, Err(error)));
        drop(stale);
    }

    /// An HTTP/1.1 exchange ended on `wire`: the connection goes back idle when
    /// the driver says it may carry another, or closes for the driver's reason.
    fn release_h1(
        self: &Arc<Self>,
        call: CallId,
        connection: ConnectionId,
        wire: Self::Wire,
        driver: http1::Driver,
    ) {
        let outcome = driver.finish().map(|conn| Box::new(H1Conn { wire, conn }));
        self.release(call, connection, outcome);
    }

    /// As [`EngineHost::release_h1`], with the connection already taken apart.
    fn release(
        self: &Arc<Self>,
        call: CallId,
        connection: ConnectionId,
        outcome: Result<Box<H1Conn<Self::Wire>>, CloseReason>,
    ) {
        let leftover =
            self.input(|st, now| st.io.engine.release_h1(&mut st.pool, now, call, connection, outcome));
        drop(leftover);
    }

    /// The call's exchange failed: the pool decides (retry or fail); when it
    /// retries, `waiter` hears of the next lease.
    fn exchange_failed(
        self: &Arc<Self>,
        call: CallId,
        failure: switchyard_core::pool::ExchangeFailure,
        waiter: Self::Waiter,
    ) -> Result<switchyard_core::FailureOutcome, switchyard_core::Misuse> {
        self.input(|st, now| {
            st.io.engine.wait(call, waiter);
            let outcome = st.pool.exchange_failed(now, call, failure);
            if !matches!(outcome, Ok(switchyard_core::FailureOutcome::Retrying(_))) {
                st.io.engine.stop_waiting(call);
            }
            outcome
        })
    }

    /// Starts a call: the pool looks for a connection to the plan's Address;
    /// `waiter` hears the answer. Listeners hear `call_start` first. The
    /// plan's proxies go to the pool (taken, not copied: nothing reads them
    /// after).
    fn start_call(
        self: &Arc<Self>,
        parts: &http::request::Parts,
        plan: &mut CallPlan,
        waiter: Self::Waiter,
    ) -> CallId {
        let acquire = switchyard_core::AcquireOptions {
            exclusive: plan.options.exclusive,
            require_multiplexed: false,
            deadline: plan.timeout.map(|t| self.hub().now() + t),
            proxies: std::mem::take(&mut plan.proxies),
            proxy_reason: plan.proxy_reason.take(),
        };
        // The request head for `call_start`, copied only when someone listens.
        let head = self.hub().is_listening().then(|| parts.clone());
        let address = plan.address.clone();
        self.input(|st, now| {
            let id = st.pool.acquire(now, address, acquire);
            self.hub().trace_call(st, id);
            st.io.engine.wait(id, waiter);
            // Queued before the acquisition's own events, so listeners hear it first.
            if let Some(head) = head {
                self.hub().queue_note(st, move |l| l.call_start(id, &head, now));
            }
            id
        })
    }

    /// The call failed for good (or was abandoned): it ends in the pool if it
    /// is still there, and listeners hear `call_failed`.
    fn call_failed(self: &Arc<Self>, call: CallId, error: &crate::Error) {
        self.input(|st, now| {
            st.io.engine.stop_waiting(call);
            st.pool.cancel(now, call);
        });
        self.hub().untrace_call(call);
        let (at, err) = (self.hub().now(), error.clone());
        self.hub().emit(move |l| l.call_failed(call, &err, at));
        // Every event of the call is heard before `send` returns its error.
        self.hub().flush();
    }

    /// Gives a lease back: its call no longer waited for it.
    fn give_back(self: &Arc<Self>, call: CallId, lease: Lease<Self>) {
        self.input(|st, now| st.io.engine.give_back(&mut st.pool, now, call, lease));
    }
}

/// A connection in the middle of an exchange: the adapter's wire and the
/// core's driver, boxed once so moving an exchange around moves a pointer.
type Live<A> = Box<(<A as Adapter>::Wire, http1::Driver)>;

/// An HTTP/1.1 response body's state, the same on every adapter: the
/// connection (the adapter's wire and the core's driver) until the body ends.
/// The adapter only moves bytes when [`H1Body::next_chunk`] asks it to.
pub struct H1Body<A: EngineHost> {
    shared: Arc<A>,
    call: CallId,
    connection: ConnectionId,
    live: Option<Live<A>>,
    complete: bool,
    /// Trailer fields, once the body ended (chunked bodies).
    pub trailers: Option<http::HeaderMap>,
}

/// What [`H1Body::next_chunk`] says.
pub enum Next<'a, A: EngineHost> {
    /// The next chunk (`Ok(None)` at the end), or the body's failure.
    Ready(Result<Option<bytes::Bytes>, crate::BodyError>),
    /// Move bytes for the driver, then ask again.
    Io(&'a A, &'a mut A::Wire, &'a mut http1::Driver),
}

impl<A: EngineHost> H1Body<A> {
    /// The body of the exchange `live` runs for `call`.
    fn new(shared: Arc<A>, call: CallId, connection: ConnectionId, live: Live<A>) -> Self {
        H1Body { shared, call, connection, live: Some(live), complete: false, trailers: None }
    }

    /// The next chunk, or what I/O the driver needs first. A failed body
    /// releases (closes) its connection at once; a complete one when
    /// [`H1Body::finish`] is called (after the body-end event).
    pub fn next_chunk(&mut self) -> Next<'_, A> {
        let Some(live) = self.live.as_mut() else { return Next::Ready(Ok(None)) };
        match crate::exchange::body_step(&mut live.1, &mut self.trailers) {
            crate::exchange::BodyStep::Data(b) => Next::Ready(Ok(Some(b))),
            crate::exchange::BodyStep::End => {
                self.complete = true;
                Next::Ready(Ok(None))
            }
            crate::exchange::BodyStep::Failed(e) => {
                self.finish();
                Next::Ready(Err(e))
            }
            crate::exchange::BodyStep::NeedIo => match self.live.as_deref_mut() {
                Some((wire, driver)) => Next::Io(&*self.shared, wire, driver),
                None => Next::Ready(Ok(None)),
            },
        }
    }

    /// After `101 Switching Protocols` (or a `2xx` to `CONNECT`): takes the
    /// connection out of the pool for good — the pool hears it closed for
    /// [`CloseReason::Exclusive`] — and returns its wire with the bytes that
    /// arrived past the response head (the new protocol's first). `None`
    /// when the response did not switch protocols (the body stays as it was).
    pub fn take_upgraded(&mut self) -> Option<(A::Wire, bytes::BytesMut)> {
        if !self.live.as_ref()?.1.is_upgraded() {
            return None;
        }
        let (wire, mut driver) = *self.live.take()?;
        let early = driver.take_upgraded().unwrap_or_default();
        self.complete = true;
        self.shared.release(self.call, self.connection, Err(CloseReason::Exclusive));
        Some((wire, early))
    }

    /// Gives the connection back (or closes it) per the driver's decision.
    pub fn finish(&mut self) {
        if let Some(live) = self.live.take() {
            let (wire, driver) = *live;
            self.shared.release_h1(self.call, self.connection, wire, driver);
        }
    }

    /// Whether the connection has been released.
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.live.is_none()
    }

    /// The body is dropped: a complete body releases its connection now; an
    /// unfinished one tells the driver to drain (bounded) and, unless that is
    /// already decided, hands the exchange to the adapter to drain — then
    /// release with [`EngineHost::release_h1`]. Afterwards this body is done.
    pub fn abandon(&mut self) -> Option<Draining<A>> {
        let (wire, mut driver) = *self.live.take()?;
        if !self.complete {
            driver.abandon(self.shared.hub().now());
        }
        if driver.is_finished() {
            self.shared.release_h1(self.call, self.connection, wire, driver);
            return None;
        }
        let shared = Arc::clone(&self.shared);
        let call = self.call;
        shared.input(|st, now| st.pool.draining(now, call));
        Some(Draining { shared, call, connection: self.connection, wire, driver })
    }
}

/// An abandoned body the adapter drains: move bytes for `driver` until it is
/// finished, then [`Draining::release`].
pub struct Draining<A: EngineHost> {
    /// The client.
    pub shared: Arc<A>,
    call: CallId,
    connection: ConnectionId,
    /// The connection's wire.
    pub wire: A::Wire,
    /// Its driver, draining.
    pub driver: http1::Driver,
}

impl<A: EngineHost> Draining<A> {
    /// The drain ended: the connection goes back or closes, as the driver says.
    pub fn release(self) {
        self.shared.release_h1(self.call, self.connection, self.wire, self.driver);
    }

    /// What to do if the drain cannot run at all (no executor, and the drain
    /// with its socket was dropped): tell the pool the connection is gone.
    pub fn if_lost(&self) -> impl FnOnce() + Send + 'static {
        let (shared, call, connection) = (Arc::clone(&self.shared), self.call, self.connection);
        move || shared.release(call, connection, Err(CloseReason::UnreadBody))
    }
}

/// What a call will be, worked out once before it starts, the same on every
/// adapter: its options (from the request's extensions), the Address, its time
/// bounds, what retries it allows. URL credentials are moved to
/// `Authorization` on the way: they never reach `Host`, `:authority`, events,
/// logs or errors.
#[derive(Debug, Clone)]
pub struct CallPlan {
    /// The request's options.
    pub options: crate::RequestOptions,
    /// Where it goes.
    pub address: switchyard_core::Address,
    /// The proxies to try, in order.
    pub proxies: Vec<switchyard_core::Proxy>,
    /// Why these proxies (the selector's words), for the `proxy_select_end` event.
    pub proxy_reason: Option<String>,
    /// The bound on the call until its response head: the head timeout or
    /// the whole call's, whichever ends first.
    pub timeout: Option<std::time::Duration>,
    /// The same as an instant on the process clock.
    pub deadline: Option<std::time::Instant>,
    /// The whole call's deadline (the response body must end by then too).
    pub call_deadline: Option<std::time::Instant>,
    /// The response body's bound, from its head.
    pub body_timeout: Option<std::time::Duration>,
    /// What the request allows.
    pub facts: switchyard_core::pool::RequestFacts,
}

impl CallPlan {
    /// The plan for a request with head `parts` (its options are taken out of
    /// its extensions). `http2` says whether the adapter may offer HTTP/2.
    ///
    /// # Errors
    /// A URL that is not absolute `http(s)`, or not allowed by the config.
    pub fn new(
        config: &crate::Config,
        parts: &mut http::request::Parts,
        http2: bool,
        body_replayable: bool,
    ) -> Result<CallPlan, crate::Error> {
        let mut options = parts.extensions.remove::<crate::RequestOptions>().unwrap_or_default();
        crate::take_userinfo(parts)?;
        // A request that asks to switch protocols goes on HTTP/1.1 (HTTP/2
        // has no `Upgrade`) and on a connection of its own: after `101` the
        // connection is the caller's. (An empty head, the common call, pays
        // one length check.)
        let upgrade = !parts.headers.is_empty() && parts.headers.contains_key(http::header::UPGRADE);
        options.exclusive |= upgrade;
        let http2 = http2 && !upgrade;
        // A request's own Unix socket is an extension of its own: the common
        // call (nothing else in the extensions) pays one length check.
        let unix =
            if parts.extensions.is_empty() { None } else { parts.extensions.remove::<crate::UnixSocket>() };
        let address = match unix {
            Some(crate::UnixSocket(path)) => config.address_via(&parts.uri, http2, &path)?,
            None => config.address(&parts.uri, http2)?,
        };
        config.apply_default_headers(&mut parts.headers);
        let whole = options.timeout.or(config.timeout);
        let head = options.head_timeout.or(config.head_timeout);
        let timeout = match (whole, head) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let start = std::time::Instant::now();
        let facts =
            switchyard_core::pool::RequestFacts::new(&parts.method, options.retryable, body_replayable);
        let (proxies, proxy_reason) = config.proxies_for(&parts.uri);
        Ok(CallPlan {
            address,
            proxies,
            proxy_reason,
            timeout,
            deadline: timeout.map(|t| start + t),
            call_deadline: whole.map(|t| start + t),
            body_timeout: options.body_timeout.or(config.body_timeout),
            facts,
            options,
        })
    }
}

impl CallPlan {
    /// The plan for a raw tunnel to `origin`'s host and port (a gateway's
    /// `CONNECT`): the [tunnel Address](crate::Config::tunnel_address), the
    /// client's proxy rules for `origin`, an exclusive acquisition. Bounded
    /// by the pool's connect timeout (and `timeout`, when given).
    ///
    /// # Errors
    /// As [`crate::Config::tunnel_address`].
    pub fn tunnel(
        config: &crate::Config,
        origin: &http::Uri,
        timeout: Option<std::time::Duration>,
    ) -> Result<CallPlan, crate::Error> {
        let address = config.tunnel_address(origin)?;
        let (proxies, proxy_reason) = config.proxies_for(origin);
        let options = crate::RequestOptions { exclusive: true, timeout, ..crate::RequestOptions::default() };
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        Ok(CallPlan {
            address,
            proxies,
            proxy_reason,
            timeout,
            deadline,
            call_deadline: deadline,
            body_timeout: None,
            facts: switchyard_core::pool::RequestFacts::new(&http::Method::CONNECT, false, true),
            options,
        })
    }
}

/// How a request goes on `connection`: origin form, or absolute form through
/// an HTTP proxy (an `http` origin) — then the proxy is returned too, and the
/// head carries the proxy's Basic `Proxy-Authorization` when it has
/// credentials (the head is copied only then; the value is marked sensitive).
#[must_use]
pub fn target_form<'p>(
    pool: &switchyard_core::Pool,
    connection: switchyard_core::ConnectionId,
    parts: &'p http::request::Parts,
) -> (http1::TargetForm, std::borrow::Cow<'p, http::request::Parts>, Option<switchyard_core::Proxy>) {
    let route = pool.connection(connection).map(|c| c.route());
    let Some(route) = route.filter(|r| r.uses_absolute_form()) else {
        return (http1::TargetForm::Origin, std::borrow::Cow::Borrowed(parts), None);
    };
    let proxy = route.proxy().clone();
    let head = match proxy.credentials().and_then(|c| http::HeaderValue::try_from(c.basic()).ok()) {
        Some(mut value) if !parts.headers.contains_key(http::header::PROXY_AUTHORIZATION) => {
            value.set_sensitive(true);
            let mut owned = parts.clone();
            owned.headers.insert(http::header::PROXY_AUTHORIZATION, value);
            std::borrow::Cow::Owned(owned)
        }
        _ => std::borrow::Cow::Borrowed(parts),
    };
    (http1::TargetForm::Absolute, head, Some(proxy))
}

/// A `407` from an HTTP proxy on an absolute-form request: a typed error
/// naming the proxy (never its credentials); else the response goes on.
///
/// # Errors
/// [`ErrorKind::ProxyAuth`](crate::ErrorKind::ProxyAuth) for a 407 from `via`.
pub fn proxy_answer<B>(
    response: http::Response<B>,
    via: Option<&switchyard_core::Proxy>,
) -> Result<http::Response<B>, crate::Error> {
    match via {
        Some(proxy) if response.status() == http::StatusCode::PROXY_AUTHENTICATION_REQUIRED => {
            Err(crate::Error::proxy_auth(&proxy.to_string(), proxy.credentials().is_some()))
        }
        _ => Ok(response),
    }
}

/// One request as every adapter's HTTP/1.1 exchange needs it (the body's bytes
/// travel separately, the adapter's way).
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The request head.
    pub parts: &'a http::request::Parts,
    /// Origin form, or absolute form through an HTTP proxy.
    pub form: http1::TargetForm,
    /// The body's length when known (`None`: streamed, chunked).
    pub body_len: Option<u64>,
    /// What the request allows (retries).
    pub facts: switchyard_core::pool::RequestFacts,
    /// The call's deadline, until the response head.
    pub deadline: Option<std::time::Instant>,
    /// The whole call's deadline: the response body must end by then too.
    pub call_deadline: Option<std::time::Instant>,
    /// How long the response body may take, from its head.
    pub body_timeout: Option<std::time::Duration>,
}

/// One HTTP/1.1 exchange up to its response head, the same on every adapter:
/// the probe before reuse, the driver's start, its events up to the head. The
/// adapter only moves bytes when [`H1Exchange::step`] asks it to.
pub struct H1Exchange<A: EngineHost> {
    shared: Arc<A>,
    call: CallId,
    connection: ConnectionId,
    source: Source,
    facts: switchyard_core::pool::RequestFacts,
    /// The request has a body (so `request_body_start` follows its head).
    has_body: bool,
    live: Option<Live<A>>,
}

/// What [`H1Exchange::step`] says. (Returned once per step and matched at
/// once, so the large variant is not boxed.)
#[allow(clippy::large_enum_variant)]
pub enum Step<'a, A: EngineHost> {
    /// Move bytes for the driver (and feed it the body), then ask again.
    Io(&'a A, &'a mut A::Wire, &'a mut http1::Driver),
    /// The response head (its body owns the connection now), or how the
    /// attempt ended without one.
    Done(Result<http::Response<H1Body<A>>, crate::exchange::Attempted>),
}

impl<A: EngineHost> H1Exchange<A> {
    /// Starts `request` on the leased connection. A pooled connection is
    /// probed first: a server may have closed it while it was idle, and then
    /// nothing is written (the core retries elsewhere).
    pub fn start(
        shared: &Arc<A>,
        call: CallId,
        (connection, source): (ConnectionId, Source),
        conn: Option<Box<H1Conn<A::Wire>>>,
        request: &Call<'_>,
    ) -> Result<Self, crate::exchange::Attempted> {
        use crate::exchange::{body_kind, stale, stale_after, Attempted};
        let facts = request.facts;
        let Some(mut conn) = conn else {
            return Err(stale("the connection's socket was already closed", facts));
        };
        if conn.conn.needs_probe() {
            if let Err(reason) = A::check(&mut conn) {
                return Err(stale_after(reason, facts));
            }
        }
        let hub = shared.hub();
        let framing = body_kind(request.body_len, &request.parts.headers);
        let start = http1::Request::new(request.parts, request.form, framing)
            .deadline(request.deadline.map(|d| hub.from_std(d)))
            .call_deadline(request.call_deadline.map(|d| hub.from_std(d)))
            .body_timeout(request.body_timeout);
        let H1Conn { wire, conn } = *conn;
        match conn.start(hub.now(), start) {
            Ok(driver) => {
                if hub.is_listening() {
                    let at = hub.now();
                    hub.emit(move |l| l.request_headers_start(call, at));
                }
                Ok(H1Exchange {
                    shared: Arc::clone(shared),
                    call,
                    connection,
                    source,
                    facts,
                    has_body: request.body_len != Some(0),
                    live: Some(Box::new((wire, driver))),
                })
            }
            Err(refused) => {
                // Nothing was written: the connection goes back as it was.
                shared.release(call, connection, Ok(Box::new(H1Conn { wire, conn: refused.conn })));
                Err(Attempted::Fatal(crate::Error::invalid_request(refused.error.to_string())))
            }
        }
    }

    /// Runs the exchange to its response head; `pump` moves bytes for the
    /// driver whenever it asks (blocking adapters; an async adapter loops on
    /// [`H1Exchange::step`] itself).
    ///
    /// # Errors
    /// How the attempt ended without a response head.
    pub fn run_blocking(
        mut self,
        mut pump: impl FnMut(&A, &mut A::Wire, &mut http1::Driver),
    ) -> Result<http::Response<H1Body<A>>, crate::exchange::Attempted> {
        loop {
            match self.step() {
                Step::Io(shared, wire, driver) => pump(shared, wire, driver),
                Step::Done(done) => return done,
            }
        }
    }

    /// The next step: I/O for the driver, or the end of the exchange's first
    /// half (listeners hear `request_headers_end`, `request_body_start`/`_end`,
    /// `response_headers_start`/`_end` as they happen).
    pub fn step(&mut self) -> Step<'_, A> {
        use crate::exchange::{before_head, Attempted, BeforeHead};
        let Some(live) = self.live.as_mut() else {
            return Step::Done(Err(crate::exchange::stale("the exchange already ended", self.facts)));
        };
        match before_head(self.shared.hub(), self.call, &mut live.1, self.facts, self.has_body) {
            BeforeHead::NeedIo => match self.live.as_deref_mut() {
                Some((wire, driver)) => Step::Io(&*self.shared, wire, driver),
                None => Step::Done(Err(crate::exchange::stale("the exchange already ended", self.facts))),
            },
            BeforeHead::Head(head) => {
                let Some(live) = self.live.take() else {
                    return Step::Done(Err(crate::exchange::stale("the exchange already ended", self.facts)));
                };
                let (mut parts, ()) = head.into_parts();
                let carrier = crate::Carrier { connection: self.connection, source: self.source };
                crate::exchange::head_received(&self.shared, self.call, carrier, &mut parts);
                let body = H1Body::new(Arc::clone(&self.shared), self.call, self.connection, live);
                Step::Done(Ok(http::Response::from_parts(parts, body)))
            }
            // The socket closes with the exchange; the pool decides what follows.
            BeforeHead::Failed(failure) => {
                self.live = None;
                Step::Done(Err(Attempted::Failed(failure)))
            }
            BeforeHead::Refused(why) => {
                if let Some(live) = self.live.take() {
                    let (wire, driver) = *live;
                    self.shared.release_h1(self.call, self.connection, wire, driver);
                }
                Step::Done(Err(Attempted::Fatal(crate::Error::invalid_request(why))))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The engine's rules with a fake adapter (numbers for sockets, tasks and
    //! waiters) and a real pool, on virtual time.
    #![allow(clippy::unwrap_used)]

    use super::*;
    use switchyard_core::{Address, PoolConfig, Scheme};

    struct Fake;
    impl Adapter for Fake {
        type Socket = u32;
        type Wire = u32;
        type Task = u32;
        type H2 = u32;
        type Job = ();
        type Waiter = u32;
        type Local = ();
        fn install(&self, _: ConnectionId, _: Protocol, socket: u32) -> Option<Installed<Self>> {
            let conn = http1::Conn::new(http1::DriverConfig::default());
            Some(Installed::Http1(Box::new(H1Conn { wire: socket, conn })))
        }
    }

    struct World {
        engine: Engine<Fake>,
        pool: Pool,
        now: Instant,
    }

    impl World {
        fn new() -> World {
            World { engine: Engine::default(), pool: Pool::new(PoolConfig::default()), now: Instant::ZERO }
        }
        /// Performs every action the pool emitted; the effects, in order.
        fn effects(&mut self) -> Vec<Effect<Fake>> {
            let mut out = Vec::new();
            while let Some(action) = self.pool.poll_action() {
                out.extend(self.engine.perform(&Fake, &mut self.pool, self.now, action));
            }
            out
        }
        /// A call to 127.0.0.1 waiting on `waiter`, up to its connect: the attempt.
        fn call_until_connect(&mut self, waiter: u32) -> (CallId, AttemptId) {
            let address = Address::builder(Scheme::Http, "127.0.0.1", 80).build().unwrap();
            let call = self.pool.acquire(self.now, address, switchyard_core::AcquireOptions::default());
            self.engine.wait(call, waiter);
            let mut effects = self.effects();
            // An IP literal may need no lookup; a name does.
            if let [Effect::Resolve { query, .. }] = effects.as_slice() {
                let query = *query;
                self.pool.handle_dns(self.now, query, Ok(vec!["127.0.0.1".parse().unwrap()])).unwrap();
                effects = self.effects();
            }
            match effects.as_slice() {
                [Effect::Connect { attempt, route }] if route.socket_addr().port() == 80 => (call, *attempt),
                _ => panic!("expected one Connect"),
            }
        }
        /// The lease a waiter got.
        fn lease(effects: Vec<Effect<Fake>>) -> (u32, Lease<Fake>) {
            let mut answers = effects.into_iter().filter_map(|e| match e {
                Effect::Answer { waiter, answer: Ok(lease), .. } => Some((waiter, lease)),
                _ => None,
            });
            answers.next().expect("an answer")
        }
    }

    #[test]
    fn a_connected_attempt_becomes_the_waiting_calls_lease_and_returns_idle() {
        let mut w = World::new();
        let (call, attempt) = w.call_until_connect(1);
        assert!(w.engine.attempt_started(attempt, 7).is_none(), "running: the engine keeps the handle");
        assert!(w.engine.handle_connected(&mut w.pool, w.now, attempt, Ok(42)).is_none());
        let (waiter, lease) = World::lease(w.effects());
        let Lease::H1 { connection, conn: Some(conn), .. } = lease else {
            panic!("an HTTP/1.1 lease with its socket")
        };
        assert_eq!((waiter, conn.wire), (1, 42));
        assert!(!w.engine.is_waiting(call), "answered: no longer waiting");
        // Back idle; the next call gets the same socket.
        assert!(w.engine.release_h1(&mut w.pool, w.now, call, connection, Ok(conn)).is_none());
        let address = Address::builder(Scheme::Http, "127.0.0.1", 80).build().unwrap();
        let next = w.pool.acquire(w.now, address, switchyard_core::AcquireOptions::default());
        w.engine.wait(next, 2);
        let (waiter, lease) = World::lease(w.effects());
        assert!(matches!(lease, Lease::H1 { conn: Some(c), .. } if c.wire == 42) && waiter == 2);
    }

    #[test]
    fn a_cancelled_attempt_hands_its_late_task_and_socket_back_to_be_closed() {
        let mut w = World::new();
        let (call, attempt) = w.call_until_connect(1);
        w.pool.cancel(w.now, call);
        w.engine.stop_waiting(call);
        assert!(w.effects().is_empty(), "no task handle yet: nothing to abort now");
        assert_eq!(w.engine.attempt_started(attempt, 7), Some(7), "the late handle comes back: abort it");
        assert_eq!(
            w.engine.handle_connected(&mut w.pool, w.now, attempt, Ok(42)),
            Some(42),
            "and its socket"
        );
    }

    #[test]
    fn a_connection_handed_out_while_probed_waits_for_the_verdict() {
        for healthy in [true, false] {
            let mut w = World::new();
            let (call, attempt) = w.call_until_connect(1);
            w.engine.handle_connected(&mut w.pool, w.now, attempt, Ok(42));
            let Lease::H1 { connection, conn: Some(conn), .. } = World::lease(w.effects()).1 else {
                panic!()
            };
            w.engine.release_h1(&mut w.pool, w.now, call, connection, Ok(conn));
            // The sweep takes the idle socket out to probe it ...
            let probe = w.engine.perform(&Fake, &mut w.pool, w.now, PoolAction::Probe { connection });
            let Some(Effect::Probe { conn, .. }) = probe else { panic!("a probe effect") };
            // ... and a call is handed the connection meanwhile: it waits.
            let address = Address::builder(Scheme::Http, "127.0.0.1", 80).build().unwrap();
            let next = w.pool.acquire(w.now, address, switchyard_core::AcquireOptions::default());
            w.engine.wait(next, 2);
            assert!(w.effects().is_empty(), "no answer before the probe is back");
            let verdict = if healthy { Ok(()) } else { Err(CloseReason::ServerClose) };
            let then = w.engine.handle_probed(&mut w.pool, w.now, connection, conn, verdict);
            let answer = then.iter().find_map(|e| match e {
                Effect::Answer { waiter: 2, answer: Ok(Lease::H1 { conn, .. }), .. } => Some(conn.is_some()),
                _ => None,
            });
            assert_eq!(
                answer,
                Some(healthy),
                "the socket when healthy, none (a stale, retried lease) when not"
            );
            let closed = then.iter().any(|e| matches!(e, Effect::Close(Closed::H1(_))));
            assert_eq!(closed, !healthy, "a dead socket closes");
        }
    }
}
