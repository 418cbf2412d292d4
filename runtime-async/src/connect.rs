//! Carrying out the engine's effects: DNS lookups and connect attempts spawned
//! as tasks, SOCKS5 / `CONNECT` / TLS set up on the race's winner, sockets
//! installed as HTTP/1.1 or HTTP/2 connections, waiting calls answered, idle
//! sockets probed and closed. Results come back to the pool as new inputs.

use std::io;
use std::sync::Arc;

use bytes::BytesMut;
use switchyard_core::handshake::{Handshake, ProxyHandshake};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

use switchyard_common::engine::{Adapter, Closed, Effect, EngineHost, Installed};
use switchyard_common::{Hub, Resolved};
use switchyard_core::{
    AcquireError, CloseReason, ConnectError, ConnectionId, DnsAnswer, DnsError, Family, Protocol, QueryId,
    TlsFacts,
};

use crate::h1::{H1Conn, Wire};
use crate::h2::H2Handle;
use crate::runtime::{BoxFuture, Io, Task};
use crate::shared::{IoState, Lease, Shared, State, TimerPlan};

/// A connect attempt's socket: a byte stream (TCP, TLS, a tunnel, a Unix
/// socket, a connector hook's), or a QUIC connection on its way up.
pub(crate) enum Sock {
    /// A byte stream, for HTTP/1.1 and HTTP/2.
    Stream(Io),
    /// A QUIC connection, for HTTP/3.
    #[cfg(feature = "http3")]
    Quic(Box<crate::h3::Quic>),
}

/// A shared handle on a multiplexed connection: HTTP/2's, or HTTP/3's.
#[derive(Clone, Debug)]
pub(crate) enum Mux {
    /// HTTP/2.
    H2(H2Handle),
    /// HTTP/3.
    #[cfg(feature = "http3")]
    H3(crate::h3::H3Handle),
}

impl Adapter for Shared {
    type Socket = Sock;
    type Wire = Wire;
    type Task = Box<dyn Task>;
    type H2 = Mux;
    type Job = (ConnectionId, BoxFuture<()>);
    type Waiter = oneshot::Sender<Result<Lease, AcquireError>>;
    type Local = TimerPlan;

    fn install(&self, connection: ConnectionId, protocol: Protocol, socket: Sock) -> Option<Installed<Self>> {
        Some(match (protocol, socket) {
            (Protocol::Http1, Sock::Stream(socket)) => Installed::Http1(Box::new(H1Conn {
                wire: Wire::new(socket),
                conn: switchyard_core::http1::Conn::new(self.settings.driver),
            })),
            (Protocol::Http2 | Protocol::H2PriorKnowledge, Sock::Stream(socket)) => {
                let (handle, job) = crate::h2::prepare(self, socket, connection);
                Installed::Http2(Mux::H2(handle), (connection, job))
            }
            #[cfg(feature = "http3")]
            (Protocol::Http3, Sock::Quic(quic)) => {
                let (handle, job) = crate::h3::prepare(self, *quic, connection);
                Installed::Http2(Mux::H3(handle), (connection, job))
            }
            // A protocol its socket cannot carry: refused (closed as failed).
            _ => return None,
        })
    }

    fn local_addr(&self, socket: &Sock) -> Option<std::net::SocketAddr> {
        #[allow(irrefutable_let_patterns)]
        let Sock::Stream(socket) = socket
        else {
            return None;
        };
        // Over TLS, the TCP stream inside; else the runtime's own stream.
        let any: &dyn std::any::Any = &**socket;
        match any.downcast_ref::<tokio_rustls::client::TlsStream<Io>>() {
            Some(tls) => self.rt.local_addr(tls.get_ref().0),
            None => self.rt.local_addr(socket),
        }
    }

