//! Carrying out the engine's effects on threads: DNS queries, connects and
//! handshakes as jobs, waiting calls answered, sockets probed and closed; and
//! setting up a connection on the race's winner: SOCKS5 or an HTTP `CONNECT`
//! tunnel (the core's proxy handshake, driven on the blocking socket), then
//! TLS, each step bounded by the handshake timeout.

use std::io::{self, Read, Write};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use switchyard_common::engine::{self, Adapter, Closed, Effect, EngineHost, Installed};
use switchyard_common::Hub;
use switchyard_core::handshake::{Handshake, ProxyHandshake};
use switchyard_core::{
    AttemptId, CloseReason, ConnectError, ConnectionId, DnsAnswer, DnsError, Family, Instant, Protocol,
    TlsFacts,
};

use crate::dial::Dial;
use crate::h1::Wire;
use crate::shared::{fire_due, IoState, Keeper, Msg, Shared, State};
use crate::stream::{peek, Sock, Stream};

/// An idle HTTP/1.1 connection: its socket and the core's view of it.
pub(crate) type H1Conn = engine::H1Conn<Wire>;

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
                // The system resolver answers per family: A and AAAA on two
                // threads, each answer into the race as it comes.
                let families: &[Option<Family>] =
                    if self.resolver.per_family() { &[Some(Family::V6), Some(Family::V4)] } else { &[None] };
                for &family in families {
                    let me = Arc::clone(self);
                    let name = name.clone();
                    let started = self.thread(move || {
                        let result = match family {
                            Some(f) => me.resolver.resolve_family(&name, port, f),
                            None => me.resolver.resolve(&name, port),
                        };
                        let answer = DnsAnswer {
                            family,
                            result: result.map_err(|e| DnsError::from_io(&e)),
                            ttl: None,
                        };
                        me.input(|st, now| {
                            if let Err(misuse) = st.pool.handle_dns_answer(now, query, answer) {
                                tracing::warn!("{misuse}");
                            }
                        });
                    });
                    if !started {
                        let answer =
                            DnsAnswer { family, result: Err(DnsError::from_io(&no_thread())), ttl: None };
                        self.input(|st, now| {
                            let _ = st.pool.handle_dns_answer(now, query, answer);
                        });
                    }
                }
            }
            // A TCP connect: the calling thread's own first one starts on it
            // (see `dial`), any other on a worker thread.
            Effect::Connect { attempt, route } if route.is_quic() => {
                let why = std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    format!("HTTP/3 (QUIC) is not available on the blocking adapter: {route}"),
                );
                self.attempt_not_started(attempt, ConnectError::from_io(&why));
            }
            Effect::Connect { attempt, route }
                if self.settings.connector.is_none() && route.unix_socket().is_none() =>
            {
                let addr = route.socket_addr();
                let me = Arc::clone(self);
                if let Err(job) = crate::dial::hold(Box::new(move |first| me.dial(attempt, addr, first))) {
                    let limit = self.settings.connect_timeout;
                    if !self.thread(move || job(limit)) {
                        self.attempt_not_started(attempt, ConnectError::from_io(&no_thread()));
                    }
                }
            }
            Effect::Connect { attempt, route } => {
                let me = Arc::clone(self);
                let started = self.thread(move || {
                    let opened = match (&me.settings.connector, route.unix_socket()) {
                        (Some(hook), _) => hook.0.connect(&route),
                        (_, Some(path)) => connect_unix(path),
                        (None, None) => unreachable!("a TCP connect is dialled"),
                    };
                    me.connected(attempt, opened.map(Stream::Tcp));
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
                let config = self.settings.tls.get(route.address().tcp_protocols());
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
                    let result =
                        crate::connect::establish(tcp, &route, (config, verification), limit, tunnelled);
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
            Effect::Start((connection, job)) => {
                // One thread per HTTP/2 connection, for its life: reads.
                let spawned = std::thread::Builder::new().name("switchyard-h2".into()).spawn(job);
                if spawned.is_err() {
                    self.input(|st, now| {
                        let _ = st.pool.connection_closed(now, connection, CloseReason::Failure);
                    });
                }
            }
            Effect::Ping { handle, .. } => crate::h2::ping(&handle),
            Effect::End { handle, reason, .. } => crate::h2::end(&handle, reason),
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
        if self.watching.any() {
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
    type Task = Option<Sock>;
    type H2 = crate::h2::H2Handle;
    /// An HTTP/2 connection's reader thread.
    type Job = (ConnectionId, Box<dyn FnOnce() + Send>);
    type Waiter = mpsc::Sender<Msg>;
    type Local = Keeper;

    fn local_addr(&self, socket: &Stream) -> Option<std::net::SocketAddr> {
        socket.local_addr()
    }

    fn install(
        &self,
        connection: ConnectionId,
        protocol: Protocol,
        socket: Stream,
    ) -> Option<Installed<Self>> {
        Some(match protocol {
            Protocol::Http1 => Installed::Http1(Box::new(H1Conn {
                wire: Wire::new(socket),
                conn: switchyard_core::http1::Conn::new(self.settings.driver),
            })),
            Protocol::Http2 | Protocol::H2PriorKnowledge => {
                match crate::h2::prepare(self, socket, connection) {
                    Ok((handle, job)) => Installed::Http2(handle, (connection, job)),
                    Err(e) => {
                        tracing::debug!(%connection, "HTTP/2 connection not set up: {e}");
                        return None;
                    }
                }
            }
            // No QUIC here: its attempts fail before they connect.
            Protocol::Http3 => return None,
        })
    }

    fn lease_h2(&self, handle: &crate::h2::H2Handle, source: switchyard_core::Source) -> crate::h2::H2Handle {
        handle.leased(source)
    }
}

impl Shared {
    /// A TCP connect for `attempt`: waits up to `first` on this thread, and
    /// hands what is left of the connect timeout to a worker thread.
    fn dial(self: &Arc<Self>, attempt: AttemptId, addr: std::net::SocketAddr, first: Duration) {
        let limit = self.settings.connect_timeout;
        match crate::dial::start(&self.settings.tcp, addr, limit, first) {
            Dial::Done(result) => self.connected(attempt, result.map(|s| Stream::Tcp(Sock::Tcp(s)))),
            Dial::Pending(pending) => {
                let me = Arc::clone(self);
                let rest = move || me.connected(attempt, pending.finish().map(|s| Stream::Tcp(Sock::Tcp(s))));
                if !self.thread(rest) {
                    self.attempt_not_started(attempt, ConnectError::from_io(&no_thread()));
                }
            }
        }
    }

    /// A connect's outcome, into the race (a cancelled attempt's socket
    /// comes back and closes here).
    fn connected(self: &Arc<Self>, attempt: AttemptId, opened: io::Result<Stream>) {
        let result = opened.map_err(|e| ConnectError::from_io(&e));
        drop(self.input(|st, now| st.io.engine.handle_connected(&mut st.pool, now, attempt, result)));
    }
}

fn no_thread() -> std::io::Error {
    std::io::Error::other("the system refused a thread for the connection attempt")
}

/// SOCKS5, `CONNECT` and TLS, as the route requires, on the race's winner;
/// every read and write bounded by the handshake timeout (the core's own
/// deadline — the connect timeout for a tunnel — cancels sooner, shutting the
/// socket down). `tunnelled` runs between a tunnel and TLS.
pub(crate) fn establish(
    tcp: Sock,
    route: &switchyard_core::Route,
    (config, verification): (Arc<rustls::ClientConfig>, switchyard_common::tls::Verification),
    limit: Duration,
    tunnelled: impl FnOnce(),
) -> Result<(Stream, Option<Protocol>, Option<TlsFacts>), ConnectError> {
    let io = |e: std::io::Error| ConnectError::from_io(&e);
    tcp.set_read_timeout(Some(limit)).map_err(io)?;
    tcp.set_write_timeout(Some(limit)).map_err(io)?;
    let mut tcp = tcp;
    // A read or write the socket's timeout ended is that phase's timeout,
    // typed as the core's own timer would have said it.
    let timed = |phase: fn(Duration) -> ConnectError| {
        move |e: ConnectError| match e {
            ConnectError::Io { kind: io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut, .. } => {
                phase(limit)
            }
            other => other,
        }
    };
    // SOCKS5, or a CONNECT tunnel for an https origin, with the proxy's credentials.
    if let Some(hs) = ProxyHandshake::for_route(route)? {
        proxy_handshake(&mut tcp, hs).map_err(timed(|after| ConnectError::TunnelTimeout { after }))?;
        if route.requires_tls() {
            tunnelled();
        }
    }
    let direct = (*route.proxy() == switchyard_core::Proxy::Direct && route.unix_socket().is_none())
        .then(|| route.socket_addr().ip());
    let established = if route.requires_tls() {
        let (stream, alpn, facts) =
            crate::stream::handshake(tcp, config, route.address().host(), (verification, direct))
                .map_err(timed(|after| ConnectError::HandshakeTimeout { after }))?;
        (stream, alpn, Some(facts))
    } else {
        (Stream::Tcp(tcp), None, None)
    };
    // Exchanges set their own timeouts.
    established.0.tcp().set_read_timeout(None).map_err(io)?;
    established.0.tcp().set_write_timeout(None).map_err(io)?;
    Ok(established)
}

/// Runs a proxy handshake (the core's state machine) on `tcp`: writes what it
/// asks, reads what the proxy answers, until the tunnel is open. The socket's
/// timeouts bound each step.
fn proxy_handshake(tcp: &mut Sock, mut hs: ProxyHandshake) -> Result<(), ConnectError> {
    let io = |e: io::Error| ConnectError::from_io(&e);
    let mut buf = BytesMut::with_capacity(512);
    let mut scratch = [0u8; 512];
    let mut eof = false;
    loop {
        while let Some(out) = hs.poll_transmit() {
            tcp.write_all(&out).map_err(io)?;
        }
        if hs.handle_read(&mut buf, eof)? == Handshake::Done {
            return Ok(());
        }
        if !hs.wants_write() {
            match tcp.read(&mut scratch).map_err(io)? {
                0 => eof = true,
                n => buf.extend_from_slice(&scratch[..n]),
            }
        }
    }
}

/// A Unix-domain socket connect (a path's connect does not wait on a peer
/// across a network: it succeeds or fails at once), its failure naming the path.
fn connect_unix(path: &std::path::Path) -> io::Result<Sock> {
    #[cfg(unix)]
    {
        std::os::unix::net::UnixStream::connect(path)
            .map(Sock::Unix)
            .map_err(|e| io::Error::new(e.kind(), format!("Unix socket {}: {e}", path.display())))
    }
    #[cfg(not(unix))]
    {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("Unix socket {}: not supported on this platform", path.display()),
        ))
    }
}
