//! Driving switchyard-core from a hand-written event loop — a complete driver:
//! mio for readiness, rustls's own sans-IO `ClientConnection` for TLS, and the
//! core for everything else: route planning and the connect race
//! ([`Pool`]), proxy tunnels ([`ProxyHandshake`]), every HTTP/1.1 exchange
//! ([`http1::Driver`]: partial writes, early answers, timeouts, keep-alive,
//! how far a failure got), HTTP/2 by ALPN ([`http2::Driver`]: several streams
//! on one connection, flow control, SETTINGS and GOAWAY for the pool, with
//! [`http2::Session`]'s verdicts), retries ([`Pool::exchange_failed`]) and
//! events.
//!
//! What this loop does itself is exactly the embedder's part:
//!
//! 1. **sockets and readiness** — non-blocking connects, reads and writes (mio);
//! 2. **the clock** — `now` on every input, sleeping until the earliest of the
//!    pool's and the drivers' `poll_timeout()`;
//! 3. **DNS** — answering `PoolAction::Resolve` (here with the blocking system
//!    resolver, to keep the example short);
//! 4. **TLS bytes** — moving records between the socket and rustls.
//!
//! Run: `cargo run -p switchyard-core --example fetch_loop [http://host:port/path ...]`
//! (URLs on the command line: `http://` only, as no public roots are loaded).
//! Without arguments it starts three loopback servers — a plain HTTP/1.1 origin
//! that closes every connection after its second answer, an HTTPS origin (with
//! a CA made at start), and an HTTP `CONNECT` proxy — and starts six calls at
//! once under a cap of one connection per origin: four to the plain origin
//! (sharing its connection in turn; after the server closes it, the core
//! retries the next call on a new one), two to the HTTPS origin through the
//! proxy (one tunnel, reused), one of them a POST with a body, and three to an
//! HTTP/2 origin (ALPN `h2`), which share one connection as concurrent streams.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

use std::collections::{BTreeMap, HashMap};
use std::io::{self, ErrorKind, Read, Write};
use std::net::ToSocketAddrs;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use switchyard_core::handshake::{Handshake, ProxyHandshake};
use switchyard_core::http1::{self, Event, Failure, Peek, TargetForm};
use switchyard_core::http2;
use switchyard_core::pool::{ExchangeFailure, RequestFacts};
use switchyard_core::{
    AcquireOptions, Address, AttemptId, CallId, ConnectError, ConnectionId, DnsError, FailureOutcome,
    Instant, Pool, PoolAction, PoolConfig, Protocol, Proxy, Reuse, Route, TlsFacts,
};

/// One call: what to send, and what came back.
struct Call {
    parts: http::request::Parts,
    body: Bytes,
    proxies: Vec<Proxy>,
    status: Option<u16>,
    received: Vec<u8>,
    outcome: Option<Result<(), String>>,
}

/// Where a socket stands.
enum Stage {
    /// TCP connecting (writability says how it went).
    Connecting(AttemptId),
    /// The route's handshakes: a proxy's, then TLS.
    Handshaking { attempt: AttemptId, route: Route, proxy: Option<ProxyHandshake>, buf: BytesMut },
    /// Ready; waiting for the core's word.
    Ready,
    /// A pooled connection, idle.
    Idle(http1::Conn),
    /// Carrying `call`'s exchange.
    Busy(ConnectionId, CallId, Box<http1::Driver>),
    /// An HTTP/2 connection: its driver, its rules, and its streams' calls.
    H2 {
        connection: ConnectionId,
        driver: Box<http2::Driver>,
        session: http2::Session,
        streams: BTreeMap<u32, CallId>,
    },
    /// Between states.
    Moving,
}

struct Sock {
    io: Wire,
    stage: Stage,
}

/// A socket's bytes: TCP, and rustls over it once TLS starts.
struct Wire {
    tcp: TcpStream,
    tls: Option<rustls::ClientConnection>,
}

/// What a non-blocking read gave.
enum Got {
    Bytes(Vec<u8>),
    Eof,
    Nothing,
}

