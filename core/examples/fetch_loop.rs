//! Driving switchyard-core from a hand-written event loop (mio for readiness).
//!
//! It fetches URLs over plain TCP: the core plans routes, races connects and
//! pools connections; this loop only performs what the core asks and reports
//! back. The duties, in order, every turn:
//!
//! 1. feed an input with `now` (a DNS answer, a connect result, bytes, a timer);
//! 2. drain `poll_action()` and perform each action;
//! 3. sleep until a socket is ready or `poll_timeout()`, whichever is first;
//! 4. call `handle_timeout(now)` and go round again.
//!
//! Run: `cargo run -p switchyard-core --example fetch_loop [http://host:port/path ...]`.
//! Without arguments it starts a loopback server and fetches three URLs from it:
//! the first call connects, the next two reuse the pooled connection.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::ToSocketAddrs;
use std::time::Duration;

use bytes::BytesMut;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use switchyard_core::http1::{Exchange, Frame, Limits, RequestBody, TargetForm};
use switchyard_core::{
    AcquireOptions, Address, AttemptId, CallId, ConnectError, ConnectionId, DnsError, Instant, Pool,
    PoolAction, PoolConfig, Source,
};

/// A socket the loop watches: a connect attempt, or an established connection.
enum Sock {
    Attempt(AttemptId, TcpStream),
    Conn(ConnectionId, TcpStream),
}

/// The exchange in progress on a connection.
struct Running {
    call: CallId,
    exchange: Exchange,
    buf: BytesMut,
    body: Vec<u8>,
}

