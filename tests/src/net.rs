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

/// A raw HTTP/1.1 server: each connection reads one request head, writes the
/// next scripted response, and closes. For responses real servers won't make
/// (close-delimited bodies, malformed heads).
pub struct RawServer {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for RawServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawServer").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl RawServer {
    /// Serves `responses` in order, one per connection.
    #[must_use]
    pub fn start(responses: Vec<Vec<u8>>) -> RawServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut script = responses.into_iter();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                        let mut head = Vec::new();
                        let mut byte = [0u8; 1];
                        while !head.ends_with(b"\r\n\r\n")
                            && s.read(&mut byte).map(|n| n == 1).unwrap_or(false)
                        {
                            head.push(byte[0]);
                        }
                        if let Some(r) = script.next() {
                            let _ = s.write_all(&r);
                        }
                        let _ = s.shutdown(std::net::Shutdown::Both);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        RawServer { addr, stop, thread: Some(thread) }
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