impl Wire {
    /// Plaintext bytes: straight from TCP, or records through rustls.
    fn read(&mut self) -> io::Result<Got> {
        let mut chunk = [0u8; 16 * 1024];
        let Some(tls) = self.tls.as_mut() else {
            return match self.tcp.read(&mut chunk) {
                Ok(0) => Ok(Got::Eof),
                Ok(n) => Ok(Got::Bytes(chunk[..n].to_vec())),
                Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(Got::Nothing),
                Err(e) => Err(e),
            };
        };
        let mut eof = false;
        match tls.read_tls(&mut self.tcp) {
            Ok(0) => eof = true,
            Ok(_) => {
                tls.process_new_packets().map_err(|e| io::Error::new(ErrorKind::InvalidData, e))?;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        match tls.reader().read(&mut chunk) {
            Ok(0) => Ok(Got::Eof),
            Ok(n) => Ok(Got::Bytes(chunk[..n].to_vec())),
            Err(e) if e.kind() == ErrorKind::WouldBlock && eof => Ok(Got::Eof),
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(Got::Nothing),
            Err(e) => Err(e),
        }
    }

    /// Writes plaintext; returns how much was taken (rustls buffers; its
    /// records go out in [`Wire::flush`]).
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = match self.tls.as_mut() {
            None => return self.tcp.write(data),
            Some(tls) => tls.writer().write(data)?,
        };
        self.flush()?;
        Ok(n)
    }

    /// Sends what rustls holds, as far as the socket takes it.
    fn flush(&mut self) -> io::Result<()> {
        let Some(tls) = self.tls.as_mut() else { return Ok(()) };
        while tls.wants_write() {
            match tls.write_tls(&mut self.tcp) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// What an idle socket holds, asked without waiting (the core judges).
    fn peek(&mut self) -> Peek {
        match self.read() {
            Ok(Got::Nothing) => Peek::Quiet,
            Ok(Got::Eof) => Peek::Eof,
            Ok(Got::Bytes(_)) => Peek::Data,
            Err(_) => Peek::Error,
        }
    }
}

struct Loop {
    pool: Pool,
    poll: Poll,
    origin: std::time::Instant,
    tls: Arc<rustls::ClientConfig>,
    socks: HashMap<Token, Sock>,
    attempts: HashMap<AttemptId, Token>,
    conns: HashMap<ConnectionId, Token>,
    calls: BTreeMap<CallId, Call>,
    next_token: usize,
}

impl Loop {
    fn now(&self) -> Instant {
        Instant::ZERO + self.origin.elapsed()
    }

    /// Performs what the core asks, then tells listeners (here: stdout) what
    /// happened — every event, in order.
    fn drain(&mut self) {
        while let Some(action) = self.pool.poll_action() {
            self.perform(action);
        }
        while let Some(e) = self.pool.poll_event() {
            println!("  [{:>7.1} ms] {:?}", e.at.elapsed_since_origin().as_secs_f64() * 1e3, e.kind);
        }
    }

    fn perform(&mut self, action: PoolAction) {
        let now = self.now();
        match action {
            PoolAction::Resolve { query, host, port, .. } => {
                let answer = (host.to_string().as_str(), port)
                    .to_socket_addrs()
                    .map(|addrs| addrs.map(|a| a.ip()).collect())
                    .map_err(|e| DnsError::from_io(&e));
                self.pool.handle_dns(now, query, answer).unwrap();
            }
            PoolAction::Connect { attempt, route } => match TcpStream::connect(route.socket_addr()) {
                Ok(mut tcp) => {
                    let token = Token(self.next_token);
                    self.next_token += 1;
                    self.poll
                        .registry()
                        .register(&mut tcp, token, Interest::READABLE | Interest::WRITABLE)
                        .unwrap();
                    self.socks.insert(
                        token,
                        Sock { io: Wire { tcp, tls: None }, stage: Stage::Connecting(attempt) },
                    );
                    self.attempts.insert(attempt, token);
                }
                Err(e) => self.pool.handle_failed(now, attempt, ConnectError::from_io(&e)).unwrap(),
            },
            PoolAction::Handshake { attempt, route } => {
                let Some(s) = self.attempts.get(&attempt).and_then(|t| self.socks.get_mut(t)) else { return };
                let proxy = if route.requires_socks5() {
                    Some(ProxyHandshake::socks5(route.address()))
                } else if route.requires_tunnel() {
                    Some(ProxyHandshake::connect_tunnel(route.address()))
                } else {
                    None
                };
                match proxy.transpose() {
                    Ok(proxy) => {
                        s.stage = Stage::Handshaking { attempt, route, proxy, buf: BytesMut::new() };
                        let token = self.attempts[&attempt];
                        self.progress(token);
                    }
                    Err(e) => self.fail_attempt(attempt, e),
                }
            }
            PoolAction::CancelAttempt { attempt } => {
                // Dropping the socket closes the loser at once.
                if let Some(token) = self.attempts.remove(&attempt) {
                    self.socks.remove(&token);
                }
            }
            PoolAction::Established { attempt, connection, protocol } => {
                let token = self.attempts.remove(&attempt).expect("established attempt has a socket");
                self.socks.get_mut(&token).unwrap().stage = match protocol {
                    Protocol::Http1 => Stage::Idle(http1::Conn::new(http1::DriverConfig::default())),
                    // The preface and SETTINGS go out with the first write.
                    _ => Stage::H2 {
                        connection,
                        driver: Box::new(http2::Driver::new(http2::DriverConfig::default())),
                        session: http2::Session::new(64 * 1024),
                        streams: BTreeMap::new(),
                    },
                };
                self.conns.insert(connection, token);
                self.progress(token);
            }
            PoolAction::Acquired { call, connection, .. } => self.start_exchange(call, connection),
            PoolAction::AcquireFailed { call, error } => {
                self.calls.get_mut(&call).unwrap().outcome = Some(Err(error.to_string()));
            }
            // No probe interval configured (reuse probes anyway).
            PoolAction::Probe { .. } => {}
            PoolAction::Ping { connection } => {
                let Some(token) = self.conns.get(&connection).copied() else { return };
                if let Some(Sock { stage: Stage::H2 { driver, .. }, .. }) = self.socks.get_mut(&token) {
                    driver.ping();
                }
                self.progress(token);
            }
            PoolAction::Abort { connection, .. } => {
                // Its streams fail with the connection (the socket closes).
                if let Some(token) = self.conns.get(&connection).copied() {
                    if let Some(Sock { stage: Stage::H2 { driver, .. }, .. }) = self.socks.get_mut(&token) {
                        driver.handle_read_error("the pool ended the connection");
                    }
                    self.progress(token);
                }
            }
            PoolAction::Close { connection, .. } => {
                if let Some(token) = self.conns.remove(&connection) {
                    self.socks.remove(&token);
                }
            }
        }
    }

    /// Starts `call`'s exchange on `connection`: the core's driver takes over.
    fn start_exchange(&mut self, call: CallId, connection: ConnectionId) {
        let now = self.now();
        let token = self.conns[&connection];
        let s = self.socks.get_mut(&token).unwrap();
        if let Stage::H2 { driver, streams, .. } = &mut s.stage {
            // A stream of the shared connection: HEADERS now, the body as the
            // server's windows allow (the driver keeps it).
            let c = &self.calls[&call];
            match driver.open(&c.parts, c.body.is_empty()) {
                Ok(stream) => {
                    if !c.body.is_empty() {
                        driver.send_data(stream, c.body.clone(), true);
                    }
                    streams.insert(stream, call);
                    println!("{call}: stream {stream} on {connection}");
                }
                Err(e) => {
                    self.calls.get_mut(&call).unwrap().outcome = Some(Err(format!("{e:?}")));
                    self.pool.exchange_finished(now, call, Reuse::Reusable).unwrap();
                }
            }
            return self.progress(token);
        }
        let Stage::Idle(conn) = std::mem::replace(&mut s.stage, Stage::Moving) else {
            unreachable!("the pool hands out idle connections")
        };
        let c = &self.calls[&call];
        let facts = RequestFacts::new(&c.parts.method, false, true);
        // A pooled connection may have been closed by its server: ask first,
        // so nothing is written to a dead connection (the core retries).
        if conn.needs_probe() {
            if let Err(reason) = conn.check(s.io.peek()) {
                println!("{call}: {connection} was closed while idle ({reason}); the core retries");
                let e = io::Error::new(ErrorKind::ConnectionAborted, "closed while idle");
                self.exchange_failed(
                    call,
                    connection,
                    ExchangeFailure {
                        kind: switchyard_core::pool::ExchangeFailureKind::from_io(&e),
                        progress: switchyard_core::pool::Progress::NothingWritten,
                        request: facts,
                    },
                );
                return;
            }
        }
        let absolute = self.pool.connection(connection).is_some_and(|c| c.route().uses_absolute_form());
        let form = if absolute { TargetForm::Absolute } else { TargetForm::Origin };
        let framing = if c.body.is_empty() {
            http1::RequestBody::None
        } else {
            http1::RequestBody::Length(c.body.len() as u64)
        };
        let request =
            http1::Request::new(&c.parts, form, framing).deadline(Some(now + Duration::from_secs(10)));
        match conn.start(now, request) {
            Ok(driver) => {
                s.stage = Stage::Busy(connection, call, Box::new(driver));
                self.progress(token);
            }
            Err(refused) => {
                s.stage = Stage::Idle(refused.conn);
                self.calls.get_mut(&call).unwrap().outcome = Some(Err(refused.error.to_string()));
                self.pool.exchange_finished(now, call, Reuse::Reusable).unwrap();
            }
        }
    }

    fn exchange_failed(&mut self, call: CallId, connection: ConnectionId, failure: ExchangeFailure) {
        if let Some(token) = self.conns.remove(&connection) {
            self.socks.remove(&token); // the failed connection's socket closes
        }
        match self.pool.exchange_failed(self.now(), call, failure).unwrap() {
            FailureOutcome::Retrying(reason) => println!("{call}: retrying ({reason:?})"),
            FailureOutcome::Failed(e) => {
                self.calls.get_mut(&call).unwrap().outcome = Some(Err(e.to_string()))
            }
        }
    }

    fn fail_attempt(&mut self, attempt: AttemptId, e: ConnectError) {
        if let Some(token) = self.attempts.remove(&attempt) {
            self.socks.remove(&token);
        }
        self.pool.handle_failed(self.now(), attempt, e).unwrap();
    }

    /// Does what the socket allows now, for whatever stage it is in.
    fn progress(&mut self, token: Token) {
        let now = self.now();
        let Some(s) = self.socks.get_mut(&token) else { return };
        match &mut s.stage {
            Stage::Connecting(attempt) => {
                let attempt = *attempt;
                match s.io.tcp.take_error() {
                    Ok(None) if s.io.tcp.peer_addr().is_ok() => {
                        s.stage = Stage::Ready;
                        self.pool.handle_connected(now, attempt).unwrap();
                    }
                    Ok(None) => {}
                    Ok(Some(e)) | Err(e) => self.fail_attempt(attempt, ConnectError::from_io(&e)),
                }
            }
            Stage::Handshaking { .. } => self.handshake(token),
            Stage::Busy(..) => self.exchange(token),
            Stage::H2 { .. } => self.h2(token),
            Stage::Ready | Stage::Idle(_) | Stage::Moving => {}
        }
    }

    /// The route's handshakes, step by step: the core's proxy handshake on the
    /// plain socket, then rustls.
    fn handshake(&mut self, token: Token) {
        let now = self.now();
        let config = Arc::clone(&self.tls);
        let Sock { io: s, stage } = self.socks.get_mut(&token).unwrap();
        let Stage::Handshaking { attempt, route, proxy, buf } = stage else { return };
        let attempt = *attempt;
        let step: Result<bool, ConnectError> = (|| {
            if let Some(hs) = proxy.as_mut() {
                while let Some(out) = hs.poll_transmit() {
                    s.tcp.write_all(&out).map_err(|e| ConnectError::from_io(&e))?;
                    // small: fits at once
                }
                let mut chunk = [0u8; 1024];
                let eof = match s.tcp.read(&mut chunk) {
                    Ok(0) => true,
                    Ok(n) => {
                        buf.extend_from_slice(&chunk[..n]);
                        false
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => false,
                    Err(e) => return Err(ConnectError::from_io(&e)),
                };
                if hs.handle_read(buf, eof)? == Handshake::NeedMore {
                    return Ok(false);
                }
                *proxy = None; // the tunnel is open
            }
            if !route.requires_tls() {
                return Ok(true);
            }
            if s.tls.is_none() {
                let name = rustls::pki_types::ServerName::try_from(route.address().host().to_string())
                    .map_err(|e| ConnectError::Proxy { message: e.to_string() })?;
                let conn = rustls::ClientConnection::new(config, name)
                    .map_err(|e| ConnectError::Proxy { message: e.to_string() })?;
                s.tls = Some(conn);
            }
            let io_err = |e: io::Error| ConnectError::from_io(&e);
            s.flush().map_err(io_err)?;
            let tls = s.tls.as_mut().unwrap();
            if tls.is_handshaking() {
                match tls.read_tls(&mut s.tcp) {
                    Ok(0) => return Err(ConnectError::from_io(&ErrorKind::UnexpectedEof.into())),
                    Ok(_) => {
                        tls.process_new_packets()
                            .map_err(|e| io_err(io::Error::new(ErrorKind::InvalidData, e)))?;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => return Err(io_err(e)),
                }
                s.flush().map_err(io_err)?;
            }
            Ok(!s.tls.as_ref().unwrap().is_handshaking())
        })();
        match step {
            Ok(false) => {}
            Ok(true) => {
                let Stage::Handshaking { route, .. } = std::mem::replace(stage, Stage::Ready) else {
                    unreachable!()
                };
                // rustls verified the name: the certificate covers this host.
                let facts = route.requires_tls().then(|| TlsFacts {
                    dns_names: vec![route.address().host().to_string()],
                    ..TlsFacts::default()
                });
                // What ALPN chose (cleartext: HTTP/1.1 here).
                let alpn =
                    self.socks[&token].io.tls.as_ref().and_then(|t| t.alpn_protocol().map(<[u8]>::to_vec));
                let protocol = if alpn.as_deref() == Some(b"h2") { Protocol::Http2 } else { Protocol::Http1 };
                self.pool.handle_established(now, attempt, Some(protocol), facts).unwrap();
            }
            Err(e) => self.fail_attempt(attempt, e),
        }
    }

    /// Moves bytes for a busy connection's driver and acts on its events.
    fn exchange(&mut self, token: Token) {
        loop {
            let now = self.now();
            let Sock { io, stage } = self.socks.get_mut(&token).unwrap();
            let Stage::Busy(connection, call, driver) = stage else { return };
            let (connection, call) = (*connection, *call);
            let mut moved = false;
            while let Some(event) = driver.poll_event() {
                let c = self.calls.get_mut(&call).unwrap();
                match event {
                    Event::HeadersSent => println!("{call}: request head written"),
                    Event::BodySent { bytes } => println!("{call}: request body written ({bytes} bytes)"),
                    Event::Head(head) => c.status = Some(head.status().as_u16()),
                    Event::Data(data) => c.received.extend_from_slice(&data),
                    Event::Trailers(_) => {}
                    Event::Done(_) | Event::Failed(_) => {
                        let Stage::Busy(_, _, driver) = std::mem::replace(stage, Stage::Moving) else {
                            unreachable!()
                        };
                        return self.end_exchange(token, connection, call, *driver, event);
                    }
                }
            }
            if driver.wants_body() {
                let body = self.calls[&call].body.clone();
                driver.handle_body_chunk(now, &body, true);
                moved = true;
            }
            if let Some(out) = driver.poll_transmit() {
                // A partial write is fine: the driver keeps the rest.
                match io.write(out) {
                    Ok(n) => {
                        driver.handle_written(now, n);
                        moved = n > 0;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => {
                        driver.handle_write_error(now, &e);
                        moved = true;
                    }
                }
            }
            if driver.wants_read() {
                moved = true;
                match io.read() {
                    Ok(Got::Bytes(b)) => driver.handle_read(now, &b),
                    Ok(Got::Eof) => driver.handle_eof(now),
                    Ok(Got::Nothing) => moved = false,
                    Err(e) => driver.handle_read_error(now, &e),
                }
            }
            if driver.poll_timeout().is_some_and(|t| t <= now) {
                driver.handle_timeout(now);
                moved = true;
            }
            if !moved && !driver.is_finished() {
                return;
            }
        }
    }

    /// Moves bytes for an HTTP/2 connection's driver and acts on its events:
    /// what the pool must hear (SETTINGS, GOAWAY, PONG, the end), and each
    /// stream's head, body and end for its call.
    fn h2(&mut self, token: Token) {
        loop {
            let now = self.now();
            let Some(Sock { io, stage: Stage::H2 { connection, driver, session, streams } }) =
                self.socks.get_mut(&token)
            else {
                return;
            };
            let connection = *connection;
            let mut moved = false;
            if let Some(out) = driver.poll_transmit() {
                match io.write(out) {
                    Ok(n) => {
                        driver.handle_written(n);
                        moved = n > 0;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => driver.handle_read_error(&e.to_string()),
                }
            }
            match io.read() {
                Ok(Got::Bytes(b)) => {
                    driver.handle_read(&b);
                    moved = true;
                }
                Ok(Got::Eof) => driver.handle_eof(),
                Ok(Got::Nothing) => {}
                Err(e) => driver.handle_read_error(&e.to_string()),
            }
            let mut closed = None;
            while let Some(event) = driver.poll_event() {
                moved = true;
                let call_of = |s: u32| streams.get(&s).copied();
                match event {
                    http2::Event::Settings { max_concurrent_streams } => {
                        let _ = session.heard(http2::Report::Settings { max_concurrent_streams });
                        self.pool.settings(now, connection, max_concurrent_streams).unwrap();
                    }
                    http2::Event::GoAway(g) => {
                        let _ = session.heard(http2::Report::GoAway(g));
                        self.pool.goaway(now, connection, g).unwrap();
                    }
                    http2::Event::Pong => {
                        let _ = self.pool.pong(now, connection);
                    }
                    http2::Event::Head { stream, response, .. } => {
                        if let Some(call) = call_of(stream) {
                            self.calls.get_mut(&call).unwrap().status = Some(response.status().as_u16());
                        }
                    }
                    http2::Event::Data { stream, data } => {
                        driver.release(stream, data.len()); // consumed at once
                        if let Some(call) = call_of(stream) {
                            self.calls.get_mut(&call).unwrap().received.extend_from_slice(&data);
                        }
                    }
                    http2::Event::Trailers { .. } => {}
                    http2::Event::End { stream } => {
                        if let Some(call) = streams.remove(&stream) {
                            self.calls.get_mut(&call).unwrap().outcome = Some(Ok(()));
                            self.pool.exchange_finished(now, call, Reuse::Reusable).unwrap();
                        }
                    }
                    http2::Event::Failed { stream, error } => {
                        if let Some(call) = streams.remove(&stream) {
                            let facts = RequestFacts::new(&self.calls[&call].parts.method, false, true);
                            let progress = switchyard_core::pool::Progress::RequestWritten;
                            let failure = session.stream_failed(Some(stream), &error, progress, facts);
                            println!("{call}: stream {stream} failed ({error})");
                            match self.pool.exchange_failed(now, call, failure).unwrap() {
                                FailureOutcome::Retrying(reason) => println!("{call}: retrying ({reason:?})"),
                                FailureOutcome::Failed(e) => {
                                    self.calls.get_mut(&call).unwrap().outcome = Some(Err(e.to_string()));
                                }
                            }
                        }
                    }
                    http2::Event::Closed(end) => closed = Some(session.ended(&end)),
                }
            }
            if let Some(reason) = closed {
                // Already closed by the pool: nothing to report.
                let _ = self.pool.connection_closed(now, connection, reason);
                self.conns.remove(&connection);
                self.socks.remove(&token);
                return;
            }
            if !moved {
                return;
            }
        }
    }

    /// The driver ended the exchange: report it to the core (which may retry),
    /// and keep the connection idle or close it as the driver decided.
    fn end_exchange(
        &mut self,
        token: Token,
        connection: ConnectionId,
        call: CallId,
        driver: http1::Driver,
        event: Event,
    ) {
        let now = self.now();
        let facts = RequestFacts::new(&self.calls[&call].parts.method, false, true);
        match event {
            Event::Failed(Failure::Exchange { kind, progress }) => {
                println!("{call}: exchange failed ({kind}, {progress:?})");
                self.exchange_failed(call, connection, ExchangeFailure { kind, progress, request: facts });
            }
            Event::Failed(failure) => {
                self.calls.get_mut(&call).unwrap().outcome = Some(Err(format!("{failure:?}")));
                let reuse = driver.finish().err().map_or(Reuse::Reusable, Reuse::Retire);
                self.pool.exchange_finished(now, call, reuse).unwrap();
            }
            _ => {
                self.calls.get_mut(&call).unwrap().outcome = Some(Ok(()));
                let reuse = match driver.finish() {
                    Ok(conn) => {
                        self.socks.get_mut(&token).unwrap().stage = Stage::Idle(conn);
                        Reuse::Reusable
                    }
                    Err(reason) => Reuse::Retire(reason),
                };
                self.pool.exchange_finished(now, call, reuse).unwrap();
            }
        }
    }

    /// The earliest deadline: the pool's or a driver's.
    fn next_deadline(&self) -> Option<Instant> {
        let drivers = self.socks.values().filter_map(|s| match &s.stage {
            Stage::Busy(_, _, d) => d.poll_timeout(),
            _ => None,
        });
        drivers.chain(self.pool.poll_timeout()).min()
    }
}

fn main() {
    let mut urls: Vec<(String, Option<u16>, Option<&'static str>)> =
        std::env::args().skip(1).map(|u| (u, None, None)).collect();
    let mut roots = rustls::RootCertStore::empty();
    if urls.is_empty() {
        let plain = serve_plain();
        let (tls, ca) = serve_tls(&[b"http/1.1"]);
        let (h2, h2_ca) = serve_tls(&[b"h2"]);
        let proxy = serve_proxy();
        roots.add(ca).unwrap();
        roots.add(h2_ca).unwrap();
        urls = vec![
            (format!("http://{plain}/a"), None, None),
            (format!("http://{plain}/b"), None, None),
            (format!("http://{plain}/c"), None, None),
            (format!("http://{plain}/d"), None, None),
            (format!("https://localhost:{}/secure", tls.port()), Some(proxy.port()), None),
            (
                format!("https://localhost:{}/upload", tls.port()),
                Some(proxy.port()),
                Some("a body, sent once"),
            ),
            (format!("https://localhost:{}/h2/one", h2.port()), None, None),
            (format!("https://localhost:{}/h2/two", h2.port()), None, None),
            (format!("https://localhost:{}/h2/three", h2.port()), None, Some("over HTTP/2")),
        ];
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let mut lp = Loop {
        // One connection per Address: the calls share it in turn, so reuse,
        // a server's close and the core's retry all show.
        pool: Pool::new(PoolConfig { max_connections_per_address: Some(1), ..PoolConfig::default() }),
        poll: Poll::new().expect("poll"),
        origin: std::time::Instant::now(),
        tls: Arc::new(tls),
        socks: HashMap::new(),
        attempts: HashMap::new(),
        conns: HashMap::new(),
        calls: BTreeMap::new(),
        next_token: 0,
    };
    // Every call starts at once: the pool decides which share a connection.
    for (url, proxy, body) in &urls {
        let uri: http::Uri = url.parse().expect("a valid URL");
        // https may speak HTTP/2 (ALPN decides); http is HTTP/1.1 here.
        let protocols: &[Protocol] = if uri.scheme_str() == Some("https") {
            &[Protocol::Http2, Protocol::Http1]
        } else {
            &[Protocol::Http1]
        };
        let address = Address::from_uri(&uri)
            .map(|b| b.protocols(protocols.iter().copied()))
            .and_then(|b| b.build())
            .expect("an http(s):// URL");
        let proxies: Vec<Proxy> =
            proxy.iter().map(|p| Proxy::http("127.0.0.1", u32::from(*p)).unwrap()).collect();
        let method = if body.is_some() { http::Method::POST } else { http::Method::GET };
        let (parts, ()) = http::Request::builder().method(method).uri(uri).body(()).unwrap().into_parts();
        let options = AcquireOptions { proxies: proxies.clone(), ..AcquireOptions::default() };
        let call = lp.pool.acquire(lp.now(), address, options);
        let body = Bytes::from_static(body.unwrap_or("").as_bytes());
        lp.calls
            .insert(call, Call { parts, body, proxies, status: None, received: Vec::new(), outcome: None });
    }
    let mut events = Events::with_capacity(64);
    while lp.calls.values().any(|c| c.outcome.is_none()) {
        lp.drain();
        // Sleep until a socket is ready or the next deadline.
        let timeout = lp.next_deadline().map(|t| t.saturating_duration_since(lp.now()));
        lp.poll.poll(&mut events, timeout.or(Some(Duration::from_secs(5)))).expect("poll");
        let ready: Vec<Token> = events.iter().map(|e| e.token()).collect();
        for token in ready {
            lp.progress(token);
        }
        // Timers: the pool's (stagger, connect timeouts, keep-alive) and the
        // drivers' (read, write, 100-continue, drain). Early calls are harmless.
        let now = lp.now();
        lp.pool.handle_timeout(now);
        let busy: Vec<Token> =
            lp.socks.iter().filter(|(_, s)| matches!(s.stage, Stage::Busy(..))).map(|(t, _)| *t).collect();
        for token in busy {
            lp.progress(token);
        }
    }
    lp.drain();
    let mut failures = 0;
    for (call, c) in &lp.calls {
        let via = if c.proxies.is_empty() { "" } else { " (through the proxy)" };
        match &c.outcome {
            Some(Ok(())) => {
                let body = String::from_utf8_lossy(&c.received);
                println!(
                    "{call}: {} {}{via} -> {} {body:?}",
                    c.parts.method,
                    c.parts.uri,
                    c.status.unwrap_or(0)
                );
            }
            other => {
                failures += 1;
                let why = other.clone().and_then(Result::err).unwrap_or_default();
                println!("{call}: {} {}{via} failed: {why}", c.parts.method, c.parts.uri);
            }
        }
    }
    let stats = lp.pool.stats();
    println!("connections created {}, reused {}, closed {:?}", stats.created, stats.reused, stats.closed);
    if failures > 0 {
        std::process::exit(1);
    }
}

/// Answers one request head on `stream` with its path (and the body's length
/// when there is one).
fn answer(stream: &mut impl ReadWrite) -> io::Result<bool> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte)? == 0 {
            return Ok(false);
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let path = text.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let length: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body)?;
    let reply = if length > 0 { format!("{path} got {length} bytes") } else { path };
    stream
        .write_all(format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{reply}", reply.len()).as_bytes())?;
    stream.flush()?;
    Ok(true)
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// A keep-alive HTTP/1.1 server that closes each connection after its second
/// answer (so a pooled connection goes stale, and the core retries elsewhere).
fn serve_plain() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                for _ in 0..2 {
                    if !answer(&mut stream).unwrap_or(false) {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// An HTTPS server for `localhost` speaking what `alpn` names (HTTP/1.1, or
/// HTTP/2: [`serve_h2`]), with a CA made now (returned, to trust).
fn serve_tls(alpn: &[&[u8]]) -> (std::net::SocketAddr, rustls::pki_types::CertificateDer<'static>) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf =
        CertificateParams::new(vec!["localhost".to_owned()]).unwrap().signed_by(&leaf_key, &issuer).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone(), ca_cert.der().clone()], key)
        .unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let h2 = alpn == [b"h2"];
    let config = Arc::new(config);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let config = Arc::clone(&config);
            std::thread::spawn(move || {
                let conn = rustls::ServerConnection::new(config).unwrap();
                let mut stream = rustls::StreamOwned::new(conn, tcp);
                if h2 {
                    let _ = serve_h2(&mut stream);
                } else {
                    while answer(&mut stream).unwrap_or(false) {}
                }
            });
        }
    });
    (addr, ca_cert.der().clone())
}

/// A minimal HTTP/2 server on one connection: its SETTINGS, then for each
/// request (a HEADERS or DATA frame with END_STREAM) a 200 naming the stream
/// and what its body held. Enough for the example; no flow control of its
/// own beyond acknowledging SETTINGS.
fn serve_h2(stream: &mut impl ReadWrite) -> io::Result<()> {
    use switchyard_core::http2::hpack::Encoder;
    let frame = |kind: u8, flags: u8, id: u32, payload: &[u8]| {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend([kind, flags]);
        f.extend(id.to_be_bytes());
        f.extend_from_slice(payload);
        f
    };
    let mut preface = [0u8; 24];
    stream.read_exact(&mut preface)?;
    // SETTINGS: MAX_CONCURRENT_STREAMS (3) = 16.
    stream.write_all(&frame(4, 0, 0, &[0, 3, 0, 0, 0, 16]))?;
    stream.flush()?;
    let mut bodies: BTreeMap<u32, usize> = BTreeMap::new();
    loop {
        let mut head = [0u8; 9];
        stream.read_exact(&mut head)?;
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        stream.read_exact(&mut payload)?;
        match kind {
            0 => *bodies.entry(id).or_default() += len,
            4 if flags & 1 == 0 => stream.write_all(&frame(4, 1, 0, &[]))?, // SETTINGS ACK
            6 if flags & 1 == 0 => stream.write_all(&frame(6, 1, 0, &payload))?, // PONG
            _ => {}
        }
        if matches!(kind, 0 | 1) && flags & 1 != 0 {
            let got = bodies.remove(&id).unwrap_or(0);
            let body = if got > 0 { format!("stream {id} got {got} bytes") } else { format!("stream {id}") };
            let mut block = BytesMut::new();
            Encoder.field(&mut block, ":status", b"200");
            Encoder.field(&mut block, "content-length", body.len().to_string().as_bytes());
            stream.write_all(&frame(1, 4, id, &block))?;
            stream.write_all(&frame(0, 1, id, body.as_bytes()))?;
        }
        stream.flush()?;
    }
}

/// An HTTP `CONNECT` proxy: opens the tunnel, then copies bytes both ways.
fn serve_proxy() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut client in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if client.read(&mut byte).unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let text = String::from_utf8_lossy(&head).into_owned();
                let target = text.split_whitespace().nth(1).unwrap_or_default().to_owned();
                let Ok(mut origin) = std::net::TcpStream::connect(target.replace("localhost", "127.0.0.1"))
                else {
                    let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n");
                    return;
                };
                let _ = client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
                let (mut c2, mut o2) = (client.try_clone().unwrap(), origin.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = io::copy(&mut c2, &mut o2);
                    let _ = o2.shutdown(std::net::Shutdown::Write);
                });
                let _ = io::copy(&mut origin, &mut client);
                let _ = client.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    addr
}