fn main() {
    let mut urls: Vec<String> = std::env::args().skip(1).collect();
    if urls.is_empty() {
        let addr = serve_locally();
        urls = ["/a", "/b", "/c"].iter().map(|p| format!("http://{addr}{p}")).collect();
    }
    let origin = std::time::Instant::now();
    // The core's clock: time since this loop started.
    let now = || Instant::ZERO + origin.elapsed();
    let mut pool = Pool::new(PoolConfig::default());
    let mut poll = Poll::new().expect("poll");
    let mut events = Events::with_capacity(64);
    let mut socks: HashMap<Token, Sock> = HashMap::new();
    let mut by_conn: HashMap<ConnectionId, Token> = HashMap::new();
    let mut running: HashMap<ConnectionId, Running> = HashMap::new();
    let mut next_token = 0usize;
    let mut failures = 0;

    for url in &urls {
        let uri: http::Uri = url.parse().expect("a valid URL");
        let address = Address::from_uri(&uri).and_then(|b| b.build()).expect("an http:// URL");
        let call = pool.acquire(now(), address, AcquireOptions::default());
        let mut done = false;
        while !done {
            // (2) Drain and perform the core's actions.
            while let Some(action) = pool.poll_action() {
                match action {
                    PoolAction::Resolve { query, host, port, .. } => {
                        // Blocking DNS keeps the example short; a real loop runs it elsewhere.
                        let answer = (host.to_string().as_str(), port)
                            .to_socket_addrs()
                            .map(|addrs| addrs.map(|a| a.ip()).collect())
                            .map_err(|e| DnsError::from_io(&e));
                        pool.handle_dns(now(), query, answer).unwrap();
                    }
                    PoolAction::Connect { attempt, route } => {
                        // A non-blocking connect; writability will say how it went.
                        match TcpStream::connect(route.socket_addr()) {
                            Ok(mut s) => {
                                let token = Token(next_token);
                                next_token += 1;
                                poll.registry().register(&mut s, token, Interest::WRITABLE).unwrap();
                                socks.insert(token, Sock::Attempt(attempt, s));
                            }
                            Err(e) => pool.handle_failed(now(), attempt, ConnectError::from_io(&e)).unwrap(),
                        }
                    }
                    PoolAction::CancelAttempt { attempt } => {
                        // Dropping the socket closes the loser at once.
                        socks.retain(|_, s| !matches!(s, Sock::Attempt(a, _) if *a == attempt));
                    }
                    PoolAction::Handshake { attempt, .. } => {
                        let e = ConnectError::Proxy { message: "this example speaks plain TCP only".into() };
                        pool.handle_failed(now(), attempt, e).unwrap();
                    }
                    PoolAction::Established { attempt, connection, .. } => {
                        let token = *socks
                            .iter()
                            .find(|(_, s)| matches!(s, Sock::Attempt(a, _) if *a == attempt))
                            .unwrap()
                            .0;
                        let Some(Sock::Attempt(_, mut s)) = socks.remove(&token) else { unreachable!() };
                        poll.registry().reregister(&mut s, token, Interest::READABLE).unwrap();
                        socks.insert(token, Sock::Conn(connection, s));
                        by_conn.insert(connection, token);
                    }
                    PoolAction::Acquired { call: acquired, connection, source } => {
                        assert_eq!(acquired, call, "one call at a time in this example");
                        println!(
                            "{call}: {connection} ({})",
                            if source == Source::New { "new" } else { "reused" }
                        );
                        let (parts, ()) = http::Request::get(url.as_str()).body(()).unwrap().into_parts();
                        let (exchange, head) =
                            Exchange::new(&parts, TargetForm::Origin, RequestBody::None, Limits::default())
                                .unwrap();
                        let Some(Sock::Conn(_, s)) = socks.get_mut(&by_conn[&connection]) else {
                            unreachable!()
                        };
                        // A request head this small fits the socket buffer; a real loop
                        // would keep unwritten bytes and wait for writability.
                        s.write_all(&head).expect("write the request");
                        running.insert(
                            connection,
                            Running { call, exchange, buf: BytesMut::new(), body: Vec::new() },
                        );
                    }
                    PoolAction::AcquireFailed { call: failed, error } => {
                        eprintln!("{failed}: {error}");
                        failures += 1;
                        done = true;
                    }
                    PoolAction::Probe { .. } => {} // no probe interval configured here
                    PoolAction::Close { connection, reason } => {
                        println!("{connection} closed: {reason}");
                        if let Some(token) = by_conn.remove(&connection) {
                            socks.remove(&token);
                        }
                    }
                }
            }
            if done {
                break;
            }
            // (3) Sleep until a socket is ready or the core's next deadline.
            let timeout = pool.poll_timeout().map(|t| t - now());
            poll.poll(&mut events, timeout.or(Some(Duration::from_secs(5)))).expect("poll");
            // (1) Feed what happened back to the core, with `now`.
            for event in events.iter() {
                match socks.get_mut(&event.token()) {
                    Some(Sock::Attempt(attempt, s)) => {
                        let attempt = *attempt;
                        match s.take_error() {
                            Ok(None) if s.peer_addr().is_ok() => {
                                pool.handle_connected(now(), attempt).unwrap()
                            }
                            Ok(None) => {}
                            Ok(Some(e)) | Err(e) => {
                                socks.remove(&event.token());
                                pool.handle_failed(now(), attempt, ConnectError::from_io(&e)).unwrap();
                            }
                        }
                    }
                    Some(Sock::Conn(connection, s)) => {
                        let connection = *connection;
                        let Some(r) = running.get_mut(&connection) else { continue };
                        let mut chunk = [0u8; 16 * 1024];
                        let eof = loop {
                            match s.read(&mut chunk) {
                                Ok(0) => break true,
                                Ok(n) => r.buf.extend_from_slice(&chunk[..n]),
                                Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
                                Err(_) => break true,
                            }
                        };
                        // The codec turns bytes into frames; any split gives the same result.
                        loop {
                            match r.exchange.decode(&mut r.buf, eof) {
                                Ok(Some(Frame::Head(h))) => println!("{}: {}", r.call, h.status()),
                                Ok(Some(Frame::Data(d))) => r.body.extend_from_slice(&d),
                                Ok(Some(Frame::End)) => {
                                    println!("{}: {:?}", r.call, String::from_utf8_lossy(&r.body));
                                    let r = running.remove(&connection).unwrap();
                                    pool.exchange_finished(now(), r.call, r.exchange.reuse()).unwrap();
                                    done = true;
                                    break;
                                }
                                Ok(Some(_)) => {}
                                Ok(None) => break,
                                Err(e) => {
                                    eprintln!("{}: {e}", r.call);
                                    let r = running.remove(&connection).unwrap();
                                    pool.exchange_finished(now(), r.call, r.exchange.reuse()).unwrap();
                                    failures += 1;
                                    done = true;
                                    break;
                                }
                            }
                        }
                    }
                    None => {}
                }
            }
            // (4) Timers: stagger, connect timeouts, keep-alive. Early calls are harmless.
            pool.handle_timeout(now());
        }
    }
    let stats = pool.stats();
    println!("connections created {}, reused {}", stats.created, stats.reused);
    if failures > 0 {
        std::process::exit(1);
    }
}

/// A tiny keep-alive HTTP/1.1 server on loopback that answers every request
/// with its path.
fn serve_locally() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while stream.read(&mut byte).map(|n| n == 1).unwrap_or(false) {
                    head.push(byte[0]);
                    if head.ends_with(b"\r\n\r\n") {
                        let text = String::from_utf8_lossy(&head).into_owned();
                        let path = text.split_whitespace().nth(1).unwrap_or("/").to_owned();
                        let reply =
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{path}", path.len());
                        if stream.write_all(reply.as_bytes()).is_err() {
                            return;
                        }
                        head.clear();
                    }
                }
            });
        }
    });
    addr
}
