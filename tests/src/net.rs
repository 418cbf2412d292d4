//! Loopback tricks: a route that never answers, a refused port, and a raw
//! scripted server for responses a real server will not produce.

use std::io::{Read, Write};
use std::net::{Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use socket2::{Domain, Socket, Type};

/// `[::1]:port` whose accept backlog is full: connects to it hang (the SYN is
/// dropped), while `127.0.0.1:port` serves. Loopback only.
pub struct HangingV6 {
    _listener: Socket,
    _fillers: Vec<TcpStream>,
}

impl std::fmt::Debug for HangingV6 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HangingV6").finish_non_exhaustive()
    }
}

/// A v4 listener on `127.0.0.1:P` plus a hanging `[::1]:P`. `None` when this
/// machine has no IPv6 loopback or the backlog cannot be filled.
#[must_use]
pub fn v4_listener_with_hanging_v6() -> Option<(TcpListener, HangingV6)> {
    for _ in 0..10 {
        let v4 = TcpListener::bind("127.0.0.1:0").ok()?;
        let port = v4.local_addr().ok()?.port();
        let v6 = Socket::new(Domain::IPV6, Type::STREAM, None).ok()?;
        v6.set_only_v6(true).ok()?;
        let addr = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
        if v6.bind(&addr.into()).is_err() {
            continue; // the v6 port is taken: try another
        }
        v6.listen(0).ok()?;
        // Fill the backlog until a connect no longer completes.
        let mut fillers = Vec::new();
        for _ in 0..16 {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                Ok(s) => fillers.push(s),
                Err(_) => return Some((v4, HangingV6 { _listener: v6, _fillers: fillers })),
            }
        }
    }
    None
}

/// A loopback port with nothing listening: connects are refused.
#[must_use]
pub fn refused_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    drop(l);
    port
}

/// What a scripted connection does with each request it reads.
#[derive(Clone, Debug)]
pub enum Step {
    /// Write these bytes (a whole response), keep the connection.
    Respond(Vec<u8>),
    /// Write these bytes, then close.
    RespondAndClose(Vec<u8>),
    /// Close without answering (a stale keep-alive connection).
    Close,
}

/// A raw HTTP/1.1 server for responses real servers won't make
/// (close-delimited bodies, stale keep-alive connections). Each accepted
/// connection follows the next script: for every request head it reads, one
/// [`Step`]. When a script runs out, the connection closes.
pub struct RawServer {
    /// Where it listens.
    pub addr: SocketAddr,
    requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for RawServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawServer").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl RawServer {
    /// One response per connection, then close.
    #[must_use]
    pub fn start(responses: Vec<Vec<u8>>) -> RawServer {
        RawServer::scripted(responses.into_iter().map(|r| vec![Step::RespondAndClose(r)]).collect())
    }

    /// One script per connection, in accept order.
    #[must_use]
    pub fn scripted(scripts: Vec<Vec<Step>>) -> RawServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stop);
        let requests = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = std::sync::Arc::clone(&requests);
        let thread = std::thread::spawn(move || {
            let mut scripts = scripts.into_iter();
            let mut workers = Vec::new();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => {
                        let script = scripts.next().unwrap_or_default();
                        let counter = std::sync::Arc::clone(&counter);
                        workers.push(std::thread::spawn(move || run_script(s, script, &counter)));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            for w in workers {
                let _ = w.join();
            }
        });
        RawServer { addr, requests, stop, thread: Some(thread) }
    }

    /// Request heads read so far, over every connection.
    #[must_use]
    pub fn requests(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::SeqCst)
    }
}

fn read_head(s: &mut TcpStream) -> bool {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return false,
        }
    }
    true
}

fn run_script(mut s: TcpStream, script: Vec<Step>, requests: &std::sync::atomic::AtomicUsize) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    for step in script {
        if !read_head(&mut s) {
            return;
        }
        requests.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        match step {
            Step::Respond(r) => {
                if s.write_all(&r).is_err() {
                    return;
                }
            }
            Step::RespondAndClose(r) => {
                let _ = s.write_all(&r);
                break;
            }
            Step::Close => break,
        }
    }
    let _ = s.shutdown(std::net::Shutdown::Both);
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