    fn lease_h2(&self, handle: &Mux, source: switchyard_core::Source) -> Mux {
        match handle {
            Mux::H2(h) => Mux::H2(h.leased(source)),
            #[cfg(feature = "http3")]
            Mux::H3(h) => Mux::H3(h.leased(source)),
        }
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
                None if self.resolver.per_family() => {
                    // The system resolver: A and AAAA as two blocking lookups
                    // at once, so a slow AAAA never holds up IPv4 longer than
                    // the resolution delay.
                    for family in [Family::V6, Family::V4] {
                        let resolver = Arc::clone(&self.resolver);
                        let name = name.clone();
                        let lookup =
                            self.rt.unblock(Box::new(move || resolver.resolve_family(&name, port, family)));
                        self.spawn_lookup(
                            query,
                            Box::pin(async move { answer(Some(family), lookup.await.map(Resolved::new)) }),
                        );
                    }
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
            #[cfg(feature = "http3")]
            Effect::Connect { attempt, route } if route.is_quic() => {
                let me = Arc::clone(self);
                let task = Box::pin(async move {
                    let result = crate::h3::connect(&me, &route).await.map(|q| Sock::Quic(Box::new(q)));
                    let stale =
                        me.input(|st, now| st.io.engine.handle_connected(&mut st.pool, now, attempt, result));
                    drop(stale);
                });
                self.start_attempt(attempt, task);
            }
            #[cfg(not(feature = "http3"))]
            Effect::Connect { attempt, route } if route.is_quic() => {
                let why = std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    "HTTP/3 needs the adapter's `http3` feature (QUIC)",
                );
                let me = Arc::clone(self);
                let task = Box::pin(async move {
                    let result = Err(ConnectError::from_io(&why));
                    let stale =
                        me.input(|st, now| st.io.engine.handle_connected(&mut st.pool, now, attempt, result));
                    drop(stale);
                });
                self.start_attempt(attempt, task);
            }
            Effect::Connect { attempt, route } => {
                let connecting = match (&self.settings.connector, route.unix_socket(), &self.settings.tcp) {
                    (Some(hook), _, _) => hook.0.connect(&route),
                    (None, Some(path), _) => self.rt.connect_unix(path),
                    (None, None, None) => self.rt.connect(route.socket_addr()),
                    (None, None, Some(options)) => self.rt.connect_with(route.socket_addr(), options),
                };
                let me = Arc::clone(self);
                let task = Box::pin(async move {
                    let result = connecting.await.map(Sock::Stream).map_err(|e| ConnectError::from_io(&e));
                    let stale =
                        me.input(|st, now| st.io.engine.handle_connected(&mut st.pool, now, attempt, result));
                    drop(stale); // a cancelled attempt's socket closes here
                });
                self.start_attempt(attempt, task);
            }
            Effect::Handshake { attempt, route, socket } => {
                // Built with the client: a lookup, nothing built here.
                let config = self.settings.tls.get(route.address().tcp_protocols());
                let verification = self.settings.tls.verification;
                let me = Arc::clone(self);
                let task = Box::pin(async move {
                    let tunnelled = || {
                        me.input(|st, now| st.io.engine.handle_tunnelled(&mut st.pool, now, attempt));
                    };
                    let result = match socket {
                        Sock::Stream(io) => establish(io, &route, (config, verification), tunnelled)
                            .await
                            .map(|(io, alpn, facts)| (Sock::Stream(io), alpn, facts)),
                        #[cfg(feature = "http3")]
                        Sock::Quic(quic) => crate::h3::handshake(*quic, &route, verification)
                            .await
                            .map(|(q, facts)| (Sock::Quic(Box::new(q)), Some(Protocol::Http3), Some(facts))),
                    };
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
            Effect::Ping { connection, handle } => match &handle {
                Mux::H2(h) => crate::h2::ping(self, connection, h),
                #[cfg(feature = "http3")]
                Mux::H3(h) => crate::h3::ping(h),
            },
            Effect::End { handle, reason, .. } => match &handle {
                Mux::H2(h) => crate::h2::end(h, reason),
                #[cfg(feature = "http3")]
                Mux::H3(h) => crate::h3::end(h, reason),
            },
            Effect::Probe { .. } => {} // judged in `carry_out`
            // Dropping the socket (or the HTTP/2 handle) closes it.
            Effect::Close(closed) => drop::<Closed<Self>>(closed),
        }
    }

    fn after_input(&self, st: &mut State) -> bool {
        if self.watching.any() {
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
    /// Runs a lookup as a task and feeds its answer to the pool (a failure to
    /// spawn is a failed lookup, never a call left waiting).
    fn spawn_lookup(self: &Arc<Self>, query: QueryId, lookup: BoxFuture<DnsAnswer>) {
        let me = Arc::clone(self);
        let task: BoxFuture<()> = Box::pin(async move {
            let answer = lookup.await;
            me.input(|st, now| {
                if let Err(misuse) = st.pool.handle_dns_answer(now, query, answer) {
                    tracing::warn!("{misuse}");
                }
            });
        });
        // A call collecting on this thread drives it itself (`adopt`); the
        // engine never aborts a lookup, so its handle is not kept.
        let Err(task) =
            crate::adopt::offer(crate::adopt::Work::Lookup(query), task, || self.rt.drives_inline())
        else {
            return;
        };
        if self.rt.spawn(task).is_none() {
            self.lookup_failed_to_start(query);
        }
    }

    /// A lookup the runtime could not take: it fails, never a call left
    /// waiting.
    pub(crate) fn lookup_failed_to_start(self: &Arc<Self>, query: QueryId) {
        self.input(|st, now| {
            let _ = st.pool.handle_dns(now, query, Err(DnsError::from_io(&no_executor())));
        });
    }

    /// Spawns an attempt's task and tells the engine its handle (aborting it
    /// when the attempt was cancelled meanwhile); without an executor, the
    /// attempt fails.
    fn start_attempt(self: &Arc<Self>, attempt: switchyard_core::AttemptId, task: BoxFuture<()>) {
        // A call collecting on this thread drives it itself (`adopt`).
        let task =
            match crate::adopt::offer(crate::adopt::Work::Attempt(attempt), task, || self.rt.drives_inline())
            {
                Ok(handle) => {
                    if let Some(orphan) = self.attempt_running(attempt, handle) {
                        orphan.abort();
                    }
                    return;
                }
                Err(task) => task,
            };
        match self.rt.spawn(task) {
            Some(task) => {
                if let Some(orphan) = self.attempt_running(attempt, task) {
                    orphan.abort();
                }
            }
            None => self.attempt_not_started(attempt, ConnectError::from_io(&no_executor())),
        }
    }
}

impl Shared {
    /// An adopted attempt its caller left and the runtime could not take:
    /// it fails, as an attempt that could not be started.
    pub(crate) fn attempt_failed_to_start(self: &Arc<Self>, attempt: switchyard_core::AttemptId) {
        self.attempt_not_started(attempt, ConnectError::from_io(&no_executor()));
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
        proxy_handshake(&mut io, hs).await?;
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
        let direct = (*route.proxy() == switchyard_core::Proxy::Direct && route.unix_socket().is_none())
            .then(|| route.socket_addr().ip());
        let (alpn, facts) = tls::negotiated(stream.get_ref().1, verification, direct);
        return Ok((Box::new(stream), alpn, Some(facts)));
    }
    Ok((io, None, None))
}

/// Runs a proxy handshake (the core's state machine) on `io`: writes what it
/// asks, reads what the proxy answers, until the tunnel is open.
async fn proxy_handshake(io: &mut Io, mut hs: ProxyHandshake) -> Result<(), ConnectError> {
    let io_err = |e: io::Error| ConnectError::from_io(&e);
    let mut buf = BytesMut::with_capacity(512);
    let mut eof = false;
    loop {
        while let Some(out) = hs.poll_transmit() {
            io.write_all(&out).await.map_err(io_err)?;
        }
        if hs.handle_read(&mut buf, eof)? == Handshake::Done {
            return Ok(());
        }
        if !hs.wants_write() && io.read_buf(&mut buf).await.map_err(io_err)? == 0 {
            eof = true;
        }
    }
}
