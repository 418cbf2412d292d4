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

use std::collections::HashMap;

use switchyard_core::http1;
use switchyard_core::{
    AcquireError, AttemptId, CallId, CloseReason, ConnectError, ConnectionId, Host, Instant, Pool,
    PoolAction, Protocol, QueryId, Reuse, Route, TlsFacts,
};

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

    /// An established socket becomes a connection speaking `protocol`. Runs
    /// under the lock: no I/O, nothing that waits. `None` refuses it (the
    /// connection is closed as failed).
    fn install(
        &self,
        connection: ConnectionId,
        protocol: Protocol,
        socket: Self::Socket,
    ) -> Option<Installed<Self>>;
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
    /// Idle, its socket being probed outside the lock.
    H1Probing,
    H2(A::H2),
}

/// The attempts, connections and waiters of one client. See the [module
/// docs](self).
pub struct Engine<A: Adapter> {
    waiters: HashMap<CallId, A::Waiter>,
    attempts: HashMap<AttemptId, Attempt<A>>,
    conns: HashMap<ConnectionId, Conn<A>>,
}

impl<A: Adapter> Default for Engine<A> {
    fn default() -> Self {
        Engine { waiters: HashMap::new(), attempts: HashMap::new(), conns: HashMap::new() }
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

    /// The waiting calls, lowest id first, and their waiters.
    pub fn waiters(&self) -> impl Iterator<Item = (CallId, &A::Waiter)> {
        let mut all: Vec<_> = self.waiters.iter().map(|(c, w)| (*c, w)).collect();
        all.sort_by_key(|(c, _)| *c);
        all.into_iter()
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
            PoolAction::Acquired { call, connection, .. } => {
                let lease = match self.conns.get_mut(&connection) {
                    Some(Conn::H2(handle)) => Lease::H2 { connection, handle: handle.clone() },
                    Some(slot @ Conn::H1Idle(_)) => match std::mem::replace(slot, Conn::H1Busy) {
                        Conn::H1Idle(c) => Lease::H1 { connection, conn: Some(c) },
                        _ => Lease::H1 { connection, conn: None },
                    },
                    Some(slot @ Conn::H1Probing) => {
                        // Handed out while its probe runs: the exchange finds no
                        // socket, fails before writing and is retried elsewhere.
                        *slot = Conn::H1Busy;
                        Lease::H1 { connection, conn: None }
                    }
                    Some(Conn::H1Busy) | None => {
                        tracing::debug!("{connection} handed out without a socket");
                        Lease::H1 { connection, conn: None }
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
                Some(slot @ Conn::H1Idle(_)) => match std::mem::replace(slot, Conn::H1Probing) {
                    Conn::H1Idle(conn) => Some(Effect::Probe { connection, conn }),
                    _ => None,
                },
                _ => None,
            },
            PoolAction::Close { connection, .. } => match self.conns.remove(&connection)? {
                Conn::H1Idle(c) => Some(Effect::Close(Closed::H1(c))),
                Conn::H2(h) => Some(Effect::Close(Closed::H2(h))),
                Conn::H1Busy | Conn::H1Probing => None,
            },
        }
    }

    /// The task of a started attempt. When the attempt was cancelled
    /// meanwhile, the task comes back: abort it (after the lock).
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
        if !matches!(self.attempts.get(&attempt), Some(Attempt::Running(_))) {
            return result.ok();
        }
        let outcome = match result {
            Ok(socket) => {
                self.attempts.insert(attempt, Attempt::Ready(socket));
                pool.handle_connected(now, attempt)
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

    /// An attempt's handshakes ended. A cancelled attempt's socket comes back.
    pub fn handle_established(
        &mut self,
        pool: &mut Pool,
        now: Instant,
        attempt: AttemptId,
        result: Result<Handshaken<A>, ConnectError>,
    ) -> Option<A::Socket> {
        if !matches!(self.attempts.get(&attempt), Some(Attempt::Running(_))) {
            return result.ok().map(|(socket, _, _)| socket);
        }
        let outcome = match result {
            Ok((socket, alpn, facts)) => {
                self.attempts.insert(attempt, Attempt::Ready(socket));
                pool.handle_established(now, attempt, alpn, facts)
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
        if let Lease::H1 { connection, conn: Some(c) } = lease {
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
    /// back idle; a dead one is reported closed. What must close comes back.
    pub fn handle_probed(
        &mut self,
        pool: &mut Pool,
        now: Instant,
        connection: ConnectionId,
        conn: Box<H1Conn<A::Wire>>,
        verdict: Result<(), CloseReason>,
    ) -> Option<Box<H1Conn<A::Wire>>> {
        if !matches!(self.conns.get(&connection), Some(Conn::H1Probing)) {
            return Some(conn); // closed, or handed out, meanwhile
        }
        match verdict {
            Ok(()) => {
                self.conns.insert(connection, Conn::H1Idle(conn));
                None
            }
            Err(reason) => {
                self.conns.remove(&connection);
                let _ = pool.connection_closed(now, connection, reason);
                Some(conn)
            }
        }
    }
}
